//! What the rungs read and write (scheduler/lease/rungs.rs): each run's value at each rung it
//! reached, and the standing decision about it there. A NaN value is stored as NULL, as the
//! stop rules store one, and reads back as no value.

use podq_api::{JobId, JobState};

use super::db::{self, Conn};
use super::{now_ms, StoreError};

/// A run's value at a rung: the first value of the rungs' metric at or after the rung's step,
/// or none when the run passed the rung without one.
#[derive(Debug, Clone, PartialEq, sqlx::FromRow)]
pub struct RungValue {
    pub job_id: JobId,
    pub rung: i64,
    pub step: Option<i64>,
    pub value: Option<f64>,
}

/// A standing decision: `paused` until the promotion or the prune that ends it replaces it.
#[derive(Debug, Clone, PartialEq, sqlx::FromRow)]
pub struct RungDecision {
    pub job_id: JobId,
    pub rung: i64,
    pub verdict: String,
    pub rank: Option<i64>,
    pub of_runs: Option<i64>,
    pub value: Option<f64>,
    pub decided_at: i64,
    pub decided_by: String,
}

/// A job of a group, as the rungs see it.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct GroupJob {
    pub id: JobId,
    pub experiment: String,
    pub state: JobState,
    pub same_as: Option<JobId>,
    /// `requeue --ignore-stop-rules` lifted its rules and its rungs.
    pub ignore_stop_rules: i64,
}

/// The rungs `job` has a value (or a judged absence of one) at.
pub async fn reached(conn: &mut Conn, job: JobId) -> Result<Vec<i64>, StoreError> {
    Ok(
        db::query_scalar("SELECT rung FROM rung_values WHERE job_id = ? ORDER BY rung")
            .bind(job)
            .fetch_all(conn)
            .await?,
    )
}

/// Records `job`'s value at `rung` once; a batch sent twice changes nothing.
pub async fn record_value(
    conn: &mut Conn,
    job: JobId,
    rung: i64,
    judged: Option<(i64, f64)>,
) -> Result<(), StoreError> {
    db::query(
        "INSERT INTO rung_values (job_id, rung, step, value) VALUES (?, ?, ?, ?) \
         ON CONFLICT (job_id, rung) DO NOTHING",
    )
    .bind(job)
    .bind(rung)
    .bind(judged.map(|(step, _)| step))
    .bind(judged.map(|(_, value)| value).filter(|v| !v.is_nan()))
    .execute(conn)
    .await?;
    Ok(())
}

/// The jobs of `group`, in submission order.
pub async fn group_jobs(conn: &mut Conn, group: &str) -> Result<Vec<GroupJob>, StoreError> {
    Ok(db::query_as(
        "SELECT id, experiment, state, same_as, ignore_stop_rules FROM jobs WHERE group_name = ? \
         ORDER BY seq",
    )
    .bind(group)
    .fetch_all(conn)
    .await?)
}

/// The group of `job`.
pub async fn group_of(conn: &mut Conn, job: JobId) -> Result<Option<String>, StoreError> {
    Ok(db::query_scalar("SELECT group_name FROM jobs WHERE id = ?")
        .bind(job)
        .fetch_optional(conn)
        .await?)
}

/// The groups of `job` and of the jobs linked to its run: each one's rungs may change when
/// the run ends.
pub async fn groups_of_run(conn: &mut Conn, job: JobId) -> Result<Vec<String>, StoreError> {
    Ok(db::query_scalar(
        "SELECT DISTINCT group_name FROM jobs WHERE id = ? OR same_as = ? ORDER BY group_name",
    )
    .bind(job)
    .bind(job)
    .fetch_all(conn)
    .await?)
}

/// Every value the jobs of `group` were judged on.
pub async fn group_values(conn: &mut Conn, group: &str) -> Result<Vec<RungValue>, StoreError> {
    Ok(db::query_as(
        "SELECT v.job_id, v.rung, v.step, v.value FROM rung_values v \
         JOIN jobs j ON j.id = v.job_id WHERE j.group_name = ? ORDER BY v.rung",
    )
    .bind(group)
    .fetch_all(conn)
    .await?)
}

