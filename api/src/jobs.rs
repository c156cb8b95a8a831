//! Jobs, their attempts, checkpoints and events: submitting, listing, reading and patching.

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::ids::{JobId, LeaseId};
use crate::{CheckpointAdvice, Goodput, MetricValue, PodTime};

/// The life of a job. See docs/architecture.md §2.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum JobState {
    Queued,
    Leased,
    Running,
    Succeeded,
    Failed,
    Cancelled,
    Held,
    /// A stop rule or the divergence guard ended the run: terminal, not charged
    /// and not retried. `requeue --ignore-stop-rules` runs it on with the rules lifted.
    Stopped,
}

impl JobState {
    pub const ALL: [JobState; 8] = [
        JobState::Queued,
        JobState::Leased,
        JobState::Running,
        JobState::Succeeded,
        JobState::Failed,
        JobState::Cancelled,
        JobState::Held,
        JobState::Stopped,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            JobState::Queued => "queued",
            JobState::Leased => "leased",
            JobState::Running => "running",
            JobState::Succeeded => "succeeded",
            JobState::Failed => "failed",
            JobState::Cancelled => "cancelled",
            JobState::Held => "held",
            JobState::Stopped => "stopped",
        }
    }

    /// No attempt will start without a person (terminal, or held): the job's log is whole
    /// once read, and a follower of it stops.
    pub fn is_settled(self) -> bool {
        self.is_terminal() || self == JobState::Held
    }

    /// Terminal states never change except by an explicit requeue.
    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            JobState::Succeeded | JobState::Failed | JobState::Cancelled | JobState::Stopped
        )
    }
}

/// Padded as a string is, so that tables can align it (`{:<9}`).
impl fmt::Display for JobState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(self.as_str())
    }
}

impl FromStr for JobState {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        JobState::ALL
            .into_iter()
            .find(|state| state.as_str() == s)
            .ok_or_else(|| {
                format!(
                    "unknown job state `{s}`; expected one of {}",
                    JobState::ALL.map(JobState::as_str).join(", ")
                )
            })
    }
}

// Rows and `query_scalar` read a state straight from the store's text column.
crate::ids::text_column!(JobState);

impl TryFrom<String> for JobState {
    type Error = String;
    fn try_from(s: String) -> Result<Self, Self::Error> {
        s.parse()
    }
}

/// A catalog experiment's state where it may have no job yet (the plan, the study, the
/// results): its job's state, or `not_submitted`. On the wire, one string.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum RunState {
    Job(JobState),
    NotSubmitted,
}

impl RunState {
    pub fn as_str(self) -> &'static str {
        match self {
            RunState::Job(state) => state.as_str(),
            RunState::NotSubmitted => "not_submitted",
        }
    }
}

impl From<JobState> for RunState {
    fn from(state: JobState) -> Self {
        RunState::Job(state)
    }
}

impl fmt::Display for RunState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(self.as_str())
    }
}

impl Serialize for RunState {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for RunState {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        if text == RunState::NotSubmitted.as_str() {
            return Ok(RunState::NotSubmitted);
        }
        text.parse()
            .map(RunState::Job)
            .map_err(serde::de::Error::custom)
    }
}

/// How one attempt of a job ended. See docs/architecture.md §2.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum AttemptOutcome {
    /// Every host's trainer exited 0.
    Succeeded,
    /// The pod lost its capacity, or the run was stopped ahead of maintenance. Not charged.
    Preempted,
    /// A trainer exited non-zero on a healthy pod. Charged to the failure budget.
    Failed,
    /// No step progress while every host's agent reported. Charged.
    Hung,
    /// The infrastructure failed the attempt (a silent worker, a launch that could not
    /// reach or prepare the hosts, a host that restarted under its trainer). Not charged.
    Lost,
    Cancelled,
}

impl AttemptOutcome {
    pub fn as_str(self) -> &'static str {
        match self {
            AttemptOutcome::Succeeded => "succeeded",
            AttemptOutcome::Preempted => "preempted",
            AttemptOutcome::Failed => "failed",
            AttemptOutcome::Hung => "hung",
            AttemptOutcome::Lost => "lost",
            AttemptOutcome::Cancelled => "cancelled",
        }
    }
}

