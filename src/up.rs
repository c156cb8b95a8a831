//! `podq up`: the server, a simulated pod and its worker in one process, with the sim
//! trainer time-scaled so a whole training run takes about a minute.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use clap::Args;
use podq_api::SubmitRequest;
use podq_worker::attempt::AttemptSettings;
use podq_worker::client::ServerClient;
use podq_worker::daemon::DaemonSettings;
use podq_worker::pod::local::LocalPod;

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
    /// events); see docs/operations.md.
    #[arg(long, env = "PODQ_WEBHOOKS")]
    webhooks: Option<PathBuf>,
    /// Also serve /metrics on this address (it is always served on --listen).
    #[arg(long, env = "PODQ_METRICS_LISTEN")]
    metrics_listen: Option<SocketAddr>,
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
}

pub async fn run(args: UpArgs) -> anyhow::Result<()> {
    std::fs::create_dir_all(&args.data_dir)
        .with_context(|| format!("cannot create {}", args.data_dir.display()))?;
    let data_dir = args.data_dir.canonicalize()?;
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
        worker_token: args.worker_token.clone(),
        lease_ttl_s: args.lease_ttl_s,
        heartbeat_s: args.heartbeat_s,
        backoff_s: args.backoff_s,
        backoff_cap_s: args.backoff_cap_s,
        deadline: args.deadline,
        webhooks: args.webhooks.clone(),
        metrics_listen: args.metrics_listen,
        tls_cert: None,
        tls_key: None,
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
    let server = tokio::spawn(podq_server::serve(state, listener, shutdown.clone()));
    let base = format!("http://{address}");

    let pod_root = data_dir.join("pod");
    let driver = Arc::new(LocalPod::new(
        "stable-1",
        &config.catalog.accelerator,
        args.hosts,
        &pod_root,
        Duration::from_secs(3),
    )?);
    let settings = DaemonSettings {
        attempt: AttemptSettings {
            trainer_command: match args.trainer_command.clone() {
                Some(command) => command,
                None => podq_worker::cli::default_trainer_command()?,
            },
            trainer_env: BTreeMap::from([(
                "PODQ_SIM_RUN_SECS".to_owned(),
                args.sim_run_secs.to_string(),
            )]),
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
        },
        agent_listen: std::net::SocketAddr::from(([127, 0, 0, 1], 0)),
        agent_url: None,
        state_dir: pod_root.join("worker-state"),
        lease_wait: Duration::from_secs(20),
        preflight_retry: Duration::from_secs(2),
    };
    let client = ServerClient::new(&base, config.worker_token.clone(), None, shutdown.clone());
    let worker = tokio::spawn(podq_worker::daemon::run(
        client,
        driver,
        settings,
        shutdown.clone(),
    ));

    let submitted = submit(&base, &args.submit, config.admin_token.as_deref()).await?;
    println!();
    println!(
        "podq is up: a server and a simulated {}-host v4-64 pod named stable-1.",
        args.hosts
    );
    println!("  dashboard   {base}/");
    println!("  status      curl -s {base}/api/v1/status");
    println!("  jobs        curl -s {base}/api/v1/jobs");
    println!("  API         {base}/api/v1/openapi.json");
    println!("  database    {}", config.db.display());
    println!(
        "  pod control touch {}/control/{{preempt,kill-host-3,hang-host-2,fail-next-launch}}",
        pod_root.display()
    );
    println!("  {submitted}");
    println!("Ctrl-C stops everything.");

    let _ = worker.await;
    server.await.context("server task")??;
    Ok(())
}

async fn submit(base: &str, what: &str, token: Option<&str>) -> anyhow::Result<String> {
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
    let mut call = reqwest::Client::new()
        .post(format!("{base}/api/v1/jobs"))
        .json(&request);
    if let Some(token) = token {
        call = call.bearer_auth(token);
    }
    let response = call.send().await.context("submitting")?;
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
