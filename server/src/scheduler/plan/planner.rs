//! The grant planner: projects every run of the catalog onto the pods, under today's order
//! and under the order that completes the most whole groups before the deadline. Pure: the
//! caller gathers the runs and the clock. The method is explained in docs/plan.md.
//!
//! A group is complete when every distinct run it needs has finished; a run shared by
//! several groups (the baseline) counts for all of them, once. Choosing the groups is a
//! set-union knapsack. Catalogs have few groups (the study has 14), so every subset is tried
//! (2^14 = 16,384 choices, most discarded at once because their hours exceed the
//! capacity); above `EXACT_GROUPS` groups a greedy
//! choice by smallest added cost is used and the plan says so in docs.
//!
//! A group with rungs (`catalog/rungs.rs`) plays its runs with the pod-hours the rungs leave
//! ([`rung_cuts`]): n runs to its first rung, ⌈n × keep⌉ past it, and so on
//! (`rungs::runs_per_stretch`), the baseline row always to its end. Under `keep: auto`,
//! [`choose_auto_keeps`] picks each such group's share before the plan is made.

use std::cmp::Reverse;
use std::collections::BTreeMap;

use chrono::{DateTime, Duration, Utc};
use podq_api::{
    EstimateSource, GroupPlan, GroupRungsPlan, JobId, JobState, PlannedRun, Projection, RunState,
    RungOutlook,
};

use crate::catalog::rungs::{Keep, Rungs};
use crate::scheduler::rungs::{largest_keep, runs_per_stretch};

/// Up to this many groups the planner tries every subset.
pub const EXACT_GROUPS: usize = 16;

/// What the planner does with a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Finished: needs no pod time.
    Done,
    /// On a pod now: first in every order.
    OnPod,
    /// Queued, or not submitted yet: the planner may place it anywhere after the runs on a pod.
    Waiting,
    /// Failed, held or cancelled: will not run unless a person requeues it.
    Blocked,
}

/// Class rank, evicted first (reversed), priority (reversed), submission order.
pub type QueueOrder = (i64, Reverse<i64>, Reverse<i64>, i64);

#[derive(Debug, Clone)]
pub struct Run {
    pub job_id: Option<JobId>,
    pub experiment: String,
    pub group: String,
    /// As shown: a job state, or `not_submitted`.
    pub state: RunState,
    pub phase: Phase,
    pub priority: Option<i64>,
    /// Its place in today's order among waiting runs, as the claim orders them: class rank,
    /// an evicted job first in its class, priority, submission (then suite order for runs
    /// never submitted).
    pub order: QueueOrder,
    pub remaining_hours: f64,
    pub estimate: EstimateSource,
    pub also_finishes: Vec<String>,
    /// The slice type `remaining_hours` is reckoned on: the type its latest measured attempt
    /// ran on, else the one it prefers.
    pub accelerator: String,
    /// The other slice types it may run on, each with its hours there per hour on
    /// `accelerator` (`speed::Speeds::factor`).
    pub elsewhere: Vec<(String, f64)>,
    /// Of `remaining_hours`: work expected to be redone after interruptions, at the run's
    /// checkpoint interval and its pod type's interruption rate.
    pub expected_waste_hours: f64,
    pub checkpoint_advice: Option<podq_api::CheckpointAdvice>,
    /// The share of its steps done (0 before its first step): where it stands against its
    /// group's rungs.
    pub done_share: f64,
}

#[derive(Debug, Clone)]
pub struct Group {
    pub name: String,
    /// Indices into the runs, one per distinct run the group needs.
    pub runs: Vec<usize>,
    /// Its rungs, if it has any.
    pub rungs: Option<GroupRungs>,
}

/// A group's rungs as the plan plays them.
#[derive(Debug, Clone)]
pub struct GroupRungs {
    /// As the catalog gives them (`keep` as written, `auto` included).
    pub rungs: Rungs,
    /// The share kept past each rung in force: the written one, or the choice for `auto`
    /// ([`choose_auto_keeps`]; 1, nothing pruned, until it is made).
    pub keep: f64,
    /// The run of its `baseline_row` (an index into the runs): never pruned.
    pub baseline: Option<usize>,
}

impl GroupRungs {
    /// `rungs` with the share in force: the written one, else `auto_keep`.
    pub fn new(rungs: Rungs, auto_keep: f64, baseline: Option<usize>) -> GroupRungs {
        GroupRungs {
            keep: rungs.keep.share().unwrap_or(auto_keep),
            rungs,
            baseline,
        }
    }

    pub fn is_auto(&self) -> bool {
        self.rungs.keep == Keep::Auto
    }
}

/// The pods of one accelerator type: a run plays out only on its own type's pods, and spends
/// only its own type's budget.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Pool {
    /// At least 1: a type with no pod yet is planned as if one will come.
    pub pods: usize,
    /// Pod-hours the grant's budget for this type has left, if it has one.
    pub budget_hours: Option<f64>,
}

impl Default for Pool {
    fn default() -> Self {
        Pool {
            pods: 1,
            budget_hours: None,
        }
    }
}

#[derive(Debug, Clone)]
pub struct Limits {
    pub now: DateTime<Utc>,
    pub deadline: Option<DateTime<Utc>>,
    /// By accelerator type.
    pub pools: BTreeMap<String, Pool>,
    /// Every estimate is multiplied by this (preemption overhead).
    pub overhead_factor: f64,
}

impl Limits {
    pub fn pool(&self, accelerator: &str) -> Pool {
        self.pools.get(accelerator).copied().unwrap_or_default()
    }

    /// Whether anything can fail to fit: a deadline or a budget.
    pub fn has_limit(&self) -> bool {
        self.deadline.is_some() || self.pools.values().any(|p| p.budget_hours.is_some())
    }
}

