//! `podq`: the one binary. The server, the worker, the standalone mode (`up`) and the
//! client commands share it.

mod client;
mod up;
mod validate;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use clap::{Args, Parser, Subcommand};
use podq_server::catalog::CatalogOptions;
use podq_server::ServerConfig;
use tokio_util::sync::CancellationToken;

#[derive(Parser)]
#[command(
    name = "podq",
    version,
    about = "Schedules ML experiments onto whole TPU pod slices"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Server, a simulated pod and its worker in one process: the quickest way to see podq.
    Up(up::UpArgs),
    /// Run the HTTP service.
    Server(ServerArgs),
    /// Run the worker daemon beside a pod.
    Worker(podq_worker::config::WorkerArgs),
    /// Drive pools of slices made on demand (a worker daemon for each slice).
    Pool(podq_worker::pool::cli::PoolArgs),
    /// Own one host's trainer for one lease (started by the worker on every host).
    #[command(hide = true)]
    Agent(podq_worker::agent::AgentArgs),
    /// Lead one trainer's process group and keep its exit status (started by the agent).
    #[command(hide = true)]
    AgentKeeper(podq_worker::agent::keeper::KeeperArgs),
    /// Print this binary's build id (the sha256 of its bytes), which the worker compares
    /// with the agent it would install.
    #[command(hide = true)]
    BuildId,
    /// Submit experiments (a group, a list, or all).
    Submit(client::SubmitArgs),
    /// Print the status table.
    Status(client::StatusArgs),
    /// List jobs, oldest first, as a table.
    Jobs(client::JobsArgs),
    /// One job in detail: state, attempts, checkpoints, goodput, its last events.
    Job(client::JobArgs),
    /// Print an attempt's log tail (the newest attempt's by default).
    Logs(client::LogsArgs),
    /// A group's or the suite's results, one row per experiment, as CSV or JSON.
    Results(client::ResultsArgs),
    /// A group's runs side by side: state, varied params, final value and, with rungs, each
    /// run's value, rank and decision at each rung.
    Study(client::StudyArgs),
    /// Cancel a job; a running one is stopped on every host.
    Cancel(client::JobArg),
    /// Put a failed, cancelled, held or stopped job back in the queue with a fresh failure
    /// budget (`--ignore-stop-rules` lifts a stopped job's rules).
    Requeue(client::RequeueArgs),
    /// Change a job's priority (higher runs first) or its priority class (--class).
    Priority(client::PriorityArgs),
    /// Pause a job: a queued one is held; a running one saves, stops and is held. Uncharged.
    Suspend(client::JobArg),
    /// Put a suspended (held) job back in the queue.
    Resume(client::JobArg),
    /// The team's people and their tokens (admins): add, list, disable, rotate, hash.
    Users(client::UsersArgs),
    /// Who the server takes you for, and what you may do.
    Whoami(client::WhoAmIArgs),
    /// Who changed what, newest first.
    Audit(client::AuditArgs),
    /// Pools of slices made on demand: their slices, zones and the queue's demand.
    Pools(client::PoolsArgs),
    /// The queue and the catalog projected onto the pods: what finishes before the deadline,
    /// under today's order and the recommended one.
    Plan(client::PlanArgs),
    /// Show or set the compute grant (its end is the plan's deadline).
    Grant(client::GrantArgs),
    /// Copy a study from a SQLite file into an empty PostgreSQL database, in one transaction
    /// that commits only if every table's row count matches. Stop the server first.
    Migrate {
        /// The SQLite database: sqlite://FILE or a path.
        #[arg(long)]
        from: String,
        /// The PostgreSQL database: postgres://USER:PASSWORD@HOST/DB.
        #[arg(long)]
        to: String,
    },
    /// Load an experiment catalog and report what is wrong with it.
    Validate {
        /// The catalog directory to check.
        #[arg(long, env = "PODQ_EXPERIMENTS", default_value = "./experiments")]
        experiments: PathBuf,
        /// The bucket checkpoint paths are resolved under, as the server would.
        #[arg(
            long,
            env = "PODQ_BUCKET",
            default_value = "gs://sculptor-tpu-experiments"
        )]
        bucket: String,
        /// Print the report as JSON.
        #[arg(long)]
        json: bool,
    },
}

