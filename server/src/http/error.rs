//! The one error type of the API: a status, a stable code and a message for the caller.
//! Server-side failures are logged with their details and answered without them.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use podq_api::{ErrorBody, ErrorDetail};

use crate::store::{FromCommitFailure, StoreError};

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

    pub fn conflict(code: &'static str, message: impl Into<String>) -> Self {
        Self::new(StatusCode::CONFLICT, code, message)
    }

    /// A worker call on a lease that is no longer the job's live lease.
    pub fn lease_lost(lease_id: impl std::fmt::Display) -> Self {
        Self::conflict(
            "lease_lost",
            format!("lease {lease_id} is not the job's live lease: stop this attempt's processes"),
        )
    }
}

impl From<StoreError> for ApiError {
    fn from(e: StoreError) -> Self {
        tracing::error!(error = %e, "store failure");
        ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "store_unavailable",
            "the database could not complete the request; nothing was changed, try again",
        )
    }
}

impl From<sqlx::Error> for ApiError {
    fn from(e: sqlx::Error) -> Self {
        ApiError::from(StoreError::from(e))
    }
}

impl FromCommitFailure for ApiError {
    fn commit_failed(message: String) -> Self {
        ApiError::from(StoreError::commit_failed(message))
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
