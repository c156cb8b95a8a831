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
    /// Pod-hours still to go over every run of the catalog.
    pub total_hours: f64,
    /// Each estimate is multiplied by this to cover the time around training (setup,
    /// start-up, stopping): (kept + overhead) / kept over the attempts so far, or 1.0 before
    /// any. Work redone after interruptions is each run's `expected_waste_hours` instead.
    pub overhead_factor: f64,
    /// Over the runs still to go: hours expected to be redone after interruptions.
    pub expected_waste_hours: f64,
    /// Pod-hours the advised checkpoint intervals would save over the runs still to go.
    pub pod_hours_saved_by_advice: f64,
    pub scenarios: Vec<PlanScenario>,
    /// Runs whose estimate is measured, from the catalog, or done.
    pub estimates: BTreeMap<String, usize>,
    /// Running runs, then queued ones in lease order, then experiments not submitted yet in
    /// suite order.
    pub current: Projection,
    /// The order that completes the most whole groups before the deadline.
    pub recommended: Projection,
    pub groups: Vec<GroupPlan>,
    /// The current order with every pool at its `max_slices` (docs/operations.md, "Pools");
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
    /// attempt's, else the one it prefers).
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
