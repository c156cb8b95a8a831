//! Metric series: points as workers report them, and downsampled for charts.
//!
//! On SQLite a report's points are stored first in its job's tail (`metric_tail`, keyed by
//! job and step, so a report's series share a B-tree leaf), a row per series; every
//! [`TAIL_REPORTS`]th report of a series (the first sooner: [`first_tail_count`]) folds the
//! series' tail into chunks of its own (`metric_chunks`, keyed by series and step; encoded
//! as `chunks.rs` says). On PostgreSQL a report's points are a chunk at once
//! ([`keeps_tail`] says why). A series' chunks and tail rows cover disjoint step ranges, its
//! tail's after all its chunks', so every read is a seek on each key followed by decoding
//! the rows it needs.

use super::chunks::{decode_points, encode_points};
use super::db::{self, Backend, Builder, Conn, Separated};
use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;

use podq_api::{JobId, MetricSeries, MetricValue, MetricsBatch};

use super::{now_ms, StoreError};

/// Stores a batch for one attempt of `job_id`; a step reported again replaces its value.
/// (The server stores every report's batch through [`insert_points_many`]; this one
/// attempt's form is the tests'.)
#[cfg(test)]
pub(crate) async fn insert_points(
    conn: &mut Conn,
    known: &SeriesIds,
    job_id: JobId,
    attempt: i64,
    batch: &MetricsBatch,
) -> Result<(), StoreError> {
    let report = Report {
        job_id,
        job_seq: super::test_support::job_seq(conn, job_id).await?,
        attempt,
        batch,
    };
    insert_points_many(conn, known, &[report]).await
}

/// One attempt's batch, as [`insert_points_many`] takes it.
pub struct Report<'a> {
    pub job_id: JobId,
    /// The job's `seq`, as its fence read it: the tail's key.
    pub job_seq: i64,
    pub attempt: i64,
    pub batch: &'a MetricsBatch,
}

/// The ids of the series the reports named, by job and name, kept by the writer that
/// stores reports. A series' row is then updated by its id, and the update answers integers
/// only: matched by name, the upsert answered two strings a series, and copying every
/// value of every row it answered was a visible share of the writer's samples at 1,000 pods
/// (`SqliteRow::current`, `sqlite3_value_dup`). A kept id is a hint, checked against the
/// row's job and name where it is used: one that is gone or was never committed (its
/// transaction rolled back, and SQLite gave the id to another series since) is found
/// again by name.
#[derive(Default)]
pub struct SeriesIds(Mutex<HashMap<JobId, HashMap<String, i64>>>);

impl SeriesIds {
    /// Jobs whose series are kept: a fleet of this many reporting pods, and more. Past it
    /// the map starts over, so that ended jobs' series are not kept for ever; the next
    /// report of each running job finds its series by name again.
    const JOBS: usize = 4096;

    fn ids_of<'a>(&self, series: impl Iterator<Item = (JobId, &'a str)>) -> Vec<Option<i64>> {
        let known = self
            .0
            .lock()
            .expect("no thread panics holding the series ids");
        series
            .map(|(job, name)| known.get(&job).and_then(|names| names.get(name)).copied())
            .collect()
    }

    fn keep(&self, found: Vec<(JobId, String, i64)>) {
        let mut known = self
            .0
            .lock()
            .expect("no thread panics holding the series ids");
        for (job, name, id) in found {
            if known.len() >= Self::JOBS && !known.contains_key(&job) {
                known.clear();
            }
            known.entry(job).or_default().insert(name, id);
        }
    }
}

