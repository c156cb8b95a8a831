//! A record per interruption of a run: from the moment podq noticed it to the resumed
//! attempt's first step, by phase (`GET /api/v1/recoveries`).

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::JobId;

/// Where one recovery's time went, in seconds. `stopping_s`, `waiting_s`, `setup_s`,
/// `startup_s` and `restore_s` follow each other and sum to the record's `total_s`;
/// `creating_s` is the part of `waiting_s` while the slice the run resumed on was being made
/// (or its node recreated), and `compile_s` the part of `startup_s` the trainer reported
/// compiling.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct RecoveryPhases {
    /// From the notice (a preemption notice, a lost host, an eviction) to the attempt's end.
    pub stopping_s: f64,
    /// From the interrupted attempt's end to the next attempt's lease.
    pub waiting_s: f64,
    /// Of `waiting_s`: while the pod it resumed on was being made or recreated.
    pub creating_s: f64,
    /// From the lease to the trainers' launch.
    pub setup_s: f64,
    /// From the launch to the first step, restore excepted.
    pub startup_s: f64,
    /// Of `startup_s`: compiling, as the trainer reported it.
    pub compile_s: f64,
    /// Restoring the checkpoint, as the trainer reported it.
    pub restore_s: f64,
}

impl RecoveryPhases {
    /// The phases by name, as `/metrics` labels them, the sequential ones first.
    pub fn named(&self) -> [(&'static str, f64); 7] {
        [
            ("stopping", self.stopping_s),
            ("waiting", self.waiting_s),
            ("setup", self.setup_s),
            ("startup", self.startup_s),
            ("restore", self.restore_s),
            ("creating", self.creating_s),
            ("compile", self.compile_s),
        ]
    }

    /// The sequential phases' sum: the whole recovery.
    pub fn total_s(&self) -> f64 {
        self.stopping_s + self.waiting_s + self.setup_s + self.startup_s + self.restore_s
    }
}

/// One interruption of a run and how it was recovered from.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Recovery {
    pub job_id: JobId,
    /// The interrupted attempt; the next one resumed the run.
    pub attempt: i64,
    /// `preempted`, `lost`, `evicted` or `suspended`.
    pub cause: String,
    /// The pod the interrupted attempt ran on.
    pub pod: String,
    /// Its slice type.
    pub accelerator: String,
    /// Its zone, when a pool made it.
    pub zone: Option<String>,
    /// The pod the run resumed on.
    pub resumed_on: String,
    pub noticed_at: DateTime<Utc>,
    /// The resumed attempt's first step.
    pub resumed_at: DateTime<Utc>,
    pub total_s: f64,
    /// Steps trained by the interrupted attempt past the checkpoint the run resumed from.
    pub lost_steps: Option<i64>,
    pub phases: RecoveryPhases,
}

/// The recoveries of one slice type, zone and cause.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct RecoverySummary {
    pub accelerator: String,
    pub zone: Option<String>,
    pub cause: String,
    pub count: u64,
    pub p50_s: f64,
    pub p95_s: f64,
    /// Each phase's median over these recoveries.
    pub phases_p50: RecoveryPhases,
}

/// `GET /api/v1/recoveries`: the newest records, and the summary over every record kept.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct RecoveriesReport {
    pub recoveries: Vec<Recovery>,
    pub summary: Vec<RecoverySummary>,
}
