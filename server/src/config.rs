//! Server settings.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use crate::catalog::CatalogOptions;
use crate::store::Location;
use crate::tls::TlsFiles;

#[derive(Clone)]
pub struct ServerConfig {
    pub listen: SocketAddr,
    pub db: PathBuf,
    /// Where the state lives when not in the `db` file: a PostgreSQL database (or a
    /// `sqlite://` URL).
    pub database: Option<Location>,
    pub experiments: PathBuf,
    pub catalog: CatalogOptions,
    /// Bearer token for state-changing user calls. None: no check (loopback only).
    pub admin_token: Option<String>,
    /// Bearer token for the worker protocol. None: no check (loopback only).
    pub worker_token: Option<String>,
    /// People kept as code (`--users FILE`): the server takes its people from here alone.
    pub users_file: Option<Vec<crate::team::users_file::FilePerson>>,
    /// Reads need no token even when the server listens beyond loopback.
    pub open_reads: bool,
    /// Host names, besides IP addresses and `localhost`, that requests may name in `Host`
    /// (from `--public-url`): any other is refused, against DNS rebinding.
    pub public_hosts: Vec<String>,
    /// Overrides every class's `min_runtime`: no attempt is evicted before it has run this
    /// long (`--eviction-min-runtime`).
    pub eviction_min_runtime: Option<Duration>,
    /// A lease not heartbeated for this long is reaped as `lost`.
    pub lease_ttl: Duration,
    /// How often workers are asked to heartbeat.
    pub heartbeat: Duration,
    /// Retry backoff after a failure: first delay, doubling up to the cap.
    pub backoff_base: Duration,
    pub backoff_cap: Duration,
    /// The end of the compute grant: `GET /plan` says which runs finish before it.
    pub deadline: Option<chrono::DateTime<chrono::Utc>>,
    /// Receivers of webhook notices (their secrets are redacted from Debug output).
    pub webhooks: Vec<crate::webhooks::receivers::WebhookConfig>,
    /// Serve `/metrics` on this address too (it is always on the main one).
    pub metrics_listen: Option<SocketAddr>,
    /// Serve HTTPS with this certificate and key, on both addresses. None: plain HTTP.
    pub tls: Option<TlsFiles>,
    /// Trainer log lines kept per attempt and host; older ones are dropped first.
    pub log_lines_per_host: i64,
    /// The mean time between interruptions assumed for a pod type before it has history
    /// (checkpoint advice); it counts as one interruption's worth of observation.
    pub prior_mtbf: Duration,
}

impl ServerConfig {
    pub fn new(listen: SocketAddr, db: PathBuf, experiments: PathBuf) -> Self {
        ServerConfig {
            listen,
            db,
            database: None,
            experiments,
            catalog: CatalogOptions::default(),
            admin_token: None,
            worker_token: None,
            users_file: None,
            open_reads: false,
            public_hosts: Vec::new(),
            eviction_min_runtime: None,
            lease_ttl: Duration::from_secs(60),
            heartbeat: Duration::from_secs(10),
            backoff_base: Duration::from_secs(60),
            backoff_cap: Duration::from_secs(30 * 60),
            deadline: None,
            webhooks: Vec::new(),
            metrics_listen: None,
            tls: None,
            log_lines_per_host: 20_000,
            prior_mtbf: Duration::from_secs(24 * 3600),
        }
    }
}

impl ServerConfig {
    /// The store this server keeps its state in.
    pub fn location(&self) -> Location {
        self.database
            .clone()
            .unwrap_or_else(|| Location::Sqlite(self.db.clone()))
    }
}

/// Tokens are secrets: never in logs or Debug output.
impl std::fmt::Debug for ServerConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let redact = |t: &Option<String>| t.as_ref().map(|_| "<redacted>");
        f.debug_struct("ServerConfig")
            .field("listen", &self.listen)
            .field("database", &self.location().to_string())
            .field("experiments", &self.experiments)
            .field("bucket", &self.catalog.bucket)
            .field("admin_token", &redact(&self.admin_token))
            .field("worker_token", &redact(&self.worker_token))
            .field("users_file", &self.users_file.as_ref().map(Vec::len))
            .field("open_reads", &self.open_reads)
            .field("public_hosts", &self.public_hosts)
            .field("eviction_min_runtime", &self.eviction_min_runtime)
            .field("accelerator", &self.catalog.accelerator)
            .field("lease_ttl", &self.lease_ttl)
            .field("heartbeat", &self.heartbeat)
            .field(
                "webhooks",
                &self
                    .webhooks
                    .iter()
                    .map(|w| crate::webhooks::receivers::redacted(&w.url))
                    .collect::<Vec<_>>(),
            )
            .field("metrics_listen", &self.metrics_listen)
            .field("tls", &self.tls)
            .finish()
    }
}