pub struct Planned {
    pub current: Projection,
    pub recommended: Projection,
    pub groups: Vec<GroupPlan>,
    /// The recommended order of the waiting runs (indices into the runs).
    pub recommended_order: Vec<usize>,
    /// Pod-hours the rungs are expected to save over the runs still to go.
    pub saved_by_rungs: f64,
}

/// What the groups' rungs leave of each run, and what they expect at each rung.
#[derive(Debug, Clone)]
pub struct RungCuts {
    /// Per run, the share of its remaining hours it is expected to train: 1 for a run that
    /// goes on to its end, less for one expected to be pruned at a rung.
    pub played: Vec<f64>,
    /// Per group with rungs: each rung's expected runs, promotions and prunes.
    pub per_rung: Vec<Option<Vec<RungOutlook>>>,
}

impl RungCuts {
    /// The runs with their remaining hours (and the work expected to be redone in them) cut
    /// to what they are expected to train.
    pub fn apply(&self, runs: &[Run]) -> Vec<Run> {
        runs.iter()
            .zip(&self.played)
            .map(|(run, share)| Run {
                remaining_hours: run.remaining_hours * share,
                expected_waste_hours: run.expected_waste_hours * share,
                ..run.clone()
            })
            .collect()
    }

    /// Pod-hours (before the overhead factor) the rungs save over `runs` still to go: over
    /// the members of `group`, else every run.
    pub fn saved_hours(&self, runs: &[Run], group: Option<&Group>) -> f64 {
        let saved = |i: usize| match runs[i].phase {
            Phase::OnPod | Phase::Waiting => runs[i].remaining_hours * (1.0 - self.played[i]),
            _ => 0.0,
        };
        match group {
            Some(g) => g.runs.iter().map(|&i| saved(i)).sum(),
            None => (0..runs.len()).map(saved).sum(),
        }
    }
}

/// A margin for rung places compared as shares.
const AT_EPSILON: f64 = 1e-9;

/// Where each run of a group with rungs is expected to stop, as a share of its steps (1 for
/// its end). Which runs will go on is not known ahead: the baseline row first, then the runs
/// that are done (a `stopped` one last), then those furthest along, then the longest to go,
/// then catalog order, take the places `runs_per_stretch` keeps past each rung. A run already
/// past the rung it would stop at went on there: it stops at its group's next rung beyond
/// where it stands, else at its end.
fn stops_in_group(runs: &[Run], group: &Group, gr: &GroupRungs) -> Vec<(usize, f64)> {
    let at = &gr.rungs.at;
    let counts = runs_per_stretch(group.runs.len(), at.len(), gr.keep);
    let mut order: Vec<(usize, usize)> = group.runs.iter().copied().enumerate().collect();
    order.sort_by(|&(pa, a), &(pb, b)| {
        let key = |i: usize| {
            (
                Some(i) != gr.baseline,
                runs[i].state == RunState::Job(JobState::Stopped),
            )
        };
        key(a)
            .cmp(&key(b))
            .then(runs[b].done_share.total_cmp(&runs[a].done_share))
            .then(runs[b].remaining_hours.total_cmp(&runs[a].remaining_hours))
            .then(pa.cmp(&pb))
    });
    order
        .into_iter()
        .enumerate()
        .map(|(place, (_, i))| {
            // The stretches it trains: the first, and each past a rung that keeps it.
            let stretches = counts.iter().take_while(|&&kept| place < kept).count();
            let mut stop = if Some(i) == gr.baseline || stretches > at.len() {
                1.0
            } else {
                at[stretches.max(1) - 1]
            };
            let done = runs[i].done_share;
            if stop < 1.0 && done >= stop - AT_EPSILON {
                stop = at
                    .iter()
                    .copied()
                    .find(|&a| a > done + AT_EPSILON)
                    .unwrap_or(1.0);
            }
            (i, stop)
        })
        .collect()
}

/// What the groups' rungs leave of each run. A run of several groups trains as far as the
/// one that needs the most of it (a group without rungs needs all of it).
pub fn rung_cuts(runs: &[Run], groups: &[Group]) -> RungCuts {
    let mut stop: Vec<Option<f64>> = vec![None; runs.len()];
    for group in groups {
        let stops = match &group.rungs {
            Some(gr) => stops_in_group(runs, group, gr),
            None => group.runs.iter().map(|&i| (i, 1.0)).collect(),
        };
        for (i, s) in stops {
            stop[i] = Some(stop[i].map_or(s, |t: f64| t.max(s)));
        }
    }
    let stop: Vec<f64> = stop.into_iter().map(|s| s.unwrap_or(1.0)).collect();
    let played = runs
        .iter()
        .zip(&stop)
        .map(|(run, &s)| {
            let done = run.done_share.clamp(0.0, 1.0);
            if s >= 1.0 || done >= 1.0 {
                1.0
            } else {
                ((s - done) / (1.0 - done)).clamp(0.0, 1.0)
            }
        })
        .collect();
    let per_rung = groups
        .iter()
        .map(|group| {
            let gr = group.rungs.as_ref()?;
            Some(
                gr.rungs
                    .at
                    .iter()
                    .map(|&at| {
                        let reach = |past: bool| {
                            group
                                .runs
                                .iter()
                                .filter(|&&i| {
                                    if past {
                                        stop[i] > at + AT_EPSILON
                                    } else {
                                        stop[i] >= at - AT_EPSILON
                                    }
                                })
                                .count()
                        };
                        let (reached, promoted) = (reach(false), reach(true));
                        RungOutlook {
                            at,
                            runs: reached,
                            promoted,
                            pruned: reached - promoted,
                        }
                    })
                    .collect(),
            )
        })
        .collect();
    RungCuts { played, per_rung }
}

