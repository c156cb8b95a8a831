//! Why a scheduler method refused or failed. The HTTP layer maps each kind to a status once
//! (`http/error.rs`); the scheduler itself knows nothing of HTTP.

use podq_api::{JobId, JobState, LeaseId};
use uuid::Uuid;

use crate::store::{FromCommitFailure, StoreError};

#[derive(Debug, thiserror::Error)]
pub enum SchedulerError {
    #[error("no job {0}")]
    UnknownJob(JobId),
    #[error("no schedule {0}")]
    UnknownSchedule(Uuid),
    #[error("there is no group `{name}`")]
    UnknownGroup { name: String, known: Vec<String> },
    /// A worker call on a lease that is no longer the job's live lease (fencing).
    #[error("lease {0} is not the job's live lease: stop this attempt's processes")]
    LeaseLost(LeaseId),
    /// A person asked for something the job's state does not allow.
    #[error("{message}")]
    WrongState {
        job: JobId,
        state: JobState,
        code: &'static str,
        message: String,
    },
    /// The request names things that do not exist or asks for something impossible; the
    /// `code` is stable for clients, `details` lists what would have been valid.
    #[error("{message}")]
    Invalid {
        code: &'static str,
        message: String,
        details: Option<serde_json::Value>,
    },
    /// Well-formed and as the document allows, but impossible now: a deadline that has
    /// passed, a cron field out of range, a budget for an accelerator nothing uses.
    #[error("{message}")]
    Unprocessable {
        code: &'static str,
        message: String,
        details: Option<serde_json::Value>,
    },
    /// A part of an existing resource that does not exist (an attempt or host of a job).
    #[error("{message}")]
    Missing {
        code: &'static str,
        message: String,
        details: Option<serde_json::Value>,
    },
    /// The caller may not do this: their role is too small, or the job is another's.
    #[error("{message}")]
    Forbidden { code: &'static str, message: String },
    /// Impossible while something else holds (a name taken, people kept in a file).
    #[error("{message}")]
    Conflict { code: &'static str, message: String },
    #[error("this Idempotency-Key was used with a different request body")]
    IdempotencyKeyReused,
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl SchedulerError {
    pub fn invalid(code: &'static str, message: impl Into<String>) -> Self {
        SchedulerError::Invalid {
            code,
            message: message.into(),
            details: None,
        }
    }

    pub fn forbidden(code: &'static str, message: impl Into<String>) -> Self {
        SchedulerError::Forbidden {
            code,
            message: message.into(),
        }
    }

    pub fn conflict(code: &'static str, message: impl Into<String>) -> Self {
        SchedulerError::Conflict {
            code,
            message: message.into(),
        }
    }

    pub fn unprocessable(code: &'static str, message: impl Into<String>) -> Self {
        SchedulerError::Unprocessable {
            code,
            message: message.into(),
            details: None,
        }
    }

    pub fn missing(code: &'static str, message: impl Into<String>) -> Self {
        SchedulerError::Missing {
            code,
            message: message.into(),
            details: None,
        }
    }

    pub fn with_details(self, value: serde_json::Value) -> Self {
        match self {
            SchedulerError::Invalid { code, message, .. } => SchedulerError::Invalid {
                code,
                message,
                details: Some(value),
            },
            SchedulerError::Unprocessable { code, message, .. } => SchedulerError::Unprocessable {
                code,
                message,
                details: Some(value),
            },
            SchedulerError::Missing { code, message, .. } => SchedulerError::Missing {
                code,
                message,
                details: Some(value),
            },
            other => other,
        }
    }

    pub fn wrong_state(
        job: JobId,
        state: JobState,
        code: &'static str,
        message: impl Into<String>,
    ) -> Self {
        SchedulerError::WrongState {
            job,
            state,
            code,
            message: message.into(),
        }
    }
}

impl From<sqlx::Error> for SchedulerError {
    fn from(e: sqlx::Error) -> Self {
        SchedulerError::Store(StoreError::from(e))
    }
}

impl FromCommitFailure for SchedulerError {
    fn commit_failed(message: String) -> Self {
        SchedulerError::Store(StoreError::commit_failed(message))
    }
}

pub type Result<T, E = SchedulerError> = std::result::Result<T, E>;

/// What a store error means for the one who asked, without its details.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoreFailure {
    /// Data podq cannot read: retrying will not help, a person must look.
    Corrupt,
    /// podq itself failed (a panic, a migration): nothing was changed.
    Internal,
    /// The database could not answer now: nothing was changed, try again.
    Unavailable,
    /// This server is a standby: nothing was changed, ask the active one.
    Standby,
}

/// Classifies `e` and logs it once, at the level it deserves.
pub fn store_failure(e: &StoreError) -> StoreFailure {
    match e {
        StoreError::Corrupt(_) => {
            tracing::error!(alarm = true, error = %e, "the store holds data podq cannot read");
            StoreFailure::Corrupt
        }
        StoreError::WritePanicked
        | StoreError::Migrate(_)
        | StoreError::BadLocation(_)
        | StoreError::StateRefused { .. } => {
            tracing::error!(alarm = true, error = %e, "internal store failure");
            StoreFailure::Internal
        }
        StoreError::Standby => StoreFailure::Standby,
        StoreError::Database(_) | StoreError::WriterStopped => {
            tracing::error!(error = %e, "store failure");
            StoreFailure::Unavailable
        }
    }
}
