//! Storage: one writer task that group-commits, and a pool of read-only connections, on
//! SQLite (the default, one file) or PostgreSQL (`--database postgres://…`).
//!
//! Every state change runs as a closure on the single writer connection. The writer takes all
//! closures that are waiting, runs each inside its own SAVEPOINT (so one failing closure does
//! not undo the others), commits once (SQLite with `synchronous=FULL`, PostgreSQL with
//! `synchronous_commit=on`), and only then answers each caller. An answer therefore always
//! means "durable", while many concurrent requests share one fsync: that is what lets the
//! lease cycle reach thousands per second. One writer also keeps the writes serial on both
//! stores (sequence numbers, claims and read-modify-write totals rely on it).

pub mod catalog;
pub mod checkpoints;
pub mod copy;
pub mod db;
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
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::future::BoxFuture;
use futures::FutureExt;
use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions};
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteSynchronous,
};
use sqlx::{ConnectOptions, Connection};
use tokio::sync::{mpsc, oneshot, watch};

pub use db::{Backend, Conn};
pub use rows::*;

/// How many waiting writes one transaction takes at most. PostgreSQL's is lower: a backend
/// caches at most 64 open subtransactions (one per savepoint, `PGPROC_MAX_CACHED_SUBXIDS`);
/// past that, every snapshot taken meanwhile must read `pg_subtrans`
/// (<https://www.postgresql.org/docs/current/subxacts.html>).
const MAX_GROUP_COMMIT_SQLITE: usize = 512;
const MAX_GROUP_COMMIT_POSTGRES: usize = 64;
const BUSY_TIMEOUT: Duration = Duration::from_secs(5);
const READERS: u32 = 8;

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
    #[error("{0}")]
    BadLocation(String),
    /// Another server holds the database's lead: this one answers reads only.
    #[error("this server is a standby: another podq server is active on this database")]
    Standby,
}

/// Whether this server is the one that writes. A SQLite store is always active; servers
/// sharing one PostgreSQL database elect one by an advisory lock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    Active,
    Standby,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Active => "active",
            Role::Standby => "standby",
        }
    }
}

/// The session-level advisory lock that podq servers sharing one PostgreSQL database try; the
/// one holding it is active. Held on the writer's own connection, so whoever can write holds
/// it, and a server whose connection dies stops writing when it loses the lock
/// (<https://www.postgresql.org/docs/15/explicit-locking.html#ADVISORY-LOCKS>). "podq" in ASCII.
const LEAD_LOCK: i64 = 0x706f_6471;
/// How often a standby tries to take the lead, and how often an idle active server checks
/// that it still holds it.
const STANDBY_RETRY: Duration = Duration::from_secs(1);
/// How long the check may take before the connection counts as lost: an active server cut
/// off from its database must stop answering as the active one (heartbeats are answered
/// from memory) before PostgreSQL gives its lock to a standby.
const LEAD_CHECK_TIMEOUT: Duration = Duration::from_secs(2);
/// How long a confirmation of the lead (a commit, or the idle check) holds: past it, the
/// server answers as a standby until the writer confirms again. A write stuck on a silent
/// connection thus stops the server acting as the active one within seconds, while
/// PostgreSQL (with the keepalives docs/operations.md sets) takes about ten to give the lock
/// to another.
const LEAD_FRESHNESS_MS: i64 = 5_000;

/// Where the store lives: a SQLite file, or a PostgreSQL database.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Location {
    Sqlite(PathBuf),
    Postgres(String),
}

