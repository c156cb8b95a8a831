//! Bearer tokens: the admin token for state-changing user calls, the worker token for the
//! worker protocol. With no token configured (loopback only) the check is off.

use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::middleware::Next;
use axum::response::Response;
use subtle::ConstantTimeEq;

use super::error::ApiError;
use crate::AppState;

pub async fn require_admin(
    State(state): State<AppState>,
    req: Request,
    next: Next,
) -> Result<Response, ApiError> {
    // Reads stay open; only calls that change something need the token.
    if req.method().is_safe() {
        return Ok(next.run(req).await);
    }
    check(state.config.admin_token.as_deref(), &req, "admin")?;
    Ok(next.run(req).await)
}

pub async fn require_worker(
    State(state): State<AppState>,
    req: Request,
    next: Next,
) -> Result<Response, ApiError> {
    check(state.config.worker_token.as_deref(), &req, "worker")?;
    Ok(next.run(req).await)
}

fn check(expected: Option<&str>, req: &Request, role: &str) -> Result<(), ApiError> {
    let Some(expected) = expected else {
        return Ok(());
    };
    let presented = req
        .headers()
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .ok_or_else(|| {
            ApiError::new(
                StatusCode::UNAUTHORIZED,
                "unauthorized",
                format!("this call needs the {role} token: send `Authorization: Bearer <token>`"),
            )
        })?;
    if bool::from(presented.as_bytes().ct_eq(expected.as_bytes())) {
        Ok(())
    } else {
        Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "forbidden",
            format!("the token sent is not the {role} token"),
        ))
    }
}
