//! The end of a lease: the attempt's outcome recorded and the retry policy applied, whether
//! its worker finished it or the server ended it (a reaped lease, an eviction).

use futures::FutureExt;
use podq_api::{AttemptOutcome, FinishRequest, FinishResponse, JobState};
use podq_api::{JobId, LeaseId};

use super::authority::worker_for;
use super::policy::{self, AttemptProgress, JobBudget, StopRequest};
use super::rung_judge;
use crate::scheduler::plan::forecast;
use crate::scheduler::{Result, Scheduler, SchedulerError};
use crate::store::events::{insert_event, Actor};
use crate::store::leases::{self as sql, AttemptEnd, JobAfter};
use crate::store::rungs as rung_store;
use crate::store::{now_ms, stop_rules, Conn, StoreError};
use crate::team::Acting;

const MAX_LOG_TAIL: usize = 16 * 1024;

impl Scheduler {
    /// Ends the attempt and applies the retry policy. Repeating a finish that was already
    /// applied answers the same and changes nothing.
    pub async fn finish(
        &self,
        lease_id: LeaseId,
        req: FinishRequest,
        acting: &Acting,
    ) -> Result<FinishResponse> {
        let stopping_valid = req.stopping_s.is_none_or(|s| s.is_finite() && s >= 0.0);
        if !stopping_valid || req.phases.as_ref().is_some_and(|p| !p.is_valid()) {
            return Err(SchedulerError::invalid(
                "invalid_phases",
                "phases and stopping_s: times must be finite and 0 or more",
            ));
        }
        let knows_stopped = req.knows_stopped;
        // Bounded and escaped as a worker's event is: it goes onto the timeline.
        let req = FinishRequest {
            message: req.message.as_deref().map(podq_api::bounded_event_message),
            ..req
        };
        let mut answer = self
            .end_lease(lease_id, req, Caused::Worker(acting.clone()))
            .await?;
        if answer.job_state == JobState::Stopped && !knows_stopped {
            answer.job_state = JobState::Held;
        }
        Ok(answer)
    }