#[derive(Args, Clone)]
pub struct ServerArgs {
    /// Address to listen on. Anything but loopback needs both tokens.
    #[arg(long, env = "PODQ_LISTEN", default_value = "127.0.0.1:8080")]
    pub listen: SocketAddr,
    /// The SQLite database file (created if missing).
    #[arg(long, env = "PODQ_DB", default_value = "./podq.db")]
    pub db: PathBuf,
    /// Where the state lives instead: postgres://USER:PASSWORD@HOST/DB for PostgreSQL, or
    /// sqlite://FILE. Overrides --db.
    #[arg(long, env = "PODQ_DATABASE_URL", hide_env_values = true)]
    pub database: Option<String>,
    /// The experiment catalog directory.
    #[arg(long, env = "PODQ_EXPERIMENTS", default_value = "./experiments")]
    pub experiments: PathBuf,
    /// Checkpoints go to <bucket>/checkpoints/<group>/<experiment>.
    #[arg(
        long,
        env = "PODQ_BUCKET",
        default_value = "gs://sculptor-tpu-experiments"
    )]
    pub bucket: String,
    /// The accelerator type of an experiment whose group names none in its `group.yaml`.
    #[arg(long, env = "PODQ_ACCELERATOR", default_value = "v4-64")]
    pub accelerator: String,
    /// Bearer token for state-changing user calls.
    #[arg(long, env = "PODQ_ADMIN_TOKEN", hide_env_values = true)]
    pub admin_token: Option<String>,
    /// Bearer token for workers.
    #[arg(long, env = "PODQ_WORKER_TOKEN", hide_env_values = true)]
    pub worker_token: Option<String>,
    /// Take the team's people from this YAML file (name, role, token_sha256, pods) instead of
    /// the store; see docs/operations/deployments.md.
    #[arg(long, env = "PODQ_USERS")]
    pub users: Option<PathBuf>,
    /// Serve reads without a token even when listening beyond loopback.
    #[arg(long, env = "PODQ_OPEN_READS")]
    pub open_reads: bool,
    /// The URL people and workers reach this server by, when it is a name (e.g.
    /// https://podq.lab.example:8443); repeatable or comma-separated. Requests naming any
    /// other host than these, an IP address or `localhost` are refused (DNS rebinding).
    #[arg(long = "public-url", env = "PODQ_PUBLIC_URL", value_delimiter = ',', value_parser = public_host)]
    pub public_urls: Vec<String>,
    /// No running attempt is evicted before it has run this long (e.g. 30m, 2h, 0s),
    /// whatever its priority class says.
    #[arg(long, env = "PODQ_EVICTION_MIN_RUNTIME", value_parser = duration)]
    pub eviction_min_runtime: Option<Duration>,
    /// Seconds without a heartbeat after which a lease is reaped as lost.
    #[arg(long, env = "PODQ_LEASE_TTL_S", default_value_t = 60)]
    pub lease_ttl_s: u64,
    /// Seconds between worker heartbeats.
    #[arg(long, env = "PODQ_HEARTBEAT_S", default_value_t = 10)]
    pub heartbeat_s: u64,
    /// First retry delay after a failure, in seconds (doubles up to --backoff-cap-s).
    #[arg(long, env = "PODQ_BACKOFF_S", default_value_t = 60)]
    pub backoff_s: u64,
    /// Longest retry delay after failures, in seconds.
    #[arg(long, env = "PODQ_BACKOFF_CAP_S", default_value_t = 1800)]
    pub backoff_cap_s: u64,
    /// End of the compute grant (RFC 3339, e.g. 2026-12-20T00:00:00Z): GET /api/v1/plan
    /// says which runs finish before it.
    #[arg(long, env = "PODQ_DEADLINE")]
    pub deadline: Option<chrono::DateTime<chrono::Utc>>,
    /// A YAML file listing webhook receivers (url, secret or secret_file, format json|slack,
    /// events); see docs/operations/server.md.
    #[arg(long, env = "PODQ_WEBHOOKS")]
    pub webhooks: Option<PathBuf>,
    /// Also serve /metrics on this address (it is always served on --listen).
    #[arg(long, env = "PODQ_METRICS_LISTEN")]
    pub metrics_listen: Option<SocketAddr>,
    /// Serve HTTPS with this certificate (PEM: the server's first, then any intermediates),
    /// on --listen and --metrics-listen. Needs --tls-key.
    #[arg(long, env = "PODQ_TLS_CERT", value_name = "FILE", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    /// The private key (PEM) of --tls-cert.
    #[arg(long, env = "PODQ_TLS_KEY", value_name = "FILE", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// Trainer log lines kept per attempt and host; the oldest are dropped first.
    #[arg(long, env = "PODQ_LOG_LINES_PER_HOST", default_value_t = 20_000,
          value_parser = clap::value_parser!(i64).range(100..=10_000_000))]
    pub log_lines_per_host: i64,
    /// Mean hours between a pod's interruptions (preemptions, lost or hung attempts) assumed
    /// before it has history; the checkpoint advice starts from it.
    #[arg(long, env = "PODQ_PRIOR_MTBF_H", default_value_t = 24.0,
          value_parser = positive_hours)]
    pub prior_mtbf_h: f64,
}