/// Stores the batches of many jobs (each job at most once) in a handful of statements,
/// whatever their number: one update of the series named before (by id) and one upsert of
/// the others, one update of the jobs' and one of the attempts' step marks, one insert of
/// a tail row per series, and, for the series whose tail is full, one read and one delete
/// of their tails and one insert of their chunks. Only a batch that reaches back into
/// stored steps (a resumed run redoing the steps since its checkpoint, a batch resent after
/// its answer was lost) reads and rewrites the chunks its range overlaps.
pub async fn insert_points_many(
    conn: &mut Conn,
    known: &SeriesIds,
    reports: &[Report<'_>],
) -> Result<(), StoreError> {
    struct Marks {
        first: i64,
        last: i64,
    }
    let mut marks: Vec<(&Report, Marks)> = Vec::new();
    // Per (report, series): its points by step, the last reported winning.
    type Points = BTreeMap<i64, f64>;
    let mut series: BTreeMap<(usize, &str), Points> = BTreeMap::new();
    for report in reports {
        let steps = report.batch.points.iter().map(|p| p.step);
        let (Some(first), Some(last)) = (steps.clone().min(), steps.max()) else {
            continue;
        };
        let index = marks.len();
        debug_assert!(marks.iter().all(|(r, _)| r.job_id != report.job_id));
        marks.push((report, Marks { first, last }));
        for point in &report.batch.points {
            for (name, value) in &point.values {
                series
                    .entry((index, name.as_str()))
                    .or_default()
                    .insert(point.step, *value);
            }
        }
    }
    if marks.is_empty() {
        return Ok(());
    }
    let rows: Vec<SeriesRow> = series
        .iter()
        .map(|(&(index, name), points)| SeriesRow {
            index,
            job_id: marks[index].0.job_id,
            job_seq: marks[index].0.job_seq,
            name,
            last_step: *points.keys().next_back().expect("a series has a point"),
        })
        .collect();
    let found = update_series_marks(conn, known, &rows).await?;
    for part in marks.chunks(8000) {
        let mut update = Builder::new("WITH reported (id, step) AS (");
        update.push_values(part, |mut row, (report, range)| {
            row.push_bind(report.job_id).push_bind(range.last);
        });
        update.push(
            ") UPDATE jobs SET last_step = CASE WHEN COALESCE(jobs.last_step, 0) > reported.step \
             THEN COALESCE(jobs.last_step, 0) ELSE reported.step END \
             FROM reported WHERE jobs.id = reported.id",
        );
        update.build().execute(conn).await?;
        // Apart, and only where it changes: `last_step` is in no index and no trigger's
        // columns, so PostgreSQL updates it in place; `progressed` is in both, and changes
        // once per run (migrations/sqlite/0016_progressed_flag.sql).
        let mut first =
            Builder::new("UPDATE jobs SET progressed = 1 WHERE progressed = 0 AND id IN ");
        first.push_list(part.iter().map(|(report, _)| report.job_id));
        first.build().execute(conn).await?;
    }
    let keeps_tail = keeps_tail(conn.backend());
    let mut tail: Vec<TailRow> = Vec::with_capacity(series.len());
    let mut folds: Vec<Fold> = Vec::new();
    let mut chunks: Vec<Chunk> = Vec::new();
    let mut merges = Vec::new();
    for (((index, _), points), marks_of_series) in series.into_iter().zip(found) {
        let report = marks[index].0;
        let points: Vec<(i64, f64)> = points.into_iter().collect();
        // The series' own range: a series that lags the others is not merged needlessly.
        let range = (points[0].0, points[points.len() - 1].0);
        let series_id = marks_of_series.id;
        if marks_of_series.previous.is_some_and(|last| last >= range.0) {
            // The tail first, so that the merge finds every stored step among the chunks.
            if keeps_tail {
                folds.push(Fold {
                    series_id,
                    last: None,
                });
            }
            merges.push((series_id, report.attempt, range, points));
        } else if !keeps_tail {
            chunks.push((series_id, report.attempt, points));
        } else if marks_of_series.tail_full {
            folds.push(Fold {
                series_id,
                last: Some((report.attempt, points)),
            });
        } else {
            tail.push((report.job_seq, series_id, report.attempt, points));
        }
    }
    fold_tails(conn, folds).await?;
    insert_tail(conn, &tail).await?;
    insert_chunks(conn, &chunks).await?;
    for (series_id, attempt, range, points) in merges {
        merge_overlapping(conn, series_id, attempt, range, points).await?;
    }
    let now = now_ms();
    for part in marks.chunks(6000) {
        let mut update = Builder::new("WITH reported (job_id, attempt, first, last) AS (");
        update.push_values(part, |mut row, (report, range)| {
            row.push_bind(report.job_id)
                .push_bind(report.attempt)
                .push_bind(range.first)
                .push_bind(range.last);
        });
        update.push(") UPDATE attempts SET first_step = COALESCE(attempts.first_step, reported.first), first_step_at = COALESCE(attempts.first_step_at, ");
        update.push_bind(now);
        update.push(
            "), end_step = CASE WHEN COALESCE(attempts.end_step, 0) > reported.last \
             THEN COALESCE(attempts.end_step, 0) ELSE reported.last END \
             FROM reported WHERE attempts.job_id = reported.job_id \
             AND attempts.attempt = reported.attempt",
        );
        update.build().execute(conn).await?;
    }
    Ok(())
}

/// One series a report names, and the newest step the report brings it.
struct SeriesRow<'a> {
    /// The report's place among the reports stored together.
    index: usize,
    job_id: JobId,
    job_seq: i64,
    name: &'a str,
    last_step: i64,
}

/// The `SET` of both series statements: the newest step each held before (SQLite and
/// PostgreSQL both evaluate every `SET` expression on the row as it was), the newest step
/// now, and the reports its tail counts, 0 when this one fills it.
fn set_series_marks(reported: &str) -> String {
    format!(
        "previous = metric_series.last_step, \
         last_step = CASE WHEN metric_series.last_step > {reported}.last_step \
         THEN metric_series.last_step ELSE {reported}.last_step END, \
         tail = CASE WHEN metric_series.tail + 1 >= {TAIL_REPORTS} THEN 0 \
         ELSE metric_series.tail + 1 END"
    )
}

