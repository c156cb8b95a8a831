//! `podq worker`: settings and start-up of the worker daemon.
//!
//! Settings come from, in order of precedence: command-line flags, environment variables
//! (`PODQ_*`), the YAML config file (`--config`), built-in defaults.

mod file;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context};
use clap::{Args, ValueEnum};
use serde::Deserialize;
use tokio_util::sync::CancellationToken;

pub use file::WorkerFile;

use crate::attempt::AttemptSettings;
use crate::client::ServerClient;
use crate::daemon::{self, DaemonSettings};
use crate::pod::gcloud::{Api, Capacity, GcloudPod, GcloudSettings, ProvisioningModel};
use crate::pod::local::LocalPod;
use crate::pod::PodDriver;
use crate::trust::CaFile;

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Driver {
    /// A simulated pod of local process groups (tests, demos, `podq up`).
    Local,
    /// A Cloud TPU VM driven through the gcloud CLI.
    Gcloud,
}

#[derive(Args, Debug, Clone, Default)]
pub struct WorkerArgs {
    /// A YAML config file; flags and PODQ_* variables override what it says.
    #[arg(long, env = "PODQ_WORKER_CONFIG")]
    pub config: Option<PathBuf>,
    /// The podq server [default: http://127.0.0.1:8080]; several, separated by commas, when
    /// a standby shares the active server's database (the worker moves to the one that
    /// answers).
    #[arg(long, env = "PODQ_SERVER")]
    pub server: Option<String>,
    /// The worker token.
    #[arg(long, env = "PODQ_WORKER_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// A file holding the worker token.
    #[arg(long, env = "PODQ_WORKER_TOKEN_FILE")]
    pub token_file: Option<PathBuf>,
    /// The CA certificate(s) (PEM) that signed an https:// server's certificate; trusted
    /// instead of the system's roots.
    #[arg(long, env = "PODQ_CA")]
    pub ca: Option<PathBuf>,
    /// The pod's name (the TPU node) [default: stable-1].
    #[arg(long, env = "PODQ_POD")]
    pub pod: Option<String>,
    /// The pod driver [default: local].
    #[arg(long, env = "PODQ_DRIVER", value_enum)]
    pub driver: Option<Driver>,
    /// The pod's accelerator type, as the suite's jobs ask for it [default: v4-64].
    #[arg(long, env = "PODQ_ACCELERATOR")]
    pub accelerator: Option<String>,
    /// Hosts of the pod [default: 8, as a v4-64]; the gcloud driver reads the node's.
    #[arg(long, env = "PODQ_HOSTS")]
    pub hosts: Option<u32>,
    /// local driver: where the simulated hosts' directories live [default: ./podq-data/pod].
    #[arg(long, env = "PODQ_POD_ROOT")]
    pub pod_root: Option<PathBuf>,
    /// local driver: how long a preempted simulated pod takes to come back, in seconds
    /// [default: 2].
    #[arg(long, env = "PODQ_RECOVERY_DELAY_S")]
    pub recovery_delay_s: Option<f64>,
    /// Overrides of the gcloud driver's settings.
    #[command(flatten)]
    pub gcloud: Box<GcloudArgs>,
    /// The trainer command run on every host. Placeholders: {config_dir}, {experiment},
    /// {checkpoint_dir}, {resume_from} (`null` when none), {host_index}, {host_count}.
    /// Default for the local driver: the sim trainer of this binary.
    #[arg(long, env = "PODQ_TRAINER_COMMAND")]
    pub trainer_command: Option<String>,
    /// Extra environment for the trainer, KEY=VALUE (repeatable).
    #[arg(long = "trainer-env", value_parser = parse_key_value)]
    pub trainer_env: Vec<(String, String)>,
    /// Seconds between SIGTERM and SIGKILL when stopping the hosts [default: 10].
    #[arg(long, env = "PODQ_STOP_GRACE_S")]
    pub stop_grace_s: Option<f64>,
    /// Seconds between polls of the pod's state [default: 15].
    #[arg(long, env = "PODQ_STATUS_POLL_S")]
    pub status_poll_s: Option<f64>,
    /// Seconds without step progress after which a running attempt is hung [default: 600].
    #[arg(long, env = "PODQ_HANG_TIMEOUT_S")]
    pub hang_timeout_s: Option<f64>,
    /// Seconds a host's agent may stay silent, while its trainer runs, before a new agent
    /// is started there to adopt the trainer [default: 30].
    #[arg(long, env = "PODQ_AGENT_SILENCE_S")]
    pub agent_silence_s: Option<f64>,
    /// Seconds before an announced maintenance window opens at which a running attempt is
    /// stopped (SIGTERM, the full grace, not charged) and leasing paused [default: 600].
    #[arg(long, env = "PODQ_MAINTENANCE_LEAD_S")]
    pub maintenance_lead_s: Option<f64>,
    /// Seconds a maintenance event may last under a running attempt before it ends as
    /// preempted [default: 3600].
    #[arg(long, env = "PODQ_MAINTENANCE_TIMEOUT_S")]
    pub maintenance_timeout_s: Option<f64>,
    /// Seconds between metric batches [default: 2].
    #[arg(long, env = "PODQ_METRICS_FLUSH_S")]
    pub metrics_flush_s: Option<f64>,
    /// Seconds between scans of the checkpoint store [default: 10].
    #[arg(long, env = "PODQ_CHECKPOINT_SCAN_S")]
    pub checkpoint_scan_s: Option<f64>,
    /// Seconds a lease request waits on the server for work [default: 20].
    #[arg(long, env = "PODQ_LEASE_WAIT_S")]
    pub lease_wait_s: Option<u64>,
    /// Seconds before checking again after a failed preflight or recovery [default: 5].
    #[arg(long, env = "PODQ_PREFLIGHT_RETRY_S")]
    pub preflight_retry_s: Option<f64>,
    /// Where the hosts' agents reach this worker: the address to listen on
    /// [default: 127.0.0.1:0, any free port, kept across restarts].
    #[arg(long, env = "PODQ_AGENT_LISTEN")]
    pub agent_listen: Option<std::net::SocketAddr>,
    /// The URL the agents are given, when it is not the listen address (the worker VM's
    /// internal IP, e.g. http://10.128.0.2:7433).
    #[arg(long, env = "PODQ_AGENT_URL")]
    pub agent_url: Option<String>,
    /// Where the worker writes down its running attempt, to reattach after a restart
    /// [default: <pod-root>/worker-state for the local driver, ~/.local/state/podq otherwise].
    #[arg(long, env = "PODQ_STATE_DIR")]
    pub state_dir: Option<PathBuf>,
    /// Do not give trainers JAX's persistent compilation cache (`JAX_COMPILATION_CACHE_DIR`
    /// under the bucket, per slice type), so every attempt compiles from zero.
    #[arg(long, env = "PODQ_NO_COMPILE_CACHE")]
    pub no_compile_cache: bool,
}

