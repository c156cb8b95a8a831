//! Moves what older versions stored a row per metric value (`metric_points`) and a row per
//! log line (`log_lines`) into the chunks of migration 0012; the migration after the move
//! (SQLite 0021, PostgreSQL 0013) drops the old tables.
//!
//! It runs once, at the first start on the new schema, before the server serves (the
//! active server, on PostgreSQL), in one transaction: a crash part way leaves the old rows
//! as they were, and the next start does it again. The old rows are read a page at a time
//! by their keys, so a store of millions of points is never held in memory at once.
//!
//! Likewise, once, the metric tails a PostgreSQL store kept under the versions that kept
//! them there (at most 16 reports of each series, read at once).

use super::chunks::{encode_lines, StoredLine};
use super::db::{self, Conn};
use super::metrics::{self, insert_chunks};
use super::StoreError;
use futures::future::BoxFuture;
use futures::FutureExt;

/// Points a converted chunk holds at most.
const POINTS_PER_CHUNK: i64 = 1024;

/// Lines a converted chunk holds at most (well within a batch's [`super::logs::LINES_PER_BATCH`]).
const LINES_PER_CHUNK: i64 = 4096;

/// Which of the old tables a store still has, as its backend tells.
#[derive(Debug, Clone, Copy)]
pub struct OldTables {
    pub points: bool,
    pub lines: bool,
}

/// Moves the rows of the old tables this store still has into chunks, emptying them;
/// answers (points, lines) moved.
pub async fn compact_old_rows(conn: &mut Conn, old: OldTables) -> Result<(i64, i64), StoreError> {
    if !old.points && !old.lines {
        return Ok((0, 0));
    }
    in_one_transaction(conn, |conn| {
        async move {
            let mut moved = (0, 0);
            if old.points {
                moved.0 = move_points(conn).await?;
                conn.batch("DELETE FROM metric_points").await?;
            }
            if old.lines {
                moved.1 = move_lines(conn).await?;
                conn.batch("DELETE FROM log_lines").await?;
            }
            Ok(moved)
        }
        .boxed()
    })
    .await
}

/// Folds the metric tails a store kept under older versions into chunks, where this
/// version keeps none (PostgreSQL: [`metrics::keeps_tail`]); answers the series folded.
pub async fn fold_old_tails(conn: &mut Conn) -> Result<usize, StoreError> {
    if metrics::keeps_tail(conn.backend()) {
        return Ok(0);
    }
    let held: Option<i64> = db::query_scalar("SELECT series_id FROM metric_tail LIMIT 1")
        .fetch_optional(&mut *conn)
        .await?;
    if held.is_none() {
        return Ok(0);
    }
    in_one_transaction(conn, |conn| metrics::fold_every_tail(conn).boxed()).await
}

/// Runs `work` in a transaction of its own: a crash or an error part way leaves the store
/// as it was, and the next start does the work again.
async fn in_one_transaction<T>(
    conn: &mut Conn,
    work: impl for<'c> FnOnce(&'c mut Conn) -> BoxFuture<'c, Result<T, StoreError>>,
) -> Result<T, StoreError> {
    conn.batch("BEGIN").await?;
    match work(&mut *conn).await {
        Ok(done) => {
            conn.batch("COMMIT").await?;
            Ok(done)
        }
        Err(e) => {
            let _ = conn.batch("ROLLBACK").await;
            Err(e)
        }
    }
}

async fn move_points(conn: &mut Conn) -> Result<i64, StoreError> {
    let series: Vec<i64> = db::query_scalar("SELECT id FROM metric_series ORDER BY id")
        .fetch_all(conn)
        .await?;
    let mut moved = 0;
    for series_id in series {
        let mut after = i64::MIN;
        loop {
            let page: Vec<(i64, Option<f64>, i64)> = db::query_as(
                "SELECT step, value, attempt FROM metric_points \
                 WHERE series_id = ? AND step > ? ORDER BY step LIMIT ?",
            )
            .bind(series_id)
            .bind(after)
            .bind(POINTS_PER_CHUNK)
            .fetch_all(conn)
            .await?;
            let Some(&(last, _, _)) = page.last() else {
                break;
            };
            // A chunk is one attempt's: a page that spans a resume becomes one chunk per run
            // of points of the same attempt, so each point keeps the attempt that wrote it.
            let chunks: Vec<_> = page
                .chunk_by(|a, b| a.2 == b.2)
                .map(|run| {
                    let points = run
                        .iter()
                        .map(|&(step, value, _)| (step, metrics::read(value)))
                        .collect();
                    (series_id, run[0].2, points)
                })
                .collect();
            insert_chunks(conn, &chunks).await?;
            moved += page.len() as i64;
            after = last;
            if (page.len() as i64) < POINTS_PER_CHUNK {
                break;
            }
        }
        db::query("UPDATE metric_series SET last_step = ? WHERE id = ?")
            .bind((after > i64::MIN).then_some(after))
            .bind(series_id)
            .execute(conn)
            .await?;
    }
    Ok(moved)
}