impl Location {
    /// A `postgres://` or `postgresql://` URL, a `sqlite://PATH` URL, or a plain file path.
    pub fn parse(text: &str) -> Result<Location, StoreError> {
        if text.starts_with("postgres://") || text.starts_with("postgresql://") {
            PgConnectOptions::from_str(text).map_err(|e| {
                StoreError::BadLocation(format!("`{}` is not a PostgreSQL URL: {e}", redact(text)))
            })?;
            return Ok(Location::Postgres(text.to_owned()));
        }
        if let Some(path) = text.strip_prefix("sqlite://") {
            let path = path.split('?').next().unwrap_or_default();
            if path.is_empty() {
                return Err(StoreError::BadLocation(format!(
                    "`{text}` names no file: write sqlite:///absolute/path.db or sqlite://relative.db"
                )));
            }
            return Ok(Location::Sqlite(PathBuf::from(path)));
        }
        if text.contains("://") {
            return Err(StoreError::BadLocation(format!(
                "`{}` is neither a postgres:// nor a sqlite:// URL",
                redact(text)
            )));
        }
        Ok(Location::Sqlite(PathBuf::from(text)))
    }

    pub fn backend(&self) -> Backend {
        match self {
            Location::Sqlite(_) => Backend::Sqlite,
            Location::Postgres(_) => Backend::Postgres,
        }
    }
}

/// What a location looks like in a log or an error: a URL's password is not shown.
pub fn redact(text: &str) -> String {
    let Some((scheme, rest)) = text.split_once("://") else {
        return text.to_owned();
    };
    let authority_end = rest.find('/').unwrap_or(rest.len());
    match rest[..authority_end].rfind('@') {
        Some(at) => match rest[..at].split_once(':') {
            Some((user, _password)) => format!("{scheme}://{user}:***{}", &rest[at..]),
            None => text.to_owned(),
        },
        None => text.to_owned(),
    }
}

impl std::fmt::Display for Location {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Location::Sqlite(path) => write!(f, "{}", path.display()),
            Location::Postgres(url) => f.write_str(&redact(url)),
        }
    }
}

type RunOp = Box<dyn for<'c> FnOnce(&'c mut Conn) -> BoxFuture<'c, bool> + Send>;

/// One queued write: `run` does the work and says whether it succeeded; `finish` is called
/// exactly once, after the transaction's fate is known (or without `run`, if the transaction
/// could not start), and answers the caller.
struct WriteOp {
    run: RunOp,
    finish: Finisher,
}

/// Why a write was not committed.
#[derive(Clone, Debug)]
enum WriteFailure {
    Commit(String),
    Standby,
}

#[derive(Clone)]
enum Readers {
    Sqlite(SqlitePool),
    Postgres(PgPool),
}

/// Handle to the database. Cheap to clone.
#[derive(Clone)]
pub struct Store {
    readers: Readers,
    writer: mpsc::Sender<WriteOp>,
    /// Counts committed write transactions, so readers can wait for news instead of polling.
    commits: watch::Receiver<u64>,
    role: watch::Receiver<Role>,
    /// When the writer last confirmed it holds the lead (ms since the epoch); `i64::MAX`
    /// for SQLite, which always does.
    confirmed: Arc<AtomicI64>,
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

/// How the writer reaches its database again after the connection broke (PostgreSQL only:
/// a SQLite file does not go away).
type Reconnect = Box<dyn Fn() -> BoxFuture<'static, Result<Conn, sqlx::Error>> + Send + Sync>;

impl Store {
    /// Opens (creating if needed) the SQLite file, applies migrations and starts the writer.
    pub async fn open(path: &Path) -> Result<Store, StoreError> {
        Store::open_at(&Location::Sqlite(path.to_owned())).await
    }

    /// Opens the store at `location`, applies its migrations and starts the writer.
    pub async fn open_at(location: &Location) -> Result<Store, StoreError> {
        match location {
            Location::Sqlite(path) => Store::open_sqlite(path).await,
            Location::Postgres(url) => Store::open_postgres(url).await,
        }
    }

