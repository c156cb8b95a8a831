//! Pod time by cause, the model: how an attempt's time splits into causes, how a
//! pod's ledger charges the time between attempts, and the sums, with no database in it.
//! The SQL that feeds it and keeps its sums is `pod_time.rs`.
//!
//! The causes follow Google's ml-goodput-measurement (AI-Hypercomputer), which separates
//! badput into initialisation, program startup, checkpoint save and restore, and progress
//! wasted by disruptions.

use std::collections::BTreeMap;

use podq_api::{PodTime, TrainerPhases};

/// Outcomes that interrupted a run from outside it: a preemption, or the pod's hosts or worker
/// lost. Their recovery is charged to the attempt, and they count as interruptions for the
/// pod type's MTBF. A hung or failed trainer is the run's own fault, not the pod's.
pub const INTERRUPTED: [&str; 2] = ["preempted", "lost"];

/// Whether an attempt was interrupted from outside the run: ended `preempted` or `lost`, and
/// not stopped by podq itself (an eviction, a person's suspend: `cause`), which is no fault
/// of the pod's.
pub fn interrupted(outcome: Option<&str>, cause: Option<&str>) -> bool {
    cause.is_none() && INTERRUPTED.contains(&outcome.unwrap_or(""))
}

/// When an attempt reached each of its stages (ms since the epoch), how it ended, and what
/// its trainer reported.
#[derive(Debug, Clone, Default)]
pub struct AttemptClock {
    pub started_at: i64,
    pub running_at: Option<i64>,
    pub first_step_at: Option<i64>,
    pub ended_at: Option<i64>,
    pub outcome: Option<String>,
    pub phases: TrainerPhases,
    pub stopping_s: Option<f64>,
    /// Why podq stopped it beyond its outcome: `evicted`, `suspended`.
    pub cause: Option<String>,
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
pub fn split(a: &AttemptClock, last_kept_at: Option<i64>, now: i64) -> PodTime {
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
    let phases = a.phases;
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
    if a.cause.as_deref() == Some("evicted") {
        time.evicted_s = time.stopping_s + time.wasted_s;
        time.stopping_s = 0.0;
        time.wasted_s = 0.0;
    }
    time.finish();
    time
}

/// What the trainer reported so far, with a new report: each figure only grows. A worker
/// that restarted counts again from zero, and must not erase what the one before it reported
/// (what it counts after the restart is lost up to the old figure).
pub fn merge_phases(before: &TrainerPhases, now: &TrainerPhases) -> TrainerPhases {
    TrainerPhases {
        compile_s: before.compile_s.max(now.compile_s),
        restore_s: before.restore_s.max(now.restore_s),
        save_s: before.save_s.max(now.save_s),
        saves: before.saves.max(now.saves),
    }
}

/// The save cost the trainer reported over a run's attempts: its total blocking save time
/// over its saves, if it reported any.
pub fn save_cost<'a>(reports: impl IntoIterator<Item = &'a TrainerPhases>) -> Option<f64> {
    let (mut seconds, mut saves) = (0.0, 0u64);
    for phases in reports {
        seconds += phases.save_s;
        saves += u64::from(phases.saves);
    }
    (saves > 0).then(|| seconds / saves as f64)
}

pub fn with_total(mut time: PodTime) -> PodTime {
    time.finish();
    time
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
    /// Its pool gave it back: its time ends here, and nothing accrues after.
    Retired,
}

impl PodActivity {
    pub fn as_str(self) -> &'static str {
        match self {
            PodActivity::Between => "between",
            PodActivity::Recovering => "recovering",
            PodActivity::Ready => "ready",
            PodActivity::Leased => "leased",
            PodActivity::Retired => "retired",
        }
    }
}

/// What a pod's ledger charges the time since its last change to.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum LedgerCharge {
    /// A recovery: the pod's, and also the attempt's it follows directly, if `after_attempt`.
    Recovery {
        seconds: f64,
        after_attempt: bool,
    },
    Idle {
        seconds: f64,
    },
}

/// A change of a pod's ledger: what to charge, and the state it is in from then on.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LedgerStep {
    pub charge: Option<LedgerCharge>,
    pub state: &'static str,
}

