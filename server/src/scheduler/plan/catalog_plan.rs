//! The grant plan over the whole catalog, submitted or not: gathering each experiment's run,
//! projecting it (`planner.rs`), and applying the recommended order.

use std::cmp::Reverse;
use std::collections::{BTreeMap, HashMap};

use chrono::{DateTime, Utc};
use futures::FutureExt;
use podq_api::{
    EstimateSource, GrantOutlook, JobId, JobState, Plan, PlanApplied, PlanScenario, PoolPlan,
    RunState, SubmitRequest,
};

use super::grant::check_deadline;
use super::planner::{self, Group, GroupRungs, Limits, Phase, Pool, Run};
use super::pod_time::ExpectedWaste;
use super::{forecast, speed};
use crate::scheduler::{submit, Result, Scheduler};
use crate::store::events::Actor;
use crate::store::views::{self, PlanJob};
use crate::store::{events, goodput, grant, jobs, now_ms, pods};

/// Runs and groups as the planner sees them, and the experiment each waiting run would be
/// submitted as.
struct Gathered {
    runs: Vec<Run>,
    groups: Vec<Group>,
}

impl Scheduler {
    /// The plan against `deadline` (default: the grant's end).
    pub async fn plan(&self, deadline: Option<DateTime<Utc>>) -> Result<Plan> {
        if deadline.is_some() {
            return self.project(deadline, true).await.map(|(plan, _)| plan);
        }
        let plan = self
            .read_cache
            .plan
            .get_or(|| async { self.project(None, true).await.map(|(plan, _)| plan) })
            .await?;
        // The rungs' decisions read the auto shares inside their own write, from here.
        self.auto_keeps.set(
            plan.groups
                .iter()
                .filter_map(|g| Some((g.name.clone(), g.rungs.as_ref()?.keep_chosen)))
                .collect(),
        );
        Ok(plan)
    }

    /// The share kept past each rung of `group` in force now, for `scheduler::rungs::decide`:
    /// the share its `rungs:` writes; under `keep: auto`, the choice of the most recent plan
    /// (`GET /api/v1/plan` with the grant's deadline, made again at its first read after a
    /// change), 1 while none was made; 1 for a group without rungs or unknown. Cheap: it
    /// reads no store and makes no plan ([`Scheduler::keep_in_force`] does).
    pub fn keep_for(&self, group: &str) -> f64 {
        let Some(rungs) = self.catalog.group(group).and_then(|g| g.rungs.as_ref()) else {
            return 1.0;
        };
        rungs
            .keep
            .share()
            .or_else(|| self.planned_keep(group))
            .unwrap_or(1.0)
    }

    /// [`Scheduler::keep_for`], with a plan made first if none is kept (or it is stale): the
    /// auto share as the grant stands now. A plan can take a second on a large catalog; it
    /// is made once per change of state, whoever asks.
    pub async fn keep_in_force(&self, group: &str) -> Result<f64> {
        let auto = self
            .catalog
            .group(group)
            .and_then(|g| g.rungs.as_ref())
            .is_some_and(|r| r.keep.share().is_none());
        if auto {
            self.plan(None).await?;
        }
        Ok(self.keep_for(group))
    }

    /// The share the most recent plan (kept for `GET /plan`) chose for `group`'s rungs.
    fn planned_keep(&self, group: &str) -> Option<f64> {
        self.read_cache
            .plan
            .peek(|plan| {
                plan.groups
                    .iter()
                    .find(|g| g.name == group)
                    .and_then(|g| g.rungs.as_ref())
                    .map(|r| r.keep_chosen)
            })
            .flatten()
    }

    /// The status line: the grant's end and what fits under today's order.
    pub(in crate::scheduler) async fn grant_outlook(&self) -> Result<Option<GrantOutlook>> {
        let Some(grant) = self.grant().await? else {
            return Ok(None);
        };
        if grant.end <= Utc::now() {
            return Ok(None);
        }
        let (plan, _) = self.project(None, false).await?;
        Ok(Some(GrantOutlook {
            end: grant.end,
            runs_fit: plan.current.runs_fit.unwrap_or(0),
            runs: plan.current.runs.len(),
            groups_fit: plan.current.groups_fit.unwrap_or(0),
            groups: plan.groups.len(),
        }))
    }

