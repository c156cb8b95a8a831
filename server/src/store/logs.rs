//! Trainer log lines per job, attempt and host, kept to a cap per attempt and host with the
//! oldest dropped first (migration 0007).

use super::db::{self, Builder, Conn};
use std::collections::BTreeMap;

use podq_api::HostLogLine;

use super::StoreError;

/// Stores the lines of one attempt of `job_id` and trims each host to `cap` lines. A line
/// already stored (same host and offset) or already dropped (below the host's floor) is
/// skipped. Answers how many lines were new.
pub async fn insert_lines(
    conn: &mut Conn,
    job_id: &str,
    attempt: i64,
    lines: &[HostLogLine],
    cap: i64,
) -> Result<u64, StoreError> {
    // Every host's floor in one statement: each statement is a round trip to the store's
    // connection thread.
    let floors: BTreeMap<i64, i64> = db::query_as::<(i64, i64)>(
        "SELECT host, floor FROM log_counts WHERE job_id = ? AND attempt = ?",
    )
    .bind(job_id)
    .bind(attempt)
    .fetch_all(conn)
    .await?
    .into_iter()
    .collect();
    // In the batch's order, which is the order the worker received them in.
    let lines: Vec<&HostLogLine> = lines
        .iter()
        .filter(|l| {
            let floor = floors.get(&i64::from(l.host)).copied().unwrap_or(0);
            i64::try_from(l.offset).is_ok_and(|o| o >= floor)
        })
        .collect();
    let mut inserted: BTreeMap<i64, i64> = BTreeMap::new();
    // 6 variables a row; SQLite allows 32766 per statement.
    for chunk in lines.chunks(5000) {
        let mut insert =
            Builder::new("INSERT INTO log_lines (job_id, attempt, host, \"offset\", at, text) ");
        insert.push_values(chunk, |mut row, line| {
            row.push_bind(job_id)
                .push_bind(attempt)
                .push_bind(line.host)
                .push_bind(line.offset as i64)
                .push_bind(line.at.timestamp_millis())
                .push_bind(line.text.as_str());
        });
        // Only the rows inserted come back: a line already stored is skipped.
        insert.push(" ON CONFLICT (job_id, attempt, host, \"offset\") DO NOTHING RETURNING host");
        for host in insert.build_query_scalar::<i64>().fetch_all(conn).await? {
            *inserted.entry(host).or_default() += 1;
        }
    }
    if inserted.is_empty() {
        return Ok(0);
    }
    let new = inserted.values().sum::<i64>() as u64;
    let mut counts =
        Builder::new("INSERT INTO log_counts (job_id, attempt, host, kept, dropped, floor) ");
    counts.push_values(&inserted, |mut row, (host, count)| {
        row.push_bind(job_id)
            .push_bind(attempt)
            .push_bind(*host)
            .push_bind(*count)
            .push_bind(0_i64)
            .push_bind(0_i64);
    });
    counts.push(
        " ON CONFLICT (job_id, attempt, host) DO UPDATE SET kept = log_counts.kept + excluded.kept \
         RETURNING host, kept",
    );
    let kept = counts
        .build_query_as::<(i64, i64)>()
        .fetch_all(conn)
        .await?;
    for (host, kept) in kept {
        if kept > cap {
            trim(conn, job_id, attempt, host, kept - cap).await?;
        }
    }
    Ok(new)
}

/// Drops the `excess` oldest lines of one attempt and host, and raises the floor below
/// which a resent line is not stored again.
async fn trim(
    conn: &mut Conn,
    job_id: &str,
    attempt: i64,
    host: i64,
    excess: i64,
) -> Result<(), StoreError> {
    db::query(
        "DELETE FROM log_lines WHERE id IN (SELECT id FROM log_lines \
         WHERE job_id = ?1 AND attempt = ?2 AND host = ?3 ORDER BY \"offset\" LIMIT ?4)",
    )
    .bind(job_id)
    .bind(attempt)
    .bind(host)
    .bind(excess)
    .execute(conn)
    .await?;
    db::query(
        "UPDATE log_counts SET kept = kept - ?4, dropped = dropped + ?4, \
         floor = COALESCE((SELECT MIN(\"offset\") FROM log_lines \
           WHERE job_id = ?1 AND attempt = ?2 AND host = ?3), floor) \
         WHERE job_id = ?1 AND attempt = ?2 AND host = ?3",
    )
    .bind(job_id)
    .bind(attempt)
    .bind(host)
    .bind(excess)
    .execute(conn)
    .await?;
    Ok(())
}

