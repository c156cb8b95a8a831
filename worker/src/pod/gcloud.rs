//! The `gcloud` driver: a Cloud TPU VM pod slice (`stable-1`, a v4-64 of 8 hosts) driven
//! through the gcloud CLI, as docs/architecture.md §3.5 describes.
//!
//! - state, health and hosts: `gcloud compute tpus tpu-vm describe NAME --format=json`;
//! - one `gcloud compute tpus tpu-vm ssh NAME --worker=i --command=...` process per host
//!   and attempt, in its own local process group; the trainer runs on the host in a session
//!   of its own, tagged by a pgid file (see `remote`), so a stop reaches it there;
//! - the config is copied with `tpu-vm scp` and its sha256 checked on the host (see
//!   `staging`);
//! - preflight, cleanup and setup are ssh calls run on every host at once (see
//!   `preflight`);
//! - recovery recreates the node from its captured spec (see `spec`), or its queued
//!   resource, as Cloud TPU allows it: a multi-host slice is never started (see
//!   `recovery`);
//! - `confirm_status` looks again, after a grace period, at a node that still says READY
//!   while its hosts stopped answering, before a trainer is blamed.

mod compute;
pub mod errors;
mod node;
mod preflight;
mod recovery;
mod remote;
mod runner;
mod settings;
mod setup_state;
mod spec;
mod staging;

use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use anyhow::{bail, Context};
use async_trait::async_trait;
use podq_api::Preflight;

pub(crate) use compute::{
    instance_rank, ErrorItem, GroupStatus, Place, SliceSpec as ComputeSliceSpec,
};
pub use compute::{ComputeSettings, ProvisioningModel};
pub use node::{classify_health, classify_state, HealthClass, Node, StateClass};
use runner::Output;
pub use runner::{CallError, EnsureError, Retry, Runner};
use settings::{secs, Timing};
pub use settings::{Api, Capacity, CreateSettings, GcloudSettings};

use super::{AgentStart, PodDriver, PodStatus, StopSignal};

pub struct GcloudPod {
    name: String,
    accelerator: String,
    settings: GcloudSettings,
    timing: Timing,
    runner: Runner,
    /// Stops go out with one retry only: a pod that is gone must not hold a stop for long.
    stop_runner: Runner,
    hosts: AtomicU32,
    /// The last node a describe returned (its endpoints kept when a later one has none).
    last_node: Mutex<Option<Node>>,
    /// The spec to recreate the node with, and the file that keeps it.
    saved_spec: Mutex<Option<spec::SavedSpec>>,
    spec_path: PathBuf,
    /// A create was refused in a way asking again cannot fix: why.
    held: Mutex<Option<String>>,
    /// Whether the hosts need the setup command before the next preflight can pass.
    setup_state: setup_state::SetupState,
    /// Unknown states and health values already logged.
    warned: Mutex<HashSet<String>>,
    /// The agent binary's build id, hashed once per version of the file.
    agent_build_id: crate::build_id::BuildIdCache,
    /// A Compute Engine slice (`api: compute`) instead of a Cloud TPU node.
    compute: Option<compute::ComputeSlice>,
}

impl GcloudPod {
    pub fn new(
        name: &str,
        accelerator: &str,
        hosts: u32,
        settings: GcloudSettings,
    ) -> anyhow::Result<GcloudPod> {
        if settings.zone.trim().is_empty() {
            bail!("the gcloud driver needs a zone (gcloud.zone, --zone or PODQ_ZONE)");
        }
        if hosts == 0 {
            bail!("a pod has at least one host");
        }
        let timing = Timing::of(&settings)?;
        let compute = match settings.api {
            Api::Tpu => None,
            Api::Compute => Some(compute::ComputeSlice::new(settings.compute.slice(
                name,
                accelerator,
                &settings.zone,
                settings.project.as_deref(),
            )?)),
        };
        let hosts = match &compute {
            Some(slice) if slice.spec.size != hosts => {
                tracing::info!(
                    pod = name,
                    "topology {} on {} makes {} hosts (not the {hosts} configured)",
                    slice.spec.settings.topology,
                    slice.spec.settings.machine_type,
                    slice.spec.size
                );
                slice.spec.size
            }
            _ => hosts,
        };
        let state_dir = settings
            .state_dir
            .clone()
            .unwrap_or_else(spec::default_state_dir);
        let spec_path = spec::spec_path(&state_dir, &settings.zone, name);
        let saved_spec = recovery::load_saved_spec(&spec_path, name, &settings.zone);
        let runner = Runner {
            program: settings.binary.clone(),
            retries: settings.retries,
            backoff: secs(settings.retry_backoff_s, "retry_backoff_s")?,
        };
        let stop_runner = Runner {
            retries: settings.retries.min(1),
            ..runner.clone()
        };
        let setup_state = setup_state::SetupState::load(
            &state_dir,
            &settings.zone,
            name,
            settings.setup_on_start && settings.setup_command.is_some(),
        );
        Ok(GcloudPod {
            name: name.to_owned(),
            accelerator: accelerator.to_owned(),
            settings,
            timing,
            runner,
            stop_runner,
            hosts: AtomicU32::new(hosts),
            last_node: Mutex::new(None),
            saved_spec: Mutex::new(saved_spec),
            spec_path,
            held: Mutex::new(None),
            setup_state,
            warned: Mutex::new(HashSet::new()),
            agent_build_id: Default::default(),
            compute,
        })
    }

