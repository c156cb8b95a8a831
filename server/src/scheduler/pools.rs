//! Pools (issue 40, docs/operations.md "Pools"): each pool's process reports what it holds
//! every few seconds and is told what the queue wants. The server keeps the last report of
//! each in memory only: a restarted server knows its pools again at their next report, and a
//! pool that stopped reporting is shown with its report's age.

use std::collections::BTreeMap;
use std::sync::Mutex;

use chrono::{DateTime, Utc};
use futures::FutureExt;
use podq_api::{
    PoolAnswer, PoolReport, PoolView, PoolsPage, SlicePod, WorkerEvent, POOL_EVENT_KINDS,
};

use super::lease::authority::worker_for;
use crate::scheduler::{Result, Scheduler, SchedulerError};
use crate::store::events::{insert_event, Actor};
use crate::store::leases as sql;
use crate::store::{now_ms, pods};
use crate::team::Acting;

/// A pod that has not asked for work for this long is not counted as waiting for it: twice
/// the longest lease poll.
const WAITING_POD_SEEN_S: i64 = 120;

/// The pools' last reports, by name.
#[derive(Default)]
pub struct PoolReports {
    reports: Mutex<BTreeMap<String, (PoolReport, DateTime<Utc>)>>,
}

impl PoolReports {
    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, (PoolReport, DateTime<Utc>)>> {
        self.reports.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Scheduler {
    /// Records pool `name`'s report (its events onto the audit, `by: pool:NAME`) and answers
    /// the queue's demand for its accelerator and what the server knows of each slice's pod.
    /// The caller's token must be allowed every pod the pool holds.
    pub async fn report_pool(
        &self,
        name: &str,
        report: PoolReport,
        acting: &Acting,
    ) -> Result<PoolAnswer> {
        for slice in &report.slices {
            worker_for(acting, &slice.pod)?;
        }
        let events: Vec<WorkerEvent> = report
            .events
            .iter()
            .map(checked_pool_event)
            .collect::<Result<_>>()?;
        for pod in &report.retired {
            worker_for(acting, pod)?;
        }
        if !events.is_empty() || !report.retired.is_empty() {
            let actor = Actor::pool_request(name, &acting.actor);
            let retired = report.retired.clone();
            self.store
                .write(move |conn| {
                    async move {
                        for event in &events {
                            insert_event(conn, &actor, None, None, &event.kind, &event.message)
                                .await?;
                        }
                        pods::retire(conn, &retired, now_ms()).await?;
                        Ok::<_, SchedulerError>(())
                    }
                    .boxed()
                })
                .await?;
        }
        let answer = self.pool_answer(&report).await?;
        let mut stored = report;
        stored.events.clear();
        stored.retired.clear();
        self.pool_reports
            .lock()
            .insert(name.to_owned(), (stored, Utc::now()));
        Ok(answer)
    }

    async fn pool_answer(&self, report: &PoolReport) -> Result<PoolAnswer> {
        let leasable =
            sql::count_leasable(&mut self.store.read().await?, &report.accelerator).await?;
        let since = Utc::now() - chrono::Duration::seconds(WAITING_POD_SEEN_S);
        let waiting = self.live.idle_ready_pods(&report.accelerator, since);
        let demand = u32::try_from((leasable - waiting as i64).max(0)).unwrap_or(u32::MAX);
        let slices = report
            .slices
            .iter()
            .map(|slice| {
                let seen = self.live.pod_seen_as(&slice.pod);
                SlicePod {
                    pod: slice.pod.clone(),
                    leased: !self.live.of_pod(&slice.pod).is_empty(),
                    seen_at: seen.as_ref().map(|(_, at)| *at),
                    preflight: seen.and_then(|(desc, _)| desc.preflight),
                }
            })
            .collect();
        let grant_pod_hours = self
            .grant()
            .await?
            .and_then(|g| g.pod_hours.get(&report.accelerator).copied());
        Ok(PoolAnswer {
            demand,
            slices,
            grant_pod_hours,
        })
    }

    /// Every pool that has reported since this server started, with the queue's demand now.
    pub async fn pools(&self) -> Result<PoolsPage> {
        let reports: Vec<(String, PoolReport, DateTime<Utc>)> = self
            .pool_reports
            .lock()
            .iter()
            .map(|(name, (report, at))| (name.clone(), report.clone(), *at))
            .collect();
        let mut pools = Vec::new();
        for (name, report, reported_at) in reports {
            let demand = self.pool_answer(&report).await?.demand;
            pools.push(PoolView {
                name,
                accelerator: report.accelerator,
                max_slices: report.max_slices,
                demand,
                slices: report.slices,
                zones: report.zones,
                paused: report.paused,
                slice_hours: report.slice_hours,
                reported_at,
            });
        }
        Ok(PoolsPage { pools })
    }
}

impl Scheduler {
    /// By accelerator: the slices the pools hold now and the most they may hold.
    pub(in crate::scheduler) fn pool_capacity(&self) -> BTreeMap<String, (usize, usize)> {
        let mut capacity: BTreeMap<String, (usize, usize)> = BTreeMap::new();
        for (report, _) in self.pool_reports.lock().values() {
            let entry = capacity.entry(report.accelerator.clone()).or_default();
            entry.0 += report.slices.len();
            entry.1 += report.max_slices as usize;
        }
        capacity
    }

    /// The pools' series for `/metrics`: slices by state, each zone's state, the demand.
    pub(in crate::scheduler) async fn pool_metrics(&self) -> Result<()> {
        use crate::telemetry::PoolLabels;
        let page = self.pools().await?;
        let t = &self.telemetry;
        t.pool_slices.clear();
        t.pool_zones.clear();
        t.pool_demand.clear();
        let label = |pool: &str, state: &str, zone: &str| PoolLabels {
            pool: pool.to_owned(),
            state: state.to_owned(),
            zone: zone.to_owned(),
        };
        for pool in &page.pools {
            t.pool_demand
                .get_or_create(&label(&pool.name, "", ""))
                .set(i64::from(pool.demand));
            for state in ["creating", "ready", "preempted", "deleting"] {
                let n = pool.slices.iter().filter(|s| s.state == state).count();
                t.pool_slices
                    .get_or_create(&label(&pool.name, state, ""))
                    .set(n as i64);
            }
            for zone in &pool.zones {
                t.pool_zones
                    .get_or_create(&label(&pool.name, &zone.state, &zone.zone))
                    .set(1);
            }
        }
        Ok(())
    }
}

/// A pool's event as it may be stored: one of the pool's own kinds, its message bounded and
/// escaped as a worker's is.
fn checked_pool_event(event: &WorkerEvent) -> Result<WorkerEvent> {
    if !POOL_EVENT_KINDS.contains(&event.kind.as_str()) {
        let shown: String = podq_api::escape_controls(&event.kind)
            .chars()
            .take(64)
            .collect();
        return Err(SchedulerError::unprocessable(
            "unknown_event_kind",
            format!(
                "a pool cannot report an event of kind `{shown}`: its kinds are {}",
                POOL_EVENT_KINDS.join(", ")
            ),
        ));
    }
    Ok(WorkerEvent {
        kind: event.kind.clone(),
        message: podq_api::bounded_event_message(&event.message),
    })
}