/// Command-line overrides of the `gcloud:` section of the config file.
#[derive(Args, Debug, Clone, Default)]
pub struct GcloudArgs {
    /// gcloud driver: the node's zone.
    #[arg(long, env = "PODQ_ZONE")]
    pub zone: Option<String>,
    /// gcloud driver: the project (default: gcloud's configured one).
    #[arg(long, env = "PODQ_PROJECT")]
    pub project: Option<String>,
    /// gcloud driver: preemptible, spot, queued or on-demand [default: preemptible].
    #[arg(long, env = "PODQ_CAPACITY")]
    pub capacity: Option<Capacity>,
    /// gcloud driver: the queued resource owning the node [default: <pod>-qr].
    #[arg(long, env = "PODQ_QUEUED_RESOURCE")]
    pub queued_resource: Option<String>,
    /// gcloud driver: the JAX coordinator's port on host 0 [default: 1234].
    #[arg(long, env = "PODQ_COORDINATOR_PORT")]
    pub coordinator_port: Option<u16>,
    /// gcloud driver: the trainer's code checkout on every host
    /// [default: ~/TinyRecursiveModels].
    #[arg(long, env = "PODQ_CODE_DIR")]
    pub code_dir: Option<String>,
    /// gcloud driver: re-provisions every host after a recovery.
    #[arg(long, env = "PODQ_SETUP_COMMAND")]
    pub setup_command: Option<String>,
    /// gcloud driver: the user to log in as on the hosts (`user@node`) [default: gcloud's,
    /// the local login name].
    #[arg(long, env = "PODQ_REMOTE_USER")]
    pub remote_user: Option<String>,
}

