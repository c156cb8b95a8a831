//! `GET /plan`: the queue in order, projected onto the pods, against the grant's deadline.

use axum::extract::State;
use axum::routing::get;
use axum::{Json, Router};
use chrono::{Duration as ChronoDuration, Utc};
use podq_api::{Plan, PlannedRun};
use uuid::Uuid;

use super::error::ApiError;
use crate::store::now_ms;
use crate::AppState;

pub fn routes() -> Router<AppState> {
    Router::new().route("/plan", get(plan))
}

#[derive(sqlx::FromRow)]
struct QueuedRun {
    id: String,
    experiment: String,
    group_name: String,
    state: String,
    priority: i64,
    est_hours: f64,
    last_step: Option<i64>,
    total_steps: Option<i64>,
    first_step: Option<i64>,
    first_step_at: Option<i64>,
    end_step: Option<i64>,
    linked: Option<String>,
}

async fn plan(State(state): State<AppState>) -> Result<Json<Plan>, ApiError> {
    // What is on a pod first, then the queue in lease order (priority, then submission).
    let runs: Vec<QueuedRun> = sqlx::query_as(
        "SELECT j.id, j.experiment, j.group_name, j.state, j.priority, j.est_hours, j.last_step, \
         j.total_steps, a.first_step, a.first_step_at, a.end_step, \
         (SELECT group_concat(l.experiment, ',') FROM jobs l WHERE l.same_as = j.id AND l.state <> 'cancelled') AS linked \
         FROM jobs j LEFT JOIN attempts a ON a.job_id = j.id AND a.attempt = j.attempts AND a.ended_at IS NULL \
         WHERE j.same_as IS NULL AND j.state IN ('leased', 'running', 'queued') \
         ORDER BY j.state = 'queued', j.priority DESC, j.seq",
    )
    .fetch_all(state.store.reader())
    .await?;
    let pods: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM pods")
        .fetch_one(state.store.reader())
        .await?;
    let pods = usize::try_from(pods).unwrap_or(0).max(1);
    let now = Utc::now();
    let now_ms = now_ms();
    let mut lanes = vec![now; pods];
    let mut planned = Vec::with_capacity(runs.len());
    for run in runs {
        let remaining_hours = remaining_hours(&run, now_ms);
        let lane = lanes
            .iter()
            .enumerate()
            .min_by_key(|(_, t)| **t)
            .map(|(i, _)| i)
            .unwrap_or(0);
        let start = lanes[lane];
        let end = start + ChronoDuration::seconds((remaining_hours * 3600.0) as i64);
        lanes[lane] = end;
        planned.push(PlannedRun {
            job_id: Uuid::parse_str(&run.id).unwrap_or_default(),
            experiment: run.experiment,
            group: run.group_name,
            state: run.state,
            priority: run.priority,
            remaining_hours,
            start,
            end,
            fits_deadline: state.config.deadline.is_none_or(|d| end <= d),
            also_finishes: run
                .linked
                .map(|l| l.split(',').map(str::to_owned).collect())
                .unwrap_or_default(),
        });
    }
    Ok(Json(Plan {
        now,
        deadline: state.config.deadline,
        pods,
        total_hours: planned.iter().map(|r| r.remaining_hours).sum(),
        runs_that_fit: planned.iter().filter(|r| r.fits_deadline).count(),
        runs: planned,
    }))
}

fn remaining_hours(run: &QueuedRun, now_ms: i64) -> f64 {
    let fraction_left = match (run.last_step, run.total_steps) {
        (Some(step), Some(total)) if total > 0 => {
            (1.0 - step as f64 / total as f64).clamp(0.0, 1.0)
        }
        _ => 1.0,
    };
    // A running attempt's own rate beats the plan's estimate once it is measurable.
    if let (Some(first), Some(at), Some(end), Some(total)) = (
        run.first_step,
        run.first_step_at,
        run.end_step,
        run.total_steps,
    ) {
        let elapsed_s = (now_ms - at) as f64 / 1000.0;
        if end > first && elapsed_s > 0.0 {
            let rate = (end - first) as f64 / elapsed_s;
            return ((total - end).max(0) as f64 / rate) / 3600.0;
        }
    }
    run.est_hours * fraction_left
}
