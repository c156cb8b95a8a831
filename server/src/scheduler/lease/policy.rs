//! The retry policy as data: what an attempt's outcome does to its job.

use std::time::Duration;

use podq_api::{AttemptOutcome, JobState};

/// What the job looked like when the attempt ended.
#[derive(Debug, Clone, Copy)]
pub struct JobBudget {
    pub failures: i64,
    pub max_failures: i64,
    pub stalled_attempts: i64,
    pub cancel_requested: bool,
    /// The server asked the worker to stop the attempt for this.
    pub stop_request: Option<StopRequest>,
}

/// Why the server stopped a running attempt that had done nothing wrong.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopRequest {
    /// Another job of a class that may evict this one's takes the pod: requeued at the head
    /// of its class, uncharged.
    Evicted,
    /// A person's pause (`podq suspend`): held until `podq resume`, uncharged.
    Suspended,
    /// A stop rule or the divergence guard judged the run lost (judge.rs): `stopped`,
    /// uncharged and not retried.
    Ruled,
    /// Its rung paused it (rung_judge.rs): held, uncharged, until its siblings' values
    /// promote or prune it.
    Paused,
}

impl StopRequest {
    pub fn as_str(self) -> &'static str {
        match self {
            StopRequest::Evicted => "evicted",
            StopRequest::Suspended => "suspended",
            StopRequest::Ruled => "ruled",
            StopRequest::Paused => "paused",
        }
    }

    pub fn parse(text: &str) -> Option<StopRequest> {
        match text {
            "evicted" => Some(StopRequest::Evicted),
            "suspended" => Some(StopRequest::Suspended),
            "ruled" => Some(StopRequest::Ruled),
            "paused" => Some(StopRequest::Paused),
            _ => None,
        }
    }
}

/// Attempts in a row without progress after which a person must look.
pub const MAX_STALLED_ATTEMPTS: i64 = 3;

#[derive(Debug, Clone, PartialEq)]
pub struct Decision {
    pub state: JobState,
    pub failures: i64,
    pub stalled_attempts: i64,
    pub preemption: bool,
    /// Wait this long before the job may be leased again.
    pub backoff: Option<Duration>,
    pub message: Option<String>,
}

/// Exponential backoff with full jitter in the upper half: `base * 2^(n-1)`, capped, then
/// scaled by a factor in [0.5, 1.0] so retries of many jobs do not line up.
pub fn backoff(failures: i64, base: Duration, cap: Duration, jitter: f64) -> Duration {
    let exponent = u32::try_from(failures.saturating_sub(1).clamp(0, 30)).unwrap_or(30);
    let raw = podq_api::backoff::exponential(base, exponent, cap);
    raw.mul_f64(0.5 + 0.5 * jitter.clamp(0.0, 1.0))
}

/// What an attempt achieved, for the judgement of whether it made progress.
#[derive(Debug, Clone, Copy, Default)]
pub struct AttemptProgress {
    /// The attempt committed a checkpoint.
    pub new_checkpoint: bool,
    /// The step it started from (the resume point), if known.
    pub start_step: Option<i64>,
    /// The first step it reported, if any.
    pub first_step: Option<i64>,
    /// The last step it reported, if any.
    pub end_step: Option<i64>,
    /// Where the job resumes now.
    pub resume_step: Option<i64>,
}

/// An attempt progressed if it committed a checkpoint or trained past where it started.
pub fn progressed(p: AttemptProgress) -> bool {
    p.new_checkpoint
        || match (p.end_step, p.first_step.or(p.start_step)) {
            (Some(end), Some(start)) => end > start,
            (Some(end), None) => end > p.resume_step.unwrap_or(0),
            _ => false,
        }
}

/// Whether an attempt that ended so ended the stop the server asked for (rather than
/// crashing or finishing on the way out).
pub fn ends_a_requested_stop(outcome: AttemptOutcome) -> bool {
    matches!(
        outcome,
        AttemptOutcome::Preempted | AttemptOutcome::Lost | AttemptOutcome::Cancelled
    )
}

