//! The compute grant and the plan: which runs and whole groups finish before the grant ends,
//! under today's order and under the order podq recommends (docs/plan.md).

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::ids::JobId;

/// `PUT /api/v1/grant`: the compute grant the plan measures against.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct GrantRequest {
    /// When the grant began; pod time used since then counts against `pod_hours`. Default: now.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "crate::time::optional_rfc3339"
    )]
    pub start: Option<DateTime<Utc>>,
    /// When it ends: the plan's deadline. Must be in the future and after `start`.
    #[serde(deserialize_with = "crate::time::rfc3339")]
    pub end: DateTime<Utc>,
    /// Optional pod-hour budget per accelerator type (e.g. `{"v4-64": 720}`).
    #[serde(default)]
    pub pod_hours: BTreeMap<String, f64>,
}

/// The grant as stored (`GET /api/v1/grant`).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Grant {
    pub start: DateTime<Utc>,
    pub end: DateTime<Utc>,
    pub pod_hours: BTreeMap<String, f64>,
    /// `api` when set by `PUT /grant`, `flag` when it comes from the server's `--deadline`.
    pub source: String,
}

/// One line of status: the grant's end and what fits before it under today's order.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct GrantOutlook {
    pub end: DateTime<Utc>,
    pub runs_fit: usize,
    pub runs: usize,
    pub groups_fit: usize,
    pub groups: usize,
}

/// Where a run's remaining hours come from.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum EstimateSource {
    /// The step rate measured on the pod, over the run's latest attempt.
    Measured,
    /// The `est_hours` of the experiment's `group.yaml`, less the share of steps done.
    Catalog,
    /// The run has finished.
    Done,
}

/// `GET /api/v1/plan`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Plan {
    pub now: DateTime<Utc>,
    /// The end of the grant (or the `deadline` query); null when none is set, and then
    /// nothing claims to fit or not to fit.
    pub deadline: Option<DateTime<Utc>>,
    pub grant: Option<Grant>,
    /// Pods the projection spreads the runs over (at least 1 of each accelerator type).
    pub pods: usize,
    /// Pod-hours left before the deadline on all pods, capped by the grant's budgets.
    pub capacity_hours: Option<f64>,
    /// The same by accelerator type: each type's runs play out on its own pods only.
    pub pools: Vec<PoolPlan>,
    /// Pod-hours still to go over every run of the catalog, as played: a run expected to be
    /// pruned at a rung, to that rung.
    pub total_hours: f64,
    /// Each estimate is multiplied by this to cover the time around training (setup,
    /// start-up, stopping): (kept + overhead) / kept over the attempts so far, or 1.0 before
    /// any. Work redone after interruptions is each run's `expected_waste_hours` instead.
    pub overhead_factor: f64,
    /// Over the runs still to go: hours expected to be redone after interruptions.
    pub expected_waste_hours: f64,
    /// Pod-hours the advised checkpoint intervals would save over the runs still to go.
    pub pod_hours_saved_by_advice: f64,
    /// Pod-hours the groups' rungs are expected to save over the runs still to go: the runs
    /// expected to be pruned at a rung do not train past it (each group's `rungs`).
    #[serde(default)]
    pub pod_hours_saved_by_rungs: f64,
    pub scenarios: Vec<PlanScenario>,
    /// Runs whose estimate is measured, from the catalog, or done.
    pub estimates: BTreeMap<String, usize>,
    /// Running runs, then queued ones in lease order, then experiments not submitted yet in
    /// suite order.
    pub current: Projection,
    /// The order that completes the most whole groups before the deadline.
    pub recommended: Projection,
    pub groups: Vec<GroupPlan>,
    /// The current order with every pool at its `max_slices` (docs/operations/pools.md, "Pools");
    /// null while no pool has reported.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub with_pools: Option<PoolsOutlook>,
}

/// What the plan becomes with every pool at its most.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct PoolsOutlook {
    /// Pods then: those made by hand plus each pool's `max_slices`.
    pub pods: usize,
    pub projection: Projection,
}

