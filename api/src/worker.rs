//! The worker protocol (docs/architecture.md §3.2): lease, heartbeat, metrics, checkpoints, finish.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::ids::{JobId, LeaseId};
use crate::{AttemptOutcome, PodDescription};

/// `POST /api/v1/pods/{name}/lease`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct LeaseRequest {
    #[serde(flatten)]
    pub pod: PodDescription,
    /// How long to long-poll for a job, in seconds (default 20, at most 60).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wait_s: Option<u64>,
}

/// A granted lease: everything the worker needs to run one attempt of one job.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Lease {
    pub lease_id: LeaseId,
    pub job_id: JobId,
    pub attempt: i64,
    pub experiment: String,
    pub group: String,
    pub config: serde_json::Value,
    pub config_sha256: String,
    pub checkpoint_dir: String,
    pub resume_from: Option<String>,
    /// The step of `resume_from`, when known.
    pub resume_step: Option<i64>,
    /// Older committed checkpoints to fall back to, newest first, should `resume_from` turn
    /// out to be missing or incomplete.
    #[serde(default)]
    pub fallback_checkpoints: Vec<String>,
    /// The interval in steps the experiment's `checkpoint_interval` asks for (the advised one
    /// under `auto`), which the worker passes to every host's trainer as
    /// `PODQ_CHECKPOINT_INTERVAL_STEPS`; absent, the trainer keeps its own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checkpoint_interval_steps: Option<u64>,
    /// The slice this attempt runs on, which may differ from the last attempt's: a run
    /// moves between the slice types of its job's list. None for a type podq does not know.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slice: Option<crate::SliceShape>,
    /// Where the trainers keep JAX's persistent compilation cache, shared by every attempt on
    /// this slice type (the worker sets `JAX_COMPILATION_CACHE_DIR` to it); none from an
    /// older server.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compile_cache_dir: Option<String>,
    pub lease_ttl_s: u64,
    pub heartbeat_s: u64,
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum LeasePhase {
    Preparing,
    Running,
}

/// `POST /api/v1/leases/{lease_id}/heartbeat`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct HeartbeatRequest {
    pub phase: LeasePhase,
    #[serde(default)]
    pub step: Option<i64>,
    /// Per host, in host order: is its trainer process alive.
    #[serde(default)]
    pub hosts_alive: Vec<bool>,
}

/// The time a trainer reported spending, this attempt, in what only it can see: its
/// `PODQ {"event":"phase"}` lines (`podq_trainer.phase`), timed by the worker as they arrive.
/// Totals for the attempt so far, so a report sent twice changes nothing.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct TrainerPhases {
    /// Compiling the first step (XLA).
    #[cfg_attr(feature = "openapi", schema(minimum = 0))]
    pub compile_s: f64,
    /// Restoring the checkpoint it resumed from.
    #[cfg_attr(feature = "openapi", schema(minimum = 0))]
    pub restore_s: f64,
    /// The blocking part of its checkpoint saves (an async save's background commit is not
    /// counted: training goes on during it).
    #[cfg_attr(feature = "openapi", schema(minimum = 0))]
    pub save_s: f64,
    /// Saves whose end was seen.
    #[cfg_attr(feature = "openapi", schema(minimum = 0))]
    pub saves: u32,
}

impl TrainerPhases {
    /// Refuses what no trainer can have reported: negative or non-finite times.
    pub fn is_valid(&self) -> bool {
        [self.compile_s, self.restore_s, self.save_s]
            .iter()
            .all(|s| s.is_finite() && *s >= 0.0)
    }
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct HeartbeatResponse {
    pub lease_expires_at: DateTime<Utc>,
    /// The job was cancelled: stop every host and finish with `cancelled`.
    pub cancel: bool,
    /// The server needs the pod back for a job that did nothing wrong (evicted by a job of a
    /// higher class, or suspended by a person): stop every host with the full grace, so the
    /// trainer saves, and finish with `preempted`. Absent from older servers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop: Option<StopOrder>,
}

/// Why the server asks a worker to stop an attempt that did nothing wrong.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct StopOrder {
    /// E.g. `evicted by job 0c9e… (exp01a, urgent) submitted by alice`.
    pub reason: String,
}