    pub fn settings(&self) -> &GcloudSettings {
        &self.settings
    }

    /// The pod's state when a host ended or stopped answering while the node may still
    /// say READY: when hosts vanish, describe can go on answering READY for a while before
    /// it says PREEMPTED (skypilot-org/skypilot#1468, #1500). A READY answer is checked
    /// again `host_loss_checks` times, `host_loss_grace_s` apart; the first answer that
    /// shows the capacity gone is returned, else the last. Call this, not `status`, before
    /// blaming the trainer for a host that ended.
    pub async fn confirm_status(&self) -> anyhow::Result<PodStatus> {
        let mut status = self.status().await?;
        for _ in 0..self.settings.host_loss_checks {
            if status.is_preempted() || status.is_repairing() {
                break;
            }
            tracing::info!(
                pod = %self.name,
                state = %status.state,
                health = %status.health,
                "a host was lost on a node that says it is fine; looking again in {}s",
                self.timing.host_loss_grace.as_secs_f64()
            );
            tokio::time::sleep(self.timing.host_loss_grace).await;
            status = self.status().await?;
        }
        Ok(status)
    }

    /// The id of the node incarnation the last describe showed (a slice's: its group's).
    fn node_id(&self) -> Option<String> {
        if let Some(slice) = self.compute() {
            return slice.incarnation();
        }
        let last = self.last_node.lock().unwrap_or_else(|e| e.into_inner());
        last.as_ref().and_then(|n| n.id.clone())
    }

    /// Whether the setup command must run before the next preflight: a recreate asked for
    /// it, or the node is not the incarnation the hosts were set up on.
    fn setup_needed(&self) -> bool {
        self.settings.setup_command.is_some() && self.setup_state.needed(self.node_id().as_deref())
    }

    fn queued_resource(&self) -> String {
        self.settings
            .queued_resource
            .clone()
            .unwrap_or_else(|| format!("{}-qr", self.name))
    }

    /// Host `host` as ssh and scp name it: the node, or on Compute Engine the host's
    /// instance; `user@...` when a user is set.
    fn remote_target(&self, host: u32) -> String {
        let machine = match self.compute() {
            Some(slice) => slice.instance(host).map_or_else(
                || format!("{}-host-{host}-unknown", slice.spec.group),
                |h| h.instance,
            ),
            None => self.name.clone(),
        };
        match &self.settings.user {
            Some(user) => format!("{user}@{machine}"),
            None => machine,
        }
    }

    /// `compute tpus <group> <verb> <target> --zone=Z [--project=P]`.
    fn args(&self, group: &str, verb: &str, target: &str) -> Vec<String> {
        let mut args: Vec<String> = vec![
            "compute".into(),
            "tpus".into(),
            group.into(),
            verb.into(),
            target.into(),
            format!("--zone={}", self.settings.zone),
        ];
        if let Some(project) = &self.settings.project {
            args.push(format!("--project={project}"));
        }
        args
    }

    /// `tpu-vm ssh NODE --worker=HOST`, or on Compute Engine `compute ssh INSTANCE`: there
    /// is no `--worker` there (https://docs.cloud.google.com/sdk/gcloud/reference/compute/
    /// tpus/tpu-vm/ssh), so podq fans out over the instances itself.
    fn ssh_args(&self, host: u32, command: &str) -> Vec<String> {
        let mut args = match self.compute() {
            Some(slice) => slice.spec.on(
                &["ssh"],
                &self.remote_target(host),
                compute::Place::Zone(&self.settings.zone),
                &[],
            ),
            None => {
                let mut args = self.args("tpu-vm", "ssh", &self.remote_target(host));
                args.push(format!("--worker={host}"));
                args
            }
        };
        args.extend(self.settings.ssh_flags.iter().cloned());
        args.push(format!("--command={command}"));
        args
    }

