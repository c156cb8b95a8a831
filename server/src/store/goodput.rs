//! Goodput: how much of the pod time a job used became progress that was kept.

use std::collections::HashMap;

use podq_api::Goodput;
use sqlx::SqlitePool;

use super::{now_ms, StoreError};

#[derive(sqlx::FromRow)]
struct AttemptTimes {
    job_id: String,
    attempt: i64,
    started_at: i64,
    first_step_at: Option<i64>,
    ended_at: Option<i64>,
    outcome: Option<String>,
    start_step: Option<i64>,
    end_step: Option<i64>,
}

#[derive(sqlx::FromRow)]
struct CommittedCheckpoint {
    job_id: String,
    attempt: i64,
    step: i64,
    seen_at: i64,
}

/// Goodput per run (job id), for one run or for all.
pub async fn by_run(
    db: &SqlitePool,
    job_id: Option<&str>,
) -> Result<HashMap<String, Goodput>, StoreError> {
    let attempts: Vec<AttemptTimes> = sqlx::query_as(
        "SELECT job_id, attempt, started_at, first_step_at, ended_at, outcome, start_step, end_step \
         FROM attempts WHERE ?1 IS NULL OR job_id = ?1",
    )
    .bind(job_id)
    .fetch_all(db)
    .await?;
    let checkpoints: Vec<CommittedCheckpoint> = sqlx::query_as(
        "SELECT job_id, attempt, step, seen_at FROM checkpoints WHERE committed = 1 AND (?1 IS NULL OR job_id = ?1)",
    )
    .bind(job_id)
    .fetch_all(db)
    .await?;
    let now = now_ms();
    let mut runs: HashMap<String, Goodput> = HashMap::new();
    for a in attempts {
        let last_kept = checkpoints
            .iter()
            .filter(|c| c.job_id == a.job_id && c.attempt == a.attempt)
            .max_by_key(|c| c.step);
        let g = account(&a, last_kept, now);
        runs.entry(a.job_id.clone()).or_default().add(&g);
    }
    Ok(runs)
}

fn account(a: &AttemptTimes, last_kept: Option<&CommittedCheckpoint>, now: i64) -> Goodput {
    let secs = |ms: i64| ms.max(0) as f64 / 1000.0;
    let end = a.ended_at.unwrap_or(now);
    let training_from = a.first_step_at.unwrap_or(end).min(end);
    let start_step = a.start_step.unwrap_or(0);
    let mut g = Goodput {
        overhead_s: secs(training_from - a.started_at),
        ..Goodput::default()
    };
    // A finished run keeps everything; a running one is counted as kept until it ends.
    let keeps_all = matches!(a.outcome.as_deref(), None | Some("succeeded"));
    if keeps_all {
        g.kept_s = secs(end - training_from);
        g.kept_steps = (a.end_step.unwrap_or(start_step) - start_step).max(0);
    } else if let Some(checkpoint) = last_kept {
        let kept_until = checkpoint.seen_at.clamp(training_from, end);
        g.kept_s = secs(kept_until - training_from);
        g.lost_s = secs(end - kept_until);
        g.kept_steps = (checkpoint.step - start_step).max(0);
    } else {
        g.lost_s = secs(end - training_from);
    }
    g.finish();
    g
}
