//! Storage: one writer task that group-commits, and a pool of read-only connections, on
//! SQLite (the default, one file) or PostgreSQL (`--database postgres://…`).
//!
//! Every state change runs as a closure on the single writer connection (`writer.rs`), which
//! commits many of them at once and answers each only when its transaction is durable.
//! Reads run on a pool of read-only connections, alone or in one snapshot (`readers.rs`).
//! Servers sharing one PostgreSQL database elect the one that writes (`lead.rs`).
//!
//! The SQL is written once for both stores and run through `db.rs`; what differs between them
//! (opening, settings, the statements only one of them runs) lives in `backend/`. The other
//! files hold the SQL of one subject each (jobs, events, leases, pod time, …).

pub mod audit;
mod backend;
pub mod catalog;
pub mod checkpoints;
pub mod chunks;
mod compact;
pub mod copy;
pub mod db;
pub mod events;
pub mod evictions;
pub mod goodput;
pub mod grant;
pub mod idempotency;
mod index_checks;
pub mod job_accelerators;
pub mod job_state;
pub mod jobs;
mod lead;
pub mod leases;
pub mod links;
mod location;
pub mod logs;
pub mod metric_export;
pub mod metrics;
#[cfg(test)]
mod module_graph;
pub mod pod_time;
pub mod pod_time_model;
pub mod pods;
mod readers;
pub mod recoveries;
mod rows;
pub mod rungs;
pub mod schedules;
pub mod stop_rules;
mod time;
pub mod users;
pub mod views;
pub mod webhooks;
mod writer;

use std::path::Path;
use std::sync::atomic::AtomicI64;
use std::sync::Arc;

use futures::FutureExt;
use podq_api::JobId;
use tokio::sync::{mpsc, watch};

pub use db::{Backend, Conn};
pub use index_checks::hot_reads;
pub use lead::Role;
pub use location::{redact, Location};
pub use rows::*;
pub use time::{ms_to_datetime, now_ms};
pub use writer::{Changes, FromCommitFailure, WriterInstruments};

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("database error: {0}")]
    Database(sqlx::Error),
    #[error("database migration failed: {0}")]
    Migrate(#[from] sqlx::migrate::MigrateError),
    #[error("the store's writer has stopped")]
    WriterStopped,
    #[error("a write panicked")]
    WritePanicked,
    #[error("corrupt row: {0}")]
    Corrupt(String),
    /// A write of a job's state that `job_state`'s table refuses: nothing was changed.
    #[error("job {job}: {refused}")]
    StateRefused {
        job: JobId,
        refused: job_state::Refused,
    },
    #[error("{0}")]
    BadLocation(String),
    /// Another server holds the database's lead: this one answers reads only.
    #[error("this server is a standby: another podq server is active on this database")]
    Standby,
}

/// A value the database holds that podq cannot read (a job state no release wrote) is
/// corrupt data, for a person to look at, not an outage to retry.
impl From<sqlx::Error> for StoreError {
    fn from(e: sqlx::Error) -> Self {
        match e {
            sqlx::Error::ColumnDecode { .. } | sqlx::Error::Decode(_) => {
                StoreError::Corrupt(e.to_string())
            }
            e => StoreError::Database(e),
        }
    }
}

/// Handle to the database. Cheap to clone. Its methods live with what they use: writes in
/// `writer.rs`, reads in `readers.rs`, the role in `lead.rs`.
#[derive(Clone)]
pub struct Store {
    readers: db::Pool,
    writer: mpsc::Sender<writer::WriteOp>,
    /// Counts committed write transactions, so readers can wait for news instead of polling.
    commits: watch::Receiver<u64>,
    /// Counts those that changed more than reports' progress (`Changes::Progress`).
    state_commits: watch::Receiver<u64>,
    role: watch::Receiver<Role>,
    /// When the writer last confirmed it holds the lead (ms since the epoch); `i64::MAX`
    /// for SQLite, which always does.
    confirmed: Arc<AtomicI64>,
    instruments: WriterInstruments,
}

impl Store {
    /// Opens (creating if needed) the SQLite file, applies migrations and starts the writer.
    pub async fn open(path: &Path) -> Result<Store, StoreError> {
        Store::open_at(&Location::Sqlite(path.to_owned())).await
    }