/// Whether an attempt that ended so ended the stop `stop`. A run a rule judged lost is
/// stopped however its trainer ended (one that raises on a NaN loss exits non-zero), unless it
/// finished first.
pub fn ends_the_stop(stop: StopRequest, outcome: AttemptOutcome) -> bool {
    match stop {
        // A run judged lost, or paused at its rung, is held to that however its trainer
        // ends on the way out: a paused run requeued after a crash would train past the rung
        // its siblings are still deciding.
        StopRequest::Ruled | StopRequest::Paused => outcome != AttemptOutcome::Succeeded,
        StopRequest::Evicted | StopRequest::Suspended => ends_a_requested_stop(outcome),
    }
}

pub fn decide(
    outcome: AttemptOutcome,
    budget: JobBudget,
    progressed: bool,
    base: Duration,
    cap: Duration,
    jitter: f64,
) -> Decision {
    let stalled = if progressed || outcome == AttemptOutcome::Succeeded {
        0
    } else {
        budget.stalled_attempts + 1
    };
    let mut decision = Decision {
        state: JobState::Queued,
        failures: budget.failures,
        stalled_attempts: stalled,
        preemption: false,
        backoff: None,
        message: None,
    };
    // The job's message already names who cancelled it.
    if budget.cancel_requested && outcome != AttemptOutcome::Succeeded {
        decision.state = JobState::Cancelled;
        return decision;
    }
    // A stop the server asked for costs the job nothing, however the worker saw it end: the
    // trainer saved on the way out. A crash on the way out is still a failure.
    if let Some(stop) = budget.stop_request.filter(|s| ends_the_stop(*s, outcome)) {
        decision.stalled_attempts = budget.stalled_attempts;
        decision.state = match stop {
            StopRequest::Evicted => JobState::Queued,
            StopRequest::Suspended | StopRequest::Paused => JobState::Held,
            StopRequest::Ruled => JobState::Stopped,
        };
        return decision;
    }
    match outcome {
        AttemptOutcome::Succeeded => decision.state = JobState::Succeeded,
        AttemptOutcome::Cancelled => {
            decision.state = JobState::Cancelled;
            decision.message = Some("cancelled on the worker".into());
        }
        AttemptOutcome::Preempted | AttemptOutcome::Lost => decision.preemption = true,
        AttemptOutcome::Failed | AttemptOutcome::Hung => {
            decision.failures += 1;
            if decision.failures >= budget.max_failures {
                decision.state = JobState::Failed;
                decision.message = Some(format!(
                    "{outcome} {} times: the failure budget of {} is spent",
                    decision.failures, budget.max_failures
                ));
                return decision;
            }
            decision.backoff = Some(backoff(decision.failures, base, cap, jitter));
        }
    }
    if decision.state == JobState::Queued && stalled >= MAX_STALLED_ATTEMPTS {
        decision.state = JobState::Held;
        decision.message = Some(format!(
            "{stalled} attempts in a row ended with no step progress and no new checkpoint: \
             held so it does not burn the pod; requeue it once the cause is fixed"
        ));
        decision.backoff = None;
    }
    decision
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIN: Duration = Duration::from_secs(60);
    const CAP: Duration = Duration::from_secs(1800);

    fn budget(failures: i64, stalled: i64) -> JobBudget {
        JobBudget {
            failures,
            max_failures: 3,
            stalled_attempts: stalled,
            cancel_requested: false,
            stop_request: None,
        }
    }

    #[test]
    fn a_stop_the_server_asked_for_is_uncharged() {
        use AttemptOutcome::*;
        let asked = |stop| JobBudget {
            stop_request: Some(stop),
            ..budget(1, 2)
        };
        for outcome in [Preempted, Lost, Cancelled] {
            let evicted = decide(outcome, asked(StopRequest::Evicted), false, MIN, CAP, 0.5);
            assert_eq!(
                (
                    evicted.state,
                    evicted.failures,
                    evicted.stalled_attempts,
                    evicted.preemption
                ),
                (JobState::Queued, 1, 2, false),
                "{outcome}"
            );
            assert!(evicted.backoff.is_none() && evicted.message.is_none());
            let suspended = decide(outcome, asked(StopRequest::Suspended), false, MIN, CAP, 0.5);
            assert_eq!(suspended.state, JobState::Held, "{outcome}");
        }
        for outcome in [Preempted, Lost, Cancelled, Failed, Hung] {
            let ruled = decide(outcome, asked(StopRequest::Ruled), false, MIN, CAP, 0.5);
            assert_eq!(
                (ruled.state, ruled.failures),
                (JobState::Stopped, 1),
                "{outcome}"
            );
        }
        let finished = decide(Succeeded, asked(StopRequest::Ruled), true, MIN, CAP, 0.5);
        assert_eq!(finished.state, JobState::Succeeded);
        let crashed = decide(Failed, asked(StopRequest::Evicted), false, MIN, CAP, 0.5);
        assert_eq!(
            crashed.failures, 2,
            "a crash on the way out is still charged"
        );
        let done = decide(Succeeded, asked(StopRequest::Evicted), true, MIN, CAP, 0.5);
        assert_eq!(done.state, JobState::Succeeded);
    }

    #[test]
    fn preemptions_never_spend_the_budget() {
        for _ in 0..10 {
            let d = decide(AttemptOutcome::Preempted, budget(2, 0), true, MIN, CAP, 0.5);
            assert_eq!(d.state, JobState::Queued);
            assert_eq!(d.failures, 2);
            assert!(d.preemption && d.backoff.is_none());
        }
    }

    #[test]
    fn failures_back_off_then_fail() {
        let first = decide(AttemptOutcome::Failed, budget(0, 0), true, MIN, CAP, 1.0);
        assert_eq!(
            (first.state, first.failures, first.backoff),
            (JobState::Queued, 1, Some(MIN))
        );
        let second = decide(AttemptOutcome::Hung, budget(1, 0), true, MIN, CAP, 1.0);
        assert_eq!(second.backoff, Some(2 * MIN));
        let third = decide(AttemptOutcome::Failed, budget(2, 0), true, MIN, CAP, 1.0);
        assert_eq!(third.state, JobState::Failed);
    }

    #[test]
    fn backoff_is_capped_and_jittered() {
        assert_eq!(backoff(20, MIN, CAP, 1.0), CAP);
        assert_eq!(backoff(1, MIN, CAP, 0.0), MIN / 2);
    }

    #[test]
    fn progress_is_a_checkpoint_or_steps_past_the_start() {
        let at = |first, end| AttemptProgress {
            first_step: first,
            end_step: end,
            ..AttemptProgress::default()
        };
        assert!(progressed(at(Some(10), Some(20))));
        assert!(
            !progressed(at(Some(20), Some(20))),
            "one step reported twice"
        );
        assert!(!progressed(at(None, None)), "nothing reported");
        assert!(progressed(AttemptProgress {
            new_checkpoint: true,
            ..at(None, None)
        }));
        let resumed = AttemptProgress {
            end_step: Some(100),
            resume_step: Some(100),
            ..AttemptProgress::default()
        };
        assert!(!progressed(resumed), "no further than the resume point");
    }

    #[test]
    fn three_attempts_without_progress_hold_the_job() {
        let d = decide(
            AttemptOutcome::Preempted,
            budget(0, 2),
            false,
            MIN,
            CAP,
            0.5,
        );
        assert_eq!(d.state, JobState::Held);
        let d = decide(AttemptOutcome::Preempted, budget(0, 2), true, MIN, CAP, 0.5);
        assert_eq!((d.state, d.stalled_attempts), (JobState::Queued, 0));
    }
}
