//! Pools of slices made on demand: what a pool's process tells the server, what
//! the server answers it, and what `GET /api/v1/pools` shows.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::{Preflight, WorkerEvent};

/// `POST /api/v1/pools/{name}/report`: a pool's process says what it holds, every few seconds.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct PoolReport {
    pub accelerator: String,
    pub max_slices: u32,
    /// Every slice the pool holds (being made, up, or being deleted).
    pub slices: Vec<SliceView>,
    /// Each zone, in the order they are tried.
    pub zones: Vec<ZoneView>,
    /// What happened since the last report, onto the audit (`by: pool:NAME`): kinds of
    /// [`PoolEventKind`].
    #[serde(default)]
    pub events: Vec<WorkerEvent>,
    /// Why the pool makes no slice: a permission or an invalid setting a person must fix.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub paused: Option<String>,
    /// Hours its slices have been alive, leased or not, since the grant began (since the
    /// pool began while there is no grant): what the grant's budget is spent on.
    #[serde(default)]
    pub slice_hours: f64,
    /// Slices given back since the last report the server answered: their pods are retired
    /// (no longer shown nor planned for; their history stays).
    #[serde(default)]
    pub retired: Vec<String>,
    /// Its file's `spares:`: the server answers how many to keep now.
    #[serde(default)]
    pub spares: Spares,
    /// Its file's `max_creating:`: creates in flight at once. The server's answer starts no
    /// more than that beyond its slices `creating`; none: no bound but `max_slices`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_creating: Option<u32>,
}

/// `spares:` of a pool: ready, idle slices kept while the pool runs jobs, so a preempted run
/// resumes on one at once instead of waiting for a slice to be made. A number keeps that
/// many; `auto` keeps one while it pays (the server's `spare_pays`).
#[derive(Debug, Clone, Copy, Serialize, PartialEq, Eq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(untagged)]
pub enum Spares {
    Count(u32),
    Auto(SparesAuto),
}

/// The word `auto`.
#[derive(Debug, Clone, Copy, Serialize, PartialEq, Eq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum SparesAuto {
    Auto,
}

/// A number or the word `auto`, and nothing else, with a message that says so (an untagged
/// enum's "did not match any variant" names neither, nor the line).
impl<'de> Deserialize<'de> for Spares {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Spares, D::Error> {
        struct Visitor;
        impl serde::de::Visitor<'_> for Visitor {
            type Value = Spares;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("spares: a number of slices (0, 1, ...) or `auto`")
            }
            fn visit_u64<E: serde::de::Error>(self, n: u64) -> Result<Spares, E> {
                u32::try_from(n)
                    .map(Spares::Count)
                    .map_err(|_| E::custom(format!("spares: {n} is too many")))
            }
            fn visit_i64<E: serde::de::Error>(self, n: i64) -> Result<Spares, E> {
                match u64::try_from(n) {
                    Ok(n) => self.visit_u64(n),
                    Err(_) => Err(E::custom(format!(
                        "spares: {n} is negative: a number of slices (0, 1, ...) or `auto`"
                    ))),
                }
            }
            fn visit_str<E: serde::de::Error>(self, text: &str) -> Result<Spares, E> {
                match text {
                    "auto" => Ok(Spares::Auto(SparesAuto::Auto)),
                    other => Err(E::custom(format!(
                        "spares: `{other}` is neither a number of slices nor `auto`"
                    ))),
                }
            }
        }
        deserializer.deserialize_any(Visitor)
    }
}

impl Default for Spares {
    fn default() -> Spares {
        Spares::Count(0)
    }
}

/// The most events, and the most retirements, one report of a pool of `max_slices` may
/// carry: a few for each slice it may hold, and a few besides. A pool sends the rest in its
/// next reports; the server refuses a report over it whole, so no report can make it write
/// without bound.
pub const fn report_list_bound(max_slices: u32) -> usize {
    4 * max_slices as usize + 16
}

crate::worker::event_kinds! {
    /// What a pool may report onto the audit.
    PoolEventKind {
        SliceCreated => "slice_created",
        SliceDeleted => "slice_deleted",
        SliceQuarantined => "slice_quarantined",
        SliceForeign => "slice_foreign",
        ZoneBlocked => "zone_blocked",
        PoolPaused => "pool_paused",
        /// A create that failed on its way (a timeout, a reset): its zone is tried again.
        CreateFailed => "create_failed",
    }
}

/// Where a pool's slice stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum SliceState {
    /// Asked for, not usable yet (a create in flight, `CREATING`, a queued resource waiting
    /// for capacity).
    Creating,
    Ready,
    /// Its capacity was taken back (`PREEMPTED`, `TERMINATED`): it will not come back; the
    /// pool deletes it.
    Preempted,
    Deleting,
}

