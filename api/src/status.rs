use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::ids::JobId;
use crate::{JobState, Pod};

/// `GET /api/v1/status` as JSON.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Status {
    pub now: DateTime<Utc>,
    /// Jobs per state, every state present (zero when none).
    pub jobs: BTreeMap<JobState, i64>,
    pub running: Vec<RunningJob>,
    pub pods: Vec<Pod>,
    /// Estimated pod-hours of the runnable queue (queued, leased and running jobs).
    pub queue_hours: f64,
    /// When the queue would drain on one pod at the estimated rates.
    pub queue_eta: Option<DateTime<Utc>>,
    /// Pod time of every run so far.
    pub goodput: crate::Goodput,
    /// The grant and what fits in it under today's order; null without a deadline.
    #[serde(default)]
    pub grant: Option<crate::GrantOutlook>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct RunningJob {
    pub job_id: JobId,
    pub experiment: String,
    /// `leased` or `running`.
    pub state: crate::JobState,
    pub pod: Option<String>,
    pub attempt: i64,
    pub step: Option<i64>,
    pub total_steps: Option<i64>,
    /// Steps per second over the current attempt, when measurable.
    pub steps_per_s: Option<f64>,
}
