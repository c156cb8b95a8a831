//! `podq up`: the server, a simulated pod and its worker in one process, with the sim
//! trainer time-scaled so a whole training run takes about a minute.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use clap::Args;
use podq_api::SubmitRequest;
use podq_server::tls::TlsFiles;
use podq_worker::attempt::AttemptSettings;
use podq_worker::client::ServerClient;
use podq_worker::daemon::DaemonSettings;
use podq_worker::pod::local::LocalPod;
use podq_worker::trust::{explain, http_client, CaFile};

use crate::ServerArgs;

/// `up`'s own flags. They mirror `podq server`'s (`ServerArgs`, built from these below, so a
/// flag added there does not compile until it is here too), with the defaults `up` uses:
/// short lease and backoff times, so a simulated failure is retried in seconds. `--help`
/// says what runs.
#[derive(Args)]
pub struct UpArgs {
    /// Address to listen on. Anything but loopback needs both tokens.
    #[arg(long, env = "PODQ_LISTEN", default_value = "127.0.0.1:8080")]
    listen: SocketAddr,
    /// The SQLite database file (created if missing) [default: <data-dir>/podq.db].
    #[arg(long, env = "PODQ_DB")]
    db: Option<PathBuf>,
    /// The experiment catalog directory.
    #[arg(long, env = "PODQ_EXPERIMENTS", default_value = "./experiments")]
    experiments: PathBuf,
    /// Bearer token for state-changing user calls.
    #[arg(long, env = "PODQ_ADMIN_TOKEN", hide_env_values = true)]
    admin_token: Option<String>,
    /// Bearer token for workers.
    #[arg(long, env = "PODQ_WORKER_TOKEN", hide_env_values = true)]
    worker_token: Option<String>,
    /// Take the team's people from this YAML file instead of the store (see `podq server`).
    #[arg(long, env = "PODQ_USERS")]
    users: Option<PathBuf>,
    /// Serve reads without a token even when listening beyond loopback.
    #[arg(long, env = "PODQ_OPEN_READS")]
    open_reads: bool,
    /// No running attempt is evicted before it has run this long (e.g. 30m, 0s), whatever
    /// its priority class says.
    #[arg(long, env = "PODQ_EVICTION_MIN_RUNTIME", value_parser = crate::duration)]
    eviction_min_runtime: Option<std::time::Duration>,
    /// Seconds without a heartbeat after which a lease is reaped as lost.
    #[arg(long, default_value_t = 15)]
    lease_ttl_s: u64,
    /// Seconds between worker heartbeats.
    #[arg(long, default_value_t = 1)]
    heartbeat_s: u64,
    /// First retry delay after a failure, in seconds (doubles up to --backoff-cap-s).
    #[arg(long, default_value_t = 5)]
    backoff_s: u64,
    /// Longest retry delay after failures, in seconds.
    #[arg(long, default_value_t = 60)]
    backoff_cap_s: u64,
    /// End of the compute grant (RFC 3339): GET /api/v1/plan says which runs finish before it.
    #[arg(long, env = "PODQ_DEADLINE")]
    deadline: Option<chrono::DateTime<chrono::Utc>>,
    /// A YAML file listing webhook receivers (url, secret or secret_file, format json|slack,
    /// events); see docs/operations/server.md.
    #[arg(long, env = "PODQ_WEBHOOKS")]
    webhooks: Option<PathBuf>,
    /// Also serve /metrics on this address (it is always served on --listen).
    #[arg(long, env = "PODQ_METRICS_LISTEN")]
    metrics_listen: Option<SocketAddr>,
    /// Serve HTTPS with this certificate (PEM: the server's first, then any intermediates).
    /// Needs --tls-key. `up`'s own worker and calls trust it, or --ca.
    #[arg(long, env = "PODQ_TLS_CERT", value_name = "FILE", requires = "tls_key")]
    tls_cert: Option<PathBuf>,
    /// The private key (PEM) of --tls-cert.
    #[arg(long, env = "PODQ_TLS_KEY", value_name = "FILE", requires = "tls_cert")]
    tls_key: Option<PathBuf>,
    /// With --tls-cert: the CA certificate(s) (PEM) that signed it, which `up`'s own worker
    /// and calls trust [default: the --tls-cert file itself, for a self-signed certificate].
    #[arg(long, env = "PODQ_CA", value_name = "FILE")]
    ca: Option<PathBuf>,
    /// Where the database, the simulated pod's hosts and the checkpoints (`<data-dir>/bucket`,
    /// standing in for the GCS bucket) live.
    #[arg(long, env = "PODQ_DATA_DIR", default_value = "./podq-data")]
    data_dir: PathBuf,
    /// Hosts of the simulated pod.
    #[arg(long, default_value_t = 8)]
    hosts: u32,
    /// A whole simulated training run takes about this many seconds.
    #[arg(long, default_value_t = 60.0)]
    sim_run_secs: f64,
    /// What to submit at start: a group name, `all`, or `none`.
    #[arg(long, default_value = "exp07-precision")]
    submit: String,
    /// The trainer run on every simulated host, in place of the sim trainer (same
    /// placeholders as `podq worker --trainer-command`; each host runs it in its own
    /// directory, so give absolute paths), e.g. the JAX example:
    /// `exec $PWD/.venv/bin/python $PWD/examples/jax-trainer/pretrain.py --config-path
    /// {config_dir} --config-name {experiment} checkpoint_path={checkpoint_dir}
    /// load_checkpoint={resume_from}`.
    #[arg(long, env = "PODQ_TRAINER_COMMAND")]
    trainer_command: Option<String>,
    /// Instead of the one simulated pod, the pools of this file, each making simulated
    /// slices (of --hosts hosts) on demand and giving idle ones back (docs/operations/pools.md,
    /// "Pools"; deploy/pools/local.yaml).
    #[arg(long, env = "PODQ_UP_POOL")]
    pool: Option<PathBuf>,
    /// With --pool: where the simulated cloud lives [default: <data-dir>/pools/cloud]. Two
    /// `podq up --pool` given one directory share one cloud, as two installations share a
    /// Google Cloud project; each makes and keeps only its own slices.
    #[arg(long, env = "PODQ_SIM_CLOUD", requires = "pool")]
    sim_cloud: Option<PathBuf>,
}