async fn move_lines(conn: &mut Conn) -> Result<i64, StoreError> {
    let hosts: Vec<(String, i64, i64)> = db::query_as(
        "SELECT DISTINCT job_id, attempt, host FROM log_lines ORDER BY job_id, attempt, host",
    )
    .fetch_all(conn)
    .await?;
    let mut moved = 0;
    // Each chunk is a batch of its own: lines of one host keep their order, and a job's
    // hosts follow one another.
    let mut batch = (String::new(), 0_i64);
    for (job_id, attempt, host) in hosts {
        let mut after = -1_i64;
        loop {
            let page: Vec<(i64, i64, String)> = db::query_as(
                "SELECT \"offset\", at, text FROM log_lines \
                 WHERE job_id = ? AND attempt = ? AND host = ? AND \"offset\" > ? \
                 ORDER BY \"offset\" LIMIT ?",
            )
            .bind(&job_id)
            .bind(attempt)
            .bind(host)
            .bind(after)
            .bind(LINES_PER_CHUNK)
            .fetch_all(conn)
            .await?;
            let lines: Vec<StoredLine> = page
                .into_iter()
                .zip(0..)
                .map(|((offset, at, text), position)| StoredLine {
                    position,
                    offset,
                    at,
                    text,
                })
                .collect();
            let (Some(first), Some(last)) = (lines.first(), lines.last()) else {
                break;
            };
            batch = if batch.0 == job_id {
                (job_id.clone(), batch.1 + 1)
            } else {
                (job_id.clone(), 1)
            };
            db::query(
                "INSERT INTO log_chunks (job_seq, batch, attempt, host, first_offset, lines, \
                 last_at, data) VALUES ((SELECT seq FROM jobs WHERE id = ?), ?, ?, ?, ?, ?, ?, ?)",
            )
            .bind(&job_id)
            .bind(batch.1)
            .bind(attempt)
            .bind(host)
            .bind(first.offset)
            .bind(lines.len() as i64)
            .bind(lines.iter().map(|l| l.at).max())
            .bind(encode_lines(lines.iter()))
            .execute(conn)
            .await?;
            moved += lines.len() as i64;
            after = last.offset;
            if (lines.len() as i64) < LINES_PER_CHUNK {
                break;
            }
        }
        db::query("UPDATE log_counts SET top = ? WHERE job_id = ? AND attempt = ? AND host = ?")
            .bind(after)
            .bind(&job_id)
            .bind(attempt)
            .bind(host)
            .execute(conn)
            .await?;
    }
    Ok(moved)
}

#[cfg(test)]
mod tests {
    fn job() -> podq_api::JobId {
        "6a000000-0000-4000-8000-000000000001".parse().unwrap()
    }

    use futures::FutureExt;
    use sqlx::{ConnectOptions, Connection};

    use crate::store::logs::{self, LogFilter};
    use crate::store::{metrics, Store};

    use super::*;