    /// Applies the recommended order: submits the experiments it includes that were never
    /// submitted, and sets priorities so jobs lease in that order. One transaction.
    pub async fn apply_plan(
        &self,
        by: &Actor,
        deadline: Option<DateTime<Utc>>,
    ) -> Result<PlanApplied> {
        let class = self.class_of(&SubmitRequest::default())?;
        let by = by.clone();
        let (plan, order) = self.project(deadline, true).await?;
        // Per run: its job, or the experiments to submit for it (the run's own first, then
        // those that share its config, which submission links to it), and its priority.
        let steps: Vec<(Option<JobId>, Vec<crate::catalog::Experiment>, i64)> = order
            .iter()
            .enumerate()
            .map(|(position, run)| {
                let priority = (order.len() - position) as i64;
                let to_submit = match run.job_id {
                    Some(_) => Vec::new(),
                    None => std::iter::once(&run.experiment)
                        .chain(&run.also_finishes)
                        .filter_map(|name| self.catalog.experiment(name).cloned())
                        .collect(),
                };
                (run.job_id, to_submit, priority)
            })
            .collect();
        let (submitted, reprioritised) = self
            .store
            .write(move |conn| {
                async move {
                    let mut submitted = Vec::new();
                    let mut reprioritised = 0;
                    for (job, experiments, priority) in steps {
                        match job {
                            Some(id) => {
                                let Some(row) = jobs::get_job(&mut *conn, id).await? else {
                                    continue;
                                };
                                if row.priority != priority {
                                    jobs::set_priority(conn, id, priority).await?;
                                    events::insert_event(
                                        conn,
                                        &by,
                                        Some(id),
                                        None,
                                        "priority",
                                        &format!(
                                            "priority {} -> {priority}: the plan's recommended order",
                                            row.priority
                                        ),
                                    )
                                    .await?;
                                    reprioritised += 1;
                                }
                            }
                            None => {
                                let req = SubmitRequest {
                                    experiments: Some(
                                        experiments.iter().map(|e| e.name.clone()).collect(),
                                    ),
                                    priority: Some(priority),
                                    ..SubmitRequest::default()
                                };
                                let answer =
                                    submit::submit(conn, &by, &class, &experiments, &req)
                                        .await?;
                                submitted.extend(answer.created.into_iter().map(|c| c.experiment));
                                submitted.extend(answer.linked.into_iter().map(|l| l.experiment));
                            }
                        }
                    }
                    Ok::<_, crate::scheduler::SchedulerError>((submitted, reprioritised))
                }
                .boxed()
            })
            .await?;
        self.wake_for(submitted.iter().map(String::as_str));
        let plan = if submitted.is_empty() && reprioritised == 0 {
            plan
        } else {
            self.plan(deadline).await?
        };
        Ok(PlanApplied {
            submitted,
            reprioritised,
            plan,
        })
    }