/// Moves every series' marks to its report (creating the series a report names first) and
/// answers them, in `rows`' order: those whose id is known by id, the others by job and
/// name, in one statement per 8,000 of either (4 variables a row; SQLite allows 32,766).
async fn update_series_marks(
    conn: &mut Conn,
    known: &SeriesIds,
    rows: &[SeriesRow<'_>],
) -> Result<Vec<SeriesMarks>, StoreError> {
    let ids = known.ids_of(rows.iter().map(|row| (row.job_id, row.name)));
    let mut found: Vec<Option<SeriesMarks>> =
        std::iter::repeat_with(|| None).take(rows.len()).collect();
    // An id kept for two series (one whose row was rolled back, one given its id since) is
    // asked by name for all but the first: an answered id then names one series.
    let mut at_of: HashMap<i64, usize> = HashMap::new();
    let mut by_id: Vec<(usize, i64)> = Vec::new();
    for (at, id) in ids.iter().enumerate() {
        if let Some(id) = *id {
            if let std::collections::hash_map::Entry::Vacant(entry) = at_of.entry(id) {
                entry.insert(at);
                by_id.push((at, id));
            }
        }
    }
    for part in by_id.chunks(8000) {
        let mut update = Builder::new("WITH reported (id, job_id, name, last_step) AS (");
        update.push_values(part, |mut row, &(at, id)| {
            row.push_bind(id)
                .push_bind(rows[at].job_id)
                .push_bind(rows[at].name)
                .push_bind(rows[at].last_step);
        });
        update.push(&format!(
            ") UPDATE metric_series SET {} FROM reported WHERE metric_series.id = reported.id \
             AND metric_series.job_id = reported.job_id AND metric_series.name = reported.name \
             RETURNING metric_series.id, metric_series.previous, metric_series.tail",
            set_series_marks("reported")
        ));
        for (id, previous, tail) in update
            .build_query_as::<(i64, Option<i64>, i64)>()
            .fetch_all(&mut *conn)
            .await?
        {
            found[at_of[&id]] = Some(SeriesMarks::new(id, previous, tail));
        }
    }
    // New series, and those whose kept id proved wrong or was kept twice.
    let by_name: Vec<usize> = (0..rows.len()).filter(|&at| found[at].is_none()).collect();
    let at_of: HashMap<(usize, &str), usize> = by_name
        .iter()
        .map(|&at| ((rows[at].index, rows[at].name), at))
        .collect();
    let mut index_of: HashMap<JobId, usize> = HashMap::new();
    for &at in &by_name {
        index_of.insert(rows[at].job_id, rows[at].index);
    }
    let mut learned = Vec::with_capacity(by_name.len());
    for part in by_name.chunks(8000) {
        let mut upsert = Builder::new("INSERT INTO metric_series (job_id, name, last_step, tail) ");
        upsert.push_values(part, |mut row, &at| {
            row.push_bind(rows[at].job_id)
                .push_bind(rows[at].name)
                .push_bind(rows[at].last_step)
                .push_bind(first_tail_count(rows[at].job_seq));
        });
        upsert.push(&format!(
            " ON CONFLICT (job_id, name) DO UPDATE SET {} \
             RETURNING id, job_id, name, previous, tail",
            set_series_marks("excluded")
        ));
        for (id, job_id, name, previous, tail) in upsert
            .build_query_as::<(i64, JobId, String, Option<i64>, i64)>()
            .fetch_all(&mut *conn)
            .await?
        {
            found[at_of[&(index_of[&job_id], name.as_str())]] =
                Some(SeriesMarks::new(id, previous, tail));
            learned.push((job_id, name, id));
        }
    }
    known.keep(learned);
    found
        .into_iter()
        .map(|marks| {
            marks.ok_or_else(|| StoreError::Corrupt("a series the upsert did not answer".into()))
        })
        .collect()
}

/// Whether a store on `backend` keeps reports' newest points in their jobs' tails; on
/// PostgreSQL each report's points are a chunk of their series' own at once.
///
/// The tail saves SQLite a B-tree leaf written per series per report: `metric_chunks` is a
/// WITHOUT ROWID table, its rows the leaves of one B-tree keyed by series, and a job's tail
/// rows share one leaf. A PostgreSQL table is a heap beside its primary key's index, so a
/// tail row costs a heap tuple and an index entry as a chunk does, and each fold adds a
/// delete (dead tuples and index entries for autovacuum) and the rewrite. At 1,000 pods on
/// PostgreSQL the tail made reports far slower and left some of them unsent
/// (docs/performance.md, "A fleet of pods on one server").
pub(super) fn keeps_tail(backend: Backend) -> bool {
    backend == Backend::Sqlite
}

/// Folds every series' tail into its chunks: a PostgreSQL store that older versions kept
/// tails in, at its first start on a version that keeps none ([`keeps_tail`]); a series'
/// chunks and tail rows must cover disjoint step ranges, the tail's after the chunks', and
/// new chunks would land after the tail. Answers the series folded.
pub(super) async fn fold_every_tail(conn: &mut Conn) -> Result<usize, StoreError> {
    let series: Vec<i64> =
        db::query_scalar("SELECT DISTINCT series_id FROM metric_tail ORDER BY series_id")
            .fetch_all(&mut *conn)
            .await?;
    let folds: Vec<Fold> = series
        .iter()
        .map(|&series_id| Fold {
            series_id,
            last: None,
        })
        .collect();
    fold_tails(conn, folds).await?;
    Ok(series.len())
}

/// Reports a series' tail holds before the next one folds them into chunks of the series'
/// own (migrations/sqlite/0019_metric_tail_by_job.sql): the series' chunk leaf is written
/// once per this many reports, and a read of the series' newest steps decodes at most this
/// many tail rows beside its chunks.
pub(super) const TAIL_REPORTS: i64 = 16;

/// The count a new series' tail starts at: 1 (its first report) plus an offset of its
/// job's, so that jobs started together fold their tails in different rounds. With the
/// same count, the 1,000 pods of a fleet started at once folded all their series in the
/// same 2 s every 32 s, and most of the reports slower than 100 ms started in those
/// seconds (`cargo bench --bench fleet` prints them). A job's own series fold together,
/// as their tail rows share its leaves.
fn first_tail_count(job_seq: i64) -> i64 {
    1 + job_seq.rem_euclid(TAIL_REPORTS - 1)
}

/// What the series statements answer of one series.
struct SeriesMarks {
    id: i64,
    /// The newest step the series held before this report.
    previous: Option<i64>,
    /// This report fills the series' tail: it is folded into chunks with the tail.
    tail_full: bool,
}

impl SeriesMarks {
    fn new(id: i64, previous: Option<i64>, tail: i64) -> Self {
        SeriesMarks {
            id,
            previous,
            tail_full: tail == 0,
        }
    }
}

/// A series' points to keep in its job's tail: `(job_seq, series_id, attempt, points)`.
type TailRow = (i64, i64, i64, Vec<(i64, f64)>);

/// A series whose tail becomes chunks, and the points of this report that join them (none
/// when the report is merged into the chunks afterwards).
struct Fold {
    series_id: i64,
    last: Option<(i64, Vec<(i64, f64)>)>,
}

/// One tail row per series, in one statement per 4,000 (7 variables a row).
async fn insert_tail(conn: &mut Conn, rows: &[TailRow]) -> Result<(), StoreError> {
    for part in rows.chunks(4000) {
        let mut insert = Builder::new(
            "INSERT INTO metric_tail \
             (job_seq, series_id, last_step, first_step, points, attempt, data) ",
        );
        insert.push_values(part, |mut row, (job_seq, series_id, attempt, points)| {
            row.push_bind(*job_seq).push_bind(*series_id);
            bind_stored_points(&mut row, *attempt, points);
        });
        insert.build().execute(conn).await?;
    }
    Ok(())
}

/// A fold's chunk holds tail rows whose points, encoded together, take at most this many
/// bytes (a single row larger than that stays whole). A row of a WITHOUT ROWID table is an
/// index B-tree cell: on 4 KiB pages, one of more than 1,002 bytes keeps 489 of them in its
/// leaf and puts the rest on an overflow page of its own, 4 KiB for what may be a few
/// hundred bytes (https://www.sqlite.org/fileformat2.html, "B-tree Pages": X =
/// ((U-12)*64/255)-23 for an index B-tree's leaf, M = ((U-12)*32/255)-23). With its key and
/// header a row of 900 bytes of points stays inside its leaf.
const CHUNK_BYTES: usize = 900;

/// Tail rows gathered into one chunk: the attempt that reported them and their points.
type Run = (i64, Vec<(i64, f64)>);

/// Moves each fold's series' tail, and the points that join it, into chunks: one per run of
/// rows reported by the same attempt, whose steps follow each other, the tail's steps being
/// after all the series' chunks, cut where a run would pass [`CHUNK_BYTES`].
async fn fold_tails(conn: &mut Conn, folds: Vec<Fold>) -> Result<(), StoreError> {
    let mut held: HashMap<i64, Vec<(i64, Vec<u8>)>> = HashMap::new();
    // 2 variables a fold; a series is one job's, so the two conditions select exactly the
    // folds' rows.
    for part in folds.chunks(8000) {
        // The jobs are the series' own, found by the statement, not listed: a statement's
        // shape then varies with one list's length, not two, and the writer's statement
        // cache keeps fewer of them.
        let where_folded = |sql: &str| {
            let mut query = Builder::new(sql);
            query.push(
                " WHERE job_seq IN (SELECT j.seq FROM metric_series s \
                 JOIN jobs j ON j.id = s.job_id WHERE s.id IN ",
            );
            query.push_list(part.iter().map(|f| f.series_id));
            query.push(") AND series_id IN ");
            query.push_list(part.iter().map(|f| f.series_id));
            query
        };
        let mut select = where_folded("SELECT series_id, attempt, data FROM metric_tail");
        select.push(" ORDER BY job_seq, last_step, series_id");
        for (series_id, attempt, data) in select
            .build_query_as::<(i64, i64, Vec<u8>)>()
            .fetch_all(conn)
            .await?
        {
            held.entry(series_id).or_default().push((attempt, data));
        }
        where_folded("DELETE FROM metric_tail")
            .build()
            .execute(conn)
            .await?;
    }
    let mut chunks: Vec<Chunk> = Vec::new();
    for fold in folds {
        let mut run: Option<Run> = None;
        // A row joins the run if the run, encoded with it, still fits: not by the rows' own
        // sizes, as a run is stored as `f64`s once any of its values needs one.
        let mut add = |attempt: i64, points: Vec<(i64, f64)>| {
            if let Some((held_by, held)) = &mut run {
                if *held_by == attempt {
                    let kept = held.len();
                    held.extend_from_slice(&points);
                    if encode_points(held).len() <= CHUNK_BYTES {
                        return;
                    }
                    held.truncate(kept);
                }
            }
            if let Some((held_by, held)) = run.replace((attempt, points)) {
                chunks.push((fold.series_id, held_by, held));
            }
        };
        for (attempt, data) in held.remove(&fold.series_id).unwrap_or_default() {
            add(attempt, decode_points(&data)?);
        }
        if let Some((attempt, points)) = fold.last {
            add(attempt, points);
        }
        if let Some((attempt, points)) = run {
            chunks.push((fold.series_id, attempt, points));
        }
    }
    insert_chunks(conn, &chunks).await
}

/// A series' points to store as one chunk, and the attempt that reported them.
pub(super) type Chunk = (i64, i64, Vec<(i64, f64)>);

/// One chunk per `(series_id, attempt, points)`, in one statement.
pub(super) async fn insert_chunks(conn: &mut Conn, chunks: &[Chunk]) -> Result<(), StoreError> {
    let chunks: Vec<&Chunk> = chunks.iter().filter(|(_, _, p)| !p.is_empty()).collect();
    // 6 variables a row; SQLite allows 32766 per statement.
    for part in chunks.chunks(5000) {
        let mut insert = Builder::new(
            "INSERT INTO metric_chunks (series_id, last_step, first_step, points, attempt, data) ",
        );
        insert.push_values(part, |mut row, (series_id, attempt, points)| {
            row.push_bind(*series_id);
            bind_stored_points(&mut row, *attempt, points);
        });
        insert.build().execute(conn).await?;
    }
    Ok(())
}

/// The columns a chunk and a tail row share after their series' key, in their INSERTs'
/// order: `last_step, first_step, points, attempt, data`.
fn bind_stored_points(row: &mut Separated<'_>, attempt: i64, points: &[(i64, f64)]) {
    row.push_bind(points[points.len() - 1].0)
        .push_bind(points[0].0)
        .push_bind(points.len() as i64)
        .push_bind(attempt)
        .push_bind(encode_points(points));
}

/// Stores `points` (in step order, within `range`) of a series whose chunks reach into
/// `range`. Every chunk that overlaps the range is split: its points before the range and
/// after it stay as chunks of their own, its points inside join the new ones (which win a
/// step both have). The series' chunks stay disjoint, and only the chunks the range touches
/// are read, however long the series.
async fn merge_overlapping(
    conn: &mut Conn,
    series_id: i64,
    attempt: i64,
    (from, to): (i64, i64),
    points: Vec<(i64, f64)>,
) -> Result<(), StoreError> {
    let mut inside: BTreeMap<i64, f64> = BTreeMap::new();
    let mut pieces: Vec<Chunk> = Vec::new();
    let mut touched: Vec<i64> = Vec::new();
    let mut after = from;
    'chunks: loop {
        let page: Vec<(i64, i64, i64, Vec<u8>)> = db::query_as(
            "SELECT last_step, first_step, attempt, data FROM metric_chunks \
             WHERE series_id = ? AND last_step >= ? ORDER BY last_step LIMIT 64",
        )
        .bind(series_id)
        .bind(after)
        .fetch_all(conn)
        .await?;
        let full = page.len() == 64;
        for (last_step, first_step, reported_by, data) in page {
            if first_step > to {
                break 'chunks;
            }
            touched.push(last_step);
            let (mut before, mut beyond) = (Vec::new(), Vec::new());
            for (step, value) in decode_points(&data)? {
                if step < from {
                    before.push((step, value));
                } else if step > to {
                    beyond.push((step, value));
                } else {
                    inside.insert(step, value);
                }
            }
            // What lies outside the range keeps the attempt that reported it.
            pieces.push((series_id, reported_by, before));
            pieces.push((series_id, reported_by, beyond));
            after = last_step + 1;
        }
        if !full {
            break;
        }
    }
    inside.extend(points);
    pieces.push((series_id, attempt, inside.into_iter().collect()));
    for last_step in touched {
        db::query("DELETE FROM metric_chunks WHERE series_id = ? AND last_step = ?")
            .bind(series_id)
            .bind(last_step)
            .execute(conn)
            .await?;
    }
    insert_chunks(conn, &pieces).await
}