    /// A file at the schema before chunks (migrations 0001-0011), holding points and lines,
    /// opened by this version: every point and line reads back, the old tables are gone,
    /// and a line sent again is still stored once.
    /// A SQLite file at `path` at the schema before chunks (migrations 0001-0011), holding
    /// what `rows` inserts.
    async fn old_file(path: &std::path::Path, rows: &str) {
        let mut old = sqlx::migrate!("../migrations/sqlite");
        old.migrations = old
            .migrations
            .iter()
            .filter(|m| m.version <= 11)
            .cloned()
            .collect::<Vec<_>>()
            .into();
        let mut conn = sqlx::sqlite::SqliteConnectOptions::new()
            .filename(path)
            .create_if_missing(true)
            .connect()
            .await
            .unwrap();
        old.run(&mut conn).await.unwrap();
        let job = "INSERT INTO jobs (id, seq, experiment, group_name, state, accelerator, \
             config_json, config_sha256, est_hours, checkpoint_dir, max_failures, submitted_at, \
             updated_at) VALUES ('6a000000-0000-4000-8000-000000000001', 1, 'e', 'g', 'queued', 'v4-64', '{}', 's', 1, 'd', 3, 0, 0); \
             INSERT INTO metric_series (id, job_id, name) VALUES (1, '6a000000-0000-4000-8000-000000000001', 'loss');";
        sqlx::raw_sql(sqlx::AssertSqlSafe(format!("{job} {rows}")))
            .execute(&mut conn)
            .await
            .unwrap();
        conn.close().await.unwrap();
    }

    #[tokio::test]
    async fn old_rows_are_moved_into_chunks_at_the_first_start() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("podq.db");
        old_file(
            &path,
            "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 2500) \
             INSERT INTO metric_points SELECT 1, i * 10, i * 0.5, 1 FROM n; \
             INSERT INTO log_lines (job_id, attempt, host, \"offset\", at, text) VALUES \
               ('6a000000-0000-4000-8000-000000000001', 1, 0, 0, 100, 'first'), ('6a000000-0000-4000-8000-000000000001', 1, 1, 0, 101, 'other host'), \
               ('6a000000-0000-4000-8000-000000000001', 1, 0, 6, 102, 'second'); \
             INSERT INTO log_counts VALUES ('6a000000-0000-4000-8000-000000000001', 1, 0, 2, 0, 0), ('6a000000-0000-4000-8000-000000000001', 1, 1, 1, 0, 0);",
        )
        .await;

        let store = Store::open(&path).await.unwrap();
        let mut db = store.read().await.unwrap();
        let series = metrics::series_id(&mut db, job(), "loss")
            .await
            .unwrap()
            .unwrap();
        let points = metrics::all_points(&mut db, series).await.unwrap();
        assert_eq!(points.len(), 2500);
        assert_eq!((points[0], points[2499]), ((10, 0.5), (25_000, 1250.0)));
        let lines = logs::page(&mut db, job(), &LogFilter::default(), 0, 10)
            .await
            .unwrap();
        let texts: Vec<&str> = lines.iter().map(|l| l.text.as_str()).collect();
        assert_eq!(texts, ["first", "second", "other host"]);
        for table in ["metric_points", "log_lines"] {
            let left: i64 = db::query_scalar("SELECT COUNT(*) FROM sqlite_master WHERE name = ?")
                .bind(table)
                .fetch_one(&mut db)
                .await
                .unwrap();
            assert_eq!(left, 0, "{table} is dropped");
        }
        drop(db);
        // The agent resends host 0 from offset 0 after a worker restart: only the new line
        // is stored.
        let resent: Vec<podq_api::HostLogLine> = serde_json::from_value(serde_json::json!([
            {"host": 0, "offset": 0, "at": "2026-11-26T00:00:00Z", "text": "first"},
            {"host": 0, "offset": 6, "at": "2026-11-26T00:00:00Z", "text": "second"},
            {"host": 0, "offset": 13, "at": "2026-11-26T00:00:01Z", "text": "third"},
        ]))
        .unwrap();
        let new = store
            .write(move |conn| {
                async move { logs::insert_lines(conn, job(), 1, &resent, 100).await }.boxed()
            })
            .await
            .unwrap();
        assert_eq!(new, 1);
    }

    /// A page of old points that spans a resume: each point keeps the attempt that wrote it.
    #[tokio::test]
    async fn a_converted_page_keeps_each_points_attempt() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("podq.db");
        old_file(
            &path,
            "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 1000) \
             INSERT INTO metric_points SELECT 1, i, i * 0.5, CASE WHEN i <= 400 THEN 1 ELSE 2 END \
             FROM n;",
        )
        .await;
        let store = Store::open(&path).await.unwrap();
        let chunks: Vec<(i64, i64, i64)> = db::query_as(
            "SELECT attempt, first_step, last_step FROM metric_chunks WHERE series_id = 1 \
             ORDER BY last_step",
        )
        .fetch_all(&mut store.read().await.unwrap())
        .await
        .unwrap();
        assert_eq!(chunks, [(1, 1, 400), (2, 401, 1000)]);
    }
}
