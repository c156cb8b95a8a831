//! Pools (docs/operations/pools.md "Pools"): each pool's process reports what it holds
//! every few seconds and is told what the queue wants. The server keeps the last report of
//! each in memory only: a restarted server knows its pools again at their next report, and a
//! pool that stopped reporting is shown with its report's age.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Mutex;

use chrono::{DateTime, Utc};
use futures::FutureExt;
use podq_api::{
    PoolAnswer, PoolReport, PoolView, PoolsPage, SlicePod, SliceState, SliceView, WorkerEvent,
    ZoneState,
};

use super::lease::authority::worker_for;
use super::routing;
use super::spares;
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

/// A pool's report older than this offers no room to make slices: the pool may be gone.
const REPORT_FRESH: chrono::Duration = chrono::Duration::minutes(2);

/// One pool's hours of one slice type, as the server saw its slices.
#[derive(Debug, Clone, PartialEq)]
struct SeenHours {
    pool: String,
    accelerator: String,
    hours: f64,
}

/// Each pool's slice-hours of each type since `start_ms`, from what the server saw: a slice
/// counts from the report that first named it to its retirement; while its pool still
/// reports it, to `now_ms`; a slice its pool stopped reporting without retiring it, to its
/// worker's last call (or not at all, if it never called).
fn seen_hours(
    pods: &[pods::PoolPod],
    reported: &BTreeMap<String, BTreeSet<String>>,
    start_ms: i64,
    now_ms: i64,
) -> Vec<SeenHours> {
    let mut hours: BTreeMap<(String, String), f64> = BTreeMap::new();
    for pod in pods {
        let held = reported
            .get(&pod.pool)
            .is_some_and(|held| held.contains(&pod.name));
        let end = match pod.retired_at {
            Some(retired) => retired,
            None if held => now_ms,
            None => pod.last_seen_at,
        };
        let from = pod.pool_seen_at.max(start_ms);
        let ms = end.min(now_ms).saturating_sub(from).max(0);
        *hours
            .entry((pod.pool.clone(), pod.accelerator.clone()))
            .or_default() += ms as f64 / 3_600_000.0;
    }
    hours
        .into_iter()
        .map(|((pool, accelerator), hours)| SeenHours {
            pool,
            accelerator,
            hours,
        })
        .collect()
}

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
        let being_made: Vec<(String, String, i64)> = {
            let placed = self
                .pool_reports
                .placed
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            report
                .slices
                .iter()
                .filter(|s| s.state.is_alive())
                .filter(|s| !placed.contains(&s.pod) && self.live.pod_seen_as(&s.pod).is_none())
                .map(|s| {
                    let since = s.created_at.timestamp_millis().min(now_ms());
                    (s.pod.clone(), s.zone.clone(), since)
                })
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
                        for (pod, zone, since) in &made {
                            check_new_slice(conn, pod, *since).await?;
                            let slice = pods::NewSlice {
                                pod,
                                accelerator: &accelerator,
                                pool: &pool,
                                zone,
                                since: *since,
                            };
                            pods::being_made(conn, &slice).await?;
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
            placed.extend(being_made.into_iter().map(|(pod, _, _)| pod));
            for pod in &report.retired {
                placed.remove(pod);
            }
        }
        // Stored before the answer: the demand is routed over every pool's last report,
        // this one's included.
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
            .insert(name.to_owned(), (stored.clone(), Utc::now()));
        self.pool_answer(name, &stored).await
    }

    /// Pool `name`'s share of the queue and of the grant, and the creates it starts now
    /// ([`creates_to_start`]). A job's demand goes to the first slice type of its list whose
    /// pools can make a slice now (`routing`); each pool of that type is told the demand
    /// routed to its type plus the slices it is making itself. The hours other pools of its
    /// type have used since the grant began are not this pool's to use.
    async fn pool_answer(&self, name: &str, report: &PoolReport) -> Result<PoolAnswer> {
        let routed = self.routed_demand().await?;
        let own_booting = self.booting(report).count();
        let given = routed.get(&report.accelerator).map_or(0, |r| r.given);
        let demand = given.saturating_add(u32::try_from(own_booting).unwrap_or(u32::MAX));
        let grant = self.grant().await?;
        let seen = self.seen_hours(grant.as_ref().map(|g| g.start)).await?;
        let hours = |own: bool| -> f64 {
            seen.iter()
                .filter(|h| (h.pool == name) == own && h.accelerator == report.accelerator)
                .map(|h| h.hours)
                .sum()
        };
        let (own_hours, hours_elsewhere) = (hours(true), hours(false));
        let slices: Vec<SlicePod> = report
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
        let grant_pod_hours = grant
            .as_ref()
            .and_then(|g| g.pod_hours.get(&report.accelerator).copied())
            .map(|budget| (budget - hours_elsewhere).max(0.0));
        let running = slices.iter().filter(|s| s.leased).count() as u32;
        let spares = self.spares_for(report, running, grant_pod_hours).await?;
        let count = |keep: &dyn Fn(&SliceView, &SlicePod) -> bool| {
            let n = report
                .slices
                .iter()
                .zip(&slices)
                .filter(|(s, p)| keep(s, p));
            u32::try_from(n.count()).unwrap_or(u32::MAX)
        };
        let growth = Growth {
            given,
            keep: spares,
            idle_ready: count(&|s, p| {
                s.state == SliceState::Ready && p.seen_at.is_some() && !p.leased
            }),
            booting: u32::try_from(own_booting).unwrap_or(u32::MAX),
            alive: count(&|s, _| s.state.is_alive()),
            creating: count(&|s, _| s.state == SliceState::Creating),
            max_slices: report.max_slices,
            max_creating: report.max_creating,
            grant_spent: grant_pod_hours.is_some_and(|left| own_hours >= left),
        };
        Ok(PoolAnswer {
            demand,
            slices,
            grant_pod_hours,
            grant_start: grant.map(|g| g.start),
            spares,
            creates: creates_to_start(&growth),
        })
    }

    /// The spares the pools keep now, by slice type: pods held ready that no run is planned
    /// on, whose idle hours the plan books against the type's budget.
    pub(in crate::scheduler) async fn spares_kept(&self) -> Result<BTreeMap<String, u32>> {
        let reports: Vec<PoolReport> = self
            .pool_reports
            .lock()
            .values()
            .map(|(report, _)| report.clone())
            .collect();
        let mut kept: BTreeMap<String, u32> = BTreeMap::new();
        for report in reports {
            let running = report
                .slices
                .iter()
                .filter(|s| !self.live.of_pod(&s.pod).is_empty())
                .count() as u32;
            let n = self.spares_for(&report, running, None).await?;
            if n > 0 {
                *kept.entry(report.accelerator.clone()).or_default() += n;
            }
        }
        Ok(kept)
    }

    /// The ready, idle slices the pool keeps now (`spares.rs`), from its setting, its running
    /// slices, its type's measured interruptions and recoveries, and the grant.
    async fn spares_for(
        &self,
        report: &PoolReport,
        running: u32,
        grant_left_h: Option<f64>,
    ) -> Result<u32> {
        if running == 0 || report.spares == podq_api::Spares::Count(0) {
            return Ok(0);
        }
        let mut facts = spares::SpareFacts {
            running,
            mtbf_h: 0.0,
            measured_wait_s: None,
            grant_left_h,
        };
        if let podq_api::Spares::Auto(_) = report.spares {
            facts.measured_wait_s =
                crate::store::recoveries::medians_by_type(&self.recent_recoveries().await?)
                    .get(&report.accelerator)
                    .map(|m| m.waiting_s);
            let (observed, n) = crate::store::pod_time::interruption_history(
                &mut self.store.read().await?,
                &report.accelerator,
            )
            .await?;
            let prior = self.config.prior_mtbf.as_secs_f64();
            facts.mtbf_h = super::plan::advice::mtbf_s(observed, n, prior) / 3600.0;
        }
        Ok(spares::spares_to_keep(report.spares, &facts))
    }

    /// The demand routed to each slice type now, from the leasable queue and every pool's
    /// last report.
    async fn routed_demand(&self) -> Result<BTreeMap<String, routing::Routed>> {
        let lists = sql::leasable_lists(&mut self.store.read().await?).await?;
        let grant = self.grant().await?;
        let now = Utc::now();
        let mut capacity: BTreeMap<String, routing::TypeCapacity> = BTreeMap::new();
        let mut hours: BTreeMap<String, f64> = BTreeMap::new();
        let reports: Vec<(PoolReport, DateTime<Utc>)> =
            self.pool_reports.lock().values().cloned().collect();
        for (report, reported_at) in &reports {
            let entry = capacity.entry(report.accelerator.clone()).or_default();
            entry.has_pool = true;
            entry.supply += self.booting(report).count();
            // A pool that stopped reporting makes nothing: its claimed room is no room.
            if now - *reported_at <= REPORT_FRESH && can_make_now(report, now) {
                entry.headroom += headroom(report);
            }
        }
        for seen in self.seen_hours(grant.as_ref().map(|g| g.start)).await? {
            *hours.entry(seen.accelerator).or_default() += seen.hours;
        }
        // A pod made by hand of a type some job lists serves as well as a pool's.
        for accelerator in lists.iter().flatten() {
            capacity.entry(accelerator.clone()).or_default();
        }
        for (accelerator, entry) in &mut capacity {
            entry.supply += self.live.idle_pods(accelerator);
            let budget = grant
                .as_ref()
                .and_then(|g| g.pod_hours.get(accelerator).copied());
            if budget.is_some_and(|budget| hours.get(accelerator).copied().unwrap_or(0.0) >= budget)
            {
                entry.headroom = 0;
            }
        }
        Ok(routing::route(&lists, &capacity))
    }

    /// A pool's slices not yet serving: being made, or up with a worker not yet heard from.
    fn booting<'a>(&'a self, report: &'a PoolReport) -> impl Iterator<Item = &'a SliceView> {
        report.slices.iter().filter(|slice| {
            slice
                .state
                .is_booting(self.live.pod_seen_as(&slice.pod).is_some())
        })
    }

    /// The hours each pool's slices have run since `start` (all their lives without a
    /// grant), as this server saw them (`seen_hours`): a pool's own `slice_hours` is never
    /// believed, so one pool's report cannot spend another's grant.
    async fn seen_hours(&self, start: Option<DateTime<Utc>>) -> Result<Vec<SeenHours>> {
        let start_ms = start.map_or(0, |s| s.timestamp_millis());
        let pods = pods::pool_pods(&mut self.store.read().await?, start_ms).await?;
        let reported: BTreeMap<String, BTreeSet<String>> = self
            .pool_reports
            .lock()
            .iter()
            .map(|(name, (report, _))| {
                let held = report.slices.iter().map(|s| s.pod.clone()).collect();
                (name.clone(), held)
            })
            .collect();
        Ok(seen_hours(&pods, &reported, start_ms, now_ms()))
    }

    /// Every pool that has reported since this server started, with the queue's demand now.
    pub async fn pools(&self) -> Result<PoolsPage> {
        let reports: Vec<(String, PoolReport, DateTime<Utc>)> = self
            .pool_reports
            .lock()
            .iter()
            .map(|(name, (report, at))| (name.clone(), report.clone(), *at))
            .collect();
        let routed = self.routed_demand().await?;
        let grant = self.grant().await?;
        let seen = self.seen_hours(grant.as_ref().map(|g| g.start)).await?;
        let mut pools = Vec::new();
        for (name, report, reported_at) in reports {
            let slice_hours = seen
                .iter()
                .filter(|h| h.pool == name)
                .map(|h| h.hours)
                .sum();
            let of_type = routed.get(&report.accelerator).copied().unwrap_or_default();
            pools.push(PoolView {
                demand: of_type.given.saturating_add(
                    u32::try_from(self.booting(&report).count()).unwrap_or(u32::MAX),
                ),
                demand_passed_on: of_type.passed_on,
                name,
                accelerator: report.accelerator,
                max_slices: report.max_slices,
                slices: report.slices,
                zones: report.zones,
                paused: report.paused,
                slice_hours,
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
            for state in SliceState::ALL {
                let n = pool.slices.iter().filter(|s| s.state == state).count();
                t.pool_slices
                    .get_or_create(&label(&pool.name, state.as_str(), ""))
                    .set(n as i64);
            }
            for zone in &pool.zones {
                t.pool_zones
                    .get_or_create(&label(&pool.name, zone.state.as_str(), &zone.zone))
                    .set(1);
            }
        }
        Ok(())
    }
}

/// What decides how many slices a pool starts making now: its share of the queue, the spares
/// it keeps, and what it reported.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Growth {
    /// Jobs routed to the pool's type that no pod up or being made will take.
    given: u32,
    /// Ready, idle slices to keep (`spares_for`).
    keep: u32,
    /// Its slices READY whose worker calls and holds no lease: the spares it has.
    idle_ready: u32,
    /// Its slices booting (`SliceState::is_booting`): those no job takes are spares on their
    /// way.
    booting: u32,
    /// Its slices that hold or will hold capacity.
    alive: u32,
    /// Its slices `creating`: its creates in flight.
    creating: u32,
    max_slices: u32,
    max_creating: Option<u32>,
    /// Its hours since the grant began have spent what the grant leaves its type's pools.
    grant_spent: bool,
}