    async fn open_sqlite(path: &Path) -> Result<Store, StoreError> {
        let base = SqliteConnectOptions::from_str("sqlite:")?
            .filename(path)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(SqliteSynchronous::Full)
            .foreign_keys(true)
            .busy_timeout(BUSY_TIMEOUT)
            .disable_statement_logging();
        let mut writer = base.clone().create_if_missing(true).connect().await?;
        sqlx::migrate!("../migrations/sqlite")
            .run(&mut writer)
            .await?;
        let mut writer = Conn::Sqlite(writer);
        settle_history(&mut writer).await?;
        let readers = SqlitePoolOptions::new()
            .max_connections(READERS)
            .min_connections(1)
            .connect_with(base.read_only(true))
            .await?;
        Ok(Store::start(
            Readers::Sqlite(readers),
            Writer {
                conn: writer,
                lead: None,
                max_group_commit: MAX_GROUP_COMMIT_SQLITE,
                confirmed: Arc::new(AtomicI64::new(i64::MAX)),
            },
            Role::Active,
        ))
    }

    /// Opens a PostgreSQL store. The server that takes the lead lock migrates the database
    /// and writes; any other becomes a standby that answers reads and takes the lead when it
    /// is free (see [`Role`]).
    async fn open_postgres(url: &str) -> Result<Store, StoreError> {
        let base = PgConnectOptions::from_str(url)?.disable_statement_logging();
        let writer_options = base.clone().options([("synchronous_commit", "on")]);
        let mut writer = Conn::Postgres(writer_options.clone().connect().await?);
        let role = if take_lead(&mut writer).await? {
            prepare_to_lead(&mut writer).await?;
            Role::Active
        } else {
            tracing::info!("another podq server is active on this database: standing by");
            Role::Standby
        };
        let readers = PgPoolOptions::new()
            .max_connections(READERS)
            .min_connections(1)
            .connect_with(base.options([("default_transaction_read_only", "on")]))
            .await?;
        let connect: Reconnect = Box::new(move || {
            let options = writer_options.clone();
            async move { Ok(Conn::Postgres(options.connect().await?)) }.boxed()
        });
        Ok(Store::start(
            Readers::Postgres(readers),
            Writer {
                conn: writer,
                lead: Some(connect),
                max_group_commit: MAX_GROUP_COMMIT_POSTGRES,
                confirmed: Arc::new(AtomicI64::new(now_ms())),
            },
            role,
        ))
    }

    fn start(readers: Readers, writer: Writer, role: Role) -> Store {
        let (tx, rx) = mpsc::channel(4096);
        let (committed, commits) = watch::channel(0);
        let (role_tx, role_rx) = watch::channel(role);
        let confirmed = Arc::clone(&writer.confirmed);
        let instruments = WriterInstruments::default();
        tokio::spawn(run_writer(
            writer,
            rx,
            committed,
            role_tx,
            instruments.clone(),
        ));
        Store {
            readers,
            writer: tx,
            commits,
            role: role_rx,
            confirmed,
            instruments,
        }
    }

    /// Active or standby, now and as it changes.
    pub fn role(&self) -> watch::Receiver<Role> {
        self.role.clone()
    }

    /// Whether this server may act as the active one now: its store leads, and the writer
    /// confirmed it within the last `LEAD_FRESHNESS_MS`.
    pub fn is_active(&self) -> bool {
        *self.role.borrow() == Role::Active
            && now_ms().saturating_sub(self.confirmed.load(Ordering::SeqCst)) <= LEAD_FRESHNESS_MS
    }

    pub fn backend(&self) -> Backend {
        match self.readers {
            Readers::Sqlite(_) => Backend::Sqlite,
            Readers::Postgres(_) => Backend::Postgres,
        }
    }

    /// A read-only connection from the pool: for queries that change nothing.
    pub async fn read(&self) -> Result<Conn, StoreError> {
        Ok(match &self.readers {
            Readers::Sqlite(pool) => Conn::SqlitePooled(pool.acquire().await?),
            Readers::Postgres(pool) => Conn::PostgresPooled(pool.acquire().await?),
        })
    }

