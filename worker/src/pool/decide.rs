//! A tick's decision, as a pure function of what the pool holds and what the server answered:
//! what becomes of each slice it holds (how many creates to start is the server's answer,
//! `PoolAnswer::creates`). `run.rs` gathers the facts, asks, and carries the answers out
//! through the slice's life (`slice_life.rs`).

use std::time::Duration;

use chrono::{DateTime, Utc};
use podq_api::SlicePod;

use super::cloud::SliceState;

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