    /// Ends the attempt of `lease_id` as `req` says: reported by its worker (whose token
    /// must be allowed the lease's pod), or ended by podq or a person (`Caused::By`).
    pub(in crate::scheduler) async fn end_lease(
        &self,
        lease_id: LeaseId,
        req: FinishRequest,
        caused: Caused,
    ) -> Result<FinishResponse> {
        let config = self.config.clone();
        let (catalog, keeps) = (self.catalog.clone(), self.auto_keeps.clone());
        let jitter: f64 = rand::random();
        let (answer, requeued, ended) = self
            .store
            .write(move |conn| {
                async move {
                    let Some(holder) = sql::holder(conn, lease_id).await? else {
                        let answer = already_finished(conn, lease_id, req.outcome, &caused).await?;
                        return Ok((answer, None, None));
                    };
                    let end_step = holder.end_step.or(req.end_step);
                    let progressed = policy::progressed(AttemptProgress {
                        new_checkpoint: holder.new_checkpoint,
                        start_step: holder.start_step,
                        first_step: holder.first_step,
                        end_step,
                        resume_step: holder.resume_step,
                    });
                    let decision = policy::decide(
                        req.outcome,
                        JobBudget {
                            failures: holder.failures,
                            max_failures: holder.max_failures,
                            stalled_attempts: holder.stalled_attempts,
                            cancel_requested: holder.cancel_requested,
                            stop_request: holder
                                .stop_request
                                .as_deref()
                                .and_then(StopRequest::parse),
                        },
                        progressed,
                        config.backoff_base,
                        config.backoff_cap,
                        jitter,
                    );
                    let not_before = decision
                        .backoff
                        .map(|b| now_ms() + i64::try_from(b.as_millis()).unwrap_or(i64::MAX / 2));
                    let log_tail = tail(req.log_tail.as_deref().unwrap_or_default());
                    let exit_codes_json = serde_json::to_string(&req.exit_codes)
                        .map_err(|e| StoreError::Corrupt(format!("exit codes: {e}")))?;
                    let pod = holder.lease_pod.as_deref();
                    let actor = match &caused {
                        Caused::By(actor) => actor.clone(),
                        Caused::Worker(acting) => worker_for(acting, pod.unwrap_or("?"))?,
                    };
                    let detail = req
                        .message
                        .as_deref()
                        .map(|m| format!(": {m}"))
                        .unwrap_or_default();
                    let next = match (decision.state, decision.backoff) {
                        (JobState::Queued, Some(b)) => format!("; retry in {}s", b.as_secs()),
                        (JobState::Queued, None) => "; requeued".to_owned(),
                        (state, _) => format!("; job {state}"),
                    };
                    // A stop the server asked for ends with the server's reason, whatever the
                    // worker saw (a worker older than the `stop` order stops it as a cancel).
                    let requested = holder
                        .stop_request
                        .as_deref()
                        .and_then(StopRequest::parse)
                        .filter(|stop| {
                            !holder.cancel_requested && policy::ends_the_stop(*stop, req.outcome)
                        });
                    let cause = requested.map(StopRequest::as_str);
                    let detail = match (requested, &holder.stop_message) {
                        (Some(_), Some(why)) => format!(": {why}"),
                        _ => detail,
                    };
                    let next = match requested {
                        Some(StopRequest::Evicted) => {
                            "; requeued at the head of its class".to_owned()
                        }
                        Some(StopRequest::Suspended) => "; held until `podq resume`".to_owned(),
                        Some(StopRequest::Paused) => {
                            "; held at its rung until its siblings' values promote or prune it"
                                .to_owned()
                        }
                        Some(StopRequest::Ruled) => {
                            "; job stopped (not charged; `podq requeue --ignore-stop-rules` runs it on)"
                                .to_owned()
                        }
                        None => next,
                    };
                    let summary =
                        format!("attempt {} {}{detail}{next}", holder.attempts, req.outcome);
                    // The job's message says why its last attempt ended, so a list of jobs
                    // shows the reason next to the state; the policy's verdict wins. A
                    // cancelled job keeps the message that names who cancelled it.
                    let job_message = match &decision.message {
                        Some(verdict) => Some(verdict.clone()),
                        None if holder.cancel_requested => None,
                        None => Some(summary.clone()),
                    };
                    sql::end_attempt(
                        conn,
                        lease_id,
                        holder.id,
                        &AttemptEnd {
                            outcome: req.outcome.as_str(),
                            start_step: req.start_step,
                            end_step: req.end_step,
                            exit_codes_json,
                            log_tail,
                            message: req.message.as_deref(),
                            phases: req.phases,
                            stopping_s: req.stopping_s,
                            cause,
                        },
                        &JobAfter {
                            state: decision.state,
                            failures: decision.failures,
                            stalled_attempts: decision.stalled_attempts,
                            preemption: decision.preemption,
                            not_before,
                            verify_checkpoints: req.outcome == AttemptOutcome::Lost,
                            message: job_message.as_deref(),
                            queue_head: requested == Some(StopRequest::Evicted),
                        },
                    )
                    .await?;
                    let job = Some(holder.id);
                    insert_event(conn, &actor, job, pod, req.outcome.as_str(), &summary).await?;
                    if requested != Some(StopRequest::Ruled)
                        && holder.stop_request.as_deref() == Some(StopRequest::Ruled.as_str())
                    {
                        // The run finished, or a person cancelled it, before the rule's stop
                        // ended it: the verdict did not stand.
                        stop_rules::reset(conn, holder.id, false).await?;
                    }
                    if decision.state == JobState::Stopped {
                        let saved = stopped_early_saves(conn, holder.id).await?;
                        stop_rules::record_saved(conn, holder.id, saved).await?;
                        let why = holder.stop_message.as_deref().unwrap_or("stopped by a rule");
                        let message = format!("{why}; saved about {saved:.1} pod-hours");
                        insert_event(conn, &Actor::podq(), job, pod, "stopped", &message).await?;
                    }
                    if let Some(message) = &decision.message {
                        if matches!(decision.state, JobState::Held | JobState::Failed) {
                            insert_event(
                                conn,
                                &Actor::podq(),
                                Some(holder.id),
                                None,
                                decision.state.as_str(),
                                message,
                            )
                            .await?;
                        }
                    }
                    // A run paused at its rung whose siblings decided while it stopped goes
                    // on, or ends pruned, now that it has let go of its pod.
                    let mut job_state = decision.state;
                    if requested == Some(StopRequest::Paused) && job_state == JobState::Held {
                        let group = rung_store::group_of(conn, holder.id).await?;
                        let metric = group
                            .and_then(|g| catalog.group(&g)?.rungs.as_ref())
                            .map_or("its metric", |r| r.metric.as_str());
                        if let Some(settled) =
                            rung_judge::settle_paused(conn, metric, holder.id).await?
                        {
                            job_state = settled;
                        }
                    }
                    if job_state.is_terminal() {
                        // A run that trains no further closes the rungs it held open, in its
                        // group and in those of the jobs linked to it.
                        for group in rung_store::groups_of_run(conn, holder.id).await? {
                            rung_judge::decide_group(conn, &catalog, &keeps, &group, None)
                                .await?;
                        }
                    }
                    let requeued =
                        (job_state == JobState::Queued).then_some((holder.id, not_before));
                    Ok::<_, SchedulerError>((
                        FinishResponse { job_state },
                        requeued,
                        Some((req.outcome, decision.preemption)),
                    ))
                }
                .boxed()
            })
            .await?;
        self.live.remove(lease_id);
        if let Some((outcome, preemption)) = ended {
            let label = crate::telemetry::OutcomeLabel {
                outcome: outcome.as_str().to_owned(),
            };
            self.telemetry.attempt_outcomes.get_or_create(&label).inc();
            if preemption {
                self.telemetry.preemptions.inc();
            }
        }
        if let Some((job, at)) = requeued {
            self.wake_for_job(job, at).await;
        }
        Ok(answer)
    }
}

