//! Handing whole-pod jobs to workers (docs/architecture.md §3.2): a worker's wait for a
//! lease, the claim, and what a pod's worker says of its pod.

use std::time::{Duration, Instant};

use chrono::Utc;
use futures::FutureExt;
use podq_api::{Lease, LeaseId, LeaseRequest, PodReport};

use super::authority::worker_for;
use super::finish::{lost, Caused};
use super::progress::checked_event;
use crate::scheduler::{LiveLease, Result, Scheduler, SchedulerError};
use crate::store::events::{insert_event, Actor};
use crate::store::leases::{self as sql};
use crate::store::{pods, StoreError};
use crate::team::Acting;

const MAX_WAIT: Duration = Duration::from_secs(60);
const DEFAULT_WAIT: Duration = Duration::from_secs(20);

impl Scheduler {
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
        // Before anything is written or waited on: a type podq does not know has no job and
        // never will, and a waiter kept for each new string would grow without end.
        let wake = self
            .waiters
            .of(&req.pod.accelerator)
            .map_err(unknown_slice_type)?;
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
        if !super::live::may_lease(&req.pod) {
            // A pod that failed preflight gets no job; it asks again after the wait.
            tokio::time::sleep_until(deadline).await;
            return Ok(None);
        }
        self.live.pod_asks(
            pod,
            Utc::now() + chrono::Duration::from_std(wait).unwrap_or_default(),
        );
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
        let lease_id = LeaseId::new_random();
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
                job_id: claimed.id,
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
            .interval_for_attempt(claimed.id, &claimed.experiment)
            .await
            .unwrap_or_else(|e| {
                tracing::warn!(job = %claimed.id, error = %e, "no checkpoint interval for this attempt");
                None
            });
        let lease = Lease {
            lease_id,
            job_id: claimed.id,
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
            compile_cache_dir: self.catalog.compile_cache_dir(&req.pod.accelerator),
            slice: slice_shape(&req.pod),
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
}

/// 422 `unknown_accelerator` for a lease call whose pod names no slice type podq knows, with
/// the nearest known one; the name is quoted escaped and bounded (`podq_api::slice_type`).
fn unknown_slice_type(unknown: podq_api::UnknownSliceType) -> SchedulerError {
    SchedulerError::unprocessable(
        "unknown_accelerator",
        podq_api::escape_controls(&format!(
            "the pod's accelerator {unknown}: a pod leases only a slice type of podq's table"
        )),
    )
    .with_details(serde_json::json!({
        "accelerator": podq_api::escape_controls(&unknown.name),
        "did_you_mean": unknown.did_you_mean.into_iter().collect::<Vec<_>>(),
    }))
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
        if state != desc.state.as_str() || health != desc.health {
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

/// The slice a lease runs on, for the trainer to build its mesh and restore onto it: the
/// type's devices from podq's table, the hosts as the pod's worker counts them.
fn slice_shape(pod: &podq_api::PodDescription) -> Option<podq_api::SliceShape> {
    let mut shape = podq_api::slice_type(&pod.accelerator)
        .ok()?
        .shape(&pod.accelerator);
    shape.hosts = pod.hosts;
    Some(shape)
}
