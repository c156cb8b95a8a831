//! What is particular to PostgreSQL (several servers may share one database): how it is
//! opened and tuned, its transaction statements, the lead lock, and the queries only it
//! runs.

use std::str::FromStr;
use std::sync::LazyLock;

use futures::FutureExt;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::ConnectOptions;

use super::{
    progressed_queue, settle_history, Dialect, Opened, Reconnect, READERS, WRITER_STATEMENTS,
};
use crate::store::db::{self, Conn, Pool};
use crate::store::{now_ms, StoreError};

/// How many waiting writes one transaction takes at most: fewer than on SQLite, since a
/// backend caches at most 64 open subtransactions (one per savepoint,
/// `PGPROC_MAX_CACHED_SUBXIDS`); past that, every snapshot taken meanwhile must read
/// `pg_subtrans` (<https://www.postgresql.org/docs/current/subxacts.html>).
const MAX_GROUP_COMMIT: usize = 64;

pub(super) static DIALECT: Dialect = Dialect {
    begin_write: "BEGIN; SAVEPOINT op",
    begin_snapshot: "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY",
    progressed_queue: &PROGRESSED_QUEUE,
    table_count: "SELECT COUNT(*) FROM information_schema.tables \
                  WHERE table_schema = current_schema() AND table_name = ?",
};

/// PostgreSQL has no `INDEXED BY`; its planner keeps statistics and picks the partial index.
static PROGRESSED_QUEUE: LazyLock<String> =
    LazyLock::new(|| progressed_queue(super::active_run_select!("")));

/// The session-level advisory lock that podq servers sharing one PostgreSQL database try; the
/// one holding it is active. Held on the writer's own connection, so whoever can write holds
/// it, and a server whose connection dies stops writing when it loses the lock
/// (<https://www.postgresql.org/docs/15/explicit-locking.html#ADVISORY-LOCKS>). "podq" in ASCII.
const LEAD_LOCK: i64 = 0x706f_6471;

/// Whether `url` is one the driver can connect with.
pub(in crate::store) fn check_url(url: &str) -> Result<(), sqlx::Error> {
    PgConnectOptions::from_str(url).map(drop)
}

/// Opens a PostgreSQL store. The server that takes the lead lock migrates the database
/// and writes; any other becomes a standby that answers reads and takes the lead when it
/// is free (see `lead.rs`). Commits are durable (`synchronous_commit=on`); readers are
/// read-only sessions.
pub(in crate::store) async fn open(url: &str) -> Result<Opened, StoreError> {
    let base = PgConnectOptions::from_str(url)?.disable_statement_logging();
    let mut writer_options = base.clone().options([("synchronous_commit", "on")]);
    // The URL's own setting, if it has one, is already in `base`.
    let url_sets_cache = reqwest::Url::parse(url).is_ok_and(|parsed| {
        parsed
            .query_pairs()
            .any(|(key, _)| key == "statement-cache-capacity")
    });
    if !url_sets_cache {
        writer_options = writer_options.statement_cache_capacity(WRITER_STATEMENTS);
    }
    let mut writer = Conn::Postgres(writer_options.clone().connect().await?);
    let leads = take_lead(&mut writer).await?;
    if leads {
        prepare_to_lead(&mut writer).await?;
    } else {
        tracing::info!("another podq server is active on this database: standing by");
    }
    let readers = PgPoolOptions::new()
        .max_connections(READERS)
        .min_connections(1)
        .connect_with(base.options([("default_transaction_read_only", "on")]))
        .await?;
    let connect: Reconnect = Box::new(move || {
        let options = writer_options.clone();
        async move { Ok(Conn::Postgres(options.connect().await?)) }.boxed()
    });
    Ok(Opened {
        writer,
        readers: Pool::Postgres(readers),
        leads,
        lead: Some(connect),
        max_group_commit: MAX_GROUP_COMMIT,
        confirmed_at: now_ms(),
        wal: None,
    })
}

/// Takes the lead lock if it is free; never waits for it.
pub(in crate::store) async fn take_lead(conn: &mut Conn) -> Result<bool, sqlx::Error> {
    db::query_scalar::<bool>("SELECT pg_try_advisory_lock(?)")
        .bind(LEAD_LOCK)
        .fetch_one(conn)
        .await
}

/// The last migration before history is settled (`settle_history`): the later ones drop
/// the tables it empties, so they run after it.
const SETTLED_BEFORE: i64 = 12;

/// What the active server does once before it writes: bring the schema up to date (a
/// database a newer podq migrated is refused) and settle history older versions left.
pub(in crate::store) async fn prepare_to_lead(conn: &mut Conn) -> Result<(), StoreError> {
    // `run_direct`, not `run`: its generic `Acquire` bound makes the future not `Send` for
    // every lifetime, which the writer task needs.
    if let Conn::Postgres(c) = &mut *conn {
        super::only_through(sqlx::migrate!("../migrations/postgres"), SETTLED_BEFORE)
            .run_direct(None, c, false)
            .await?;
    }
    settle_history(conn).await?;
    if let Conn::Postgres(c) = conn {
        sqlx::migrate!("../migrations/postgres")
            .run_direct(None, c, false)
            .await?;
    }
    Ok(())
}

/// Makes the generated ids of `table` continue after the largest one it holds (after rows
/// were copied in with their ids).
pub(in crate::store) async fn continue_ids(conn: &mut Conn, table: &str) -> Result<(), StoreError> {
    db::query(sqlx::AssertSqlSafe(format!(
        "SELECT setval(pg_get_serial_sequence('{table}', 'id'), \
         COALESCE((SELECT MAX(id) FROM {table}), 0) + 1, false)"
    )))
    .execute(conn)
    .await?;
    Ok(())
}
