//! Pod time by cause (issue 19): where every second of a pod went, per attempt, run, group,
//! pod and for the whole grant. The causes follow Google's ml-goodput-measurement
//! (AI-Hypercomputer), which separates badput into initialisation, program startup,
//! checkpoint save and restore, and progress wasted by disruptions.
//!
//! An attempt's split is settled when it ends, stored on it and added to running sums
//! (`pod_time_totals`), so no read adds up the history. The time between attempts belongs to
//! the pod: its ledger remembers since when it has been in which state, and the next report
//! says whether that time was recovery or idleness. A recovery after an attempt that lost the
//! pod's capacity is also charged to that attempt, so a run's split shows what its
//! preemptions cost.

use super::db::{self, Conn};
use std::collections::BTreeMap;

use podq_api::{PodTime, TrainerPhases};

use super::{now_ms, StoreError};

/// Outcomes that interrupted a run from outside it: a preemption, or the pod's hosts or worker
/// lost. Their recovery is charged to the attempt, and they count as interruptions for the
/// pod type's MTBF. A hung or failed trainer is the run's own fault, not the pod's.
pub const INTERRUPTED: [&str; 2] = ["preempted", "lost"];

#[derive(sqlx::FromRow)]
pub(crate) struct AttemptClock {
    job_id: String,
    attempt: i64,
    pod: String,
    started_at: i64,
    running_at: Option<i64>,
    first_step_at: Option<i64>,
    ended_at: Option<i64>,
    outcome: Option<String>,
    trainer_phases_json: Option<String>,
    stopping_s: Option<f64>,
    pod_time_json: Option<String>,
    group_name: String,
    accelerator: String,
}

const ATTEMPT_CLOCK: &str = "SELECT a.job_id, a.attempt, a.pod, a.started_at, a.running_at, \
     a.first_step_at, a.ended_at, a.outcome, a.trainer_phases_json, a.stopping_s, \
     a.pod_time_json, j.group_name, j.accelerator FROM attempts a JOIN jobs j ON j.id = a.job_id";