    /// The plan, and the recommended order of the waiting runs.
    async fn project(
        &self,
        deadline: Option<DateTime<Utc>>,
        recommend: bool,
    ) -> Result<(Plan, Vec<podq_api::PlannedRun>)> {
        let now = Utc::now();
        if let Some(deadline) = deadline {
            check_deadline(deadline, now)?;
        }
        let grant = self.grant().await?;
        let deadline = deadline.or(grant.as_ref().map(|g| g.end));
        let Gathered {
            mut runs,
            mut groups,
        } = self.gather(now_ms()).await?;
        let waste = self.expect_waste(&mut runs).await?;
        let spares = self.spares_kept().await?;
        // Taken after the calls above, which take their own: a method holding a pooled
        // connection while another waits for one can exhaust the pool.
        let mut db = self.store.read().await?;
        let mut pools: BTreeMap<String, Pool> = runs
            .iter()
            .map(|r| (r.accelerator.clone(), Pool::default()))
            .collect();
        let mut pod_counts: BTreeMap<String, usize> = BTreeMap::new();
        for pod in pods::serving(&mut db).await? {
            *pod_counts.entry(pod.accelerator).or_default() += 1;
        }
        for (accelerator, count) in &pod_counts {
            pools.entry(accelerator.clone()).or_default().pods = (*count).max(1);
        }
        if let Some(g) = &grant {
            for (accelerator, budget) in &g.pod_hours {
                let used =
                    grant::hours_used(&mut db, accelerator, g.start.timestamp_millis()).await?;
                pools.entry(accelerator.clone()).or_default().budget_hours =
                    Some((budget - used).max(0.0));
            }
        }
        // Warm spares are pods no run is planned on, and their idle hours come out of the
        // budget (docs/operations/pools.md, "Warm spares").
        let hours_to_deadline = deadline.map(|d| ((d - now).num_seconds().max(0) as f64) / 3600.0);
        let mut spare_idle: BTreeMap<String, f64> = BTreeMap::new();
        for (accelerator, kept) in &spares {
            let pool = pools.entry(accelerator.clone()).or_default();
            let serving = pod_counts.get(accelerator).copied().unwrap_or(0);
            pool.pods = serving.saturating_sub(*kept as usize).max(1);
            if let Some(hours) = hours_to_deadline {
                let idle = f64::from(*kept) * hours;
                spare_idle.insert(accelerator.clone(), idle);
                if let Some(budget) = pool.budget_hours.as_mut() {
                    *budget = (*budget - idle).max(0.0);
                }
            }
        }
        let totals = goodput::total(&mut db).await?;
        // Lost work is modelled per run (`expected_waste_hours`); the factor covers the rest.
        let overhead_factor = if totals.kept_s > 0.0 {
            ((totals.kept_s + totals.overhead_s) / totals.kept_s).clamp(1.0, 3.0)
        } else {
            1.0
        };
        let limits = Limits {
            now,
            deadline,
            pools,
            overhead_factor,
        };
        // Under `keep: auto` the recommended plan chooses each group's share; the status
        // line (no recommendation) keeps the most recent plan's (`gather`).
        if recommend {
            planner::choose_auto_keeps(&runs, &mut groups, &limits);
        }
        let planned = planner::plan(&runs, &groups, &limits, recommend);
        let with_pools = self.with_pools_at_max(&runs, &groups, &limits, &pod_counts);
        // Hours and expected waste as played: what the rungs leave of each run.
        let cuts = planner::rung_cuts(&runs, &groups);
        let waste = ExpectedWaste {
            configured: (0..runs.len())
                .map(|i| cuts.played[i] * runs[i].expected_waste_hours)
                .sum(),
            advised: (0..runs.len())
                .map(|i| cuts.played[i] * (runs[i].expected_waste_hours + waste.advised_change[i]))
                .sum(),
            advised_change: waste.advised_change,
        };
        let scenarios = scenarios(&runs, &groups, &limits, &planned.recommended, &waste);
        let runs = cuts.apply(&runs);
        let mut estimates = std::collections::BTreeMap::new();
        for run in &runs {
            let key = serde_json::to_value(run.estimate)
                .ok()
                .and_then(|v| v.as_str().map(str::to_owned))
                .unwrap_or_default();
            *estimates.entry(key).or_insert(0) += 1;
        }
        let has_limit = limits.has_limit();
        let capacity = planner::capacity_by_pool(&runs, &limits, &[]);
        let pool_plans = limits
            .pools
            .iter()
            .map(|(accelerator, pool)| {
                let to_go: Vec<&Run> = runs
                    .iter()
                    .filter(|r| &r.accelerator == accelerator)
                    .filter(|r| matches!(r.phase, Phase::OnPod | Phase::Waiting))
                    .collect();
                PoolPlan {
                    accelerator: accelerator.clone(),
                    pods: pool.pods,
                    budget_hours_left: pool.budget_hours,
                    capacity_hours: has_limit
                        .then(|| capacity.get(accelerator).copied().unwrap_or(0.0)),
                    total_hours: to_go
                        .iter()
                        .map(|r| r.remaining_hours * overhead_factor)
                        .sum(),
                    runs_to_go: to_go.len(),
                    spares: spares.get(accelerator).copied().unwrap_or(0),
                    spare_idle_hours: spare_idle.get(accelerator).copied(),
                }
            })
            .collect();
        let order = planned
            .recommended
            .runs
            .iter()
            .filter(|r| {
                matches!(
                    r.state,
                    RunState::Job(JobState::Queued) | RunState::NotSubmitted
                )
            })
            .cloned()
            .collect();
        Ok((
            Plan {
                now,
                deadline,
                grant,
                pods: limits.pools.values().map(|p| p.pods).sum::<usize>().max(1),
                capacity_hours: has_limit.then(|| capacity.values().sum()),
                pools: pool_plans,
                total_hours: runs
                    .iter()
                    .filter(|r| matches!(r.phase, Phase::OnPod | Phase::Waiting))
                    .map(|r| r.remaining_hours * overhead_factor)
                    .sum(),
                overhead_factor,
                expected_waste_hours: waste.configured,
                pod_hours_saved_by_advice: (waste.configured - waste.advised).max(0.0),
                pod_hours_saved_by_rungs: planned.saved_by_rungs,
                scenarios,
                estimates,
                current: planned.current,
                recommended: planned.recommended,
                groups: planned.groups,
                with_pools,
            },
            order,
        ))
    }

