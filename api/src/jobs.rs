use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

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
}

impl JobState {
    pub const ALL: [JobState; 7] = [
        JobState::Queued,
        JobState::Leased,
        JobState::Running,
        JobState::Succeeded,
        JobState::Failed,
        JobState::Cancelled,
        JobState::Held,
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
        }
    }

    /// Terminal states never change except by an explicit requeue.
    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            JobState::Succeeded | JobState::Failed | JobState::Cancelled
        )
    }
}

impl fmt::Display for JobState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
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
    /// Higher runs first. Default 0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<i64>,
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
    pub job_id: Option<Uuid>,
    pub experiment: String,
    pub group: String,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct LinkedJob {
    /// The new job; null on a dry run, which creates nothing.
    pub job_id: Option<Uuid>,
    pub experiment: String,
    pub group: String,
    /// The job whose run this one shares; null on a dry run when that run's job would be
    /// created by the same request.
    pub same_as: Option<Uuid>,
    pub same_as_experiment: String,
    pub reason: String,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SkippedExperiment {
    pub experiment: String,
    pub existing_job: Uuid,
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
    pub job_id: Uuid,
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

/// A job as the API shows it. A job linked to another run (`same_as`) shows that run's state,
/// progress and checkpoint location.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Job {
    pub id: Uuid,
    pub experiment: String,
    pub group: String,
    pub state: JobState,
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
    pub same_as: Option<Uuid>,
    /// While backing off after a failure: when the job becomes leasable again.
    pub not_before: Option<DateTime<Utc>>,
    /// Why the job is in its state, when there is something to say (held, failed, cancelled).
    pub message: Option<String>,
    /// Only a pod of this accelerator type leases the job.
    pub accelerator: String,
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
    pub lease_id: Uuid,
    pub pod: String,
    pub started_at: DateTime<Utc>,
    pub running_at: Option<DateTime<Utc>>,
    pub ended_at: Option<DateTime<Utc>>,
    pub outcome: Option<AttemptOutcome>,
    pub resume_from: Option<String>,
    pub start_step: Option<i64>,
    pub end_step: Option<i64>,
    /// Per host, in host order; null where the host's exit code is unknown.
    pub exit_codes: Vec<Option<i32>>,
    pub message: Option<String>,
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

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct MetricValue {
    pub step: i64,
    pub value: f64,
}

/// `GET /api/v1/jobs/{id}`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct JobDetail {
    #[serde(flatten)]
    pub job: Job,
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
}

/// `PATCH /api/v1/jobs/{id}`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct PatchJobRequest {
    /// Absent or null changes nothing, and a patch that changes nothing is refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = i64))]
    pub priority: Option<i64>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Event {
    pub id: i64,
    pub at: DateTime<Utc>,
    pub job_id: Option<Uuid>,
    pub pod: Option<String>,
    pub kind: String,
    pub message: String,
}

/// `GET /api/v1/jobs/{id}/metrics`: downsampled series.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct MetricSeries {
    pub name: String,
    /// Points stored for the series when it came back whole; null when it was sampled.
    pub total_points: Option<i64>,
    pub points: Vec<MetricValue>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct JobMetrics {
    pub job_id: Uuid,
    pub series: Vec<MetricSeries>,
}

/// Where pod time went, in pod-seconds. `kept_s` produced progress that a committed
/// checkpoint (or the end of the run) kept; `lost_s` was trained after the last committed
/// checkpoint of an interrupted attempt and must be trained again; `overhead_s` is
/// preparing the hosts and start-up until the first step.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Goodput {
    pub kept_s: f64,
    pub lost_s: f64,
    pub overhead_s: f64,
    /// Steps kept, each counted once however often it was trained.
    pub kept_steps: i64,
    /// kept / (kept + lost + overhead); null before any pod time was spent.
    pub ratio: Option<f64>,
}

impl Goodput {
    pub fn add(&mut self, other: &Goodput) {
        self.kept_s += other.kept_s;
        self.lost_s += other.lost_s;
        self.overhead_s += other.overhead_s;
        self.kept_steps += other.kept_steps;
        self.finish();
    }

    pub fn finish(&mut self) {
        let total = self.kept_s + self.lost_s + self.overhead_s;
        self.ratio = (total > 0.0).then(|| self.kept_s / total);
    }
}