impl AttemptClock {
    fn phases(&self) -> TrainerPhases {
        self.trainer_phases_json
            .as_deref()
            .and_then(|json| serde_json::from_str(json).ok())
            .unwrap_or_default()
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

/// The attempt's time from its lease to its end (or `now`), by cause:
///
/// ```text
/// lease ── setup ── launch ── startup (+ restore) ── first step ── training ── stop ── end
///                                                   productive + saves | wasted   stopping
/// ```
///
/// Training is kept up to the last committed checkpoint unless the attempt succeeded (or still
/// runs); the rest is wasted. The trainer's reported restore is taken out of the startup, and
/// its reported saves out of the kept training; a trainer without the SDK gets the same split
/// with both at zero.
pub(crate) fn split(a: &AttemptClock, last_kept_at: Option<i64>, now: i64) -> PodTime {
    let secs = |ms: i64| ms.max(0) as f64 / 1000.0;
    let end = a.ended_at.unwrap_or(now).max(a.started_at);
    let stopping_ms = ((a.stopping_s.unwrap_or(0.0).max(0.0) * 1000.0) as i64)
        .min(end - a.started_at)
        .max(0);
    let training_to = end - stopping_ms;
    let launched = a
        .running_at
        .unwrap_or(training_to)
        .clamp(a.started_at, training_to);
    let first_step = a
        .first_step_at
        .unwrap_or(training_to)
        .clamp(launched, training_to);
    let keeps_all = matches!(a.outcome.as_deref(), None | Some("succeeded"));
    let kept_until = if keeps_all {
        training_to
    } else {
        last_kept_at
            .unwrap_or(first_step)
            .clamp(first_step, training_to)
    };
    let phases = a.phases();
    let startup_window = secs(first_step - launched);
    let restore_s = phases.restore_s.clamp(0.0, startup_window);
    let kept_window = secs(kept_until - first_step);
    let save_s = phases.save_s.clamp(0.0, kept_window);
    let mut time = PodTime {
        setup_s: secs(launched - a.started_at),
        startup_s: startup_window - restore_s,
        restore_s,
        productive_s: kept_window - save_s,
        save_s,
        wasted_s: secs(training_to - kept_until),
        stopping_s: secs(stopping_ms),
        compile_s: phases.compile_s.clamp(0.0, startup_window - restore_s),
        ..PodTime::default()
    };
    time.finish();
    time
}

async fn last_kept_at(
    db: &mut Conn,
    job_id: &str,
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
async fn of_clock(conn: &mut Conn, clock: &AttemptClock, now: i64) -> Result<PodTime, StoreError> {
    if let Some(settled) = clock.settled()? {
        return Ok(settled);
    }
    let kept = last_kept_at(&mut *conn, &clock.job_id, clock.attempt).await?;
    Ok(split(clock, kept, now))
}

/// Keeps what the trainer reported so far on the attempt while it is open. Each figure only
/// grows: a worker that restarted counts again from zero, and must not erase what the one
/// before it reported (what it counts after the restart is lost up to the old figure).
pub async fn record_phases(
    conn: &mut Conn,
    lease_id: &str,
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
    let merged = TrainerPhases {
        compile_s: before.compile_s.max(phases.compile_s),
        restore_s: before.restore_s.max(phases.restore_s),
        save_s: before.save_s.max(phases.save_s),
        saves: before.saves.max(phases.saves),
    };
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
pub async fn settle_attempt(conn: &mut Conn, lease_id: &str) -> Result<(), StoreError> {
    let clock: AttemptClock = db::query_as(sqlx::AssertSqlSafe(format!(
        "{ATTEMPT_CLOCK} WHERE a.lease_id = ?"
    )))
    .bind(lease_id)
    .fetch_one(conn)
    .await?;
    if clock.pod_time_json.is_some() {
        return Ok(());
    }
    let kept = last_kept_at(&mut *conn, &clock.job_id, clock.attempt).await?;
    let time = split(&clock, kept, now_ms());
    db::query("UPDATE attempts SET pod_time_json = ? WHERE lease_id = ?")
        .bind(to_json(&time)?)
        .bind(lease_id)
        .execute(conn)
        .await?;
    let interrupted = INTERRUPTED.contains(&clock.outcome.as_deref().unwrap_or(""));
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
    let leases: Vec<String> = db::query_scalar(
        "SELECT lease_id FROM attempts WHERE ended_at IS NOT NULL AND pod_time_json IS NULL",
    )
    .fetch_all(conn)
    .await?;
    for lease in &leases {
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

/// What a pod is doing, for its ledger.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PodActivity {
    /// An attempt of it just ended; what follows is decided by the next report.
    Between,
    /// Its worker reports it is not READY and is recovering it.
    Recovering,
    /// Its worker asks for work.
    Ready,
    /// It holds a lease: the attempt accounts for the time.
    Leased,
}

impl PodActivity {
    fn as_str(self) -> &'static str {
        match self {
            PodActivity::Between => "between",
            PodActivity::Recovering => "recovering",
            PodActivity::Ready => "ready",
            PodActivity::Leased => "leased",
        }
    }
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
    // While leased the attempt accounts for the pod's time: only its end changes the ledger
    // (a report from a restarted worker before its stale lease ends must not count twice).
    if state.as_deref() == Some("leased")
        && matches!(activity, PodActivity::Ready | PodActivity::Recovering)
    {
        return Ok(());
    }
    // A recovery that follows an attempt directly is that attempt's; one after the pod was
    // ready again (preempted while idle) is the pod's alone.
    let mut after_attempt = false;
    if let (Some(state), Some(since)) = (state.as_deref(), since) {
        let elapsed = (at - since).max(0) as f64 / 1000.0;
        let recovering = match state {
            "recovering_after_attempt" => {
                after_attempt = true;
                Some(true)
            }
            "recovering" => Some(true),
            "ready" => Some(false),
            "between" => match activity {
                PodActivity::Recovering => {
                    after_attempt = true;
                    Some(true)
                }
                PodActivity::Ready | PodActivity::Leased => Some(false),
                PodActivity::Between => None,
            },
            _ => None,
        };
        match recovering {
            Some(true) => charge_recovery(conn, pod, elapsed, after_attempt).await?,
            Some(false) => {
                let idle = PodTime {
                    idle_s: elapsed,
                    ..PodTime::default()
                };
                for scope in ["all".to_owned(), format!("pod:{pod}")] {
                    add_to_totals(conn, &scope, &with_total(idle), 0.0, 0).await?;
                }
            }
            None => {}
        }
    }
    let state = match activity {
        PodActivity::Recovering if after_attempt => "recovering_after_attempt",
        other => other.as_str(),
    };
    db::query("UPDATE pods SET ledger_state = ?, ledger_since = ? WHERE name = ?")
        .bind(state)
        .bind(at)
        .bind(pod)
        .execute(conn)
        .await?;
    Ok(())
}

fn with_total(mut time: PodTime) -> PodTime {
    time.finish();
    time
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
    let last: Option<(String, Option<String>, Option<String>, String)> = db::query_as(
        "SELECT a.lease_id, a.outcome, a.pod_time_json, j.group_name FROM attempts a \
         JOIN jobs j ON j.id = a.job_id WHERE a.pod = ? ORDER BY a.started_at DESC LIMIT 1",
    )
    .bind(pod)
    .fetch_optional(conn)
    .await?;
    let Some((lease, Some(outcome), Some(json), group)) = last else {
        return Ok(());
    };
    if !INTERRUPTED.contains(&outcome.as_str()) {
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
pub async fn of_run(conn: &mut Conn, job_id: &str) -> Result<BTreeMap<i64, PodTime>, StoreError> {
    let clocks: Vec<AttemptClock> = db::query_as(sqlx::AssertSqlSafe(format!(
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
#[derive(Debug, Default)]
pub struct Totals {
    pub all: PodTime,
    pub pods: BTreeMap<String, PodTime>,
    pub groups: BTreeMap<String, PodTime>,
}

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
    let open: Vec<AttemptClock> = db::query_as(sqlx::AssertSqlSafe(format!(
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
        let time = with_total(match state.as_deref() {
            Some("recovering" | "recovering_after_attempt") => PodTime {
                provisioning_s: elapsed,
                ..PodTime::default()
            },
            Some("ready" | "between") => PodTime {
                idle_s: elapsed,
                ..PodTime::default()
            },
            _ => continue,
        });
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
pub async fn reported_save_cost(db: &mut Conn, job_id: &str) -> Result<Option<f64>, StoreError> {
    let reports: Vec<Option<String>> =
        db::query_scalar("SELECT trainer_phases_json FROM attempts WHERE job_id = ?")
            .bind(job_id)
            .fetch_all(db)
            .await?;
    let (mut seconds, mut saves) = (0.0, 0u64);
    for phases in reports
        .iter()
        .flatten()
        .filter_map(|json| serde_json::from_str::<TrainerPhases>(json).ok())
    {
        seconds += phases.save_s;
        saves += u64::from(phases.saves);
    }
    Ok((saves > 0).then(|| seconds / saves as f64))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn clock(outcome: Option<&str>, phases: Option<TrainerPhases>) -> AttemptClock {
        AttemptClock {
            job_id: "j".into(),
            attempt: 1,
            pod: "p".into(),
            started_at: 0,
            running_at: Some(5_000),
            first_step_at: Some(30_000),
            ended_at: Some(130_000),
            outcome: outcome.map(str::to_owned),
            trainer_phases_json: phases.map(|p| serde_json::to_string(&p).unwrap()),
            stopping_s: Some(10.0),
            pod_time_json: None,
            group_name: "g".into(),
            accelerator: "v4-64".into(),
        }
    }

    fn parts(t: &PodTime) -> [f64; 7] {
        [
            t.setup_s,
            t.startup_s,
            t.restore_s,
            t.productive_s,
            t.save_s,
            t.wasted_s,
            t.stopping_s,
        ]
    }

    #[test]
    fn a_preempted_attempt_wastes_what_it_trained_after_its_last_checkpoint() {
        let phases = TrainerPhases {
            compile_s: 12.0,
            restore_s: 4.0,
            save_s: 6.0,
            saves: 3,
        };
        let t = split(&clock(Some("preempted"), Some(phases)), Some(90_000), 0);
        // setup 5, startup 25 of which 4 restore, kept 30→90 of which 6 saving, wasted
        // 90→120, stopping 10: 130 s in all.
        assert_eq!(parts(&t), [5.0, 21.0, 4.0, 54.0, 6.0, 30.0, 10.0]);
        assert_eq!(t.compile_s, 12.0);
        assert_eq!(t.total_s, 130.0);
    }

    #[test]
    fn without_the_sdk_the_split_is_coarse_and_still_sums() {
        let t = split(&clock(Some("succeeded"), None), None, 0);
        assert_eq!(parts(&t), [5.0, 25.0, 0.0, 90.0, 0.0, 0.0, 10.0]);
        let t = split(&clock(Some("failed"), None), None, 0);
        assert_eq!(parts(&t), [5.0, 25.0, 0.0, 0.0, 0.0, 90.0, 10.0]);
        assert_eq!(t.total_s, 130.0);
    }

    #[test]
    fn an_open_attempt_is_split_up_to_now_and_odd_reports_cannot_break_the_sum() {
        let mut open = clock(None, None);
        open.ended_at = None;
        open.first_step_at = None;
        open.stopping_s = None;
        let t = split(&open, None, 20_000);
        assert_eq!(parts(&t), [5.0, 15.0, 0.0, 0.0, 0.0, 0.0, 0.0]);
        // Reports longer than the attempt are cut to the time there was.
        let huge = TrainerPhases {
            compile_s: 1e9,
            restore_s: 1e9,
            save_s: 1e9,
            saves: 1,
        };
        let mut odd = clock(Some("preempted"), Some(huge));
        odd.stopping_s = Some(1e9);
        let t = split(&odd, Some(10), 0);
        assert_eq!(t.total_s, 130.0);
        assert!(t.causes().iter().all(|(_, s)| *s >= 0.0));
    }
}