    /// The node as the API sees it now; `None` when it does not exist.
    async fn describe(&self) -> Result<Option<Node>, CallError> {
        let mut args = self.args("tpu-vm", "describe", &self.name);
        args.push("--format=json".into());
        match self.runner.call(&args, self.timing.api, Retry::Api).await {
            Ok(output) => {
                let node = Node::parse(&output.stdout).map_err(|e| CallError::Failed {
                    code: Some(0),
                    stderr: format!("describe answered something that is not a node: {e}"),
                })?;
                self.observe(&node);
                if let Ok(spec) = spec::NodeSpec::parse(&output.stdout) {
                    self.capture_spec(node.state(), spec);
                }
                Ok(Some(node))
            }
            Err(CallError::NotFound(_)) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Remembers what a describe said and logs values this worker does not know.
    fn observe(&self, node: &Node) {
        if classify_state(node.state()) == StateClass::Unknown {
            self.warn_once(format!("state {}", node.state()));
        }
        if classify_health(node.health()) == HealthClass::Unknown {
            self.warn_once(format!("health {}", node.health()));
        }
        let endpoints = node.network_endpoints.len() as u32;
        if endpoints > 0 {
            let before = self.hosts.swap(endpoints, Ordering::SeqCst);
            if before != endpoints {
                tracing::info!(
                    pod = %self.name,
                    hosts = endpoints,
                    "the node has {endpoints} hosts (network endpoints); was {before}"
                );
            }
        }
        let mut last = self.last_node.lock().unwrap_or_else(|e| e.into_inner());
        // A node being created (or gone) answers without endpoints: keep the last ones.
        let mut node = node.clone();
        if let Some(previous) = last.as_ref() {
            if node.network_endpoints.is_empty() {
                node.network_endpoints = previous.network_endpoints.clone();
            }
        }
        *last = Some(node);
    }

    fn warn_once(&self, what: String) {
        let mut warned = self.warned.lock().unwrap_or_else(|e| e.into_inner());
        if warned.insert(what.clone()) {
            tracing::warn!(
                pod = %self.name,
                "the node reports {what}, which podq does not know: it counts as not ready"
            );
        }
    }

    /// Runs `command(host)` on every host at once.
    async fn ssh_all(
        &self,
        runner: &Runner,
        command: impl Fn(u32) -> String,
        timeout: Duration,
        retry: Retry,
        hosts: &[u32],
    ) -> Vec<(u32, Result<Output, CallError>)> {
        let calls = hosts.iter().map(|&host| {
            let args = self.ssh_args(host, &command(host));
            async move { (host, runner.call(&args, timeout, retry).await) }
        });
        futures::future::join_all(calls).await
    }

    /// Runs the same script on every host at once, with the ordinary ssh timeout and retry.
    async fn ssh_every_host(&self, script: &str) -> Vec<(u32, Result<Output, CallError>)> {
        self.ssh_all(
            &self.runner,
            |_| script.to_owned(),
            self.timing.ssh,
            Retry::Ssh,
            &self.all_hosts(),
        )
        .await
    }

    fn all_hosts(&self) -> Vec<u32> {
        (0..self.hosts()).collect()
    }
}

#[async_trait]
impl PodDriver for GcloudPod {
    fn name(&self) -> &str {
        &self.name
    }

    fn accelerator(&self) -> &str {
        &self.accelerator
    }

    fn hosts(&self) -> u32 {
        self.hosts.load(Ordering::SeqCst)
    }

    async fn status(&self) -> anyhow::Result<PodStatus> {
        if let Some(slice) = self.compute() {
            return Ok(self.slice_status(slice).await);
        }
        Ok(match self.describe().await {
            Ok(Some(node)) => PodStatus {
                state: node.state().to_owned(),
                health: node.health().to_owned(),
                maintenance: node.maintenance(),
                ..Default::default()
            },
            Ok(None) => PodStatus {
                state: "NOT_FOUND".into(),
                health: "HEALTH_UNSPECIFIED".into(),
                maintenance: None,
                ..Default::default()
            },
            Err(e) => {
                // Not knowing is not a preemption: a running attempt carries on, and an idle
                // worker waits (its recovery describes again).
                tracing::warn!(pod = %self.name, error = %e, "cannot describe the node");
                PodStatus {
                    state: "DESCRIBE_FAILED".into(),
                    health: "HEALTH_UNSPECIFIED".into(),
                    maintenance: None,
                    ..Default::default()
                }
            }
        })
    }

    async fn preflight(&self) -> Preflight {
        self.run_preflight().await
    }

    fn config_dir(&self, _host: u32) -> PathBuf {
        PathBuf::from(&self.settings.config_dir)
    }

    async fn clean_hosts(&self) -> anyhow::Result<Vec<String>> {
        let script = remote::clean();
        let results = self.ssh_every_host(&script).await;
        let mut lines = Vec::new();
        for (host, result) in results {
            match result {
                Ok(output) => {
                    lines.extend(
                        remote::done(&output.stdout)
                            .into_iter()
                            .map(|line| format!("host {host}: {line}")),
                    );
                    lines.extend(
                        remote::failures(&output.stdout)
                            .into_iter()
                            .map(|(check, message)| format!("host {host}: {message} ({check})")),
                    );
                }
                Err(e) => lines.push(format!("host {host}: cleanup failed: {e}")),
            }
        }
        Ok(lines)
    }

    async fn coordinator_address(&self) -> anyhow::Result<String> {
        if let Some(slice) = self.compute() {
            // Host 0 is the instance whose TPU_WORKER_ID is 0, not the first name.
            if let Err(e) = self.look_at_slice(slice).await {
                tracing::warn!(pod = %self.name, error = %e, "cannot look at the slice; using the last hosts seen");
            }
            let ip = slice.instance(0).and_then(|h| h.ip).with_context(|| {
                format!(
                    "slice {} has no internal address for host 0",
                    slice.spec.group
                )
            })?;
            return Ok(format!("{ip}:{}", self.settings.coordinator_port));
        }
        if let Err(e) = self.describe().await {
            tracing::warn!(pod = %self.name, error = %e, "cannot describe; using the last endpoints seen");
        }
        let last = self.last_node.lock().unwrap_or_else(|e| e.into_inner());
        let ip = last
            .as_ref()
            .and_then(Node::coordinator_ip)
            .with_context(|| format!("node {} has no network endpoint for host 0", self.name))?;
        Ok(format!("{ip}:{}", self.settings.coordinator_port))
    }

    async fn start_agents(&self, start: &AgentStart) -> anyhow::Result<()> {
        self.stage_and_start_agents(start).await
    }

    async fn recover(&self, progress: &(dyn Fn(String) + Send + Sync)) -> anyhow::Result<()> {
        self.recover_node(progress).await
    }

    async fn confirm_status(&self) -> anyhow::Result<PodStatus> {
        GcloudPod::confirm_status(self).await
    }

    async fn signal_hosts(&self, lease: &str, hosts: &[u32], signal: StopSignal) -> bool {
        if !remote::valid_lease(lease) {
            tracing::warn!(
                lease,
                "not a lease id podq tags trainers with; nothing to signal"
            );
            return true;
        }
        let kill = signal == StopSignal::Kill;
        // A node that lost its capacity took its processes with it, and its hosts do not
        // answer ssh: do not spend the grace period on connection timeouts.
        if let Some(slice) = self.compute() {
            let status = self.slice_status(slice).await;
            if status.is_preempted() || status.is_repairing() {
                tracing::info!(
                    pod = %self.name,
                    "slice {} is {}/{}: its trainers went with it; nothing to signal",
                    slice.spec.group,
                    status.state,
                    status.health
                );
                return true;
            }
        } else {
            match self.describe().await {
                Ok(Some(node))
                    if matches!(
                        classify_state(node.state()),
                        StateClass::Lost | StateClass::Changing
                    ) =>
                {
                    tracing::info!(
                        pod = %self.name,
                        state = node.state(),
                        "the node is {}: its trainers went with it; nothing to signal",
                        node::describe_state(node.state())
                    );
                    return true;
                }
                Ok(None) => {
                    tracing::info!(pod = %self.name, "the node is gone: nothing to signal");
                    return true;
                }
                _ => {}
            }
        }
        let script = match remote::signal(lease, kill) {
            Ok(script) => script,
            Err(e) => {
                // A lease `valid_lease` passed has no NUL byte: this is not reached.
                tracing::warn!(lease, "{e}; nothing to signal");
                return true;
            }
        };
        let results = self
            .ssh_all(
                &self.stop_runner,
                |_| script.clone(),
                self.timing.ssh.min(Duration::from_secs(60)),
                Retry::Ssh,
                hosts,
            )
            .await;
        for (host, result) in results {
            match result {
                Ok(output) => {
                    for line in remote::done(&output.stdout) {
                        tracing::info!(pod = %self.name, host, "{line}");
                    }
                }
                Err(e) => tracing::warn!(
                    pod = %self.name,
                    host,
                    error = %e,
                    "cannot signal the trainer on the host ({})",
                    if kill { "SIGKILL" } else { "SIGTERM" }
                ),
            }
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_zone_is_required() {
        assert!(GcloudPod::new("n", "v4-8", 1, GcloudSettings::default()).is_err());
        let pod = GcloudPod::new(
            "stable-1",
            "v4-64",
            8,
            GcloudSettings {
                zone: "us-central2-b".into(),
                project: Some("p".into()),
                ssh_flags: Vec::new(),
                ..GcloudSettings::default()
            },
        )
        .unwrap();
        assert_eq!(
            pod.ssh_args(3, "true"),
            [
                "compute",
                "tpus",
                "tpu-vm",
                "ssh",
                "stable-1",
                "--zone=us-central2-b",
                "--project=p",
                "--worker=3",
                "--command=true"
            ]
        );
    }
}
