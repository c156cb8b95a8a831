//! Pod time by cause: where every second of a pod went, per attempt, run, group,
//! pod and for the whole grant. This file is its SQL; the model (the split by cause, the
//! ledger's charges) is `pod_time_model.rs`; its public types are re-exported here.
//!
//! An attempt's split is settled when it ends, stored on it and added to running sums
//! (`pod_time_totals`), so no read adds up the history. The time between attempts belongs to
//! the pod: its ledger remembers since when it has been in which state, and the next report
//! says whether that time was recovery or idleness. A recovery after an attempt that lost the
//! pod's capacity is also charged to that attempt, so a run's split shows what its
//! preemptions cost.

use super::db::{self, Conn};
use std::collections::BTreeMap;

use podq_api::{JobId, LeaseId, PodTime, TrainerPhases};

use super::pod_time_model::{
    interrupted, ledger_step, ledger_time, merge_phases, save_cost, split, with_total,
    AttemptClock, LedgerCharge,
};
pub use super::pod_time_model::{PodActivity, Totals};
use super::{now_ms, StoreError};

/// An attempt's clock as stored, with what the model does not need: whose it is, and its
/// pod time once settled.
#[derive(sqlx::FromRow)]
struct ClockRow {
    job_id: JobId,
    attempt: i64,
    pod: String,
    started_at: i64,
    running_at: Option<i64>,
    first_step_at: Option<i64>,
    ended_at: Option<i64>,
    outcome: Option<String>,
    trainer_phases_json: Option<String>,
    stopping_s: Option<f64>,
    cause: Option<String>,
    pod_time_json: Option<String>,
    group_name: String,
    accelerator: String,
}

const ATTEMPT_CLOCK: &str = "SELECT a.job_id, a.attempt, a.pod, a.started_at, a.running_at, \
     a.first_step_at, a.ended_at, a.outcome, a.trainer_phases_json, a.stopping_s, \
     a.cause, a.pod_time_json, j.group_name, COALESCE(a.accelerator, j.accelerator) AS accelerator \
     FROM attempts a JOIN jobs j ON j.id = a.job_id";

impl ClockRow {
    fn clock(&self) -> AttemptClock {
        AttemptClock {
            started_at: self.started_at,
            running_at: self.running_at,
            first_step_at: self.first_step_at,
            ended_at: self.ended_at,
            outcome: self.outcome.clone(),
            phases: self
                .trainer_phases_json
                .as_deref()
                .and_then(|json| serde_json::from_str(json).ok())
                .unwrap_or_default(),
            stopping_s: self.stopping_s,
            cause: self.cause.clone(),
        }
    }

    fn settled(&self) -> Result<Option<PodTime>, StoreError> {
        self.pod_time_json
            .as_deref()
            .map(|json| {
                serde_json::from_str(json)
                    .map_err(|e| StoreError::Corrupt(format!("pod time of an attempt: {e}")))
            })
            .transpose()
    }
}

async fn last_kept_at(
    db: &mut Conn,
    job_id: JobId,
    attempt: i64,
) -> Result<Option<i64>, StoreError> {
    Ok(db::query_scalar(
        "SELECT seen_at FROM checkpoints WHERE job_id = ? AND attempt = ? AND committed = 1 \
         ORDER BY step DESC LIMIT 1",
    )
    .bind(job_id)
    .bind(attempt)
    .fetch_optional(db)
    .await?)
}

/// The attempt's pod time: as settled once it ended, computed up to now while it runs.
async fn of_clock(conn: &mut Conn, clock: &ClockRow, now: i64) -> Result<PodTime, StoreError> {
    if let Some(settled) = clock.settled()? {
        return Ok(settled);
    }
    let kept = last_kept_at(&mut *conn, clock.job_id, clock.attempt).await?;
    Ok(split(&clock.clock(), kept, now))
}

