//! The summaries that combine the database with what lives only in memory (lease progress,
//! pods' last contact): status and pods.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use chrono::{Duration as ChronoDuration, Utc};
use podq_api::{JobId, JobState, Pod, RunningJob, Status};

use crate::scheduler::plan::forecast::{self, Progress};
use crate::scheduler::{LiveLease, Result, Scheduler};
use crate::store::views::{self, ActiveRun};
use crate::store::{goodput, jobs, ms_to_datetime, now_ms, pods, StoreError};

/// What status reads from the database: made once per change of state (and at most once a
/// second while reports pour in: `read_cache`), merged with the live leases on every read
/// (while reports pour in, `/status`'s JSON is kept whole for up to half a second:
/// [`Scheduler::status_json`]).
#[derive(Clone)]
pub(in crate::scheduler) struct QueueView {
    counts: BTreeMap<JobState, i64>,
    /// Runs on a pod (leased, running): few, and their step moves between commits.
    on_pods: Vec<ActiveRun>,
    /// The pod-hours the queued runs still need.
    queued_hours: f64,
    goodput: podq_api::Goodput,
}

impl Scheduler {
    pub async fn status(&self) -> Result<Status> {
        let mut status = self.status_without_grant().await?;
        status.grant = self
            .read_cache
            .grant
            .get_or(|| self.grant_outlook())
            .await?;
        Ok(status)
    }

    /// [`Scheduler::status`] as JSON. While a fleet reports, readers share one answer for
    /// up to half a second (`read_cache.rs`); a quiet server answers each afresh.
    pub async fn status_json(&self) -> Result<axum::body::Bytes> {
        self.read_cache
            .status_json
            .get_or(|| async {
                let status = self.status().await?;
                let json = serde_json::to_vec(&status)
                    .map_err(|e| StoreError::Corrupt(format!("status as JSON: {e}")))?;
                Ok(json.into())
            })
            .await
    }

    async fn queue_view(&self) -> Result<Arc<QueueView>> {
        let mut db = self.store.read().await?;
        let mut counts: BTreeMap<JobState, i64> = JobState::ALL.iter().map(|&s| (s, 0)).collect();
        counts.extend(jobs::counts_by_state(&mut db).await?);
        let now = now_ms();
        let mut on_pods = Vec::new();
        let (_, mut queued_hours) = views::fresh_queue(&mut db).await?;
        for run in views::active_runs(&mut db).await? {
            if run.state == JobState::Queued {
                let rate =
                    forecast::step_rate(run.first_step, run.first_step_at, run.end_step, now);
                queued_hours += remaining(&run, run.end_step.or(run.last_step), rate);
            } else {
                on_pods.push(run);
            }
        }
        Ok(Arc::new(QueueView {
            counts,
            on_pods,
            queued_hours,
            goodput: goodput::total(&mut db).await?,
        }))
    }

    /// Status without the grant line, which projects the whole catalog: `/metrics` scrapes
    /// need none of it.
    async fn status_without_grant(&self) -> Result<Status> {
        let view = self.read_cache.queue.get_or(|| self.queue_view()).await?;
        let now = now_ms();
        let live = self.live.all();
        // By job, not a search per job: a thousand running jobs made status quadratic
        // (benches/fleet.rs).
        let lease_of: HashMap<JobId, &LiveLease> =
            live.iter().map(|(_, l)| (l.job_id, l)).collect();
        let mut running = Vec::new();
        let mut queue_hours = view.queued_hours;
        for run in &view.on_pods {
            let lease = lease_of.get(&run.id).copied();
            let step = lease
                .and_then(|l| l.step)
                .or(run.end_step)
                .or(run.last_step);
            let steps_per_s =
                forecast::step_rate(run.first_step, run.first_step_at, run.end_step, now);
            queue_hours += remaining(run, step, steps_per_s);
            running.push(RunningJob {
                job_id: run.id,
                experiment: run.experiment.clone(),
                state: run.state,
                pod: lease.map(|l| l.pod.clone()),
                attempt: run.attempts,
                step,
                total_steps: run.total_steps,
                steps_per_s,
            });
        }
        let queue_eta = (queue_hours > 0.0)
            .then(|| Utc::now() + ChronoDuration::seconds((queue_hours * 3600.0) as i64));
        Ok(Status {
            now: Utc::now(),
            jobs: view.counts.clone(),
            running,
            pods: self.pods().await?,
            queue_hours,
            queue_eta,
            goodput: view.goodput,
            grant: None,
        })
    }