    /// Runs `op` on one read connection inside one transaction, so that everything it reads
    /// comes from the same snapshot of the database.
    pub async fn read_snapshot<T, E, F>(&self, op: F) -> Result<T, E>
    where
        E: From<StoreError>,
        F: for<'c> FnOnce(&'c mut Conn) -> BoxFuture<'c, Result<T, E>>,
    {
        let mut snapshot = Snapshot {
            conn: self.read().await?,
            open: false,
        };
        let begin = match snapshot.conn.backend() {
            Backend::Sqlite => "BEGIN",
            Backend::Postgres => "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY",
        };
        snapshot.open = true;
        snapshot.conn.batch(begin).await.map_err(StoreError::from)?;
        let result = op(&mut snapshot.conn).await;
        let end = if result.is_ok() { "COMMIT" } else { "ROLLBACK" };
        let ended = snapshot.conn.batch(end).await;
        snapshot.open = ended.is_err();
        match ended {
            Err(e) if result.is_ok() => Err(StoreError::from(e).into()),
            _ => result,
        }
    }

    /// Runs `op` on the writer connection inside its own savepoint and answers once the
    /// transaction it joined is durably committed. An `Err` from `op` rolls back only its
    /// own changes.
    pub async fn write<T, E, F>(&self, op: F) -> Result<T, E>
    where
        T: Send + 'static,
        E: From<StoreError> + FromCommitFailure + Send + 'static,
        F: for<'c> FnOnce(&'c mut Conn) -> BoxFuture<'c, Result<T, E>> + Send + 'static,
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
                    (Err(WriteFailure::Standby), _) => Err(E::from(StoreError::Standby)),
                    (_, Some(Err(e))) => Err(e),
                    (Ok(()), Some(Ok(value))) => Ok(value),
                    (Err(WriteFailure::Commit(message)), _) => Err(E::commit_failed(message)),
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
        db::query("SELECT 1")
            .execute(&mut self.read().await?)
            .await?;
        self.write(|conn| {
            async move {
                db::query("SELECT 1").execute(conn).await?;
                Ok::<_, StoreError>(())
            }
            .boxed()
        })
        .await
    }
}

/// A pooled connection inside a read transaction. One dropped before its transaction ended
/// (the request was cancelled, or COMMIT failed) is closed instead of going back to the pool
/// with the transaction open.
struct Snapshot {
    conn: Conn,
    open: bool,
}

impl Drop for Snapshot {
    fn drop(&mut self) {
        if self.open {
            self.conn.close_on_drop();
        }
    }
}

/// Work the store does once at start-up on history written by older versions.
async fn settle_history(writer: &mut Conn) -> Result<(), StoreError> {
    let settled = goodput::settle_unsettled(writer).await?;
    if settled > 0 {
        tracing::info!(
            attempts = settled,
            "stored the goodput of attempts that ended before it was kept per attempt"
        );
    }
    let settled = pod_time::settle_unsettled(writer).await?;
    if settled > 0 {
        tracing::info!(
            attempts = settled,
            "split the pod time of attempts that ended before it was kept by cause"
        );
    }
    Ok(())
}

/// Takes the lead lock if it is free; never waits for it.
async fn take_lead(conn: &mut Conn) -> Result<bool, sqlx::Error> {
    db::query_scalar::<bool>("SELECT pg_try_advisory_lock(?)")
        .bind(LEAD_LOCK)
        .fetch_one(conn)
        .await
}

/// What the active server does once before it writes: bring the schema up to date (a
/// database a newer podq migrated is refused) and settle history older versions left.
async fn prepare_to_lead(conn: &mut Conn) -> Result<(), StoreError> {
    if let Conn::Postgres(c) = conn {
        // `run_direct`, not `run`: its generic `Acquire` bound makes the future not `Send`
        // for every lifetime, which the writer task needs.
        sqlx::migrate!("../migrations/postgres")
            .run_direct(None, c, false)
            .await?;
    }
    settle_history(conn).await
}

