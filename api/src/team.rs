//! A team's people, who is calling, and the audit trail.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::ids::JobId;

/// A person (or a worker's credential) as an admin sees them. The token is never shown
/// again after `add` or `rotate`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct User {
    pub name: String,
    /// `viewer`, `submitter`, `admin` or `worker`.
    pub role: String,
    /// A worker token limited to these pods; null: any pod.
    #[serde(default)]
    pub pods: Option<Vec<String>>,
    pub created_at: DateTime<Utc>,
    pub created_by: String,
    /// Set when the person was disabled: their token no longer works.
    #[serde(default)]
    pub disabled_at: Option<DateTime<Utc>>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct UserList {
    pub users: Vec<User>,
    /// True when the server takes its people from `--users FILE`: they are changed there.
    pub from_file: bool,
}

/// `POST /api/v1/users`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct AddUserRequest {
    /// 1 to 64 letters, digits, `.`, `_`, `-` or `@`, starting with a letter or digit;
    /// `podq`, `anonymous`, `admin` and `worker` name podq's own actors.
    #[cfg_attr(
        feature = "openapi",
        schema(pattern = "^[A-Za-z0-9][A-Za-z0-9._@-]{0,63}$")
    )]
    pub name: String,
    /// `viewer`, `submitter`, `admin` or `worker`.
    #[cfg_attr(
        feature = "openapi",
        schema(pattern = "^(viewer|submitter|admin|worker)$")
    )]
    pub role: String,
    /// Only for a worker: the pods its token may lease for and report as.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(min_items = 1))]
    pub pods: Option<Vec<String>>,
}

/// The answer of `add` and `rotate`: the token, shown this once.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct UserToken {
    pub user: User,
    pub token: String,
}

/// `GET /api/v1/whoami`: who the server takes the caller for, and what the caller may do.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct WhoAmI {
    /// The caller's name; `anonymous` when no token was sent and none was needed.
    pub name: String,
    pub role: String,
    /// Whether the server checks tokens for calls that change something.
    pub tokens_required: bool,
    /// Whether reading needs a token too (the server listens beyond loopback without
    /// `--open-reads`).
    pub reads_need_token: bool,
    /// What this caller may do: `read`, `submit`, `act_on_own_jobs`, `act_on_any_job`,
    /// `manage` (grant, plan, schedules, webhooks, people).
    pub may: Vec<String>,
    /// The suite's priority classes in queue order, each saying whether this caller may put
    /// a job in it (a class's `allowed:`), so a page offers only those.
    #[serde(default)]
    pub classes: Vec<ClassUse>,
}

/// A priority class as one caller may use it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ClassUse {
    pub name: String,
    /// The class a submission without one gets.
    pub default: bool,
    /// Whether this caller may submit to it or move a job to it.
    pub allowed: bool,
}

/// One change in the audit trail.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct AuditEntry {
    pub id: i64,
    pub at: DateTime<Utc>,
    /// Who made it: a person's name, `worker:POD`, `schedule:ID` or `podq`.
    pub by: String,
    /// What happened (the event's kind: `submitted`, `cancelled`, `priority`, `user_added`…).
    pub action: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job_id: Option<JobId>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod: Option<String>,
    /// What changed, in words.
    pub message: String,
    /// The address the request came from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub address: Option<String>,
    /// The request's `X-Request-Id`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_id: Option<String>,
    /// Whose token made the change: the person, or a worker token's own name (a worker's
    /// change is `by` its pod).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_holder: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct AuditPage {
    /// Newest first.
    pub entries: Vec<AuditEntry>,
    /// Pass as `before` for the next (older) page; null on the last page.
    #[serde(default)]
    pub next_before: Option<i64>,
}
