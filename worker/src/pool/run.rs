//! The process that drives a pool: every tick it lists the pool's labelled slices, tells the
//! server what it holds and hears the queue's demand, then makes, adopts, quarantines or
//! deletes slices. Each slice it holds runs the worker's own daemon (`daemon::run`), so a
//! slice leases, launches, supervises and recovers as a pod made by hand does.
//!
//! Killed at any moment, it loses nothing: the journal (`journal.rs`) says which labelled
//! slices are its own, so on restart it adopts those and deletes the rest, and the daemons it
//! starts again reattach to the running trainers as a restarted worker does.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use chrono::{DateTime, Utc};
use podq_api::{
    EventKind, PoolAnswer, PoolEventKind, PoolReport, SliceView, WorkerEvent, ZoneView as WireZone,
};
use tokio::task::{JoinHandle, JoinSet};
use tokio_util::sync::CancellationToken;

use super::classify::CreateError;
use super::cloud::{CloudSlice, SliceCloud, SliceSpec};
use super::compute::{self, ComputeCloud};
use super::config::{Pool, PoolApi, PoolDriver, Provisioning};
use super::decide::{self, Going};
use super::gcloud::GcloudCloud;
use super::journal::Journal;
use super::rate::CreateRate;
use super::sim::SimCloud;
use super::slice_life::{
    self, Action, At, Fact, Fate, Found, Heard, Owner, Phase, Record, Refusal, SliceLife,
};
use super::zones::ZoneBook;
use crate::client::{CallError, ServerClient};
use crate::daemon::{self, DaemonSettings};
use crate::pod::gcloud::{Api, Capacity, GcloudPod, GcloudSettings, Runner};
use crate::pod::local::LocalPod;
use crate::pod::PodDriver;

mod creates;
mod slices;

use slices::{slice_cloud, slice_driver, start_daemon, stop_daemon};

/// A slice that fails preflight this many times is deleted and never given another.
pub const QUARANTINE_AFTER: usize = 2;
/// How many of its newest given-up slices a restarted pool retires again.
const RESEND_RETIRED: usize = 256;
/// How long a slice's daemon is given to stop before it is aborted.
const DAEMON_STOP: Duration = Duration::from_secs(10);
/// How long a preempted slice's worker is given to end its attempt before the slice goes.
const PREEMPTED_GRACE: Duration = Duration::from_secs(20);

/// How a pool's process runs.
#[derive(Clone)]
pub struct PoolSettings {
    /// Between two looks at the cloud and the queue.
    pub tick: Duration,
    /// Where the journal, the sim cloud and each slice's worker state live.
    pub state_dir: PathBuf,
    /// Each slice's daemon, as a worker's (its `state_dir` is set per slice).
    pub daemon: DaemonSettings,
    /// Hosts of a slice (a gcloud slice's driver takes the count its node gives).
    pub hosts: u32,
    /// A gcloud pool's slices: the worker config's `gcloud:` section (zone, project and API
    /// are the pool's).
    pub gcloud: GcloudSettings,
    /// How long the sim cloud takes to make a slice.
    pub sim_create_time: Duration,
    /// Where the local driver's simulated cloud lives: several installations (each with its
    /// own state) may share one, as podq installations share a Google Cloud project.
    pub sim_cloud: PathBuf,
    /// A slice READY this long whose worker has never called is deleted and replaced: its
    /// setup or preflight is stuck, and it costs while it waits.
    pub boot_deadline: Duration,
    /// Creates a minute, shared by every pool of the process.
    pub create_rate: Arc<CreateRate>,
}

/// A slice the pool holds: its life (`slice_life.rs`), and its worker's daemon and hosts.
struct Held {
    life: SliceLife,
    driver: Option<Arc<LocalPod>>,
    daemon: Option<(CancellationToken, JoinHandle<()>)>,
}

