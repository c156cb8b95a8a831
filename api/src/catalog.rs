use serde::{Deserialize, Serialize};

/// How serious a catalog finding is. Errors stop `podq validate` and the server; warnings do not.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    Warning,
    Error,
}

/// Something the catalog loader noticed about an experiment or a file.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Finding {
    pub severity: Severity,
    /// Stable code, e.g. `missing_arch`, `duplicate_config`, `unread_keys`.
    pub code: String,
    pub message: String,
    /// The file the finding is about, relative to the catalog root.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub line: Option<u32>,
    /// Dotted key path inside the config, e.g. `arch.hidden_size`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    /// The experiment it concerns, when it concerns one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub experiment: Option<String>,
    /// What to change, when the finding has one fix, e.g. "did you mean `global_batch_size`?".
    /// Findings with the same code and fix share one root cause and are reported once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fix: Option<String>,
}

/// A place in a catalog file.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Place {
    pub file: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub line: Option<u32>,
}

/// Findings of one root cause, reported once: the same severity and code, and the same fix
/// (or, for findings without a fix, the same message).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct FindingGroup {
    pub severity: Severity,
    pub code: String,
    /// What is wrong, counted: "67 experiments have no `arch` config group".
    pub summary: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fix: Option<String>,
    /// How many findings the group stands for.
    pub count: usize,
    /// The experiments concerned, in catalog order.
    pub experiments: Vec<String>,
    /// The first few places (at most 3), in catalog order.
    pub places: Vec<Place>,
    /// The whole group as one line, exactly as `podq validate` prints it.
    pub text: String,
}

/// The documentation of an experiment, taken from its group and its own row.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ExperimentDocs {
    pub title: String,
    pub summary: String,
    pub goal: String,
    pub varies: String,
    pub hypothesis: String,
    pub expected_result: String,
    pub metrics_to_watch: Vec<String>,
    pub is_baseline_row: bool,
}

/// One experiment of the catalog as listed by `GET /api/v1/experiments`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ExperimentSummary {
    pub name: String,
    pub group: String,
    pub config_sha256: String,
    pub est_hours: f64,
    /// The slice type it prefers: the first of `accelerators`.
    pub accelerator: String,
    /// The slice types whose pods may lease it, most preferred first: its row's or group's
    /// `accelerators` (or `accelerator`), else the server's `--accelerator`.
    #[serde(default)]
    pub accelerators: Vec<String>,
    pub checkpoint_dir: String,
    pub docs: ExperimentDocs,
    pub findings: Vec<Finding>,
}

/// `GET /api/v1/experiments/{name}`: the summary plus the resolved config.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ExperimentDetail {
    #[serde(flatten)]
    pub summary: ExperimentSummary,
    pub source_file: String,
    pub config: serde_json::Value,
}

/// `GET /api/v1/groups`: a group with its job counts per state.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct GroupSummary {
    pub name: String,
    pub title: String,
    pub experiments: Vec<String>,
    pub baseline_row: Option<String>,
    pub planned_hours: f64,
    /// Jobs of this group per state (only states with at least one job).
    pub jobs: std::collections::BTreeMap<String, i64>,
}

/// `POST /api/v1/experiments/validate` answer.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ValidateResponse {
    pub valid: bool,
    pub config_sha256: Option<String>,
    pub config: Option<serde_json::Value>,
    /// Every finding, one per file and key.
    pub findings: Vec<Finding>,
    /// The same findings grouped by root cause, each reported once with its fix.
    #[serde(default)]
    pub summary: Vec<FindingGroup>,
}