impl fmt::Display for AttemptOutcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for AttemptOutcome {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        serde_json::from_value(serde_json::Value::String(s.to_owned()))
            .map_err(|_| format!("unknown attempt outcome `{s}`"))
    }
}

/// `POST /api/v1/jobs`. Exactly one of `group`, `experiments`, `all` selects what to submit.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct SubmitRequest {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub experiments: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub all: Option<bool>,
    /// Higher runs first, within the job's class. Default 0. A submitter's lies in 0 to 100
    /// (else 403 `priority_not_allowed`); an admin's may be any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<i64>,
    /// The priority class (the suite's `priority_classes`); default the suite's default,
    /// `normal` in the shipped suite.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority_class: Option<String>,
    /// Failures (not preemptions) a job may spend before it fails for good. Default 3.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_failures: Option<u32>,
    /// Answer what would be created, linked and skipped, and store nothing.
    #[serde(default)]
    pub dry_run: bool,
    /// Create a runnable job even when the experiment or its config already has one.
    #[serde(default)]
    pub force: bool,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct CreatedJob {
    /// The new job; null on a dry run, which creates nothing.
    pub job_id: Option<JobId>,
    pub experiment: String,
    pub group: String,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct LinkedJob {
    /// The new job; null on a dry run, which creates nothing.
    pub job_id: Option<JobId>,
    pub experiment: String,
    pub group: String,
    /// The job whose run this one shares; null on a dry run when that run's job would be
    /// created by the same request.
    pub same_as: Option<JobId>,
    pub same_as_experiment: String,
    pub reason: String,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SkippedExperiment {
    pub experiment: String,
    pub existing_job: JobId,
    pub reason: String,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SubmitResponse {
    pub dry_run: bool,
    pub created: Vec<CreatedJob>,
    pub linked: Vec<LinkedJob>,
    pub skipped: Vec<SkippedExperiment>,
}

/// A job as the API shows it. A job linked to another run (`same_as`) shows that run's state,
/// progress and checkpoint location.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Job {
    pub id: JobId,
    pub experiment: String,
    pub group: String,
    pub state: JobState,
    /// No attempt will start without a person (`JobState::is_settled`): its log is whole,
    /// and a follower of it stops.
    #[serde(default)]
    pub settled: bool,
    pub priority: i64,
    pub submitted_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    pub config_sha256: String,
    pub checkpoint_dir: String,
    pub resume_from: Option<String>,
    pub last_step: Option<i64>,
    pub total_steps: Option<i64>,
    /// Attempts started so far (the list is in `JobDetail.attempts`).
    pub attempt_count: i64,
    pub failures: i64,
    pub max_failures: i64,
    pub preemptions: i64,
    pub same_as: Option<JobId>,
    /// While backing off after a failure: when the job becomes leasable again.
    pub not_before: Option<DateTime<Utc>>,
    /// Why the job is in its state, when there is something to say (held, failed, cancelled).
    pub message: Option<String>,
    /// The slice type it prefers: the first of `JobDetail.accelerators`.
    pub accelerator: String,
    /// Who submitted the job: a person, or `schedule:ID`. None for jobs from before podq
    /// knew people.
    #[serde(default)]
    pub submitted_by: Option<String>,
    /// The job's priority class (the suite's `priority_classes`): the queue's first order,
    /// and which running jobs it may evict.
    #[serde(default = "default_class")]
    pub priority_class: String,
    /// The stop rule that ended the run (`stopped`), or is ending it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stopped_by: Option<RuleFired>,
    /// Set by `requeue --ignore-stop-rules`: no stop rule and no divergence guard judge the
    /// job's run any more.
    #[serde(default)]
    pub ignore_stop_rules: bool,
    /// What the caller who read the job may do to it now: what its state allows
    /// (`server/src/store/job_state.rs`) and the team's rules let them (a submitter acts on
    /// their own jobs, an admin on any). Each action's endpoint refuses the job when it is not
    /// listed here. Empty where no caller asked (a webhook's job, say).
    #[serde(default)]
    pub actions: Vec<JobAction>,
    /// What the job's state allows that the caller may not do, and who may.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub refused_actions: Vec<RefusedAction>,
}

/// What a person may do to a job, each through its endpoint.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum JobAction {
    /// `POST /jobs/{id}/cancel`.
    Cancel,
    /// `POST /jobs/{id}/requeue`.
    Requeue,
    /// `POST /jobs/{id}/requeue?ignore_stop_rules=true`: run it on without its stop rules.
    RequeueIgnoringStopRules,
    /// `POST /jobs/{id}/suspend`.
    Suspend,
    /// `POST /jobs/{id}/resume`.
    Resume,
    /// `PATCH /jobs/{id}`: its priority or class.
    Reprioritise,
}

impl JobAction {
    pub const ALL: [JobAction; 6] = [
        JobAction::Cancel,
        JobAction::Requeue,
        JobAction::RequeueIgnoringStopRules,
        JobAction::Suspend,
        JobAction::Resume,
        JobAction::Reprioritise,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            JobAction::Cancel => "cancel",
            JobAction::Requeue => "requeue",
            JobAction::RequeueIgnoringStopRules => "requeue_ignoring_stop_rules",
            JobAction::Suspend => "suspend",
            JobAction::Resume => "resume",
            JobAction::Reprioritise => "reprioritise",
        }
    }

    /// The verb a sentence says it with ("only alice or an admin may requeue this job").
    pub fn verb(self) -> &'static str {
        match self {
            JobAction::RequeueIgnoringStopRules => "requeue",
            other => other.as_str(),
        }
    }
}