impl SliceState {
    pub const ALL: [SliceState; 4] = [
        SliceState::Creating,
        SliceState::Ready,
        SliceState::Preempted,
        SliceState::Deleting,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            SliceState::Creating => "creating",
            SliceState::Ready => "ready",
            SliceState::Preempted => "preempted",
            SliceState::Deleting => "deleting",
        }
    }

    /// A slice that holds (or will hold) capacity: being made or up.
    pub fn is_alive(self) -> bool {
        matches!(self, SliceState::Creating | SliceState::Ready)
    }

    /// A slice not yet serving, which the queue's demand counts as on its way: being made,
    /// or up with a worker the server has not heard from (`worker_seen`). The server and the
    /// pool count a pool's booting slices by this one rule.
    pub fn is_booting(self, worker_seen: bool) -> bool {
        self == SliceState::Creating || (self == SliceState::Ready && !worker_seen)
    }
}

/// What a zone is to a pool's waterfall now.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum ZoneState {
    Ready,
    Stockout,
    Quota,
    Churn,
    Paused,
}

impl ZoneState {
    pub fn as_str(self) -> &'static str {
        match self {
            ZoneState::Ready => "ready",
            ZoneState::Stockout => "stockout",
            ZoneState::Quota => "quota",
            ZoneState::Churn => "churn",
            ZoneState::Paused => "paused",
        }
    }
}

impl std::fmt::Display for ZoneState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One slice of a pool. Its `pod` is the name its worker leases under.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SliceView {
    pub pod: String,
    pub zone: String,
    pub state: SliceState,
    pub created_at: DateTime<Utc>,
    /// Since when the slice has had no lease; none while leased or being made.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idle_since: Option<DateTime<Utc>>,
}

/// One zone of a pool, as its waterfall sees it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ZoneView {
    pub zone: String,
    pub state: ZoneState,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_try_at: Option<DateTime<Utc>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
}

/// The server's answer to a pool's report: what the queue wants, and what it knows of each
/// slice's pod.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct PoolAnswer {
    /// Leasable jobs routed to the pool's slice type that no pod up or being made will take,
    /// plus the slices this pool is making: the pool makes a slice while this exceeds what
    /// it is making.
    pub demand: u32,
    pub slices: Vec<SlicePod>,
    /// What is left of the grant's pod-hour budget for the pool's accelerator once the
    /// other pools of that accelerator have taken their hours; none when the grant sets no
    /// budget. The pool makes no slice once its own slices have been alive that long since
    /// `grant_start`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grant_pod_hours: Option<f64>,
    /// When the grant began: a pool counts (and reports as `slice_hours`) its slices' hours
    /// from then on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grant_start: Option<DateTime<Utc>>,
    /// Ready, idle slices the pool keeps now (its `spares:` while it runs jobs, as the
    /// server judged them); the pool lets them idle.
    #[serde(default)]
    pub spares: u32,
    /// Creates the pool starts now, as the server judged them from its report: the jobs
    /// routed to its type that no pod up or being made will take, and the spares it keeps
    /// beyond those it has or is making, within its `max_slices`, its `max_creating` and the
    /// grant. The pool carries them out as its zones and the project's create rate allow;
    /// it derives none itself. An answer without it (an older server's) starts none.
    #[serde(default)]
    pub creates: u32,
}

/// A slice's pod as the server knows it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SlicePod {
    pub pod: String,
    /// A live lease holds it.
    pub leased: bool,
    /// When its worker last asked for work or reported; none when it never has (the slice is
    /// still booting, or its worker has not started).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seen_at: Option<DateTime<Utc>>,
    /// Its worker's last preflight.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preflight: Option<Preflight>,
}

/// `GET /api/v1/pools`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct PoolsPage {
    pub pools: Vec<PoolView>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct PoolView {
    pub name: String,
    pub accelerator: String,
    pub max_slices: u32,
    /// The demand it was given: jobs whose list routes them to its slice type now, plus the
    /// slices it is making.
    pub demand: u32,
    /// Jobs that prefer its slice type but went to a later type of their list, because no
    /// pool of this type could make a slice (every zone blocked, paused, full or out of the
    /// grant).
    #[serde(default)]
    pub demand_passed_on: u32,
    pub slices: Vec<SliceView>,
    pub zones: Vec<ZoneView>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub paused: Option<String>,
    pub slice_hours: f64,
    /// When its process last reported.
    pub reported_at: DateTime<Utc>,
}
