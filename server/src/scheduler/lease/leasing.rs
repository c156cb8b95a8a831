//! The lease protocol (docs/architecture.md §3.2): handing whole-pod jobs to workers and hearing from
//! them. Every call after the lease names it and is fenced: a lease that is no longer the
//! job's live one gets `LeaseLost`.

use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use futures::FutureExt;
use podq_api::{
    AttemptOutcome, CheckpointsBatch, FinishRequest, FinishResponse, HeartbeatRequest,
    HeartbeatResponse, JobState, Lease, LeasePhase, LeaseRequest, MetricsAck, MetricsBatch,
    PodReport, WorkerEvent, WorkerEvents, WORKER_EVENT_KINDS,
};
use uuid::Uuid;

use super::authority::worker_for;
use super::policy::{self, AttemptProgress, JobBudget, StopRequest};
use crate::scheduler::plan::forecast;
use crate::scheduler::{LiveLease, Result, Scheduler, SchedulerError};
use crate::store::events::{insert_event, Actor};
use crate::store::leases::{self as sql, AttemptEnd, JobAfter};
use crate::store::{checkpoints, now_ms, parse_uuid, pods, stop_rules, Conn, StoreError};
use crate::team::Acting;

const MAX_WAIT: Duration = Duration::from_secs(60);
const DEFAULT_WAIT: Duration = Duration::from_secs(20);
const MAX_LOG_TAIL: usize = 16 * 1024;

/// The job and attempt a lease holds, as its fence found them inside the write.
pub(in crate::scheduler) struct Fenced {
    pub job_id: String,
    pub attempt: i64,
}

impl Scheduler {
    /// The live lease `lease_id`, or `LeaseLost`: the cheap check in memory every worker
    /// call makes before it touches the store.
    pub(in crate::scheduler) fn live_lease(&self, lease_id: Uuid) -> Result<LiveLease> {
        self.live
            .get(lease_id)
            .ok_or(SchedulerError::LeaseLost(lease_id))
    }

