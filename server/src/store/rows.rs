//! Rows as either store holds them (times in ms since the epoch, ids as text), and their
//! conversion into wire types.

use std::str::FromStr;

use podq_api as api;
use podq_api::{JobId, LeaseId};
use uuid::Uuid;

use super::{ms_to_datetime, StoreError};

/// The columns of `job_view`, in the order every job query selects them.
pub const JOB_COLUMNS: &str = "id, seq, experiment, group_name, state, priority, submitted_at, \
    updated_at, config_sha256, checkpoint_dir, resume_from, last_step, total_steps, attempts, \
    failures, max_failures, preemptions, same_as, not_before, message, run_id, est_hours, accelerator, \
    submitted_by, priority_class, stop_rule, stop_metric, stop_step, stop_value, stop_at, \
    ignore_stop_rules";

#[derive(Debug, Clone, sqlx::FromRow)]
pub struct JobRow {
    pub id: JobId,
    /// Submission order; the cursor of keyset pages.
    pub seq: i64,
    pub experiment: String,
    pub group_name: String,
    pub state: api::JobState,
    pub priority: i64,
    pub submitted_at: i64,
    pub updated_at: i64,
    pub config_sha256: String,
    pub checkpoint_dir: String,
    pub resume_from: Option<String>,
    pub last_step: Option<i64>,
    pub total_steps: Option<i64>,
    pub attempts: i64,
    pub failures: i64,
    pub max_failures: i64,
    pub preemptions: i64,
    pub same_as: Option<JobId>,
    pub not_before: Option<i64>,
    pub message: Option<String>,
    /// The job whose attempts, metrics and checkpoints this job shows (itself unless linked).
    pub run_id: JobId,
    pub est_hours: f64,
    pub accelerator: String,
    pub submitted_by: Option<String>,
    pub priority_class: String,
    pub stop_rule: Option<String>,
    pub stop_metric: Option<String>,
    pub stop_step: Option<i64>,
    /// Rust's text of the value (`NaN`, `inf`, `0.0123`).
    pub stop_value: Option<String>,
    pub stop_at: Option<i64>,
    pub ignore_stop_rules: i64,
}

pub fn parse_uuid(text: &str) -> Result<Uuid, StoreError> {
    Uuid::parse_str(text).map_err(|_| StoreError::Corrupt(format!("`{text}` is not a uuid")))
}

impl JobRow {
    pub fn into_api(self) -> Result<api::Job, StoreError> {
        Ok(api::Job {
            id: self.id,
            state: self.state,
            settled: self.state.is_settled(),
            experiment: self.experiment,
            group: self.group_name,
            priority: self.priority,
            submitted_at: ms_to_datetime(self.submitted_at),
            updated_at: ms_to_datetime(self.updated_at),
            config_sha256: self.config_sha256,
            checkpoint_dir: self.checkpoint_dir,
            resume_from: self.resume_from,
            last_step: self.last_step,
            total_steps: self.total_steps,
            attempt_count: self.attempts,
            failures: self.failures,
            max_failures: self.max_failures,
            preemptions: self.preemptions,
            same_as: self.same_as,
            not_before: self.not_before.map(ms_to_datetime),
            message: self.message,
            accelerator: self.accelerator,
            submitted_by: self.submitted_by,
            priority_class: self.priority_class,
            stopped_by: match (self.stop_rule, self.stop_step, self.stop_at) {
                (Some(rule), Some(step), Some(at)) => Some(api::RuleFired {
                    rule,
                    metric: self.stop_metric.unwrap_or_default(),
                    step,
                    value: self
                        .stop_value
                        .as_deref()
                        .and_then(|v| v.parse().ok())
                        .unwrap_or(f64::NAN),
                    at: ms_to_datetime(at),
                }),
                _ => None,
            },
            ignore_stop_rules: self.ignore_stop_rules != 0,
            // Whoever reads the job: the scheduler's reads fill them in for their caller.
            actions: Vec::new(),
            refused_actions: Vec::new(),
        })
    }
}

#[derive(Debug, Clone, sqlx::FromRow)]
pub struct AttemptRow {
    pub attempt: i64,
    pub lease_id: LeaseId,
    pub pod: String,
    pub accelerator: Option<String>,
    pub resume_from: Option<String>,
    pub started_at: i64,
    pub running_at: Option<i64>,
    pub first_step_at: Option<i64>,
    pub ended_at: Option<i64>,
    pub outcome: Option<String>,
    pub start_step: Option<i64>,
    pub end_step: Option<i64>,
    pub exit_codes_json: Option<String>,
    pub log_tail: Option<String>,
    pub message: Option<String>,
    pub cause: Option<String>,
}

impl AttemptRow {
    pub fn into_api(self, pod_time: api::PodTime) -> Result<api::Attempt, StoreError> {
        Ok(api::Attempt {
            attempt: self.attempt,
            lease_id: self.lease_id,
            pod: self.pod,
            accelerator: self.accelerator,
            started_at: ms_to_datetime(self.started_at),
            running_at: self.running_at.map(ms_to_datetime),
            first_step_at: self.first_step_at.map(ms_to_datetime),
            ended_at: self.ended_at.map(ms_to_datetime),
            outcome: self
                .outcome
                .as_deref()
                .map(api::AttemptOutcome::from_str)
                .transpose()
                .map_err(StoreError::Corrupt)?,
            resume_from: self.resume_from,
            start_step: self.start_step,
            end_step: self.end_step,
            exit_codes: self
                .exit_codes_json
                .as_deref()
                .map(serde_json::from_str)
                .transpose()
                .map_err(|e| StoreError::Corrupt(format!("exit codes: {e}")))?
                .unwrap_or_default(),
            message: self.message,
            cause: self.cause,
            log_tail: self.log_tail,
            pod_time,
        })
    }
}

#[derive(Debug, Clone, sqlx::FromRow)]
pub struct CheckpointRow {
    pub step: i64,
    pub uri: String,
    pub committed: bool,
    pub attempt: i64,
    pub seen_at: i64,
}

impl From<CheckpointRow> for api::Checkpoint {
    fn from(row: CheckpointRow) -> Self {
        api::Checkpoint {
            step: row.step,
            uri: row.uri,
            committed: row.committed,
            attempt: row.attempt,
            seen_at: ms_to_datetime(row.seen_at),
        }
    }
}

#[derive(Debug, Clone, sqlx::FromRow)]
pub struct EventRow {
    pub id: i64,
    pub at: i64,
    pub job_id: Option<JobId>,
    pub pod: Option<String>,
    pub kind: String,
    pub message: String,
    pub actor: String,
}

impl EventRow {
    pub fn into_api(self) -> Result<api::Event, StoreError> {
        Ok(api::Event {
            id: self.id,
            at: ms_to_datetime(self.at),
            job_id: self.job_id,
            pod: self.pod,
            kind: self.kind,
            message: self.message,
            by: self.actor,
        })
    }
}