/// Keeps what the trainer reported so far on the attempt while it is open. Each figure only
/// grows: a worker that restarted counts again from zero, and must not erase what the one
/// before it reported (what it counts after the restart is lost up to the old figure).
pub async fn record_phases(
    conn: &mut Conn,
    lease_id: LeaseId,
    phases: &TrainerPhases,
) -> Result<(), StoreError> {
    let before: Option<Option<String>> =
        db::query_scalar("SELECT trainer_phases_json FROM attempts WHERE lease_id = ?")
            .bind(lease_id)
            .fetch_optional(conn)
            .await?;
    let before: TrainerPhases = before
        .flatten()
        .and_then(|json| serde_json::from_str(&json).ok())
        .unwrap_or_default();
    let merged = merge_phases(&before, phases);
    let json = serde_json::to_string(&merged)
        .map_err(|e| StoreError::Corrupt(format!("trainer phases: {e}")))?;
    db::query(
        "UPDATE attempts SET trainer_phases_json = ? WHERE lease_id = ? AND ended_at IS NULL",
    )
    .bind(json)
    .bind(lease_id)
    .execute(conn)
    .await?;
    Ok(())
}

/// Settles the pod time of the attempt `lease_id`, which has just ended, in the transaction
/// that ends it, and adds it to the running sums.
pub async fn settle_attempt(conn: &mut Conn, lease_id: LeaseId) -> Result<(), StoreError> {
    let clock: ClockRow = db::query_as(sqlx::AssertSqlSafe(format!(
        "{ATTEMPT_CLOCK} WHERE a.lease_id = ?"
    )))
    .bind(lease_id)
    .fetch_one(conn)
    .await?;
    if clock.pod_time_json.is_some() {
        return Ok(());
    }
    let kept = last_kept_at(&mut *conn, clock.job_id, clock.attempt).await?;
    let time = split(&clock.clock(), kept, now_ms());
    db::query("UPDATE attempts SET pod_time_json = ? WHERE lease_id = ?")
        .bind(to_json(&time)?)
        .bind(lease_id)
        .execute(conn)
        .await?;
    let interrupted = interrupted(clock.outcome.as_deref(), clock.cause.as_deref());
    for scope in [
        "all".to_owned(),
        format!("pod:{}", clock.pod),
        format!("group:{}", clock.group_name),
        format!("accelerator:{}", clock.accelerator),
    ] {
        add_to_totals(conn, &scope, &time, time.total_s, u32::from(interrupted)).await?;
    }
    Ok(())
}

/// Settles attempts that ended before pod time was kept (databases from before migration
/// 0008). A no-op once done.
pub async fn settle_unsettled(conn: &mut Conn) -> Result<u64, StoreError> {
    let leases: Vec<LeaseId> = db::query_scalar(
        "SELECT lease_id FROM attempts WHERE ended_at IS NOT NULL AND pod_time_json IS NULL",
    )
    .fetch_all(conn)
    .await?;
    for &lease in &leases {
        settle_attempt(conn, lease).await?;
    }
    Ok(leases.len() as u64)
}

fn to_json(time: &PodTime) -> Result<String, StoreError> {
    serde_json::to_string(time).map_err(|e| StoreError::Corrupt(format!("pod time: {e}")))
}

async fn add_to_totals(
    conn: &mut Conn,
    scope: &str,
    time: &PodTime,
    attempt_s: f64,
    interruptions: u32,
) -> Result<(), StoreError> {
    let before: Option<String> =
        db::query_scalar("SELECT pod_time_json FROM pod_time_totals WHERE scope = ?")
            .bind(scope)
            .fetch_optional(conn)
            .await?;
    let mut sum: PodTime = before
        .as_deref()
        .map(serde_json::from_str)
        .transpose()
        .map_err(|e| StoreError::Corrupt(format!("pod time totals of {scope}: {e}")))?
        .unwrap_or_default();
    sum.add(time);
    db::query(
        "INSERT INTO pod_time_totals (scope, pod_time_json, attempt_s, interruptions) \
         VALUES (?1, ?2, ?3, ?4) ON CONFLICT (scope) DO UPDATE SET \
         pod_time_json = ?2, attempt_s = pod_time_totals.attempt_s + ?3, \
         interruptions = pod_time_totals.interruptions + ?4",
    )
    .bind(scope)
    .bind(to_json(&sum)?)
    .bind(attempt_s)
    .bind(interruptions)
    .execute(conn)
    .await?;
    Ok(())
}