#[derive(Debug, Clone, sqlx::FromRow)]
pub struct LogRow {
    pub id: i64,
    pub attempt: i64,
    pub host: i64,
    pub at: i64,
    pub text: String,
}

/// Which lines of a job to read.
#[derive(Debug, Clone, Default)]
pub struct LogFilter {
    pub attempt: Option<i64>,
    pub host: Option<u32>,
    /// Lines that arrived at or after this time (ms since the epoch).
    pub since_ms: Option<i64>,
}

/// Up to `limit` lines of `job_id` after the cursor `after`, in arrival order. Seeks the
/// job's lines by arrival (`log_lines_by_arrival`); the filter narrows within them.
pub async fn page(
    db: &mut Conn,
    job_id: &str,
    filter: &LogFilter,
    after: i64,
    limit: i64,
) -> Result<Vec<LogRow>, StoreError> {
    Ok(select_lines("", job_id, filter, Some(after), limit)
        .build_query_as()
        .fetch_all(db)
        .await?)
}

/// The newest `limit` lines of `job_id`, newest first.
pub async fn newest(
    db: &mut Conn,
    job_id: &str,
    filter: &LogFilter,
    limit: i64,
) -> Result<Vec<LogRow>, StoreError> {
    Ok(select_lines("", job_id, filter, None, limit)
        .build_query_as()
        .fetch_all(db)
        .await?)
}

/// After `after` in arrival order, or without it the newest first.
fn select_lines(
    prefix: &str,
    job_id: &str,
    filter: &LogFilter,
    after: Option<i64>,
    limit: i64,
) -> Builder {
    let mut query = Builder::new(format!(
        "{prefix}SELECT id, attempt, host, at, text FROM log_lines WHERE job_id = "
    ));
    query.push_bind(job_id.to_owned());
    if let Some(after) = after {
        query.push(" AND id > ").push_bind(after);
    }
    if let Some(attempt) = filter.attempt {
        query.push(" AND attempt = ").push_bind(attempt);
    }
    if let Some(host) = filter.host {
        query.push(" AND host = ").push_bind(host);
    }
    if let Some(since) = filter.since_ms {
        query.push(" AND at >= ").push_bind(since);
    }
    query.push(match after {
        Some(_) => " ORDER BY id LIMIT ",
        None => " ORDER BY id DESC LIMIT ",
    });
    query.push_bind(limit);
    query
}

/// (attempt, host, lines dropped) of `job_id`, where any were.
pub async fn dropped(db: &mut Conn, job_id: &str) -> Result<Vec<(i64, i64, i64)>, StoreError> {
    Ok(db::query_as(
        "SELECT attempt, host, dropped FROM log_counts WHERE job_id = ? AND dropped > 0 \
         ORDER BY attempt, host",
    )
    .bind(job_id)
    .fetch_all(db)
    .await?)
}

/// Lines kept over every job: what the logs hold.
pub async fn total_kept(db: &mut Conn) -> Result<i64, StoreError> {
    Ok(
        db::query_scalar("SELECT CAST(COALESCE(SUM(kept), 0) AS BIGINT) FROM log_counts")
            .fetch_one(db)
            .await?,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::test_support::{assert_uses_indexes, scratch_store};

    #[tokio::test]
    async fn every_log_read_seeks_the_jobs_lines_in_arrival_order() {
        let (store, _dir) = scratch_store().await;
        let filters = [
            LogFilter::default(),
            LogFilter {
                attempt: Some(2),
                host: Some(3),
                since_ms: Some(1),
            },
        ];
        for filter in &filters {
            for after in [Some(0), None] {
                let plan: Vec<(i64, i64, i64, String)> =
                    select_lines("EXPLAIN QUERY PLAN ", "job", filter, after, 10)
                        .build_query_as()
                        .fetch_all(&mut store.read().await.unwrap())
                        .await
                        .unwrap();
                assert_uses_indexes(
                    &format!("log lines {filter:?} after {after:?}"),
                    &plan,
                    true,
                );
            }
        }
    }
}