struct Writer {
    conn: Conn,
    /// How to reach the database again and take the lead (PostgreSQL only: a SQLite file
    /// has one writer by construction).
    lead: Option<Reconnect>,
    max_group_commit: usize,
    confirmed: Arc<AtomicI64>,
}

async fn run_writer(
    mut writer: Writer,
    mut rx: mpsc::Receiver<WriteOp>,
    committed: watch::Sender<u64>,
    role: watch::Sender<Role>,
    instruments: WriterInstruments,
) {
    let mut batch = Vec::with_capacity(writer.max_group_commit);
    let mut lead_check = tokio::time::interval(STANDBY_RETRY);
    lead_check.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        if *role.borrow() == Role::Standby {
            if !writer.stand_by(&mut rx, &committed).await {
                break;
            }
            tracing::info!("took the lead: this server is now the active one");
            writer.confirm();
            role.send_replace(Role::Active);
        }
        tokio::select! {
            taken = rx.recv_many(&mut batch, writer.max_group_commit) => if taken == 0 {
                break;
            },
            _ = lead_check.tick(), if writer.lead.is_some() => {
                if writer.still_leads().await {
                    writer.confirm();
                } else {
                    tracing::error!("lost the database connection and with it the lead: standing by");
                    role.send_replace(Role::Standby);
                }
                continue;
            }
        }
        instruments.queue.set(rx.len() as i64);
        instruments.batch.observe(batch.len() as f64);
        let (finishers, commit) = run_batch(&mut writer.conn, batch.drain(..)).await;
        match &commit {
            Ok(()) => {
                writer.confirm();
                committed.send_modify(|n| *n = n.wrapping_add(1));
            }
            Err(failure) => {
                tracing::error!(error = ?failure, "write transaction failed");
                if !writer.still_leads().await {
                    tracing::error!(
                        "lost the database connection and with it the lead: standing by"
                    );
                    role.send_replace(Role::Standby);
                }
            }
        }
        for finish in finishers {
            finish(commit.clone());
        }
    }
    let _ = match writer.conn {
        Conn::Sqlite(c) => c.close().await,
        Conn::Postgres(c) => c.close().await,
        Conn::SqlitePooled(_) | Conn::PostgresPooled(_) => Ok(()),
    };
}

impl Writer {
    fn confirm(&self) {
        if self.lead.is_some() {
            self.confirmed.store(now_ms(), Ordering::SeqCst);
        }
    }

    /// A new connection in place of one that broke or went silent (dropping the old one ends
    /// its session, and with it any lock it held), within `LEAD_CHECK_TIMEOUT`.
    async fn reconnect(&mut self, connect: &Reconnect) -> bool {
        match tokio::time::timeout(LEAD_CHECK_TIMEOUT, connect()).await {
            Ok(Ok(conn)) => {
                self.conn = conn;
                true
            }
            Ok(Err(e)) => {
                tracing::warn!(error = %e, "the writer cannot reach its database");
                false
            }
            Err(_) => {
                tracing::warn!("the writer's database did not answer a new connection");
                false
            }
        }
    }

    /// After a failed transaction, and every second while idle: whether this server still
    /// holds the lead. A SQLite store always does. A PostgreSQL connection that answers
    /// within `LEAD_CHECK_TIMEOUT` still holds its session's lock; one that broke or went
    /// silent is replaced, and the new one must take the lock again, which fails if a
    /// standby took it meanwhile or the old session still holds it.
    async fn still_leads(&mut self) -> bool {
        let Some(connect) = self.lead.take() else {
            return true;
        };
        let leads = self.check_or_retake(&connect).await;
        self.lead = Some(connect);
        leads
    }

