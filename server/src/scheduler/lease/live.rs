//! What lives only in memory: each live lease's expiry and last step, and when each pod was
//! last heard from.
//!
//! The database holds each job's live `lease_id` (the fence every worker call is checked
//! against) durably. Expiry lives only here: heartbeats are the most frequent call and need
//! no fsync. After a restart every live lease gets a fresh full TTL, so a worker that is still
//! alive keeps its job and a dead one is reaped one TTL later. Likewise a pod's "last seen"
//! is written only when its description changes, so waiting workers cost no writes.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use podq_api::{JobId, LeaseId, PodDescription};

use crate::store::leases::LiveRow;
use crate::store::StoreError;

#[derive(Debug, Clone)]
pub struct LiveLease {
    pub job_id: JobId,
    pub pod: String,
    pub attempt: i64,
    pub expires_at: Instant,
    pub cancel: bool,
    /// The server asked the worker to stop the attempt (eviction, suspension): this is why,
    /// and the next heartbeat says so.
    pub stop: Option<String>,
    pub running: bool,
    /// Whether the database knows the attempt is running yet (see `Scheduler::persist_running`).
    pub running_recorded: bool,
    pub step: Option<i64>,
}

/// The leases workers hold right now, with their expiry.
pub struct LiveLeases {
    pub ttl: Duration,
    leases: Mutex<HashMap<LeaseId, LiveLease>>,
    pods: Mutex<HashMap<String, PodSeen>>,
}

/// A pod as last written to the database, and when it last asked for anything.
struct PodSeen {
    recorded: PodDescription,
    last_seen: DateTime<Utc>,
    /// Until when its last lease call that may lease waits for work: a pod counts as idle
    /// capacity only while it is asking for a job, not while it merely reports.
    asks_until: Option<DateTime<Utc>>,
}

impl LiveLeases {
    pub fn new(rows: Vec<LiveRow>, ttl: Duration) -> Result<LiveLeases, StoreError> {
        let now = Instant::now();
        let leases = rows
            .into_iter()
            .map(|row| {
                let running = row.state == podq_api::JobState::Running;
                Ok((
                    row.lease_id,
                    LiveLease {
                        job_id: row.id,
                        pod: row.pod,
                        attempt: row.attempts,
                        expires_at: now + ttl,
                        cancel: row.cancel_requested,
                        stop: row.stop_message,
                        running,
                        running_recorded: running,
                        step: None,
                    },
                ))
            })
            .collect::<Result<_, StoreError>>()?;
        Ok(LiveLeases {
            ttl,
            leases: Mutex::new(leases),
            pods: Mutex::new(HashMap::new()),
        })
    }

    /// Replaces the table with the leases the database holds live, each with a fresh TTL:
    /// what a server that takes over from another starts from. The pods' last descriptions
    /// are forgotten, so each is written again when it next reports.
    pub fn reload(&self, rows: Vec<LiveRow>) -> Result<(), StoreError> {
        let fresh = LiveLeases::new(rows, self.ttl)?;
        *self.lock() = fresh.leases.into_inner().unwrap_or_else(|e| e.into_inner());
        self.pods().clear();
        Ok(())
    }

    pub(in crate::scheduler) fn lock(&self) -> MutexGuard<'_, HashMap<LeaseId, LiveLease>> {
        self.leases.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn get(&self, lease: LeaseId) -> Option<LiveLease> {
        self.lock().get(&lease).cloned()
    }

    pub fn all(&self) -> Vec<(LeaseId, LiveLease)> {
        self.lock().iter().map(|(k, v)| (*k, v.clone())).collect()
    }

    pub(in crate::scheduler) fn insert(&self, lease: LeaseId, live: LiveLease) {
        self.lock().insert(lease, live);
    }

    pub(in crate::scheduler) fn remove(&self, lease: LeaseId) {
        self.lock().remove(&lease);
    }

    pub(in crate::scheduler) fn flag_cancel(&self, lease: LeaseId) {
        if let Some(live) = self.lock().get_mut(&lease) {
            live.cancel = true;
        }
    }