/// Chooses the share kept for each group under `keep: auto`: the largest (`largest_keep`) for
/// which the recommended plan still completes as many whole groups as it would with every
/// such group pruned the most (one run past each rung). When the grant holds the suite, or
/// pruning completes no more groups, or there is neither a deadline nor a budget, that is 1:
/// nothing is pruned. Groups are chosen for in suite order, each with the later ones still
/// pruned the most, so a group earlier in the suite (the user's own order) keeps more.
pub fn choose_auto_keeps(runs: &[Run], groups: &mut [Group], limits: &Limits) {
    let auto: Vec<usize> = (0..groups.len())
        .filter(|&g| groups[g].rungs.as_ref().is_some_and(GroupRungs::is_auto))
        .collect();
    let set = |groups: &mut [Group], g: usize, keep: f64| {
        if let Some(gr) = groups[g].rungs.as_mut() {
            gr.keep = keep;
        }
    };
    for &g in &auto {
        set(groups, g, 1.0);
    }
    if auto.is_empty() || !limits.has_limit() {
        return;
    }
    let whole = |groups: &[Group]| whole_groups_recommended(runs, groups, limits);
    let unpruned = whole(groups);
    if unpruned == groups.len() {
        return;
    }
    let least = |groups: &[Group], g: usize| 1.0 / groups[g].runs.len().max(1) as f64;
    for &g in &auto {
        set(groups, g, least(groups, g));
    }
    let target = whole(groups);
    if unpruned >= target {
        for &g in &auto {
            set(groups, g, 1.0);
        }
        return;
    }
    for &g in &auto {
        let n = groups[g].runs.len();
        let rungs = groups[g].rungs.as_ref().map_or(0, |gr| gr.rungs.at.len());
        // Shares that keep the same runs past every rung play the same plan.
        let mut tried: BTreeMap<Vec<usize>, bool> = BTreeMap::new();
        let chosen = largest_keep(n, |keep| {
            let counts = runs_per_stretch(n, rungs, keep);
            if let Some(&fits) = tried.get(&counts) {
                return fits;
            }
            set(groups, g, keep);
            let fits = whole(groups) >= target;
            tried.insert(counts, fits);
            fits
        });
        let keep = chosen.unwrap_or_else(|| least(groups, g));
        set(groups, g, keep);
    }
}

/// Whole groups the recommended order completes.
fn whole_groups_recommended(runs: &[Run], groups: &[Group], limits: &Limits) -> usize {
    let runs = rung_cuts(runs, groups).apply(runs);
    let (on_pod, waiting) = on_pod_and_waiting(&runs);
    let order = recommended_order(&runs, groups, limits, &on_pod, &waiting);
    let full: Vec<usize> = on_pod.iter().chain(&order).copied().collect();
    Timeline::play(&runs, &full, limits).score(&runs, groups).0
}

/// The runs on a pod, and the waiting runs in today's order.
fn on_pod_and_waiting(runs: &[Run]) -> (Vec<usize>, Vec<usize>) {
    let on_pod: Vec<usize> = (0..runs.len())
        .filter(|&i| runs[i].phase == Phase::OnPod)
        .collect();
    let mut waiting: Vec<usize> = (0..runs.len())
        .filter(|&i| runs[i].phase == Phase::Waiting)
        .collect();
    waiting.sort_by_key(|&i| runs[i].order);
    (on_pod, waiting)
}

/// How good an order is: (whole groups, runs that fit), then which groups are whole.
type Rank = ((usize, usize), Reverse<Vec<usize>>);

/// Where a run lands on the pods: start, end, and whether it fits the limits.
type Slot = (DateTime<Utc>, DateTime<Utc>, bool);

/// Where a run would land on one of its types: over that type's budget, which of its types
/// (as `Timeline::types`), that type's pool and lane, when it would start and end there, and
/// its hours there.
#[derive(Clone, Copy)]
struct Landing {
    over: bool,
    option: usize,
    pool: usize,
    lane: usize,
    start: DateTime<Utc>,
    end: DateTime<Utc>,
    hours: f64,
}

/// One slice type's pods as an order is played out: when each frees up, and the hours spent.
struct Lanes<'a> {
    accelerator: &'a str,
    lanes: Vec<DateTime<Utc>>,
    spent: f64,
    pool: Pool,
}

/// The index of `accelerator`'s lanes in `pools`, added when first needed.
fn lanes_of<'a>(pools: &mut Vec<Lanes<'a>>, accelerator: &'a str, limits: &Limits) -> usize {
    if let Some(k) = pools.iter().position(|p| p.accelerator == accelerator) {
        return k;
    }
    let pool = limits.pool(accelerator);
    pools.push(Lanes {
        accelerator,
        lanes: vec![limits.now; pool.pods.max(1)],
        spent: 0.0,
        pool,
    });
    pools.len() - 1
}

/// Where a run of `hours` there would land on `pools[k]`: its first lane to free up.
fn landing(pools: &[Lanes], k: usize, option: usize, hours: f64, now: DateTime<Utc>) -> Landing {
    let Lanes {
        lanes, spent, pool, ..
    } = &pools[k];
    let (lane, start) = lanes
        .iter()
        .copied()
        .enumerate()
        .min_by_key(|(_, t)| *t)
        .unwrap_or((0, now));
    Landing {
        over: pool.budget_hours.is_some_and(|b| spent + hours > b + 1e-9),
        option,
        pool: k,
        lane,
        start,
        end: start + Duration::seconds((hours * 3600.0).round() as i64),
        hours,
    }
}

/// One order played out on the pods.
struct Timeline {
    /// Per run, or None for a run the order leaves out.
    slots: Vec<Option<Slot>>,
    /// Per run, which of its types it is played out on: 0 its own, `k` its `elsewhere[k - 1]`.
    types: Vec<Option<usize>>,
}