fn parse_key_value(s: &str) -> Result<(String, String), String> {
    s.split_once('=')
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .filter(|(k, _)| !k.is_empty())
        .ok_or_else(|| format!("`{s}` is not KEY=VALUE"))
}

fn default_state_dir(driver: Driver, pod_root: &std::path::Path) -> PathBuf {
    match driver {
        Driver::Local => pod_root.join("worker-state"),
        Driver::Gcloud => std::env::var_os("HOME")
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from("."))
            .join(".local/state/podq"),
    }
}

fn seconds(value: f64, what: &str) -> anyhow::Result<Duration> {
    Duration::try_from_secs_f64(value)
        .with_context(|| format!("{what} must be a non-negative number of seconds"))
}

/// The sim trainer as this very binary runs it.
pub fn default_trainer_command() -> anyhow::Result<String> {
    let exe = std::env::current_exe().context("cannot find this program's path")?;
    let exe = exe.to_str().context("this program's path is not UTF-8")?;
    let exe = crate::shell::word(exe, "this program's path")?;
    Ok(format!(
        "{exe} sim-trainer --config-path {{config_dir}} --config-name {{experiment}} \
         checkpoint_path={{checkpoint_dir}} load_checkpoint={{resume_from}}"
    ))
}

/// Every setting of the worker, resolved from flags, environment, file and defaults.
#[derive(Debug, Clone)]
pub struct WorkerConfig {
    pub server: String,
    pub token: Option<String>,
    /// The private CA of an `https://` server's certificate.
    pub ca: Option<CaFile>,
    pub pod: String,
    pub driver: Driver,
    pub accelerator: String,
    pub hosts: u32,
    pub pod_root: PathBuf,
    pub recovery_delay_s: f64,
    pub gcloud: GcloudSettings,
    pub trainer_command: Option<String>,
    pub trainer_env: BTreeMap<String, String>,
    pub stop_grace_s: f64,
    pub status_poll_s: f64,
    pub hang_timeout_s: f64,
    pub agent_silence_s: f64,
    pub maintenance_lead_s: f64,
    pub maintenance_timeout_s: f64,
    pub metrics_flush_s: f64,
    pub checkpoint_scan_s: f64,
    pub lease_wait_s: u64,
    pub preflight_retry_s: f64,
    pub agent_listen: std::net::SocketAddr,
    pub agent_url: Option<String>,
    pub state_dir: PathBuf,
    pub compile_cache: bool,
}

fn read_token(path: &std::path::Path) -> anyhow::Result<String> {
    let token = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read the token file {}", path.display()))?;
    let token = token.trim().to_owned();
    if token.is_empty() {
        bail!("the token file {} is empty", path.display());
    }
    Ok(token)
}