/// Calls `visit` with the points of `series_id` from step `from` on, in step order, until
/// it answers false. Reads the chunks a page at a time.
pub async fn scan_forward(
    db: &mut Conn,
    series_id: i64,
    from: i64,
    mut visit: impl FnMut(i64, f64) -> bool,
) -> Result<(), StoreError> {
    let mut after = from;
    // Each page is its own read: a merge committed between two pages can move steps already
    // visited into a chunk further on, and they are not visited again.
    let mut visited: Option<i64> = None;
    loop {
        let page: Vec<(i64, Vec<u8>)> = db::query_as(SCAN_FORWARD)
            .bind(series_id)
            .bind(after)
            .bind(SCAN_PAGE)
            .fetch_all(db)
            .await?;
        let full = page.len() as i64 == SCAN_PAGE;
        for (last_step, data) in page {
            for (step, value) in decode_points(&data)? {
                if step < from || visited.is_some_and(|v| step <= v) {
                    continue;
                }
                visited = Some(step);
                if !visit(step, value) {
                    return Ok(());
                }
            }
            after = last_step + 1;
        }
        if !full {
            return Ok(());
        }
    }
}

/// Calls `visit` with the points of `series_id`, newest first, until it answers false.
pub async fn scan_backward(
    db: &mut Conn,
    series_id: i64,
    mut visit: impl FnMut(i64, f64) -> bool,
) -> Result<(), StoreError> {
    let mut before = i64::MAX;
    let mut visited: Option<i64> = None;
    loop {
        let page: Vec<(i64, i64, Vec<u8>)> = db::query_as(SCAN_BACKWARD)
            .bind(series_id)
            .bind(before)
            .bind(SCAN_PAGE)
            .fetch_all(db)
            .await?;
        let full = page.len() as i64 == SCAN_PAGE;
        for (_, first_step, data) in page {
            for (step, value) in decode_points(&data)?.into_iter().rev() {
                if visited.is_some_and(|v| step >= v) {
                    continue;
                }
                visited = Some(step);
                if !visit(step, value) {
                    return Ok(());
                }
            }
            before = first_step - 1;
        }
        if !full {
            return Ok(());
        }
    }
}

