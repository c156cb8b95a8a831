//! What a worker tells of its attempt under the lease: metrics (judged by the stop rules),
//! the checkpoints it found, and the events it saw.

use futures::FutureExt;
use podq_api::{
    CheckpointReport, CheckpointsBatch, EventKind, LeaseId, MetricsAck, MetricsBatch, WorkerEvent,
    WorkerEvents,
};

use crate::scheduler::{Result, Scheduler, SchedulerError};
use crate::store::checkpoints;
use crate::store::events::insert_event;
use crate::team::Acting;

impl Scheduler {
    /// Stores a metrics batch; a step reported again replaces its value. Judges the run on
    /// it (judge.rs): a rule that fires asks the worker to stop, in this answer and in the
    /// next heartbeat's. Answers how many values were accepted.
    pub async fn record_metrics(
        &self,
        lease_id: LeaseId,
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
                    job_id: live.job_id,
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
        lease_id: LeaseId,
        batch: CheckpointsBatch,
        acting: &Acting,
    ) -> Result<()> {
        let (_, worker) = self.held_lease(lease_id, acting)?;
        self.write_fenced(lease_id, move |conn, fenced| {
            async move {
                let job = &fenced.job_id;
                let dir = checkpoints::dir_of(conn, *job).await?;
                for report in &batch.checkpoints {
                    check_checkpoint(&dir, report)?;
                }
                checkpoints::record(conn, &worker, *job, fenced.attempt, &batch.checkpoints)
                    .await?;
                Ok(())
            }
            .boxed()
        })
        .await
    }

    /// Things the worker saw, onto the job's timeline.
    pub async fn record_worker_events(
        &self,
        lease_id: LeaseId,
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
                let job = Some(fenced.job_id);
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
}

/// Refuses a checkpoint that is not a step directory directly in the job's own
/// `checkpoint_dir`, plainly named and of the step reported: it may become where the next
/// attempt resumes, which a trainer's command names (422 `invalid_checkpoint_uri`).
fn check_checkpoint(dir: &str, report: &CheckpointReport) -> Result<()> {
    let invalid = |why: String| {
        let shown: String = podq_api::escape_controls(&report.uri)
            .chars()
            .take(300)
            .collect();
        Err(SchedulerError::unprocessable(
            "invalid_checkpoint_uri",
            format!("checkpoint `{shown}` (step {}): {why}", report.step),
        ))
    };
    match podq_api::orbax::step_dir_in(dir, &report.uri) {
        Err(why) => invalid(why.to_string()),
        Ok(found) if found.step != report.step => invalid(format!(
            "its directory `{}` is step {}",
            found.name, found.step
        )),
        Ok(found) if report.committed && !found.committed_name => {
            invalid("a save in progress is not committed".to_owned())
        }
        Ok(_) => Ok(()),
    }
}

/// A worker's event as it may be stored: a kind of the worker's own, a bounded message
/// with its control characters escaped; an unknown kind is 422.
pub(super) fn checked_event(event: &WorkerEvent) -> Result<WorkerEvent> {
    checked_as::<podq_api::WorkerEventKind>(event, "a worker")
}

/// `event` as it may be stored from `sender`, whose kinds are `K`'s: an unknown kind is 422.
pub(in crate::scheduler) fn checked_as<K: EventKind>(
    event: &WorkerEvent,
    sender: &str,
) -> Result<WorkerEvent> {
    if K::named(&event.kind).is_none() {
        let shown = podq_api::escape_controls(&event.kind);
        let shown: String = shown.chars().take(64).collect();
        return Err(SchedulerError::unprocessable(
            "unknown_event_kind",
            format!(
                "{sender} cannot report an event of kind `{shown}`: its kinds are {}",
                K::names()
            ),
        ));
    }
    Ok(WorkerEvent {
        kind: event.kind.clone(),
        message: podq_api::bounded_event_message(&event.message),
    })
}