    /// The current order played out with every pool at its `max_slices`: the pods made by
    /// hand, plus each pool's most. None while no pool has reported.
    fn with_pools_at_max(
        &self,
        runs: &[Run],
        groups: &[planner::Group],
        limits: &planner::Limits,
        pod_counts: &BTreeMap<String, usize>,
    ) -> Option<podq_api::PoolsOutlook> {
        let reported = self.pool_capacity();
        if reported.is_empty() {
            return None;
        }
        let mut more = limits.clone();
        for (accelerator, (held, most)) in &reported {
            let by_hand = pod_counts
                .get(accelerator)
                .copied()
                .unwrap_or(0)
                .saturating_sub(*held);
            more.pools.entry(accelerator.clone()).or_default().pods = (by_hand + most).max(1);
        }
        Some(podq_api::PoolsOutlook {
            pods: more.pools.values().map(|p| p.pods).sum(),
            projection: planner::plan(runs, groups, &more, false).current,
        })
    }

    /// Every experiment of the catalog as a run: its newest job's run (the run it is linked
    /// to, if linked), or a run not submitted yet. Experiments with one training config
    /// share one run, as submitting them would.
    async fn gather(&self, now: i64) -> Result<Gathered> {
        let mut db = self.store.read().await?;
        let speeds = speed::Speeds::from_attempts(
            views::attempt_progress(&mut db)
                .await?
                .into_iter()
                .filter_map(|a| {
                    let rate = forecast::step_rate(
                        Some(a.first_step),
                        Some(a.first_step_at),
                        a.end_step,
                        a.ended_at.unwrap_or(now),
                    )?;
                    Some(speed::AttemptRate {
                        run: a.job_id,
                        group: a.group_name,
                        accelerator: a.accelerator,
                        steps_per_s: rate,
                    })
                }),
        );
        let mut runs: Vec<Run> = Vec::new();
        let mut run_of_job: HashMap<JobId, usize> = HashMap::new();
        let mut run_of_config: HashMap<String, usize> = HashMap::new();
        let mut group_runs: HashMap<&str, Vec<usize>> = HashMap::new();
        let mut jobs = Vec::with_capacity(self.catalog.experiments.len());
        for e in &self.catalog.experiments {
            jobs.push(match views::newest_job_of(&mut db, &e.name).await? {
                Some(job) => match &job.same_as {
                    Some(run) => views::plan_job(&mut db, *run).await?,
                    None => Some(job),
                },
                None => None,
            });
        }
        // Experiments with a job first: one not submitted yet that shares a submitted run's
        // config joins that run, wherever the two stand in the catalog (submitting it would
        // link it there).
        let mut experiments: Vec<(usize, &crate::catalog::Experiment, Option<PlanJob>)> = self
            .catalog
            .experiments
            .iter()
            .zip(jobs)
            .enumerate()
            .map(|(position, (e, job))| (position, e, job))
            .collect();
        experiments.sort_by_key(|(position, _, job)| (job.is_none(), *position));
        for (position, e, job) in experiments {
            let index = match job {
                Some(job) => match run_of_job.get(&job.id) {
                    Some(&i) => i,
                    None => {
                        let mut run = run_of(&job, now)?;
                        match (&job.live_on, run.phase) {
                            // On a pod now: it runs there to its end, at its speed there.
                            (Some(on), Phase::OnPod) => {
                                let factor =
                                    speeds.factor(run.job_id, &run.group, &run.accelerator, on);
                                run.remaining_hours *= factor;
                                run.accelerator = on.clone();
                            }
                            _ => run.elsewhere = elsewhere(&speeds, &run, &e.accelerators),
                        }
                        runs.push(run);
                        let i = runs.len() - 1;
                        run_of_job.insert(job.id, i);
                        if runs[i].phase != Phase::Blocked {
                            run_of_config.entry(job.config_sha256.clone()).or_insert(i);
                        }
                        i
                    }
                },
                None => match run_of_config.get(&e.config_sha256) {
                    Some(&i) => i,
                    None => {
                        let mut run = Run {
                            job_id: None,
                            experiment: e.name.clone(),
                            group: e.group.clone(),
                            state: RunState::NotSubmitted,
                            phase: Phase::Waiting,
                            priority: None,
                            // After every queued job, in suite order.
                            order: (i64::MAX, Reverse(0), Reverse(i64::MIN), position as i64),
                            remaining_hours: e.est_hours,
                            estimate: EstimateSource::Catalog,
                            also_finishes: Vec::new(),
                            accelerator: e.accelerator.clone(),
                            elsewhere: Vec::new(),
                            expected_waste_hours: 0.0,
                            checkpoint_advice: None,
                            done_share: 0.0,
                        };
                        run.elsewhere = elsewhere(&speeds, &run, &e.accelerators);
                        runs.push(run);
                        let i = runs.len() - 1;
                        run_of_config.insert(e.config_sha256.clone(), i);
                        i
                    }
                },
            };
            if runs[index].experiment != e.name && !runs[index].also_finishes.contains(&e.name) {
                runs[index].also_finishes.push(e.name.clone());
            }
            let members = group_runs.entry(e.group.as_str()).or_default();
            if !members.contains(&index) {
                members.push(index);
            }
        }
        let groups = self
            .catalog
            .groups
            .iter()
            .map(|g| {
                let members = group_runs.remove(g.name.as_str()).unwrap_or_default();
                // The run its baseline row trains (its own, or the one it shares).
                let baseline = g.baseline_row.as_ref().and_then(|row| {
                    members.iter().copied().find(|&i| {
                        runs[i].experiment == *row || runs[i].also_finishes.contains(row)
                    })
                });
                Group {
                    name: g.name.clone(),
                    rungs: g.rungs.clone().map(|rungs| {
                        let auto_keep = self.planned_keep(&g.name).unwrap_or(1.0);
                        GroupRungs::new(rungs, auto_keep, baseline)
                    }),
                    runs: members,
                }
            })
            .collect();
        Ok(Gathered { runs, groups })
    }
}