    async fn check_or_retake(&mut self, connect: &Reconnect) -> bool {
        let answered = tokio::time::timeout(LEAD_CHECK_TIMEOUT, self.conn.batch("SELECT 1")).await;
        if matches!(answered, Ok(Ok(()))) {
            return true;
        }
        if !self.reconnect(connect).await {
            return false;
        }
        match tokio::time::timeout(LEAD_CHECK_TIMEOUT, take_lead(&mut self.conn)).await {
            Ok(Ok(true)) => {
                tracing::warn!("the writer's connection broke; reconnected and kept the lead");
                true
            }
            _ => false,
        }
    }

    /// Refuses writes until this server takes the lead (true), or the store is dropped
    /// (false). Meanwhile the commit counter moves every second, so reads cached against it
    /// follow what the active server writes.
    async fn stand_by(
        &mut self,
        rx: &mut mpsc::Receiver<WriteOp>,
        committed: &watch::Sender<u64>,
    ) -> bool {
        let Some(connect) = self.lead.take() else {
            return true;
        };
        let led = self.wait_for_lead(&connect, rx, committed).await;
        self.lead = Some(connect);
        led
    }

    async fn wait_for_lead(
        &mut self,
        connect: &Reconnect,
        rx: &mut mpsc::Receiver<WriteOp>,
        committed: &watch::Sender<u64>,
    ) -> bool {
        let mut tick = tokio::time::interval(STANDBY_RETRY);
        loop {
            tokio::select! {
                op = rx.recv() => match op {
                    Some(op) => (op.finish)(Err(WriteFailure::Standby)),
                    None => return false,
                },
                _ = tick.tick() => {
                    committed.send_modify(|n| *n = n.wrapping_add(1));
                    let alive = tokio::time::timeout(LEAD_CHECK_TIMEOUT, self.conn.batch("SELECT 1")).await;
                    if !matches!(alive, Ok(Ok(()))) && !self.reconnect(connect).await {
                        continue;
                    }
                    let prepared = async {
                        if !take_lead(&mut self.conn).await? {
                            return Ok(false);
                        }
                        prepare_to_lead(&mut self.conn).await?;
                        Ok::<_, StoreError>(true)
                    };
                    // Migrations may take a while; the lock and the connection are dropped
                    // if they fail or never answer.
                    match tokio::time::timeout(Duration::from_secs(300), prepared).await {
                        Ok(Ok(true)) => return true,
                        Ok(Ok(false)) => {}
                        Ok(Err(e)) => {
                            tracing::error!(error = %e, "cannot take the lead; letting it go");
                            self.reconnect(connect).await;
                        }
                        Err(_) => {
                            tracing::error!("taking the lead did not finish; letting it go");
                            self.reconnect(connect).await;
                        }
                    }
                }
            }
        }
    }
}

type Finisher = Box<dyn FnOnce(Result<(), WriteFailure>) + Send>;

