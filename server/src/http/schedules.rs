//! Cron submissions.

use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::{delete, get, post};
use axum::{Json, Router};
use podq_api::{Schedule, ScheduleRequest};

use super::error::ApiError;
use super::extract::{JsonBody, PathUuid};
use crate::AppState;

pub fn read_routes() -> Router<AppState> {
    Router::new().route("/schedules", get(list))
}

pub fn admin_routes() -> Router<AppState> {
    Router::new()
        .route("/schedules", post(create))
        .route("/schedules/{id}", delete(remove))
}

async fn list(State(state): State<AppState>) -> Result<Json<Vec<Schedule>>, ApiError> {
    Ok(Json(state.scheduler.schedules().await?))
}

async fn create(
    State(state): State<AppState>,
    JsonBody(req, _): JsonBody<ScheduleRequest>,
) -> Result<(StatusCode, Json<Schedule>), ApiError> {
    Ok((
        StatusCode::CREATED,
        Json(state.scheduler.create_schedule(req).await?),
    ))
}

async fn remove(
    State(state): State<AppState>,
    PathUuid(id): PathUuid,
) -> Result<StatusCode, ApiError> {
    state.scheduler.delete_schedule(id).await?;
    Ok(StatusCode::NO_CONTENT)
}