pub(crate) fn duration(text: &str) -> Result<Duration, String> {
    podq_server::catalog::classes::parse_duration(text)
}

/// The host name of a `--public-url`.
fn public_host(text: &str) -> Result<String, String> {
    let url = reqwest::Url::parse(text).map_err(|e| {
        format!("{text:?} is not a URL ({e}): give one such as https://podq.lab.example")
    })?;
    match (url.scheme(), url.host_str()) {
        ("http" | "https", Some(host)) => Ok(host.trim_matches(['[', ']']).to_ascii_lowercase()),
        _ => Err(format!(
            "{text:?} is not an http:// or https:// URL with a host"
        )),
    }
}

fn positive_hours(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(h) if h.is_finite() && h > 0.0 && h <= 24.0 * 365.0 => Ok(h),
        _ => Err(format!(
            "{text:?} is not a number of hours above 0 and at most a year"
        )),
    }
}

impl ServerArgs {
    pub fn config(&self) -> anyhow::Result<ServerConfig> {
        let mut config = ServerConfig::new(self.listen, self.db.clone(), self.experiments.clone());
        if let Some(url) = &self.database {
            config.database = Some(podq_server::store::Location::parse(url)?);
        }
        if let Err(unknown) = podq_api::slice_type(&self.accelerator) {
            anyhow::bail!("--accelerator {unknown}");
        }
        config.catalog = CatalogOptions {
            bucket: self.bucket.clone(),
            accelerator: self.accelerator.clone(),
            ..CatalogOptions::default()
        };
        config.admin_token = self.admin_token.clone().filter(|t| !t.is_empty());
        config.worker_token = self.worker_token.clone().filter(|t| !t.is_empty());
        if let Some(file) = &self.users {
            config.users_file =
                Some(podq_server::team::users_file::load(file).map_err(anyhow::Error::msg)?);
        }
        config.open_reads = self.open_reads;
        config.public_hosts = self.public_urls.clone();
        config.eviction_min_runtime = self.eviction_min_runtime;
        config.lease_ttl = Duration::from_secs(self.lease_ttl_s.max(1));
        config.heartbeat = Duration::from_secs(self.heartbeat_s.max(1));
        config.backoff_base = Duration::from_secs(self.backoff_s);
        config.backoff_cap = Duration::from_secs(self.backoff_cap_s.max(self.backoff_s));
        config.deadline = self.deadline;
        if let Some(file) = &self.webhooks {
            config.webhooks = podq_server::webhooks::load_config(file)?;
        }
        config.metrics_listen = self.metrics_listen;
        config.tls = match (&self.tls_cert, &self.tls_key) {
            (Some(cert), Some(key)) => Some(podq_server::tls::TlsFiles {
                cert: cert.clone(),
                key: key.clone(),
            }),
            // clap requires each with the other.
            _ => None,
        };
        config.log_lines_per_host = self.log_lines_per_host;
        config.prior_mtbf = Duration::from_secs_f64(self.prior_mtbf_h * 3600.0);
        Ok(config)
    }
}

fn main() -> ExitCode {
    // The sim trainer must start before any thread exists (it blocks signals), so it is
    // dispatched before argument parsing and before the async runtime.
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("sim-trainer") {
        let mut trainer_args = vec!["podq sim-trainer".to_owned()];
        trainer_args.extend(args.into_iter().skip(2));
        podq_sim_trainer::main_with_args(trainer_args);
    }
    let cli = Cli::parse();
    // The keeper blocks signals, which holds only for threads started after it: no runtime.
    if let Command::AgentKeeper(args) = cli.command {
        return match podq_worker::agent::keeper::run(args) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("podq agent-keeper: {e:#}");
                ExitCode::FAILURE
            }
        };
    }
    if let Command::BuildId = cli.command {
        return match podq_worker::build_id::own() {
            Ok(id) => {
                println!("{id}");
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("podq build-id: cannot read this program: {e}");
                ExitCode::FAILURE
            }
        };
    }
    if let Command::Validate {
        experiments,
        bucket,
        json,
    } = &cli.command
    {
        let options = CatalogOptions {
            bucket: bucket.clone(),
            ..CatalogOptions::default()
        };
        return if validate::run(experiments, &options, *json) {
            ExitCode::SUCCESS
        } else {
            ExitCode::FAILURE
        };
    }
    init_tracing();
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("podq: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(cli.command)) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("podq: {e:#}");
            ExitCode::FAILURE
        }
    }
}