/// Runs one group of writes in a single transaction and says whether it committed.
async fn run_batch(
    conn: &mut Conn,
    ops: impl Iterator<Item = WriteOp>,
) -> (Vec<Finisher>, Result<(), WriteFailure>) {
    let mut finishers = Vec::new();
    let mut pending = Vec::new();
    for op in ops {
        finishers.push(op.finish);
        pending.push(op.run);
    }
    // Statements are paired into one round trip where possible: on SQLite that hand-off to
    // the connection's thread, not the fsync, is what a write costs most.
    let begin = match conn.backend() {
        Backend::Sqlite => "BEGIN IMMEDIATE; SAVEPOINT op",
        Backend::Postgres => "BEGIN; SAVEPOINT op",
    };
    if let Err(e) = conn.batch(begin).await {
        let _ = conn.batch("ROLLBACK").await;
        return (
            finishers,
            Err(WriteFailure::Commit(format!(
                "could not begin a write transaction: {e}"
            ))),
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
        if let Err(e) = conn.batch(end).await {
            let _ = conn.batch("ROLLBACK").await;
            return (
                finishers,
                Err(WriteFailure::Commit(format!(
                    "write transaction failed: {e}"
                ))),
            );
        }
    }
    (finishers, Ok(()))
}

/// The fixed queries that run on every status, lease and dashboard call, as (what, SQL,
/// ordered), for the tests that check each store reads them through an index. `ordered`: the
/// rows must come in the index's order, not sorted after reading all of them (runs on pods
/// are at most one per pod, so their sort costs nothing).
pub fn hot_reads(backend: Backend) -> [(&'static str, &'static str, bool); 6] {
    [
        ("runs on pods", views::RUNS_ON_PODS, false),
        (
            "progressed queue",
            match backend {
                Backend::Sqlite => views::PROGRESSED_QUEUE,
                Backend::Postgres => views::PROGRESSED_QUEUE_POSTGRES,
            },
            true,
        ),
        ("fresh queue", views::FRESH_QUEUE, false),
        ("any leasable", leases::ANY_LEASABLE, false),
        ("open attempts", goodput::OPEN_ATTEMPTS, false),
        ("job events", jobs::JOB_EVENTS, false),
    ]
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
    use super::{redact, Location};

    #[test]
    fn a_location_is_a_postgres_url_a_sqlite_url_or_a_path() {
        assert_eq!(
            Location::parse("postgres://u:secret@db:5432/podq").unwrap(),
            Location::Postgres("postgres://u:secret@db:5432/podq".into())
        );
        assert_eq!(
            Location::parse("sqlite:///var/lib/podq.db").unwrap(),
            Location::Sqlite("/var/lib/podq.db".into())
        );
        assert_eq!(
            Location::parse("./podq.db").unwrap(),
            Location::Sqlite("./podq.db".into())
        );
        let error = Location::parse("mysql://u:secret@db/podq")
            .unwrap_err()
            .to_string();
        assert!(
            error.contains("neither") && !error.contains("secret"),
            "{error}"
        );
        assert!(Location::parse("sqlite://").is_err());
        assert_eq!(
            redact("postgres://u:secret@db/podq"),
            "postgres://u:***@db/podq"
        );
    }
}

#[cfg(test)]
mod plan_checks {
    use super::test_support::{assert_uses_indexes, scratch_store};

    #[tokio::test]
    #[should_panic(expected = "a full scan")]
    async fn the_plan_check_catches_a_full_scan() {
        let (store, _dir) = scratch_store().await;
        let plan: Vec<(i64, i64, i64, String)> = crate::store::db::query_as(
            "EXPLAIN QUERY PLAN SELECT id FROM jobs WHERE config_json = 'x'",
        )
        .fetch_all(&mut store.read().await.unwrap())
        .await
        .unwrap();
        assert_uses_indexes("a filter on an unindexed column", &plan, false);
    }

    #[tokio::test]
    #[should_panic(expected = "sorts every match")]
    async fn the_plan_check_catches_a_sort_of_every_match() {
        let (store, _dir) = scratch_store().await;
        let plan: Vec<(i64, i64, i64, String)> = crate::store::db::query_as(
            "EXPLAIN QUERY PLAN SELECT id FROM jobs WHERE state = 'queued' ORDER BY updated_at LIMIT 10",
        )
        .fetch_all(&mut store.read().await.unwrap())
        .await
        .unwrap();
        assert_uses_indexes("an order no index has", &plan, true);
    }

    /// The fixed queries that run on every status, lease and dashboard call.
    #[tokio::test]
    async fn the_hot_reads_use_indexes() {
        let (store, _dir) = scratch_store().await;
        let queries = super::hot_reads(super::Backend::Sqlite);
        for (what, sql, ordered) in queries {
            let explain = format!("EXPLAIN QUERY PLAN {sql}");
            let mut query =
                crate::store::db::query_as::<(i64, i64, i64, String)>(sqlx::AssertSqlSafe(explain));
            for _ in 0..sql.matches('?').count() {
                query = query.bind(0_i64);
            }
            let plan = query
                .fetch_all(&mut store.read().await.unwrap())
                .await
                .unwrap();
            assert_uses_indexes(what, &plan, ordered);
        }
    }
}
