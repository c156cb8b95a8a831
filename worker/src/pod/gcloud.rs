//! The `gcloud` driver: a Cloud TPU VM pod slice (`stable-1`, a v4-64 of 8 hosts) driven
//! through the gcloud CLI, as DESIGN.md 3.5 describes.
//!
//! - state, health and hosts: `gcloud compute tpus tpu-vm describe NAME --format=json`;
//! - one `gcloud compute tpus tpu-vm ssh NAME --worker=i --command=...` process per host
//!   and attempt, in its own local process group; the trainer runs on the host in a session
//!   of its own, tagged by a pgid file (see `remote`), so a stop reaches it there;
//! - the config is copied with `tpu-vm scp` and its sha256 checked on the host;
//! - preflight, cleanup and setup are ssh calls run on every host at once;
//! - recovery recreates the node from its captured spec (see `spec`), or its queued
//!   resource, as Cloud TPU allows it: a multi-host slice is never started (see
//!   `recovery`);
//! - `confirm_status` looks again, after a grace period, at a node that still says READY
//!   while its hosts stopped answering, before a trainer is blamed.

mod node;
mod recovery;
mod remote;
mod runner;
mod spec;

use std::collections::{BTreeMap, HashSet};
use std::path::PathBuf;
use std::str::FromStr;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use anyhow::{bail, Context};
use async_trait::async_trait;
use podq_api::{Preflight, PreflightFailure};
use serde::Deserialize;

pub use node::{classify_health, classify_state, HealthClass, Node, StateClass};
use runner::{CallError, Output, Retry, Runner};

use super::{AgentStart, HostLaunch, PodDriver, PodStatus, StopSignal};

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

/// The `gcloud:` section of the worker's config file.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct GcloudSettings {
    /// The gcloud program.
    pub binary: String,
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
            host_loss_grace_s: 5.0,
            host_loss_checks: 2,
            user: None,
            agent_path: "~/.podq/bin/podq".into(),
            agent_dir: "~/.podq/agent".into(),
            agent_binary: None,
        }
    }
}

fn secs(value: f64, what: &str) -> anyhow::Result<Duration> {
    Duration::try_from_secs_f64(value)
        .with_context(|| format!("gcloud.{what} must be a non-negative number of seconds"))
}

