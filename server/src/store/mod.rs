//! SQLite storage: one writer task that group-commits, and a pool of read-only connections.
//!
//! Every state change runs as a closure on the single writer connection. The writer takes all
//! closures that are waiting, runs each inside its own SAVEPOINT (so one failing closure does
//! not undo the others), commits once with `synchronous=FULL`, and only then answers each
//! caller. An answer therefore always means "durable", while many concurrent requests share
//! one fsync: that is what lets the lease cycle reach thousands per second on SQLite.

pub mod catalog;
pub mod checkpoints;
pub mod goodput;
pub mod grant;
pub mod idempotency;
pub mod jobs;
pub mod leases;
pub mod logs;
pub mod metrics;
pub mod pod_time;
pub mod pods;
mod rows;
pub mod schedules;
pub mod views;
pub mod webhooks;

use std::panic::AssertUnwindSafe;
use std::path::Path;
use std::str::FromStr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::future::BoxFuture;
use futures::FutureExt;
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteConnection, SqliteJournalMode, SqlitePool, SqlitePoolOptions,
    SqliteSynchronous,
};
use sqlx::{ConnectOptions, Connection};
use tokio::sync::{mpsc, oneshot, watch};

pub use rows::*;

/// How many waiting writes one transaction takes at most.
const MAX_GROUP_COMMIT: usize = 512;
const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("database error: {0}")]
    Database(#[from] sqlx::Error),
    #[error("database migration failed: {0}")]
    Migrate(#[from] sqlx::migrate::MigrateError),
    #[error("the store's writer has stopped")]
    WriterStopped,
    #[error("a write panicked")]
    WritePanicked,
    #[error("corrupt row: {0}")]
    Corrupt(String),
}

type RunOp = Box<dyn for<'c> FnOnce(&'c mut SqliteConnection) -> BoxFuture<'c, bool> + Send>;

/// One queued write: `run` does the work and says whether it succeeded; `finish` is called
/// exactly once, after the transaction's fate is known (or without `run`, if the transaction
/// could not start), and answers the caller.
struct WriteOp {
    run: RunOp,
    finish: Box<dyn FnOnce(Result<(), String>) + Send>,
}

/// Handle to the database. Cheap to clone.
#[derive(Clone)]
pub struct Store {
    readers: SqlitePool,
    writer: mpsc::Sender<WriteOp>,
    /// Counts committed write transactions, so readers can wait for news instead of polling.
    commits: watch::Receiver<u64>,
    instruments: WriterInstruments,
}

/// What the writer reports about itself, for `/metrics`.
#[derive(Clone)]
pub struct WriterInstruments {
    /// Writes waiting when the writer last took a batch.
    pub queue: prometheus_client::metrics::gauge::Gauge,
    /// Writes per committed transaction.
    pub batch: prometheus_client::metrics::histogram::Histogram,
}

impl Default for WriterInstruments {
    fn default() -> Self {
        WriterInstruments {
            queue: Default::default(),
            batch: prometheus_client::metrics::histogram::Histogram::new(
                prometheus_client::metrics::histogram::exponential_buckets(1.0, 2.0, 10),
            ),
        }
    }
}

/// What a failed write tells its caller: its own error, or that the commit failed.
pub trait FromCommitFailure {
    fn commit_failed(message: String) -> Self;
}

impl FromCommitFailure for StoreError {
    fn commit_failed(message: String) -> Self {
        StoreError::Database(sqlx::Error::Protocol(message))
    }
}

impl Store {
    /// Opens (creating if needed) the database file, applies migrations and starts the writer.
    pub async fn open(path: &Path) -> Result<Store, StoreError> {
        let base = SqliteConnectOptions::from_str("sqlite:")?
            .filename(path)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(SqliteSynchronous::Full)
            .foreign_keys(true)
            .busy_timeout(BUSY_TIMEOUT)
            .disable_statement_logging();
        let mut writer = base.clone().create_if_missing(true).connect().await?;
        sqlx::migrate!("../migrations").run(&mut writer).await?;
        let settled = goodput::settle_unsettled(&mut writer).await?;
        if settled > 0 {
            tracing::info!(
                attempts = settled,
                "stored the goodput of attempts that ended before it was kept per attempt"
            );
        }
        let settled = pod_time::settle_unsettled(&mut writer).await?;
        if settled > 0 {
            tracing::info!(
                attempts = settled,
                "split the pod time of attempts that ended before it was kept by cause"
            );
        }
        let readers = SqlitePoolOptions::new()
            .max_connections(8)
            .min_connections(1)
            .connect_with(base.read_only(true))
            .await?;
        let (tx, rx) = mpsc::channel(4096);
        let (committed, commits) = watch::channel(0);
        let instruments = WriterInstruments::default();
        tokio::spawn(run_writer(writer, rx, committed, instruments.clone()));
        Ok(Store {
            readers,
            writer: tx,
            commits,
            instruments,
        })
    }

