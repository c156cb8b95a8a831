//! `podq worker`: settings and start-up of the worker daemon.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context};
use clap::{Args, ValueEnum};
use tokio_util::sync::CancellationToken;

use crate::attempt::AttemptSettings;
use crate::client::ServerClient;
use crate::daemon::{self, DaemonSettings};
use crate::pod::local::LocalPod;
use crate::pod::PodDriver;

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Driver {
    /// A simulated pod of local process groups (tests, demos, `podq up`).
    Local,
}

#[derive(Args, Debug, Clone)]
pub struct WorkerArgs {
    /// The podq server.
    #[arg(long, env = "PODQ_SERVER", default_value = "http://127.0.0.1:8080")]
    pub server: String,
    /// The worker token.
    #[arg(long, env = "PODQ_WORKER_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// The pod's name (the TPU node).
    #[arg(long, env = "PODQ_POD", default_value = "stable-1")]
    pub pod: String,
    #[arg(long, env = "PODQ_DRIVER", value_enum, default_value_t = Driver::Local)]
    pub driver: Driver,
    #[arg(long, env = "PODQ_ACCELERATOR", default_value = "v4-64")]
    pub accelerator: String,
    /// Hosts of the pod (8 for a v4-64).
    #[arg(long, env = "PODQ_HOSTS", default_value_t = 8)]
    pub hosts: u32,
    /// local driver: where the simulated hosts' directories live.
    #[arg(long, env = "PODQ_POD_ROOT", default_value = "./podq-data/pod")]
    pub pod_root: PathBuf,
    /// local driver: how long a preempted simulated pod takes to come back, in seconds.
    #[arg(long, env = "PODQ_RECOVERY_DELAY_S", default_value_t = 2.0)]
    pub recovery_delay_s: f64,
    /// The trainer command run on every host. Placeholders: {config_dir}, {experiment},
    /// {checkpoint_dir}, {resume_from} (`null` when none), {host_index}, {host_count}.
    /// Default: the sim trainer of this binary.
    #[arg(long, env = "PODQ_TRAINER_COMMAND")]
    pub trainer_command: Option<String>,
    /// Extra environment for the trainer, KEY=VALUE (repeatable).
    #[arg(long = "trainer-env", value_parser = parse_key_value)]
    pub trainer_env: Vec<(String, String)>,
    /// Seconds between SIGTERM and SIGKILL when stopping the hosts.
    #[arg(long, env = "PODQ_STOP_GRACE_S", default_value_t = 10.0)]
    pub stop_grace_s: f64,
    /// Seconds between polls of the pod's state.
    #[arg(long, env = "PODQ_STATUS_POLL_S", default_value_t = 15.0)]
    pub status_poll_s: f64,
    /// Seconds without step progress after which a running attempt is hung.
    #[arg(long, env = "PODQ_HANG_TIMEOUT_S", default_value_t = 600.0)]
    pub hang_timeout_s: f64,
    /// Seconds between metric batches.
    #[arg(long, env = "PODQ_METRICS_FLUSH_S", default_value_t = 2.0)]
    pub metrics_flush_s: f64,
    /// Seconds between scans of the checkpoint store.
    #[arg(long, env = "PODQ_CHECKPOINT_SCAN_S", default_value_t = 10.0)]
    pub checkpoint_scan_s: f64,
    /// Seconds a lease request waits on the server for work.
    #[arg(long, env = "PODQ_LEASE_WAIT_S", default_value_t = 20)]
    pub lease_wait_s: u64,
}

fn parse_key_value(s: &str) -> Result<(String, String), String> {
    s.split_once('=')
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .filter(|(k, _)| !k.is_empty())
        .ok_or_else(|| format!("`{s}` is not KEY=VALUE"))
}

fn seconds(value: f64, what: &str) -> anyhow::Result<Duration> {
    Duration::try_from_secs_f64(value)
        .with_context(|| format!("{what} must be a non-negative number of seconds"))
}

/// The sim trainer as this very binary runs it.
pub fn default_trainer_command() -> anyhow::Result<String> {
    let exe = std::env::current_exe().context("cannot find this program's path")?;
    Ok(format!(
        "'{}' sim-trainer --config-path {{config_dir}} --config-name {{experiment}} \
         checkpoint_path={{checkpoint_dir}} load_checkpoint={{resume_from}}",
        exe.display()
    ))
}

impl WorkerArgs {
    pub fn driver(&self) -> anyhow::Result<Arc<dyn PodDriver>> {
        if self.hosts == 0 {
            bail!("--hosts must be at least 1");
        }
        match self.driver {
            Driver::Local => Ok(Arc::new(LocalPod::new(
                &self.pod,
                &self.accelerator,
                self.hosts,
                &self.pod_root,
                seconds(self.recovery_delay_s, "--recovery-delay-s")?,
            )?)),
        }
    }

    pub fn settings(&self) -> anyhow::Result<DaemonSettings> {
        let trainer_command = match &self.trainer_command {
            Some(command) => command.clone(),
            None => default_trainer_command()?,
        };
        Ok(DaemonSettings {
            attempt: AttemptSettings {
                trainer_command,
                trainer_env: self.trainer_env.iter().cloned().collect::<BTreeMap<_, _>>(),
                stop_grace: seconds(self.stop_grace_s, "--stop-grace-s")?,
                status_poll: seconds(self.status_poll_s, "--status-poll-s")?
                    .max(Duration::from_millis(50)),
                hang_timeout: seconds(self.hang_timeout_s, "--hang-timeout-s")?,
                metrics_flush: seconds(self.metrics_flush_s, "--metrics-flush-s")?
                    .max(Duration::from_millis(10)),
                metrics_max_points: 1000,
                checkpoint_scan: seconds(self.checkpoint_scan_s, "--checkpoint-scan-s")?
                    .max(Duration::from_millis(50)),
            },
            lease_wait: Duration::from_secs(self.lease_wait_s.clamp(1, 60)),
            preflight_retry: Duration::from_secs(5),
        })
    }
}

pub async fn run(args: WorkerArgs, shutdown: CancellationToken) -> anyhow::Result<()> {
    let driver = args.driver()?;
    let settings = args.settings()?;
    let client = ServerClient::new(&args.server, args.token.clone(), shutdown.clone());
    daemon::run(client, driver, settings, shutdown).await
}