/// Creates a pool starts now: the jobs nothing else will take, and the spares it keeps beyond
/// those it has or is making (a slice booting counts as a spare on its way: one more is made
/// once a job took it), within `max_slices`, within `max_creating` creates in flight, and none
/// once the grant is spent. The pool's zones and the project's create rate bound them further
/// as each is started.
fn creates_to_start(g: &Growth) -> u32 {
    if g.grant_spent {
        return 0;
    }
    let spares = g
        .keep
        .saturating_sub(g.idle_ready.saturating_add(g.booting));
    g.given
        .saturating_add(spares)
        .min(g.max_slices.saturating_sub(g.alive))
        .min(
            g.max_creating
                .map_or(u32::MAX, |m| m.saturating_sub(g.creating)),
        )
}

/// Whether a pool, as it last reported, could make a slice now: not paused, below its
/// `max_slices`, with a zone that is open or whose retry time has passed.
fn can_make_now(report: &PoolReport, now: DateTime<Utc>) -> bool {
    report.paused.is_none()
        && headroom(report) > 0
        && report.zones.iter().any(|zone| {
            zone.state == ZoneState::Ready || zone.next_try_at.is_some_and(|at| at <= now)
        })
}

/// Slices a pool may still make under its `max_slices`.
fn headroom(report: &PoolReport) -> usize {
    let alive = report
        .slices
        .iter()
        .filter(|slice| slice.state.is_alive())
        .count();
    (report.max_slices as usize).saturating_sub(alive)
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
    if let Err(unknown) = podq_api::slice_type(&report.accelerator) {
        return invalid(podq_api::escape_controls(&unknown.to_string()));
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
    let bound = podq_api::report_list_bound(report.max_slices);
    if report.events.len() > bound || report.retired.len() > bound {
        return invalid(format!(
            "a report of a pool of max_slices {} carries at most {bound} events and {bound} \
             retired slices (it has {} and {}): send the rest in the next",
            report.max_slices,
            report.events.len(),
            report.retired.len()
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
    if let Some(bad) = names.into_iter().find(|n| !podq_api::is_pod_name(n)) {
        return invalid(format!(
            "`{}` is not a pod or zone name: {}",
            podq_api::escape_controls(bad),
            podq_api::POD_NAME_RULE
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

/// A pool's event as it may be stored: one of the pool's own kinds, its message bounded and
/// escaped as a worker's is.
fn checked_pool_event(event: &WorkerEvent) -> Result<WorkerEvent> {
    super::lease::progress::checked_as::<podq_api::PoolEventKind>(event, "a pool")
}

#[cfg(test)]
mod tests {
    use super::*;

    const H: i64 = 3_600_000;

    fn pod(pool: &str, name: &str, seen: i64, retired: Option<i64>, last: i64) -> pods::PoolPod {
        pods::PoolPod {
            pool: pool.into(),
            name: name.into(),
            accelerator: "v4-64".into(),
            pool_seen_at: seen,
            retired_at: retired,
            last_seen_at: last,
        }
    }

    #[test]
    fn creates_follow_the_demand_and_the_spares_within_every_bound() {
        let base = Growth {
            given: 4,
            keep: 0,
            idle_ready: 0,
            booting: 0,
            alive: 0,
            creating: 0,
            max_slices: 4,
            max_creating: Some(4),
            grant_spent: false,
        };
        let cases: Vec<(&str, Growth, u32)> = vec![
            ("four jobs, room for four: four at once", base, 4),
            (
                "what is being made took its jobs off the queue's demand",
                Growth {
                    given: 1,
                    booting: 3,
                    alive: 3,
                    creating: 3,
                    ..base
                },
                1,
            ),
            (
                "no more than max_slices",
                Growth {
                    given: 9,
                    alive: 3,
                    ..base
                },
                1,
            ),
            (
                "no more than max_creating in flight",
                Growth {
                    max_creating: Some(2),
                    ..base
                },
                2,
            ),
            (
                "creates in flight count against max_creating",
                Growth {
                    booting: 1,
                    alive: 1,
                    creating: 1,
                    max_creating: Some(2),
                    ..base
                },
                1,
            ),
            (
                "a report without max_creating: max_slices alone",
                Growth {
                    max_creating: None,
                    creating: 3,
                    alive: 3,
                    ..base
                },
                1,
            ),
            (
                "the grant is spent",
                Growth {
                    grant_spent: true,
                    ..base
                },
                0,
            ),
            ("no demand", Growth { given: 0, ..base }, 0),
            (
                "a spare short, nothing queued: one more",
                Growth {
                    given: 0,
                    keep: 1,
                    alive: 1,
                    ..base
                },
                1,
            ),
            (
                "a spare short and being made already: no second one",
                Growth {
                    given: 0,
                    keep: 1,
                    booting: 1,
                    alive: 2,
                    creating: 1,
                    ..base
                },
                0,
            ),
            (
                "a spare kept, idle: none",
                Growth {
                    given: 0,
                    keep: 1,
                    idle_ready: 1,
                    alive: 2,
                    ..base
                },
                0,
            ),
            (
                "a job and a spare: both, within max_slices",
                Growth {
                    given: 1,
                    keep: 1,
                    alive: 3,
                    ..base
                },
                1,
            ),
        ];
        for (case, growth, want) in cases {
            assert_eq!(creates_to_start(&growth), want, "{case}");
        }
    }

    #[test]
    fn a_pools_hours_are_what_the_server_saw_of_its_slices() {
        let now = 10 * H;
        let reported = BTreeMap::from([(
            "a".to_owned(),
            BTreeSet::from(["a-1".to_owned(), "a-3".to_owned()]),
        )]);
        let pods = [
            // Still reported: first seen to now.
            pod("a", "a-1", 6 * H, None, 6 * H),
            // Retired: first seen to retirement.
            pod("a", "a-2", 2 * H, Some(3 * H), 3 * H),
            // Seen before the grant began: counted from its start.
            pod("a", "a-3", 0, None, 0),
            // No longer reported, never retired: to its worker's last call.
            pod("a", "a-4", 4 * H, None, 5 * H),
            // Another pool's slice that never called and was dropped: nothing.
            pod("evil", "e-1", 9 * H, None, 9 * H),
        ];
        let seen = seen_hours(&pods, &reported, H, now);
        let hours = |pool: &str| seen.iter().find(|h| h.pool == pool).map(|h| h.hours);
        assert_eq!(hours("a"), Some(4.0 + 1.0 + 9.0 + 1.0));
        assert_eq!(hours("evil"), Some(0.0));
    }
}