    /// The read-only pool: for queries that change nothing.
    pub fn reader(&self) -> &SqlitePool {
        &self.readers
    }

    /// Runs `op` on the writer connection inside its own savepoint and answers once the
    /// transaction it joined is durably committed. An `Err` from `op` rolls back only its
    /// own changes.
    pub async fn write<T, E, F>(&self, op: F) -> Result<T, E>
    where
        T: Send + 'static,
        E: From<StoreError> + FromCommitFailure + Send + 'static,
        F: for<'c> FnOnce(&'c mut SqliteConnection) -> BoxFuture<'c, Result<T, E>> + Send + 'static,
    {
        let (answer_tx, answer_rx) = oneshot::channel::<Result<T, E>>();
        let slot = Arc::new(Mutex::new(None::<Result<T, E>>));
        let run_slot = Arc::clone(&slot);
        let job = WriteOp {
            run: Box::new(move |conn| {
                async move {
                    let result = AssertUnwindSafe(op(conn))
                        .catch_unwind()
                        .await
                        .unwrap_or_else(|_| Err(E::from(StoreError::WritePanicked)));
                    let ok = result.is_ok();
                    *run_slot.lock().expect("write slot") = Some(result);
                    ok
                }
                .boxed()
            }),
            finish: Box::new(move |commit| {
                let result = slot.lock().expect("write slot").take();
                let answer = match (commit, result) {
                    (_, Some(Err(e))) => Err(e),
                    (Ok(()), Some(Ok(value))) => Ok(value),
                    (Err(message), _) => Err(E::commit_failed(message)),
                    (Ok(()), None) => Err(E::from(StoreError::WriterStopped)),
                };
                let _ = answer_tx.send(answer);
            }),
        };
        self.writer
            .send(job)
            .await
            .map_err(|_| E::from(StoreError::WriterStopped))?;
        answer_rx
            .await
            .unwrap_or_else(|_| Err(E::from(StoreError::WriterStopped)))
    }

    pub fn instruments(&self) -> WriterInstruments {
        self.instruments.clone()
    }

    /// Changes after every committed write transaction.
    pub fn commits(&self) -> watch::Receiver<u64> {
        self.commits.clone()
    }

    /// Checks that both the writer and a reader answer.
    pub async fn ping(&self) -> Result<(), StoreError> {
        sqlx::query("SELECT 1").execute(&self.readers).await?;
        self.write(|conn| {
            async move {
                sqlx::query("SELECT 1").execute(&mut *conn).await?;
                Ok::<_, StoreError>(())
            }
            .boxed()
        })
        .await
    }
}

async fn run_writer(
    mut conn: SqliteConnection,
    mut rx: mpsc::Receiver<WriteOp>,
    committed: watch::Sender<u64>,
    instruments: WriterInstruments,
) {
    let mut batch = Vec::with_capacity(MAX_GROUP_COMMIT);
    while rx.recv_many(&mut batch, MAX_GROUP_COMMIT).await > 0 {
        instruments.queue.set(rx.len() as i64);
        instruments.batch.observe(batch.len() as f64);
        let (finishers, commit) = run_batch(&mut conn, batch.drain(..)).await;
        match &commit {
            Ok(()) => committed.send_modify(|n| *n = n.wrapping_add(1)),
            Err(message) => tracing::error!(error = %message, "write transaction failed"),
        }
        for finish in finishers {
            finish(commit.clone());
        }
    }
    let _ = conn.close().await;
}

type Finisher = Box<dyn FnOnce(Result<(), String>) + Send>;

/// Runs one group of writes in a single transaction and says whether it committed.
async fn run_batch(
    conn: &mut SqliteConnection,
    ops: impl Iterator<Item = WriteOp>,
) -> (Vec<Finisher>, Result<(), String>) {
    let mut finishers = Vec::new();
    let mut pending = Vec::new();
    for op in ops {
        finishers.push(op.finish);
        pending.push(op.run);
    }
    // Statements are paired into one round trip to the connection's thread where possible:
    // that hand-off, not the fsync, is what a write costs most.
    if let Err(e) = sqlx::raw_sql("BEGIN IMMEDIATE; SAVEPOINT op")
        .execute(&mut *conn)
        .await
    {
        let _ = sqlx::query("ROLLBACK").execute(&mut *conn).await;
        return (
            finishers,
            Err(format!("could not begin a write transaction: {e}")),
        );
    }
    let count = pending.len();
    for (index, run) in pending.into_iter().enumerate() {
        let ok = run(conn).await;
        let last = index + 1 == count;
        let end = match (ok, last) {
            (true, false) => "RELEASE op; SAVEPOINT op",
            (false, false) => "ROLLBACK TO op; RELEASE op; SAVEPOINT op",
            (true, true) => "RELEASE op; COMMIT",
            (false, true) => "ROLLBACK TO op; RELEASE op; COMMIT",
        };
        if let Err(e) = sqlx::raw_sql(end).execute(&mut *conn).await {
            let _ = sqlx::query("ROLLBACK").execute(&mut *conn).await;
            return (finishers, Err(format!("write transaction failed: {e}")));
        }
    }
    (finishers, Ok(()))
}