/// Chunks read per query of a scan: a few hundred KiB.
const SCAN_PAGE: i64 = 256;

/// The `seq` of the job of series `?1`: the prefix of the series' tail rows' keys.
macro_rules! job_seq_of_series {
    () => {
        "(SELECT j.seq FROM metric_series s JOIN jobs j ON j.id = s.job_id WHERE s.id = ?1)"
    };
}

/// A page of series `?1`'s stored points from step `?2` on, its chunks then its tail: two
/// ranges of primary keys merged in order, read in one statement so that a fold committed
/// between two pages moves no point out of sight.
pub(super) const SCAN_FORWARD: &str = concat!(
    "SELECT last_step, data FROM metric_chunks WHERE series_id = ?1 AND last_step >= ?2 \
     UNION ALL SELECT last_step, data FROM metric_tail WHERE job_seq = ",
    job_seq_of_series!(),
    " AND series_id = ?1 AND last_step >= ?2 ORDER BY last_step LIMIT ?3"
);

/// A page of series `?1`'s stored points up to step `?2`, newest first.
pub(super) const SCAN_BACKWARD: &str = concat!(
    "SELECT last_step, first_step, data FROM metric_chunks \
     WHERE series_id = ?1 AND last_step <= ?2 \
     UNION ALL SELECT last_step, first_step, data FROM metric_tail WHERE job_seq = ",
    job_seq_of_series!(),
    " AND series_id = ?1 AND last_step <= ?2 ORDER BY last_step DESC LIMIT ?3"
);

/// How many points series `?1` stores, and its first and last steps: a row for its chunks
/// and one for its tail, read in one statement.
const EXTENT: &str = concat!(
    "SELECT CAST(SUM(points) AS BIGINT), MIN(first_step), MAX(last_step) FROM metric_chunks \
     WHERE series_id = ?1 \
     UNION ALL SELECT CAST(SUM(points) AS BIGINT), MIN(first_step), MAX(last_step) \
     FROM metric_tail WHERE job_seq = ",
    job_seq_of_series!(),
    " AND series_id = ?1"
);

/// Every point of `series_id`, in step order.
pub async fn all_points(db: &mut Conn, series_id: i64) -> Result<Vec<(i64, f64)>, StoreError> {
    let mut points = Vec::new();
    scan_forward(db, series_id, i64::MIN, |step, value| {
        points.push((step, value));
        true
    })
    .await?;
    Ok(points)
}

/// The id of `job_id`'s series `name`.
pub async fn series_id(
    db: &mut Conn,
    job_id: JobId,
    name: &str,
) -> Result<Option<i64>, StoreError> {
    Ok(
        db::query_scalar("SELECT id FROM metric_series WHERE job_id = ? AND name = ?")
            .bind(job_id)
            .bind(name)
            .fetch_optional(db)
            .await?,
    )
}

/// A value as stored: NaN as NULL, as SQLite stores a bound NaN (PostgreSQL, which could
/// hold it, is made to match). Infinities are stored as they are by both.
pub fn stored(value: f64) -> Option<f64> {
    (!value.is_nan()).then_some(value)
}

/// A stored value read back.
pub fn read(value: Option<f64>) -> f64 {
    value.unwrap_or(f64::NAN)
}

#[derive(sqlx::FromRow)]
struct Series {
    id: i64,
    name: String,
}