async fn run(command: Command) -> anyhow::Result<ExitCode> {
    match command {
        Command::Server(args) => {
            run_server(args.config()?).await?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Up(args) => up::run(args).await.map(|_| ExitCode::SUCCESS),
        Command::Migrate { from, to } => migrate(&from, &to).await,
        Command::Worker(args) => {
            let shutdown = shutdown_on_signal();
            podq_worker::config::run(args, shutdown).await?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Pool(args) => {
            let shutdown = shutdown_on_signal();
            podq_worker::pool::cli::run(args, shutdown).await?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Agent(args) => {
            podq_worker::agent::run(args).await?;
            Ok(ExitCode::SUCCESS)
        }
        Command::AgentKeeper(_) | Command::BuildId => {
            unreachable!("dispatched before the runtime starts")
        }
        Command::Submit(args) => client::submit(args).await,
        Command::Status(args) => client::status(args).await,
        Command::Jobs(args) => client::jobs(args).await,
        Command::Job(args) => client::job(args).await,
        Command::Logs(args) => client::logs(args).await,
        Command::Results(args) => client::results(args).await,
        Command::Study(args) => client::study(args).await,
        Command::Cancel(args) => client::cancel(args).await,
        Command::Requeue(args) => client::requeue(args).await,
        Command::Priority(args) => client::priority(args).await,
        Command::Suspend(args) => client::suspend(args).await,
        Command::Resume(args) => client::resume(args).await,
        Command::Users(args) => client::users(args).await,
        Command::Whoami(args) => client::whoami(args).await,
        Command::Audit(args) => client::audit(args).await,
        Command::Pools(args) => client::pools(args).await,
        Command::Plan(args) => client::plan(args).await,
        Command::Grant(args) => client::grant(args).await,
        Command::Validate { .. } => unreachable!("handled before the runtime starts"),
    }
}

pub async fn run_server(config: ServerConfig) -> anyhow::Result<()> {
    let listen = config.listen;
    let tls = config.tls.is_some();
    let state = podq_server::prepare(config).await?;
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .with_context(|| format!("cannot listen on {listen}"))?;
    // On stdout, for scripts and tests that start the server on port 0.
    let scheme = if tls { "https" } else { "http" };
    println!(
        "podq server listening on {scheme}://{}",
        listener.local_addr()?
    );
    podq_server::serve(state, listener, shutdown_on_signal()).await
}

/// A token cancelled on SIGINT or SIGTERM.
pub fn shutdown_on_signal() -> CancellationToken {
    let token = CancellationToken::new();
    let trigger = token.clone();
    tokio::spawn(async move {
        let mut term =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(term) => term,
                Err(_) => return,
            };
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = term.recv() => {}
        }
        tracing::info!("shutting down");
        trigger.cancel();
    });
    token
}

/// Logs go to stderr: colour only on a terminal, JSON lines with `PODQ_LOG_FORMAT=json`,
/// levels from `PODQ_LOG` (an env filter, default `info`).
fn init_tracing() {
    use std::io::IsTerminal;
    // rustls-platform-verifier logs each certificate it rejects at ERROR; the call that
    // failed says so with what to do (`podq_worker::trust::explain`).
    let filter = tracing_subscriber::EnvFilter::try_from_env("PODQ_LOG").unwrap_or_else(|_| {
        tracing_subscriber::EnvFilter::new(
            "info,sqlx=warn,tower_http=warn,rustls_platform_verifier=off",
        )
    });
    let json = std::env::var("PODQ_LOG_FORMAT").is_ok_and(|f| f.eq_ignore_ascii_case("json"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal());
    if json {
        builder
            .json()
            .flatten_event(true)
            .with_current_span(true)
            .init();
    } else {
        builder.init();
    }
}

async fn migrate(from: &str, to: &str) -> anyhow::Result<ExitCode> {
    use podq_server::store::Location;
    let (from, to) = (Location::parse(from)?, Location::parse(to)?);
    let counts = podq_server::store::copy::sqlite_to_postgres(&from, &to)
        .await
        .with_context(|| format!("cannot copy {from} into {to}"))?;
    println!("copied {from} into {to}; rows in the source and in the copy:");
    for (table, copied, there) in counts {
        println!("  {table:<18} {copied:>10} {there:>10}");
    }
    Ok(ExitCode::SUCCESS)
}