/// Milliseconds since the Unix epoch.
pub fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

pub fn ms_to_datetime(ms: i64) -> chrono::DateTime<chrono::Utc> {
    chrono::DateTime::from_timestamp_millis(ms).unwrap_or_default()
}

#[cfg(test)]
pub(crate) mod test_support {
    use super::Store;

    /// A store on a fresh file in a temporary directory (kept alive by the second value).
    pub async fn scratch_store() -> (Store, tempfile::TempDir) {
        let dir = tempfile::tempdir().expect("temp dir");
        let store = Store::open(&dir.path().join("podq.db"))
            .await
            .expect("open store");
        (store, dir)
    }

    /// Tables small enough by construction that a scan of them costs nothing.
    const SMALL_TABLES: [&str; 3] = ["job_counts", "goodput_totals", "pods"];

    /// Fails unless every step of `plan` (rows of `EXPLAIN QUERY PLAN`) reads an index or a
    /// small table, and, for an `ordered` page, no step sorts the whole result.
    pub fn assert_uses_indexes(what: &str, plan: &[(i64, i64, i64, String)], ordered: bool) {
        let steps: Vec<&str> = plan
            .iter()
            .map(|(_, _, _, detail)| detail.as_str())
            .collect();
        for step in &steps {
            let full_scan = step.starts_with("SCAN ")
                && !step.contains(" USING ")
                && !SMALL_TABLES
                    .iter()
                    .any(|t| step.starts_with(&format!("SCAN {t}")));
            assert!(!full_scan, "{what}: a full scan in {steps:?}");
            assert!(
                !(ordered && step.contains("TEMP B-TREE FOR ORDER BY")),
                "{what}: sorts every match in {steps:?}"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::test_support::{assert_uses_indexes, scratch_store};

    #[tokio::test]
    #[should_panic(expected = "a full scan")]
    async fn the_plan_check_catches_a_full_scan() {
        let (store, _dir) = scratch_store().await;
        let plan: Vec<(i64, i64, i64, String)> =
            sqlx::query_as("EXPLAIN QUERY PLAN SELECT id FROM jobs WHERE config_json = 'x'")
                .fetch_all(store.reader())
                .await
                .unwrap();
        assert_uses_indexes("a filter on an unindexed column", &plan, false);
    }

    #[tokio::test]
    #[should_panic(expected = "sorts every match")]
    async fn the_plan_check_catches_a_sort_of_every_match() {
        let (store, _dir) = scratch_store().await;
        let plan: Vec<(i64, i64, i64, String)> = sqlx::query_as(
            "EXPLAIN QUERY PLAN SELECT id FROM jobs WHERE state = 'queued' ORDER BY updated_at LIMIT 10",
        )
        .fetch_all(store.reader())
        .await
        .unwrap();
        assert_uses_indexes("an order no index has", &plan, true);
    }

    /// The fixed queries that run on every status, lease and dashboard call.
    #[tokio::test]
    async fn the_hot_reads_use_indexes() {
        let (store, _dir) = scratch_store().await;
        // `ordered`: the rows come in the index's order, not sorted after reading all of
        // them (runs on pods are at most one per pod, so their sort costs nothing).
        let queries = [
            ("runs on pods", super::views::RUNS_ON_PODS, false),
            ("progressed queue", super::views::PROGRESSED_QUEUE, true),
            ("fresh queue", super::views::FRESH_QUEUE, false),
            ("any leasable", super::leases::ANY_LEASABLE, false),
            ("open attempts", super::goodput::OPEN_ATTEMPTS, false),
            ("job events", super::jobs::JOB_EVENTS, false),
        ];
        for (what, sql, ordered) in queries {
            let explain = format!("EXPLAIN QUERY PLAN {sql}");
            let mut query =
                sqlx::query_as::<_, (i64, i64, i64, String)>(sqlx::AssertSqlSafe(explain));
            for _ in 0..sql.matches('?').count() {
                query = query.bind(0_i64);
            }
            let plan = query.fetch_all(store.reader()).await.unwrap();
            assert_uses_indexes(what, &plan, ordered);
        }
    }
}