impl Timeline {
    fn play(runs: &[Run], order: &[usize], limits: &Limits) -> Timeline {
        // A pool's lanes, spent hours and limits, found by a short linear search: there
        // are one or two accelerator types, and this runs once per candidate order.
        let mut pools: Vec<Lanes> = Vec::new();
        let mut slots = vec![None; runs.len()];
        let mut types = vec![None; runs.len()];
        for &i in order {
            let run = &runs[i];
            let hours = run.remaining_hours * limits.overhead_factor;
            // The run lands on whichever of its types' pods frees up to finish it first
            // (within its type's budget first, then the earliest end, then the type it
            // prefers); another type counts only where pods of it are expected.
            let own = lanes_of(&mut pools, &run.accelerator, limits);
            let mut best = landing(&pools, own, 0, hours, limits.now);
            for (k, (accelerator, factor)) in run.elsewhere.iter().enumerate() {
                if !limits.pools.contains_key(accelerator) {
                    continue;
                }
                let there = lanes_of(&mut pools, accelerator, limits);
                let candidate = landing(&pools, there, k + 1, hours * factor, limits.now);
                if (candidate.over, candidate.end) < (best.over, best.end) {
                    best = candidate;
                }
            }
            let Landing {
                option,
                pool: k,
                lane,
                start,
                end,
                hours,
                ..
            } = best;
            let Lanes {
                lanes, spent, pool, ..
            } = &mut pools[k];
            lanes[lane] = end;
            *spent += hours;
            let fits = limits.deadline.is_none_or(|d| end <= d)
                && pool.budget_hours.is_none_or(|b| *spent <= b + 1e-9);
            slots[i] = Some((start, end, fits));
            types[i] = Some(option);
        }
        Timeline { slots, types }
    }

    fn run_fits(&self, runs: &[Run], i: usize) -> bool {
        runs[i].phase == Phase::Done || self.slots[i].is_some_and(|(_, _, fits)| fits)
    }

    fn group_fits(&self, runs: &[Run], group: &Group) -> bool {
        group.runs.iter().all(|&i| self.run_fits(runs, i))
    }

    fn group_end(&self, runs: &[Run], group: &Group, now: DateTime<Utc>) -> Option<DateTime<Utc>> {
        group.runs.iter().try_fold(now, |latest, &i| {
            if runs[i].phase == Phase::Done {
                return Some(latest);
            }
            self.slots[i].map(|(_, end, _)| latest.max(end))
        })
    }

    fn score(&self, runs: &[Run], groups: &[Group]) -> (usize, usize) {
        let whole = groups.iter().filter(|g| self.group_fits(runs, g)).count();
        let fit = (0..runs.len())
            .filter(|&i| runs[i].phase != Phase::Done && self.run_fits(runs, i))
            .count();
        (whole, fit)
    }

    /// Ranks orders: more whole groups, then more runs, then whole groups earlier in the
    /// suite (the suite's order is the user's own priority among groups).
    fn rank(&self, runs: &[Run], groups: &[Group]) -> Rank {
        let whole: Vec<usize> = (0..groups.len())
            .filter(|&g| self.group_fits(runs, &groups[g]))
            .collect();
        (self.score(runs, groups), Reverse(whole))
    }
}

/// Projects today's order and, when `recommend`, searches for a better one (otherwise the
/// recommended projection is today's). Runs of groups with rungs are played with the hours
/// the rungs leave them, at each group's share in force (`GroupRungs::keep`).
pub fn plan(runs: &[Run], groups: &[Group], limits: &Limits, recommend: bool) -> Planned {
    let cuts = rung_cuts(runs, groups);
    let saved_by_rungs = cuts.saved_hours(runs, None) * limits.overhead_factor;
    let uncut = runs;
    let played = cuts.apply(runs);
    let runs = &played[..];
    let (on_pod, waiting) = on_pod_and_waiting(runs);

    let current_order: Vec<usize> = on_pod.iter().chain(&waiting).copied().collect();
    let current = Timeline::play(runs, &current_order, limits);

    let recommended_waiting = if recommend {
        recommended_order(runs, groups, limits, &on_pod, &waiting)
    } else {
        waiting.clone()
    };
    let recommended_order: Vec<usize> =
        on_pod.iter().chain(&recommended_waiting).copied().collect();
    let recommended = Timeline::play(runs, &recommended_order, limits);

    let has_deadline = limits.has_limit();
    let project = |timeline: &Timeline, order: &[usize]| {
        let (whole, fit) = timeline.score(runs, groups);
        let mut listed: Vec<usize> = order.to_vec();
        listed.extend((0..runs.len()).filter(|i| !order.contains(i)));
        Projection {
            runs: listed
                .into_iter()
                .map(|i| {
                    let on = timeline.types[i].and_then(|option| match option {
                        0 => None,
                        k => runs[i].elsewhere.get(k - 1).map(|(a, _)| a.clone()),
                    });
                    planned_run(&runs[i], timeline.slots[i], on, limits, has_deadline)
                })
                .collect(),
            runs_fit: has_deadline.then_some(fit),
            groups_fit: has_deadline.then_some(whole),
        }
    };
    let group_plans = groups
        .iter()
        .zip(&cuts.per_rung)
        .map(|(g, per_rung)| GroupPlan {
            name: g.name.clone(),
            runs: g.runs.len(),
            runs_done: g
                .runs
                .iter()
                .filter(|&&i| runs[i].phase == Phase::Done)
                .count(),
            end_current: current.group_end(runs, g, limits.now),
            end_recommended: recommended.group_end(runs, g, limits.now),
            fits_current: has_deadline.then(|| current.group_fits(runs, g)),
            fits_recommended: has_deadline.then(|| recommended.group_fits(runs, g)),
            rungs: g.rungs.as_ref().map(|gr| GroupRungsPlan {
                metric: gr.rungs.metric.clone(),
                lower_is_better: gr.rungs.lower_is_better,
                at: gr.rungs.at.clone(),
                keep: gr.rungs.keep.share(),
                keep_chosen: gr.keep,
                per_rung: per_rung.clone().unwrap_or_default(),
                hours_saved: cuts.saved_hours(uncut, Some(g)) * limits.overhead_factor,
            }),
        })
        .collect();
    Planned {
        current: project(&current, &current_order),
        recommended: project(&recommended, &recommended_order),
        groups: group_plans,
        recommended_order: recommended_waiting,
        saved_by_rungs,
    }
}