/// The pods of one accelerator type in the plan.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct PoolPlan {
    pub accelerator: String,
    /// Pods of this type the server knows (at least 1: a type with none yet is planned as if
    /// one will come).
    pub pods: usize,
    /// What the grant's budget for this type has left; null without one.
    pub budget_hours_left: Option<f64>,
    /// Pod-hours left for waiting runs of this type; null without a deadline or budget.
    pub capacity_hours: Option<f64>,
    /// Pod-hours still to go over this type's runs.
    pub total_hours: f64,
    /// Runs of this type not done yet (on a pod, queued, or not submitted).
    pub runs_to_go: usize,
    /// Warm spares its pools keep now (`spares:`): ready pods no run is planned on.
    #[serde(default)]
    pub spares: u32,
    /// What those spares idle until the deadline at most, in pod-hours, taken from the
    /// type's budget; null without spares or a deadline.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spare_idle_hours: Option<f64>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Projection {
    pub runs: Vec<PlannedRun>,
    /// Null without a deadline.
    pub runs_fit: Option<usize>,
    pub groups_fit: Option<usize>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct PlannedRun {
    /// The run's job; null for an experiment not submitted yet.
    pub job_id: Option<JobId>,
    /// The experiment whose job trains the run.
    pub experiment: String,
    pub group: String,
    /// `running`, `leased`, `queued`, `succeeded`, `stopped`, `held`, `failed`, `cancelled`,
    /// or `not_submitted`.
    #[cfg_attr(feature = "openapi", schema(value_type = String))]
    pub state: crate::RunState,
    pub priority: Option<i64>,
    /// Pod-hours to go on the slice type the run is reckoned on (its latest measured
    /// attempt's, else the one it prefers); for a run its group's rungs are expected to
    /// prune, to that rung.
    pub remaining_hours: f64,
    pub estimate: EstimateSource,
    /// The slice type the run is played out on: the first of its types whose pods would
    /// finish it soonest, at its speed there.
    #[serde(default)]
    pub accelerator: String,
    pub start: DateTime<Utc>,
    pub end: DateTime<Utc>,
    /// Null without a deadline, and for runs that will not run (failed, held, cancelled).
    pub fits_deadline: Option<bool>,
    /// Other experiments with the identical training config, which finish with this run.
    pub also_finishes: Vec<String>,
    /// Of `remaining_hours`: work expected to be redone after interruptions, at the run's
    /// checkpoint interval and its pod type's interruption rate (Young/Daly, first order).
    pub expected_waste_hours: f64,
    /// The checkpoint interval that would waste the least; null for a run that is done or
    /// whose steps are unknown.
    pub checkpoint_advice: Option<crate::CheckpointAdvice>,
}

/// What fits under other assumptions, each played out in the recommended order.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct PlanScenario {
    /// `no_interruptions` (no work redone), `configured_intervals` (the plan itself) or
    /// `advised_intervals` (every run at its advised checkpoint interval).
    pub name: String,
    pub expected_waste_hours: f64,
    pub total_hours: f64,
    /// Null without a deadline.
    pub runs_fit: Option<usize>,
    pub groups_fit: Option<usize>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct GroupPlan {
    pub name: String,
    /// Distinct runs the group needs, and how many of them have finished.
    pub runs: usize,
    pub runs_done: usize,
    /// When its last run ends under each order (null when one of its runs will not run).
    pub end_current: Option<DateTime<Utc>>,
    pub end_recommended: Option<DateTime<Utc>>,
    /// Null without a deadline.
    pub fits_current: Option<bool>,
    pub fits_recommended: Option<bool>,
    /// Its rungs and what the plan expects of them; absent for a group without rungs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rungs: Option<GroupRungsPlan>,
}