    /// A write on behalf of the worker holding `lease_id`, in one transaction with its
    /// fence: unless the lease is still its job's live one in the database, nothing is
    /// written and the caller gets `LeaseLost`.
    pub(in crate::scheduler) async fn write_fenced<T, F>(&self, lease_id: Uuid, op: F) -> Result<T>
    where
        T: Send + 'static,
        F: for<'c> FnOnce(&'c mut Conn, Fenced) -> BoxFuture<'c, Result<T>> + Send + 'static,
    {
        self.store
            .write(move |conn| {
                async move {
                    let (job_id, attempt) = sql::fence(conn, lease_id)
                        .await?
                        .ok_or(SchedulerError::LeaseLost(lease_id))?;
                    op(conn, Fenced { job_id, attempt }).await
                }
                .boxed()
            })
            .await
    }

    /// Waits up to `wait_s` for a job and leases it to `pod`. A waiting call is woken only
    /// when a job for its accelerator becomes leasable; while it waits it reads nothing and
    /// writes nothing (its "last seen" is kept in memory).
    pub async fn lease(
        &self,
        pod: &str,
        req: LeaseRequest,
        acting: &Acting,
    ) -> Result<Option<Lease>> {
        let worker = worker_for(acting, pod)?;
        let wait = req
            .wait_s
            .map(Duration::from_secs)
            .unwrap_or(DEFAULT_WAIT)
            .min(MAX_WAIT);
        let deadline = tokio::time::Instant::now() + wait;
        // A pod runs one job at a time: a pod asking for work while holding a lease has lost
        // track of it (its worker restarted). End that attempt so the job can run again.
        for stale in self.live.of_pod(pod) {
            let message =
                "the pod asked for a new lease while holding this one: its worker restarted";
            match self
                .end_lease(stale, lost(message), Caused::By(worker.clone()))
                .await
            {
                Ok(_) | Err(SchedulerError::LeaseLost(_)) => {}
                Err(e) => return Err(e),
            }
        }
        self.note_pod(pod, &req.pod).await?;
        if !req.pod.preflight.as_ref().is_none_or(|p| p.passed) {
            // A pod that failed preflight gets no job; it asks again after the wait.
            tokio::time::sleep_until(deadline).await;
            return Ok(None);
        }
        let wake = self.waiters.of(&req.pod.accelerator);
        loop {
            // Registered before the check, so a job that turns up between the check and the
            // wait still wakes this call.
            let woken = wake.notified();
            tokio::pin!(woken);
            woken.as_mut().enable();
            if sql::any_leasable(&mut self.store.read().await?, &req.pod.accelerator).await? {
                if let Some(lease) = self.claim(pod, &req, &worker).await? {
                    return Ok(Some(lease));
                }
            }
            tokio::select! {
                _ = &mut woken => {}
                _ = tokio::time::sleep_until(deadline) => return Ok(None),
            }
        }
    }

    /// Writes the pod's description when it changed; otherwise only notes it was seen.
    async fn note_pod(&self, pod: &str, desc: &podq_api::PodDescription) -> Result<()> {
        if !self.live.pod_seen(pod, desc) {
            return Ok(());
        }
        let (name, description) = (pod.to_owned(), desc.clone());
        self.store
            .write(move |conn| async move { pods::upsert(conn, &name, &description).await }.boxed())
            .await?;
        self.live.pod_recorded(pod, desc);
        Ok(())
    }

    async fn claim(&self, pod: &str, req: &LeaseRequest, worker: &Actor) -> Result<Option<Lease>> {
        let lease_id = Uuid::new_v4();
        let (pod_name, accelerator) = (pod.to_owned(), req.pod.accelerator.clone());
        let worker = worker.clone();
        let claimed = self
            .store
            .write(move |conn| {
                async move { sql::claim(conn, lease_id, &pod_name, &accelerator, &worker).await }
                    .boxed()
            })
            .await?;
        let Some(claimed) = claimed else {
            return Ok(None);
        };
        self.telemetry.leases_granted.inc();
        // Live before anything else can fail or be dropped: the claim is committed, and a
        // lease the server does not track would hold the pod until a restart.
        self.live.insert(
            lease_id,
            LiveLease {
                job_id: claimed.id.clone(),
                pod: pod.to_owned(),
                attempt: claimed.attempts,
                expires_at: Instant::now() + self.live.ttl,
                cancel: false,
                stop: None,
                running: false,
                running_recorded: false,
                step: claimed.resume_step,
            },
        );
        // A failed read loses the advice, never the lease.
        let checkpoint_interval_steps = self
            .interval_for_attempt(&claimed.id, &claimed.experiment)
            .await
            .unwrap_or_else(|e| {
                tracing::warn!(job = %claimed.id, error = %e, "no checkpoint interval for this attempt");
                None
            });
        let lease = Lease {
            lease_id,
            job_id: parse_uuid(&claimed.id)?,
            attempt: claimed.attempts,
            config: serde_json::from_str(&claimed.config_json).map_err(|e| {
                StoreError::Corrupt(format!("the config of job {}: {e}", claimed.id))
            })?,
            experiment: claimed.experiment,
            group: claimed.group_name,
            config_sha256: claimed.config_sha256,
            checkpoint_dir: claimed.checkpoint_dir,
            resume_from: claimed.resume_from,
            resume_step: claimed.resume_step,
            fallback_checkpoints: claimed.fallback_checkpoints,
            checkpoint_interval_steps,
            lease_ttl_s: self.config.lease_ttl.as_secs(),
            heartbeat_s: self.config.heartbeat.as_secs().max(1),
        };
        Ok(Some(lease))
    }

    /// Records what a pod's worker says about it, and an event if it brings one.
    pub async fn report_pod(&self, pod: &str, report: PodReport, acting: &Acting) -> Result<()> {
        let worker = worker_for(acting, pod)?;
        let event = report.event.as_ref().map(checked_event).transpose()?;
        let (name, description) = (pod.to_owned(), report.pod.clone());
        self.store
            .write(move |conn| {
                async move {
                    record_pod(conn, &name, &report.pod, &worker).await?;
                    if let Some(event) = &event {
                        insert_event(
                            conn,
                            &worker,
                            None,
                            Some(&name),
                            &event.kind,
                            &event.message,
                        )
                        .await?;
                    }
                    Ok::<_, SchedulerError>(())
                }
                .boxed()
            })
            .await?;
        self.live.pod_recorded(pod, &description);
        Ok(())
    }

    /// Extends the lease; answers whether to stop. Memory only: see `live.rs`.
    pub fn heartbeat(
        &self,
        lease_id: Uuid,
        req: HeartbeatRequest,
        acting: &Acting,
    ) -> Result<HeartbeatResponse> {
        self.held_lease(lease_id, acting)?;
        let (cancel, stop) = {
            let mut leases = self.live.lock();
            let entry = leases
                .get_mut(&lease_id)
                .ok_or(SchedulerError::LeaseLost(lease_id))?;
            entry.expires_at = Instant::now() + self.live.ttl;
            entry.running |= req.phase == LeasePhase::Running;
            if req.step.is_some() {
                entry.step = req.step;
            }
            (entry.cancel, entry.stop.clone())
        };
        Ok(HeartbeatResponse {
            lease_expires_at: chrono::Utc::now()
                + chrono::Duration::from_std(self.live.ttl).unwrap_or_default(),
            // A worker from before issue 27 knows no `stop`: it stops as for a cancel, and
            // its `cancelled` finish ends the requested stop all the same (policy.rs).
            cancel: cancel || stop.is_some(),
            stop: stop.map(|reason| podq_api::StopOrder { reason }),
        })
    }

    /// Stores a metrics batch; a step reported again replaces its value. Judges the run on
    /// it (judge.rs): a rule that fires asks the worker to stop, in this answer and in the
    /// next heartbeat's. Answers how many values were accepted.
    pub async fn record_metrics(
        &self,
        lease_id: Uuid,
        batch: MetricsBatch,
        acting: &Acting,
    ) -> Result<MetricsAck> {
        let pod = self.held_lease(lease_id, acting)?.0.pod;
        if batch.phases.as_ref().is_some_and(|p| !p.is_valid()) {
            return Err(SchedulerError::invalid(
                "invalid_phases",
                "phases: times must be finite and 0 or more",
            ));
        }
        let accepted: usize = batch.points.iter().map(|p| p.values.len()).sum();
        let stored = accepted as u64;
        let max_step = batch.points.iter().map(|p| p.step).max();
        let report = super::reports::MetricsReport {
            lease_id,
            pod,
            batch,
        };
        let stop = self.metrics_reports.submit(&self.store, report).await?;
        if let Some(why) = &stop {
            self.live.flag_stop(lease_id, why.clone());
        }
        // A batch sent again after its answer was lost still carries the stop asked before.
        let stop = stop.or_else(|| self.live.get(lease_id).and_then(|live| live.stop));
        if let Some(step) = max_step {
            self.live.advance(lease_id, step);
            if let Some(live) = self.live.get(lease_id) {
                // No subscriber is not an error: nobody is watching.
                let _ = self.progress.send(crate::scheduler::Progress {
                    job_id: parse_uuid(&live.job_id)?,
                    step,
                });
            }
        }
        // Counted once the step is visible, so a scrape that sees the points sees the step.
        self.telemetry.metric_points.inc_by(stored);
        Ok(MetricsAck {
            accepted,
            stop: stop.map(|reason| podq_api::StopOrder { reason }),
        })
    }

    /// Records what the worker found in the checkpoint store. The newest committed
    /// checkpoint becomes where the next attempt resumes.
    pub async fn record_checkpoints(
        &self,
        lease_id: Uuid,
        batch: CheckpointsBatch,
        acting: &Acting,
    ) -> Result<()> {
        let (_, worker) = self.held_lease(lease_id, acting)?;
        self.write_fenced(lease_id, move |conn, fenced| {
            async move {
                let job = &fenced.job_id;
                checkpoints::record(conn, &worker, job, fenced.attempt, &batch.checkpoints).await?;
                Ok(())
            }
            .boxed()
        })
        .await
    }

    /// Things the worker saw, onto the job's timeline.
    pub async fn record_worker_events(
        &self,
        lease_id: Uuid,
        events: WorkerEvents,
        acting: &Acting,
    ) -> Result<()> {
        let (live, worker) = self.held_lease(lease_id, acting)?;
        let pod = live.pod;
        let events: Vec<WorkerEvent> = events
            .events
            .iter()
            .map(checked_event)
            .collect::<Result<_>>()?;
        self.write_fenced(lease_id, move |conn, fenced| {
            async move {
                let job = Some(fenced.job_id.as_str());
                for event in &events {
                    insert_event(conn, &worker, job, Some(&pod), &event.kind, &event.message)
                        .await?;
                }
                Ok(())
            }
            .boxed()
        })
        .await
    }

    /// Ends the attempt and applies the retry policy. Repeating a finish that was already
    /// applied answers the same and changes nothing.
    pub async fn finish(
        &self,
        lease_id: Uuid,
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
        lease_id: Uuid,
        req: FinishRequest,
        caused: Caused,
    ) -> Result<FinishResponse> {
        let config = self.config.clone();
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
                    // worker saw (a worker from before issue 27 stops it as a cancel).
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
                        &holder.id,
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
                            state: decision.state.as_str(),
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
                    let job = Some(holder.id.as_str());
                    insert_event(conn, &actor, job, pod, req.outcome.as_str(), &summary).await?;
                    if requested != Some(StopRequest::Ruled)
                        && holder.stop_request.as_deref() == Some(StopRequest::Ruled.as_str())
                    {
                        // The run finished, or a person cancelled it, before the rule's stop
                        // ended it: the verdict did not stand.
                        stop_rules::reset(conn, &holder.id, false).await?;
                    }
                    if decision.state == JobState::Stopped {
                        let saved = stopped_early_saves(conn, &holder.id).await?;
                        stop_rules::record_saved(conn, &holder.id, saved).await?;
                        let why = holder.stop_message.as_deref().unwrap_or("stopped by a rule");
                        let message = format!("{why}; saved about {saved:.1} pod-hours");
                        insert_event(conn, &Actor::podq(), job, pod, "stopped", &message).await?;
                    }
                    if let Some(message) = &decision.message {
                        if matches!(decision.state, JobState::Held | JobState::Failed) {
                            insert_event(
                                conn,
                                &Actor::podq(),
                                Some(&holder.id),
                                None,
                                decision.state.as_str(),
                                message,
                            )
                            .await?;
                        }
                    }
                    let requeued = (decision.state == JobState::Queued)
                        .then(|| (holder.accelerator.clone(), not_before));
                    Ok::<_, SchedulerError>((
                        FinishResponse {
                            job_state: decision.state,
                        },
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
        match requeued {
            Some((accelerator, Some(at))) => self.waiters.leasable_at(&accelerator, at),
            Some((accelerator, None)) => self.waiters.leasable(&accelerator, 1),
            None => {}
        }
        Ok(answer)
    }
}

/// A worker's event as it may be stored: a kind of the worker's own, a bounded message
/// with its control characters escaped; an unknown kind is 422.
fn checked_event(event: &WorkerEvent) -> Result<WorkerEvent> {
    if !WORKER_EVENT_KINDS.contains(&event.kind.as_str()) {
        let shown = podq_api::escape_controls(&event.kind);
        let shown: String = shown.chars().take(64).collect();
        return Err(SchedulerError::unprocessable(
            "unknown_event_kind",
            format!(
                "a worker cannot report an event of kind `{shown}`: its kinds are {}",
                WORKER_EVENT_KINDS.join(", ")
            ),
        ));
    }
    Ok(WorkerEvent {
        kind: event.kind.clone(),
        message: podq_api::bounded_event_message(&event.message),
    })
}

/// Writes a pod's description, and an event when its state or health changed.
async fn record_pod(
    conn: &mut crate::store::Conn,
    pod: &str,
    desc: &podq_api::PodDescription,
    worker: &Actor,
) -> Result<()> {
    let before = pods::upsert(conn, pod, desc).await?;
    if let Some((state, health)) = before {
        if state != desc.state || health != desc.health {
            insert_event(
                conn,
                worker,
                None,
                Some(pod),
                "pod_state",
                &format!(
                    "pod {pod}: {state}/{health} -> {}/{}",
                    desc.state, desc.health
                ),
            )
            .await?;
        }
    }
    Ok(())
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
    lease_id: Uuid,
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
            job_state: ended.job_state.parse().map_err(StoreError::Corrupt)?,
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
async fn stopped_early_saves(conn: &mut Conn, job_id: &str) -> Result<f64> {
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
