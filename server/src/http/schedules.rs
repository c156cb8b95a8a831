//! Cron submissions.

use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use podq_api::{ErrorBody, Schedule, ScheduleRequest};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::error::ApiError;
use super::extract::{JsonBody, PathId};
use crate::team::Acting;
use crate::AppState;

pub fn read_routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(list))
}

pub fn admin_routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(create))
        .routes(routes!(remove))
}

#[utoipa::path(
    get,
    path = "/schedules",
    tag = "schedules",
    summary = "Cron submissions",
    responses((status = 200, description = "Every schedule", body = Vec<Schedule>)),
)]
async fn list(State(state): State<AppState>) -> Result<Json<Vec<Schedule>>, ApiError> {
    Ok(Json(state.scheduler.schedules().await?))
}

#[utoipa::path(
    post,
    path = "/schedules",
    tag = "schedules",
    summary = "Submit on a cron schedule",
    description = "`cron` is 5-field `minute hour day-of-month month day-of-week` in UTC (day-of-week 0-7, 0 and 7 Sunday; names JAN-DEC, SUN-SAT), or @hourly, @daily, @weekly, @monthly, @yearly; a 6-field form with leading seconds is also accepted. A bad expression is 422 `invalid_cron` naming the field.",
    request_body = ScheduleRequest,
    responses(
        (status = 201, description = "The schedule", body = Schedule),
        (status = 404, description = "`not_found`: an unknown group or experiment to submit", body = ErrorBody),
        (status = 422, description = "`invalid_cron`: the wrong number of fields, a field out of range or a bad name", body = ErrorBody),
    ),
    security(("admin_token" = ["admin"])),
)]
async fn create(
    State(state): State<AppState>,
    acting: Acting,
    JsonBody(req, _): JsonBody<ScheduleRequest>,
) -> Result<(StatusCode, Json<Schedule>), ApiError> {
    Ok((
        StatusCode::CREATED,
        Json(state.scheduler.create_schedule(&acting.actor, req).await?),
    ))
}

#[utoipa::path(
    delete,
    path = "/schedules/{id}",
    tag = "schedules",
    summary = "Remove a schedule",
    params(("id" = uuid::Uuid, Path, description = "The schedule")),
    responses(
        (status = 204, description = "Removed"),
        (status = 404, description = "`not_found`: no such schedule", body = ErrorBody),
    ),
    security(("admin_token" = ["admin"])),
)]
async fn remove(
    State(state): State<AppState>,
    acting: Acting,
    PathId(id): PathId<uuid::Uuid>,
) -> Result<StatusCode, ApiError> {
    state.scheduler.delete_schedule(&acting.actor, id).await?;
    Ok(StatusCode::NO_CONTENT)
}