impl WorkerArgs {
    /// Merges flags and environment (already in `self`) over the config file and defaults.
    pub fn resolve(&self) -> anyhow::Result<WorkerConfig> {
        let file = match &self.config {
            Some(path) => WorkerFile::load(path)?,
            None => WorkerFile::default(),
        };
        let token = match (&self.token, &self.token_file) {
            (Some(token), _) => Some(token.clone()),
            (None, Some(path)) => Some(read_token(path)?),
            (None, None) => match (&file.token, &file.token_file) {
                (Some(token), _) => Some(token.clone()),
                (None, Some(path)) => Some(read_token(path)?),
                (None, None) => None,
            },
        }
        .filter(|t| !t.is_empty());
        let ca = match self.ca.as_ref().or(file.ca.as_ref()) {
            Some(path) => Some(CaFile::load(path)?),
            None => None,
        };
        let mut gcloud = file.gcloud.clone().unwrap_or_default();
        let flags = &self.gcloud;
        if let Some(zone) = &flags.zone {
            gcloud.zone = zone.clone();
        }
        if let Some(project) = &flags.project {
            gcloud.project = Some(project.clone());
        }
        if let Some(capacity) = flags.capacity {
            gcloud.capacity = capacity;
        }
        if let Some(qr) = &flags.queued_resource {
            gcloud.queued_resource = Some(qr.clone());
        }
        if let Some(port) = flags.coordinator_port {
            gcloud.coordinator_port = port;
        }
        if let Some(dir) = &flags.code_dir {
            gcloud.code_dir = dir.clone();
        }
        if let Some(command) = &flags.setup_command {
            gcloud.setup_command = Some(command.clone());
        }
        if let Some(user) = &flags.remote_user {
            gcloud.user = Some(user.clone());
        }
        let mut trainer_env = file.trainer_env.clone();
        trainer_env.extend(self.trainer_env.iter().cloned());
        let driver = self.driver.or(file.driver).unwrap_or(Driver::Local);
        let pod_root = self
            .pod_root
            .clone()
            .or(file.local.pod_root.clone())
            .unwrap_or_else(|| PathBuf::from("./podq-data/pod"));
        Ok(WorkerConfig {
            server: self
                .server
                .clone()
                .or(file.server)
                .unwrap_or_else(|| "http://127.0.0.1:8080".into()),
            token,
            ca,
            pod: self
                .pod
                .clone()
                .or(file.pod)
                .unwrap_or_else(|| "stable-1".into()),
            driver,
            accelerator: self
                .accelerator
                .clone()
                .or(file.accelerator)
                .unwrap_or_else(|| "v4-64".into()),
            hosts: self.hosts.or(file.hosts).unwrap_or(8),
            pod_root: pod_root.clone(),
            recovery_delay_s: self
                .recovery_delay_s
                .or(file.local.recovery_delay_s)
                .unwrap_or(2.0),
            gcloud,
            trainer_command: self.trainer_command.clone().or(file.trainer_command),
            trainer_env,
            stop_grace_s: self.stop_grace_s.or(file.stop_grace_s).unwrap_or(10.0),
            status_poll_s: self.status_poll_s.or(file.status_poll_s).unwrap_or(15.0),
            hang_timeout_s: self.hang_timeout_s.or(file.hang_timeout_s).unwrap_or(600.0),
            agent_silence_s: self
                .agent_silence_s
                .or(file.agent_silence_s)
                .unwrap_or(30.0),
            maintenance_lead_s: self
                .maintenance_lead_s
                .or(file.maintenance_lead_s)
                .unwrap_or(600.0),
            maintenance_timeout_s: self
                .maintenance_timeout_s
                .or(file.maintenance_timeout_s)
                .unwrap_or(3600.0),
            metrics_flush_s: self.metrics_flush_s.or(file.metrics_flush_s).unwrap_or(2.0),
            checkpoint_scan_s: self
                .checkpoint_scan_s
                .or(file.checkpoint_scan_s)
                .unwrap_or(10.0),
            lease_wait_s: self.lease_wait_s.or(file.lease_wait_s).unwrap_or(20),
            preflight_retry_s: self
                .preflight_retry_s
                .or(file.preflight_retry_s)
                .unwrap_or(5.0),
            agent_listen: self
                .agent_listen
                .or(file.agent_listen)
                .unwrap_or_else(|| std::net::SocketAddr::from(([127, 0, 0, 1], 0))),
            agent_url: self.agent_url.clone().or(file.agent_url),
            state_dir: match self.state_dir.clone().or(file.state_dir) {
                Some(dir) => dir,
                None => default_state_dir(driver, &pod_root),
            },
            compile_cache: !self.no_compile_cache,
        })
    }
}

