//! What a pool runs for its slices: the cloud it makes them in, each slice's pod driver, and
//! each slice's worker daemon, started and stopped.

use super::*;

/// The cloud a pool makes its slices in, and where their hosts are.
pub(super) fn slice_cloud(
    pool: &Pool,
    settings: &PoolSettings,
) -> anyhow::Result<(Arc<dyn SliceCloud>, SliceHosts)> {
    match pool.driver {
        PoolDriver::Local => {
            let scripts = pool
                .zones
                .iter()
                .filter_map(|z| Some((z.zone.clone(), z.sim.clone()?)))
                .collect();
            let sim = Arc::new(SimCloud::new(
                &settings.sim_cloud,
                scripts,
                settings.sim_create_time,
            )?);
            Ok((sim.clone(), SliceHosts::Local(sim)))
        }
        PoolDriver::Gcloud => {
            let daemon = &settings.daemon;
            if daemon.agent_listen.port() != 0 || daemon.agent_url.is_some() {
                anyhow::bail!(
                    "each slice of a gcloud pool runs a worker whose hosts' agents call it on a \
                     port of its own: set agent_listen to this machine's internal address with \
                     port 0 (e.g. 10.128.0.2:0) and leave agent_url unset (it is {}{})",
                    daemon.agent_listen,
                    daemon
                        .agent_url
                        .as_deref()
                        .map(|url| format!(", agent_url {url}"))
                        .unwrap_or_default()
                );
            }
            let gcloud = &settings.gcloud;
            let runner = Runner {
                program: gcloud.binary.clone(),
                retries: gcloud.retries,
                backoff: Duration::try_from_secs_f64(gcloud.retry_backoff_s)
                    .context("gcloud.retry_backoff_s must be a number of seconds")?,
            };
            let project = pool.project.clone().or_else(|| gcloud.project.clone());
            let cloud: Arc<dyn SliceCloud> = match pool.api {
                PoolApi::Tpu => {
                    let Some(runtime) = gcloud.create.runtime_version.clone() else {
                        anyhow::bail!(
                            "a gcloud pool's slices need a runtime version: set \
                             gcloud.create.runtime_version in the worker config (e.g. \
                             tpu-ubuntu2204-base)"
                        );
                    };
                    Arc::new(
                        GcloudCloud {
                            runner,
                            project,
                            zones: pool.zones.iter().map(|z| z.zone.clone()).collect(),
                            runtime_version: runtime,
                            provisioning: pool.provisioning,
                            extra_args: gcloud.create.extra_args.clone(),
                        }
                        .checked()?,
                    )
                }
                PoolApi::Compute => Arc::new(
                    ComputeCloud::new(
                        runner,
                        project,
                        gcloud.compute.clone(),
                        pool,
                        Duration::try_from_secs_f64(gcloud.poll_s)
                            .context("gcloud.poll_s must be a number of seconds")?,
                    )
                    .with_context(|| format!("pool {}", pool.name))?,
                ),
            };
            Ok((cloud, SliceHosts::Gcloud(Box::new(gcloud.clone()))))
        }
    }
}

/// The pod driver of slice `name`: what its worker daemon leases, launches and recovers on.
pub(super) fn slice_driver(
    pool: &Pool,
    settings: &PoolSettings,
    hosts: &SliceHosts,
    name: &str,
    held: &mut Held,
) -> anyhow::Result<Arc<dyn PodDriver>> {
    match hosts {
        SliceHosts::Local(sim) => {
            let driver = Arc::new(LocalPod::new(
                name,
                &pool.accelerator,
                settings.hosts,
                &sim.pod_root(name),
                Duration::from_secs(3),
            )?);
            held.driver = Some(driver.clone());
            Ok(driver)
        }
        SliceHosts::Gcloud(gcloud) => {
            let mut gcloud = (**gcloud).clone();
            gcloud.zone = held.life.zone.clone();
            gcloud.project = pool.project.clone().or(gcloud.project);
            gcloud.api = match pool.api {
                PoolApi::Tpu => Api::Tpu,
                PoolApi::Compute => Api::Compute,
            };
            gcloud.compute.provisioning_model = compute::model_of(pool.provisioning);
            gcloud.pool_owned = true;
            gcloud.capacity = match pool.provisioning {
                Provisioning::Spot => Capacity::Spot,
                _ => Capacity::OnDemand,
            };
            gcloud.state_dir = Some(
                settings
                    .state_dir
                    .join(&pool.name)
                    .join("slices")
                    .join(name),
            );
            Ok(Arc::new(GcloudPod::new(
                name,
                &pool.accelerator,
                settings.hosts,
                gcloud,
            )?))
        }
    }
}

/// Cancels a slice's daemon. One that does not end within `DAEMON_STOP` (blocked in a call
/// to hosts that hang) is aborted: the pool never waits on one slice.
pub(super) async fn stop_daemon((token, mut task): (CancellationToken, JoinHandle<()>)) {
    token.cancel();
    if tokio::time::timeout(DAEMON_STOP, &mut task).await.is_err() {
        task.abort();
    }
}

/// The worker's daemon for slice `name`, its state under `dir`.
pub(super) fn start_daemon(
    client: &ServerClient,
    settings: &PoolSettings,
    name: &str,
    driver: Arc<dyn PodDriver>,
    dir: PathBuf,
    shutdown: &CancellationToken,
) -> (CancellationToken, JoinHandle<()>) {
    let mut daemon_settings = settings.daemon.clone();
    daemon_settings.state_dir = dir.join("worker-state");
    let token = shutdown.child_token();
    let (client, stop) = (client.with_shutdown(token.clone()), token.clone());
    let name = name.to_owned();
    let task = tokio::spawn(async move {
        if let Err(e) = daemon::run(client, driver, daemon_settings, stop).await {
            tracing::error!(slice = %name, error = %format!("{e:#}"), "the slice's worker stopped");
        }
    });
    (token, task)
}
