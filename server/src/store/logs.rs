//! Trainer log lines per job, attempt and host, kept to a cap per attempt and host with the
//! oldest dropped first (migration 0007). Stored a chunk per host and forwarded batch
//! (`log_chunks`, migration 0012, see `chunks.rs`). A line's id is its batch's number times
//! [`LINES_PER_BATCH`] plus its place in the batch, so ids keep the order lines arrived in,
//! across hosts.

use super::chunks::{decode_lines, encode_lines, StoredLine};
use super::db::{self, Builder, Conn};
use std::collections::{BTreeMap, HashMap};

use podq_api::{HostLogLine, JobId};

use super::StoreError;

/// Lines one batch number holds at most (a larger batch takes several numbers), and the
/// factor of the number in its lines' ids. A line id stays below 2^53, exact in
/// JavaScript, up to 2^37 batches of a job.
pub const LINES_PER_BATCH: i64 = 1 << 16;

/// Stores the lines of one attempt of `job_id` and trims each host to `cap` lines. A line
/// at or below the host's highest stored offset was stored already (or dropped): an agent
/// that pushes its log again after a worker restart resends from an earlier offset, and
/// each line is stored once. Answers how many lines were new. (The server stores every
/// report's lines through [`insert_lines_many`]; this one attempt's form is the tests'.)
#[cfg(test)]
pub(crate) async fn insert_lines(
    conn: &mut Conn,
    job_id: JobId,
    attempt: i64,
    lines: &[HostLogLine],
    cap: i64,
) -> Result<u64, StoreError> {
    let report = Report {
        job_id,
        job_seq: super::test_support::job_seq(conn, job_id).await?,
        attempt,
        lines,
    };
    let new = insert_lines_many(conn, &[report], cap).await?;
    Ok(new[0])
}

/// One attempt's lines, as [`insert_lines_many`] takes them.
pub struct Report<'a> {
    pub job_id: JobId,
    /// The job's `seq`, which its chunks are keyed by (migration 0017).
    pub job_seq: i64,
    pub attempt: i64,
    pub lines: &'a [HostLogLine],
}

