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
}