/// Each series of the job (or only `names`), at most `max_points` each. A series that fits
/// comes back whole; a longer one is sampled at `max_points` evenly spaced steps (the first
/// stored step at or after each), decoded chunk by chunk as it is read.
pub async fn downsampled(
    db: &mut Conn,
    job_id: JobId,
    names: Option<&[String]>,
    max_points: i64,
) -> Result<Vec<MetricSeries>, StoreError> {
    let series: Vec<Series> =
        db::query_as("SELECT id, name FROM metric_series WHERE job_id = ? ORDER BY name")
            .bind(job_id)
            .fetch_all(db)
            .await?;
    let mut out = Vec::new();
    for Series { id, name } in series {
        if names.is_some_and(|wanted| !wanted.contains(&name)) {
            continue;
        }
        let parts: Vec<(Option<i64>, Option<i64>, Option<i64>)> =
            db::query_as(EXTENT).bind(id).fetch_all(db).await?;
        let (mut stored, mut first, mut last) = (None, None, None);
        for (points, from, to) in parts {
            stored = [stored, points].into_iter().flatten().reduce(|a, b| a + b);
            first = [first, from].into_iter().flatten().min();
            last = [last, to].into_iter().flatten().max();
        }
        let (Some(stored), Some(first), Some(last)) = (stored, first, last) else {
            continue;
        };
        let whole = stored <= max_points;
        let points = if whole {
            all_points(db, id).await?
        } else {
            sampled(db, id, (first, last), max_points).await?
        };
        out.push(MetricSeries {
            name,
            total_points: whole.then_some(points.len() as i64),
            points: points
                .into_iter()
                .map(|(step, value)| MetricValue { step, value })
                .collect(),
        });
    }
    Ok(out)
}

/// The first point at or after each of `max_points - 1` evenly spaced steps from `first`,
/// and the newest (a chart should end where the run is).
async fn sampled(
    db: &mut Conn,
    series_id: i64,
    (first, last): (i64, i64),
    max_points: i64,
) -> Result<Vec<(i64, f64)>, StoreError> {
    let width = ((last - first) / (max_points - 1)).max(1);
    let mut points: Vec<(i64, f64)> = Vec::with_capacity(max_points as usize + 1);
    let mut target = first;
    let mut targets_left = max_points - 1;
    let mut newest = None;
    scan_forward(db, series_id, first, |step, value| {
        if targets_left > 0 && step >= target {
            points.push((step, value));
            // Targets this point already answers are passed (DISTINCT points).
            while targets_left > 0 && target <= step {
                target += width;
                targets_left -= 1;
            }
        }
        newest = Some((step, value));
        true
    })
    .await?;
    if let Some(newest) = newest {
        if points.last().map(|p| p.0) != Some(newest.0) {
            points.push(newest);
        }
    }
    Ok(points)
}