/// Stores the lines of many jobs (each job at most once) in three statements, whatever
/// their number: one read of every host's highest offset and every job's last batch number,
/// one insert of a chunk per host and batch, one upsert of the counts. Answers, per report,
/// how many lines were new.
pub async fn insert_lines_many(
    conn: &mut Conn,
    reports: &[Report<'_>],
    cap: i64,
) -> Result<Vec<u64>, StoreError> {
    if reports.is_empty() {
        return Ok(Vec::new());
    }
    let index_of: HashMap<JobId, usize> = reports
        .iter()
        .enumerate()
        .map(|(index, report)| (report.job_id, index))
        .collect();
    debug_assert_eq!(index_of.len(), reports.len(), "each job at most once");
    // Per report: each host's highest offset, and the job's last batch number (host -1).
    let mut read = Builder::new("WITH reported (job_id, job_seq, attempt) AS (");
    read.push_values(reports, |mut row, report| {
        row.push_bind(report.job_id)
            .push_bind(report.job_seq)
            .push_bind(report.attempt);
    });
    read.push(
        ") SELECT c.job_id, c.host, c.top FROM log_counts c JOIN reported r \
         ON c.job_id = r.job_id AND c.attempt = r.attempt \
         UNION ALL SELECT r.job_id, -1, \
           COALESCE((SELECT MAX(batch) FROM log_chunks WHERE job_seq = r.job_seq), 0) \
         FROM reported r",
    );
    let mut tops: Vec<BTreeMap<i64, i64>> = vec![BTreeMap::new(); reports.len()];
    for (job_id, host, top) in read
        .build_query_as::<(JobId, i64, i64)>()
        .fetch_all(conn)
        .await?
    {
        tops[index_of[&job_id]].insert(host, top);
    }
    // Per (report, batch, host), in each batch's order (the order the worker received
    // them in).
    let mut chunks: BTreeMap<(usize, i64, i64), Vec<StoredLine>> = BTreeMap::new();
    let mut new = vec![0_u64; reports.len()];
    for (index, report) in reports.iter().enumerate() {
        let tops = &mut tops[index];
        let last_batch = tops.remove(&-1).unwrap_or(0);
        let mut place = 0_i64;
        for line in report.lines {
            let host = i64::from(line.host);
            let Ok(offset) = i64::try_from(line.offset) else {
                continue;
            };
            let top = tops.entry(host).or_insert(-1);
            if offset <= *top {
                continue;
            }
            *top = offset;
            let batch = last_batch + 1 + place / LINES_PER_BATCH;
            chunks
                .entry((index, batch, host))
                .or_default()
                .push(StoredLine {
                    position: place % LINES_PER_BATCH,
                    offset,
                    at: line.at.timestamp_millis(),
                    text: line.text.clone(),
                });
            place += 1;
        }
        new[index] = place as u64;
    }
    if chunks.is_empty() {
        return Ok(new);
    }
    let chunks: Vec<((usize, i64, i64), Vec<StoredLine>)> = chunks.into_iter().collect();
    // 8 variables a row; SQLite allows 32766 per statement.
    for part in chunks.chunks(4000) {
        let mut insert = Builder::new(
            "INSERT INTO log_chunks (job_seq, batch, attempt, host, first_offset, lines, last_at, \
             data) ",
        );
        insert.push_values(part, |mut row, ((index, batch, host), kept)| {
            let report = &reports[*index];
            row.push_bind(report.job_seq)
                .push_bind(*batch)
                .push_bind(report.attempt)
                .push_bind(*host)
                .push_bind(kept[0].offset)
                .push_bind(kept.len() as i64)
                .push_bind(kept.iter().map(|l| l.at).max())
                .push_bind(encode_lines(kept.iter()));
        });
        insert.build().execute(conn).await?;
    }
    // Per (report, host): lines stored, the highest offset, and the first batch.
    let mut hosts: BTreeMap<(usize, i64), HostCounts> = BTreeMap::new();
    for ((index, batch, host), kept) in &chunks {
        let entry = hosts.entry((*index, *host)).or_insert(HostCounts {
            kept: 0,
            top: 0,
            first_batch: *batch,
        });
        entry.kept += kept.len() as i64;
        entry.top = kept[kept.len() - 1].offset;
    }
    let hosts: Vec<((usize, i64), HostCounts)> = hosts.into_iter().collect();
    let mut over_cap = Vec::new();
    // 8 variables a row.
    for part in hosts.chunks(4000) {
        let mut counts = Builder::new(
            "INSERT INTO log_counts (job_id, attempt, host, kept, dropped, floor, top, \
             floor_batch) ",
        );
        counts.push_values(part, |mut row, ((index, host), counts)| {
            let report = &reports[*index];
            row.push_bind(report.job_id)
                .push_bind(report.attempt)
                .push_bind(*host)
                .push_bind(counts.kept)
                .push_bind(0_i64)
                .push_bind(0_i64)
                .push_bind(counts.top)
                .push_bind(counts.first_batch);
        });
        counts.push(
            " ON CONFLICT (job_id, attempt, host) DO UPDATE SET \
             kept = log_counts.kept + excluded.kept, top = excluded.top \
             RETURNING job_id, attempt, host, kept, floor_batch",
        );
        for (job_id, attempt, host, kept, floor_batch) in counts
            .build_query_as::<(JobId, i64, i64, i64, i64)>()
            .fetch_all(conn)
            .await?
        {
            if kept > cap {
                let job_seq = reports[index_of[&job_id]].job_seq;
                over_cap.push(Trim {
                    job_id,
                    job_seq,
                    attempt,
                    host,
                    floor_batch,
                    excess: kept - cap,
                });
            }
        }
    }
    for trim in over_cap {
        trim.run(conn).await?;
    }
    Ok(new)
}

/// What one report stored of one host.
struct HostCounts {
    kept: i64,
    /// The highest offset stored.
    top: i64,
    /// The batch of the host's first chunk in the report.
    first_batch: i64,
}

/// The `excess` oldest lines of one attempt and host, to drop.
struct Trim {
    job_id: JobId,
    job_seq: i64,
    attempt: i64,
    host: i64,
    /// No chunk of the attempt and host is older than this batch (`log_counts.floor_batch`,
    /// migration 0018): the job's chunks are found by batch, and the seek starts here, not
    /// at the job's first.
    floor_batch: i64,
    excess: i64,
}

/// Chunks a trim reads at a time: one report's lines over the cap are about one chunk.
const TRIM_PAGE: i64 = 8;

/// The oldest `TRIM_PAGE` chunks of one attempt and host, from a batch on.
const TRIM_OLDEST: &str = "SELECT batch, lines, data FROM log_chunks \
    WHERE job_seq = ? AND batch >= ? AND attempt = ? AND host = ? ORDER BY batch LIMIT ?";

/// The oldest chunk of one attempt and host, from a batch on.
const TRIM_KEPT_FROM: &str = "SELECT batch, first_offset FROM log_chunks \
    WHERE job_seq = ? AND batch >= ? AND attempt = ? AND host = ? ORDER BY batch LIMIT 1";

impl Trim {
    /// Drops whole chunks, then the oldest lines of the next, and raises the floor to the
    /// oldest line kept.
    async fn run(self, conn: &mut Conn) -> Result<(), StoreError> {
        let Trim {
            job_id,
            job_seq,
            attempt,
            host,
            floor_batch,
            excess,
        } = self;
        let mut left = excess;
        let mut from = floor_batch;
        while left > 0 {
            let oldest: Vec<(i64, i64, Vec<u8>)> = db::query_as(TRIM_OLDEST)
                .bind(job_seq)
                .bind(from)
                .bind(attempt)
                .bind(host)
                .bind(TRIM_PAGE)
                .fetch_all(&mut *conn)
                .await?;
            if oldest.is_empty() {
                break;
            }
            for (batch, lines, data) in oldest {
                from = batch;
                if lines <= left {
                    db::query(
                        "DELETE FROM log_chunks WHERE job_seq = ? AND batch = ? AND host = ?",
                    )
                    .bind(job_seq)
                    .bind(batch)
                    .bind(host)
                    .execute(&mut *conn)
                    .await?;
                    left -= lines;
                } else {
                    let rest = decode_lines(&data)?.split_off(left as usize);
                    db::query(
                        "UPDATE log_chunks SET first_offset = ?, lines = ?, data = ? \
                         WHERE job_seq = ? AND batch = ? AND host = ?",
                    )
                    .bind(rest[0].offset)
                    .bind(lines - left)
                    .bind(encode_lines(rest.iter()))
                    .bind(job_seq)
                    .bind(batch)
                    .bind(host)
                    .execute(&mut *conn)
                    .await?;
                    left = 0;
                }
                if left == 0 {
                    break;
                }
            }
        }
        let kept_from: Option<(i64, i64)> = db::query_as(TRIM_KEPT_FROM)
            .bind(job_seq)
            .bind(from)
            .bind(attempt)
            .bind(host)
            .fetch_optional(&mut *conn)
            .await?;
        db::query(
            "UPDATE log_counts SET kept = kept - ?, dropped = dropped + ?, \
             floor_batch = COALESCE(?, floor_batch), floor = COALESCE(?, floor) \
             WHERE job_id = ? AND attempt = ? AND host = ?",
        )
        .bind(excess)
        .bind(excess)
        .bind(kept_from.map(|(batch, _)| batch))
        .bind(kept_from.map(|(_, offset)| offset))
        .bind(job_id)
        .bind(attempt)
        .bind(host)
        .execute(conn)
        .await?;
        Ok(())
    }
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
/// job's chunks by batch (the table's key, migration 0018); the filter narrows within them.
pub async fn page(
    db: &mut Conn,
    job_id: JobId,
    filter: &LogFilter,
    after: i64,
    limit: i64,
) -> Result<Vec<LogRow>, StoreError> {
    let from = after.max(0).div_euclid(LINES_PER_BATCH);
    let mut rows = Vec::new();
    read_batches(db, job_id, filter, Order::Forward(from), limit, |row| {
        if row.id > after {
            rows.push(row);
        }
        rows.len() as i64
    })
    .await?;
    rows.sort_unstable_by_key(|row| row.id);
    rows.truncate(limit.max(0) as usize);
    Ok(rows)
}

/// The newest `limit` lines of `job_id`, newest first.
pub async fn newest(
    db: &mut Conn,
    job_id: JobId,
    filter: &LogFilter,
    limit: i64,
) -> Result<Vec<LogRow>, StoreError> {
    let mut rows = Vec::new();
    read_batches(db, job_id, filter, Order::Backward, limit, |row| {
        rows.push(row);
        rows.len() as i64
    })
    .await?;
    rows.sort_unstable_by_key(|row| std::cmp::Reverse(row.id));
    rows.truncate(limit.max(0) as usize);
    Ok(rows)
}

#[derive(Clone, Copy, Debug)]
enum Order {
    /// From this batch number on.
    Forward(i64),
    /// From the newest batch back.
    Backward,
}

/// Chunks read per query.
const CHUNK_PAGE: i64 = 256;

/// Hands `keep` the filter's lines of whole batches, in `order`, until it says it holds
/// `wanted` lines or the job has no more. A batch is read whole (a page that ends inside
/// one leaves it to the next), so the caller can order its lines by id.
async fn read_batches(
    db: &mut Conn,
    job_id: JobId,
    filter: &LogFilter,
    order: Order,
    wanted: i64,
    mut keep: impl FnMut(LogRow) -> i64,
) -> Result<(), StoreError> {
    let mut bound = match order {
        Order::Forward(from) => from,
        Order::Backward => i64::MAX,
    };
    let mut held = 0;
    loop {
        let mut page: Vec<Chunk> =
            select_chunks("", job_id, filter, order, bound, Some(CHUNK_PAGE))
                .build_query_as()
                .fetch_all(db)
                .await?;
        let full = page.len() as i64 == CHUNK_PAGE;
        let (Some(first), Some(last)) = (page.first(), page.last()) else {
            return Ok(());
        };
        let (first, last) = (first.batch, last.batch);
        if full {
            if first == last {
                // One batch fills the page: read it whole.
                page = select_chunks("", job_id, filter, order, last, None)
                    .build_query_as()
                    .fetch_all(db)
                    .await?;
                page.retain(|chunk| chunk.batch == last);
            } else {
                page.retain(|chunk| chunk.batch != last);
            }
        }
        let mut read_to = first;
        for chunk in page {
            read_to = chunk.batch;
            for row in chunk.rows()? {
                if filter.since_ms.is_none_or(|since| row.at >= since) {
                    held = keep(row);
                }
            }
        }
        if held >= wanted || !full {
            return Ok(());
        }
        bound = match order {
            Order::Forward(_) => read_to + 1,
            Order::Backward => read_to - 1,
        };
    }
}

#[derive(sqlx::FromRow)]
struct Chunk {
    batch: i64,
    attempt: i64,
    host: i64,
    data: Vec<u8>,
}

impl Chunk {
    fn rows(self) -> Result<Vec<LogRow>, StoreError> {
        let base = self.batch * LINES_PER_BATCH;
        Ok(decode_lines(&self.data)?
            .into_iter()
            .map(|line| LogRow {
                id: base + line.position,
                attempt: self.attempt,
                host: self.host,
                at: line.at,
                text: line.text,
            })
            .collect())
    }
}

/// The filter's chunks from batch `bound` on (forward) or back (backward), in arrival
/// order; without a limit, only batch `bound`'s.
fn select_chunks(
    prefix: &str,
    job_id: JobId,
    filter: &LogFilter,
    order: Order,
    bound: i64,
    limit: Option<i64>,
) -> Builder {
    let mut query = Builder::new(format!(
        "{prefix}SELECT batch, attempt, host, data FROM log_chunks \
         WHERE job_seq = (SELECT seq FROM jobs WHERE id = "
    ));
    query.push_bind(job_id.to_owned());
    query.push(")");
    query.push(match (limit, order) {
        (None, _) => " AND batch = ",
        (Some(_), Order::Forward(_)) => " AND batch >= ",
        (Some(_), Order::Backward) => " AND batch <= ",
    });
    query.push_bind(bound);
    if let Some(attempt) = filter.attempt {
        query.push(" AND attempt = ").push_bind(attempt);
    }
    if let Some(host) = filter.host {
        query.push(" AND host = ").push_bind(host);
    }
    if let Some(since) = filter.since_ms {
        // A chunk whose newest line is older holds nothing the filter keeps.
        query.push(" AND last_at >= ").push_bind(since);
    }
    query.push(match order {
        Order::Forward(_) => " ORDER BY batch, host",
        Order::Backward => " ORDER BY batch DESC, host DESC",
    });
    if let Some(limit) = limit {
        query.push(" LIMIT ").push_bind(limit);
    }
    query
}

/// (attempt, host, lines dropped) of `job_id`, where any were.
pub async fn dropped(db: &mut Conn, job_id: JobId) -> Result<Vec<(i64, i64, i64)>, StoreError> {
    Ok(db::query_as(
        "SELECT attempt, host, dropped FROM log_counts WHERE job_id = ? AND dropped > 0 \
         ORDER BY attempt, host",
    )
    .bind(job_id)
    .fetch_all(db)
    .await?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::test_support::{assert_uses_indexes, scratch_store};
    use futures::FutureExt;

    /// Trimming one attempt's host drops its oldest lines only: not another host's of the
    /// same batches, not an earlier attempt's. And the host's floor moves up to its oldest
    /// chunk kept, where the next trim's seek starts.
    #[tokio::test]
    async fn a_trim_drops_one_hosts_oldest_lines_and_moves_its_floor_up() {
        let (store, _dir) = scratch_store().await;
        let job = JobId::new_random();
        store
            .write(move |conn| {
                async move {
                    db::query(
                        "INSERT INTO jobs (id, seq, experiment, group_name, state, accelerator, \
                         config_json, config_sha256, est_hours, checkpoint_dir, max_failures, \
                         submitted_at, updated_at) VALUES (?, 1, 'e', 'g', 'running', 'v4-64', \
                         '{}', 's', 1, 'd', 3, 0, 0)",
                    )
                    .bind(job)
                    .execute(&mut *conn)
                    .await?;
                    // Each report: three lines of hosts 0 and 1. Attempt 1 stays under its
                    // cap; attempt 2 goes far over it.
                    for (attempt, reports, cap) in [(1, 10, 100), (2, 30, 10)] {
                        for report in 0..reports {
                            let lines: Vec<HostLogLine> = (0..3)
                                .flat_map(|i| {
                                    [0, 1].map(|host| {
                                        serde_json::from_value(serde_json::json!({
                                            "host": host, "offset": report * 3 + i,
                                            "at": "2026-11-28T00:00:00Z",
                                            "text": format!("{attempt}/{host}/{}", report * 3 + i),
                                        }))
                                        .unwrap()
                                    })
                                })
                                .collect();
                            insert_lines(conn, job, attempt, &lines, cap).await?;
                        }
                    }
                    Ok::<_, StoreError>(())
                }
                .boxed()
            })
            .await
            .unwrap();
        let mut db = store.read().await.unwrap();
        for (attempt, host, first, kept) in
            [(1, 0, 0, 30), (1, 1, 0, 30), (2, 0, 80, 10), (2, 1, 80, 10)]
        {
            let filter = LogFilter {
                attempt: Some(attempt),
                host: Some(host),
                since_ms: None,
            };
            let texts: Vec<String> = page(&mut db, job, &filter, -1, 1000)
                .await
                .unwrap()
                .into_iter()
                .map(|row| row.text)
                .collect();
            let expected: Vec<String> = (first..first + kept)
                .map(|offset| format!("{attempt}/{host}/{offset}"))
                .collect();
            assert_eq!(texts, expected, "attempt {attempt} host {host}");
        }
        let counts: Vec<(i64, i64, i64, i64, i64, i64)> = db::query_as(
            "SELECT attempt, host, kept, dropped, floor, floor_batch FROM log_counts \
             ORDER BY attempt, host",
        )
        .fetch_all(&mut db)
        .await
        .unwrap();
        let oldest_kept: i64 =
            db::query_scalar("SELECT MIN(batch) FROM log_chunks WHERE attempt = 2 AND host = 0")
                .fetch_one(&mut db)
                .await
                .unwrap();
        // Attempt 1 took batches 1 to 10; attempt 2's lines from offset 80 came in its
        // 27th report.
        assert_eq!(oldest_kept, 10 + 27);
        assert_eq!(
            counts,
            [
                (1, 0, 30, 0, 0, 1),
                (1, 1, 30, 0, 0, 1),
                (2, 0, 10, 80, 80, oldest_kept),
                (2, 1, 10, 80, 80, oldest_kept),
            ]
        );
    }

    /// A trim seeks the host's chunks by the table's key, from its floor.
    #[tokio::test]
    async fn a_trim_seeks_the_chunks_by_key() {
        let (store, _dir) = scratch_store().await;
        let mut db = store.read().await.unwrap();
        for query in [TRIM_OLDEST, TRIM_KEPT_FROM] {
            let explain = format!("EXPLAIN QUERY PLAN {query}");
            let mut plan_query = db::query_as(sqlx::AssertSqlSafe(explain));
            for _ in 0..query.matches('?').count() {
                plan_query = plan_query.bind(1_i64);
            }
            let plan: Vec<(i64, i64, i64, String)> = plan_query.fetch_all(&mut db).await.unwrap();
            assert_uses_indexes(query, &plan, true);
        }
    }

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
            for (order, limit) in [
                (Order::Forward(0), Some(10)),
                (Order::Backward, Some(10)),
                (Order::Forward(0), None),
            ] {
                let after = (order, limit);
                let plan: Vec<(i64, i64, i64, String)> = select_chunks(
                    "EXPLAIN QUERY PLAN ",
                    JobId::new_random(),
                    filter,
                    order,
                    0,
                    limit,
                )
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
