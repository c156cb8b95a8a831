//! The `gcloud:` section of the worker's config file, and its durations checked once so
//! a bad value stops the worker at start rather than in the middle of a recovery.

use std::path::PathBuf;
use std::str::FromStr;
use std::time::Duration;

use anyhow::Context;
use serde::Deserialize;

/// How the pod's capacity is bought, which decides how it comes back after a preemption.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum Capacity {
    /// A preemptible node: deleted and created again with its captured spec (a single-host
    /// node is first given a `tpu-vm start`).
    #[default]
    Preemptible,
    /// A spot node: cannot be restarted; delete and create again with the same spec.
    Spot,
    /// A node owned by a queued resource: delete and create the queued resource again when
    /// it is `SUSPENDED` or `FAILED`, then wait for it to be `ACTIVE`.
    Queued,
    /// On-demand or reserved capacity: a single-host node is started if stopped; a broken
    /// or multi-host one is recreated.
    OnDemand,
}

impl FromStr for Capacity {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.replace('-', "_").as_str() {
            "preemptible" => Ok(Capacity::Preemptible),
            "spot" => Ok(Capacity::Spot),
            "queued" => Ok(Capacity::Queued),
            "on_demand" | "reserved" => Ok(Capacity::OnDemand),
            _ => Err(format!(
                "`{s}` is not a capacity kind (preemptible, spot, queued, on-demand)"
            )),
        }
    }
}

/// Overrides of the spec a node or queued resource is created with. Unset fields come
/// from the spec captured from the node (`spec.rs`, kept in `state_dir`), so a recreated
/// node is the node that was lost.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct CreateSettings {
    /// e.g. `v4-64`.
    pub accelerator_type: Option<String>,
    /// e.g. `tpu-ubuntu2204-base`.
    pub runtime_version: Option<String>,
    /// Ask for spot capacity (default: what the node had).
    pub spot: Option<bool>,
    /// Appended to every create call (`--service-account=...`, `--metadata=...`).
    pub extra_args: Vec<String>,
}

/// Which Google Cloud API owns the pod.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum Api {
    /// The Cloud TPU API: a TPU VM node (`gcloud compute tpus tpu-vm`), or one owned by a
    /// queued resource. The only way to a v4 such as stable-1, or a v5e.
    #[default]
    Tpu,
    /// Compute Engine: a v5p, v6e or TPU7x slice as a managed instance group, which podq
    /// creates from `compute:` (see `compute`).
    Compute,
}

/// The `gcloud:` section of the worker's config file.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct GcloudSettings {
    /// The gcloud program.
    pub binary: String,
    /// The API that owns the pod (`tpu` or `compute`).
    pub api: Api,
    /// The Compute Engine slice (`api: compute`); `capacity`, `queued_resource` and
    /// `create` are the TPU API's and do not apply to it.
    pub compute: super::compute::ComputeSettings,
    pub zone: String,
    /// The project (default: gcloud's configured `core/project`).
    pub project: Option<String>,
    pub capacity: Capacity,
    /// The queued resource that owns the node (`capacity: queued`); default `<pod>-qr`.
    pub queued_resource: Option<String>,
    /// The port of the JAX coordinator on host 0.
    pub coordinator_port: u16,
    /// Where the resolved config is written on every host (absolute, or `~/...`).
    pub config_dir: String,
    /// The trainer's code checkout on every host; preflight checks its commit there.
    pub code_dir: String,
    /// Run on every host after a recovery (and at start with `setup_on_start`) to
    /// re-provision it: check out the code at a pinned commit, install requirements, fetch
    /// the dataset. Must be safe to run again.
    pub setup_command: Option<String>,
    pub setup_on_start: bool,
    /// Run in the code directory on every host; exits 0 when the trainer's imports work and
    /// prints the JAX version as its last line.
    pub python_check: String,
    /// Paths every host must have (relative ones from the code directory; gs:// ones are
    /// listed once with `gcloud storage ls`).
    pub dataset_paths: Vec<String>,
    /// Also check the `data_paths` and `data_paths_test` of each job's config at staging.
    pub check_config_datasets: bool,
    /// Free space the code directory's disk must have on every host.
    pub min_free_disk_gb: f64,
    /// Flags for every `tpu-vm ssh` call (before `--command`).
    pub ssh_flags: Vec<String>,
    /// Flags for every `tpu-vm scp` call.
    pub scp_flags: Vec<String>,
    pub create: CreateSettings,
    /// Timeouts of one call, in seconds: ssh/scp (preflight, staging, cleanup, stops),
    /// control-plane reads, operations (create, delete, start) and the setup command.
    pub ssh_timeout_s: f64,
    pub api_timeout_s: f64,
    pub operation_timeout_s: f64,
    pub setup_timeout_s: f64,
    /// Further attempts of a call that failed transiently (ssh exit 255, timeouts, API
    /// errors), with a pause doubling from `retry_backoff_s`.
    pub retries: u32,
    pub retry_backoff_s: f64,
    /// Seconds between looks at the node (or queued resource) while recovering.
    pub poll_s: f64,
    /// A recovery that has not brought the node back within this many seconds gives up
    /// (the worker reports it and starts over).
    pub recovery_timeout_s: f64,
    /// Where the worker keeps what must outlive it, here the node's captured spec: the
    /// worker's `state_dir` (`--state-dir`), not a key of this section (default
    /// `$XDG_STATE_HOME/podq`, else `~/.local/state/podq`).
    #[serde(skip)]
    pub state_dir: Option<PathBuf>,
    /// The node is a pool's slice (`podq pool`): the pool makes and deletes it, so a lost
    /// node is waited on, never created again by the worker. Not a key of this section.
    #[serde(skip)]
    pub pool_owned: bool,
    /// `confirm_status`: a node whose hosts stopped answering may still say READY for a
    /// while before it says PREEMPTED. Look again this many times, this many seconds apart,
    /// before a trainer is blamed.
    pub host_loss_grace_s: f64,
    pub host_loss_checks: u32,
    /// The user podq logs in as on the hosts (`user@node` for gcloud). Default: gcloud's,
    /// which is the local login name — `podq` under the systemd unit, so `~` would be
    /// /home/podq on the hosts. Set it to the user whose home holds the code and who
    /// launches trainers by hand.
    pub user: Option<String>,
    /// Where the `podq` binary that runs each host's agent lives on the hosts. The worker
    /// copies its own there when a host's is missing or another version.
    pub agent_path: String,
    /// Where each host's agent keeps the lease's log and exit status.
    pub agent_dir: String,
    /// The local `podq` binary copied to the hosts (default: the worker's own). It must
    /// run on the hosts: a static (musl) build, or one built on the hosts' OS.
    pub agent_binary: Option<String>,
}

