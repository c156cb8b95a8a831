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
    /// The pod's state as the worker last read it from its cloud (`READY`, `PREEMPTED`, ...).
    #[cfg_attr(feature = "openapi", schema(value_type = String, example = "READY"))]
    pub state: PodState,
    /// `HEALTHY`, `UNHEALTHY_MAINTENANCE`, ...
    pub health: String,
    /// The last preflight result; a pod only leases after one that passed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preflight: Option<Preflight>,
    /// What the worker is waiting for while it recovers the pod.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recovery: Option<String>,
}

/// A pod's state: the word its worker read from the cloud, on the wire as that word. The
/// Cloud TPU API's node states are each a variant
/// (https://cloud.google.com/tpu/docs/reference/rest/v2/projects.locations.nodes#State);
/// any other word (a Compute Engine slice's instance state, a state added to the API later)
/// is kept as it came, shown and never taken for ready.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(from = "String", into = "String")]
pub enum PodState {
    #[default]
    StateUnspecified,
    Creating,
    Ready,
    Restarting,
    Reimaging,
    Deleting,
    Repairing,
    Stopped,
    Stopping,
    Starting,
    Preempted,
    Terminated,
    Hiding,
    Hidden,
    Unhiding,
    /// `UNKNOWN`: the API's word for a node whose repair failed.
    Unknown,
    /// No node at all: the worker's word when the API answers 404.
    NotFound,
    Other(String),
}

impl PodState {
    const WORDS: [(PodState, &'static str); 17] = [
        (PodState::StateUnspecified, "STATE_UNSPECIFIED"),
        (PodState::Creating, "CREATING"),
        (PodState::Ready, "READY"),
        (PodState::Restarting, "RESTARTING"),
        (PodState::Reimaging, "REIMAGING"),
        (PodState::Deleting, "DELETING"),
        (PodState::Repairing, "REPAIRING"),
        (PodState::Stopped, "STOPPED"),
        (PodState::Stopping, "STOPPING"),
        (PodState::Starting, "STARTING"),
        (PodState::Preempted, "PREEMPTED"),
        (PodState::Terminated, "TERMINATED"),
        (PodState::Hiding, "HIDING"),
        (PodState::Hidden, "HIDDEN"),
        (PodState::Unhiding, "UNHIDING"),
        (PodState::Unknown, "UNKNOWN"),
        (PodState::NotFound, "NOT_FOUND"),
    ];

    /// The word, as the cloud spells it.
    pub fn as_str(&self) -> &str {
        match self {
            PodState::Other(word) => word,
            known => PodState::WORDS
                .iter()
                .find(|(state, _)| state == known)
                .map_or("", |(_, word)| word),
        }
    }

    /// Up, as its cloud says: a pod leases only then (and only healthy, with nothing to wait
    /// for and no failed preflight).
    pub fn is_ready(&self) -> bool {
        *self == PodState::Ready
    }
}

impl From<&str> for PodState {
    /// Exactly as the API spells it: another spelling is another word (`Other`).
    fn from(word: &str) -> PodState {
        PodState::WORDS
            .iter()
            .find(|(_, known)| *known == word)
            .map_or_else(
                || PodState::Other(word.to_owned()),
                |(state, _)| state.clone(),
            )
    }
}

impl From<String> for PodState {
    fn from(word: String) -> PodState {
        match PodState::from(word.as_str()) {
            PodState::Other(_) => PodState::Other(word),
            known => known,
        }
    }
}

impl From<PodState> for String {
    fn from(state: PodState) -> String {
        match state {
            PodState::Other(word) => word,
            known => known.as_str().to_owned(),
        }
    }
}

impl std::fmt::Display for PodState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.pad(self.as_str())
    }
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
    #[cfg_attr(feature = "openapi", schema(value_type = String, example = "READY"))]
    pub state: PodState,
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pod_state_is_its_word_on_the_wire_both_ways() {
        for (state, word) in PodState::WORDS {
            assert_eq!(PodState::from(word), state);
            assert_eq!(serde_json::to_value(&state).unwrap(), word);
            assert_eq!(
                serde_json::from_value::<PodState>(serde_json::json!(word)).unwrap(),
                state
            );
        }
        let compute = PodState::from("RUNNING");
        assert_eq!(compute, PodState::Other("RUNNING".into()));
        assert_eq!(serde_json::to_value(&compute).unwrap(), "RUNNING");
        assert!(PodState::Ready.is_ready());
        assert!(
            !PodState::from("ready").is_ready(),
            "the API's spelling only"
        );
    }
}