pub async fn run(args: UpArgs) -> anyhow::Result<()> {
    // A bad pool file stops `up` before anything starts, naming its line.
    let pools = args
        .pool
        .as_deref()
        .map(podq_worker::pool::config::PoolFile::load)
        .transpose()
        .map_err(anyhow::Error::msg)?;
    if let Some(pool) = pools
        .iter()
        .flat_map(|file| &file.pools)
        .find(|pool| pool.driver != podq_worker::pool::config::PoolDriver::Local)
    {
        anyhow::bail!(
            "pool {}: `podq up` runs pools of simulated slices (driver: local); a gcloud \
             pool runs under `podq pool --pools FILE --config WORKER.yaml` \
             (docs/operations/pools.md, \"Pools\")",
            pool.name
        );
    }
    std::fs::create_dir_all(&args.data_dir)
        .with_context(|| format!("cannot create {}", args.data_dir.display()))?;
    let data_dir = args.data_dir.canonicalize()?;
    // A server with any credential takes worker calls only with a worker's token: when the
    // person gave tokens but none for workers, `up`'s own worker gets one made here.
    let worker_token = args.worker_token.clone().or_else(|| {
        (args.admin_token.is_some() || args.users.is_some())
            .then(podq_server::team::tokens::generate)
    });
    let server = ServerArgs {
        listen: args.listen,
        db: args.db.clone().unwrap_or_else(|| data_dir.join("podq.db")),
        database: None,
        experiments: args.experiments.clone(),
        // Checkpoints go to a local directory standing in for the GCS bucket, named by a
        // plain path: Orbax (etils.epath) takes `gs://...` or a path, and fails on `file://`.
        bucket: data_dir.join("bucket").display().to_string(),
        // The simulated pod below is a v4-64, as the study's `stable-1` is.
        accelerator: "v4-64".into(),
        admin_token: args.admin_token.clone(),
        worker_token: worker_token.clone(),
        users: args.users.clone(),
        open_reads: args.open_reads,
        public_urls: Vec::new(),
        eviction_min_runtime: args.eviction_min_runtime,
        lease_ttl_s: args.lease_ttl_s,
        heartbeat_s: args.heartbeat_s,
        backoff_s: args.backoff_s,
        backoff_cap_s: args.backoff_cap_s,
        deadline: args.deadline,
        webhooks: args.webhooks.clone(),
        metrics_listen: args.metrics_listen,
        tls_cert: args.tls_cert.clone(),
        tls_key: args.tls_key.clone(),
        log_lines_per_host: 20_000,
        prior_mtbf_h: 24.0,
    };
    let config = server.config()?;

    let shutdown = crate::shutdown_on_signal();
    let state = podq_server::prepare(config.clone()).await?;
    let listener = tokio::net::TcpListener::bind(config.listen)
        .await
        .with_context(|| {
            format!(
                "cannot listen on {} (is another podq running? pass --listen)",
                config.listen
            )
        })?;
    let address = listener.local_addr()?;
    let (base, ca) = match &config.tls {
        None => (format!("http://{address}"), None),
        Some(files) => {
            let ca = args.ca.clone().unwrap_or_else(|| files.cert.clone());
            let base = own_https_address(files, &ca, address)?;
            (base, Some(CaFile::load(&ca)?))
        }
    };
    let server = tokio::spawn(podq_server::serve(state, listener, shutdown.clone()));
    let http = http_client(ca.as_ref()).build()?;

    let pod_root = data_dir.join("pod");
    let sim_cloud = args
        .sim_cloud
        .clone()
        .unwrap_or_else(|| data_dir.join("pools/cloud"));
    let settings = DaemonSettings {
        attempt: AttemptSettings {
            trainer_command: match args.trainer_command.clone() {
                Some(command) => command,
                None => podq_worker::config::default_trainer_command()?,
            },
            trainer_env: sim_trainer_env(args.sim_run_secs),
            stop_grace: Duration::from_secs(5),
            status_poll: Duration::from_millis(500),
            // A real trainer's start-up (imports, compilation) can take a minute.
            hang_timeout: match args.trainer_command {
                Some(_) => Duration::from_secs(600),
                None => Duration::from_secs_f64((args.sim_run_secs / 2.0).max(20.0)),
            },
            metrics_flush: Duration::from_secs(1),
            // The simulated hosts' agents push every 100 ms.
            agent_silence: Duration::from_secs(5),
            maintenance_lead: Duration::from_secs(600),
            maintenance_timeout: Duration::from_secs(3600),
            metrics_max_points: 1000,
            checkpoint_scan: Duration::from_secs(1),
            // `up` owns its pod: when it stops, so do the trainers.
            detach_on_shutdown: false,
            compile_cache: true,
        },
        agent_listen: std::net::SocketAddr::from(([127, 0, 0, 1], 0)),
        agent_url: None,
        state_dir: pod_root.join("worker-state"),
        lease_wait: Duration::from_secs(20),
        preflight_retry: Duration::from_secs(2),
    };
    let client = ServerClient::new(
        &base,
        config.worker_token.clone(),
        ca.as_ref(),
        shutdown.clone(),
    );
    let pooled = pools.is_some();
    let worker = match pools {
        None => {
            let driver = Arc::new(LocalPod::new(
                "stable-1",
                &config.catalog.accelerator,
                args.hosts,
                &pod_root,
                Duration::from_secs(3),
            )?);
            tokio::spawn(async move {
                podq_worker::daemon::run(client, driver, settings, shutdown.clone()).await
            })
        }
        Some(pools) => {
            let settings = podq_worker::pool::run::PoolSettings {
                tick: Duration::from_secs(2),
                state_dir: data_dir.join("pools"),
                daemon: settings,
                hosts: args.hosts,
                gcloud: Default::default(),
                sim_create_time: Duration::from_secs(3),
                sim_cloud: sim_cloud.clone(),
                boot_deadline: Duration::from_secs(600),
                create_rate: Default::default(),
            };
            tokio::spawn(podq_worker::pool::cli::run_pools(
                pools,
                settings,
                client,
                shutdown.clone(),
            ))
        }
    };

    let submitted = submit(&http, &base, &args.submit, config.admin_token.as_deref()).await?;
    let curl = match &ca {
        Some(ca) => format!("curl -s --cacert {}", ca.path.display()),
        None => "curl -s".to_owned(),
    };
    println!();
    if pooled {
        println!(
            "podq is up: a server and pools of simulated {}-host slices made on demand \
             (`podq pools`, {base}/api/v1/pools).",
            args.hosts
        );
    } else {
        println!(
            "podq is up: a server and a simulated {}-host v4-64 pod named stable-1.",
            args.hosts
        );
    }
    println!("  dashboard   {base}/");
    println!("  status      {curl} {base}/api/v1/status");
    println!("  jobs        {curl} {base}/api/v1/jobs");
    println!("  API         {base}/api/v1/openapi.json");
    println!("  database    {}", config.db.display());
    let control = if pooled {
        sim_cloud.join("pods/SLICE")
    } else {
        pod_root.clone()
    };
    println!(
        "  pod control touch {}/control/{{preempt,kill-host-3,hang-host-2,fail-next-launch}}",
        control.display()
    );
    println!("  {submitted}");
    println!("Ctrl-C stops everything.");

    let _ = worker.await;
    server.await.context("server task")??;
    Ok(())
}