/// The pod is now `activity`, from `at`: charges the time since its last change to
/// recovery or idleness. The time right after an attempt goes to whatever the pod turns out
/// to be doing next: recovering (the attempt lost the pod) or not.
pub async fn pod_ledger(
    conn: &mut Conn,
    pod: &str,
    activity: PodActivity,
    at: i64,
) -> Result<(), StoreError> {
    let before: Option<(Option<String>, Option<i64>)> =
        db::query_as("SELECT ledger_state, ledger_since FROM pods WHERE name = ?")
            .bind(pod)
            .fetch_optional(conn)
            .await?;
    let Some((state, since)) = before else {
        return Ok(());
    };
    let Some(step) = ledger_step(state.as_deref(), since, activity, at) else {
        return Ok(());
    };
    match step.charge {
        Some(LedgerCharge::Recovery {
            seconds,
            after_attempt,
        }) => charge_recovery(conn, pod, seconds, after_attempt).await?,
        Some(LedgerCharge::Idle { seconds }) => {
            let idle = PodTime {
                idle_s: seconds,
                ..PodTime::default()
            };
            for scope in ["all".to_owned(), format!("pod:{pod}")] {
                add_to_totals(conn, &scope, &with_total(idle), 0.0, 0).await?;
            }
        }
        None => {}
    }
    db::query("UPDATE pods SET ledger_state = ?, ledger_since = ? WHERE name = ?")
        .bind(step.state)
        .bind(at)
        .bind(pod)
        .execute(conn)
        .await?;
    Ok(())
}

/// A recovery is the pod's; when it follows an attempt that ended losing the pod, it is also
/// that attempt's (and its run's and group's) provisioning time.
async fn charge_recovery(
    conn: &mut Conn,
    pod: &str,
    seconds: f64,
    after_attempt: bool,
) -> Result<(), StoreError> {
    let recovery = with_total(PodTime {
        provisioning_s: seconds,
        ..PodTime::default()
    });
    for scope in ["all".to_owned(), format!("pod:{pod}")] {
        add_to_totals(conn, &scope, &recovery, 0.0, 0).await?;
    }
    if !after_attempt {
        return Ok(());
    }
    type Last = (
        String,
        Option<String>,
        Option<String>,
        Option<String>,
        String,
    );
    let last: Option<Last> = db::query_as(
        "SELECT a.lease_id, a.outcome, a.cause, a.pod_time_json, j.group_name FROM attempts a \
         JOIN jobs j ON j.id = a.job_id WHERE a.pod = ? ORDER BY a.started_at DESC LIMIT 1",
    )
    .bind(pod)
    .fetch_optional(conn)
    .await?;
    let Some((lease, outcome, cause, Some(json), group)) = last else {
        return Ok(());
    };
    if !interrupted(outcome.as_deref(), cause.as_deref()) {
        return Ok(());
    }
    let mut time: PodTime = serde_json::from_str(&json)
        .map_err(|e| StoreError::Corrupt(format!("pod time of an attempt: {e}")))?;
    time.add(&recovery);
    db::query("UPDATE attempts SET pod_time_json = ? WHERE lease_id = ?")
        .bind(to_json(&time)?)
        .bind(&lease)
        .execute(conn)
        .await?;
    add_to_totals(conn, &format!("group:{group}"), &recovery, 0.0, 0).await
}

