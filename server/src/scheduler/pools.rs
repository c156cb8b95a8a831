//! Pools (docs/operations.md "Pools"): each pool's process reports what it holds
//! every few seconds and is told what the queue wants. The server keeps the last report of
//! each in memory only: a restarted server knows its pools again at their next report, and a
//! pool that stopped reporting is shown with its report's age.

use std::collections::{BTreeMap, BTreeSet};
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

/// Bounds on what a report may hold: the server keeps every pool's last report and the plan
/// plays out every pool at its most, so none may be made to grow without end.
const MAX_POOLS: usize = 64;
const MAX_SLICES: u32 = 256;
const MAX_ZONES: usize = 64;
/// A report may hold this many times its `max_slices` (those being deleted besides those up).
const SLICES_PER_MAX: usize = 2;
/// How far ahead of the server's clock a pool's clock may be.
const CLOCK_SKEW: chrono::Duration = chrono::Duration::minutes(5);
/// A slice first reported this long after it was made is refused: a pool reports a slice
/// from the tick it asks for it, and a create is given up after 30 minutes.
const NEW_SLICE_MAX_AGE: std::time::Duration = std::time::Duration::from_secs(2 * 3600);
const SLICE_STATES: [&str; 4] = ["creating", "ready", "preempted", "deleting"];
const ZONE_STATES: [&str; 5] = ["ready", "stockout", "quota", "churn", "paused"];

/// The pools' last reports, by name.
#[derive(Default)]
pub struct PoolReports {
    reports: Mutex<BTreeMap<String, (PoolReport, DateTime<Utc>)>>,
    /// Slices already written down as pods being made (`pods::being_made`), so a report
    /// writes only for the new ones.
    placed: Mutex<BTreeSet<String>>,
}

