//! What is particular to SQLite (the default: one file, one server): how the file is opened
//! and tuned, its transaction statements, and the queries only it runs.

use std::path::Path;
use std::str::FromStr;
use std::sync::LazyLock;
use std::time::Duration;

use sqlx::sqlite::{
    SqliteConnectOptions, SqliteConnection, SqliteJournalMode, SqlitePoolOptions, SqliteRow,
    SqliteSynchronous,
};
use sqlx::{ConnectOptions, Connection, Row, TypeInfo, ValueRef};

use super::wal::{WalLog, RESTART_BYTES};
use super::{progressed_queue, settle_history, Dialect, Opened, READERS, WRITER_STATEMENTS};
use crate::store::db::{Arg, Conn, Pool};
use crate::store::StoreError;

/// How many waiting writes one transaction takes at most.
const MAX_GROUP_COMMIT: usize = 512;
pub(super) const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

pub(super) static DIALECT: Dialect = Dialect {
    // `IMMEDIATE` takes the write lock at once, not at the first write.
    begin_write: "BEGIN IMMEDIATE; SAVEPOINT op",
    begin_snapshot: "BEGIN",
    progressed_queue: &PROGRESSED_QUEUE,
    table_count: "SELECT COUNT(*) FROM sqlite_master WHERE type = 'table' AND name = ?",
};

/// Queued runs that made progress before (preempted, failed, lost), in lease order, on
/// their own partial index: a deep queue is mostly runs that never reported a step, which
/// status needs only the sum of (`FRESH_QUEUE`). Named: without statistics SQLite prefers
/// `jobs_state_seq` (state = 'queued'), which reads every queued job (76 ms at 40,000 against
/// 0 ms through this index, measured on the bench's database).
static PROGRESSED_QUEUE: LazyLock<String> = LazyLock::new(|| {
    progressed_queue(super::active_run_select!(
        "INDEXED BY jobs_progressed_queue"
    ))
});

/// The migrations that edit a table's definition in place (`writable_schema`): 0015.
const EDITS_IN_PLACE: &[i64] = &[15];

/// The last migration before history is settled (`settle_history`): the later ones drop
/// the tables it empties, so they run after it.
const SETTLED_BEFORE: i64 = 20;

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
    // A migration that edits a table's definition in place leaves the connection that ran it
    // with the definition it parsed before: a later `ALTER TABLE … ADD COLUMN` there would
    // splice the column in at the old text's offsets. So the migrations up to each such edit
    // run on a connection of their own.
    for &edit in EDITS_IN_PLACE {
        migrations_through(edit).run(&mut writer).await?;
        writer.close().await?;
        writer = base.clone().connect().await?;
    }
    migrations_through(SETTLED_BEFORE).run(&mut writer).await?;
    // The writer proper parses the schema the migrations left, with its own settings.
    writer.close().await?;
    let writer = base
        .clone()
        // The log's file is cut back to its bound after it starts over (`wal.rs`).
        .pragma("journal_size_limit", RESTART_BYTES.to_string())
        // Each write's savepoint and each statement that changes many rows journal the
        // pages they change, to undo them alone (https://www.sqlite.org/tempfiles.html,
        // "Statement Journal Files"). Past 64 KiB that journal went to a temporary file:
        // 2% of the server's time under a thousand pods went to writing it (`perf`,
        // benches/fleet.rs). With `temp_store` in memory it never spills
        // (`openSubJournal` in sqlite3.c); it holds one transaction's pages at most.
        .pragma("temp_store", "memory")
        .statement_cache_capacity(WRITER_STATEMENTS)
        .connect()
        .await?;
    let mut writer = Conn::Sqlite(writer);
    settle_history(&mut writer).await?;
    if let Conn::Sqlite(conn) = &mut writer {
        sqlx::migrate!("../migrations/sqlite").run(conn).await?;
    }
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
        wal: Some(WalLog::of(path)),
    })
}

