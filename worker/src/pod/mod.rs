//! Pod drivers: how the worker reaches the hosts of its pod. One trait; the `gcloud` driver
//! drives a Cloud TPU VM through the gcloud CLI, the `local` driver simulates a pod with
//! local process groups.

pub mod gcloud;
pub mod local;
pub mod state;

use std::collections::BTreeMap;
use std::path::PathBuf;

use async_trait::async_trait;
use podq_api::Preflight;

/// What the driver sees of the pod right now.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct PodStatus {
    /// Whose words `state` and `health` are (see `state`).
    pub api: PodApi,
    /// Cloud TPU: `READY`, `PREEMPTED`, `TERMINATED`, ... (node states). Compute Engine: the
    /// slice's instances summed up, `RUNNING`, `PENDING`, `REPAIRING`, `TERMINATED`, ...
    pub state: String,
    /// Cloud TPU: `HEALTHY`, `UNHEALTHY_MAINTENANCE`, ... Compute Engine: the accelerator
    /// topology's state, `ACTIVE`, `ACTIVATING`, `REACTIVATING`, `INCOMPLETE`, ...
    pub health: String,
    /// A maintenance event the pod announced, pending or under way.
    pub maintenance: Option<Maintenance>,
    /// When the pod's capacity ends by itself, known in advance: a flex-start slice's
    /// hosts are deleted at the end of their max run duration.
    pub capacity_ends: Option<chrono::DateTime<chrono::Utc>>,
}

/// The API that owns a pod, and so the vocabulary of its status.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PodApi {
    /// The Cloud TPU API's node states (the local driver speaks them too).
    #[default]
    Tpu,
    /// A Compute Engine managed instance group of TPU VMs.
    Compute,
}

/// Cloud TPU's `upcomingMaintenance` of a node
/// (https://cloud.google.com/tpu/docs/view-maintenance-notifications).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Maintenance {
    /// `SCHEDULED` or `UNSCHEDULED`.
    pub kind: String,
    /// `PENDING` or `ONGOING`.
    pub status: String,
    pub window_start: Option<chrono::DateTime<chrono::Utc>>,
    pub window_end: Option<chrono::DateTime<chrono::Utc>>,
}

/// A signal a stop delivers to the trainers on the hosts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopSignal {
    /// JAX's preemption notice: save and exit.
    Term,
    /// What is left after the grace period.
    Kill,
}

/// One host's launch: the command and the environment of the trainer contract.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize, PartialEq)]
pub struct HostLaunch {
    pub host: u32,
    pub command: String,
    pub env: BTreeMap<String, String>,
}

/// The resolved config every host trains, as written to `config_dir(host)/file_name`.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize, PartialEq)]
pub struct StagedConfig {
    pub file_name: String,
    pub contents: Vec<u8>,
    pub sha256: String,
}

/// What every host needs to start the lease's trainer and report to the worker.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize, PartialEq)]
pub struct AgentStart {
    /// Written to every host and checked there before anything starts.
    pub config: StagedConfig,
    pub lease: String,
    /// The lease's secret: agents present it on every call to the worker.
    pub secret: String,
    /// Where the agents reach the worker.
    pub worker_url: String,
    pub launches: Vec<HostLaunch>,
}

#[async_trait]
pub trait PodDriver: Send + Sync {
    fn name(&self) -> &str;
    fn accelerator(&self) -> &str;
    fn hosts(&self) -> u32;

    async fn status(&self) -> anyhow::Result<PodStatus>;

    /// The pod's state when a host's trainer ended on its own: a driver whose API can lag
    /// behind a lost node (Cloud TPU says READY for a while after its hosts vanished)
    /// looks again before the trainer is blamed.
    async fn confirm_status(&self) -> anyhow::Result<PodStatus> {
        self.status().await
    }

    /// Checks every host can run a job (docs/architecture.md §3.6).
    async fn preflight(&self) -> Preflight;

    /// Where the resolved config is written on each host.
    fn config_dir(&self, host: u32) -> PathBuf;

    /// Stops leftovers of earlier attempts on every host (trainer processes, the libtpu lock
    /// file) so a launch cannot fail on them.
    async fn clean_hosts(&self) -> anyhow::Result<Vec<String>>;

    /// The address the JAX coordinator (host 0) listens on.
    async fn coordinator_address(&self) -> anyhow::Result<String>;

    /// Writes the config on every host and checks its sha256 there (a host that holds
    /// other bytes fails the launch: hosts would train different configs), then starts
    /// `podq agent` for the lease on every host, detached from the call that starts it;
    /// the agent starts the trainer. Starting a lease's agents again is harmless: an agent
    /// that finds its lease already owned on the host leaves at once.
    async fn start_agents(&self, start: &AgentStart) -> anyhow::Result<()>;

    /// Brings a pod that lost its capacity back to READY, saying what it waits for.
    async fn recover(&self, progress: &(dyn Fn(String) + Send + Sync)) -> anyhow::Result<()>;

    /// The last resort when a host's agent does not answer: delivers `signal` to the
    /// lease's trainer on `hosts` by the driver's own means (ssh on a TPU VM). Answers
    /// whether it could try.
    async fn signal_hosts(&self, lease: &str, hosts: &[u32], signal: StopSignal) -> bool;
}