    /// Every pod, with its live lease and when it was last heard from.
    pub async fn pods(&self) -> Result<Vec<Pod>> {
        let stored = self.read_cache.pods.get_or(|| self.stored_pods()).await?;
        let live = self.live.all();
        let lease_on: HashMap<&str, (&podq_api::LeaseId, &LiveLease)> = live
            .iter()
            .map(|(id, l)| (l.pod.as_str(), (id, l)))
            .collect();
        Ok(stored
            .iter()
            .map(|pod| {
                let lease = lease_on.get(pod.name.as_str()).copied();
                Pod {
                    last_seen_at: self
                        .live
                        .pod_last_seen(&pod.name)
                        .map_or(pod.last_seen_at, |seen| seen.max(pod.last_seen_at)),
                    current_job: lease.map(|(_, l)| l.job_id),
                    current_lease: lease.map(|(id, _)| *id),
                    ..pod.clone()
                }
            })
            .collect())
    }

    /// The serving pods as the store holds them, without what lives only in memory.
    async fn stored_pods(&self) -> Result<Arc<Vec<Pod>>> {
        let rows = pods::serving(&mut self.store.read().await?).await?;
        let pods = rows
            .into_iter()
            .map(|row| {
                Ok(Pod {
                    preflight: row.preflight()?,
                    accelerator: row.accelerator,
                    hosts: u32::try_from(row.hosts).unwrap_or(0),
                    state: row.state.into(),
                    health: row.health,
                    recovery: row.recovery,
                    last_seen_at: ms_to_datetime(row.last_seen_at),
                    current_job: None,
                    current_lease: None,
                    name: row.name,
                })
            })
            .collect::<Result<Vec<Pod>>>()?;
        Ok(Arc::new(pods))
    }
}

fn remaining(run: &ActiveRun, step: Option<i64>, steps_per_s: Option<f64>) -> f64 {
    forecast::remaining_hours(Progress {
        est_hours: run.est_hours,
        step,
        total_steps: run.total_steps,
        steps_per_s,
    })
}

impl Scheduler {
    /// Sets the gauges of state from the database and the live leases, then answers the
    /// whole registry in Prometheus' text format.
    pub async fn metrics_text(&self) -> Result<String> {
        use crate::telemetry::{JobLabels, KindLabel, PodLabels, PodTimeLabels, StateLabel};
        let t = &self.telemetry;
        t.jobs.clear();
        for state in JobState::ALL {
            t.jobs
                .get_or_create(&StateLabel {
                    state: state.as_str().to_owned(),
                })
                .set(0);
        }
        // Its connection goes back before the calls below take theirs.
        let counts = jobs::counts_by_state(&mut self.store.read().await?).await?;
        for (state, n) in counts {
            t.jobs
                .get_or_create(&StateLabel {
                    state: state.as_str().to_owned(),
                })
                .set(n);
        }
        let status = self.status_without_grant().await?;
        t.job_step.clear();
        t.job_steps_per_second.clear();
        for run in &status.running {
            let labels = JobLabels {
                job_id: run.job_id.to_string(),
                experiment: run.experiment.clone(),
            };
            if let Some(step) = run.step {
                t.job_step.get_or_create(&labels).set(step);
            }
            if let Some(rate) = run.steps_per_s {
                t.job_steps_per_second.get_or_create(&labels).set(rate);
            }
        }
        t.pods.clear();
        for pod in &status.pods {
            t.pods
                .get_or_create(&PodLabels {
                    pod: pod.name.clone(),
                    state: pod.state.to_string(),
                    health: pod.health.clone(),
                })
                .set(1);
        }
        for (kind, seconds) in [
            ("kept", status.goodput.kept_s),
            ("lost", status.goodput.lost_s),
            ("overhead", status.goodput.overhead_s),
        ] {
            t.goodput_seconds
                .get_or_create(&KindLabel { kind: kind.into() })
                .set(seconds);
        }
        let pod_time = self.pod_time().await?;
        t.pod_time_seconds.clear();
        let scopes = std::iter::once(("grant", String::new(), &pod_time.grant))
            .chain(pod_time.pods.iter().map(|(n, t)| ("pod", n.clone(), t)))
            .chain(pod_time.groups.iter().map(|(n, t)| ("group", n.clone(), t)));
        for (scope, name, time) in scopes {
            for (cause, seconds) in time.causes() {
                t.pod_time_seconds
                    .get_or_create(&PodTimeLabels {
                        scope: scope.into(),
                        name: name.clone(),
                        cause: cause.into(),
                    })
                    .set(seconds);
            }
        }
        self.recovery_metrics().await?;
        self.pool_metrics().await?;
        Ok(t.encode())
    }

    /// The recovery histograms, made again from the newest records: derived on read, as the
    /// records are, so a restarted server answers the same.
    async fn recovery_metrics(&self) -> Result<()> {
        use crate::telemetry::PhaseLabel;
        let records = self.recent_recoveries().await?;
        let family = &self.telemetry.recovery_seconds;
        family.clear();
        let observe = |phase: &str, seconds: f64| {
            family
                .get_or_create(&PhaseLabel {
                    phase: phase.to_owned(),
                })
                .observe(seconds);
        };
        for r in records.iter() {
            observe("total", r.total_s);
            for (phase, seconds) in r.phases.named() {
                observe(phase, seconds);
            }
        }
        Ok(())
    }
}
