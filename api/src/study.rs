//! `GET /api/v1/groups/{name}/study`: what a group's runs show, row by row.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::ids::JobId;
use crate::MetricValue;

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct GroupStudy {
    pub group: String,
    pub title: String,
    /// What changes from row to row, as `group.yaml` says.
    pub varies: String,
    pub baseline_row: Option<String>,
    pub metrics_to_watch: Vec<String>,
    pub rows: Vec<StudyRow>,
    /// The group's rungs (`rungs:` in its `group.yaml`, or the suite's); null for a group
    /// without. Each row's `rungs` says what they decided about its run.
    #[serde(default)]
    pub rungs: Option<StudyRungs>,
}

/// A group's rungs: where its runs are compared, by what, and what share goes on.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct StudyRungs {
    /// The metric runs are ranked by at each rung.
    pub metric: String,
    /// Whether a lower value of `metric` is better (a loss, an error or a perplexity).
    pub lower_is_better: bool,
    /// Each rung's place in a run, as a share of its total steps (0.25 for 25%), first rung
    /// first.
    pub at: Vec<f64>,
    /// The share promoted past each rung: the group's `keep`, or with `keep: auto` the share
    /// the plan chose (1, nothing pruned, until it has).
    pub keep: f64,
    /// Whether the group says `keep: auto`.
    pub keep_auto: bool,
    /// The rungs as people read them: `eval/exact_accuracy at 25%, 50%, keep 50%`.
    pub description: String,
}

/// A run at one rung: the value it was judged on, and the standing decision there.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct StudyRung {
    /// 1 for the first rung.
    pub rung: i64,
    /// The step of the value it was judged on (the first of the metric at or after the
    /// rung's step), or, without one, the rung's step in its run.
    pub step: Option<i64>,
    /// Its value of the rungs' metric there; null when it reported none.
    pub value: Option<f64>,
    /// `promoted` (it went on), `paused` (it waits, holding no pod, for its siblings),
    /// `pruned` (it ended `stopped`), `no_value` (its metric never reported there: not
    /// judged, it went on); null while its value waits for the decision.
    pub verdict: Option<String>,
    /// Its rank among the runs judged at the rung (1 the best), of `of`.
    pub rank: Option<i64>,
    pub of: Option<i64>,
    pub decided_at: Option<chrono::DateTime<chrono::Utc>>,
    /// `podq`, or the person who promoted it by hand.
    pub decided_by: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct StudyRow {
    pub experiment: String,
    /// The experiment's newest job; null if it was never submitted.
    pub job_id: Option<JobId>,
    /// The job whose run trains it (itself, or the run it shares).
    pub run_id: Option<JobId>,
    /// A job state, or `not_submitted`.
    #[cfg_attr(feature = "openapi", schema(value_type = String))]
    pub state: crate::RunState,
    pub baseline: bool,
    /// Config keys (dotted) whose value differs from the baseline row's.
    pub params: BTreeMap<String, serde_json::Value>,
    /// Per metric: the newest point, and the best (lowest for a loss, an error or a
    /// perplexity, else highest: `results::lower_is_better`).
    #[serde(rename = "final")]
    pub last: BTreeMap<String, MetricValue>,
    pub best: BTreeMap<String, MetricValue>,
    pub attempts: i64,
    pub preemptions: i64,
    pub message: Option<String>,
    /// Its run at each rung it reached, first rung first; empty for a group without rungs
    /// or a run before its first.
    #[serde(default)]
    pub rungs: Vec<StudyRung>,
}