/// One reported step of a trainer: the values of several metrics at that step.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct MetricStep {
    pub step: i64,
    /// A non-finite value is the string `"NaN"`, `"Infinity"` or `"-Infinity"` (nonfinite.rs).
    #[serde(with = "crate::nonfinite::map")]
    #[cfg_attr(feature = "openapi", schema(value_type = BTreeMap<String, crate::nonfinite::MetricNumberSchema>))]
    pub values: BTreeMap<String, f64>,
}

/// `POST /api/v1/leases/{lease_id}/metrics`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct MetricsBatch {
    pub points: Vec<MetricStep>,
    /// What the trainer reported of its phases so far in this attempt, when it changed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phases: Option<TrainerPhases>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct MetricsAck {
    pub accepted: usize,
    /// A stop rule or the divergence guard fired on what this batch brought: stop every host
    /// with the full grace, as for the heartbeat's `stop`. The heartbeat says it too, later.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop: Option<StopOrder>,
}

/// A log line longer than this is cut, by the worker and again by the server (a progress bar
/// redrawn without newlines can be megabytes).
pub const MAX_LOG_LINE_BYTES: usize = 16 * 1024;

/// Cuts `text` to [`MAX_LOG_LINE_BYTES`] at a character boundary and says so.
pub fn cut_long_log_line(text: &mut String) {
    if text.len() <= MAX_LOG_LINE_BYTES {
        return;
    }
    let mut end = MAX_LOG_LINE_BYTES;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    let cut = text.len() - end;
    text.truncate(end);
    text.push_str(&format!(" [... {cut} more bytes cut by podq]"));
}

/// One line a host's trainer printed, as the worker forwards it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct HostLogLine {
    /// The host's index in the pod (its `--worker` number).
    #[cfg_attr(feature = "openapi", schema(minimum = 0))]
    pub host: u32,
    /// The line's byte offset in that host's output for this attempt: a line sent again
    /// (after a worker restart) has the same offset and is stored once.
    #[cfg_attr(feature = "openapi", schema(minimum = 0))]
    pub offset: u64,
    /// When the worker received it.
    #[serde(deserialize_with = "crate::time::rfc3339")]
    pub at: DateTime<Utc>,
    /// Without its newline.
    pub text: String,
}

/// `POST /api/v1/leases/{lease_id}/logs`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct LogBatch {
    pub lines: Vec<HostLogLine>,
}

/// A checkpoint the worker found in the store.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct CheckpointReport {
    pub step: i64,
    pub uri: String,
    pub committed: bool,
}

/// `POST /api/v1/leases/{lease_id}/checkpoints`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct CheckpointsBatch {
    pub checkpoints: Vec<CheckpointReport>,
}

/// `POST /api/v1/leases/{lease_id}/events`: things the worker observed, for the job's timeline.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct WorkerEvents {
    pub events: Vec<WorkerEvent>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct WorkerEvent {
    /// A name of [`WorkerEventKind`] (of `PoolEventKind` from a pool); any other is refused
    /// (422 `unknown_event_kind`).
    pub kind: String,
    /// At most [`MAX_EVENT_MESSAGE_BYTES`] are kept; control characters are stored escaped.
    pub message: String,
}

