//! The read side for jobs and what hangs off them: the one door through which the HTTP
//! layer reads them (it imports nothing of `store/`).

use std::collections::BTreeMap;

use futures::FutureExt;
use podq_api::{JobAction, JobId, RefusedAction};

use podq_api::{
    Checkpoint, Delivery, Event, GroupSummary, Job, JobDetail, JobList, JobMetrics, JobState,
    PodTime, Webhook,
};

use crate::scheduler::{submit, Result, Scheduler, SchedulerError};
use crate::store::job_state;
use crate::store::jobs::{self, JobFilter};
use crate::store::{checkpoints, events, metrics, ms_to_datetime, webhooks, StoreError};
use crate::team::{Acting, Role};

/// `GET /jobs`'s filters and page, as the HTTP layer parsed them.
#[derive(Debug, Clone, Default)]
pub struct JobsQuery {
    pub state: Option<JobState>,
    pub group: Option<String>,
    pub experiment: Option<String>,
    pub limit: i64,
    pub after: Option<i64>,
    pub offset: i64,
}

impl Scheduler {
    /// Fills in each job's `actions` and `refused_actions` for `acting`: what the job's state
    /// allows (`store::job_state::actions`, from the state table), split by the team's
    /// rules ([`refusal`]). The endpoints refuse what is not listed.
    pub fn with_actions<'a>(&self, acting: &Acting, jobs: impl IntoIterator<Item = &'a mut Job>) {
        // A job whose pod still holds its lease (cancelled or suspended there) is stopping.
        let leased: std::collections::HashSet<JobId> = self
            .live
            .all()
            .into_iter()
            .map(|(_, lease)| lease.job_id)
            .collect();
        for job in jobs {
            let allowed =
                job_state::actions(job.state, job.same_as.is_some(), leased.contains(&job.id));
            match refusal(acting, job.submitted_by.as_deref()) {
                None => {
                    job.actions = allowed;
                    job.refused_actions = Vec::new();
                }
                Some((only, because)) => {
                    job.actions = Vec::new();
                    job.refused_actions = allowed
                        .into_iter()
                        .map(|action| RefusedAction {
                            action,
                            only: only.clone(),
                            because: because.clone(),
                        })
                        .collect();
                }
            }
        }
    }

    /// The job `raw` names: its uuid, or an experiment's newest job. `None` when neither.
    pub async fn job_id_of(&self, raw: &str) -> Result<Option<JobId>> {
        if let Ok(id) = raw.parse::<JobId>() {
            return Ok(Some(id));
        }
        Ok(jobs::newest_job_of_experiment(&mut self.store.read().await?, raw).await?)
    }

    pub async fn job(&self, id: JobId) -> Result<Job> {
        Ok(jobs::get_job(&mut self.store.read().await?, id)
            .await?
            .ok_or_else(|| SchedulerError::UnknownJob(id))?
            .into_api()?)
    }

    /// A job with its run's attempts, checkpoints, latest metrics and goodput, read in one
    /// transaction so the parts agree.
    pub async fn job_detail(&self, id: JobId) -> Result<JobDetail> {
        let detail = self
            .store
            .read_snapshot(move |tx| async move { jobs::detail(tx, id).await }.boxed())
            .await?
            .ok_or_else(|| SchedulerError::UnknownJob(id))?;
        let advice = self.advice(&detail.job, &detail.goodput, &detail.advice);
        let mut run_time = PodTime::default();
        for time in detail.pod_time.values() {
            run_time.add(time);
        }
        Ok(JobDetail {
            job: detail.job.into_api()?,
            accelerators: detail.accelerators,
            attempts: detail
                .attempts
                .into_iter()
                .map(|a| {
                    let time = detail.pod_time.get(&a.attempt).copied().unwrap_or_default();
                    a.into_api(time)
                })
                .collect::<std::result::Result<_, StoreError>>()?,
            checkpoints: detail
                .checkpoints
                .into_iter()
                .map(Checkpoint::from)
                .collect(),
            latest_metrics: detail.latest_metrics,
            goodput: detail.goodput,
            pod_time: run_time,
            checkpoint_advice: advice,
            links: detail.links,
            rungs: detail
                .rungs
                .into_iter()
                .map(|d| podq_api::RungDecision {
                    rung: d.rung + 1,
                    verdict: d.verdict,
                    rank: d.rank,
                    of: d.of_runs,
                    value: d.value,
                    decided_at: chrono::DateTime::from_timestamp_millis(d.decided_at)
                        .unwrap_or_default(),
                    decided_by: d.decided_by,
                })
                .collect(),
        })
    }

    /// A page of jobs. A group or experiment no job can have (not in the catalog, never
    /// submitted) is a mistake to point out, not an empty list.
    pub async fn jobs(&self, query: JobsQuery) -> Result<JobList> {
        let mut db = self.store.read().await?;
        if let Some(group) = &query.group {
            if self.catalog.group(group).is_none() && !jobs::group_has_jobs(&mut db, group).await? {
                return Err(submit::unknown_group(&self.catalog, group));
            }
        }
        if let Some(experiment) = &query.experiment {
            if self.catalog.experiment(experiment).is_none()
                && jobs::newest_job_of_experiment(&mut db, experiment)
                    .await?
                    .is_none()
            {
                return Err(submit::unknown_experiments(&self.catalog, &[experiment]));
            }
        }
        let filter = JobFilter {
            state: query.state,
            group: query.group,
            experiment: query.experiment,
            limit: query.limit,
            after: query.after,
            offset: query.offset,
        };
        let (rows, total) = jobs::list_jobs(&mut db, &filter).await?;
        let next_after = (rows.len() as i64 == filter.limit)
            .then(|| rows.last().map(|r| r.seq))
            .flatten();
        Ok(JobList {
            jobs: rows
                .into_iter()
                .map(|r| r.into_api())
                .collect::<std::result::Result<_, StoreError>>()?,
            total,
            limit: filter.limit,
            offset: filter.offset,
            next_after,
        })
    }

    /// The job's timeline after `after`; a linked job's includes the run it shares.
    pub async fn job_events(&self, id: JobId, after: i64, limit: i64) -> Result<Vec<Event>> {
        let mut db = self.store.read().await?;
        let row = jobs::get_job(&mut db, id)
            .await?
            .ok_or_else(|| SchedulerError::UnknownJob(id))?;
        let mut rows = events::job_events(&mut db, row.id, after, limit).await?;
        if row.run_id != row.id {
            rows.extend(events::job_events(&mut db, row.run_id, after, limit).await?);
            rows.sort_by_key(|e| e.id);
            rows.truncate(usize::try_from(limit).unwrap_or(0));
        }
        Ok(rows
            .into_iter()
            .map(|e| e.into_api())
            .collect::<std::result::Result<_, StoreError>>()?)
    }

    pub async fn job_checkpoints(&self, id: JobId) -> Result<Vec<Checkpoint>> {
        let mut db = self.store.read().await?;
        let row = jobs::get_job(&mut db, id)
            .await?
            .ok_or_else(|| SchedulerError::UnknownJob(id))?;
        Ok(checkpoints::of_job(&mut db, row.run_id)
            .await?
            .into_iter()
            .map(Checkpoint::from)
            .collect())
    }

    /// The run's metric series (`names`, or all), each downsampled to `max_points`.
    pub async fn job_metrics(
        &self,
        id: JobId,
        names: Option<Vec<String>>,
        max_points: i64,
    ) -> Result<JobMetrics> {
        let mut db = self.store.read().await?;
        let row = jobs::get_job(&mut db, id)
            .await?
            .ok_or_else(|| SchedulerError::UnknownJob(id))?;
        let series =
            metrics::downsampled(&mut db, row.run_id, names.as_deref(), max_points).await?;
        Ok(JobMetrics { job_id: id, series })
    }

    /// Every group of the catalog, in catalog order, with its jobs per state.
    pub async fn groups(&self) -> Result<Vec<GroupSummary>> {
        let mut counts: BTreeMap<String, BTreeMap<String, i64>> = BTreeMap::new();
        for (group, state, n) in
            jobs::counts_by_group_and_state(&mut self.store.read().await?).await?
        {
            counts.entry(group).or_default().insert(state, n);
        }
        Ok(self
            .catalog
            .groups
            .iter()
            .map(|g| GroupSummary {
                name: g.name.clone(),
                title: g.title.clone(),
                experiments: g.experiments.clone(),
                baseline_row: g.baseline_row.clone(),
                planned_hours: g.planned_hours,
                jobs: counts.remove(&g.name).unwrap_or_default(),
            })
            .collect())
    }

    /// The newest timeline event's id (0 before any): where a live follower starts.
    pub async fn last_event_id(&self) -> Result<i64> {
        Ok(events::last_event_id(&mut self.store.read().await?).await?)
    }

    /// Up to `limit` timeline events after the event id `after`, oldest first; a row that
    /// cannot be read is logged as an alarm and left out.
    pub(in crate::scheduler) async fn events_after(
        &self,
        after: i64,
        limit: i64,
    ) -> Result<Vec<Event>> {
        let mut events = Vec::new();
        for row in events::recent_events(&mut self.store.read().await?, after, limit).await? {
            match row.into_api() {
                Ok(event) => events.push(event),
                Err(e) => tracing::error!(alarm = true, error = %e, "an event row is unreadable"),
            }
        }
        Ok(events)
    }

    /// The configured webhooks with their outbox counts; `redact` hides each URL's secret.
    pub async fn webhooks(&self, redact: impl Fn(&str) -> String) -> Result<Vec<Webhook>> {
        let rows = webhooks::list(&mut self.store.read().await?).await?;
        Ok(rows
            .into_iter()
            .map(|row| {
                Ok(Webhook {
                    id: row.id,
                    url: redact(&row.url),
                    format: row.format,
                    events: serde_json::from_str(&row.kinds_json)
                        .map_err(|e| StoreError::Corrupt(format!("webhook kinds: {e}")))?,
                    enabled: row.enabled,
                    pending: row.pending,
                    delivered: row.delivered,
                    oldest_pending_attempts: row.head_attempts,
                    last_error: row.last_error,
                })
            })
            .collect::<std::result::Result<_, StoreError>>()?)
    }

    pub async fn webhook_deliveries(
        &self,
        webhook: Option<i64>,
        pending: bool,
        limit: i64,
    ) -> Result<Vec<Delivery>> {
        let rows =
            webhooks::deliveries(&mut self.store.read().await?, webhook, pending, limit).await?;
        Ok(rows
            .into_iter()
            .map(|r| Delivery {
                id: r.id,
                webhook_id: r.webhook_id,
                event_id: r.event_id,
                kind: r.kind,
                attempts: r.attempts,
                next_attempt_at: ms_to_datetime(r.next_attempt_at),
                delivered_at: r.delivered_at.map(ms_to_datetime),
                last_error: r.last_error,
            })
            .collect())
    }

    /// Whether the store answers (for `/readyz`).
    pub async fn ping(&self) -> Result<()> {
        Ok(self.store.ping().await?)
    }
}

/// Why `acting` may not act on a job `owner` submitted, as (who may, why only they), or None
/// when they may: the team's rules (`team::Acting::may_act_on`), and the role the routes of
/// the job's actions need (a submitter's: `http/mod.rs`).
fn refusal(acting: &Acting, owner: Option<&str>) -> Option<(String, Option<String>)> {
    let role = acting.caller.role.covers(Role::Submitter);
    if role && acting.may_act_on("", owner, "act on").is_ok() {
        return None;
    }
    Some(match owner {
        Some(owner) if owner.starts_with("schedule:") => {
            ("an admin".to_owned(), Some(format!("submitted by {owner}")))
        }
        Some(owner) => (format!("{owner} or an admin"), None),
        None => (
            "an admin".to_owned(),
            Some("submitted before podq knew people".to_owned()),
        ),
    })
}

/// Whether `action` is among those `job` lists for its caller ([`Scheduler::with_actions`]),
/// or refused by the team's rules rather than by its state.
pub fn state_allows(job: &Job, action: JobAction) -> bool {
    job.actions.contains(&action) || job.refused_actions.iter().any(|r| r.action == action)
}
