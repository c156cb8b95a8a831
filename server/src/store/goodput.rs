//! Goodput: how much of the pod time a run used became progress that was kept.
//!
//! An attempt's goodput is fixed once it ends, so it is computed then and stored on the
//! attempt (`kept_s`, `lost_s`, `overhead_s`, `kept_steps`); a trigger adds it to the one-row
//! `goodput_totals`. Only attempts still open are computed at read time, so no read sums the
//! history.

use super::db::{self, Conn};
use podq_api::Goodput;
use podq_api::{JobId, LeaseId};

use super::{now_ms, StoreError};

#[derive(sqlx::FromRow)]
struct AttemptTimes {
    job_id: JobId,
    attempt: i64,
    started_at: i64,
    first_step_at: Option<i64>,
    ended_at: Option<i64>,
    outcome: Option<String>,
    start_step: Option<i64>,
    end_step: Option<i64>,
}

const ATTEMPT_TIMES: &str =
    "job_id, attempt, started_at, first_step_at, ended_at, outcome, start_step, end_step";
/// Attempts still running; the partial index `attempts_open` keeps this off the history.
pub(crate) const OPEN_ATTEMPTS: &str = "SELECT job_id, attempt, started_at, first_step_at, \
     ended_at, outcome, start_step, end_step FROM attempts WHERE ended_at IS NULL";

/// Computes and stores the goodput of the attempt `lease_id`, which has just ended. Called in
/// the transaction that ends it.
pub async fn settle_attempt(conn: &mut Conn, lease_id: LeaseId) -> Result<(), StoreError> {
    let attempt: AttemptTimes = db::query_as(sqlx::AssertSqlSafe(format!(
        "SELECT {ATTEMPT_TIMES} FROM attempts WHERE lease_id = ?"
    )))
    .bind(lease_id)
    .fetch_one(conn)
    .await?;
    let g = of_attempt(&mut *conn, &attempt, now_ms()).await?;
    db::query(
        "UPDATE attempts SET kept_s = ?, lost_s = ?, overhead_s = ?, kept_steps = ? \
         WHERE lease_id = ? AND kept_s IS NULL",
    )
    .bind(g.kept_s)
    .bind(g.lost_s)
    .bind(g.overhead_s)
    .bind(g.kept_steps)
    .bind(lease_id)
    .execute(conn)
    .await?;
    Ok(())
}

/// Settles attempts that ended before goodput was stored per attempt (databases from before
/// migration 0003). A no-op once done.
pub async fn settle_unsettled(conn: &mut Conn) -> Result<u64, StoreError> {
    let leases: Vec<LeaseId> = db::query_scalar(
        "SELECT lease_id FROM attempts WHERE ended_at IS NOT NULL AND kept_s IS NULL",
    )
    .fetch_all(conn)
    .await?;
    for &lease in &leases {
        settle_attempt(conn, lease).await?;
    }
    Ok(leases.len() as u64)
}

/// Goodput over every run: the stored totals plus the attempts still open.
pub async fn total(db: &mut Conn) -> Result<Goodput, StoreError> {
    let (kept_s, lost_s, overhead_s, kept_steps): (f64, f64, f64, i64) = db::query_as(
        "SELECT kept_s, lost_s, overhead_s, kept_steps FROM goodput_totals WHERE id = 1",
    )
    .fetch_one(db)
    .await?;
    let mut g = Goodput {
        kept_s,
        lost_s,
        overhead_s,
        kept_steps,
        ratio: None,
    };
    let open: Vec<AttemptTimes> = db::query_as(OPEN_ATTEMPTS).fetch_all(db).await?;
    let now = now_ms();
    for attempt in &open {
        g.add(&of_attempt(db, attempt, now).await?);
    }
    g.finish();
    Ok(g)
}

