use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::ids::{JobId, LeaseId};

/// What a worker knows about its pod, sent with every lease request and pod report.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct PodDescription {
    /// e.g. `v4-64`.
    pub accelerator: String,
    pub hosts: u32,
    /// The pod's state as the worker last saw it (`READY`, `PREEMPTED`, `recovering`, ...).
    pub state: String,
    /// `HEALTHY`, `UNHEALTHY_MAINTENANCE`, ...
    pub health: String,
    /// The last preflight result; a pod only leases after one that passed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preflight: Option<Preflight>,
    /// What the worker is waiting for while it recovers the pod.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recovery: Option<String>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Preflight {
    pub passed: bool,
    #[serde(default, deserialize_with = "crate::time::optional_rfc3339")]
    pub at: Option<DateTime<Utc>>,
    /// One entry per failed check.
    #[serde(default)]
    pub failures: Vec<PreflightFailure>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct PreflightFailure {
    /// The host index, or none for a pod-wide check.
    pub host: Option<u32>,
    pub check: String,
    pub message: String,
}

/// `GET /api/v1/pods`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Pod {
    pub name: String,
    pub accelerator: String,
    pub hosts: u32,
    pub state: String,
    pub health: String,
    pub preflight: Option<Preflight>,
    pub recovery: Option<String>,
    pub last_seen_at: DateTime<Utc>,
    /// The job it holds a lease for, if any.
    pub current_job: Option<JobId>,
    pub current_lease: Option<LeaseId>,
}

/// What a pod's name may be, in words, for an answer that refuses one.
pub const POD_NAME_RULE: &str = "1 to 63 letters, digits, `-` or `_`";

/// Whether `name` may name a pod (or a pool's zone): [`POD_NAME_RULE`]. It goes into URLs,
/// file names and log lines, so nothing else is allowed.
pub fn is_pod_name(name: &str) -> bool {
    (1..=63).contains(&name.len())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
}
