//! Pools of slices made on demand: a pool's process reports, anyone who reads sees them.

use axum::extract::{Path, State};
use axum::Json;
use podq_api::{ErrorBody, PoolAnswer, PoolReport, PoolsPage};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::error::ApiError;
use super::extract::JsonBody;
use crate::team::Acting;
use crate::AppState;

/// Needs a worker's token.
pub fn report_routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(report_pool))
}

pub fn read_routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(list_pools))
}

#[utoipa::path(
    post,
    path = "/pools/{name}/report",
    tag = "worker",
    summary = "A pool's process reports its slices and zones; the answer is the queue's demand",
    params(("name" = String, Path, description = "The pool: 1 to 40 lowercase letters, digits or `-`", pattern = "^[a-z][a-z0-9-]{0,39}$")),
    request_body = PoolReport,
    responses(
        (status = 200, description = "The demand for the pool's accelerator and each slice's pod as the server knows it", body = PoolAnswer),
        (status = 400, description = "`invalid_pool_name`", body = ErrorBody),
        (status = 422, description = "`unknown_event_kind`: an event of a kind a pool does not report (`PoolEventKind`); `invalid_pool_report`: an unknown accelerator, `max_slices` outside 1 to 256, a name no pod or zone has, a state no pool reports; `too_many_pools`: past 64 pools. Nothing is recorded", body = ErrorBody),
    ),
    security(("worker_token" = ["worker"])),
)]
async fn report_pool(
    State(state): State<AppState>,
    acting: Acting,
    Path(name): Path<String>,
    JsonBody(req, _): JsonBody<PoolReport>,
) -> Result<Json<PoolAnswer>, ApiError> {
    let ok = (1..=40).contains(&name.len())
        && name.starts_with(|c: char| c.is_ascii_lowercase())
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
    if !ok {
        return Err(ApiError::bad_request(
            "invalid_pool_name",
            "a pool name is 1 to 40 lowercase letters, digits or `-`, starting with a letter",
        ));
    }
    Ok(Json(
        state.scheduler.report_pool(&name, req, &acting).await?,
    ))
}

#[utoipa::path(
    get,
    path = "/pools",
    tag = "status",
    summary = "Pools of slices made on demand: their slices, zones and the queue's demand",
    responses((status = 200, description = "Every pool that has reported since the server started", body = PoolsPage)),
)]
async fn list_pools(State(state): State<AppState>) -> Result<Json<PoolsPage>, ApiError> {
    Ok(Json(state.scheduler.pools().await?))
}