/// A kind of event a worker or a pool reports. The sender names it by its enum, the wire
/// carries its name, and the server takes only a name of the enum it expects from that
/// sender: no change a person or podq makes has one of these kinds, so a worker's or a pool's
/// event cannot read as a person's action in the audit.
pub trait EventKind: Copy + Sized + 'static {
    const ALL: &'static [Self];
    fn as_str(self) -> &'static str;

    fn named(name: &str) -> Option<Self> {
        Self::ALL.iter().copied().find(|kind| kind.as_str() == name)
    }

    /// Every name, comma-separated, for a refusal.
    fn names() -> String {
        Self::ALL
            .iter()
            .map(|kind| kind.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// An enum of event kinds, each variant with its name on the wire.
macro_rules! event_kinds {
    ($(#[$meta:meta])* $name:ident { $($(#[$vmeta:meta])* $variant:ident => $text:literal,)* }) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum $name {
            $($(#[$vmeta])* $variant,)*
        }

        impl $crate::worker::EventKind for $name {
            const ALL: &'static [$name] = &[$($name::$variant,)*];

            fn as_str(self) -> &'static str {
                match self {
                    $($name::$variant => $text,)*
                }
            }
        }
    };
}
pub(crate) use event_kinds;

event_kinds! {
    /// What a worker may report onto a job's or pod's timeline: exactly what the worker sends.
    WorkerEventKind {
        /// On a lease (`POST /leases/{id}/events`).
        AgentRestarted => "agent_restarted",
        CheckpointStore => "checkpoint_store",
        HostCleanup => "host_cleanup",
        ResumeFallback => "resume_fallback",
        SilentRestart => "silent_restart",
        /// On a pod (`POST /pods/{name}/report`).
        PreflightFailed => "preflight_failed",
        Recovering => "recovering",
    }
}

impl WorkerEvent {
    /// An event of `kind`, as its sender names it.
    pub fn of(kind: impl EventKind, message: impl Into<String>) -> WorkerEvent {
        WorkerEvent {
            kind: kind.as_str().to_owned(),
            message: message.into(),
        }
    }
}

/// The longest event message kept, in bytes; a longer one is cut and the cut is marked.
pub const MAX_EVENT_MESSAGE_BYTES: usize = 4096;

/// `text` as one printable line: every control character (a newline, an escape sequence)
/// written as its Rust escape (`\n`, `\u{1b}`), so that a message can draw no row and move
/// no cursor wherever it is printed.
pub fn escape_controls(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if c.is_control() {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    out
}

/// A worker's event message as it is stored: controls escaped, cut to
/// [`MAX_EVENT_MESSAGE_BYTES`] at a character boundary.
pub fn bounded_event_message(text: &str) -> String {
    let mut text = escape_controls(text);
    if text.len() > MAX_EVENT_MESSAGE_BYTES {
        const MARK: &str = " [cut]";
        let mut cut = MAX_EVENT_MESSAGE_BYTES - MARK.len();
        while !text.is_char_boundary(cut) {
            cut -= 1;
        }
        text.truncate(cut);
        text.push_str(MARK);
    }
    text
}

#[cfg(test)]
mod event_tests {
    use super::*;

    #[test]
    fn controls_are_escaped_and_long_messages_cut() {
        assert_eq!(
            escape_controls("by alice\ncancelled\u{1b}[2J"),
            "by alice\\ncancelled\\u{1b}[2J"
        );
        assert_eq!(escape_controls("plain, é"), "plain, é");
        let long = bounded_event_message(&"é".repeat(5000));
        assert!(long.len() <= MAX_EVENT_MESSAGE_BYTES, "{}", long.len());
        assert!(long.ends_with(" [cut]"));
    }
}

/// `POST /api/v1/leases/{lease_id}/finish`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct FinishRequest {
    pub outcome: AttemptOutcome,
    /// Per host, in host order; null where a host's process ended by a signal or is unknown.
    #[serde(default)]
    pub exit_codes: Vec<Option<i32>>,
    #[serde(default)]
    pub start_step: Option<i64>,
    #[serde(default)]
    pub end_step: Option<i64>,
    #[serde(default)]
    pub log_tail: Option<String>,
    #[serde(default)]
    pub message: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phases: Option<TrainerPhases>,
    /// From the worker's decision to stop (a notice, a cancel, a host's end) to the finish.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(minimum = 0))]
    pub stopping_s: Option<f64>,
    /// The worker reads `stopped` in the answer. An older worker, which cannot,
    /// is answered `held` for a stopped job: its answer only goes to its log.
    #[serde(default)]
    pub knows_stopped: bool,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct FinishResponse {
    /// The job's state after the server applied its retry policy.
    pub job_state: crate::JobState,
}

/// `POST /api/v1/pods/{name}/report`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct PodReport {
    #[serde(flatten)]
    pub pod: PodDescription,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub event: Option<WorkerEvent>,
}