impl WorkerConfig {
    pub fn driver(&self) -> anyhow::Result<Arc<dyn PodDriver>> {
        if self.hosts == 0 {
            bail!("--hosts must be at least 1");
        }
        // A pod of a type podq does not know would lease nothing: no job can list it.
        if let Err(unknown) = podq_api::slice_type(&self.accelerator) {
            bail!("--accelerator {unknown}");
        }
        match self.driver {
            Driver::Local => Ok(Arc::new(LocalPod::new(
                &self.pod,
                &self.accelerator,
                self.hosts,
                &self.pod_root,
                seconds(self.recovery_delay_s, "--recovery-delay-s")?,
            )?)),
            Driver::Gcloud => {
                self.check_flex_start()?;
                self.gcloud_pod()
            }
        }
    }

    /// A flex-start slice must outlive the stop ahead of its end, or nothing could run on it.
    fn check_flex_start(&self) -> anyhow::Result<()> {
        let compute = &self.gcloud.compute;
        if self.gcloud.api != Api::Compute
            || compute.provisioning_model != ProvisioningModel::FlexStart
        {
            return Ok(());
        }
        let lives = compute.max_run_duration_s.unwrap_or(0.0);
        let stop_ahead = self.maintenance_lead_s + self.stop_grace_s;
        if lives <= stop_ahead {
            bail!(
                "a flex-start slice lives {lives} s (gcloud.compute.max_run_duration_s), but runs \
                 on it are stopped {stop_ahead} s before its end (maintenance_lead_s + \
                 stop_grace_s): nothing could ever run on it"
            );
        }
        Ok(())
    }

    fn gcloud_pod(&self) -> anyhow::Result<Arc<dyn PodDriver>> {
        Ok(Arc::new(GcloudPod::new(
            &self.pod,
            &self.accelerator,
            self.hosts,
            GcloudSettings {
                state_dir: Some(self.state_dir.clone()),
                ..self.gcloud.clone()
            },
        )?))
    }

    pub fn settings(&self) -> anyhow::Result<DaemonSettings> {
        let trainer_command = match (&self.trainer_command, self.driver) {
            (Some(command), _) => command.clone(),
            (None, Driver::Local) => default_trainer_command()?,
            (None, Driver::Gcloud) => bail!(
                "the gcloud driver needs a trainer command (trainer_command in the config \
                 file, --trainer-command or PODQ_TRAINER_COMMAND)"
            ),
        };
        if self.driver == Driver::Gcloud {
            check_agent_address(self.agent_listen, self.agent_url.as_deref())?;
        }
        Ok(DaemonSettings {
            attempt: AttemptSettings {
                trainer_command,
                trainer_env: self.trainer_env.clone(),
                stop_grace: seconds(self.stop_grace_s, "--stop-grace-s")?,
                status_poll: seconds(self.status_poll_s, "--status-poll-s")?
                    .max(Duration::from_millis(50)),
                hang_timeout: seconds(self.hang_timeout_s, "--hang-timeout-s")?,
                agent_silence: seconds(self.agent_silence_s, "--agent-silence-s")?
                    .max(Duration::from_millis(500)),
                maintenance_lead: seconds(self.maintenance_lead_s, "--maintenance-lead-s")?,
                maintenance_timeout: seconds(
                    self.maintenance_timeout_s,
                    "--maintenance-timeout-s",
                )?,
                metrics_flush: seconds(self.metrics_flush_s, "--metrics-flush-s")?
                    .max(Duration::from_millis(10)),
                metrics_max_points: 1000,
                checkpoint_scan: seconds(self.checkpoint_scan_s, "--checkpoint-scan-s")?
                    .max(Duration::from_millis(50)),
                detach_on_shutdown: true,
                compile_cache: self.compile_cache,
            },
            agent_listen: self.agent_listen,
            agent_url: self.agent_url.clone(),
            state_dir: self.state_dir.clone(),
            lease_wait: Duration::from_secs(self.lease_wait_s.clamp(1, 60)),
            preflight_retry: seconds(self.preflight_retry_s, "--preflight-retry-s")?
                .max(Duration::from_millis(50)),
        })
    }
}

