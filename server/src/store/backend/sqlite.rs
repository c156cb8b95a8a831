//! What is particular to SQLite (the default: one file, one server): how the file is opened
//! and tuned, its transaction statements, and the queries only it runs.

use std::path::Path;
use std::str::FromStr;
use std::time::Duration;

use sqlx::sqlite::{
    SqliteConnectOptions, SqliteConnection, SqliteJournalMode, SqlitePoolOptions, SqliteRow,
    SqliteSynchronous,
};
use sqlx::{ConnectOptions, Connection, Row, TypeInfo, ValueRef};

use super::{progressed_queue, settle_history, Dialect, Opened, READERS};
use crate::store::db::{Arg, Conn, Pool};
use crate::store::StoreError;

/// How many waiting writes one transaction takes at most.
const MAX_GROUP_COMMIT: usize = 512;
const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

pub(super) static DIALECT: Dialect = Dialect {
    // `IMMEDIATE` takes the write lock at once, not at the first write.
    begin_write: "BEGIN IMMEDIATE; SAVEPOINT op",
    begin_snapshot: "BEGIN",
    progressed_queue: PROGRESSED_QUEUE,
    table_count: "SELECT COUNT(*) FROM sqlite_master WHERE type = 'table' AND name = ?",
};

/// Queued runs that made progress before (preempted, failed, lost), in lease order, on
/// their own partial index: a deep queue is mostly runs that never reported a step, which
/// status needs only the sum of (`FRESH_QUEUE`). Named: without statistics SQLite prefers
/// `jobs_state_seq` (state = 'queued'), which reads every queued job (76 ms at 40,000 against
/// 0 ms through this index, measured on the bench's database).
const PROGRESSED_QUEUE: &str = progressed_queue!("INDEXED BY jobs_progressed_queue");

/// Opens (creating if needed) the SQLite file and applies migrations. Commits are durable
/// (`synchronous=FULL`) and readers never wait for the writer (WAL).
pub(in crate::store) async fn open(path: &Path) -> Result<Opened, StoreError> {
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
    if loosen_constraints(&mut writer).await? {
        // The connection that edited the schema parses it afresh.
        writer.close().await?;
        writer = base.clone().connect().await?;
    }
    let mut writer = Conn::Sqlite(writer);
    settle_history(&mut writer).await?;
    let readers = SqlitePoolOptions::new()
        .max_connections(READERS)
        .min_connections(1)
        .connect_with(base.read_only(true))
        .await?;
    Ok(Opened {
        writer,
        readers: Pool::Sqlite(readers),
        leads: true,
        lead: None,
        max_group_commit: MAX_GROUP_COMMIT,
        confirmed_at: i64::MAX,
    })
}

/// Constraints a later version loosened, as (table, the text in its `CREATE TABLE`, the text
/// that replaces it). Each only lets more rows in, so no stored row can break it.
const LOOSENED: [(&str, &str, &str); 2] = [
    // Issue 28: the `stopped` state.
    (
        "jobs",
        "'cancelled', 'held')",
        "'cancelled', 'held', 'stopped')",
    ),
    // Issue 28: a NaN metric value, which SQLite stores as NULL.
    (
        "metric_points",
        "value     REAL NOT NULL,",
        "value     REAL,",
    ),
];

/// Loosens the constraints of `LOOSENED` that this file still has; true if it changed any.
/// SQLite has no `ALTER COLUMN`. Rebuilding `jobs` would mean recreating its 13 indexes and
/// triggers; sqlite.org documents a simpler procedure "for removing CHECK or FOREIGN KEY or
/// NOT NULL constraints" that rewrites the table's definition in place, in one transaction,
/// and bumps the schema version so every connection reparses it
/// (https://www.sqlite.org/lang_altertable.html#otheralter). Widening a CHECK's list is
/// removing the old constraint for one that admits more, so the procedure applies.
async fn loosen_constraints(conn: &mut SqliteConnection) -> Result<bool, StoreError> {
    let mut tx = conn.begin().await?;
    let version: i64 = sqlx::query_scalar("PRAGMA schema_version")
        .fetch_one(&mut *tx)
        .await?;
    let mut changed = false;
    for (table, from, to) in LOOSENED {
        // A table a later version dropped (`metric_points`, store/compact.rs) has nothing
        // to loosen.
        let sql: Option<String> =
            sqlx::query_scalar("SELECT sql FROM sqlite_master WHERE type = 'table' AND name = ?")
                .bind(table)
                .fetch_optional(&mut *tx)
                .await?;
        let Some(sql) = sql.filter(|sql| sql.contains(from)) else {
            continue;
        };
        if !changed {
            sqlx::query("PRAGMA writable_schema = ON")
                .execute(&mut *tx)
                .await?;
        }
        sqlx::query("UPDATE sqlite_master SET sql = ? WHERE type = 'table' AND name = ?")
            .bind(sql.replacen(from, to, 1))
            .bind(table)
            .execute(&mut *tx)
            .await?;
        changed = true;
    }
    if changed {
        sqlx::query(sqlx::AssertSqlSafe(format!(
            "PRAGMA schema_version = {}",
            version + 1
        )))
        .execute(&mut *tx)
        .await?;
        sqlx::query("PRAGMA writable_schema = OFF")
            .execute(&mut *tx)
            .await?;
    }
    tx.commit().await?;
    Ok(changed)
}

/// A SQLite file opened read-only with the driver's own connection, as `podq migrate` reads
/// its source.
pub(in crate::store) async fn open_source(path: &Path) -> Result<SqliteConnection, StoreError> {
    Ok(SqliteConnectOptions::new()
        .filename(path)
        .read_only(true)
        .connect()
        .await?)
}

/// Column `index` of `row` as the type SQLite stored it as (its storage class), so that it
/// binds as that type elsewhere.
pub(in crate::store) fn stored_value(row: &SqliteRow, index: usize) -> Result<Arg, StoreError> {
    let raw = row.try_get_raw(index)?;
    if raw.is_null() {
        // A NULL is typed by its column's declared type: PostgreSQL will not put a text
        // NULL in a BIGINT column.
        let declared = sqlx::Column::type_info(&row.columns()[index])
            .name()
            .to_uppercase();
        return Ok(if declared.contains("INT") {
            Arg::Int(None)
        } else if declared.contains("REAL") {
            Arg::Real(None)
        } else if declared.contains("BLOB") {
            Arg::Blob(None)
        } else {
            Arg::Text(None)
        });
    }
    Ok(match raw.type_info().name() {
        "INTEGER" => Arg::Int(Some(row.try_get(index)?)),
        "REAL" => Arg::Real(Some(row.try_get(index)?)),
        "TEXT" => Arg::Text(Some(row.try_get(index)?)),
        "BLOB" => Arg::Blob(Some(row.try_get(index)?)),
        other => {
            return Err(StoreError::Corrupt(format!(
                "a {other} value in column {index} of a {} row",
                row.columns().len()
            )))
        }
    })
}
