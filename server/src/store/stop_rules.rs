//! What the stop rules and the divergence guard read and write: the job's side of
//! the judgement, and the metric facts a rule is judged on. A NaN value is stored as NULL
//! (SQLite stores a bound NaN so; PostgreSQL is made to match), so it reads back as `None`.

use super::db::{self, Builder, Conn};
use super::metrics;
use super::{now_ms, StoreError};
use podq_api::{JobId, JobState};
use sqlx::AssertSqlSafe;

/// The job as the judge needs it, read by the fence of its metrics batch
/// (`leases::fence_many`).
#[derive(Debug, sqlx::FromRow)]
pub struct Judged {
    pub experiment: String,
    pub total_steps: Option<i64>,
    pub ignore_stop_rules: i64,
    pub diverged_reports: i64,
    /// The step of the last report the guard counted: a batch sent again counts once.
    pub diverged_step: Option<i64>,
    /// The stop already asked for: `ruled`, `evicted` or `suspended`.
    pub stop_request: Option<String>,
    pub cancel_requested: bool,
}

/// Each job's guard count of bad reports in a row, and the step of the last report it
/// counted: the jobs of a merged write at once.
pub async fn set_diverged_reports(
    conn: &mut Conn,
    counts: &[(JobId, i64, Option<i64>)],
) -> Result<(), StoreError> {
    // Three parameters a job: well under either store's limit per statement.
    for part in counts.chunks(8000) {
        let mut update = Builder::new("WITH counted (id, reports, step) AS (");
        update.push_values(part, |mut row, (job_id, reports, step)| {
            row.push_bind(*job_id).push_bind(*reports).push_bind(*step);
        });
        update.push(
            ") UPDATE jobs SET diverged_reports = counted.reports, diverged_step = counted.step \
             FROM counted WHERE jobs.id = counted.id",
        );
        update.build().execute(&mut *conn).await?;
    }
    Ok(())
}

/// A rule fired: what fired it, and the stop the worker is asked for (`stop_request`
/// 'ruled', which the retry policy turns into `stopped`). It replaces a pending eviction or
/// suspension: the run is lost either way, and a stopped run is not run again.
pub struct Fired<'a> {
    pub rule: &'a str,
    pub metric: &'a str,
    pub step: i64,
    pub value: f64,
    pub message: &'a str,
}

pub async fn record_fired(
    conn: &mut Conn,
    job_id: JobId,
    fired: &Fired<'_>,
) -> Result<(), StoreError> {
    let now = now_ms();
    db::query(
        "UPDATE jobs SET stop_request = 'ruled', stop_message = ?, stop_rule = ?, stop_metric = ?, \
         stop_step = ?, stop_value = ?, stop_at = ?, updated_at = ? WHERE id = ?",
    )
    .bind(fired.message)
    .bind(fired.rule)
    .bind(fired.metric)
    .bind(fired.step)
    .bind(fired.value.to_string())
    .bind(now)
    .bind(now)
    .bind(job_id)
    .execute(conn)
    .await?;
    Ok(())
}

/// What stopping saved: the pod-hours the run would still have taken.
pub async fn record_saved(conn: &mut Conn, job_id: JobId, hours: f64) -> Result<(), StoreError> {
    db::query("UPDATE jobs SET stop_saved_hours = ? WHERE id = ?")
        .bind(hours)
        .bind(job_id)
        .execute(conn)
        .await?;
    Ok(())
}

/// `requeue --ignore-stop-rules`; any requeue forgets the old verdict and the guard's count.
pub async fn reset(conn: &mut Conn, job_id: JobId, ignore_rules: bool) -> Result<(), StoreError> {
    db::query(
        "UPDATE jobs SET stop_rule = NULL, stop_metric = NULL, stop_step = NULL, stop_value = NULL, \
         stop_at = NULL, stop_saved_hours = NULL, diverged_reports = 0, diverged_step = NULL, \
         ignore_stop_rules = CASE WHEN ? = 1 THEN 1 ELSE ignore_stop_rules END WHERE id = ?",
    )
    .bind(i64::from(ignore_rules))
    .bind(job_id)
    .execute(conn)
    .await?;
    Ok(())
}

/// The first value of `metric` reported at or after `step`.
pub async fn first_at_or_after(
    conn: &mut Conn,
    job_id: JobId,
    metric: &str,
    step: i64,
) -> Result<Option<(i64, Option<f64>)>, StoreError> {
    let Some(series) = metrics::series_id(conn, job_id, metric).await? else {
        return Ok(None);
    };
    let mut first = None;
    metrics::scan_forward(conn, series, step, |at, value| {
        first = Some((at, metrics::stored(value)));
        false
    })
    .await?;
    Ok(first)
}

/// The newest `n` values of `metric`, newest first.
pub async fn newest(
    conn: &mut Conn,
    job_id: JobId,
    metric: &str,
    n: i64,
) -> Result<Vec<(i64, Option<f64>)>, StoreError> {
    let Some(series) = metrics::series_id(conn, job_id, metric).await? else {
        return Ok(Vec::new());
    };
    let mut newest = Vec::new();
    if n > 0 {
        metrics::scan_backward(conn, series, |at, value| {
            newest.push((at, metrics::stored(value)));
            (newest.len() as i64) < n
        })
        .await?;
    }
    Ok(newest)
}

/// The best value of `metric` before `step` (the smallest when `lower_is_better`); NaN
/// values are no one's best.
pub async fn best_before(
    conn: &mut Conn,
    job_id: JobId,
    metric: &str,
    step: i64,
    lower_is_better: bool,
) -> Result<Option<f64>, StoreError> {
    let Some(series) = metrics::series_id(conn, job_id, metric).await? else {
        return Ok(None);
    };
    let mut best: Option<f64> = None;
    metrics::scan_forward(conn, series, i64::MIN, |at, value| {
        if at >= step {
            return false;
        }
        if !value.is_nan() {
            best = Some(match best {
                Some(held) if lower_is_better => held.min(value),
                Some(held) => held.max(value),
                None => value,
            });
        }
        true
    })
    .await?;
    Ok(best)
}

/// Pod-hours saved by stopping runs early, and how many runs were stopped.
pub async fn saved_by_stopping(conn: &mut Conn) -> Result<(f64, i64), StoreError> {
    Ok(db::query_as(AssertSqlSafe(format!(
        "SELECT COALESCE(SUM(stop_saved_hours), 0.0), COUNT(*) FROM jobs WHERE {} \
         AND same_as IS NULL AND id NOT IN \
         (SELECT job_id FROM rung_decisions WHERE verdict = 'pruned')",
        super::job_state::state_in("state", &[JobState::Stopped])
    )))
    .fetch_one(conn)
    .await?)
}
