//! The one error type of the API: a status, a stable code and a message for the caller.
//! Server-side failures are logged with their details and answered without them.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use podq_api::{ErrorBody, ErrorDetail};

use crate::scheduler::SchedulerError;
use crate::scheduler::{self, StoreFailure};

#[derive(Debug)]
pub struct ApiError {
    pub status: StatusCode,
    pub code: &'static str,
    pub message: String,
    pub details: Option<serde_json::Value>,
}

impl ApiError {
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        ApiError {
            status,
            code,
            message: message.into(),
            details: None,
        }
    }

    pub fn with_details(mut self, details: serde_json::Value) -> Self {
        self.details = Some(details);
        self
    }

    pub fn bad_request(code: &'static str, message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, code, message)
    }

    pub fn not_found(what: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, "not_found", what)
    }

    /// A write (or a worker call) sent to a standby server: another server is active on the
    /// same database, and clients given both addresses move to it.
    pub fn standby() -> Self {
        Self::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "standby",
            "this server is a standby: another podq server is active on this database; \
             send writes and worker calls there (clients given several --server addresses move \
             on by themselves); nothing was changed",
        )
    }

    pub fn conflict(code: &'static str, message: impl Into<String>) -> Self {
        Self::new(StatusCode::CONFLICT, code, message)
    }
}

impl From<StoreFailure> for ApiError {
    fn from(failure: StoreFailure) -> Self {
        match failure {
            StoreFailure::Corrupt => ApiError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "store_corrupt",
                "the server found data it cannot read; an operator must look at its log",
            ),
            StoreFailure::Internal => ApiError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "internal",
                "the server failed unexpectedly; nothing was changed; an operator must look at its log",
            ),
            StoreFailure::Standby => ApiError::standby(),
            StoreFailure::Unavailable => ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "store_unavailable",
                "the database could not complete the request; try again (a write whose \
                 connection broke may have been applied: a retry with the same \
                 Idempotency-Key cannot apply it twice)",
            ),
        }
    }
}

/// The one place a scheduler error becomes an HTTP answer.
impl From<SchedulerError> for ApiError {
    fn from(e: SchedulerError) -> Self {
        let message = e.to_string();
        match e {
            SchedulerError::UnknownJob(_) | SchedulerError::UnknownSchedule(_) => {
                ApiError::not_found(message)
            }
            SchedulerError::UnknownGroup { name, known } => {
                let suggestions =
                    crate::names::did_you_mean(&name, known.iter().map(String::as_str));
                ApiError::not_found(format!("{message}{}", crate::names::phrase(&suggestions)))
                    .with_details(
                        serde_json::json!({ "groups": known, "did_you_mean": suggestions }),
                    )
            }
            SchedulerError::LeaseLost(_) => ApiError::conflict("lease_lost", message),
            SchedulerError::WrongState { code, .. } => ApiError::conflict(code, message),
            SchedulerError::Invalid { code, details, .. } => {
                let error = ApiError::bad_request(code, message);
                match details {
                    Some(details) => error.with_details(details),
                    None => error,
                }
            }
            SchedulerError::Unprocessable { code, details, .. } => {
                let error = ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, code, message);
                match details {
                    Some(details) => error.with_details(details),
                    None => error,
                }
            }
            SchedulerError::Missing { code, details, .. } => {
                let error = ApiError::new(StatusCode::NOT_FOUND, code, message);
                match details {
                    Some(details) => error.with_details(details),
                    None => error,
                }
            }
            SchedulerError::Forbidden { code, .. } => {
                ApiError::new(StatusCode::FORBIDDEN, code, message)
            }
            SchedulerError::Conflict { code, .. } => ApiError::conflict(code, message),
            SchedulerError::IdempotencyKeyReused => ApiError::new(
                StatusCode::UNPROCESSABLE_ENTITY,
                "idempotency_key_reused",
                message,
            ),
            SchedulerError::Store(e) => ApiError::from(scheduler::store_failure(&e)),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = ErrorBody {
            error: ErrorDetail {
                code: self.code.to_owned(),
                message: self.message,
                details: self.details,
            },
        };
        (self.status, Json(body)).into_response()
    }
}
