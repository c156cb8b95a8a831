//! Everything that differs between the two stores lives below this module, one file per
//! backend: how each is opened and tuned, its transaction statements, and the queries only
//! one of them runs (`sqlite.rs`, `postgres.rs`). The rest of the store writes its SQL once,
//! for both, through `db.rs`; where a statement differs it asks [`dialect`].

pub(super) mod postgres;
pub(super) mod sqlite;

use super::{goodput, pod_time, Backend, Conn, Location, Store, StoreError};

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

/// Queued runs that made progress before (preempted, failed, lost), in lease order, through
/// `$index` (when given): each backend reads them on their own partial index
/// (`Dialect::progressed_queue`).
macro_rules! progressed_queue {
    ($index:literal) => {
        concat!(
            $crate::store::backend::active_run_select!($index),
            "WHERE j.state = 'queued' AND j.same_as IS NULL AND j.last_step IS NOT NULL \
             ORDER BY j.priority DESC, j.seq"
        )
    };
}
pub(super) use {active_run_select, progressed_queue};

/// The statements that differ between the stores, one set per backend.
pub(super) struct Dialect {
    /// Starts a write transaction and its first write's savepoint, in one round trip.
    pub begin_write: &'static str,
    /// Starts a read transaction whose reads all come from one snapshot.
    pub begin_snapshot: &'static str,
    /// The queued runs that made progress (`views::active_runs`), on their partial index.
    pub progressed_queue: &'static str,
}

pub(super) fn dialect(backend: Backend) -> &'static Dialect {
    match backend {
        Backend::Sqlite => &sqlite::DIALECT,
        Backend::Postgres => &postgres::DIALECT,
    }
}

/// Opens the store at `location`, applies its migrations and starts the writer.
pub(super) async fn open(location: &Location) -> Result<Store, StoreError> {
    match location {
        Location::Sqlite(path) => sqlite::open(path).await,
        Location::Postgres(url) => postgres::open(url).await,
    }
}

/// Work the store does once at start-up on history written by older versions, on either
/// backend, before it writes anything else.
pub(super) async fn settle_history(writer: &mut Conn) -> Result<(), StoreError> {
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