/// The SQLite migrations up to and including `version`, to run on a store that may have
/// more applied already.
fn migrations_through(version: i64) -> sqlx::migrate::Migrator {
    super::only_through(sqlx::migrate!("../migrations/sqlite"), version)
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

#[cfg(test)]
mod tests {
    use sqlx::{ConnectOptions, Executor};

    use super::*;
    use crate::store::Store;

    /// Every table, index, trigger and view as `sqlite_master` defines it.
    async fn schema(path: &Path) -> Vec<(String, String, Option<String>)> {
        let mut conn = SqliteConnectOptions::new()
            .filename(path)
            .read_only(true)
            .connect()
            .await
            .unwrap();
        sqlx::query_as(
            "SELECT type, name, sql FROM sqlite_master WHERE name NOT LIKE 'sqlite_%' \
             AND name != '_sqlx_migrations' ORDER BY type, name",
        )
        .fetch_all(&mut conn)
        .await
        .unwrap()
    }

    #[tokio::test]
    async fn a_file_of_the_first_release_migrates_to_the_schema_of_a_fresh_one() {
        let dir = tempfile::tempdir().unwrap();
        let (old, fresh) = (dir.path().join("old.db"), dir.path().join("fresh.db"));
        // The first release's file: migration 0001 only, with a job in it.
        let first = migrations_through(1);
        let mut conn = SqliteConnectOptions::new()
            .filename(&old)
            .create_if_missing(true)
            .connect()
            .await
            .unwrap();
        first.run(&mut conn).await.unwrap();
        conn.execute(
            "INSERT INTO jobs (id, seq, experiment, group_name, state, accelerator, config_json, \
             config_sha256, est_hours, checkpoint_dir, max_failures, submitted_at, updated_at) \
             VALUES ('j', 1, 'e', 'g', 'queued', 'v4-64', '{}', 's', 1, 'd', 3, 0, 0)",
        )
        .await
        .unwrap();
        conn.close().await.unwrap();

        drop(Store::open(&old).await.unwrap());
        drop(Store::open(&fresh).await.unwrap());
        let (migrated, made) = (schema(&old).await, schema(&fresh).await);
        assert_eq!(
            migrated.iter().map(|(t, n, _)| (t, n)).collect::<Vec<_>>(),
            made.iter().map(|(t, n, _)| (t, n)).collect::<Vec<_>>()
        );
        for (a, b) in migrated.iter().zip(&made) {
            assert_eq!(a, b, "the {} {} differs", a.0, a.1);
        }
        // Opened again, nothing is edited: the schema is the migrations' alone.
        drop(Store::open(&old).await.unwrap());
        assert_eq!(schema(&old).await, migrated);
        // The loosened CHECK admits the state stop rules added (`stopped`).
        let mut conn = SqliteConnectOptions::new()
            .filename(&old)
            .connect()
            .await
            .unwrap();
        conn.execute("UPDATE jobs SET state = 'stopped' WHERE id = 'j'")
            .await
            .unwrap();
    }

    /// Log chunks stored by the job's id before migration 0017 are read back by its `seq`
    /// after it.
    #[tokio::test]
    async fn log_chunks_stored_before_they_were_keyed_by_seq_read_back_after_it() {
        use crate::store::chunks::{encode_lines, StoredLine};
        use crate::store::logs::{self, LogFilter};

        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("old.db");
        let options = SqliteConnectOptions::new()
            .filename(&path)
            .create_if_missing(true);
        // Through 0016, the migrations up to 0015's in-place edit on a connection of their
        // own, as `open` runs them.
        for through in [15, 16] {
            let mut conn = options.clone().connect().await.unwrap();
            migrations_through(through).run(&mut conn).await.unwrap();
            conn.close().await.unwrap();
        }
        let job = podq_api::JobId::new_random();
        let mut conn = options.connect().await.unwrap();
        sqlx::query(
            "INSERT INTO jobs (id, seq, experiment, group_name, state, accelerator, config_json, \
             config_sha256, est_hours, checkpoint_dir, max_failures, submitted_at, updated_at) \
             VALUES (?, 7, 'e', 'g', 'running', 'v4-64', '{}', 's', 1, 'd', 3, 0, 0)",
        )
        .bind(job.to_string())
        .execute(&mut conn)
        .await
        .unwrap();
        let line = StoredLine {
            position: 0,
            offset: 0,
            at: 5,
            text: "step 1".into(),
        };
        sqlx::query(
            "INSERT INTO log_chunks (job_id, batch, attempt, host, first_offset, lines, \
             last_at, data) VALUES (?, 1, 1, 3, 0, 1, 5, ?)",
        )
        .bind(job.to_string())
        .bind(encode_lines([&line]))
        .execute(&mut conn)
        .await
        .unwrap();
        conn.close().await.unwrap();

        let store = Store::open(&path).await.unwrap();
        let mut reader = store.read().await.unwrap();
        let rows = logs::page(&mut reader, job, &LogFilter::default(), -1, 10)
            .await
            .unwrap();
        assert_eq!(
            rows.iter()
                .map(|row| (row.host, row.text.as_str()))
                .collect::<Vec<_>>(),
            [(3, "step 1")]
        );
        let keyed: i64 = crate::store::db::query_scalar("SELECT job_seq FROM log_chunks")
            .fetch_one(&mut reader)
            .await
            .unwrap();
        assert_eq!(keyed, 7);
    }
}