pub async fn run(args: WorkerArgs, shutdown: CancellationToken) -> anyhow::Result<()> {
    let config = args.resolve()?;
    let driver = config.driver()?;
    let settings = config.settings()?;
    if config.token.is_none() && !is_loopback(&config.server) {
        tracing::warn!(
            server = %config.server,
            "no worker token configured for a server that is not on this machine"
        );
    }
    let client = ServerClient::new(
        &config.server,
        config.token.clone(),
        config.ca.as_ref(),
        shutdown.clone(),
    );
    daemon::run(client, driver, settings, shutdown).await
}

/// Refuses an agent address no TPU host can reach. The agents run on the hosts and call
/// the worker: on a host, 127.0.0.1 is that host, and a worker listening on loopback takes
/// no connection from another machine.
fn check_agent_address(listen: std::net::SocketAddr, url: Option<&str>) -> anyhow::Result<()> {
    const FIX: &str = "the agents on the TPU hosts call this worker: listen on its internal \
                       interface (agent_listen, --agent-listen, PODQ_AGENT_LISTEN; e.g. \
                       0.0.0.0:7433) and give them its internal address (agent_url, \
                       --agent-url, PODQ_AGENT_URL; e.g. http://10.128.0.2:7433)";
    if listen.ip().is_loopback() {
        bail!("agent_listen {listen} is a loopback address, which no TPU host can reach: {FIX}");
    }
    match url {
        Some(url) => {
            let parsed = url::Url::parse(url)
                .with_context(|| format!("agent_url `{url}` is not a URL: {FIX}"))?;
            let host = parsed.host_str().unwrap_or_default();
            let ip = host
                .trim_matches(|c| c == '[' || c == ']')
                .parse::<std::net::IpAddr>()
                .ok();
            if host == "localhost" || ip.is_some_and(|ip| ip.is_loopback() || ip.is_unspecified()) {
                bail!(
                    "agent_url `{url}` is not an address of this worker that a TPU host can \
                     reach (on a host, {host} is the host itself): {FIX}"
                );
            }
        }
        None if listen.ip().is_unspecified() => bail!(
            "agent_listen {listen} listens on every interface, so it cannot tell the agents \
             which address to call: set agent_url too ({FIX})"
        ),
        None => {}
    }
    Ok(())
}