/// Goodput of one run: its ended attempts as stored, its open one computed now.
pub async fn of_run(db: &mut Conn, job_id: JobId) -> Result<Goodput, StoreError> {
    let (kept_s, lost_s, overhead_s, kept_steps): (f64, f64, f64, i64) = db::query_as(
        "SELECT COALESCE(SUM(kept_s), 0.0), COALESCE(SUM(lost_s), 0.0), COALESCE(SUM(overhead_s), 0.0), \
         CAST(COALESCE(SUM(kept_steps), 0) AS BIGINT) FROM attempts WHERE job_id = ? AND ended_at IS NOT NULL",
    )
    .bind(job_id)
    .fetch_one(db)
    .await?;
    let mut g = Goodput {
        kept_s,
        lost_s,
        overhead_s,
        kept_steps,
        ratio: None,
    };
    let open: Vec<AttemptTimes> = db::query_as(sqlx::AssertSqlSafe(format!(
        "SELECT {ATTEMPT_TIMES} FROM attempts WHERE job_id = ? AND ended_at IS NULL"
    )))
    .bind(job_id)
    .fetch_all(db)
    .await?;
    let now = now_ms();
    for attempt in &open {
        g.add(&of_attempt(&mut *db, attempt, now).await?);
    }
    g.finish();
    Ok(g)
}

async fn of_attempt(db: &mut Conn, a: &AttemptTimes, now: i64) -> Result<Goodput, StoreError> {
    // A run still going keeps all its time: its checkpoints are not read. Status sums the
    // open attempts on every change, and a read each for a thousand running jobs made it
    // the slowest call of a fleet (benches/fleet.rs).
    if keeps_all(a) {
        return Ok(account(a, None, now));
    }
    let last_kept: Option<(i64, i64)> = db::query_as(
        "SELECT step, seen_at FROM checkpoints WHERE job_id = ? AND attempt = ? AND committed = 1 \
         ORDER BY step DESC LIMIT 1",
    )
    .bind(a.job_id)
    .bind(a.attempt)
    .fetch_optional(db)
    .await?;
    Ok(account(a, last_kept, now))
}

/// A finished run keeps everything; a running one is counted as kept until it ends.
fn keeps_all(a: &AttemptTimes) -> bool {
    matches!(a.outcome.as_deref(), None | Some("succeeded"))
}

/// The attempt's pod time split into overhead (before its first step), time whose progress
/// was kept (up to its last committed checkpoint, or all of it when it succeeded or still
/// runs) and time lost.
fn account(a: &AttemptTimes, last_kept: Option<(i64, i64)>, now: i64) -> Goodput {
    let secs = |ms: i64| ms.max(0) as f64 / 1000.0;
    let end = a.ended_at.unwrap_or(now);
    let training_from = a.first_step_at.unwrap_or(end).min(end);
    let start_step = a.start_step.unwrap_or(0);
    let mut g = Goodput {
        overhead_s: secs(training_from - a.started_at),
        ..Goodput::default()
    };
    if keeps_all(a) {
        g.kept_s = secs(end - training_from);
        g.kept_steps = (a.end_step.unwrap_or(start_step) - start_step).max(0);
    } else if let Some((step, seen_at)) = last_kept {
        let kept_until = seen_at.clamp(training_from, end);
        g.kept_s = secs(kept_until - training_from);
        g.lost_s = secs(end - kept_until);
        g.kept_steps = (step - start_step).max(0);
    } else {
        g.lost_s = secs(end - training_from);
    }
    g.finish();
    g
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attempt(outcome: Option<&str>) -> AttemptTimes {
        AttemptTimes {
            job_id: "6a000000-0000-4000-8000-000000000001".parse().unwrap(),
            attempt: 1,
            started_at: 0,
            first_step_at: Some(10_000),
            ended_at: Some(110_000),
            outcome: outcome.map(str::to_owned),
            start_step: Some(0),
            end_step: Some(100),
        }
    }

    #[test]
    fn a_preempted_attempt_keeps_up_to_its_last_checkpoint() {
        let g = account(&attempt(Some("preempted")), Some((60, 70_000)), 0);
        assert_eq!((g.overhead_s, g.kept_s, g.lost_s), (10.0, 60.0, 40.0));
        assert_eq!(g.kept_steps, 60);
    }

    #[test]
    fn a_succeeded_attempt_keeps_everything_and_one_without_checkpoint_nothing() {
        let g = account(&attempt(Some("succeeded")), None, 0);
        assert_eq!((g.kept_s, g.lost_s, g.kept_steps), (100.0, 0.0, 100));
        let g = account(&attempt(Some("failed")), None, 0);
        assert_eq!((g.kept_s, g.lost_s, g.kept_steps), (0.0, 100.0, 0));
    }
}
