//! What a standby server answers. Servers sharing one PostgreSQL database elect one active
//! server; the others answer reads from the same database, and refuse what must happen on the
//! active one (writes, worker calls, the event stream, which follows the active server's
//! commits) with 503 `standby`, so that clients given several addresses move on.

use axum::extract::{Request, State};
use axum::http::Method;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::error::ApiError;
use super::AppState;
use crate::store::Role;

pub async fn refuse_unless_active(
    State(state): State<AppState>,
    request: Request,
    next: Next,
) -> Response {
    if state.scheduler.role() == Role::Active || is_plain_read(&request) {
        return next.run(request).await;
    }
    ApiError::standby().into_response()
}

fn is_plain_read(request: &Request) -> bool {
    matches!(*request.method(), Method::GET | Method::HEAD)
        && !request.uri().path().ends_with("/events/stream")
}