/// Pod-hours the waiting runs can have, by accelerator type: until the deadline on every pod
/// of the type, less what its runs on a pod still need, capped by the type's budget. Every
/// type a run or a pool names is there.
pub fn capacity_by_pool(runs: &[Run], limits: &Limits, on_pod: &[usize]) -> BTreeMap<String, f64> {
    let mut busy: BTreeMap<String, f64> = limits.pools.keys().map(|a| (a.clone(), 0.0)).collect();
    for run in runs {
        busy.entry(run.accelerator.clone()).or_insert(0.0);
    }
    for &i in on_pod {
        *busy.entry(runs[i].accelerator.clone()).or_insert(0.0) +=
            runs[i].remaining_hours * limits.overhead_factor;
    }
    busy.into_iter()
        .map(|(accelerator, busy)| {
            let pool = limits.pool(&accelerator);
            let by_deadline = limits.deadline.map_or(f64::INFINITY, |d| {
                (d - limits.now).num_seconds().max(0) as f64 / 3600.0 * pool.pods.max(1) as f64
            });
            let by_budget = pool.budget_hours.unwrap_or(f64::INFINITY);
            (accelerator, (by_deadline.min(by_budget) - busy).max(0.0))
        })
        .collect()
}

/// [`capacity_by_pool`] summed over the types.
pub fn capacity_hours(runs: &[Run], limits: &Limits, on_pod: &[usize]) -> f64 {
    capacity_by_pool(runs, limits, on_pod).values().sum()
}

fn planned_run(
    run: &Run,
    slot: Option<Slot>,
    on: Option<String>,
    limits: &Limits,
    has_deadline: bool,
) -> PlannedRun {
    let (start, end) = slot.map_or((limits.now, limits.now), |(s, e, _)| (s, e));
    let fits = match run.phase {
        Phase::Done => Some(true),
        Phase::Blocked => None,
        _ => slot.map(|(_, _, fits)| fits),
    };
    PlannedRun {
        job_id: run.job_id,
        experiment: run.experiment.clone(),
        group: run.group.clone(),
        state: run.state,
        priority: run.priority,
        remaining_hours: run.remaining_hours * limits.overhead_factor,
        estimate: run.estimate,
        accelerator: on.unwrap_or_else(|| run.accelerator.clone()),
        start,
        end,
        fits_deadline: fits.filter(|_| has_deadline),
        also_finishes: run.also_finishes.clone(),
        expected_waste_hours: run.expected_waste_hours,
        checkpoint_advice: run.checkpoint_advice.clone(),
    }
}

