//! `podq pool --pools FILE`: drives every pool the file declares, each slice with a worker
//! daemon configured as `podq worker` would be (the same flags, file and variables).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use clap::Args;
use tokio_util::sync::CancellationToken;

use super::config::PoolFile;
use super::rate::CreateRate;
use super::run::{PoolRun, PoolSettings};
use crate::client::ServerClient;
use crate::config::WorkerArgs;

#[derive(Args, Debug, Clone)]
pub struct PoolArgs {
    /// The pool file (`pools:` a list; see docs/operations/pools.md, "Pools").
    #[arg(long, env = "PODQ_POOLS")]
    pub pools: PathBuf,
    /// Where the pools keep their journals, the local driver's simulated cloud and each
    /// slice's hosts and worker state [default: ./podq-data/pools].
    #[arg(long, env = "PODQ_POOL_STATE")]
    pub pool_state: Option<PathBuf>,
    /// Seconds between two looks at the cloud and the queue [default: 10].
    #[arg(long, env = "PODQ_POOL_TICK_S")]
    pub tick_s: Option<f64>,
    /// local driver: seconds the simulated cloud takes to make a slice [default: 3].
    #[arg(long, env = "PODQ_SIM_CREATE_S")]
    pub sim_create_s: Option<f64>,
    /// local driver: where the simulated cloud lives; two installations given one
    /// directory share one cloud, as two podq installations share a Google Cloud project
    /// [default: <pool-state>/cloud].
    #[arg(long, env = "PODQ_SIM_CLOUD")]
    pub sim_cloud: Option<PathBuf>,
    /// Seconds a slice may be READY without its worker ever calling before it is deleted and
    /// replaced [default: gcloud.setup_timeout_s + 10 min, at least 30 min].
    #[arg(long, env = "PODQ_BOOT_DEADLINE_S")]
    pub boot_deadline_s: Option<f64>,
    /// Slice creates a minute, over every pool of this process (the APIs limit a project's
    /// requests a minute) [default: 60].
    #[arg(long, env = "PODQ_POOL_CREATES_PER_MINUTE", value_parser = clap::value_parser!(u32).range(1..))]
    pub creates_per_minute: Option<u32>,
    /// Each slice's worker: the server, token, trainer command and timings, as for
    /// `podq worker` (its pod, driver and pod root come from the pool).
    #[command(flatten)]
    pub worker: WorkerArgs,
}

impl PoolArgs {
    /// The pool file read and checked, and how its pools run.
    pub fn resolve(&self) -> anyhow::Result<(PoolFile, PoolSettings, ServerClient)> {
        let file = PoolFile::load(&self.pools).map_err(anyhow::Error::msg)?;
        let config = self.worker.resolve()?;
        let daemon = config.settings()?;
        let state_dir = self
            .pool_state
            .clone()
            .unwrap_or_else(|| PathBuf::from("./podq-data/pools"));
        let seconds = |value: Option<f64>, default: f64, what: &str| {
            Duration::try_from_secs_f64(value.unwrap_or(default))
                .with_context(|| format!("{what} must be a number of seconds"))
        };
        let settings = PoolSettings {
            tick: seconds(self.tick_s, 10.0, "--tick-s")?.max(Duration::from_millis(100)),
            sim_cloud: self
                .sim_cloud
                .clone()
                .unwrap_or_else(|| state_dir.join("cloud")),
            state_dir,
            daemon,
            hosts: config.hosts,
            gcloud: config.gcloud.clone(),
            sim_create_time: seconds(self.sim_create_s, 3.0, "--sim-create-s")?,
            // The worker calls once its setup and preflight are done, which may take the
            // whole setup timeout.
            boot_deadline: seconds(
                self.boot_deadline_s,
                (config.gcloud.setup_timeout_s + 600.0).max(1800.0),
                "--boot-deadline-s",
            )?,
            create_rate: Arc::new(CreateRate::per_minute(
                self.creates_per_minute
                    .unwrap_or(super::rate::DEFAULT_CREATES_PER_MINUTE),
            )),
        };
        let client = ServerClient::new(
            &config.server,
            config.token.clone(),
            config.ca.as_ref(),
            CancellationToken::new(),
        );
        Ok((file, settings, client))
    }
}

/// Runs every pool of `args` until `shutdown`.
pub async fn run(args: PoolArgs, shutdown: CancellationToken) -> anyhow::Result<()> {
    let (file, settings, client) = args.resolve()?;
    run_pools(
        file,
        settings,
        client.with_shutdown(shutdown.clone()),
        shutdown,
    )
    .await
}

/// Runs every pool of `file`, each in its own task, until `shutdown`.
pub async fn run_pools(
    file: PoolFile,
    settings: PoolSettings,
    client: ServerClient,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    let mut tasks = Vec::new();
    for pool in file.pools {
        let mut settings = settings.clone();
        if let Some(hosts) = pool.hosts {
            settings.hosts = hosts;
        }
        let run = PoolRun::new(pool, client.clone(), settings)?;
        tasks.push(tokio::spawn(run.run(shutdown.clone())));
    }
    for task in tasks {
        task.await.context("a pool's task")??;
    }
    Ok(())
}
