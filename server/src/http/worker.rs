//! The worker protocol (DESIGN.md 3.2). Every call names its lease; a lease that is no
//! longer the job's live one answers 409 `lease_lost`.

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Json, Router};
use podq_api::{
    CheckpointsBatch, FinishRequest, FinishResponse, HeartbeatRequest, HeartbeatResponse,
    LeaseRequest, MetricsAck, MetricsBatch, PodReport, WorkerEvents,
};

use super::error::ApiError;
use super::extract::{JsonBody, PathUuid};
use crate::AppState;

pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/pods/{name}/lease", post(lease))
        .route("/pods/{name}/report", post(report))
        .route("/leases/{id}/heartbeat", post(heartbeat))
        .route("/leases/{id}/metrics", post(metrics))
        .route("/leases/{id}/checkpoints", post(checkpoints))
        .route("/leases/{id}/events", post(events))
        .route("/leases/{id}/finish", post(finish))
}

fn check_pod_name(name: &str) -> Result<(), ApiError> {
    let ok = !name.is_empty()
        && name.len() <= 63
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
    ok.then_some(()).ok_or_else(|| {
        ApiError::bad_request(
            "invalid_pod_name",
            "a pod name is 1 to 63 letters, digits, `-` or `_`",
        )
    })
}

async fn lease(
    State(state): State<AppState>,
    Path(name): Path<String>,
    JsonBody(req, _): JsonBody<LeaseRequest>,
) -> Result<Response, ApiError> {
    check_pod_name(&name)?;
    Ok(match state.scheduler.lease(&name, req).await? {
        Some(lease) => Json(lease).into_response(),
        None => StatusCode::NO_CONTENT.into_response(),
    })
}

async fn report(
    State(state): State<AppState>,
    Path(name): Path<String>,
    JsonBody(req, _): JsonBody<PodReport>,
) -> Result<StatusCode, ApiError> {
    check_pod_name(&name)?;
    state.scheduler.report_pod(&name, req).await?;
    Ok(StatusCode::NO_CONTENT)
}

async fn heartbeat(
    State(state): State<AppState>,
    PathUuid(id): PathUuid,
    JsonBody(req, _): JsonBody<HeartbeatRequest>,
) -> Result<Json<HeartbeatResponse>, ApiError> {
    Ok(Json(state.scheduler.heartbeat(id, req)?))
}

async fn metrics(
    State(state): State<AppState>,
    PathUuid(id): PathUuid,
    JsonBody(req, _): JsonBody<MetricsBatch>,
) -> Result<Json<MetricsAck>, ApiError> {
    let accepted = state.scheduler.record_metrics(id, req).await?;
    Ok(Json(MetricsAck { accepted }))
}

async fn checkpoints(
    State(state): State<AppState>,
    PathUuid(id): PathUuid,
    JsonBody(req, _): JsonBody<CheckpointsBatch>,
) -> Result<StatusCode, ApiError> {
    state.scheduler.record_checkpoints(id, req).await?;
    Ok(StatusCode::NO_CONTENT)
}

async fn events(
    State(state): State<AppState>,
    PathUuid(id): PathUuid,
    JsonBody(req, _): JsonBody<WorkerEvents>,
) -> Result<StatusCode, ApiError> {
    state.scheduler.record_worker_events(id, req).await?;
    Ok(StatusCode::NO_CONTENT)
}

async fn finish(
    State(state): State<AppState>,
    PathUuid(id): PathUuid,
    JsonBody(req, _): JsonBody<FinishRequest>,
) -> Result<Json<FinishResponse>, ApiError> {
    Ok(Json(state.scheduler.finish(id, req).await?))
}