/// The slice types of `list` other than the one `run` is reckoned on, with its hours on each
/// per hour there.
fn elsewhere(speeds: &speed::Speeds, run: &Run, list: &[String]) -> Vec<(String, f64)> {
    list.iter()
        .filter(|a| **a != run.accelerator)
        .map(|a| {
            let factor = speeds.factor(run.job_id, &run.group, &run.accelerator, a);
            (a.clone(), factor)
        })
        .collect()
}

/// A waiting job's place in the queue, as the claim orders them: the SQL's
/// `store::job_state::queue_order` in Rust (`the_planners_order_is_the_claims` ties them).
fn queue_order(job: &PlanJob) -> planner::QueueOrder {
    (
        job.class_rank,
        Reverse(job.queue_head),
        Reverse(job.priority),
        job.seq,
    )
}

fn run_of(job: &PlanJob, now: i64) -> Result<Run> {
    let phase = match job.state {
        // A stopped run needs no more hours: a rule judged it.
        JobState::Succeeded | JobState::Stopped => Phase::Done,
        JobState::Leased | JobState::Running => Phase::OnPod,
        JobState::Queued => Phase::Waiting,
        // Paused at a rung: it goes on, or is pruned, once its siblings are judged there.
        JobState::Held if job.rung_paused => Phase::Waiting,
        JobState::Failed | JobState::Cancelled | JobState::Held => Phase::Blocked,
    };
    let (rate, to_go) = forecast::time_to_go(job, now);
    let remaining_hours = if phase == Phase::Done { 0.0 } else { to_go };
    Ok(Run {
        job_id: Some(job.id),
        experiment: job.experiment.clone(),
        group: job.group_name.clone(),
        state: job.state.into(),
        phase,
        priority: Some(job.priority),
        order: queue_order(job),
        remaining_hours,
        estimate: match (phase, rate) {
            (Phase::Done, _) => EstimateSource::Done,
            (_, Some(_)) => EstimateSource::Measured,
            _ => EstimateSource::Catalog,
        },
        also_finishes: Vec::new(),
        // Its hours to go are at the rate of the attempt they were measured on.
        accelerator: match (rate, &job.measured_on) {
            (Some(_), Some(on)) => on.clone(),
            _ => job.accelerator.clone(),
        },
        elsewhere: Vec::new(),
        expected_waste_hours: 0.0,
        checkpoint_advice: None,
        done_share: match (phase, job.last_step, job.total_steps) {
            (Phase::Done, _, _) if job.state == JobState::Succeeded => 1.0,
            (_, Some(step), Some(total)) if total > 0 => {
                (step as f64 / total as f64).clamp(0.0, 1.0)
            }
            _ => 0.0,
        },
    })
}

