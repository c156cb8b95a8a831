//! Everything that differs between the two stores lives below this module, one file per
//! backend: how each is opened and tuned, its transaction statements, and the queries only
//! one of them runs (`sqlite.rs`, `postgres.rs`). The rest of the store writes its SQL once,
//! for both, through `db.rs`; where a statement differs it asks [`dialect`].

pub(super) mod postgres;
pub(super) mod sqlite;
pub(super) mod wal;

use std::sync::LazyLock;

use futures::future::BoxFuture;

use super::db::{self, Pool};
use super::{compact, goodput, pod_time, Backend, Conn, StoreError};

// The shape of a statement that differs only in part: each backend fills it in.

/// The columns of an `ActiveRun`, from `jobs j` (read through `$index`, when given) and its
/// open attempt `a`.
macro_rules! active_run_select {
    ($index:literal) => {
        concat!(
            "SELECT j.id, j.experiment, j.group_name, j.state, j.priority, j.attempts, j.est_hours, \
             j.last_step, j.total_steps, a.first_step, a.first_step_at, a.end_step, \
             (SELECT string_agg(l.experiment, ',') FROM jobs l \
                WHERE l.same_as = j.id AND l.link_cancelled = 0) AS linked \
             FROM jobs j ",
            $index,
            " LEFT JOIN attempts a ON a.job_id = j.id AND a.attempt = j.attempts \
               AND a.ended_at IS NULL "
        )
    };
}

/// Queued runs that made progress before (preempted, failed, lost), in lease order, after
/// `select` (`active_run_select!` through the backend's index, when given): each backend
/// reads them on their own partial index (`Dialect::progressed_queue`).
pub(super) fn progressed_queue(select: &str) -> String {
    format!(
        "{select}WHERE {} AND j.progressed = 1 ORDER BY j.priority DESC, j.seq",
        super::job_state::in_queue("j.")
    )
}
pub(super) use active_run_select;

/// The statements that differ between the stores, one set per backend.
pub(super) struct Dialect {
    /// Starts a write transaction and its first write's savepoint, in one round trip.
    pub begin_write: &'static str,
    /// Starts a read transaction whose reads all come from one snapshot.
    pub begin_snapshot: &'static str,
    /// The queued runs that made progress (`views::active_runs`), on their partial index.
    pub progressed_queue: &'static LazyLock<String>,
    /// Counts the tables named `?` (0 or 1).
    pub table_count: &'static str,
}

pub(super) fn dialect(backend: Backend) -> &'static Dialect {
    match backend {
        Backend::Sqlite => &sqlite::DIALECT,
        Backend::Postgres => &postgres::DIALECT,
    }
}

/// Read-only connections in the pool, on either backend.
const READERS: u32 = 8;

/// How many prepared statements the writer's connection keeps, on either backend (sqlx's
/// default is 100). A merged write's statement has one row per report it merged
/// (`scheduler/lease/merge.rs`), so each kind comes in as many shapes as merges have sizes:
/// hundreds of statement texts at 1,000 pods. With 100 kept, a shape the cache had dropped
/// was compiled again before it ran, on PostgreSQL after a `Parse` and a `Close` round trip;
/// with 1,000 the slow calls under a fleet were fewer, and SQLite's reports faster for a
/// little memory (benches/fleet.rs; the figures are in docs/performance.md). On PostgreSQL a
/// `statement-cache-capacity` in the URL still wins.
const WRITER_STATEMENTS: usize = 1000;

/// What a backend opened, for the store to start its writer on.
pub(super) struct Opened {
    /// The writer's own connection, migrated and settled if this server leads.
    pub writer: Conn,
    pub readers: Pool,
    /// Whether this server took the lead (a SQLite store always does).
    pub leads: bool,
    /// How to reach the database again and take the lead (PostgreSQL only).
    pub lead: Option<Reconnect>,
    /// How many waiting writes one transaction takes at most.
    pub max_group_commit: usize,
    /// Since when the lead counts as confirmed (ms since the epoch; `i64::MAX`: always).
    pub confirmed_at: i64,
    /// SQLite's log, which the writer keeps from growing without bound (`wal.rs`); none on
    /// PostgreSQL.
    pub wal: Option<wal::WalLog>,
}

/// How the writer reaches its database again after the connection broke (PostgreSQL only:
/// a SQLite file does not go away).
pub(super) type Reconnect =
    Box<dyn Fn() -> BoxFuture<'static, Result<Conn, sqlx::Error>> + Send + Sync>;

/// `migrator` cut to its migrations up to and including `version`, to run on a store that
/// may have more applied already.
pub(super) fn only_through(
    mut migrator: sqlx::migrate::Migrator,
    version: i64,
) -> sqlx::migrate::Migrator {
    migrator.migrations = migrator
        .migrations
        .iter()
        .filter(|m| m.version <= version)
        .cloned()
        .collect::<Vec<_>>()
        .into();
    migrator.set_ignore_missing(true);
    migrator
}

async fn has_table(conn: &mut Conn, table: &str) -> Result<bool, StoreError> {
    let sql = dialect(conn.backend()).table_count;
    let count: i64 = db::query_scalar(sql).bind(table).fetch_one(conn).await?;
    Ok(count > 0)
}

/// Work the store does once at start-up on history written by older versions, on either
/// backend, before it writes anything else: after the migrations through
/// `SETTLED_BEFORE` of its backend, before the later ones (which drop what it emptied).
pub(super) async fn settle_history(writer: &mut Conn) -> Result<(), StoreError> {
    let settled = goodput::settle_unsettled(writer).await?;
    if settled > 0 {
        tracing::info!(
            attempts = settled,
            "stored the goodput of attempts that ended before it was kept per attempt"
        );
    }
    let old = compact::OldTables {
        points: has_table(writer, "metric_points").await?,
        lines: has_table(writer, "log_lines").await?,
    };
    let (points, lines) = compact::compact_old_rows(writer, old).await?;
    if points + lines > 0 {
        tracing::info!(
            points,
            lines,
            "moved metric points and log lines stored a row each into chunks"
        );
    }
    let folded = compact::fold_old_tails(writer).await?;
    if folded > 0 {
        tracing::info!(
            series = folded,
            "folded the metric tails an older version kept into chunks"
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