/// Per series of `job_id` whose name `wanted` accepts: its newest point and its best one
/// (the lowest where `podq_api::lower_is_better`, else the highest). The best reads the
/// whole series; a study reads a few series of a few runs.
pub async fn final_and_best(
    db: &mut Conn,
    job_id: JobId,
    wanted: impl Fn(&str) -> bool,
) -> Result<Vec<(String, MetricValue, MetricValue)>, StoreError> {
    let series: Vec<Series> =
        db::query_as("SELECT id, name FROM metric_series WHERE job_id = ? ORDER BY name")
            .bind(job_id)
            .fetch_all(db)
            .await?;
    let mut out = Vec::new();
    for Series { id, name } in series.into_iter().filter(|s| wanted(&s.name)) {
        let lower = podq_api::lower_is_better(&name);
        let mut last: Option<(i64, f64)> = None;
        let mut best: Option<(i64, f64)> = None;
        scan_forward(db, id, i64::MIN, |step, value| {
            last = Some((step, value));
            // A NaN is no one's best; a tie goes to the earlier step.
            let better = |held: f64| if lower { value < held } else { value > held };
            if !value.is_nan() && best.is_none_or(|(_, held)| better(held)) {
                best = Some((step, value));
            }
            true
        })
        .await?;
        if let (Some((ls, lv)), Some((bs, bv))) = (last, best) {
            out.push((
                name,
                MetricValue {
                    step: ls,
                    value: lv,
                },
                MetricValue {
                    step: bs,
                    value: bv,
                },
            ));
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    fn job() -> podq_api::JobId {
        "6a000000-0000-4000-8000-000000000001".parse().unwrap()
    }

    use futures::FutureExt;
    use podq_api::MetricStep;

    /// The job `j` the series belong to, whose seq makes its series' tails start counting
    /// at 1 ([`first_tail_count`]): the tests' folds come at every 16th report.
    const A_JOB: &str = "INSERT INTO jobs (id, seq, experiment, group_name, state, accelerator, \
        config_json, config_sha256, est_hours, checkpoint_dir, max_failures, submitted_at, \
        updated_at) VALUES ('6a000000-0000-4000-8000-000000000001', 15, 'e', 'g', 'queued', 'v4-64', '{}', 's', 1, 'd', 3, 0, 0)";

    use super::*;

    /// A scratch store holding the job [`A_JOB`] and each `(attempt, batch)`, stored in order.
    async fn a_job_reporting(
        batches: Vec<(i64, MetricsBatch)>,
    ) -> (crate::store::Store, tempfile::TempDir) {
        let (store, dir) = crate::store::test_support::scratch_store().await;
        store
            .write(move |conn| {
                async move {
                    db::query(A_JOB).execute(&mut *conn).await?;
                    let known = SeriesIds::default();
                    for (attempt, batch) in &batches {
                        insert_points(conn, &known, job(), *attempt, batch).await?;
                    }
                    Ok::<_, StoreError>(())
                }
                .boxed()
            })
            .await
            .unwrap();
        (store, dir)
    }

    #[tokio::test]
    async fn long_series_are_sampled_short_ones_returned_whole() {
        // The long series in batches of ten steps, as a worker reports them.
        let long: Vec<MetricStep> = (1..=10007)
            .map(|i| MetricStep {
                step: i * 10,
                values: [("long".to_owned(), i as f64)].into(),
            })
            .collect();
        let mut batches: Vec<(i64, MetricsBatch)> = long
            .chunks(10)
            .map(|points| {
                let batch = MetricsBatch {
                    points: points.to_vec(),
                    phases: None,
                };
                (1, batch)
            })
            .collect();
        let short = MetricsBatch {
            points: vec![
                MetricStep {
                    step: 10,
                    values: [("short".to_owned(), 1.0)].into(),
                },
                MetricStep {
                    step: 20,
                    values: [("short".to_owned(), 2.0)].into(),
                },
            ],
            phases: None,
        };
        batches.push((1, short));
        let (store, _dir) = a_job_reporting(batches).await;
        let series = downsampled(&mut store.read().await.unwrap(), job(), None, 100)
            .await
            .unwrap();
        let long = series.iter().find(|s| s.name == "long").unwrap();
        assert!(
            long.points.len() <= 101 && long.points.len() >= 99,
            "{}",
            long.points.len()
        );
        assert_eq!(long.total_points, None);
        assert_eq!(long.points.first().unwrap().step, 10);
        assert_eq!(
            long.points.last().unwrap().step,
            100_070,
            "the newest point is kept"
        );
        assert!(long.points.windows(2).all(|w| w[0].step < w[1].step));
        let short = series.iter().find(|s| s.name == "short").unwrap();
        assert_eq!((short.total_points, short.points.len()), (Some(2), 2));
    }

    /// 40 reports of two series, a step each; attempt 2 takes over at report 20 without
    /// reaching back (its checkpoint was the last step reported).
    fn forty_reports_of_two_series() -> Vec<(i64, MetricsBatch)> {
        (1..=40_i64)
            .map(|report| {
                let batch = MetricsBatch {
                    points: vec![MetricStep {
                        step: report * 10,
                        values: [
                            ("loss".to_owned(), report as f64),
                            ("lr".to_owned(), -(report as f64)),
                        ]
                        .into(),
                    }],
                    phases: None,
                };
                (if report < 20 { 1 } else { 2 }, batch)
            })
            .collect()
    }

    #[tokio::test]
    async fn a_series_tail_is_folded_into_a_chunk_every_sixteenth_report() {
        let (store, _dir) = a_job_reporting(forty_reports_of_two_series()).await;
        let mut db = store.read().await.unwrap();
        let loss = series_id(&mut db, job(), "loss").await.unwrap().unwrap();
        let stored = |table: &'static str| {
            let sql = format!(
                "SELECT attempt, first_step, last_step FROM {table} \
                 WHERE series_id = ? ORDER BY last_step"
            );
            db::query_as::<(i64, i64, i64)>(sqlx::AssertSqlSafe(sql)).bind(loss)
        };
        // Reports 1-16 fold at the 16th; 17-32 at the 32nd, split where attempt 2 began.
        assert_eq!(
            stored("metric_chunks").fetch_all(&mut db).await.unwrap(),
            [(1, 10, 160), (1, 170, 190), (2, 200, 320)]
        );
        let tail = stored("metric_tail").fetch_all(&mut db).await.unwrap();
        assert_eq!(tail.len(), 8, "{tail:?}");
        assert_eq!((tail[0].1, tail[7].2), (330, 400));
        let points = all_points(&mut db, loss).await.unwrap();
        let expected: Vec<(i64, f64)> = (1..=40).map(|r| (r * 10, r as f64)).collect();
        assert_eq!(points, expected);
        let mut newest = Vec::new();
        scan_backward(&mut db, loss, |step, _| {
            newest.push(step);
            newest.len() < 10
        })
        .await
        .unwrap();
        assert_eq!(newest, (31..=40).rev().map(|r| r * 10).collect::<Vec<_>>());
        let latest = crate::store::jobs::latest_metrics(&mut db, job())
            .await
            .unwrap();
        assert_eq!((latest["loss"].step, latest["lr"].value), (400, -40.0));
        let series = downsampled(&mut db, job(), None, 100).await.unwrap();
        assert_eq!(series[0].total_points, Some(40));
    }

    #[tokio::test]
    async fn folding_every_tail_keeps_every_point_and_empties_the_tails() {
        let (store, _dir) = a_job_reporting(forty_reports_of_two_series()).await;
        let folded = store
            .write(|conn| fold_every_tail(conn).boxed())
            .await
            .unwrap();
        assert_eq!(folded, 2, "both series had a tail");
        let mut db = store.read().await.unwrap();
        let held: i64 = db::query_scalar("SELECT COUNT(*) FROM metric_tail")
            .fetch_one(&mut db)
            .await
            .unwrap();
        assert_eq!(held, 0);
        let loss = series_id(&mut db, job(), "loss").await.unwrap().unwrap();
        let chunks: Vec<(i64, i64, i64)> = db::query_as(
            "SELECT attempt, first_step, last_step FROM metric_chunks \
             WHERE series_id = ? ORDER BY last_step",
        )
        .bind(loss)
        .fetch_all(&mut db)
        .await
        .unwrap();
        assert_eq!(
            chunks,
            [(1, 10, 160), (1, 170, 190), (2, 200, 320), (2, 330, 400)]
        );
        let expected: Vec<(i64, f64)> = (1..=40).map(|r| (r * 10, r as f64)).collect();
        assert_eq!(all_points(&mut db, loss).await.unwrap(), expected);
        let latest = crate::store::jobs::latest_metrics(&mut db, job())
            .await
            .unwrap();
        assert_eq!((latest["loss"].step, latest["lr"].value), (400, -40.0));
    }

    #[tokio::test]
    async fn a_fold_cuts_its_chunks_before_they_would_overflow_a_leaf() {
        // 16 reports of 40 steps, every other one's values needing a double each (some 300
        // bytes a report), the others' a float: a run that mixes them is stored as doubles.
        let batches = (0..TAIL_REPORTS)
            .map(|report| {
                let points = (1..=40)
                    .map(|i| {
                        let step = report * 40 + i;
                        MetricStep {
                            step,
                            values: [(
                                "loss".to_owned(),
                                step as f64 * (1.0 + (report % 2) as f64 * 0.1),
                            )]
                            .into(),
                        }
                    })
                    .collect();
                let batch = MetricsBatch {
                    points,
                    phases: None,
                };
                (1, batch)
            })
            .collect();
        let (store, _dir) = a_job_reporting(batches).await;
        let mut db = store.read().await.unwrap();
        let sizes: Vec<(i64, i64)> = db::query_as(
            "SELECT points, LENGTH(data) FROM metric_chunks ORDER BY series_id, last_step",
        )
        .fetch_all(&mut db)
        .await
        .unwrap();
        assert!(sizes.len() > 1, "{sizes:?}");
        assert!(
            sizes
                .iter()
                .all(|&(_, bytes)| bytes as usize <= CHUNK_BYTES),
            "{sizes:?}"
        );
        assert_eq!(sizes.iter().map(|s| s.0).sum::<i64>(), 16 * 40);
        let tail: i64 = db::query_scalar("SELECT COUNT(*) FROM metric_tail")
            .fetch_one(&mut db)
            .await
            .unwrap();
        assert_eq!(tail, 0);
        let loss = series_id(&mut db, job(), "loss").await.unwrap().unwrap();
        assert_eq!(all_points(&mut db, loss).await.unwrap().len(), 640);
    }

    #[tokio::test]
    async fn a_series_extent_and_a_fold_seek_their_keys() {
        let (store, _dir) = crate::store::test_support::scratch_store().await;
        let fold = "SELECT series_id, attempt, data FROM metric_tail \
            WHERE job_seq IN (SELECT j.seq FROM metric_series s \
            JOIN jobs j ON j.id = s.job_id WHERE s.id IN (?1, ?1)) AND series_id IN (?1, ?1) \
            ORDER BY job_seq, last_step, series_id";
        for (what, sql, ordered) in [("a series' extent", EXTENT, false), ("a fold", fold, true)] {
            let plan: Vec<(i64, i64, i64, String)> =
                db::query_as(sqlx::AssertSqlSafe(format!("EXPLAIN QUERY PLAN {sql}")))
                    .bind(1_i64)
                    .fetch_all(&mut store.read().await.unwrap())
                    .await
                    .unwrap();
            crate::store::test_support::assert_uses_indexes(what, &plan, ordered);
        }
    }

    #[tokio::test]
    async fn a_step_reported_again_keeps_its_last_value_and_chunks_stay_disjoint() {
        let batch = |steps: &[(i64, f64)]| MetricsBatch {
            points: steps
                .iter()
                .map(|&(step, v)| MetricStep {
                    step,
                    values: [("loss".to_owned(), v)].into(),
                })
                .collect(),
            phases: None,
        };
        let batches = vec![
            batch(&[(10, 1.0), (20, 2.0), (30, 3.0)]),
            batch(&[(40, 4.0), (50, 5.0), (60, 6.0)]),
            // A resumed run redoes 25..55 at another stride: 30 and 50 are replaced, 40 is
            // kept, 10, 20 and 60 are untouched.
            batch(&[(25, 25.5), (30, 30.5), (50, 50.5), (55, 55.5)]),
            // A batch sent again after its answer was lost.
            batch(&[(25, 25.5), (30, 30.5), (50, 50.5), (55, 55.5)]),
            batch(&[(70, f64::NAN), (80, 8.0)]),
        ];
        let (store, _dir) = a_job_reporting(batches.into_iter().map(|b| (1, b)).collect()).await;
        let mut db = store.read().await.unwrap();
        let id = series_id(&mut db, job(), "loss").await.unwrap().unwrap();
        let points = all_points(&mut db, id).await.unwrap();
        let steps: Vec<i64> = points.iter().map(|p| p.0).collect();
        assert_eq!(steps, [10, 20, 25, 30, 40, 50, 55, 60, 70, 80]);
        let value = |step: i64| points.iter().find(|p| p.0 == step).unwrap().1;
        assert_eq!(
            (value(30), value(40), value(50), value(60)),
            (30.5, 4.0, 50.5, 6.0)
        );
        assert!(value(70).is_nan());
        let ranges: Vec<(i64, i64)> =
            db::query_as("SELECT first_step, last_step FROM metric_chunks WHERE series_id = ? ORDER BY last_step")
                .bind(id)
                .fetch_all(&mut db)
                .await
                .unwrap();
        assert!(
            ranges.windows(2).all(|w| w[0].1 < w[1].0),
            "disjoint: {ranges:?}"
        );
        let mut newest = Vec::new();
        scan_backward(&mut db, id, |step, _| {
            newest.push(step);
            newest.len() < 3
        })
        .await
        .unwrap();
        assert_eq!(newest, [80, 70, 60]);
    }

    #[test]
    fn jobs_started_together_fold_their_tails_in_different_rounds() {
        // Jobs by the report that first folds their tails (1-based).
        let mut jobs_by_report = [0_usize; TAIL_REPORTS as usize + 1];
        for seq in 1..=1000 {
            jobs_by_report[(TAIL_REPORTS + 1 - first_tail_count(seq)) as usize] += 1;
        }
        // The 2nd report to the 16th, 66 or 67 jobs each.
        assert_eq!(jobs_by_report[..2], [0, 0]);
        let busiest = jobs_by_report.iter().max().unwrap();
        assert!(*busiest <= 67, "{jobs_by_report:?}");
    }

    #[tokio::test]
    async fn a_wrong_kept_series_id_is_found_again_by_name() {
        let batch = |step: i64| MetricsBatch {
            points: vec![MetricStep {
                step,
                values: [
                    ("a".to_owned(), step as f64),
                    ("b".to_owned(), -step as f64),
                ]
                .into(),
            }],
            phases: None,
        };
        let (store, _dir) = a_job_reporting(vec![(1, batch(10))]).await;
        let mut db = store.read().await.unwrap();
        let a = series_id(&mut db, job(), "a").await.unwrap().unwrap();
        let b = series_id(&mut db, job(), "b").await.unwrap().unwrap();
        drop(db);
        // As after a rolled-back transaction: `a` kept with the id SQLite then gave `b`, and
        // `b` with it too.
        let known = SeriesIds::default();
        known.keep(vec![(job(), "a".into(), b), (job(), "b".into(), b)]);
        store
            .write(move |conn| {
                async move { insert_points(conn, &known, job(), 1, &batch(20)).await }.boxed()
            })
            .await
            .unwrap();
        let mut db = store.read().await.unwrap();
        assert_eq!(
            all_points(&mut db, a).await.unwrap(),
            [(10, 10.0), (20, 20.0)]
        );
        assert_eq!(
            all_points(&mut db, b).await.unwrap(),
            [(10, -10.0), (20, -20.0)]
        );
        let series: i64 = db::query_scalar("SELECT count(*) FROM metric_series")
            .fetch_one(&mut db)
            .await
            .unwrap();
        assert_eq!(series, 2);
    }
}