    pub(in crate::scheduler) fn flag_stop(&self, lease: LeaseId, why: String) {
        if let Some(live) = self.lock().get_mut(&lease) {
            live.stop = Some(why);
        }
    }

    pub(in crate::scheduler) fn of_pod(&self, pod: &str) -> Vec<LeaseId> {
        self.lock()
            .iter()
            .filter(|(_, l)| l.pod == pod)
            .map(|(id, _)| *id)
            .collect()
    }

    pub(in crate::scheduler) fn expired(&self, now: Instant) -> Vec<LeaseId> {
        self.lock()
            .iter()
            .filter(|(_, l)| l.expires_at <= now)
            .map(|(id, _)| *id)
            .collect()
    }

    /// Notes that `lease` reached `step`.
    pub(in crate::scheduler) fn advance(&self, lease: LeaseId, step: i64) {
        if let Some(live) = self.lock().get_mut(&lease) {
            live.step = Some(live.step.map_or(step, |s| s.max(step)));
        }
    }

    fn pods(&self) -> MutexGuard<'_, HashMap<String, PodSeen>> {
        self.pods.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Notes that `pod` asked for something now; true when its description differs from the
    /// one in the database, which the caller must then write.
    pub(in crate::scheduler) fn pod_seen(&self, pod: &str, desc: &PodDescription) -> bool {
        let mut pods = self.pods();
        match pods.get_mut(pod) {
            Some(seen) => {
                seen.last_seen = Utc::now();
                seen.recorded != *desc
            }
            None => true,
        }
    }

    /// Notes that the database now holds `desc` for `pod`.
    pub(in crate::scheduler) fn pod_recorded(&self, pod: &str, desc: &PodDescription) {
        let mut pods = self.pods();
        let asks_until = pods.get(pod).and_then(|seen| seen.asks_until);
        pods.insert(
            pod.to_owned(),
            PodSeen {
                recorded: desc.clone(),
                last_seen: Utc::now(),
                asks_until,
            },
        );
    }

    /// Notes that `pod`, whose preflight allows it a lease, waits for work until `until`.
    pub(in crate::scheduler) fn pod_asks(&self, pod: &str, until: DateTime<Utc>) {
        if let Some(seen) = self.pods().get_mut(pod) {
            seen.asks_until = Some(until);
        }
    }

    /// Pods of `accelerator` that can lease and are asking for work (within a lease's TTL of
    /// their last call's wait), ready, and holding no lease: one of them leases the head of
    /// the queue soon, so nothing needs evicting or making. A pod that only reports, or whose
    /// newest preflight failed, never leases and is no capacity.
    pub(in crate::scheduler) fn idle_pods(&self, accelerator: &str) -> usize {
        let busy: std::collections::HashSet<String> =
            self.lock().values().map(|l| l.pod.clone()).collect();
        let recent = Utc::now() - chrono::Duration::from_std(self.ttl).unwrap_or_default();
        self.pods()
            .iter()
            .filter(|(pod, seen)| {
                seen.recorded.accelerator == accelerator
                    && seen.recorded.state.is_ready()
                    && may_lease(&seen.recorded)
                    && seen.asks_until.is_some_and(|until| until >= recent)
                    && !busy.contains(*pod)
            })
            .count()
    }

    /// When `pod` was last heard from since this server started.
    pub fn pod_last_seen(&self, pod: &str) -> Option<DateTime<Utc>> {
        self.pods().get(pod).map(|seen| seen.last_seen)
    }

    /// Forgets `pod`, given back by its pool: it waits for no work any more.
    pub fn forget_pod(&self, pod: &str) {
        self.pods().remove(pod);
    }

    /// What `pod` last said of itself, and when it was last seen.
    pub fn pod_seen_as(&self, pod: &str) -> Option<(PodDescription, DateTime<Utc>)> {
        self.pods()
            .get(pod)
            .map(|seen| (seen.recorded.clone(), seen.last_seen))
    }
}

/// Whether a pod described so is given jobs: none while its newest preflight failed.
pub(in crate::scheduler) fn may_lease(desc: &PodDescription) -> bool {
    desc.preflight.as_ref().is_none_or(|p| p.passed)
}