/// Whether every server named (comma-separated) is on this machine.
fn is_loopback(servers: &str) -> bool {
    let servers = crate::client::server_list(servers);
    !servers.is_empty()
        && servers.iter().all(|server| {
            url::Url::parse(server)
                .ok()
                .and_then(|u| u.host_str().map(str::to_owned))
                .is_some_and(|h| h == "localhost" || h == "127.0.0.1" || h == "[::1]")
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &std::path::Path, name: &str, text: &str) -> PathBuf {
        let path = dir.join(name);
        std::fs::write(&path, text).unwrap();
        path
    }

    #[test]
    fn flags_win_over_the_file_and_the_file_over_defaults() {
        let dir = std::env::temp_dir().join(format!("podq-cli-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).unwrap();
        write(&dir, "token", "s3cret\n");
        let config = write(
            &dir,
            "worker.yaml",
            "server: http://10.0.0.2:8080\ntoken_file: token\npod: stable-1\ndriver: gcloud\n\
             trainer_command: run {experiment}\ntrainer_env: {A: file, B: file}\n\
             agent_listen: 0.0.0.0:7433\nagent_url: http://10.0.0.3:7433\n\
             status_poll_s: 30\ngcloud:\n  zone: us-central2-b\n  project: p\n  capacity: spot\n",
        );
        let args = WorkerArgs {
            config: Some(config),
            status_poll_s: Some(1.0),
            gcloud: Box::new(GcloudArgs {
                project: Some("other".into()),
                ..GcloudArgs::default()
            }),
            trainer_env: vec![("B".into(), "flag".into())],
            ..WorkerArgs::default()
        };
        let resolved = args.resolve().unwrap();
        assert_eq!(resolved.server, "http://10.0.0.2:8080");
        assert_eq!(resolved.token.as_deref(), Some("s3cret"));
        assert_eq!(resolved.driver, Driver::Gcloud);
        assert_eq!(resolved.status_poll_s, 1.0);
        assert_eq!(resolved.hang_timeout_s, 600.0);
        assert_eq!(resolved.gcloud.zone, "us-central2-b");
        assert_eq!(resolved.gcloud.project.as_deref(), Some("other"));
        assert_eq!(resolved.gcloud.capacity, Capacity::Spot);
        assert_eq!(resolved.trainer_env["A"], "file");
        assert_eq!(resolved.trainer_env["B"], "flag");
        assert!(resolved.settings().is_ok());
        assert!(resolved.driver().is_ok());

        let inline = WorkerArgs {
            token: Some("flag-token".into()),
            ..args
        };
        assert_eq!(
            inline.resolve().unwrap().token.as_deref(),
            Some("flag-token")
        );
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn the_gcloud_driver_needs_a_trainer_command_and_a_zone() {
        let config = WorkerArgs {
            driver: Some(Driver::Gcloud),
            ..WorkerArgs::default()
        }
        .resolve()
        .unwrap();
        assert!(config.settings().is_err());
        assert!(config.driver().is_err());
    }

    #[test]
    fn the_gcloud_driver_refuses_an_agent_address_no_host_can_reach() {
        let gcloud = |listen: &str, url: Option<&str>| {
            WorkerArgs {
                driver: Some(Driver::Gcloud),
                trainer_command: Some("run {experiment}".into()),
                agent_listen: Some(listen.parse().unwrap()),
                agent_url: url.map(str::to_owned),
                ..WorkerArgs::default()
            }
            .resolve()
            .unwrap()
            .settings()
            .map(|_| ())
            .map_err(|e| e.to_string())
        };
        let refused = gcloud("127.0.0.1:7433", None).unwrap_err();
        assert!(
            refused.contains("agent_listen 127.0.0.1:7433 is a loopback address"),
            "{refused}"
        );
        assert!(refused.contains("PODQ_AGENT_URL"), "{refused}");
        let refused = gcloud("0.0.0.0:7433", Some("http://127.0.0.1:7433")).unwrap_err();
        assert!(
            refused.contains("agent_url `http://127.0.0.1:7433`"),
            "{refused}"
        );
        let refused = gcloud("0.0.0.0:7433", Some("http://localhost:7433")).unwrap_err();
        assert!(
            refused.contains("localhost is the host itself"),
            "{refused}"
        );
        assert!(gcloud("0.0.0.0:7433", None).is_err());
        assert!(gcloud("0.0.0.0:7433", Some("http://10.128.0.2:7433")).is_ok());
        assert!(gcloud("10.128.0.2:7433", None).is_ok());
        // The local driver's agents are processes of this machine.
        let local = WorkerArgs {
            trainer_command: Some("run".into()),
            ..WorkerArgs::default()
        };
        assert!(local.resolve().unwrap().settings().is_ok());
    }
}