/// What an event says beyond its slice's life: the words of the fact that caused it.
enum Words<'a> {
    None,
    /// A create answered, and the demand it was started for.
    Created(u32),
    Refused(&'a CreateError),
    /// A quarantine: its last failed preflight's words.
    Failure(&'a str),
}

/// A create's answer, from its task.
struct CreateAnswer {
    name: String,
    zone: String,
    /// The demand it was started for, for its event.
    demand: u32,
    result: Result<(), CreateError>,
}

/// The oldest `bound` of `queue`, taken out of it; the rest wait for the next report.
fn take_at_most<T>(queue: &mut Vec<T>, bound: usize) -> Vec<T> {
    let rest = queue.split_off(bound.min(queue.len()));
    std::mem::replace(queue, rest)
}

/// Where a pool's slices' hosts are, by driver.
enum SliceHosts {
    /// The local driver's simulated hosts, under the sim cloud.
    Local(Arc<SimCloud>),
    /// Cloud TPU VM nodes, reached through gcloud.
    Gcloud(Box<GcloudSettings>),
}

pub struct PoolRun {
    pool: Pool,
    cloud: Arc<dyn SliceCloud>,
    hosts: SliceHosts,
    client: ServerClient,
    settings: PoolSettings,
    journal: Journal,
    book: ZoneBook,
    /// Where the zone book is kept, so blocks and churn outlive a restart.
    book_path: PathBuf,
    held: BTreeMap<String, Held>,
    events: Vec<WorkerEvent>,
    /// Slices given back whose pods the server has not retired yet.
    retired: Vec<String>,
    /// A zone the next slice should avoid: the one a quarantined slice came from.
    avoid: Option<String>,
    /// When the grant began, as the server last said: hours are counted from then.
    grant_start: Option<DateTime<Utc>>,
    /// Slices labelled with this pool's name that another pool made: reported once each.
    foreign: BTreeSet<String>,
    /// The creates in flight, each on a task of its own, and the slice each is for.
    creates: JoinSet<CreateAnswer>,
    create_tasks: BTreeMap<tokio::task::Id, String>,
    /// The deletes in flight, by slice, so a slice is not deleted twice at once.
    deletes: JoinSet<String>,
    deleting: BTreeSet<String>,
}

impl PoolRun {
    /// A pool's process for `pool`, its state under `settings.state_dir`.
    pub fn new(pool: Pool, client: ServerClient, settings: PoolSettings) -> anyhow::Result<Self> {
        let root = settings.state_dir.join(&pool.name);
        std::fs::create_dir_all(&root)
            .with_context(|| format!("cannot make {}", root.display()))?;
        let (cloud, hosts) =
            slice_cloud(&pool, &settings).with_context(|| format!("pool {}", pool.name))?;
        let journal = Journal::open(&root.join("journal.json"))?;
        // A retirement the server may not have heard of before a crash: said again (the
        // server retires a pod once, whatever it is told after).
        let retired = journal.given_up(RESEND_RETIRED);
        let book_path = root.join("zones.json");
        let mut book = ZoneBook::new(pool.zones.iter().map(|z| z.zone.clone()));
        if let Some(saved) = std::fs::read(&book_path)
            .ok()
            .and_then(|bytes| serde_json::from_slice::<ZoneBook>(&bytes).ok())
        {
            book = book.restored(saved);
        }
        Ok(PoolRun {
            cloud,
            hosts,
            client,
            journal,
            book,
            book_path,
            held: BTreeMap::new(),
            events: Vec::new(),
            retired,
            avoid: None,
            foreign: BTreeSet::new(),
            grant_start: None,
            creates: JoinSet::new(),
            create_tasks: BTreeMap::new(),
            deletes: JoinSet::new(),
            deleting: BTreeSet::new(),
            pool,
            settings,
        })
    }

    /// Runs until `shutdown`; the slices and their trainers stay (a restart adopts them).
    pub async fn run(mut self, shutdown: CancellationToken) -> anyhow::Result<()> {
        tracing::info!(pool = %self.pool.name, "pool started");
        let mut tick = tokio::time::interval(self.settings.tick);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => break,
                _ = tick.tick() => {}
            }
            if let Err(e) = self.step(&shutdown).await {
                tracing::warn!(pool = %self.pool.name, error = %format!("{e:#}"), "pool step failed");
            }
        }
        // Creates and deletes in flight are left to the cloud: the journal holds every
        // create asked for, so a restart adopts what they made and deletes what it gave up.
        self.creates.abort_all();
        self.deletes.abort_all();
        for (_, held) in std::mem::take(&mut self.held) {
            if let Some(daemon) = held.daemon {
                stop_daemon(daemon).await;
            }
        }
        Ok(())
    }

    async fn step(&mut self, shutdown: &CancellationToken) -> anyhow::Result<()> {
        let now = Utc::now();
        self.collect_answers(now).await?;
        let listed = self
            .cloud
            .list(&self.pool.name)
            .await
            .map_err(anyhow::Error::msg)?;
        let strays = self.reconcile(&listed, now).await?;
        self.start_ready_daemons(shutdown)?;
        for (slice, why) in strays {
            self.delete_in_cloud(&slice.name, &slice.zone, why).await;
        }
        let report = self.report(now);
        let answer = match self.client.report_pool(&self.pool.name, &report).await {
            Ok(answer) => answer,
            Err(CallError::Shutdown) => return Ok(()),
            Err(e) => {
                // The events and retirements stay queued for the next report.
                let PoolReport {
                    mut events,
                    mut retired,
                    ..
                } = report;
                events.append(&mut self.events);
                retired.append(&mut self.retired);
                (self.events, self.retired) = (events, retired);
                return Err(e.into());
            }
        };
        self.grant_start = answer.grant_start;
        self.tend(&answer, now).await?;
        self.grow(&answer, now).await?;
        self.save_book()?;
        Ok(())
    }

    /// Starts the worker daemon of every ready slice that has none. Done before anything
    /// that may wait on the cloud (a create runs for minutes): a restarted pool's adopted
    /// slices must heartbeat their leases again within the server's lease TTL.
    fn start_ready_daemons(&mut self, shutdown: &CancellationToken) -> anyhow::Result<()> {
        let ready: Vec<String> = self
            .held
            .iter()
            .filter(|(_, held)| held.life.phase.is_up() && held.daemon.is_none())
            .map(|(name, _)| name.clone())
            .collect();
        for name in ready {
            let dir = self.slice_dir(&name);
            let held = self.held.get_mut(&name).expect("held");
            let driver = slice_driver(&self.pool, &self.settings, &self.hosts, &name, held)?;
            held.daemon = Some(start_daemon(
                &self.client,
                &self.settings,
                &name,
                driver,
                dir,
                shutdown,
            ));
        }
        Ok(())
    }

    /// Brings what the pool holds in line with what the cloud lists: adopts its own slices,
    /// and notes the ones that died or vanished. Answers the listed slices it does not hold,
    /// to delete (once the adopted slices' daemons run: a delete takes minutes).
    async fn reconcile<'a>(
        &mut self,
        listed: &'a [CloudSlice],
        now: DateTime<Utc>,
    ) -> anyhow::Result<Vec<(&'a CloudSlice, &'static str)>> {
        let mut strays = Vec::new();
        let by_name: BTreeMap<&str, &CloudSlice> =
            listed.iter().map(|s| (s.name.as_str(), s)).collect();
        for slice in listed {
            if self.held.contains_key(&slice.name) {
                continue;
            }
            let owner = match slice.owner.as_deref() {
                Some(owner) if owner == self.journal.owner() => Owner::Ours,
                None => Owner::Unlabelled,
                Some(_) => Owner::Another,
            };
            let record = if self.journal.held(&slice.name).is_some() {
                Record::Held
            } else if self.journal.knows(&slice.name) {
                Record::GivenUp
            } else {
                Record::Unknown
            };
            match slice_life::found(slice.state, owner, record) {
                Found::Adopt => {
                    tracing::info!(pool = %self.pool.name, slice = %slice.name, "adopted");
                    let held = Held::unheld(&slice.zone, slice.created_at);
                    let fact = Fact::Adopted(slice.state);
                    self.learn(&slice.name, held, fact, Words::None, now)
                        .await?;
                }
                Found::Delete { why, retire } => {
                    strays.push((slice, why));
                    if retire {
                        self.retire(&slice.name);
                    }
                }
                Found::NameTaken => {
                    self.journal.gone(&slice.name, now)?;
                    self.retire(&slice.name);
                    self.report_foreign(slice);
                }
                Found::Foreign => self.report_foreign(slice),
            }
        }
        // A request written down whose create never reached the cloud: nothing to adopt.
        let unsent: Vec<String> = self
            .journal
            .open_requests()
            .filter(|(name, _)| {
                !by_name.contains_key(name.as_str()) && !self.held.contains_key(*name)
            })
            .map(|(name, _)| name.clone())
            .collect();
        for name in unsent {
            self.journal.gone(&name, now)?;
        }
        let names: Vec<String> = self.held.keys().cloned().collect();
        for name in names {
            let fact = match by_name.get(name.as_str()) {
                Some(slice) => Fact::Listed(slice.state),
                None => Fact::NotListed,
            };
            let held = self.held.remove(&name).expect("held");
            self.learn(&name, held, fact, Words::None, now).await?;
        }
        Ok(strays)
    }

    /// What the pool learns of slice `name`, which it holds as `held` (taken out of
    /// `self.held`): its life advances (`slice_life.rs`), it is held again unless it is
    /// gone, and the pool carries out what the change asks, in its order.
    async fn learn(
        &mut self,
        name: &str,
        mut held: Held,
        fact: Fact,
        words: Words<'_>,
        now: DateTime<Utc>,
    ) -> anyhow::Result<()> {
        let at = At {
            wall: now,
            mono: tokio::time::Instant::now(),
        };
        let (life, actions) = held.life.advance(fact, at);
        held.life = life.clone();
        // Its new state before anything that may fail: a slice left in flight would hold a
        // create's place for good.
        let mut leaving = None;
        if matches!(life.phase, Phase::Gone | Phase::Unheld) {
            leaving = Some(held);
        } else {
            self.held.insert(name.to_owned(), held);
        }
        let (zone, born) = (life.zone.as_str(), life.created_at);
        for action in actions {
            match action {
                Action::JournalCreated => self.journal.created(name, born)?,
                Action::JournalGone => self.journal.gone(name, now)?,
                Action::ZoneBirth => self.book.record_birth(zone, born),
                Action::ZoneSuccess => self.book.record_success(zone, now),
                Action::ZoneError => {
                    if let Words::Refused(error) = &words {
                        self.book.record_error(
                            zone,
                            error,
                            &error.text,
                            now,
                            rand::random::<f64>() * 2.0 - 1.0,
                        );
                    }
                }
                Action::ZoneDeath => self.book.record_death(zone, born, now),
                Action::ZoneRemoved => self.book.record_removed(zone, born, now),
                Action::AvoidZone => self.avoid = Some(zone.to_owned()),
                Action::NoteForeign => {
                    self.foreign.insert(name.to_owned());
                }
                Action::Event(kind) => {
                    let message = self.words(name, &life, fact, &words);
                    self.event(kind, message);
                }
                Action::StopWorker => {
                    if let Some(held) = leaving.take() {
                        stop(held).await;
                    }
                }
                Action::Retire => self.retire(name),
                Action::Delete => {
                    let why = match fact {
                        Fact::Fate(fate) => Going::from(fate).as_str(),
                        _ => "given up",
                    };
                    self.delete_in_cloud(name, zone, why).await;
                }
            }
        }
        Ok(())
    }

    /// What the event of `fact` says of slice `name`.
    fn words(&self, name: &str, life: &SliceLife, fact: Fact, words: &Words<'_>) -> String {
        let zone = &life.zone;
        match (fact, words) {
            (Fact::CreateOk, Words::Created(demand)) => {
                format!("{name} in {zone} for {demand} queued job(s)")
            }
            (Fact::CreateRefused(_), Words::Refused(error)) => format!(
                "{zone}: {:?} ({:?}): {}",
                error.kind, error.scope, error.text
            ),
            (Fact::NotListed, _) => format!("{name} vanished from {}", self.pool.name),
            (Fact::Fate(Fate::Quarantined), Words::Failure(failure)) => format!(
                "{name} in {zone} failed preflight {QUARANTINE_AFTER} times ({failure}): \
                 deleted and replaced"
            ),
            (Fact::Fate(Fate::Silent), _) => format!(
                "{name} in {zone} was READY for {}s and its worker never called: deleted and \
                 replaced",
                self.settings.boot_deadline.as_secs()
            ),
            (Fact::Fate(Fate::Idle), _) => {
                format!("{name} in {zone} had no lease for its idle_after")
            }
            (Fact::Fate(Fate::Preempted), _) => format!("{name} in {zone} was preempted"),
            (fact, _) => format!("{name} in {zone}: {}", fact.name()),
        }
    }

    /// Says once that `slice`, labelled with this pool's name, is another owner's and is
    /// left alone.
    fn report_foreign(&mut self, slice: &CloudSlice) {
        if !self.foreign.insert(slice.name.clone()) {
            return;
        }
        let owner = slice.owner.as_deref().unwrap_or("none");
        self.event(
            PoolEventKind::SliceForeign,
            format!(
                "{} in {} carries the label of pool {} but another owner ({owner}); left alone",
                slice.name, slice.zone, self.pool.name
            ),
        );
    }

    /// Acts on what the server knows of each slice: idle ones go after `idle_after`, ones
    /// that failed preflight twice are quarantined, preempted ones go once their worker has
    /// ended its attempt.
    async fn tend(&mut self, answer: &PoolAnswer, now: DateTime<Utc>) -> anyhow::Result<()> {
        let limits = decide::Limits {
            preempted_grace: PREEMPTED_GRACE,
            quarantine_after: QUARANTINE_AFTER,
            boot_deadline: self.settings.boot_deadline,
            idle_after: self.pool.idle_after,
        };
        let mono = tokio::time::Instant::now();
        let mut going: Vec<(String, Going)> = Vec::new();
        let mut spares_kept = 0;
        for pod in &answer.slices {
            let Some(mut held) = self.held.remove(&pod.pod) else {
                continue;
            };
            if let Some(at) = pod
                .preflight
                .as_ref()
                .filter(|p| !p.passed)
                .and_then(|p| p.at)
            {
                held.life.preflight_failed(at);
            }
            self.learn(
                &pod.pod,
                held,
                Fact::Heard(Heard::of(pod)),
                Words::None,
                now,
            )
            .await?;
            let Some(held) = self
                .held
                .get(&pod.pod)
                .filter(|h| !h.life.phase.in_flight())
            else {
                continue;
            };
            match decide::fate(&held.life.facts(mono), pod, &limits, now) {
                // Idle past its time, but one of the spares the server says to keep.
                Some(Going::Idle) if spares_kept < answer.spares => spares_kept += 1,
                Some(why) => going.push((pod.pod.clone(), why)),
                None => {}
            }
        }
        for (name, why) in going {
            let held = self.held.remove(&name).expect("held");
            let words = match &why {
                Going::Quarantined(failure) => Words::Failure(failure),
                _ => Words::None,
            };
            self.learn(&name, held, Fact::Fate(Fate::of(&why)), words, now)
                .await?;
        }
        Ok(())
    }

    /// Starts the creates the server answered (`PoolAnswer::creates`: it judged the queue's
    /// demand, the spares, `max_slices`, `max_creating` and the grant from this tick's
    /// report), each on a task of its own, as each zone's `max_creating` and the
    /// project-wide create rate allow.
    async fn grow(&mut self, answer: &PoolAnswer, now: DateTime<Utc>) -> anyhow::Result<()> {
        for _ in 0..answer.creates {
            let Some(zone) = self.zone_for_create(now) else {
                break;
            };
            if !self.settings.create_rate.try_take() {
                tracing::info!(pool = %self.pool.name, wait_s = self.settings.create_rate.wait_for_next().as_secs_f64(), "the project's create rate is spent: the next create waits");
                break;
            }
            self.start_create(zone, answer.demand, now).await?;
        }
        Ok(())
    }

    fn report(&mut self, now: DateTime<Utc>) -> PoolReport {
        let bound = podq_api::report_list_bound(self.pool.max_slices);
        PoolReport {
            accelerator: self.pool.accelerator.clone(),
            max_slices: self.pool.max_slices,
            slices: self
                .held
                .iter()
                .map(|(name, held)| SliceView {
                    pod: name.clone(),
                    zone: held.life.zone.clone(),
                    state: held.life.phase.state(),
                    created_at: held.life.created_at,
                    idle_since: held.life.idle_since,
                })
                .collect(),
            zones: self
                .book
                .view(now)
                .into_iter()
                .map(|z| WireZone {
                    zone: z.zone,
                    state: z.state,
                    next_try_at: z.next_try_at,
                    last_error: z.last_error,
                })
                .collect(),
            events: take_at_most(&mut self.events, bound),
            paused: self.book.paused().map(str::to_owned),
            slice_hours: self.journal.slice_hours(self.grant_start, now),
            retired: take_at_most(&mut self.retired, bound),
            spares: self.pool.spares,
            max_creating: Some(self.pool.max_creating),
        }
    }

    fn save_book(&self) -> anyhow::Result<()> {
        let tmp = self.book_path.with_extension("tmp");
        std::fs::write(&tmp, serde_json::to_vec(&self.book)?)
            .with_context(|| format!("cannot write {}", tmp.display()))?;
        std::fs::rename(&tmp, &self.book_path)
            .with_context(|| format!("cannot write {}", self.book_path.display()))
    }

    /// Tells the server, at the next report, that the pod of slice `name` is given back;
    /// once, however many looks find it on its way out.
    fn retire(&mut self, name: &str) {
        if !self.retired.iter().any(|r| r == name) {
            self.retired.push(name.to_owned());
        }
    }

    fn event(&mut self, kind: PoolEventKind, message: String) {
        tracing::info!(pool = %self.pool.name, kind = kind.as_str(), %message, "pool event");
        self.events.push(WorkerEvent::of(kind, message));
    }

    /// Deletes slice `name` on a task of its own: a delete takes minutes, and the loop keeps
    /// its rhythm meanwhile. A delete that fails is tried again when the next listing finds
    /// the slice a stray.
    async fn delete_in_cloud(&mut self, name: &str, zone: &str, why: &str) {
        if !self.deleting.insert(name.to_owned()) {
            return;
        }
        tracing::info!(pool = %self.pool.name, slice = name, why, "deleting slice");
        if let SliceHosts::Local(sim) = &self.hosts {
            // The hosts go with the slice, trainers included: its simulated hosts' processes
            // are found from their pid files, whether or not this process started them.
            LocalPod::new(
                name,
                &self.pool.accelerator,
                self.settings.hosts,
                &sim.pod_root(name),
                Duration::ZERO,
            )
            .map(|pod| pod.power_off())
            .ok();
        }
        let cloud = Arc::clone(&self.cloud);
        let state_dir = matches!(self.hosts, SliceHosts::Gcloud(_)).then(|| self.slice_dir(name));
        let (name, zone, pool) = (name.to_owned(), zone.to_owned(), self.pool.name.clone());
        self.deletes.spawn(async move {
            match cloud.delete(&name, &zone).await {
                Ok(()) => {
                    if let Some(dir) = state_dir {
                        let _ = std::fs::remove_dir_all(dir);
                    }
                }
                Err(e) => {
                    tracing::warn!(%pool, slice = %name, error = %e, "delete failed; the next look retries");
                }
            }
            name
        });
    }

    /// Where slice `name`'s worker keeps its state (and a simulated slice its hosts).
    fn slice_dir(&self, name: &str) -> PathBuf {
        match &self.hosts {
            SliceHosts::Local(sim) => sim.pod_root(name),
            SliceHosts::Gcloud(_) => self
                .settings
                .state_dir
                .join(&self.pool.name)
                .join("slices")
                .join(name),
        }
    }
}

impl Held {
    /// A slice in `zone` not held yet: its create is asked for next, or it is adopted.
    fn unheld(zone: &str, created_at: DateTime<Utc>) -> Held {
        Held {
            life: SliceLife::unheld(zone, created_at),
            driver: None,
            daemon: None,
        }
    }
}

/// Stops a slice's daemon, so it asks for no more work, then powers its hosts off.
async fn stop(held: Held) {
    if let Some(daemon) = held.daemon {
        stop_daemon(daemon).await;
    }
    if let Some(driver) = &held.driver {
        driver.power_off();
    }
}
