//! A tick's decisions, as pure functions of what the pool holds and what the server answered:
//! how many creates to start, and what becomes of each slice it holds. `run.rs` gathers the
//! facts, asks, and carries the answers out (the cloud calls, the journal, the events).

use std::time::Duration;

use chrono::{DateTime, Utc};
use podq_api::SlicePod;

use super::cloud::SliceState;

/// What decides how many slices to start making now.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Growth {
    /// What the server says the queue could use: jobs routed to the pool's type that no
    /// pod will serve, plus the slices this pool is making.
    pub demand: u32,
    /// Spares the server says to keep that are not ready and idle now
    /// ([`spare_shortfall`]): made beyond the demand.
    pub spares: u32,
    /// The pool's slices not yet serving: creates in flight, slices `CREATING`, and slices
    /// up whose worker the server has not heard from.
    pub booting: u32,
    /// Slices that hold or will hold capacity (creates in flight included).
    pub alive: u32,
    /// Creates asked for whose answer has not come back.
    pub in_flight: u32,
    pub max_slices: u32,
    pub max_creating: u32,
    /// The grant's pod-hours for the pool's type are spent.
    pub grant_spent: bool,
}

/// Creates to start now: what the queue wants beyond what is being made, within
/// `max_slices`, within `max_creating` creates in flight, and none once the grant is spent.
/// The project-wide create rate and the zones' own limits are applied as each is started.
pub fn creates_to_start(g: &Growth) -> u32 {
    if g.grant_spent {
        return 0;
    }
    g.demand
        .saturating_add(g.spares)
        .saturating_sub(g.booting)
        .min(g.max_slices.saturating_sub(g.alive))
        .min(g.max_creating.saturating_sub(g.in_flight))
}

/// The spares still to make: those to keep (`PoolAnswer::spares`) less the slices ready and
/// idle now. A spare being made counts among the booting slices `creates_to_start` takes off.
pub fn spare_shortfall(keep: u32, idle_ready: u32) -> u32 {
    keep.saturating_sub(idle_ready)
}

/// Why a slice is given back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Going {
    Preempted,
    /// Failed preflight `quarantine_after` times; the last failure's words.
    Quarantined(String),
    /// READY for `boot_deadline` and its worker never called.
    Silent,
    Idle,
}

impl Going {
    pub fn as_str(&self) -> &'static str {
        match self {
            Going::Preempted => "preempted",
            Going::Quarantined(_) => "quarantined",
            Going::Silent => "silent",
            Going::Idle => "idle",
        }
    }
}

/// What the pool has observed of one slice it holds.
#[derive(Debug, Clone, PartialEq)]
pub struct SliceFacts {
    pub state: SliceState,
    /// How long ago it was found preempted, if it was.
    pub preempted_for: Option<Duration>,
    /// Distinct preflights that failed.
    pub failed_preflights: usize,
    /// The server has heard from its worker, now or before.
    pub ever_seen: bool,
    /// How long it has been READY.
    pub ready_for: Option<Duration>,
    /// Since when it has held no lease while up and serving.
    pub idle_since: Option<DateTime<Utc>>,
}

/// The limits a slice's fate is judged by.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Limits {
    /// A preempted slice still leased waits this long for its worker to end the attempt.
    pub preempted_grace: Duration,
    pub quarantine_after: usize,
    pub boot_deadline: Duration,
    /// `None`: kept however long it idles.
    pub idle_after: Option<Duration>,
}