/// The order of the waiting runs that completes the most whole groups, then fits the most
/// runs: the chosen groups' runs first (cheapest group first, so groups finish early), then
/// every other run shortest first.
fn recommended_order(
    runs: &[Run],
    groups: &[Group],
    limits: &Limits,
    on_pod: &[usize],
    waiting: &[usize],
) -> Vec<usize> {
    // Groups that can complete at all: none of their runs is blocked.
    let candidates: Vec<usize> = (0..groups.len())
        .filter(|&g| {
            groups[g]
                .runs
                .iter()
                .all(|&i| runs[i].phase != Phase::Blocked)
        })
        .collect();
    let order_for = |chosen: &[usize]| -> Vec<usize> {
        let mut picked = vec![false; runs.len()];
        let mut order = Vec::new();
        let mut chosen: Vec<usize> = chosen.to_vec();
        chosen.sort_by(|&a, &b| {
            let cost = |g: usize| -> f64 {
                groups[g]
                    .runs
                    .iter()
                    .filter(|&&i| runs[i].phase == Phase::Waiting)
                    .map(|&i| runs[i].remaining_hours)
                    .sum()
            };
            cost(a).total_cmp(&cost(b)).then(a.cmp(&b))
        });
        for g in chosen {
            for &i in &groups[g].runs {
                if runs[i].phase == Phase::Waiting && !picked[i] {
                    picked[i] = true;
                    order.push(i);
                }
            }
        }
        let mut rest: Vec<usize> = waiting.iter().copied().filter(|&i| !picked[i]).collect();
        rest.sort_by(|&a, &b| {
            runs[a]
                .remaining_hours
                .total_cmp(&runs[b].remaining_hours)
                .then(runs[a].order.cmp(&runs[b].order))
        });
        order.extend(rest);
        order
    };
    let rank_of = |waiting_order: &[usize]| {
        let full: Vec<usize> = on_pod.iter().chain(waiting_order).copied().collect();
        Timeline::play(runs, &full, limits).rank(runs, groups)
    };
    let score = |chosen: &[usize]| {
        let waiting_order = order_for(chosen);
        (rank_of(&waiting_order), waiting_order)
    };
    // Today's order stays unless another completes more: applying a recommendation twice
    // changes nothing the second time.
    let keep_current = |(best_rank, best_order): (Rank, Vec<usize>)| {
        if best_rank.0 > rank_of(waiting).0 {
            best_order
        } else {
            waiting.to_vec()
        }
    };
    if !limits.has_limit() {
        // Nothing to fit into: finish groups as early as possible, cheapest first.
        return order_for(&candidates);
    }
    if candidates.len() <= EXACT_GROUPS {
        // Each run's pool as an index, and each pool's capacity, once for every choice.
        let capacity = capacity_by_pool(runs, limits, on_pod);
        let pool_names: Vec<&String> = capacity.keys().collect();
        let pool_of: Vec<usize> = runs
            .iter()
            .map(|r| {
                pool_names
                    .iter()
                    .position(|name| **name == r.accelerator)
                    .unwrap_or(0)
            })
            .collect();
        let pool_capacity: Vec<f64> = capacity.values().copied().collect();
        let total_capacity: f64 = pool_capacity.iter().sum();
        // For a run that may use another type with pods: its fewest hours on any of them.
        let least_factor: Vec<Option<f64>> = runs
            .iter()
            .map(|r| {
                r.elsewhere
                    .iter()
                    .filter(|(a, _)| limits.pools.contains_key(a))
                    .map(|(_, factor)| *factor)
                    .reduce(f64::min)
                    .map(|f| f.min(1.0))
            })
            .collect();
        let mut hours = vec![0.0; pool_capacity.len()];
        let mut best: Option<(Rank, Vec<usize>)> = None;
        let mut needed = vec![false; runs.len()];
        for mask in 0u32..(1 << candidates.len()) {
            let chosen: Vec<usize> = (0..candidates.len())
                .filter(|b| mask & (1 << b) != 0)
                .map(|b| candidates[b])
                .collect();
            // A choice whose runs alone exceed the capacity cannot fit: skip its simulation.
            needed.iter_mut().for_each(|n| *n = false);
            for &g in &chosen {
                for &i in &groups[g].runs {
                    needed[i] = runs[i].phase == Phase::Waiting;
                }
            }
            // A run that may use other types counts only against all of them together, at
            // its least hours anywhere: the pruning must never skip a choice that could fit.
            hours.iter_mut().for_each(|h| *h = 0.0);
            let mut flexible_hours = 0.0;
            for i in (0..runs.len()).filter(|&i| needed[i]) {
                let run_hours = runs[i].remaining_hours * limits.overhead_factor;
                match least_factor[i] {
                    Some(factor) => flexible_hours += run_hours * factor,
                    None => hours[pool_of[i]] += run_hours,
                }
            }
            if hours
                .iter()
                .zip(&pool_capacity)
                .any(|(h, capacity)| *h > capacity + 1e-9)
                || hours.iter().sum::<f64>() + flexible_hours > total_capacity + 1e-9
            {
                continue;
            }
            let (rank, order) = score(&chosen);
            if best.as_ref().is_none_or(|(b, _)| rank > *b) {
                best = Some((rank, order));
            }
        }
        return best.map_or_else(|| waiting.to_vec(), keep_current);
    }
    // Greedy: add the group that keeps the most groups whole, cheapest first.
    let mut chosen: Vec<usize> = Vec::new();
    let mut best = score(&chosen);
    loop {
        let mut improved = None;
        for &g in candidates.iter().filter(|g| !chosen.contains(g)) {
            let mut trial = chosen.clone();
            trial.push(g);
            let (rank, order) = score(&trial);
            if rank > best.0 {
                best = (rank, order);
                improved = Some(g);
            }
        }
        match improved {
            Some(g) => chosen.push(g),
            None => return keep_current(best),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(experiment: &str, group: &str, hours: f64, order: i64) -> Run {
        Run {
            expected_waste_hours: 0.0,
            checkpoint_advice: None,
            job_id: None,
            experiment: experiment.into(),
            group: group.into(),
            state: RunState::NotSubmitted,
            phase: Phase::Waiting,
            priority: None,
            order: (1, Reverse(0), Reverse(0), order),
            remaining_hours: hours,
            estimate: EstimateSource::Catalog,
            also_finishes: Vec::new(),
            accelerator: "v4-64".into(),
            elsewhere: Vec::new(),
            done_share: 0.0,
        }
    }

    #[test]
    fn a_run_that_may_use_a_faster_generation_finishes_there_when_its_own_is_busy() {
        let mut limits = limits(12);
        let mut runs = vec![run("a", "g", 10.0, 1), run("b", "g", 10.0, 2)];
        let groups = vec![Group {
            name: "g".into(),
            runs: vec![0, 1],
            rungs: None,
        }];
        let only_v4 = plan(&runs, &groups, &limits, false).current;
        assert_eq!(
            only_v4.runs_fit,
            Some(1),
            "one v4 pod: the second run ends at 20 h"
        );

        for run in &mut runs {
            run.elsewhere = vec![("v6e-32".into(), 275.0 / 918.0)];
        }
        let no_v6e_pods = plan(&runs, &groups, &limits, false).current;
        assert_eq!(
            no_v6e_pods.runs_fit,
            Some(1),
            "a type no pool holds is no option"
        );

        limits.pools.insert("v6e-32".into(), Pool::default());
        let planned = plan(&runs, &groups, &limits, false).current;
        assert_eq!(planned.runs_fit, Some(2), "{planned:?}");
        let b = planned.runs.iter().find(|r| r.experiment == "b").unwrap();
        assert_eq!(b.accelerator, "v6e-32");
        let hours = (b.end - b.start).num_seconds() as f64 / 3600.0;
        assert!((hours - 10.0 * 275.0 / 918.0).abs() < 0.01, "{hours}");
    }

    #[test]
    fn the_recommended_plan_fits_groups_whose_runs_may_use_another_type() {
        // Group a's two 10 h runs may use a v6e pod (3 h each there); group b's 11 h run
        // only the v4. With 12 h, one pod of each: both groups fit.
        let mut limits = limits(12);
        limits.pools.insert("v6e-32".into(), Pool::default());
        let mut runs = vec![
            run("a1", "a", 10.0, 1),
            run("a2", "a", 10.0, 2),
            run("b1", "b", 11.0, 3),
        ];
        for r in &mut runs[..2] {
            r.elsewhere = vec![("v6e-32".into(), 0.3)];
        }
        let groups = vec![
            Group {
                name: "a".into(),
                runs: vec![0, 1],
                rungs: None,
            },
            Group {
                name: "b".into(),
                runs: vec![2],
                rungs: None,
            },
        ];
        let planned = plan(&runs, &groups, &limits, true);
        assert_eq!(
            planned.recommended.groups_fit,
            Some(2),
            "{:#?}",
            planned.recommended
        );
    }

    fn limits(hours: i64) -> Limits {
        let now = DateTime::from_timestamp(1_700_000_000, 0).unwrap();
        Limits {
            now,
            deadline: Some(now + Duration::hours(hours)),
            pools: BTreeMap::from([("v4-64".to_owned(), Pool::default())]),
            overhead_factor: 1.0,
        }
    }

    /// Group a: 3 runs of 40 h; group b and c: 1 shared run of 40 h plus one of 20 h each.
    fn suite() -> (Vec<Run>, Vec<Group>) {
        let runs = vec![
            run("a1", "a", 40.0, 1),
            run("a2", "a", 40.0, 2),
            run("a3", "a", 40.0, 3),
            run("shared", "b", 40.0, 4),
            run("b1", "b", 20.0, 5),
            run("c1", "c", 20.0, 6),
        ];
        let groups = vec![
            Group {
                name: "a".into(),
                runs: vec![0, 1, 2],
                rungs: None,
            },
            Group {
                name: "b".into(),
                runs: vec![3, 4],
                rungs: None,
            },
            Group {
                name: "c".into(),
                runs: vec![3, 5],
                rungs: None,
            },
        ];
        (runs, groups)
    }

    #[test]
    fn the_recommended_order_completes_more_groups_than_the_submitted_one() {
        let (runs, groups) = suite();
        let planned = plan(&runs, &groups, &limits(90), true);
        assert_eq!(
            planned.current.groups_fit,
            Some(0),
            "a's 120 h do not fit in 90"
        );
        assert_eq!(
            planned.recommended.groups_fit,
            Some(2),
            "b and c share 40 h: 80 h"
        );
        let names: Vec<&str> = planned
            .recommended
            .runs
            .iter()
            .map(|r| r.experiment.as_str())
            .collect();
        assert_eq!(&names[..3], ["shared", "b1", "c1"]);
        assert_eq!(planned.recommended.runs_fit, Some(3));
    }

    #[test]
    fn without_a_deadline_nothing_claims_to_fit() {
        let (runs, groups) = suite();
        let mut no_deadline = limits(0);
        no_deadline.deadline = None;
        let planned = plan(&runs, &groups, &no_deadline, true);
        assert_eq!(planned.current.runs_fit, None);
        assert!(planned
            .current
            .runs
            .iter()
            .all(|r| r.fits_deadline.is_none()));
        assert!(planned.groups.iter().all(|g| g.fits_current.is_none()));
    }

    #[test]
    fn a_run_on_a_pod_stays_first_and_a_blocked_run_blocks_its_groups() {
        let (mut runs, groups) = suite();
        runs[0].phase = Phase::OnPod;
        runs[5].phase = Phase::Blocked;
        let planned = plan(&runs, &groups, &limits(200), true);
        assert_eq!(planned.recommended.runs[0].experiment, "a1");
        let c = planned.groups.iter().find(|g| g.name == "c").unwrap();
        assert_eq!((c.fits_recommended, c.end_recommended), (Some(false), None));
    }

    #[test]
    fn the_budget_caps_what_fits_like_the_deadline() {
        let (runs, groups) = suite();
        let mut capped = limits(10_000);
        capped.pools.get_mut("v4-64").unwrap().budget_hours = Some(80.0);
        assert_eq!(
            plan(&runs, &groups, &capped, true).recommended.groups_fit,
            Some(2)
        );
    }

    #[test]
    fn each_accelerator_type_plays_out_on_its_own_pods_and_budget() {
        // Two 40 h runs on v4-64 and two on v4-32, one pod of each, 80 h to the deadline:
        // side by side everything fits; on one pool the last two would end at 160 h.
        let mut runs = vec![
            run("big1", "big", 40.0, 1),
            run("big2", "big", 40.0, 2),
            run("small1", "small", 40.0, 3),
            run("small2", "small", 40.0, 4),
        ];
        for small in &mut runs[2..] {
            small.accelerator = "v4-32".into();
        }
        let groups = vec![
            Group {
                name: "big".into(),
                runs: vec![0, 1],
                rungs: None,
            },
            Group {
                name: "small".into(),
                runs: vec![2, 3],
                rungs: None,
            },
        ];
        let mut two_pools = limits(80);
        two_pools.pools.insert("v4-32".into(), Pool::default());
        let planned = plan(&runs, &groups, &two_pools, true);
        assert_eq!(planned.current.groups_fit, Some(2));
        let small2 = planned
            .current
            .runs
            .iter()
            .find(|r| r.experiment == "small2")
            .unwrap();
        assert_eq!((small2.end - two_pools.now).num_hours(), 80);
        assert_eq!(capacity_hours(&runs, &two_pools, &[]), 160.0);

        // The v4-32 budget is its own: 40 pod-hours fit one of its runs, and none of v4-64's.
        two_pools.pools.get_mut("v4-32").unwrap().budget_hours = Some(40.0);
        let planned = plan(&runs, &groups, &two_pools, true);
        let fits = |name: &str| {
            planned
                .current
                .runs
                .iter()
                .find(|r| r.experiment == name)
                .unwrap()
                .fits_deadline
        };
        assert_eq!(
            [fits("big1"), fits("big2"), fits("small1"), fits("small2")],
            [Some(true), Some(true), Some(true), Some(false)]
        );
    }

    /// A sweep of five 40 h runs, the first its baseline row, with rungs at 25% and 50%
    /// keeping `keep` (None for `auto`); and a group of one 40 h run without rungs.
    fn sweep(keep: Option<f64>) -> (Vec<Run>, Vec<Group>) {
        let mut runs: Vec<Run> = (0..5)
            .map(|i| run(&format!("s{i}"), "sweep", 40.0, i))
            .collect();
        runs.push(run("other", "other", 40.0, 5));
        let rungs = Rungs {
            metric: "eval/exact_accuracy".into(),
            lower_is_better: false,
            at: vec![0.25, 0.5],
            keep: keep.map_or(Keep::Auto, Keep::Share),
        };
        let groups = vec![
            Group {
                name: "sweep".into(),
                runs: (0..5).collect(),
                rungs: Some(GroupRungs::new(rungs, 1.0, Some(0))),
            },
            Group {
                name: "other".into(),
                runs: vec![5],
                rungs: None,
            },
        ];
        (runs, groups)
    }

    #[test]
    fn rungs_cut_the_runs_expected_to_be_pruned_and_never_the_baseline() {
        let (mut runs, groups) = sweep(Some(0.5));
        let cuts = rung_cuts(&runs, &groups);
        // 5 runs to 25%, ⌈5/2⌉ = 3 to 50%, 2 to the end: the baseline and one more.
        assert_eq!(cuts.played, [1.0, 1.0, 0.5, 0.25, 0.25, 1.0]);
        let outlook = |at, runs, promoted| RungOutlook {
            at,
            runs,
            promoted,
            pruned: runs - promoted,
        };
        assert_eq!(
            cuts.per_rung,
            [Some(vec![outlook(0.25, 5, 3), outlook(0.5, 3, 2)]), None]
        );
        // The same hours as `rungs::expected_hours`: 200 h less 120 h.
        let saved = cuts.saved_hours(&runs, Some(&groups[0]));
        let expected = crate::scheduler::rungs::expected_hours(&[40.0; 5], &[0.25, 0.5], 0.5);
        assert!((saved - (200.0 - expected)).abs() < 1e-9, "{saved}");
        assert_eq!(cuts.saved_hours(&runs, None), saved);

        // The baseline goes on wherever it stands in the group; then the run furthest along,
        // then the others in catalog order.
        let mut groups = groups;
        groups[0].rungs.as_mut().unwrap().baseline = Some(4);
        runs[3].done_share = 0.3;
        runs[3].remaining_hours = 28.0;
        let cuts = rung_cuts(&runs, &groups);
        assert_eq!(cuts.played, [0.5, 0.25, 0.25, 1.0, 1.0, 1.0]);

        // Past the rung it would be pruned at, a run went on there: it stops at the next.
        let mut past = groups.clone();
        past[0].rungs.as_mut().unwrap().baseline = Some(0);
        runs[3].done_share = 0.3;
        runs[2].done_share = 0.3;
        runs[1].done_share = 0.3;
        runs[4].done_share = 0.3;
        let cuts = rung_cuts(&runs, &past);
        // s1..s4 are all at 30%: two of them are kept to 50% only, and one of those would
        // stop at 25%, which it passed: it stops at 50% too.
        let to_half = (0.5 - 0.3) / 0.7;
        assert_eq!(cuts.played[0], 1.0);
        assert_eq!(
            cuts.played[1..5].iter().filter(|&&p| p == 1.0).count(),
            1,
            "{:?}",
            cuts.played
        );
        assert!(cuts.played[1..5]
            .iter()
            .all(|&p| p == 1.0 || (p - to_half).abs() < 1e-9));

        // A run that another group needs whole trains whole.
        let (runs, mut groups) = sweep(Some(0.5));
        groups[1].runs.push(4);
        assert_eq!(rung_cuts(&runs, &groups).played[4], 1.0);
    }

    #[test]
    fn a_group_with_rungs_fits_when_its_promoted_runs_finish() {
        // 240 h without rungs; 160 h with them (120 h of the sweep, 40 h of the other).
        let (runs, groups) = sweep(Some(0.5));
        let planned = plan(&runs, &groups, &limits(170), true);
        assert_eq!(
            planned.recommended.groups_fit,
            Some(2),
            "{:#?}",
            planned.groups
        );
        assert!((planned.saved_by_rungs - 80.0).abs() < 1e-9);
        let sweep = &planned.groups[0];
        let rungs = sweep.rungs.as_ref().unwrap();
        assert_eq!((rungs.keep, rungs.keep_chosen), (Some(0.5), 0.5));
        assert!((rungs.hours_saved - 80.0).abs() < 1e-9);
        assert_eq!(planned.groups[1].rungs, None);
        let hours: f64 = planned
            .recommended
            .runs
            .iter()
            .map(|r| r.remaining_hours)
            .sum();
        assert!((hours - 160.0).abs() < 1e-9, "as played: {hours}");
        // Without rungs the sweep does not fit.
        let mut plain = groups.clone();
        plain[0].rungs = None;
        assert_eq!(
            plan(&runs, &plain, &limits(170), true)
                .recommended
                .groups_fit,
            Some(1)
        );
    }

    #[test]
    fn keep_auto_prunes_nothing_with_a_large_grant_and_prunes_with_a_tight_one() {
        let chosen = |hours: i64| {
            let (runs, mut groups) = sweep(None);
            choose_auto_keeps(&runs, &mut groups, &limits(hours));
            let planned = plan(&runs, &groups, &limits(hours), true);
            let rungs = planned.groups[0].rungs.clone().unwrap();
            assert_eq!(rungs.keep, None);
            (rungs.keep_chosen, planned.recommended.groups_fit)
        };
        // The grant holds everything (240 h): nothing is pruned.
        assert_eq!(chosen(10_000), (1.0, Some(2)));
        assert_eq!(chosen(240), (1.0, Some(2)));
        // As the deadline shrinks the share falls: at 170 h the sweep may take 130 h, which
        // 3/5 keeps (5, 3, 2 runs: 120 h; 2/3 keeps 5, 4, 3: 150 h); at 130 h it may take
        // 90 h: 2/5 (5, 2, 1 runs).
        assert_eq!(chosen(170), (0.6, Some(2)));
        assert_eq!(chosen(130), (0.4, Some(2)));
        // When pruning completes no more groups, nothing is pruned: at 100 h one group fits
        // either way.
        assert_eq!(chosen(100), (1.0, Some(1)));
        // Without a deadline or budget nothing is pruned.
        let (runs, mut groups) = sweep(None);
        let mut open = limits(1);
        open.deadline = None;
        choose_auto_keeps(&runs, &mut groups, &open);
        assert_eq!(groups[0].rungs.as_ref().unwrap().keep, 1.0);
    }
}