/// Every standing decision about the jobs of `group`, in the order they were made.
pub async fn group_decisions(
    conn: &mut Conn,
    group: &str,
) -> Result<Vec<RungDecision>, StoreError> {
    Ok(db::query_as(
        "SELECT d.job_id, d.rung, d.verdict, d.rank, d.of_runs, d.value, d.decided_at, \
         d.decided_by FROM rung_decisions d JOIN jobs j ON j.id = d.job_id \
         WHERE j.group_name = ? ORDER BY d.decided_at, d.rung",
    )
    .bind(group)
    .fetch_all(conn)
    .await?)
}

/// The standing decisions about `job`, first rung first.
pub async fn of_job(conn: &mut Conn, job: JobId) -> Result<Vec<RungDecision>, StoreError> {
    Ok(db::query_as(
        "SELECT job_id, rung, verdict, rank, of_runs, value, decided_at, decided_by \
         FROM rung_decisions WHERE job_id = ? ORDER BY rung",
    )
    .bind(job)
    .fetch_all(conn)
    .await?)
}

/// What a decision says of a run at a rung.
pub struct Decided<'a> {
    pub job: JobId,
    pub rung: i64,
    pub verdict: &'a str,
    pub standing: Option<(i64, i64, f64)>,
    pub by: &'a str,
}

/// Records a decision: a new one, or the end of a pause. A final decision is never replaced.
pub async fn record_decision(conn: &mut Conn, decided: &Decided<'_>) -> Result<(), StoreError> {
    db::query(
        "INSERT INTO rung_decisions (job_id, rung, verdict, rank, of_runs, value, decided_at, \
         decided_by) VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (job_id, rung) DO UPDATE SET \
         verdict = excluded.verdict, rank = excluded.rank, of_runs = excluded.of_runs, \
         value = excluded.value, decided_at = excluded.decided_at, \
         decided_by = excluded.decided_by WHERE rung_decisions.verdict = 'paused'",
    )
    .bind(decided.job)
    .bind(decided.rung)
    .bind(decided.verdict)
    .bind(decided.standing.map(|(rank, _, _)| rank))
    .bind(decided.standing.map(|(_, of, _)| of))
    .bind(
        decided
            .standing
            .map(|(_, _, value)| value)
            .filter(|v| !v.is_nan()),
    )
    .bind(now_ms())
    .bind(decided.by)
    .execute(conn)
    .await?;
    Ok(())
}

/// The rung `job` waits at, paused, if it does.
pub async fn paused_at(conn: &mut Conn, job: JobId) -> Result<Option<i64>, StoreError> {
    Ok(db::query_scalar(
        "SELECT rung FROM rung_decisions WHERE job_id = ? AND verdict = 'paused' \
         ORDER BY rung DESC LIMIT 1",
    )
    .bind(job)
    .fetch_optional(conn)
    .await?)
}

/// Pod-hours the rungs saved (each pruned run's estimate less the part it had trained), and
/// how many runs they pruned.
pub async fn saved_hours(conn: &mut Conn) -> Result<(f64, i64), StoreError> {
    let rows: Vec<(f64, Option<i64>, Option<i64>)> = db::query_as(
        "SELECT j.est_hours, j.last_step, j.total_steps FROM rung_decisions d \
         JOIN jobs j ON j.id = d.job_id WHERE d.verdict = 'pruned'",
    )
    .fetch_all(conn)
    .await?;
    let runs = rows.len() as i64;
    let hours = rows
        .into_iter()
        .map(|(hours, step, total)| match (step, total) {
            (Some(step), Some(total)) if total > 0 => {
                hours * (1.0 - (step as f64 / total as f64).clamp(0.0, 1.0))
            }
            _ => hours,
        })
        .sum();
    Ok((hours, runs))
}