/// The `https://` address `up`'s own worker and calls reach its server at: the listen
/// address (127.0.0.1 for an unspecified one), or `localhost` for a loopback one, whichever
/// the certificate is valid for with the CA `ca`. Refuses a certificate valid for neither
/// now, rather than leaving the worker to retry for ever.
fn own_https_address(files: &TlsFiles, ca: &Path, address: SocketAddr) -> anyhow::Result<String> {
    let ip = match address.ip() {
        IpAddr::V4(ip) if ip.is_unspecified() => IpAddr::V4(Ipv4Addr::LOCALHOST),
        IpAddr::V6(ip) if ip.is_unspecified() => IpAddr::V6(Ipv6Addr::LOCALHOST),
        ip => ip,
    };
    let by_ip = SocketAddr::new(ip, address.port());
    let error = match files.verify_for(ca, &ip.to_string()) {
        Ok(()) => return Ok(format!("https://{by_ip}")),
        Err(e) => e,
    };
    if ip.is_loopback() && files.verify_for(ca, "localhost").is_ok() {
        return Ok(format!("https://localhost:{}", address.port()));
    }
    anyhow::bail!(
        "podq up's own worker reaches its server at https://{by_ip}, but the certificate {} \
         is not valid there for a client trusting {}: {error:#}. Give a certificate whose \
         subjectAltName names {ip} or localhost, and --ca the CA that signed it",
        files.cert.display(),
        ca.display()
    )
}

