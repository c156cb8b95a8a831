//! What a person does to a job: cancel it, requeue it, change its priority.

use crate::store::{events, Conn};
use futures::FutureExt;
use podq_api::{Job, JobState};
use uuid::Uuid;

use super::{IdempotencyKey, Result, Scheduler, SchedulerError};
use crate::store::jobs::{self, get_job};
use crate::store::JobRow;

async fn existing(conn: &mut Conn, id: &str) -> Result<JobRow> {
    get_job(&mut *conn, id)
        .await?
        .ok_or_else(|| SchedulerError::UnknownJob(id.to_owned()))
}

impl Scheduler {
    /// Cancels a job. A job on a pod keeps its lease until the worker has stopped every
    /// host: the next heartbeat tells it to stop.
    pub async fn cancel(&self, id: Uuid, key: Option<IdempotencyKey>) -> Result<Job> {
        let (job, lease) = self
            .idempotent_write(key, move |conn| {
                async move {
                    let (row, lease) = cancel(conn, &id.to_string()).await?;
                    Ok((row.into_api()?, lease))
                }
                .boxed()
            })
            .await?;
        if let Some(lease) = lease {
            self.live.flag_cancel(lease);
        }
        Ok(job)
    }

    /// Puts a failed, cancelled or held job back in the queue with a fresh failure budget.
    /// It resumes from its newest committed checkpoint.
    pub async fn requeue(&self, id: Uuid, key: Option<IdempotencyKey>) -> Result<Job> {
        let job = self
            .idempotent_write(key, move |conn| {
                async move { Ok(requeue(conn, &id.to_string()).await?.into_api()?) }.boxed()
            })
            .await?;
        if job.same_as.is_none() {
            self.waiters.leasable(&job.accelerator, 1);
        }
        Ok(job)
    }

    pub async fn set_priority(&self, id: Uuid, priority: i64) -> Result<Job> {
        self.store
            .write(move |conn| {
                async move {
                    let id = id.to_string();
                    let job = existing(conn, &id).await?;
                    jobs::set_priority(conn, &id, priority).await?;
                    events::insert_event(
                        conn,
                        Some(&id),
                        None,
                        "priority",
                        &format!("priority {} -> {priority}", job.priority),
                    )
                    .await?;
                    Ok(existing(conn, &id).await?.into_api()?)
                }
                .boxed()
            })
            .await
    }
}

async fn cancel(conn: &mut Conn, id: &str) -> Result<(JobRow, Option<Uuid>)> {
    let job = existing(conn, id).await?;
    let state = job.state()?;
    if state.is_terminal() {
        return Err(SchedulerError::wrong_state(
            id,
            state,
            "job_finished",
            format!("job {id} is already {state}; there is nothing to cancel"),
        ));
    }
    // A linked job only stops sharing the run; the run itself goes on for the others.
    let lease = jobs::cancel(conn, id).await?;
    let message = match (&job.same_as, &lease) {
        (Some(run), _) => format!("cancelled; stopped sharing the run of job {run}"),
        (None, Some(lease)) => format!("cancelled; the pod holding lease {lease} is told to stop"),
        (None, None) => "cancelled".to_owned(),
    };
    events::insert_event(conn, Some(id), None, "cancelled", &message).await?;
    Ok((existing(conn, id).await?, lease))
}

async fn requeue(conn: &mut Conn, id: &str) -> Result<JobRow> {
    let job = existing(conn, id).await?;
    let state = job.state()?;
    match state {
        JobState::Failed | JobState::Cancelled | JobState::Held => {}
        JobState::Succeeded => {
            return Err(SchedulerError::wrong_state(
                id,
                state,
                "job_succeeded",
                format!(
                "job {id} succeeded; to train it again submit its experiment with \"force\": true"
            ),
            ))
        }
        _ => {
            return Err(SchedulerError::wrong_state(
                id,
                state,
                "job_active",
                format!("job {id} is {state}; only failed, cancelled or held jobs can be requeued"),
            ))
        }
    }
    if jobs::live_lease(conn, id).await?.is_some() {
        return Err(SchedulerError::wrong_state(
            id,
            state,
            "job_stopping",
            format!("job {id} is still stopping on its pod; requeue it once the pod has let go"),
        ));
    }
    jobs::requeue(conn, id).await?;
    let from = job
        .resume_from
        .as_deref()
        .map(|r| format!("; it resumes from {r}"))
        .unwrap_or_default();
    events::insert_event(
        conn,
        Some(id),
        None,
        "requeued",
        &format!("requeued from {state}{from}"),
    )
    .await?;
    existing(conn, id).await
}
