use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::Pod;

/// `GET /api/v1/status` as JSON.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Status {
    pub now: DateTime<Utc>,
    /// Jobs per state, every state present (zero when none).
    pub jobs: BTreeMap<String, i64>,
    pub running: Vec<RunningJob>,
    pub pods: Vec<Pod>,
    /// Estimated pod-hours of the runnable queue (queued, leased and running jobs).
    pub queue_hours: f64,
    /// When the queue would drain on one pod at the estimated rates.
    pub queue_eta: Option<DateTime<Utc>>,
    /// Pod time of every run so far.
    pub goodput: crate::Goodput,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct RunningJob {
    pub job_id: Uuid,
    pub experiment: String,
    pub state: String,
    pub pod: Option<String>,
    pub attempt: i64,
    pub step: Option<i64>,
    pub total_steps: Option<i64>,
    /// Steps per second over the current attempt, when measurable.
    pub steps_per_s: Option<f64>,
}

/// `GET /api/v1/plan`: the queue in the order it will run, projected onto the pods.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Plan {
    pub now: DateTime<Utc>,
    /// The end of the compute grant, when configured.
    pub deadline: Option<DateTime<Utc>>,
    /// Pods the projection spreads the queue over (at least 1).
    pub pods: usize,
    pub total_hours: f64,
    /// Runs that end before the deadline (all of them without a deadline).
    pub runs_that_fit: usize,
    pub runs: Vec<PlannedRun>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct PlannedRun {
    pub job_id: Uuid,
    pub experiment: String,
    pub group: String,
    pub state: String,
    pub priority: i64,
    /// Pod-hours still to go: from the measured step rate when running, else the plan's
    /// `est_hours` less the progress already kept.
    pub remaining_hours: f64,
    pub start: DateTime<Utc>,
    pub end: DateTime<Utc>,
    pub fits_deadline: bool,
    /// Experiments linked to this run (identical training configs), which finish with it.
    pub also_finishes: Vec<String>,
}
