//! The worker protocol (docs/architecture.md §3.2). Every call names its lease; a lease that is no
//! longer the job's live one answers 409 `lease_lost`.

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use podq_api::{
    CheckpointsBatch, ErrorBody, FinishRequest, FinishResponse, HeartbeatRequest,
    HeartbeatResponse, Lease, LeaseId, LeaseRequest, LinksBatch, LogBatch, MetricsAck,
    MetricsBatch, PodReport, WorkerEvents,
};

use super::error::ApiError;
use super::extract::{JsonBody, PathId};
use crate::team::Acting;
use crate::AppState;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

/// Every route needs the worker token.
pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(lease))
        .routes(routes!(report))
        .routes(routes!(heartbeat))
        .routes(routes!(metrics))
        .routes(routes!(logs))
        .routes(routes!(checkpoints))
        .routes(routes!(events))
        .routes(routes!(links))
        .routes(routes!(finish))
}

fn check_pod_name(name: &str) -> Result<(), ApiError> {
    podq_api::is_pod_name(name).then_some(()).ok_or_else(|| {
        ApiError::bad_request(
            "invalid_pod_name",
            format!("a pod name is {}", podq_api::POD_NAME_RULE),
        )
    })
}

#[utoipa::path(
    post,
    path = "/pods/{name}/lease",
    tag = "worker",
    summary = "Long-poll for a lease",
    description = "Registers or refreshes the pod and waits up to `wait_s` for a job it may run.",
    params(("name" = String, Path, description = "The pod: 1 to 63 letters, digits, `-` or `_`", pattern = "^[A-Za-z0-9_-]{1,63}$")),
    request_body = LeaseRequest,
    responses(
        (status = 200, description = "A lease: run this attempt", body = Lease),
        (status = 204, description = "Nothing is leasable to this pod now; ask again"),
        (status = 422, description = "`unknown_accelerator`: the pod's accelerator is no slice type of podq's table (`v4-64`, never `v4-064`); the details name the nearest (`did_you_mean`). Nothing is written and the call does not wait", body = ErrorBody),
    ),
    security(("worker_token" = ["worker"])),
)]
async fn lease(
    State(state): State<AppState>,
    acting: Acting,
    Path(name): Path<String>,
    JsonBody(req, _): JsonBody<LeaseRequest>,
) -> Result<Response, ApiError> {
    check_pod_name(&name)?;
    Ok(match state.scheduler.lease(&name, req, &acting).await? {
        Some(lease) => Json(lease).into_response(),
        None => StatusCode::NO_CONTENT.into_response(),
    })
}

#[utoipa::path(
    post,
    path = "/pods/{name}/report",
    tag = "worker",
    summary = "Report the pod's state, health, preflight or recovery",
    params(("name" = String, Path, description = "The pod: 1 to 63 letters, digits, `-` or `_`", pattern = "^[A-Za-z0-9_-]{1,63}$")),
    request_body = PodReport,
    responses(
        (status = 204, description = "Recorded"),
        (status = 422, description = "`unknown_event_kind`: the event's kind is not one a worker reports (`WorkerEventKind`); nothing is recorded", body = ErrorBody),
    ),
    security(("worker_token" = ["worker"])),
)]
async fn report(
    State(state): State<AppState>,
    acting: Acting,
    Path(name): Path<String>,
    JsonBody(req, _): JsonBody<PodReport>,
) -> Result<StatusCode, ApiError> {
    check_pod_name(&name)?;
    state.scheduler.report_pod(&name, req, &acting).await?;
    Ok(StatusCode::NO_CONTENT)
}

#[utoipa::path(
    post,
    path = "/leases/{id}/heartbeat",
    tag = "worker",
    summary = "Extend the lease; the answer says whether to cancel",
    params(("id" = uuid::Uuid, Path, description = "The lease")),
    request_body = HeartbeatRequest,
    responses(
        (status = 200, description = "The lease is extended", body = HeartbeatResponse),
        (status = 409, description = "`lease_lost`: the lease is no longer the job's live one", body = ErrorBody),
    ),
    security(("worker_token" = ["worker"])),
)]
async fn heartbeat(
    State(state): State<AppState>,
    acting: Acting,
    PathId(id): PathId<LeaseId>,
    JsonBody(req, _): JsonBody<HeartbeatRequest>,
) -> Result<Json<HeartbeatResponse>, ApiError> {
    Ok(Json(state.scheduler.heartbeat(id, req, &acting)?))
}

#[utoipa::path(
    post,
    path = "/leases/{id}/metrics",
    tag = "worker",
    summary = "A batch of metric points",
    params(("id" = uuid::Uuid, Path, description = "The lease")),
    request_body = MetricsBatch,
    responses(
        (status = 200, description = "How many points were stored", body = MetricsAck),
        (status = 400, description = "`invalid_phases`: a phase time that is negative; nothing of the batch is stored", body = ErrorBody),
        (status = 409, description = "`lease_lost`: the lease is no longer the job's live one", body = ErrorBody),
    ),
    security(("worker_token" = ["worker"])),
)]
async fn metrics(
    State(state): State<AppState>,
    acting: Acting,
    PathId(id): PathId<LeaseId>,
    JsonBody(req, _): JsonBody<MetricsBatch>,
) -> Result<Json<MetricsAck>, ApiError> {
    Ok(Json(
        state.scheduler.record_metrics(id, req, &acting).await?,
    ))
}

