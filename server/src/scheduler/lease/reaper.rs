//! The reaper's tick: record attempts that started running, end leases whose worker went
//! silent, wake a waiting worker for each job whose backoff ended, and (every 2 s) weigh
//! evictions (`evict.rs`). A tick that finds
//! nothing to do touches no table.

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::FutureExt;
use podq_api::LeaseId;
use tokio_util::sync::CancellationToken;

use super::finish::{lost, Caused};
use crate::scheduler::{LiveLease, Result, Scheduler, SchedulerError};
use crate::store::events::Actor;
use crate::store::{leases as sql, now_ms};

const TICK: Duration = Duration::from_millis(250);
const EVICT_EVERY: u64 = 8;
/// Every minute the plan is made again (if anything changed) when a group's rungs keep
/// `auto`, so their share follows the grant even while nobody reads the plan.
const AUTO_KEEPS_EVERY: u64 = 240;

/// What one tick did.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Reaped {
    /// Attempts newly recorded as running.
    pub running: usize,
    /// Leases ended as `lost`.
    pub lost: Vec<LeaseId>,
}

impl Scheduler {
    /// Runs the reaper every 250 ms until `shutdown`.
    pub async fn run_reaper(self: Arc<Self>, shutdown: CancellationToken) {
        let mut tick = tokio::time::interval(TICK);
        for ticks in 0u64.. {
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = tick.tick() => {}
            }
            if let Err(e) = self.reap_once(Instant::now()).await {
                tracing::error!(error = %e, "the reaper's tick failed");
            }
            // Evictions are weighed every 2 s: they read the queue's head and the running jobs.
            if ticks % EVICT_EVERY == 0 {
                if let Err(e) = self.evict_tick().await {
                    tracing::error!(error = %e, "weighing evictions failed");
                }
            }
            let auto = self.catalog.groups.iter().any(|g| {
                g.rungs
                    .as_ref()
                    .is_some_and(|r| r.keep == crate::catalog::rungs::Keep::Auto)
            });
            if auto && ticks % AUTO_KEEPS_EVERY == 0 {
                if let Err(e) = self.plan(None).await {
                    tracing::error!(error = %e, "planning the rungs' auto shares failed");
                }
            }
        }
    }

    /// One tick of the reaper, as of `now`.
    pub async fn reap_once(&self, now: Instant) -> Result<Reaped> {
        let mut reaped = Reaped {
            running: self.persist_running().await?,
            ..Reaped::default()
        };
        for lease in self.live.expired(now) {
            let message = format!(
                "no heartbeat for {}s: the worker is gone",
                self.live.ttl.as_secs()
            );
            match self
                .end_lease(lease, lost(message), Caused::By(Actor::podq()))
                .await
            {
                Ok(_) => {
                    tracing::warn!(%lease, "reaped a lease whose worker stopped heartbeating");
                    reaped.lost.push(lease);
                }
                // Ended meanwhile by its worker: only the memory was left.
                Err(SchedulerError::LeaseLost(_)) => self.live.remove(lease),
                Err(e) => tracing::error!(%lease, error = %e, "could not reap a lease"),
            }
        }
        self.waiters.wake_ended_backoffs(now_ms());
        Ok(reaped)
    }

    /// Records in the database the attempts that started running since the last tick, all
    /// in one write. A heartbeat only notes the start in memory: heartbeats are the most
    /// frequent call, and `running` showing up a quarter second later costs nothing.
    async fn persist_running(&self) -> Result<usize> {
        let started: Vec<(LeaseId, LiveLease)> = self
            .live
            .all()
            .into_iter()
            .filter(|(_, l)| l.running && !l.running_recorded)
            .collect();
        if started.is_empty() {
            return Ok(0);
        }
        let rows = started.clone();
        let recorded = self
            .store
            .write(move |conn| {
                async move {
                    let mut recorded = 0;
                    for (lease_id, live) in &rows {
                        if sql::mark_running(conn, *lease_id, live.job_id, &live.pod, live.attempt)
                            .await?
                        {
                            recorded += 1;
                        }
                    }
                    Ok::<_, SchedulerError>(recorded)
                }
                .boxed()
            })
            .await?;
        let mut leases = self.live.lock();
        for (lease_id, _) in started {
            if let Some(live) = leases.get_mut(&lease_id) {
                live.running_recorded = true;
            }
        }
        Ok(recorded)
    }
}
