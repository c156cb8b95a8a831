//! Cron submissions: a stored submission body that runs whenever its cron expression fires
//! (the dialect is `cron_dialect.rs`, the rows `store/schedules.rs`). Each run is an ordinary
//! submission, so deduplication applies: an experiment that already has a live or succeeded
//! job is skipped.

use std::sync::Arc;
use std::time::Duration;

use chrono::Utc;
use futures::FutureExt;
use podq_api::{Schedule, ScheduleRequest, SubmitRequest};
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use super::cron_dialect::{next_after, parse_cron};
use crate::scheduler::{submit, Result, Scheduler, SchedulerError};
use crate::store::events::{insert_event, Actor};
use crate::store::schedules::{self as stored, NewSchedule, ScheduleRow};
use crate::store::{now_ms, StoreError};

impl Scheduler {
    pub async fn create_schedule(&self, by: &Actor, req: ScheduleRequest) -> Result<Schedule> {
        parse_cron(&req.cron)?;
        submit::select(&self.catalog, &req.submit)?;
        self.class_of(&req.submit)?;
        let by = by.clone();
        if req.submit.dry_run {
            return Err(SchedulerError::invalid(
                "invalid_schedule",
                "a scheduled submission cannot be a dry run",
            ));
        }
        let id = Uuid::new_v4();
        let body = serde_json::to_string(&req.submit)
            .map_err(|e| StoreError::Corrupt(format!("schedule body: {e}")))?;
        let next = next_after(&req.cron, Utc::now());
        self.store
            .write(move |conn| {
                async move {
                    let new = NewSchedule {
                        id,
                        cron: &req.cron,
                        body_json: &body,
                        enabled: req.enabled,
                        next_run_at: next,
                    };
                    stored::insert(conn, &new).await?;
                    let message = format!("created schedule {id} ({}): {body}", req.cron);
                    insert_event(conn, &by, None, None, "schedule_created", &message).await?;
                    let row = stored::get(conn, id)
                        .await?
                        .ok_or(SchedulerError::UnknownSchedule(id))?;
                    Ok(row.into_api()?)
                }
                .boxed()
            })
            .await
    }

    pub async fn schedules(&self) -> Result<Vec<Schedule>> {
        let rows = stored::list(&mut self.store.read().await?).await?;
        Ok(rows
            .into_iter()
            .map(ScheduleRow::into_api)
            .collect::<Result<_, _>>()?)
    }

    pub async fn delete_schedule(&self, by: &Actor, id: Uuid) -> Result<()> {
        let by = by.clone();
        self.store
            .write(move |conn| {
                async move {
                    if !stored::delete(conn, id).await? {
                        return Err(SchedulerError::UnknownSchedule(id));
                    }
                    let message = format!("deleted schedule {id}");
                    insert_event(conn, &by, None, None, "schedule_deleted", &message).await?;
                    Ok(())
                }
                .boxed()
            })
            .await
    }

    /// Runs due schedules until `shutdown`. A schedule missed while the server was down
    /// runs once when it comes back, not once per missed firing.
    async fn due_schedules(&self) -> std::result::Result<Vec<ScheduleRow>, StoreError> {
        stored::due(&mut self.store.read().await?, now_ms()).await
    }

    pub async fn run_schedules(self: Arc<Self>, shutdown: CancellationToken) {
        let mut tick = tokio::time::interval(Duration::from_secs(5));
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = tick.tick() => {}
            }
            let due = match self.due_schedules().await {
                Ok(due) => due,
                Err(e) => {
                    tracing::error!(error = %e, "cannot read schedules");
                    continue;
                }
            };
            for schedule in due {
                if let Err(e) = self.fire(schedule).await {
                    tracing::error!(error = %e, "a scheduled submission failed");
                }
            }
        }
    }

    async fn fire(&self, schedule: ScheduleRow) -> Result<()> {
        let req: SubmitRequest = serde_json::from_str(&schedule.body_json)
            .map_err(|e| StoreError::Corrupt(format!("schedule {}: {e}", schedule.id)))?;
        // The catalog may have changed since the schedule was made: what it names no longer
        // exists is skipped, and said so, rather than failing every firing.
        let experiments: Vec<_> = match submit::select(&self.catalog, &req) {
            Ok(chosen) => chosen.into_iter().cloned().collect(),
            Err(e) => {
                tracing::warn!(schedule = %schedule.id, error = %e, "a schedule names nothing the catalog has");
                Vec::new()
            }
        };
        let next = next_after(&schedule.cron, Utc::now());
        let id = schedule.id.clone();
        // A class the suite no longer has falls back to its default, and says so.
        let class = self.class_of(&req).or_else(|e| {
            tracing::warn!(schedule = %schedule.id, error = %e, "the schedule's class is gone: submitting in the default class");
            self.class_of(&SubmitRequest::default())
        })?;
        let actor = Actor::schedule(&id);
        let answer = self
            .store
            .write(move |conn| {
                async move {
                    let answer = submit::submit(conn, &actor, &class, &experiments, &req).await?;
                    stored::fired(conn, &id, next).await?;
                    for job_id in answer.created.iter().filter_map(|job| job.job_id) {
                        insert_event(
                            conn,
                            &actor,
                            Some(job_id),
                            None,
                            "scheduled",
                            &format!("submitted by schedule {id}"),
                        )
                        .await?;
                    }
                    Ok::<_, SchedulerError>(answer)
                }
                .boxed()
            })
            .await?;
        self.wake_for(answer.created.iter().map(|c| c.experiment.as_str()));
        tracing::info!(schedule = %schedule.id, created = answer.created.len(), skipped = answer.skipped.len(), "schedule fired");
        Ok(())
    }
}