impl Default for GcloudSettings {
    fn default() -> Self {
        GcloudSettings {
            binary: "gcloud".into(),
            api: Api::Tpu,
            compute: Default::default(),
            zone: String::new(),
            project: None,
            capacity: Capacity::Preemptible,
            queued_resource: None,
            coordinator_port: 1234,
            config_dir: "/tmp/podq/configs".into(),
            code_dir: "~/TinyRecursiveModels".into(),
            setup_command: None,
            setup_on_start: false,
            python_check:
                "python3 -c 'import jax, flax, optax, orbax.checkpoint; print(jax.__version__)'"
                    .into(),
            dataset_paths: Vec::new(),
            check_config_datasets: true,
            min_free_disk_gb: 20.0,
            ssh_flags: vec![
                "--strict-host-key-checking=no".into(),
                "--ssh-flag=-oServerAliveInterval=30".into(),
                "--ssh-flag=-oServerAliveCountMax=6".into(),
                "--ssh-flag=-oConnectTimeout=30".into(),
            ],
            scp_flags: vec!["--strict-host-key-checking=no".into()],
            create: CreateSettings::default(),
            ssh_timeout_s: 120.0,
            api_timeout_s: 120.0,
            operation_timeout_s: 1800.0,
            setup_timeout_s: 3600.0,
            retries: 3,
            retry_backoff_s: 2.0,
            poll_s: 30.0,
            recovery_timeout_s: 3600.0,
            state_dir: None,
            pool_owned: false,
            host_loss_grace_s: 5.0,
            host_loss_checks: 2,
            user: None,
            agent_path: "~/.podq/bin/podq".into(),
            agent_dir: "~/.podq/agent".into(),
            agent_binary: None,
        }
    }
}

pub(super) fn secs(value: f64, what: &str) -> anyhow::Result<Duration> {
    Duration::try_from_secs_f64(value)
        .with_context(|| format!("gcloud.{what} must be a non-negative number of seconds"))
}

/// The durations of `GcloudSettings`, checked once.
#[derive(Debug, Clone)]
pub(super) struct Timing {
    pub(super) ssh: Duration,
    pub(super) api: Duration,
    pub(super) operation: Duration,
    pub(super) setup: Duration,
    pub(super) poll: Duration,
    pub(super) recovery: Duration,
    pub(super) host_loss_grace: Duration,
}

impl Timing {
    pub(super) fn of(settings: &GcloudSettings) -> anyhow::Result<Timing> {
        Ok(Timing {
            ssh: secs(settings.ssh_timeout_s, "ssh_timeout_s")?,
            api: secs(settings.api_timeout_s, "api_timeout_s")?,
            operation: secs(settings.operation_timeout_s, "operation_timeout_s")?,
            setup: secs(settings.setup_timeout_s, "setup_timeout_s")?,
            poll: secs(settings.poll_s, "poll_s")?.max(Duration::from_millis(10)),
            recovery: secs(settings.recovery_timeout_s, "recovery_timeout_s")?,
            host_loss_grace: secs(settings.host_loss_grace_s, "host_loss_grace_s")?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn capacity_kinds_are_read() {
        assert_eq!("spot".parse::<Capacity>(), Ok(Capacity::Spot));
        assert_eq!("on-demand".parse::<Capacity>(), Ok(Capacity::OnDemand));
        assert!("cheap".parse::<Capacity>().is_err());
        let settings: GcloudSettings =
            serde_yaml::from_str("zone: us-central2-b\ncapacity: queued\n").unwrap();
        assert_eq!(settings.capacity, Capacity::Queued);
        assert_eq!(settings.coordinator_port, 1234);
        assert!(serde_yaml::from_str::<GcloudSettings>("zonne: x\n").is_err());
    }
}