/// Whether the slice goes now, and why; `pod` is what the server knows of it.
pub fn fate(
    slice: &SliceFacts,
    pod: &SlicePod,
    limits: &Limits,
    now: DateTime<Utc>,
) -> Option<Going> {
    if let Some(preempted_for) = slice.preempted_for {
        return (!pod.leased || preempted_for >= limits.preempted_grace)
            .then_some(Going::Preempted);
    }
    if slice.failed_preflights >= limits.quarantine_after && !pod.leased {
        if let Some(preflight) = pod.preflight.as_ref().filter(|p| !p.passed) {
            let why = preflight
                .failures
                .first()
                .map(|f| f.message.clone())
                .unwrap_or_default();
            return Some(Going::Quarantined(why));
        }
    }
    if !slice.ever_seen
        && slice
            .ready_for
            .is_some_and(|ready| ready >= limits.boot_deadline)
    {
        return Some(Going::Silent);
    }
    let idle_for = slice.idle_since.map(|since| now - since);
    match (idle_for, limits.idle_after) {
        (Some(idle), Some(after))
            if idle >= chrono::Duration::from_std(after).unwrap_or_default() =>
        {
            Some(Going::Idle)
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use podq_api::{Preflight, PreflightFailure};

    #[test]
    fn creates_follow_the_demand_within_every_bound() {
        let base = Growth {
            demand: 4,
            spares: 0,
            booting: 0,
            alive: 0,
            in_flight: 0,
            max_slices: 4,
            max_creating: 4,
            grant_spent: false,
        };
        let cases: Vec<(&str, Growth, u32)> = vec![
            ("four jobs, room for four: four at once", base, 4),
            (
                "what is being made serves part of the demand",
                Growth {
                    booting: 3,
                    alive: 3,
                    in_flight: 3,
                    ..base
                },
                1,
            ),
            (
                "no more than max_slices",
                Growth {
                    demand: 9,
                    booting: 1,
                    alive: 3,
                    in_flight: 0,
                    ..base
                },
                1,
            ),
            (
                "no more than max_creating in flight",
                Growth {
                    max_creating: 2,
                    ..base
                },
                2,
            ),
            (
                "in flight count against max_creating",
                Growth {
                    demand: 4,
                    booting: 1,
                    alive: 1,
                    in_flight: 1,
                    max_creating: 2,
                    ..base
                },
                1,
            ),
            (
                "the grant is spent",
                Growth {
                    grant_spent: true,
                    ..base
                },
                0,
            ),
            ("no demand", Growth { demand: 0, ..base }, 0),
            (
                "a spare short, nothing queued: one more",
                Growth {
                    demand: 0,
                    spares: 1,
                    alive: 1,
                    ..base
                },
                1,
            ),
            (
                "a spare short and being made already",
                Growth {
                    demand: 0,
                    spares: 1,
                    booting: 1,
                    alive: 2,
                    in_flight: 1,
                    ..base
                },
                0,
            ),
            (
                "a job and a spare: both, within max_slices",
                Growth {
                    demand: 1,
                    spares: 1,
                    alive: 3,
                    ..base
                },
                1,
            ),
            (
                "more being made than wanted",
                Growth {
                    demand: 1,
                    booting: 2,
                    alive: 2,
                    in_flight: 2,
                    ..base
                },
                0,
            ),
        ];
        for (case, growth, want) in cases {
            assert_eq!(creates_to_start(&growth), want, "{case}");
        }
    }

    #[test]
    fn the_spares_to_make_are_those_not_ready_and_idle() {
        assert_eq!(spare_shortfall(0, 0), 0);
        assert_eq!(spare_shortfall(1, 0), 1);
        assert_eq!(spare_shortfall(1, 1), 0);
        assert_eq!(spare_shortfall(2, 3), 0);
    }

    fn pod(leased: bool, preflight_failed: bool) -> SlicePod {
        SlicePod {
            pod: "p-1".into(),
            leased,
            seen_at: None,
            preflight: preflight_failed.then(|| Preflight {
                passed: false,
                at: None,
                failures: vec![PreflightFailure {
                    check: "tpu".into(),
                    host: Some(1),
                    message: "no TPU devices".into(),
                }],
            }),
        }
    }

    #[test]
    fn each_slice_goes_for_its_reason_and_no_sooner() {
        let now = Utc::now();
        let limits = Limits {
            preempted_grace: Duration::from_secs(20),
            quarantine_after: 2,
            boot_deadline: Duration::from_secs(600),
            idle_after: Some(Duration::from_secs(60)),
        };
        let up = SliceFacts {
            state: SliceState::Ready,
            preempted_for: None,
            failed_preflights: 0,
            ever_seen: true,
            ready_for: Some(Duration::from_secs(30)),
            idle_since: None,
        };
        let idle_for = |s: i64| Some(now - chrono::Duration::seconds(s));
        let cases: Vec<(&str, SliceFacts, SlicePod, Option<Going>)> = vec![
            ("up and leased: stays", up.clone(), pod(true, false), None),
            (
                "preempted, its worker done: goes",
                SliceFacts {
                    preempted_for: Some(Duration::from_secs(1)),
                    ..up.clone()
                },
                pod(false, false),
                Some(Going::Preempted),
            ),
            (
                "preempted, still leased within the grace: waits",
                SliceFacts {
                    preempted_for: Some(Duration::from_secs(1)),
                    ..up.clone()
                },
                pod(true, false),
                None,
            ),
            (
                "preempted, still leased past the grace: goes",
                SliceFacts {
                    preempted_for: Some(Duration::from_secs(25)),
                    ..up.clone()
                },
                pod(true, false),
                Some(Going::Preempted),
            ),
            (
                "failed preflight twice, unleased: quarantined",
                SliceFacts {
                    failed_preflights: 2,
                    ..up.clone()
                },
                pod(false, true),
                Some(Going::Quarantined("no TPU devices".into())),
            ),
            (
                "failed preflight once: another chance",
                SliceFacts {
                    failed_preflights: 1,
                    ..up.clone()
                },
                pod(false, true),
                None,
            ),
            (
                "READY past the boot deadline, never heard from: silent",
                SliceFacts {
                    ever_seen: false,
                    ready_for: Some(Duration::from_secs(601)),
                    ..up.clone()
                },
                pod(false, false),
                Some(Going::Silent),
            ),
            (
                "idle past idle_after: goes",
                SliceFacts {
                    idle_since: idle_for(61),
                    ..up.clone()
                },
                pod(false, false),
                Some(Going::Idle),
            ),
            (
                "idle, not yet long enough: stays",
                SliceFacts {
                    idle_since: idle_for(59),
                    ..up.clone()
                },
                pod(false, false),
                None,
            ),
        ];
        for (case, facts, pod, want) in cases {
            assert_eq!(fate(&facts, &pod, &limits, now), want, "{case}");
        }
        let keep_forever = Limits {
            idle_after: None,
            ..limits
        };
        let long_idle = SliceFacts {
            idle_since: idle_for(86_400),
            ..up
        };
        assert_eq!(
            fate(&long_idle, &pod(false, false), &keep_forever, now),
            None
        );
    }
}