impl fmt::Display for JobAction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An action the job's state allows that the caller may not take: `only` may, e.g. "only
/// alice or an admin may cancel this job (…)".
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct RefusedAction {
    pub action: JobAction,
    /// Who may: `alice or an admin`, or `an admin`.
    pub only: String,
    /// Why only they, when the submitter does not say it: `submitted before podq knew
    /// people`, `submitted by schedule:ID`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub because: Option<String>,
}

/// A stop rule (or the divergence guard) that fired, and what fired it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct RuleFired {
    /// The rule as the catalog writes it, e.g. `eval/exact_accuracy below 0.02 at 25%`, or
    /// `diverged: train/loss non-finite for 3 reports`.
    pub rule: String,
    /// The metric whose value fired it.
    pub metric: String,
    pub step: i64,
    #[serde(with = "crate::nonfinite")]
    #[cfg_attr(feature = "openapi", schema(value_type = crate::nonfinite::MetricNumberSchema))]
    pub value: f64,
    pub at: DateTime<Utc>,
}

/// `POST /api/v1/jobs/{id}/requeue?ignore_stop_rules=true`.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::IntoParams))]
#[cfg_attr(feature = "openapi", into_params(parameter_in = Query))]
#[serde(deny_unknown_fields)]
pub struct RequeueQuery {
    /// Run the job on without its stop rules and divergence guard (for a `stopped` job whose
    /// rule should not have ended it).
    #[serde(default)]
    pub ignore_stop_rules: bool,
}