/// Pod time split by where it went (issue 19; the causes follow Google's
/// ml-goodput-measurement). In seconds; the parts sum to `total_s`.
///
/// An attempt's time runs from its lease to its end, plus the pod's recovery that followed it
/// directly when it ended preempted or lost. A pod's time also holds the recoveries no
/// attempt caused and its idle time.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct PodTime {
    /// Waiting for the pod to be usable again: re-provisioning after a preemption, a
    /// recreated node, a host coming back, a maintenance window, a failing preflight.
    pub provisioning_s: f64,
    /// From the lease to the trainers' launch: checking the checkpoint store, staging the
    /// config, cleaning the hosts, starting the agents.
    pub setup_s: f64,
    /// From the launch to the first step, restore excepted: the trainer's start-up, JAX's
    /// initialisation and compilation (`compile_s` of it, when the trainer reported it).
    pub startup_s: f64,
    /// Restoring the checkpoint resumed from, as the trainer reported it.
    pub restore_s: f64,
    /// Training whose progress was kept.
    pub productive_s: f64,
    /// The blocking part of checkpoint saves, as the trainer reported it.
    pub save_s: f64,
    /// Training after the last committed checkpoint of an attempt that did not succeed:
    /// done again by the next attempt.
    pub wasted_s: f64,
    /// From the decision to stop (a shutdown notice, a cancel, a host's end) to the end.
    pub stopping_s: f64,
    /// A ready pod with nothing it could lease (only in a pod's or the grant's time).
    pub idle_s: f64,
    /// Of `startup_s`: compiling the first step, as the trainer reported it.
    pub compile_s: f64,
    pub total_s: f64,
}

impl PodTime {
    /// The causes in display order, with their names as `/metrics` and the CLI write them.
    pub fn causes(&self) -> [(&'static str, f64); 9] {
        [
            ("provisioning", self.provisioning_s),
            ("setup", self.setup_s),
            ("startup", self.startup_s),
            ("restore", self.restore_s),
            ("productive", self.productive_s),
            ("save", self.save_s),
            ("wasted", self.wasted_s),
            ("stopping", self.stopping_s),
            ("idle", self.idle_s),
        ]
    }

    pub fn add(&mut self, other: &PodTime) {
        self.provisioning_s += other.provisioning_s;
        self.setup_s += other.setup_s;
        self.startup_s += other.startup_s;
        self.restore_s += other.restore_s;
        self.productive_s += other.productive_s;
        self.save_s += other.save_s;
        self.wasted_s += other.wasted_s;
        self.stopping_s += other.stopping_s;
        self.idle_s += other.idle_s;
        self.compile_s += other.compile_s;
        self.finish();
    }

    /// Sets `total_s` to the sum of the causes.
    pub fn finish(&mut self) {
        self.total_s = self.causes().iter().map(|(_, s)| s).sum();
    }
}

/// `GET /api/v1/pod-time`: where the pod time of the whole grant, each pod and each group
/// went. A pod's and the grant's include idle time and recoveries no attempt caused; a
/// group's are its runs' attempts.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct PodTimeReport {
    pub grant: PodTime,
    pub pods: BTreeMap<String, PodTime>,
    pub groups: BTreeMap<String, PodTime>,
}

/// Young/Daly checkpoint advice for one run (issue 19).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct CheckpointAdvice {
    /// The run's interval: its config's (`checkpoint_interval`, or every evaluation with
    /// `checkpoint_every_eval`, or only at the end); the advised one under `auto`.
    pub interval_steps_now: u64,
    /// Daly's optimum, sqrt(2·C·MTBF) to first order, in steps of the run's step time.
    pub interval_steps_advised: u64,
    /// C: the blocking save cost, from the trainer's save timings or, before it reported
    /// any, the assumed `10` s.
    pub save_cost_s: f64,
    /// The pod type's mean time between interruptions, from its history with a prior of
    /// one a day counted as one interruption.
    pub mtbf_s: f64,
    /// Pod-hours the advised interval would save over the run's remaining hours.
    pub pod_hours_saved: f64,
    /// `true` when the run follows the advice itself (`checkpoint_interval: auto`).
    pub auto: bool,
    /// Where C came from: `trainer` (its save timings) or `assumed`.
    pub save_cost_source: String,
}

/// `POST /api/v1/schedules`: submit `submit` whenever `cron` fires.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct ScheduleRequest {
    /// Standard 5-field cron (`min hour day month weekday`, UTC), or 6/7 fields with seconds,
    /// or a shorthand (`@daily`). A field out of range is 422 `invalid_cron`.
    #[cfg_attr(
        feature = "openapi",
        schema(pattern = r"^\s*(@[A-Za-z]+|\S+(\s+\S+){4,6})\s*$", max_length = 200)
    )]
    pub cron: String,
    pub submit: SubmitRequest,
    #[serde(default = "enabled_by_default")]
    pub enabled: bool,
}

fn enabled_by_default() -> bool {
    true
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Schedule {
    pub id: Uuid,
    pub cron: String,
    pub submit: SubmitRequest,
    pub enabled: bool,
    pub next_run_at: Option<DateTime<Utc>>,
    pub last_run_at: Option<DateTime<Utc>>,
    pub created_at: DateTime<Utc>,
}
