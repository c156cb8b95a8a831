//! The reads behind `GET /status` and `GET /plan`. Each reads only what is live (jobs on a
//! pod or in the queue) or maintained totals, never the finished history.

use super::backend::{active_run_select, dialect};
use super::db::{self, Conn};
use super::StoreError;
use podq_api::{JobId, JobState};
use std::sync::LazyLock;

/// A run that is on a pod or waiting for one, with its current attempt's progress.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct ActiveRun {
    pub id: JobId,
    pub experiment: String,
    pub group_name: String,
    pub state: JobState,
    pub priority: i64,
    pub attempts: i64,
    pub est_hours: f64,
    pub last_step: Option<i64>,
    pub total_steps: Option<i64>,
    pub first_step: Option<i64>,
    pub first_step_at: Option<i64>,
    pub end_step: Option<i64>,
    /// Experiments of jobs linked to this run, comma-separated.
    pub linked: Option<String>,
}

/// Runs (not linked jobs) on a pod (leased or running), in lease order.
pub(crate) static RUNS_ON_PODS: LazyLock<String> = LazyLock::new(|| {
    format!(
        "{}WHERE j.same_as IS NULL AND {} ORDER BY j.priority DESC, j.seq",
        active_run_select!(""),
        super::job_state::state_in("j.state", &super::job_state::on_pod())
    )
});

/// Runs on a pod, then queued runs that made progress.
pub async fn active_runs(db: &mut Conn) -> Result<Vec<ActiveRun>, StoreError> {
    let mut runs: Vec<ActiveRun> = db::query_as(RUNS_ON_PODS.as_str()).fetch_all(db).await?;
    let progressed = dialect(db.backend()).progressed_queue.as_str();
    runs.extend(db::query_as::<ActiveRun>(progressed).fetch_all(db).await?);
    Ok(runs)
}

/// How many queued runs never reported a step, and the pod-hours they are estimated at:
/// kept by triggers (migration 0006), one row whatever the depth of the queue.
pub(crate) const FRESH_QUEUE: &str = "SELECT n, hours FROM fresh_queue WHERE id = 1";

pub async fn fresh_queue(db: &mut Conn) -> Result<(i64, f64), StoreError> {
    Ok(db::query_as(FRESH_QUEUE).fetch_one(db).await?)
}

/// A job as the grant plan needs it, with its latest attempt that reported steps.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct PlanJob {
    pub id: JobId,
    pub seq: i64,
    pub experiment: String,
    pub group_name: String,
    pub state: JobState,
    pub priority: i64,
    pub class_rank: i64,
    pub queue_head: i64,
    pub same_as: Option<JobId>,
    pub est_hours: f64,
    pub last_step: Option<i64>,
    pub total_steps: Option<i64>,
    pub config_sha256: String,
    pub accelerator: String,
    pub first_step: Option<i64>,
    pub first_step_at: Option<i64>,
    pub end_step: Option<i64>,
    pub ended_at: Option<i64>,
    /// The slice type of the attempt `first_step` .. `end_step` were measured on.
    pub measured_on: Option<String>,
    /// The slice type of the attempt on a pod now, if one is.
    pub live_on: Option<String>,
    /// Held at a rung, waiting for its siblings' values (not stuck: it goes on or ends).
    pub rung_paused: bool,
}

const PLAN_JOB: &str = "SELECT j.id, j.seq, j.experiment, j.group_name, j.state, j.priority, \
     j.class_rank, j.queue_head, j.same_as, j.est_hours, j.last_step, j.total_steps, j.config_sha256, \
     j.accelerator, a.first_step, a.first_step_at, a.end_step, a.ended_at, \
     a.accelerator AS measured_on, \
     (SELECT l.accelerator FROM attempts l WHERE l.lease_id = j.lease_id) AS live_on, \
     EXISTS (SELECT 1 FROM rung_decisions r WHERE r.job_id = j.id AND r.verdict = 'paused') \
       AS rung_paused FROM jobs j \
     LEFT JOIN attempts a ON a.job_id = j.id AND a.attempt = (SELECT MAX(attempt) FROM attempts \
       WHERE job_id = j.id AND first_step IS NOT NULL)";

/// The newest job of `experiment`, if it was ever submitted (an index seek, whatever the
/// history).
pub async fn newest_job_of(db: &mut Conn, experiment: &str) -> Result<Option<PlanJob>, StoreError> {
    Ok(db::query_as(sqlx::AssertSqlSafe(format!(
        "{PLAN_JOB} WHERE j.id = (SELECT id FROM jobs WHERE experiment = ? ORDER BY seq DESC LIMIT 1)"
    )))
    .bind(experiment)
    .fetch_optional(db)
    .await?)
}

pub async fn plan_job(db: &mut Conn, id: JobId) -> Result<Option<PlanJob>, StoreError> {
    Ok(
        db::query_as(sqlx::AssertSqlSafe(format!("{PLAN_JOB} WHERE j.id = ?")))
            .bind(id)
            .fetch_optional(db)
            .await?,
    )
}

/// One attempt's progress and slice type, for its step rate there.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct AttemptProgress {
    pub job_id: JobId,
    pub group_name: String,
    pub accelerator: String,
    pub first_step: i64,
    pub first_step_at: i64,
    pub end_step: Option<i64>,
    pub ended_at: Option<i64>,
}

/// Every attempt that reported steps on a known slice type: what the plan measures each
/// run's and each group's speed on each type from.
pub async fn attempt_progress(db: &mut Conn) -> Result<Vec<AttemptProgress>, StoreError> {
    Ok(db::query_as(
        "SELECT a.job_id, j.group_name, a.accelerator, a.first_step, a.first_step_at, \
         a.end_step, a.ended_at FROM attempts a JOIN jobs j ON j.id = a.job_id \
         WHERE a.first_step IS NOT NULL AND a.first_step_at IS NOT NULL \
         AND a.accelerator IS NOT NULL",
    )
    .fetch_all(db)
    .await?)
}

/// A run's attempts, preemptions and message.
pub async fn attempt_counts(
    db: &mut Conn,
    id: JobId,
) -> Result<(i64, i64, Option<String>), StoreError> {
    Ok(
        db::query_as("SELECT attempts, preemptions, message FROM jobs WHERE id = ?")
            .bind(id)
            .fetch_one(db)
            .await?,
    )
}
