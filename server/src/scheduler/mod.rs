//! The scheduler core. Every state change of a job, attempt, lease or pod goes through a
//! method of [`Scheduler`], each one write transaction that checks its owner first (the
//! job's state, or the lease's fence). The HTTP layer parses, calls one method and maps the
//! [`SchedulerError`] it may get back.
//!
//! The rooms: `lease/` (leasing, the worker calls under the lease's fence, the reaper,
//! waking waiting workers, the retry policy), `plan/` (the grant, the plan, forecasts, pod
//! time and checkpoint advice), `reads/` (every read, the log follower and the live feed of
//! events, and the views cached between commits), `cron/` (scheduled submissions). Beside
//! them: `submit.rs` and `control.rs` (what a person does to jobs), `users.rs` (the team's
//! directory of tokens and its changes), `pools.rs` (what pools of slices report and are
//! told), `outbox.rs` (the webhook
//! outbox as its deliverer sees it) and `error.rs`.

pub mod control;
pub mod cron;
mod error;
pub mod lease;
pub mod outbox;
pub mod plan;
mod pools;
pub mod reads;
mod routing;
pub mod rungs;
mod spares;
pub mod submit;
pub mod users;

use std::sync::Arc;

use crate::store::Conn;
use futures::future::BoxFuture;
use serde::de::DeserializeOwned;
use serde::Serialize;

pub use error::{store_failure, Result, SchedulerError, StoreFailure};
pub use lease::live::{LiveLease, LiveLeases};
use lease::wake;
pub use lease::Reaped;
pub use reads::logs::LogQuery;
use reads::{read_cache, status};
pub use reads::{ExportPage, JobsQuery, LiveFeed, LiveItem, MetricsExport, MetricsExportQuery};

use crate::catalog::Catalog;
use crate::config::ServerConfig;
use crate::store::idempotency::{self, StoredAnswer};
use crate::store::{self, Store, StoreError};
use crate::telemetry::Telemetry;

pub struct Scheduler {
    store: Store,
    catalog: Arc<Catalog>,
    config: Arc<ServerConfig>,
    live: LiveLeases,
    waiters: wake::LeaseWaiters,
    /// When this server started: the start of a grant given only by `--deadline`.
    started_at: chrono::DateTime<chrono::Utc>,
    /// A job's newest step, each time a metrics batch lands (for live views).
    progress: tokio::sync::broadcast::Sender<Progress>,
    telemetry: Arc<Telemetry>,
    /// Status, the grant line and the default plan, made once per commit.
    read_cache: ReadCaches,
    /// Whether this server serves as the active one: its store leads and it has taken over
    /// (the live leases are loaded). Worker calls are refused until then.
    serving: std::sync::atomic::AtomicBool,
    /// Who each token belongs to (`users.rs`).
    directory: users::Directory,
    /// Metrics and log batches waiting to be stored together (`lease/merge.rs`).
    metrics_reports: Arc<lease::reports::MetricsMerger>,
    /// The share the plan keeps past each rung of a `keep: auto` group.
    pub(crate) auto_keeps: Arc<lease::rung_judge::AutoKeeps>,
    log_reports: Arc<lease::reports::LogMerger>,
    /// Each pool's last report (`pools.rs`).
    pool_reports: pools::PoolReports,
}

struct ReadCaches {
    /// Shared, not copied, by each status read: a thousand running jobs.
    queue: read_cache::ReadCache<Arc<status::QueueView>>,
    grant: read_cache::ReadCache<Option<podq_api::GrantOutlook>>,
    plan: read_cache::ReadCache<podq_api::Plan>,
    /// The serving pods as the store holds them. A thousand pods' `/status` read and
    /// decoded every pod row on each call, a visible share of the server's CPU
    /// (benches/fleet.rs).
    pods: read_cache::ReadCache<Arc<Vec<podq_api::Pod>>>,
    /// `/status` as JSON, kept whole only while the server is busy (`read_cache::Keep`).
    status_json: read_cache::ReadCache<axum::body::Bytes>,
    /// The newest recovery records (`reads/recoveries.rs`).
    recoveries: read_cache::ReadCache<Arc<Vec<podq_api::Recovery>>>,
}

/// A job reached `step`.
#[derive(Debug, Clone, Copy, serde::Serialize)]
pub struct Progress {
    pub job_id: podq_api::JobId,
    pub step: i64,
}

impl Scheduler {
    /// The scheduler over `store`, with the leases the database holds live given a fresh TTL
    /// and the pending backoffs armed.
    pub async fn load(
        store: Store,
        catalog: Arc<Catalog>,
        config: Arc<ServerConfig>,
    ) -> Result<Scheduler> {
        let store_instruments = store.instruments();
        let live = LiveLeases::new(Vec::new(), config.lease_ttl)?;
        let waiters = wake::LeaseWaiters::default();
        let auto_keeps = Arc::new(lease::rung_judge::AutoKeeps::default());
        let read_cache = ReadCaches {
            queue: read_cache::ReadCache::over(&store),
            grant: read_cache::ReadCache::over(&store),
            plan: read_cache::ReadCache::over(&store),
            pods: read_cache::ReadCache::over_state(&store),
            status_json: read_cache::ReadCache::answers(&store),
            recoveries: read_cache::ReadCache::over(&store),
        };
        let scheduler = Scheduler {
            metrics_reports: lease::reports::metrics_merger(
                Arc::clone(&catalog),
                Arc::clone(&auto_keeps),
            ),
            auto_keeps,
            log_reports: lease::reports::log_merger(config.log_lines_per_host),
            read_cache,
            store,
            catalog,
            config,
            live,
            waiters,
            started_at: chrono::Utc::now(),
            progress: tokio::sync::broadcast::channel(256).0,
            telemetry: Arc::new(Telemetry::new(store_instruments)),
            serving: std::sync::atomic::AtomicBool::new(false),
            directory: users::Directory::default(),
            pool_reports: pools::PoolReports::default(),
        };
        // A standby checks tokens too (it answers `/whoami` and refuses the rest).
        scheduler.load_directory().await?;
        if scheduler.store.is_active() {
            scheduler.take_over().await?;
        }
        Ok(scheduler)
    }