impl PoolReports {
    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, (PoolReport, DateTime<Utc>)>> {
        self.reports.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Scheduler {
    /// Records pool `name`'s report (its events onto the audit, `by: pool:NAME`) and answers
    /// the queue's demand for its accelerator and what the server knows of each slice's pod.
    /// The caller's token must be allowed the pool (`pool:NAME` in a limited worker token's
    /// pods) and every pod the pool holds.
    pub async fn report_pool(
        &self,
        name: &str,
        report: PoolReport,
        acting: &Acting,
    ) -> Result<PoolAnswer> {
        check_report(&report)?;
        if !acting.caller.may_act_for_pool(name) {
            return Err(SchedulerError::forbidden(
                "pool_not_allowed",
                format!(
                    "the token of {} is limited to pods {}: it cannot report for pool {name} \
                     (a worker token serves a pool when its pods list `pool:{name}`)",
                    acting.caller.name,
                    acting.caller.pods.as_deref().unwrap_or_default().join(", ")
                ),
            ));
        }
        if !self.pool_reports.lock().contains_key(name)
            && self.pool_reports.lock().len() >= MAX_POOLS
        {
            return Err(SchedulerError::unprocessable(
                "too_many_pools",
                format!("this server follows at most {MAX_POOLS} pools"),
            ));
        }
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
        let being_made: Vec<(String, i64)> = {
            let placed = self
                .pool_reports
                .placed
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            report
                .slices
                .iter()
                .filter(|s| matches!(s.state.as_str(), "creating" | "ready"))
                .filter(|s| !placed.contains(&s.pod) && self.live.pod_seen_as(&s.pod).is_none())
                .map(|s| (s.pod.clone(), s.created_at.timestamp_millis().min(now_ms())))
                .collect()
        };
        if !events.is_empty() || !report.retired.is_empty() || !being_made.is_empty() {
            let actor = Actor::pool_request(name, &acting.actor);
            let retired = report.retired.clone();
            let (pool, accelerator) = (name.to_owned(), report.accelerator.clone());
            let made = being_made.clone();
            self.store
                .write(move |conn| {
                    async move {
                        for event in &events {
                            insert_event(conn, &actor, None, None, &event.kind, &event.message)
                                .await?;
                        }
                        for (pod, since) in &made {
                            check_new_slice(conn, pod, *since).await?;
                            pods::being_made(conn, pod, &accelerator, &pool, *since).await?;
                        }
                        pods::retire(conn, &retired, now_ms()).await?;
                        Ok::<_, SchedulerError>(())
                    }
                    .boxed()
                })
                .await?;
        }
        for pod in &report.retired {
            self.live.forget_pod(pod);
        }
        {
            let mut placed = self
                .pool_reports
                .placed
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            placed.extend(being_made.into_iter().map(|(pod, _)| pod));
            for pod in &report.retired {
                placed.remove(pod);
            }
        }
        let answer = self.pool_answer(name, &report).await?;
        let mut stored = report;
        stored.events.clear();
        stored.retired.clear();
        stored.paused = stored
            .paused
            .as_deref()
            .map(podq_api::bounded_event_message);
        for zone in &mut stored.zones {
            zone.last_error = zone
                .last_error
                .as_deref()
                .map(podq_api::bounded_event_message);
        }
        self.pool_reports
            .lock()
            .insert(name.to_owned(), (stored, Utc::now()));
        Ok(answer)
    }

    /// Pool `name`'s share of the queue and of the grant. Pools of one accelerator share
    /// both: slices another pool is still making will take part of the demand, and the
    /// hours other pools' slices have used since the grant began are not this pool's to use.
    async fn pool_answer(&self, name: &str, report: &PoolReport) -> Result<PoolAnswer> {
        let (booting_elsewhere, hours_elsewhere) = self.other_pools(name, &report.accelerator);
        let leasable =
            sql::count_leasable(&mut self.store.read().await?, &report.accelerator).await?;
        let waiting = self.live.idle_pods(&report.accelerator);
        let demand = u32::try_from((leasable - waiting as i64 - booting_elsewhere as i64).max(0))
            .unwrap_or(u32::MAX);
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
        let grant = self.grant().await?;
        let grant_pod_hours = grant
            .as_ref()
            .and_then(|g| g.pod_hours.get(&report.accelerator).copied())
            .map(|budget| (budget - hours_elsewhere).max(0.0));
        Ok(PoolAnswer {
            demand,
            slices,
            grant_pod_hours,
            grant_start: grant.map(|g| g.start),
        })
    }

    /// Of the pools of `accelerator` other than `name`: their slices not yet serving (being
    /// made, or made but whose worker has not called), and their hours since the grant.
    fn other_pools(&self, name: &str, accelerator: &str) -> (usize, f64) {
        let reports = self.pool_reports.lock();
        let others = reports
            .iter()
            .filter(|(other, (report, _))| *other != name && report.accelerator == accelerator);
        let mut booting = 0;
        let mut hours = 0.0;
        for (_, (report, _)) in others {
            hours += report.slice_hours;
            booting += report
                .slices
                .iter()
                .filter(|slice| {
                    slice.state == "creating"
                        || (slice.state == "ready" && self.live.pod_seen_as(&slice.pod).is_none())
                })
                .count();
        }
        (booting, hours)
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
            let demand = self.pool_answer(&name, &report).await?.demand;
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

/// Refuses a report the server should not keep or plan with: more slices or zones than any
/// pool holds, names a pod could not have, states no pool reports, an unknown accelerator.
fn check_report(report: &PoolReport) -> Result<()> {
    let invalid = |message: String| {
        Err(SchedulerError::unprocessable(
            "invalid_pool_report",
            message,
        ))
    };
    if !crate::catalog::is_accelerator_type(&report.accelerator) {
        return invalid(format!(
            "`{}` is not an accelerator type",
            podq_api::escape_controls(&report.accelerator)
        ));
    }
    if report.max_slices == 0 || report.max_slices > MAX_SLICES {
        return invalid(format!("max_slices must be 1 to {MAX_SLICES}"));
    }
    if report.slices.len() > MAX_SLICES as usize || report.zones.len() > MAX_ZONES {
        return invalid(format!(
            "a pool holds at most {MAX_SLICES} slices and {MAX_ZONES} zones"
        ));
    }
    // Slices being deleted may outnumber max_slices for a while, never by this much.
    let most = SLICES_PER_MAX * report.max_slices as usize;
    if report.slices.len() > most {
        return invalid(format!(
            "{} slices is more than {SLICES_PER_MAX} × max_slices ({})",
            report.slices.len(),
            report.max_slices
        ));
    }
    if !report.slice_hours.is_finite() || report.slice_hours < 0.0 {
        return invalid("slice_hours must be a finite number of hours, 0 or more".to_owned());
    }
    let latest = Utc::now() + CLOCK_SKEW;
    if let Some(slice) = report.slices.iter().find(|s| s.created_at > latest) {
        return invalid(format!(
            "slice {} was made at {}, which is in the future",
            slice.pod, slice.created_at
        ));
    }
    let names = report
        .slices
        .iter()
        .map(|s| s.pod.as_str())
        .chain(report.retired.iter().map(String::as_str))
        .chain(report.slices.iter().map(|s| s.zone.as_str()))
        .chain(report.zones.iter().map(|z| z.zone.as_str()));
    if let Some(bad) = names.into_iter().find(|n| !is_name(n)) {
        return invalid(format!(
            "`{}` is not a pod or zone name: 1 to 63 letters, digits, `-` or `_`",
            podq_api::escape_controls(bad)
        ));
    }
    if let Some(bad) = report
        .slices
        .iter()
        .find(|s| !SLICE_STATES.contains(&s.state.as_str()))
    {
        return invalid(format!(
            "slice state `{}` is none of {}",
            podq_api::escape_controls(&bad.state),
            SLICE_STATES.join(", ")
        ));
    }
    if let Some(bad) = report
        .zones
        .iter()
        .find(|z| !ZONE_STATES.contains(&z.state.as_str()))
    {
        return invalid(format!(
            "zone state `{}` is none of {}",
            podq_api::escape_controls(&bad.state),
            ZONE_STATES.join(", ")
        ));
    }
    Ok(())
}

/// Refuses a slice new to the server that says it was made before its pool could have
/// asked for it: its pod's time is counted from then, and a slice made longer ago than any
/// create takes was reported before (a pod the store knows keeps its first time).
async fn check_new_slice(conn: &mut crate::store::Conn, pod: &str, since: i64) -> Result<()> {
    if since >= now_ms() - NEW_SLICE_MAX_AGE.as_millis() as i64 || pods::exists(conn, pod).await? {
        return Ok(());
    }
    Err(SchedulerError::unprocessable(
        "invalid_pool_report",
        format!(
            "slice {pod} is new to this server but says it was made more than {} h ago: a \
             pool reports a slice while it is being made",
            NEW_SLICE_MAX_AGE.as_secs() / 3600
        ),
    ))
}

/// A pod's or zone's name: what a worker's pod name may be (`http/worker.rs`).
fn is_name(name: &str) -> bool {
    (1..=63).contains(&name.len())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
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
