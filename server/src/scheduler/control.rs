//! What a person does to a job: cancel it, requeue it, change its priority or class, suspend
//! and resume it. A submitter may do these to the jobs they submitted, an admin to any.

use crate::store::events;
use crate::store::{jobs, stop_rules, Conn, JobRow};
use crate::team::Acting;
use futures::FutureExt;
use podq_api::{Job, JobState};
use podq_api::{JobId, LeaseId};

use super::lease::policy::StopRequest;
use super::lease::rung_judge;
use super::{IdempotencyKey, Result, Scheduler, SchedulerError};
use crate::store::jobs::get_job;

async fn existing(conn: &mut Conn, id: JobId) -> Result<JobRow> {
    get_job(&mut *conn, id)
        .await?
        .ok_or_else(|| SchedulerError::UnknownJob(id))
}

/// The job, if `acting` may `verb` it: a submitter only their own.
async fn owned(conn: &mut Conn, acting: &Acting, id: JobId, verb: &str) -> Result<JobRow> {
    let job = existing(conn, id).await?;
    acting
        .may_act_on(id, job.submitted_by.as_deref(), verb)
        .map_err(|message| SchedulerError::forbidden("not_owner", message))?;
    Ok(job)
}

/// A change to a job's priority or class (`PATCH /jobs/{id}`).
#[derive(Debug, Clone, Default)]
pub struct JobChange {
    pub priority: Option<i64>,
    pub class: Option<String>,
}

