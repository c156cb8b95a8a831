//! The reads behind `GET /status` and `GET /plan`. Each reads only what is live (jobs on a
//! pod or in the queue) or maintained totals, never the finished history.

use sqlx::SqlitePool;

use super::StoreError;

/// A run that is on a pod or waiting for one, with its current attempt's progress.
#[derive(Debug, sqlx::FromRow)]
pub struct ActiveRun {
    pub id: String,
    pub experiment: String,
    pub group_name: String,
    pub state: String,
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

/// Runs (not linked jobs) that are leased, running or queued: on a pod first, then in lease
/// order (priority, then submission).
pub(crate) const ACTIVE_RUNS: &str =
    "SELECT j.id, j.experiment, j.group_name, j.state, j.priority, j.attempts, j.est_hours, \
         j.last_step, j.total_steps, a.first_step, a.first_step_at, a.end_step, \
         (SELECT group_concat(l.experiment, ',') FROM jobs l \
            WHERE l.same_as = j.id AND l.link_cancelled = 0) AS linked \
         FROM jobs j LEFT JOIN attempts a ON a.job_id = j.id AND a.attempt = j.attempts \
           AND a.ended_at IS NULL \
         WHERE j.same_as IS NULL AND j.state IN ('leased', 'running', 'queued') \
         ORDER BY j.state = 'queued', j.priority DESC, j.seq";

pub async fn active_runs(db: &SqlitePool) -> Result<Vec<ActiveRun>, StoreError> {
    Ok(sqlx::query_as(ACTIVE_RUNS).fetch_all(db).await?)
}