    /// Opens the store at `location`, applies its migrations and starts the writer.
    pub async fn open_at(location: &Location) -> Result<Store, StoreError> {
        let opened = match location {
            Location::Sqlite(path) => backend::sqlite::open(path).await?,
            Location::Postgres(url) => backend::postgres::open(url).await?,
        };
        Ok(Store::start(opened))
    }

    /// Starts the writer task on what a backend opened.
    fn start(opened: backend::Opened) -> Store {
        let readers = opened.readers;
        let role = if opened.leads {
            Role::Active
        } else {
            Role::Standby
        };
        let writer = writer::Writer {
            conn: opened.writer,
            lead: opened.lead,
            max_group_commit: opened.max_group_commit,
            confirmed: Arc::new(AtomicI64::new(opened.confirmed_at)),
            wal: opened.wal,
        };
        let (tx, rx) = mpsc::channel(4096);
        let (any, commits) = watch::channel(0);
        let (state, state_commits) = watch::channel(0);
        let committed = writer::Commits { any, state };
        let (role_tx, role_rx) = watch::channel(role);
        let confirmed = Arc::clone(&writer.confirmed);
        let instruments = WriterInstruments::default();
        let run = writer::run_writer(writer, rx, committed, role_tx, instruments.clone());
        // Its own thread and runtime: each statement of a write is a round trip to the
        // connection's thread, and on the server's runtime every one of them waited its
        // turn behind the HTTP tasks; with a thousand pods reporting, that queue, not the
        // database, was most of a write's time (benches/fleet.rs). The channels and the
        // connections work across runtimes.
        std::thread::Builder::new()
            .name("podq-writer".into())
            .spawn(move || {
                tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .expect("the writer's runtime")
                    .block_on(run)
            })
            .expect("the writer's thread");
        Store {
            readers,
            writer: tx,
            commits,
            state_commits,
            role: role_rx,
            confirmed,
            instruments,
        }
    }

    pub fn backend(&self) -> Backend {
        self.readers.backend()
    }

    pub fn instruments(&self) -> WriterInstruments {
        self.instruments.clone()
    }

    /// Changes after every committed write transaction.
    pub fn commits(&self) -> watch::Receiver<u64> {
        self.commits.clone()
    }

    /// Changes after every committed write transaction that was more than reports'
    /// progress (`Changes::Progress`).
    pub fn state_commits(&self) -> watch::Receiver<u64> {
        self.state_commits.clone()
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

#[cfg(test)]
pub(crate) mod test_support {
    use super::Store;

    pub use super::index_checks::assert_uses_indexes;

    /// A store on a fresh file in a temporary directory (kept alive by the second value).
    pub async fn scratch_store() -> (Store, tempfile::TempDir) {
        let dir = tempfile::tempdir().expect("temp dir");
        let store = Store::open(&dir.path().join("podq.db"))
            .await
            .expect("open store");
        (store, dir)
    }

    /// A job waiting in the queue for `accelerators` (its list, first choice first), of
    /// `priority` in the class ranked `class_rank`.
    pub async fn submit_waiting(
        store: &Store,
        accelerators: &[&str],
        priority: i64,
        class_rank: i64,
    ) -> podq_api::JobId {
        use futures::FutureExt;
        let id = podq_api::JobId::new_random();
        let list: Vec<String> = accelerators.iter().map(|a| (*a).to_owned()).collect();
        store
            .write(move |conn| {
                async move {
                    super::jobs::insert_job(
                        conn,
                        super::jobs::NewJob {
                            id,
                            experiment: "exp",
                            group: "g",
                            priority,
                            accelerators: &list,
                            config_json: "{}",
                            config_sha256: &id.to_string(),
                            est_hours: 1.0,
                            checkpoint_dir: "gs://b/c",
                            max_failures: 3,
                            same_as: None,
                            total_steps: None,
                            submitted_by: "ada",
                            priority_class: "default",
                            class_rank,
                        },
                    )
                    .await
                }
                .boxed()
            })
            .await
            .expect("submit");
        id
    }

    /// The `seq` of `job_id`, which a report's fence reads in the server: the one-attempt
    /// forms of the report writers look it up.
    pub async fn job_seq(
        conn: &mut super::Conn,
        job_id: podq_api::JobId,
    ) -> Result<i64, super::StoreError> {
        Ok(super::db::query_scalar("SELECT seq FROM jobs WHERE id = ?")
            .bind(job_id)
            .fetch_one(conn)
            .await?)
    }
}