/// A group's rungs in the plan (docs/plan.md, "Rungs"): its runs are played out with the
/// pod-hours the rungs leave. Which runs will go on is not known ahead, so the plan takes the
/// baseline row and the runs furthest along (then the longest) as the ones promoted; the
/// others stop at the rung they are expected to be pruned at. A group with rungs fits when
/// its promoted runs finish before the deadline.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct GroupRungsPlan {
    /// The metric its runs are ranked by at each rung.
    pub metric: String,
    /// Whether a lower value of `metric` is better (loss, error, perplexity).
    pub lower_is_better: bool,
    /// Each rung's place in a run's steps, as a share (0.25 for 25%).
    pub at: Vec<f64>,
    /// The share kept past each rung, as `rungs:` writes it; null for `keep: auto`.
    pub keep: Option<f64>,
    /// The share in force: `keep`, or under `keep: auto` the plan's choice, the largest for
    /// which the recommended plan still completes as many whole groups as the most pruning
    /// would (all of them when the grant holds the suite). 1 prunes nothing.
    pub keep_chosen: f64,
    /// Per rung, first rung first: the runs expected to reach it, to be promoted past it and
    /// to be pruned there.
    pub per_rung: Vec<RungOutlook>,
    /// Pod-hours the rungs are expected to save over the group's runs still to go.
    pub hours_saved: f64,
}

/// What the plan expects at one rung of a group.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct RungOutlook {
    /// The rung's place in a run's steps, as a share.
    pub at: f64,
    /// Distinct runs expected to be judged there.
    pub runs: usize,
    /// Of those, the runs expected to go on past it (the baseline row always does).
    pub promoted: usize,
    /// And the runs expected to end there.
    pub pruned: usize,
}

impl GroupRungsPlan {
    /// One line, as the plan's table and `podq plan apply` print it: "eval/exact_accuracy at
    /// 25%, 50%, keep auto (1/2 chosen): 5 -> 3 -> 2 runs, 80 pod-hours saved".
    pub fn describe(&self) -> String {
        let at: Vec<String> = self.at.iter().map(|a| percent(*a)).collect();
        let keep = match self.keep {
            Some(keep) => share(keep),
            None => format!("auto ({} chosen)", share(self.keep_chosen)),
        };
        let mut runs: Vec<String> = self
            .per_rung
            .first()
            .map_or_else(Vec::new, |first| vec![first.runs.to_string()]);
        runs.extend(self.per_rung.iter().map(|r| r.promoted.to_string()));
        format!(
            "{} at {}, keep {keep}: {} runs, {:.0} pod-hours saved",
            self.metric,
            at.join(", "),
            runs.join(" -> "),
            self.hours_saved
        )
    }
}

/// A share as people write it: a fraction with a small denominator (1/2, 2/3), else a
/// percentage; 1 as "1".
fn share(value: f64) -> String {
    if (value - 1.0).abs() < 1e-9 {
        return "1".into();
    }
    for b in 2..=16u32 {
        let a = (value * f64::from(b)).round();
        if a >= 1.0 && (a / f64::from(b) - value).abs() < 1e-9 {
            return format!("{a}/{b}");
        }
    }
    percent(value)
}

/// 0.25 as "25%".
fn percent(value: f64) -> String {
    let p = value * 100.0;
    format!("{}%", (p * 1000.0).round() / 1000.0)
}

/// `POST /api/v1/plan/apply`: what applying the recommended order did.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct PlanApplied {
    /// Experiments submitted because the recommended order includes them.
    pub submitted: Vec<String>,
    /// Jobs whose priority changed.
    pub reprioritised: usize,
    pub plan: Plan,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_groups_rungs_read_as_one_line() {
        let outlook = |at, runs, promoted| RungOutlook {
            at,
            runs,
            promoted,
            pruned: runs - promoted,
        };
        let mut rungs = GroupRungsPlan {
            metric: "eval/exact_accuracy".into(),
            lower_is_better: false,
            at: vec![0.25, 0.5],
            keep: None,
            keep_chosen: 0.5,
            per_rung: vec![outlook(0.25, 5, 3), outlook(0.5, 3, 2)],
            hours_saved: 80.4,
        };
        assert_eq!(
            rungs.describe(),
            "eval/exact_accuracy at 25%, 50%, keep auto (1/2 chosen): 5 -> 3 -> 2 runs, 80 \
             pod-hours saved"
        );
        rungs.keep = Some(2.0 / 3.0);
        rungs.keep_chosen = 2.0 / 3.0;
        rungs.at = vec![0.125];
        rungs.per_rung.truncate(1);
        assert_eq!(
            rungs.describe(),
            "eval/exact_accuracy at 12.5%, keep 2/3: 5 -> 3 runs, 80 pod-hours saved"
        );
        assert_eq!(share(1.0), "1");
        assert_eq!(share(0.37), "37%");
    }
}