fn default_class() -> String {
    "normal".to_owned()
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct JobList {
    pub jobs: Vec<Job>,
    /// Jobs matching the filter in all.
    pub total: i64,
    pub limit: i64,
    pub offset: i64,
    /// Pass as `after` for the next page; null on the last page. Pages by `after` cost the
    /// same however deep they go, unlike `offset`.
    #[serde(default)]
    pub next_after: Option<i64>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Attempt {
    pub attempt: i64,
    pub lease_id: LeaseId,
    pub pod: String,
    /// The slice type of its pod: a run may move between the types of its job's list.
    #[serde(default)]
    pub accelerator: Option<String>,
    pub started_at: DateTime<Utc>,
    pub running_at: Option<DateTime<Utc>>,
    /// When its trainer first reported a step: a resumed run trains again from here.
    #[serde(default)]
    pub first_step_at: Option<DateTime<Utc>>,
    pub ended_at: Option<DateTime<Utc>>,
    pub outcome: Option<AttemptOutcome>,
    pub resume_from: Option<String>,
    pub start_step: Option<i64>,
    pub end_step: Option<i64>,
    /// Per host, in host order; null where the host's exit code is unknown.
    pub exit_codes: Vec<Option<i32>>,
    pub message: Option<String>,
    /// Why the server stopped it beyond its outcome: `evicted` (by a job of a higher
    /// class) or `suspended` (a person's pause); both end `preempted`, uncharged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cause: Option<String>,
    pub log_tail: Option<String>,
    /// Where this attempt's pod time went; for an attempt still running, up to now.
    pub pod_time: PodTime,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Checkpoint {
    pub step: i64,
    pub uri: String,
    pub committed: bool,
    pub attempt: i64,
    pub seen_at: DateTime<Utc>,
}

/// `GET /api/v1/jobs/{id}`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct JobDetail {
    #[serde(flatten)]
    pub job: Job,
    /// The slice types whose pods may lease it, most preferred first.
    #[serde(default)]
    pub accelerators: Vec<String>,
    pub attempts: Vec<Attempt>,
    pub checkpoints: Vec<Checkpoint>,
    /// The newest value of every metric series.
    pub latest_metrics: BTreeMap<String, MetricValue>,
    pub goodput: Goodput,
    /// Where the run's pod time went, over all its attempts.
    pub pod_time: PodTime,
    /// The checkpoint interval that would lose the least pod time, against the run's own;
    /// null for a run that has ended or whose steps are unknown.
    pub checkpoint_advice: Option<CheckpointAdvice>,
    /// Where the run lives elsewhere (its W&B run, say), as its trainer reported: the newest
    /// URL of each name, over all attempts, by name.
    #[serde(default)]
    pub links: Vec<crate::JobLink>,
    /// Its group's rungs' decisions about its run, first rung first: empty for a group
    /// without rungs, or a run that has reached none.
    #[serde(default)]
    pub rungs: Vec<RungDecision>,
}

/// What a group's rung decided about a run there.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct RungDecision {
    /// 1 for the first rung.
    pub rung: i64,
    /// `promoted` (it goes on), `paused` (it waits, holding no pod), `pruned` (it ended
    /// `stopped`), or `no_value` (its metric never reported there: not judged, it goes on).
    pub verdict: String,
    /// Its rank among the runs judged at the rung (1 the best), of `of`.
    pub rank: Option<i64>,
    pub of: Option<i64>,
    /// Its value of the rungs' metric at the rung.
    pub value: Option<f64>,
    pub decided_at: DateTime<Utc>,
    /// `podq`, or the person who promoted it by hand.
    pub decided_by: String,
}

/// `PATCH /api/v1/jobs/{id}`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct PatchJobRequest {
    /// Absent changes nothing, and a patch that changes nothing is refused.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "not_null"
    )]
    #[cfg_attr(feature = "openapi", schema(value_type = i64))]
    pub priority: Option<i64>,
    /// Move the job to another priority class (the suite's `priority_classes`).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "not_null"
    )]
    #[cfg_attr(feature = "openapi", schema(value_type = String, min_length = 1))]
    pub priority_class: Option<String>,
}

/// A field that may be absent but not null: null is refused as the wrong type.
fn not_null<'de, D, T>(deserializer: D) -> Result<Option<T>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Deserialize<'de>,
{
    T::deserialize(deserializer).map(Some)
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Event {
    pub id: i64,
    pub at: DateTime<Utc>,
    pub job_id: Option<JobId>,
    pub pod: Option<String>,
    pub kind: String,
    pub message: String,
    /// Who made it happen: a person's name, `worker:POD`, `schedule:ID` or `podq`.
    #[serde(default = "podq")]
    pub by: String,
}

fn podq() -> String {
    "podq".to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_state_is_one_string_on_the_wire() {
        for state in JobState::ALL {
            let run = RunState::from(state);
            let json = serde_json::to_string(&run).unwrap();
            assert_eq!(json, format!("\"{state}\""));
            assert_eq!(serde_json::from_str::<RunState>(&json).unwrap(), run);
        }
        let json = serde_json::to_string(&RunState::NotSubmitted).unwrap();
        assert_eq!(json, "\"not_submitted\"");
        assert_eq!(
            serde_json::from_str::<RunState>(&json).unwrap(),
            RunState::NotSubmitted
        );
        assert!(serde_json::from_str::<RunState>("\"paused\"").is_err());
        // Tables align states as they align strings.
        assert_eq!(format!("[{:<9}]", JobState::Held), "[held     ]");
        assert_eq!(
            format!("[{:>5}]", RunState::Job(JobState::Failed)),
            "[failed]"
        );
        assert_eq!(
            JobState::try_from("stopped".to_owned()),
            Ok(JobState::Stopped)
        );
    }
}