#[utoipa::path(
    post,
    path = "/leases/{id}/logs",
    tag = "worker",
    summary = "A batch of the hosts' log lines",
    description = "Lines every host's trainer printed, as they arrive. A line sent again (same host and offset) is stored once; the server keeps the newest `--log-lines-per-host` per attempt and host. A line longer than 16 KiB is cut, and the cut is marked.",
    params(("id" = uuid::Uuid, Path, description = "The lease")),
    request_body = LogBatch,
    responses(
        (status = 200, description = "How many lines were new", body = MetricsAck),
        (status = 409, description = "`lease_lost`: the lease is no longer the job's live one", body = ErrorBody),
    ),
    security(("worker_token" = ["worker"])),
)]
async fn logs(
    State(state): State<AppState>,
    acting: Acting,
    PathId(id): PathId<LeaseId>,
    JsonBody(req, _): JsonBody<LogBatch>,
) -> Result<Json<MetricsAck>, ApiError> {
    let accepted = state.scheduler.record_logs(id, req, &acting).await?;
    Ok(Json(MetricsAck {
        accepted: usize::try_from(accepted).unwrap_or(usize::MAX),
        stop: None,
    }))
}

#[utoipa::path(
    post,
    path = "/leases/{id}/checkpoints",
    tag = "worker",
    summary = "Checkpoints found in the store",
    params(("id" = uuid::Uuid, Path, description = "The lease")),
    request_body = CheckpointsBatch,
    responses(
        (status = 204, description = "Recorded"),
        (status = 409, description = "`lease_lost`: the lease is no longer the job's live one", body = ErrorBody),
    ),
    security(("worker_token" = ["worker"])),
)]
async fn checkpoints(
    State(state): State<AppState>,
    acting: Acting,
    PathId(id): PathId<LeaseId>,
    JsonBody(req, _): JsonBody<CheckpointsBatch>,
) -> Result<StatusCode, ApiError> {
    state.scheduler.record_checkpoints(id, req, &acting).await?;
    Ok(StatusCode::NO_CONTENT)
}

#[utoipa::path(
    post,
    path = "/leases/{id}/events",
    tag = "worker",
    summary = "Observations for the job's timeline",
    params(("id" = uuid::Uuid, Path, description = "The lease")),
    request_body = WorkerEvents,
    responses(
        (status = 204, description = "Recorded"),
        (status = 422, description = "`unknown_event_kind`: a kind that is not one a worker reports (`WorkerEventKind`); nothing of the batch is recorded", body = ErrorBody),
        (status = 409, description = "`lease_lost`: the lease is no longer the job's live one", body = ErrorBody),
    ),
    security(("worker_token" = ["worker"])),
)]
async fn events(
    State(state): State<AppState>,
    acting: Acting,
    PathId(id): PathId<LeaseId>,
    JsonBody(req, _): JsonBody<WorkerEvents>,
) -> Result<StatusCode, ApiError> {
    state
        .scheduler
        .record_worker_events(id, req, &acting)
        .await?;
    Ok(StatusCode::NO_CONTENT)
}

#[utoipa::path(
    post,
    path = "/leases/{id}/links",
    tag = "worker",
    summary = "Links the trainer reported (its W&B run, say)",
    description = "The trainer's `PODQ {\"event\":\"link\"}` lines: the job keeps the newest URL of each name, across attempts, and shows them in `GET /jobs/{id}`.",
    params(("id" = uuid::Uuid, Path, description = "The lease")),
    request_body = LinksBatch,
    responses(
        (status = 204, description = "Recorded"),
        (status = 400, description = "`invalid_link`: a name that is not a short identifier, or a URL that is not http(s), too long or holds spaces; `too_many_links`: a new name past 16. Nothing of the batch is stored", body = ErrorBody),
        (status = 409, description = "`lease_lost`: the lease is no longer the job's live one", body = ErrorBody),
    ),
    security(("worker_token" = ["worker"])),
)]
async fn links(
    State(state): State<AppState>,
    acting: Acting,
    PathId(id): PathId<LeaseId>,
    JsonBody(req, _): JsonBody<LinksBatch>,
) -> Result<StatusCode, ApiError> {
    state.scheduler.record_links(id, req, &acting).await?;
    Ok(StatusCode::NO_CONTENT)
}

#[utoipa::path(
    post,
    path = "/leases/{id}/finish",
    tag = "worker",
    summary = "End the attempt with its outcome",
    params(("id" = uuid::Uuid, Path, description = "The lease")),
    request_body = FinishRequest,
    responses(
        (status = 200, description = "The job's state after the retry policy", body = FinishResponse),
        (status = 400, description = "`invalid_phases`: a phase time or `stopping_s` that is negative; nothing changes", body = ErrorBody),
        (status = 409, description = "`lease_lost`: the lease is no longer the job's live one", body = ErrorBody),
    ),
    security(("worker_token" = ["worker"])),
)]
async fn finish(
    State(state): State<AppState>,
    acting: Acting,
    PathId(id): PathId<LeaseId>,
    JsonBody(req, _): JsonBody<FinishRequest>,
) -> Result<Json<FinishResponse>, ApiError> {
    Ok(Json(state.scheduler.finish(id, req, &acting).await?))
}