/// The pod time of each attempt of the run `job_id`, by attempt number.
pub async fn of_run(conn: &mut Conn, job_id: JobId) -> Result<BTreeMap<i64, PodTime>, StoreError> {
    let clocks: Vec<ClockRow> = db::query_as(sqlx::AssertSqlSafe(format!(
        "{ATTEMPT_CLOCK} WHERE a.job_id = ? ORDER BY a.attempt"
    )))
    .bind(job_id)
    .fetch_all(conn)
    .await?;
    let now = now_ms();
    let mut times = BTreeMap::new();
    for clock in &clocks {
        times.insert(clock.attempt, of_clock(conn, clock, now).await?);
    }
    Ok(times)
}

/// Pod time for the grant, each pod and each group: the running sums, plus the attempts still
/// open and each pod's current recovery or idleness up to now.
pub async fn totals(conn: &mut Conn) -> Result<Totals, StoreError> {
    let rows: Vec<(String, String)> =
        db::query_as("SELECT scope, pod_time_json FROM pod_time_totals")
            .fetch_all(conn)
            .await?;
    let mut totals = Totals::default();
    for (scope, json) in rows {
        let time: PodTime = serde_json::from_str(&json)
            .map_err(|e| StoreError::Corrupt(format!("pod time totals of {scope}: {e}")))?;
        if scope == "all" {
            totals.all = time;
        } else if let Some(pod) = scope.strip_prefix("pod:") {
            totals.pods.insert(pod.to_owned(), time);
        } else if let Some(group) = scope.strip_prefix("group:") {
            totals.groups.insert(group.to_owned(), time);
        }
    }
    let now = now_ms();
    let open: Vec<ClockRow> = db::query_as(sqlx::AssertSqlSafe(format!(
        "{ATTEMPT_CLOCK} WHERE a.ended_at IS NULL"
    )))
    .fetch_all(conn)
    .await?;
    for clock in &open {
        let time = of_clock(conn, clock, now).await?;
        totals.all.add(&time);
        totals.pods.entry(clock.pod.clone()).or_default().add(&time);
        totals
            .groups
            .entry(clock.group_name.clone())
            .or_default()
            .add(&time);
    }
    let pods: Vec<(String, Option<String>, Option<i64>)> =
        db::query_as("SELECT name, ledger_state, ledger_since FROM pods")
            .fetch_all(conn)
            .await?;
    for (pod, state, since) in pods {
        let Some(since) = since else { continue };
        let elapsed = (now - since).max(0) as f64 / 1000.0;
        let Some(time) = ledger_time(state.as_deref(), elapsed) else {
            continue;
        };
        totals.all.add(&time);
        totals.pods.entry(pod).or_default().add(&time);
    }
    Ok(totals)
}

/// Pod time spent in attempts on pods of `accelerator`, and how many of those attempts were
/// interrupted: the history behind the pod type's MTBF.
pub async fn interruption_history(
    db: &mut Conn,
    accelerator: &str,
) -> Result<(f64, u64), StoreError> {
    let row: Option<(f64, i64)> =
        db::query_as("SELECT attempt_s, interruptions FROM pod_time_totals WHERE scope = ?")
            .bind(format!("accelerator:{accelerator}"))
            .fetch_optional(db)
            .await?;
    Ok(row.map_or((0.0, 0), |(s, n)| (s, n.max(0) as u64)))
}

/// The save cost the run's trainer reported: its total blocking save time over its saves.
pub async fn reported_save_cost(db: &mut Conn, job_id: JobId) -> Result<Option<f64>, StoreError> {
    let reports: Vec<Option<String>> =
        db::query_scalar("SELECT trainer_phases_json FROM attempts WHERE job_id = ?")
            .bind(job_id)
            .fetch_all(db)
            .await?;
    let reports: Vec<TrainerPhases> = reports
        .iter()
        .flatten()
        .filter_map(|json| serde_json::from_str(json).ok())
        .collect();
    Ok(save_cost(&reports))
}