    /// What a server does when it becomes the active one, at start or when it takes over
    /// from another: the leases the database holds live get a fresh TTL (their workers carry
    /// on with the same lease), and the pending backoffs are armed. A standby's table stays
    /// empty: it answers no worker calls.
    pub async fn take_over(&self) -> Result<()> {
        self.load_directory().await?;
        let mut conn = self.store.read().await?;
        self.live.reload(store::leases::live(&mut conn).await?)?;
        for (accelerator, at) in store::leases::backoff_ends(&mut conn).await? {
            self.waiters.leasable_at(&accelerator, at);
        }
        self.serving
            .store(true, std::sync::atomic::Ordering::SeqCst);
        Ok(())
    }

    /// Records the catalog as loaded, so the database can answer about experiments on its
    /// own. The active server does it before it serves, and again each time it takes over.
    pub async fn record_catalog(&self) -> Result<()> {
        store::catalog::record(&self.store, &self.catalog).await?;
        self.rerank_classes().await
    }

    /// Jobs not yet finished take the rank their class has in the suite as loaded (its
    /// `priority_classes` may have been reordered since they were submitted).
    async fn rerank_classes(&self) -> Result<()> {
        let classes = &self.catalog.classes;
        let ranks: Vec<(String, i64)> = classes
            .all()
            .iter()
            .filter_map(|c| classes.get(&c.name).map(|(rank, _)| (c.name.clone(), rank)))
            .collect();
        let default_rank = classes.resolve(None).map_or(0, |(rank, _)| rank);
        self.store
            .write(move |conn| {
                futures::FutureExt::boxed(async move {
                    store::jobs::rerank_classes(conn, &ranks, default_rank).await
                })
            })
            .await?;
        Ok(())
    }

    /// After the store lost the lead: worker calls are refused until the next take-over.
    pub fn stand_by(&self) {
        self.serving
            .store(false, std::sync::atomic::Ordering::SeqCst);
    }

    /// Active (the store leads and this server has taken over) or standby.
    pub fn role(&self) -> store::Role {
        if self.store.is_active() && self.serving.load(std::sync::atomic::Ordering::SeqCst) {
            store::Role::Active
        } else {
            store::Role::Standby
        }
    }

    pub fn telemetry(&self) -> &Arc<Telemetry> {
        &self.telemetry
    }

    /// The store's lead, as it changes: the server runs its once-per-database tasks while
    /// it is active.
    pub fn store_role(&self) -> tokio::sync::watch::Receiver<store::Role> {
        self.store.role()
    }

    /// Jobs' progress as metrics arrive. A receiver that falls behind skips ahead.
    pub fn progress(&self) -> tokio::sync::broadcast::Receiver<Progress> {
        self.progress.subscribe()
    }

    /// The leases held right now, for views that show live progress.
    pub fn live(&self) -> &LiveLeases {
        &self.live
    }

    /// Runs a write whose answer is remembered under the request's `Idempotency-Key`: a retry
    /// with the same key and body gets the first answer, stored in the same transaction as
    /// the effect.
    async fn idempotent_write<T, F>(&self, key: Option<IdempotencyKey>, op: F) -> Result<T>
    where
        T: Serialize + DeserializeOwned + Send + 'static,
        F: for<'c> FnOnce(&'c mut Conn) -> BoxFuture<'c, Result<T>> + Send + 'static,
    {
        self.store
            .write(move |conn| {
                Box::pin(async move {
                    let Some(key) = key else {
                        return op(conn).await;
                    };
                    if let Some(stored) = idempotency::find(conn, &key.key, key.route).await? {
                        if stored.request_sha256 != key.request_sha256 {
                            return Err(SchedulerError::IdempotencyKeyReused);
                        }
                        return serde_json::from_str(&stored.response_json).map_err(|e| {
                            StoreError::Corrupt(format!("stored idempotent answer: {e}")).into()
                        });
                    }
                    let answer = op(conn).await?;
                    let response_json = serde_json::to_string(&answer)
                        .map_err(|e| StoreError::Corrupt(format!("idempotent answer: {e}")))?;
                    let stored = StoredAnswer {
                        request_sha256: key.request_sha256,
                        status: 200,
                        response_json,
                    };
                    idempotency::remember(conn, &key.key, key.route, &stored).await?;
                    Ok(answer)
                })
            })
            .await
    }
}

/// A client's `Idempotency-Key`, scoped to its caller, the route it was sent to and the
/// sha256 of the request. Made only by [`IdempotencyKey::of`], so no route can store or find
/// an answer under a key another caller sent: the same key from two callers is two requests.
pub struct IdempotencyKey {
    key: String,
    route: &'static str,
    request_sha256: String,
}

impl IdempotencyKey {
    /// `key` as `acting` sent it to `route`, stored as `CALLER:KEY`. A caller's name holds no
    /// `:` (`team::users_file::NAME_RULE`, and the reserved names), so no caller's key can
    /// spell another's.
    pub fn of(
        acting: &crate::team::Acting,
        key: &str,
        route: &'static str,
        request_sha256: String,
    ) -> IdempotencyKey {
        debug_assert!(!acting.caller.name.contains(':'), "{}", acting.caller.name);
        IdempotencyKey {
            key: format!("{}:{key}", acting.caller.name),
            route,
            request_sha256,
        }
    }
}