impl Scheduler {
    /// Cancels a job. A job on a pod keeps its lease until the worker has stopped every
    /// host: the next heartbeat tells it to stop.
    pub async fn cancel(
        &self,
        acting: &Acting,
        id: JobId,
        key: Option<IdempotencyKey>,
    ) -> Result<Job> {
        let acting = acting.clone();
        let (catalog, keeps) = (self.catalog.clone(), self.auto_keeps.clone());
        let (job, lease) = self
            .idempotent_write(key, move |conn| {
                async move {
                    let (row, lease) = cancel(conn, &acting, id).await?;
                    // A cancelled run leaves its group's count at every rung: a rung it
                    // held open may close.
                    rung_judge::decide_group(conn, &catalog, &keeps, &row.group_name, None).await?;
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

    /// Puts a failed, cancelled, held or stopped job back in the queue with a fresh failure
    /// budget; `ignore_stop_rules` lifts a stopped job's rules for good.
    /// It resumes from its newest committed checkpoint.
    pub async fn requeue(
        &self,
        acting: &Acting,
        id: JobId,
        ignore_stop_rules: bool,
        key: Option<IdempotencyKey>,
    ) -> Result<Job> {
        let acting = acting.clone();
        let job = self
            .idempotent_write(key, move |conn| {
                async move {
                    let row = requeue(conn, &acting, id, ignore_stop_rules).await?;
                    // A run paused at a rung and put back in the queue by a person goes on.
                    rung_judge::promoted_by_hand(conn, id, &acting.caller.name).await?;
                    Ok(row.into_api()?)
                }
                .boxed()
            })
            .await?;
        if job.same_as.is_none() {
            self.wake_for_job(job.id, None).await;
        }
        Ok(job)
    }

    /// Changes a job's priority, its class, or both. A class may be changed while the job
    /// runs: it decides what the job may evict and what may evict it from then on.
    pub async fn change_job(&self, acting: &Acting, id: JobId, change: JobChange) -> Result<Job> {
        let class = change
            .class
            .as_deref()
            .map(|name| {
                let (rank, class) = self.resolve_class(Some(name))?;
                Ok::<_, SchedulerError>((class.name.clone(), rank))
            })
            .transpose()?;
        if let Some((name, _)) = &class {
            self.check_class_allowed(acting, name)?;
        }
        self.check_priority(acting, change.priority)?;
        let acting = acting.clone();
        let job = self
            .store
            .write(move |conn| {
                async move {
                    let job = owned(conn, &acting, id, "reprioritise").await?;
                    if let Some(priority) = change.priority.filter(|p| *p != job.priority) {
                        jobs::set_priority(conn, id, priority).await?;
                        let message = format!("priority {} -> {priority}", job.priority);
                        events::insert_event(
                            conn,
                            &acting.actor,
                            Some(id),
                            None,
                            "priority",
                            &message,
                        )
                        .await?;
                    }
                    if let Some((class, rank)) = class.filter(|(c, _)| *c != job.priority_class) {
                        jobs::set_class(conn, id, &class, rank).await?;
                        let message = format!("class {} -> {class}", job.priority_class);
                        events::insert_event(
                            conn,
                            &acting.actor,
                            Some(id),
                            None,
                            "class",
                            &message,
                        )
                        .await?;
                    }
                    Ok::<_, SchedulerError>(existing(conn, id).await?.into_api()?)
                }
                .boxed()
            })
            .await?;
        self.wake_for_job(job.id, None).await;
        Ok(job)
    }

    /// A person's pause. A queued job is held at once; a job on a pod is stopped with its
    /// full grace (the trainer saves), uncharged, and then held. `resume` undoes it.
    pub async fn suspend(&self, acting: &Acting, id: JobId) -> Result<Job> {
        let acting = acting.clone();
        let (job, lease) = self
            .store
            .write(move |conn| {
                async move {
                    let job = owned(conn, &acting, id, "suspend").await?;
                    let state = job.state;
                    let why = format!("suspended by {}", acting.caller.name);
                    let lease = match state {
                        JobState::Queued if job.same_as.is_none() => {
                            jobs::hold(conn, id, &why).await?;
                            None
                        }
                        JobState::Leased | JobState::Running if job.same_as.is_none() => {
                            let lease = jobs::live_lease(conn, id).await?;
                            jobs::request_stop(conn, id, StopRequest::Suspended.as_str(), &why)
                                .await?;
                            lease
                        }
                        _ => {
                            return Err(SchedulerError::wrong_state(
                                id,
                                state,
                                "not_suspendable",
                                format!(
                                    "job {id} is {state}{}; only a queued or running job can be suspended",
                                    if job.same_as.is_some() { " and shares another job's run" } else { "" }
                                ),
                            ))
                        }
                    };
                    let message = match lease {
                        Some(_) => format!("{why}; its pod saves and stops it"),
                        None => why.clone(),
                    };
                    events::insert_event(conn, &acting.actor, Some(id), None, "suspended", &message)
                        .await?;
                    Ok((existing(conn, id).await?.into_api()?, lease.map(|l| (l, why))))
                }
                .boxed()
            })
            .await?;
        if let Some((lease, why)) = lease {
            self.live.flag_stop(lease, why);
        }
        Ok(job)
    }

    /// Puts a held job back in the queue with its failure budget as it was.
    pub async fn resume(&self, acting: &Acting, id: JobId) -> Result<Job> {
        let acting = acting.clone();
        let job = self
            .store
            .write(move |conn| {
                async move {
                    let job = owned(conn, &acting, id, "resume").await?;
                    let state = job.state;
                    if state != JobState::Held || job.same_as.is_some() {
                        return Err(SchedulerError::wrong_state(
                            id,
                            state,
                            "not_held",
                            format!(
                                "job {id} is {state}{}; only a held (suspended) job can be resumed",
                                if job.same_as.is_some() { " as the run it shares is" } else { "" }
                            ),
                        ));
                    }
                    if jobs::live_lease(conn, id).await?.is_some() {
                        return Err(SchedulerError::wrong_state(
                            id,
                            state,
                            "job_stopping",
                            format!("job {id} is still stopping on its pod; resume it once the pod has let go"),
                        ));
                    }
                    rung_judge::promoted_by_hand(conn, id, &acting.caller.name).await?;
                    jobs::resume(conn, id).await?;
                    events::insert_event(conn, &acting.actor, Some(id), None, "resumed", "resumed")
                        .await?;
                    Ok(existing(conn, id).await?.into_api()?)
                }
                .boxed()
            })
            .await?;
        self.wake_for_job(job.id, None).await;
        Ok(job)
    }
}

async fn cancel(conn: &mut Conn, acting: &Acting, id: JobId) -> Result<(JobRow, Option<LeaseId>)> {
    let job = owned(conn, acting, id, "cancel").await?;
    let state = job.state;
    if state.is_terminal() {
        return Err(SchedulerError::wrong_state(
            id,
            state,
            "job_finished",
            format!("job {id} is already {state}; there is nothing to cancel"),
        ));
    }
    // A linked job only stops sharing the run; the run itself goes on for the others.
    let lease = jobs::cancel(conn, id, &acting.caller.name).await?;
    let message = match (&job.same_as, &lease) {
        (Some(run), _) => format!("cancelled; stopped sharing the run of job {run}"),
        (None, Some(lease)) => format!("cancelled; the pod holding lease {lease} is told to stop"),
        (None, None) => "cancelled".to_owned(),
    };
    events::insert_event(conn, &acting.actor, Some(id), None, "cancelled", &message).await?;
    Ok((existing(conn, id).await?, lease))
}

async fn requeue(
    conn: &mut Conn,
    acting: &Acting,
    id: JobId,
    ignore_stop_rules: bool,
) -> Result<JobRow> {
    let job = owned(conn, acting, id, "requeue").await?;
    let state = job.state;
    match state {
        JobState::Failed | JobState::Cancelled | JobState::Held | JobState::Stopped => {}
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
                format!(
                "job {id} is {state}; only failed, cancelled, held or stopped jobs can be requeued"
            ),
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
    if let (Some(run), true) = (&job.same_as, ignore_stop_rules) {
        return Err(SchedulerError::wrong_state(
            id,
            state,
            "shares_run",
            format!(
                "job {id} shares the run of job {run}, whose rules judge it: requeue that job \
                 with --ignore-stop-rules"
            ),
        ));
    }
    jobs::requeue(conn, id).await?;
    stop_rules::reset(conn, id, ignore_stop_rules).await?;
    let mut from = job
        .resume_from
        .as_deref()
        .map(|r| format!("; it resumes from {r}"))
        .unwrap_or_default();
    if ignore_stop_rules {
        from.push_str("; its stop rules and divergence guard are lifted");
    }
    events::insert_event(
        conn,
        &acting.actor,
        Some(id),
        None,
        "requeued",
        &format!("requeued from {state}{from}"),
    )
    .await?;
    existing(conn, id).await
}