/// The pod, in ledger `state` since `since`, is now `activity`, from `at`: charges the time
/// since its last change to recovery or idleness. The time right after an attempt goes to
/// whatever the pod turns out to be doing next: recovering (the attempt lost the pod) or not.
/// `None`: the ledger does not change.
pub fn ledger_step(
    state: Option<&str>,
    since: Option<i64>,
    activity: PodActivity,
    at: i64,
) -> Option<LedgerStep> {
    // A retired pod's time has ended: the end of a lease it still held, or a second
    // retirement, charges nothing and keeps it retired. Only its worker asking again brings
    // it back (and charges nothing for the time it was gone).
    if state == Some("retired") && !matches!(activity, PodActivity::Ready | PodActivity::Recovering)
    {
        return None;
    }
    // While leased the attempt accounts for the pod's time: only its end changes the ledger
    // (a report from a restarted worker before its stale lease ends must not count twice).
    if state == Some("leased") && matches!(activity, PodActivity::Ready | PodActivity::Recovering) {
        return None;
    }
    // A recovery that follows an attempt directly is that attempt's; one after the pod was
    // ready again (preempted while idle) is the pod's alone.
    let mut after_attempt = false;
    let mut charge = None;
    if let (Some(state), Some(since)) = (state, since) {
        let seconds = (at - since).max(0) as f64 / 1000.0;
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
                PodActivity::Ready | PodActivity::Leased | PodActivity::Retired => Some(false),
                PodActivity::Between => None,
            },
            _ => None,
        };
        charge = recovering.map(|recovering| {
            if recovering {
                LedgerCharge::Recovery {
                    seconds,
                    after_attempt,
                }
            } else {
                LedgerCharge::Idle { seconds }
            }
        });
    }
    let state = match activity {
        PodActivity::Recovering if after_attempt => "recovering_after_attempt",
        other => other.as_str(),
    };
    Some(LedgerStep { charge, state })
}

/// The time a pod has spent in its ledger `state` for `seconds` so far, while no attempt
/// accounts for it: recovery or idleness.
pub fn ledger_time(state: Option<&str>, seconds: f64) -> Option<PodTime> {
    Some(with_total(match state {
        Some("recovering" | "recovering_after_attempt") => PodTime {
            provisioning_s: seconds,
            ..PodTime::default()
        },
        Some("ready" | "between") => PodTime {
            idle_s: seconds,
            ..PodTime::default()
        },
        _ => return None,
    }))
}

/// Pod time for the grant, each pod and each group: the running sums, plus the attempts still
/// open and each pod's current recovery or idleness up to now.
#[derive(Debug, Default)]
pub struct Totals {
    pub all: PodTime,
    pub pods: BTreeMap<String, PodTime>,
    pub groups: BTreeMap<String, PodTime>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn clock(outcome: Option<&str>, phases: Option<TrainerPhases>) -> AttemptClock {
        AttemptClock {
            started_at: 0,
            running_at: Some(5_000),
            first_step_at: Some(30_000),
            ended_at: Some(130_000),
            outcome: outcome.map(str::to_owned),
            phases: phases.unwrap_or_default(),
            stopping_s: Some(10.0),
            cause: None,
        }
    }

    #[test]
    fn an_evicted_attempts_stop_and_lost_training_are_charged_to_the_eviction() {
        let preempted = split(&clock(Some("preempted"), None), Some(100_000), 130_000);
        let evicted = split(
            &AttemptClock {
                cause: Some("evicted".into()),
                ..clock(Some("preempted"), None)
            },
            Some(100_000),
            130_000,
        );
        assert_eq!(evicted.evicted_s, preempted.stopping_s + preempted.wasted_s);
        assert_eq!((evicted.stopping_s, evicted.wasted_s), (0.0, 0.0));
        assert_eq!(evicted.total_s, preempted.total_s);
        assert!(interrupted(Some("preempted"), None));
        assert!(
            !interrupted(Some("preempted"), Some("evicted")),
            "podq's own stop"
        );
        assert!(!interrupted(Some("failed"), None));
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

    #[test]
    fn a_retired_pod_charges_nothing_after_it_went() {
        // Idle from 0 until its pool gave it back at 10 s.
        let step = ledger_step(Some("ready"), Some(0), PodActivity::Retired, 10_000).unwrap();
        assert!(
            matches!(step.charge, Some(LedgerCharge::Idle { seconds }) if seconds == 10.0),
            "{:?}",
            step.charge
        );
        assert_eq!(step.state, "retired");
        // The lease it still held ends later: nothing, and it stays retired.
        assert!(ledger_step(Some("retired"), Some(10_000), PodActivity::Between, 90_000).is_none());
        assert!(ledger_step(Some("retired"), Some(10_000), PodActivity::Leased, 90_000).is_none());
        assert!(ledger_time(Some("retired"), 80.0).is_none());
        // Its worker asks again: it is back, charged nothing for its absence.
        let back = ledger_step(Some("retired"), Some(10_000), PodActivity::Ready, 90_000).unwrap();
        assert!(back.charge.is_none());
        assert_eq!(back.state, "ready");
    }
}