async fn submit(
    http: &reqwest::Client,
    base: &str,
    what: &str,
    token: Option<&str>,
) -> anyhow::Result<String> {
    let request = match what {
        "none" => return Ok("nothing submitted (--submit none)".into()),
        "all" => SubmitRequest {
            all: Some(true),
            ..SubmitRequest::default()
        },
        group => SubmitRequest {
            group: Some(group.to_owned()),
            ..SubmitRequest::default()
        },
    };
    let mut call = http.post(format!("{base}/api/v1/jobs")).json(&request);
    if let Some(token) = token {
        call = call.bearer_auth(token);
    }
    let response = call
        .send()
        .await
        .map_err(|e| anyhow::anyhow!("submitting: {}", explain(&e, base)))?;
    let status = response.status();
    let body = response.text().await?;
    if !status.is_success() {
        anyhow::bail!("submitting `{what}` failed ({status}): {body}");
    }
    let answer: podq_api::SubmitResponse = serde_json::from_str(&body)?;
    Ok(format!(
        "submitted `{what}`: {} jobs created, {} linked to identical runs, {} skipped",
        answer.created.len(),
        answer.linked.len(),
        answer.skipped.len()
    ))
}

/// The sim trainer's environment under `podq up`: its run length, and `PODQ_SIM_FAULT` from
/// `podq up`'s own environment, so a fault (`diverge-at-step=800`, say) can be tried on the
/// local pod (docs/trainer.md, "The sim trainer").
fn sim_trainer_env(run_secs: f64) -> BTreeMap<String, String> {
    let mut env = BTreeMap::from([("PODQ_SIM_RUN_SECS".to_owned(), run_secs.to_string())]);
    if let Some(fault) = std::env::var("PODQ_SIM_FAULT")
        .ok()
        .filter(|f| !f.is_empty())
    {
        env.insert("PODQ_SIM_FAULT".to_owned(), fault);
    }
    env
}