/// The durations of `GcloudSettings`, checked once.
#[derive(Debug, Clone)]
struct Timing {
    ssh: Duration,
    api: Duration,
    operation: Duration,
    setup: Duration,
    poll: Duration,
    recovery: Duration,
    host_loss_grace: Duration,
}

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
    /// The hosts need the setup command before the next preflight can pass.
    needs_setup: AtomicBool,
    /// Unknown states and health values already logged.
    warned: Mutex<HashSet<String>>,
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
        let timing = Timing {
            ssh: secs(settings.ssh_timeout_s, "ssh_timeout_s")?,
            api: secs(settings.api_timeout_s, "api_timeout_s")?,
            operation: secs(settings.operation_timeout_s, "operation_timeout_s")?,
            setup: secs(settings.setup_timeout_s, "setup_timeout_s")?,
            poll: secs(settings.poll_s, "poll_s")?.max(Duration::from_millis(10)),
            recovery: secs(settings.recovery_timeout_s, "recovery_timeout_s")?,
            host_loss_grace: secs(settings.host_loss_grace_s, "host_loss_grace_s")?,
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
        let needs_setup = settings.setup_on_start && settings.setup_command.is_some();
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
            needs_setup: AtomicBool::new(needs_setup),
            warned: Mutex::new(HashSet::new()),
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
            if status.is_preempted() {
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

    fn queued_resource(&self) -> String {
        self.settings
            .queued_resource
            .clone()
            .unwrap_or_else(|| format!("{}-qr", self.name))
    }

    /// The node as ssh and scp name it: `user@node` when a user is set.
    fn remote_target(&self) -> String {
        match &self.settings.user {
            Some(user) => format!("{user}@{}", self.name),
            None => self.name.clone(),
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

    fn ssh_args(&self, host: u32, command: &str) -> Vec<String> {
        let mut args = self.args("tpu-vm", "ssh", &self.remote_target());
        args.push(format!("--worker={host}"));
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

    /// Runs the setup command on every host; `Ok` once it exited 0 everywhere.
    async fn setup(&self, progress: &(dyn Fn(String) + Send + Sync)) -> anyhow::Result<()> {
        let Some(command) = self.settings.setup_command.clone() else {
            self.needs_setup.store(false, Ordering::SeqCst);
            return Ok(());
        };
        let hosts = self.hosts();
        progress(format!("running the setup command on {hosts} hosts"));
        let results = self
            .ssh_all(
                &self.runner,
                |host| remote::setup(host, hosts, &command),
                self.timing.setup,
                Retry::Ssh,
                &self.all_hosts(),
            )
            .await;
        let mut failed = Vec::new();
        for (host, result) in results {
            match result {
                Ok(output) => tracing::debug!(
                    pod = %self.name,
                    host,
                    stdout = %output.stdout.trim(),
                    stderr = %output.stderr.trim(),
                    "setup done"
                ),
                Err(e) => failed.push(format!("host {host}: {e}")),
            }
        }
        if !failed.is_empty() {
            bail!("setup failed: {}", failed.join("; "));
        }
        self.needs_setup.store(false, Ordering::SeqCst);
        progress(format!("setup done on {hosts} hosts"));
        Ok(())
    }

    /// Whether every gs:// path exists (`gcloud storage ls`); the missing ones otherwise.
    async fn missing_gcs_paths(&self, paths: &[String]) -> Vec<(String, String)> {
        let mut missing = Vec::new();
        for path in paths.iter().filter(|p| p.starts_with("gs://")) {
            let args = vec!["storage".into(), "ls".into(), path.clone()];
            if let Err(e) = self.runner.call(&args, self.timing.api, Retry::Api).await {
                missing.push((path.clone(), e.to_string()));
            }
        }
        missing
    }

    /// `tpu-vm scp LOCAL NODE:REMOTE --worker=HOST`.
    fn scp_args(&self, local: &std::path::Path, remote: &str, host: u32) -> Vec<String> {
        let mut args = self.args("tpu-vm", "scp", &local.display().to_string());
        // scp's positional arguments are SRC DEST: put the destination right after.
        args.insert(5, format!("{}:{remote}", self.remote_target()));
        args.push(format!("--worker={host}"));
        args.extend(self.settings.scp_flags.iter().cloned());
        args
    }

    /// Copies `contents` to every host at once; answers where it landed (the same path on
    /// every host).
    async fn copy_to_hosts(&self, file_name: &str, contents: &[u8]) -> anyhow::Result<String> {
        let token = uuid::Uuid::new_v4().simple().to_string();
        let local = std::env::temp_dir().join(format!("podq-stage-{token}-{file_name}"));
        tokio::fs::write(&local, contents)
            .await
            .with_context(|| format!("cannot write {}", local.display()))?;
        let remote_tmp = format!("/tmp/podq-stage-{token}.yaml");
        let copies = self.all_hosts().into_iter().map(|host| {
            let args = self.scp_args(&local, &remote_tmp, host);
            async move {
                (
                    host,
                    self.runner.call(&args, self.timing.ssh, Retry::Ssh).await,
                )
            }
        });
        let results = futures::future::join_all(copies).await;
        let _ = tokio::fs::remove_file(&local).await;
        let failed: Vec<String> = results
            .into_iter()
            .filter_map(|(host, r)| r.err().map(|e| format!("host {host}: {e}")))
            .collect();
        if !failed.is_empty() {
            bail!(
                "cannot copy {file_name} to the hosts: {}",
                failed.join("; ")
            );
        }
        Ok(remote_tmp)
    }

    /// One ssh call per host, all at once, each placing and checking the config (see
    /// `remote::stage`) and starting that host's agent. Answers the hosts whose agent
    /// binary is missing or of another version (nothing was started there).
    async fn stage_and_start(
        &self,
        start: &AgentStart,
        copied_to: Option<&str>,
        datasets: &[String],
    ) -> anyhow::Result<Vec<u32>> {
        let by_host: BTreeMap<u32, &HostLaunch> =
            start.launches.iter().map(|l| (l.host, l)).collect();
        let hosts: Vec<u32> = by_host.keys().copied().collect();
        let results = self
            .ssh_all(
                &self.runner,
                |host| {
                    let launch = by_host[&host];
                    let stage = remote::stage(&remote::StageScript {
                        tmp: copied_to,
                        dir: &self.settings.config_dir,
                        name: &start.config.file_name,
                        sha256: &start.config.sha256,
                        code_dir: &self.settings.code_dir,
                        datasets,
                    });
                    stage
                        + &remote::start_agent(&remote::AgentScript {
                            agent_path: &self.settings.agent_path,
                            agent_dir: &self.settings.agent_dir,
                            version: env!("CARGO_PKG_VERSION"),
                            worker_url: &start.worker_url,
                            lease: &start.lease,
                            secret: &start.secret,
                            host,
                            env: &launch.env,
                            command: &launch.command,
                        })
                },
                self.timing.ssh,
                Retry::Ssh,
                &hosts,
            )
            .await;
        let mut outdated = Vec::new();
        let mut failed = Vec::new();
        for (host, result) in results {
            match result {
                Ok(output) => {
                    let failures = remote::failures(&output.stdout);
                    if failures.iter().any(|(check, _)| check == "agent_version") {
                        outdated.push(host);
                    } else if let Some((check, message)) = failures.first() {
                        failed.push(format!("host {host}: {message} ({check})"));
                    }
                }
                Err(e) => failed.push(format!("host {host}: {e}")),
            }
        }
        if !failed.is_empty() {
            bail!("cannot start the agents: {}", failed.join("; "));
        }
        Ok(outdated)
    }

    /// Copies this worker's `podq` to `agent_path` on `hosts`.
    async fn install_agent(&self, hosts: &[u32]) -> anyhow::Result<()> {
        let binary = match &self.settings.agent_binary {
            Some(path) => PathBuf::from(path),
            None => std::env::current_exe().context("cannot find this program's path")?,
        };
        tracing::info!(pod = %self.name, ?hosts, binary = %binary.display(), "installing the agent");
        let token = uuid::Uuid::new_v4().simple().to_string();
        let remote_tmp = format!("/tmp/podq-agent-{token}");
        let copies = hosts.iter().map(|&host| {
            let args = self.scp_args(&binary, &remote_tmp, host);
            async move {
                (
                    host,
                    self.runner.call(&args, self.timing.ssh, Retry::Ssh).await,
                )
            }
        });
        let mut failed = Vec::new();
        for (host, result) in futures::future::join_all(copies).await {
            if let Err(e) = result {
                failed.push(format!("host {host}: {e}"));
            }
        }
        if !failed.is_empty() {
            bail!("cannot copy the agent: {}", failed.join("; "));
        }
        let script = remote::install_agent(&remote_tmp, &self.settings.agent_path);
        let results = self
            .ssh_all(
                &self.runner,
                |_| script.clone(),
                self.timing.ssh,
                Retry::Ssh,
                hosts,
            )
            .await;
        for (host, result) in results {
            if let Err(e) = result {
                failed.push(format!("host {host}: {e}"));
            }
        }
        if !failed.is_empty() {
            bail!("cannot install the agent: {}", failed.join("; "));
        }
        Ok(())
    }
}

/// `data_paths` and `data_paths_test` of a resolved config.
fn config_datasets(yaml: &[u8]) -> Vec<String> {
    let Ok(config) = serde_yaml::from_slice::<serde_yaml::Value>(yaml) else {
        return Vec::new();
    };
    let mut paths = Vec::new();
    for key in ["data_paths", "data_paths_test"] {
        match config.get(key) {
            Some(serde_yaml::Value::String(path)) => paths.push(path.clone()),
            Some(serde_yaml::Value::Sequence(list)) => paths.extend(
                list.iter()
                    .filter_map(|v| v.as_str().map(str::to_owned))
                    .filter(|p| !p.is_empty()),
            ),
            _ => {}
        }
    }
    paths
}

/// The value most hosts report, ties going to the lowest host.
fn majority(values: &BTreeMap<u32, String>) -> Option<&str> {
    let mut counts: Vec<(&str, usize, u32)> = Vec::new();
    for (host, value) in values {
        match counts.iter_mut().find(|(v, _, _)| *v == value.as_str()) {
            Some(entry) => entry.1 += 1,
            None => counts.push((value.as_str(), 1, *host)),
        }
    }
    counts
        .into_iter()
        .max_by(|a, b| a.1.cmp(&b.1).then(b.2.cmp(&a.2)))
        .map(|(v, _, _)| v)
}

fn failure(host: Option<u32>, check: &str, message: impl Into<String>) -> PreflightFailure {
    PreflightFailure {
        host,
        check: check.to_owned(),
        message: message.into(),
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
        Ok(match self.describe().await {
            Ok(Some(node)) => PodStatus {
                state: node.state().to_owned(),
                health: node.health().to_owned(),
            },
            Ok(None) => PodStatus {
                state: "NOT_FOUND".into(),
                health: "HEALTH_UNSPECIFIED".into(),
            },
            Err(e) => {
                // Not knowing is not a preemption: a running attempt carries on, and an idle
                // worker waits (its recovery describes again).
                tracing::warn!(pod = %self.name, error = %e, "cannot describe the node");
                PodStatus {
                    state: "DESCRIBE_FAILED".into(),
                    health: "HEALTH_UNSPECIFIED".into(),
                }
            }
        })
    }

    async fn preflight(&self) -> Preflight {
        let mut failures = Vec::new();
        let done = |failures: Vec<PreflightFailure>| Preflight {
            passed: failures.is_empty(),
            at: Some(chrono::Utc::now()),
            failures,
        };
        match self.describe().await {
            Ok(Some(node)) => {
                let ready = classify_state(node.state()) == StateClass::Ready
                    && classify_health(node.health()) == HealthClass::Healthy;
                if !ready {
                    let mut message = format!(
                        "node {} is {}/{} ({})",
                        self.name,
                        node.state(),
                        node.health(),
                        node::describe_state(node.state())
                    );
                    if let Some(symptoms) = node.symptoms_text() {
                        message.push_str(&format!("; symptoms: {symptoms}"));
                    }
                    failures.push(failure(None, "tpu_state", message));
                    return done(failures);
                }
            }
            Ok(None) => {
                failures.push(failure(
                    None,
                    "tpu_state",
                    format!("node {} does not exist", self.name),
                ));
                return done(failures);
            }
            Err(e) => {
                failures.push(failure(None, "tpu_state", format!("cannot describe: {e}")));
                return done(failures);
            }
        }
        if self.needs_setup.load(Ordering::SeqCst) {
            let log = |what: String| tracing::info!(pod = %self.name, "{what}");
            if let Err(e) = self.setup(&log).await {
                failures.push(failure(None, "setup", format!("{e:#}")));
                return done(failures);
            }
        }
        // Trainers left by an earlier worker are orphans: nothing runs between attempts.
        for line in self.clean_hosts().await.unwrap_or_default() {
            tracing::info!(pod = %self.name, "preflight: {line}");
        }
        let code_dir = self.settings.code_dir.clone();
        let python_check = self.settings.python_check.clone();
        let local_datasets: Vec<String> = self
            .settings
            .dataset_paths
            .iter()
            .filter(|p| !p.starts_with("gs://"))
            .cloned()
            .collect();
        let script = remote::preflight(&remote::PreflightScript {
            code_dir: &code_dir,
            python_check: &python_check,
            dataset_paths: &local_datasets,
        });
        let results = self.ssh_every_host(&script).await;
        let mut commits = BTreeMap::new();
        let mut versions = BTreeMap::new();
        for (host, result) in results {
            let output = match result {
                Ok(output) => output,
                Err(e) => {
                    failures.push(failure(Some(host), "ssh", format!("cannot reach: {e}")));
                    continue;
                }
            };
            for (check, message) in remote::failures(&output.stdout) {
                failures.push(failure(Some(host), &check, message));
            }
            if let Some(commit) = remote::info(&output.stdout, "commit") {
                commits.insert(host, commit.to_owned());
            }
            if let Some(version) = remote::info(&output.stdout, "jax") {
                versions.insert(host, version.to_owned());
            }
            match remote::info(&output.stdout, "disk_free_kb").and_then(|v| v.parse::<f64>().ok()) {
                Some(kb) => {
                    let gb = kb / (1024.0 * 1024.0);
                    if gb < self.settings.min_free_disk_gb {
                        failures.push(failure(
                            Some(host),
                            "disk_free",
                            format!(
                                "{gb:.1} GB free under {code_dir}, below the {} GB threshold",
                                self.settings.min_free_disk_gb
                            ),
                        ));
                    }
                }
                None => failures.push(failure(
                    Some(host),
                    "disk_free",
                    "cannot read the free disk space",
                )),
            }
        }
        for (values, check, what) in [
            (&commits, "code_commit", "commit"),
            (&versions, "jax_version", "JAX version"),
        ] {
            if let Some(expected) = majority(values) {
                for (host, value) in values {
                    if value != expected {
                        failures.push(failure(
                            Some(*host),
                            check,
                            format!("{what} {value} differs from {expected} on the other hosts"),
                        ));
                    }
                }
            }
        }
        for (path, error) in self.missing_gcs_paths(&self.settings.dataset_paths).await {
            failures.push(failure(
                None,
                "dataset",
                format!("{path} cannot be listed: {error}"),
            ));
        }
        done(failures)
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
        if !remote::valid_lease(&start.lease) {
            bail!(
                "lease id `{}` cannot tag a process on the host",
                start.lease
            );
        }
        let config = &start.config;
        let file_name = &config.file_name;
        if file_name.is_empty() || file_name.contains('/') || file_name.starts_with('.') {
            bail!("`{file_name}` is not a plain file name");
        }
        let datasets = if self.settings.check_config_datasets {
            config_datasets(&config.contents)
        } else {
            Vec::new()
        };
        // The copies and the listing of gs:// datasets, all at once.
        let (copied, missing) = tokio::join!(
            self.copy_to_hosts(file_name, &config.contents),
            self.missing_gcs_paths(&datasets)
        );
        let remote_tmp = copied?;
        if !missing.is_empty() {
            let text: Vec<String> = missing
                .into_iter()
                .map(|(path, e)| format!("{path} ({e})"))
                .collect();
            bail!("the config's dataset cannot be listed: {}", text.join("; "));
        }
        let local_datasets: Vec<String> = datasets
            .into_iter()
            .filter(|p| !p.starts_with("gs://"))
            .collect();
        // One ssh per host, all at once: place and check the config, start the agent.
        let mut outdated = self
            .stage_and_start(start, Some(&remote_tmp), &local_datasets)
            .await?;
        if !outdated.is_empty() {
            self.install_agent(&outdated).await?;
            outdated = self.stage_and_start(start, None, &local_datasets).await?;
            if !outdated.is_empty() {
                bail!(
                    "the agent on host(s) {outdated:?} is still not podq {} after installing it",
                    env!("CARGO_PKG_VERSION")
                );
            }
        }
        Ok(())
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
        let script = remote::signal(lease, kill);
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

    #[test]
    fn the_config_names_its_datasets() {
        let yaml = b"data_paths:\n  - data/sudoku\n  - gs://b/d\ndata_paths_test: []\nlr: 1\n";
        assert_eq!(config_datasets(yaml), vec!["data/sudoku", "gs://b/d"]);
        assert_eq!(config_datasets(b"data_paths: one\n"), vec!["one"]);
        assert!(config_datasets(b"lr: 1\n").is_empty());
    }

    #[test]
    fn the_odd_host_out_is_found() {
        let values = BTreeMap::from([
            (0, "a".to_owned()),
            (1, "a".to_owned()),
            (2, "b".to_owned()),
        ]);
        assert_eq!(majority(&values), Some("a"));
        let tie = BTreeMap::from([(0, "x".to_owned()), (1, "y".to_owned())]);
        assert_eq!(majority(&tie), Some("x"));
    }

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
