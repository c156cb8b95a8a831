//! `GET /api/v1/jobs/{id}/logs`: a job's log lines and what the server dropped of them.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::ids::JobId;

/// One line of a job's log: which attempt and host printed it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct LogLine {
    /// Arrival order; pass the last one seen as `after` to read on.
    pub id: i64,
    pub attempt: i64,
    pub host: u32,
    pub at: DateTime<Utc>,
    pub text: String,
}

/// Lines the server no longer keeps for one attempt and host: it keeps the newest
/// `kept_per_host` and drops the oldest first.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct LogDropped {
    pub attempt: i64,
    pub host: u32,
    pub lines: i64,
}

/// `GET /api/v1/jobs/{id}/logs`: a page of the job's log lines in arrival order.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct JobLogs {
    pub job_id: JobId,
    pub lines: Vec<LogLine>,
    /// The cursor for the next page (the last line's id, or the `after` sent).
    pub next_after: i64,
    /// Whether more lines matched than the page holds.
    pub more: bool,
    /// Where the server dropped old lines of the attempts and hosts asked for.
    pub dropped: Vec<LogDropped>,
    /// The cap per attempt and host.
    pub kept_per_host: i64,
}