/// A `lost` finish with `message`, as the server itself ends a lease.
pub(in crate::scheduler) fn lost(message: impl Into<String>) -> FinishRequest {
    FinishRequest {
        outcome: AttemptOutcome::Lost,
        exit_codes: Vec::new(),
        start_step: None,
        end_step: None,
        log_tail: None,
        message: Some(message.into()),
        phases: None,
        stopping_s: None,
        knows_stopped: true,
    }
}

/// The last `MAX_LOG_TAIL` bytes of a log, cut at a character boundary.
fn tail(log: &str) -> &str {
    let cut = log.len().saturating_sub(MAX_LOG_TAIL);
    let cut = (cut..log.len())
        .find(|i| log.is_char_boundary(*i))
        .unwrap_or(log.len());
    &log[cut..]
}

/// A finish for a lease that is no longer live: the same finish repeated is answered as
/// before; anything else is a worker that lost its lease.
async fn already_finished(
    conn: &mut crate::store::Conn,
    lease_id: LeaseId,
    outcome: AttemptOutcome,
    caused: &Caused,
) -> Result<FinishResponse> {
    let Some(ended) = sql::ended_attempt(conn, lease_id).await? else {
        return Err(SchedulerError::LeaseLost(lease_id));
    };
    if let Caused::Worker(acting) = caused {
        // Another pod's token learns nothing of this lease, not even that it ended.
        worker_for(acting, &ended.pod)?;
    }
    match ended.outcome {
        Some(recorded) if recorded == outcome.as_str() => Ok(FinishResponse {
            job_state: ended.job_state,
        }),
        _ => Err(SchedulerError::LeaseLost(lease_id)),
    }
}

/// Who ends a lease.
#[derive(Clone)]
pub(in crate::scheduler) enum Caused {
    /// The worker holding it, in a request: its token must be allowed the lease's pod.
    Worker(Acting),
    /// podq itself (the reaper, an eviction) or a person (a cancel), as the audit names it.
    By(Actor),
}

/// The pod-hours a run a rule stopped would still have taken: the plan's time to go for it
/// as it stood when it stopped (at its measured rate when there is one).
async fn stopped_early_saves(conn: &mut Conn, job_id: JobId) -> Result<f64> {
    let job = crate::store::views::plan_job(conn, job_id).await?;
    Ok(job.map_or(0.0, |job| forecast::time_to_go(&job, now_ms()).1))
}

#[cfg(test)]
mod tests {
    use super::tail;

    #[test]
    fn a_log_tail_is_cut_at_a_character_boundary() {
        let log = "é".repeat(super::MAX_LOG_TAIL);
        let cut = tail(&log);
        assert!(cut.len() <= super::MAX_LOG_TAIL);
        assert!(cut.chars().all(|c| c == 'é'));
        assert_eq!(tail("short"), "short");
    }
}