/// What fits without interruptions, as planned, and with every run at its advised interval.
fn scenarios(
    runs: &[Run],
    groups: &[Group],
    limits: &Limits,
    planned: &podq_api::Projection,
    waste: &ExpectedWaste,
) -> Vec<PlanScenario> {
    // As played: what the groups' rungs leave of each run.
    let to_go_hours = |runs: &[Run]| -> f64 {
        planner::rung_cuts(runs, groups)
            .apply(runs)
            .iter()
            .filter(|r| matches!(r.phase, Phase::OnPod | Phase::Waiting))
            .map(|r| r.remaining_hours * limits.overhead_factor)
            .sum()
    };
    let play = |name: &str, runs: &[Run], expected_waste_hours: f64| {
        let projection = planner::plan(runs, groups, limits, true).recommended;
        PlanScenario {
            name: name.to_owned(),
            expected_waste_hours,
            total_hours: to_go_hours(runs),
            runs_fit: projection.runs_fit,
            groups_fit: projection.groups_fit,
        }
    };
    let adjusted = |change: &dyn Fn(usize, &Run) -> f64| -> Vec<Run> {
        runs.iter()
            .enumerate()
            .map(|(i, r)| Run {
                remaining_hours: (r.remaining_hours + change(i, r)).max(0.0),
                ..r.clone()
            })
            .collect()
    };
    let none = adjusted(&|_, r| -r.expected_waste_hours);
    let advised = adjusted(&|i, _| waste.advised_change[i]);
    vec![
        play("no_interruptions", &none, 0.0),
        PlanScenario {
            name: "configured_intervals".into(),
            expected_waste_hours: waste.configured,
            total_hours: to_go_hours(runs),
            runs_fit: planned.runs_fit,
            groups_fit: planned.groups_fit,
        },
        play("advised_intervals", &advised, waste.advised),
    ]
}

#[cfg(test)]
mod tests {
    use futures::FutureExt;
    use podq_api::LeaseId;

    use super::*;
    use crate::store::db;
    use crate::store::leases;
    use crate::store::test_support::{scratch_store, submit_waiting};

    /// A table of waiting jobs, of every class, priority and place: the store's queue (its
    /// SQL, `store::job_state::queue_order`, run on a real SQLite store, and the claims of a
    /// type's pods one after another) orders them as the planner's Rust sort does.
    #[tokio::test]
    async fn the_planners_order_is_the_claims() {
        let (store, _dir) = scratch_store().await;
        // (class rank, priority, evicted: at the head of its class)
        let table = [
            (1, 0, false),
            (1, 5, false),
            (2, 9, false),
            (0, 0, false),
            (1, 5, true),
            (1, 0, false),
            (0, 3, false),
            (2, 9, true),
            (1, -2, false),
            (0, 3, true),
            (1, 5, false),
            (2, 0, false),
        ];
        let mut ids = Vec::new();
        for (class_rank, priority, evicted) in table {
            let id = submit_waiting(&store, &["v4-64"], priority, class_rank).await;
            if evicted {
                store
                    .write(move |conn| {
                        async move {
                            db::query("UPDATE jobs SET queue_head = 1 WHERE id = ?")
                                .bind(id)
                                .execute(conn)
                                .await
                                .map(drop)
                                .map_err(crate::store::StoreError::from)
                        }
                        .boxed()
                    })
                    .await
                    .unwrap();
            }
            ids.push(id);
        }

        let mut conn = store.read().await.unwrap();
        let mut planned = Vec::new();
        for id in &ids {
            planned.push(views::plan_job(&mut conn, *id).await.unwrap().unwrap());
        }
        planned.sort_by_key(queue_order);
        let planned: Vec<JobId> = planned.iter().map(|j| j.id).collect();

        let by_sql: Vec<JobId> =
            db::query_scalar(sqlx::AssertSqlSafe(leases::leasable_ids("?1", "?2")))
                .bind(now_ms())
                .bind(100_i64)
                .fetch_all(&mut conn)
                .await
                .unwrap();
        drop(conn);
        assert_eq!(by_sql, planned, "the queue's SQL and the planner's sort");

        let mut claimed = Vec::new();
        for pod in 0..ids.len() {
            let job = store
                .write(move |conn| {
                    async move {
                        let pod = format!("pod-{pod}");
                        let actor = Actor::worker(&pod);
                        leases::claim(conn, LeaseId::new_random(), &pod, "v4-64", &actor).await
                    }
                    .boxed()
                })
                .await
                .unwrap()
                .expect("a job for each pod");
            claimed.push(job.id);
        }
        assert_eq!(claimed, planned, "the claims' order and the planner's sort");
    }
}
