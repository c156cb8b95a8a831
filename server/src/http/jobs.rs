//! Jobs: submit, list, inspect, cancel, requeue, reprioritise.

use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use podq_api::{
    Checkpoint, ErrorBody, Event, Job, JobAction, JobDetail, JobList, JobMetrics, JobState,
    PatchJobRequest, SubmitRequest, SubmitResponse,
};
use serde::Deserialize;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::error::ApiError;
use super::extract::{BodyDigest, IdempotencyKey, JobRef, JsonBody, QueryParams};
use crate::names;
use crate::scheduler;
use crate::scheduler::control::JobChange;
use crate::team::Acting;
use crate::AppState;

pub fn read_routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(list))
        .routes(routes!(detail))
        .routes(routes!(events))
        .routes(routes!(checkpoints))
        .routes(routes!(job_metrics))
}

pub fn admin_routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(submit_jobs))
        .routes(routes!(patch))
        .routes(routes!(cancel))
        .routes(routes!(requeue))
        .routes(routes!(suspend))
        .routes(routes!(resume))
}

/// `{id}` of every job route.
const JOB_ID: &str = "A job's uuid, or an experiment name: that experiment's newest job";

#[utoipa::path(
    post,
    path = "/jobs",
    tag = "jobs",
    summary = "Submit a group, a list of experiments or all",
    description = "Exactly one of `group`, `experiments`, `all`. An experiment or config that already has a job is skipped or linked unless `force`. With `Idempotency-Key`, a retry of the same request answers the first answer.",
    params(("Idempotency-Key" = Option<String>, Header, description = "1 to 200 visible ASCII characters; the same key with another body is 422", pattern = "^[!-~]{1,200}$")),
    request_body = SubmitRequest,
    responses(
        (status = 201, description = "Jobs were created or linked", body = SubmitResponse),
        (status = 200, description = "A dry run, or nothing new to create", body = SubmitResponse),
        (status = 400, description = "`unknown_experiment`, `unknown_group` (with did-you-mean in details; a name longer than every known one gets none, and is quoted only in part)", body = ErrorBody),
        (status = 403, description = "`class_not_allowed`: a class the caller may not use (by default a class that runs ahead of the suite's default, may evict, or is never evicted is an admin's); `priority_not_allowed`: a submitter's priority outside 0 to 100. Nothing is written", body = ErrorBody),
        (status = 404, description = "`not_found`: an unknown group (with did-you-mean in details)", body = ErrorBody),
        (status = 422, description = "`idempotency_key_reused`: the key came with another body", body = ErrorBody),
    ),
    security(("admin_token" = ["submitter"])),
)]
async fn submit_jobs(
    State(state): State<AppState>,
    acting: Acting,
    IdempotencyKey(key): IdempotencyKey,
    JsonBody(req, digest): JsonBody<SubmitRequest>,
) -> Result<(StatusCode, Json<SubmitResponse>), ApiError> {
    let key = remembered(&acting, key, "POST /jobs", digest);
    let answer = state.scheduler.submit(&acting, req, key).await?;
    let status = if answer.dry_run || (answer.created.is_empty() && answer.linked.is_empty()) {
        StatusCode::OK
    } else {
        StatusCode::CREATED
    };
    Ok((status, Json(answer)))
}

/// The scheduler's form of a request's `Idempotency-Key`, if it sent one.
/// Keys are the caller's own (`IdempotencyKey::of`): another person's key names another
/// request, so it can neither replay that answer nor skip this caller's checks.
fn remembered(
    acting: &Acting,
    key: Option<String>,
    route: &'static str,
    digest: BodyDigest,
) -> Option<scheduler::IdempotencyKey> {
    key.map(|key| scheduler::IdempotencyKey::of(acting, &key, route, digest.0))
}

#[derive(Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
struct ListQuery {
    /// Only jobs in this state.
    #[param(value_type = Option<JobState>)]
    state: Option<String>,
    /// Only this group's jobs (the document lists the catalog's groups).
    #[param(min_length = 1)]
    group: Option<String>,
    /// Only this experiment's jobs (the document lists the catalog's experiments).
    #[param(min_length = 1)]
    experiment: Option<String>,
    /// Page size (default 100).
    #[param(minimum = 1, maximum = 1000)]
    limit: Option<i64>,
    /// The previous page's `next_after`.
    after: Option<i64>,
    /// Skip this many (after `after`, when both are given).
    #[param(minimum = 0)]
    offset: Option<i64>,
}

#[utoipa::path(
    get,
    path = "/jobs",
    tag = "jobs",
    summary = "Jobs in submission order",
    description = "Filtered by state, group and experiment; paged by `limit` and `after` (the previous page's `next_after`), or `offset`. A group or experiment no job can have is 400 with did-you-mean.",
    params(ListQuery),
    responses((status = 200, description = "A page of jobs", body = JobList)),
)]
async fn list(
    State(state): State<AppState>,
    acting: Acting,
    QueryParams(q): QueryParams<ListQuery>,
) -> Result<Json<JobList>, ApiError> {
    let job_state = q.state.as_deref().map(parse_state).transpose()?;
    let limit = q.limit.unwrap_or(100);
    if !(1..=1000).contains(&limit) {
        return Err(ApiError::bad_request(
            "invalid_query",
            "limit must be between 1 and 1000",
        ));
    }
    if q.offset.is_some_and(|o| o < 0) {
        return Err(ApiError::bad_request(
            "invalid_query",
            "offset must be 0 or more",
        ));
    }
    let query = scheduler::JobsQuery {
        state: job_state,
        group: q.group,
        experiment: q.experiment,
        limit,
        after: q.after,
        offset: q.offset.unwrap_or(0),
    };
    let mut list = state.scheduler.jobs(query).await?;
    state.scheduler.with_actions(&acting, &mut list.jobs);
    Ok(Json(list))
}

/// A job state by name, or a 400 that lists them with the closest one.
fn parse_state(name: &str) -> Result<JobState, ApiError> {
    name.parse::<JobState>().map_err(|_| {
        let states = JobState::ALL.map(JobState::as_str);
        let suggestions = names::did_you_mean(name, states);
        let message = match names::question(&suggestions) {
            Some(question) => format!("no job state `{name}`; {question}"),
            None => format!(
                "no job state `{name}`; the states are {}",
                states.join(", ")
            ),
        };
        ApiError::bad_request("invalid_query", message)
            .with_details(serde_json::json!({ "did_you_mean": suggestions, "states": states }))
    })
}

#[utoipa::path(
    get,
    path = "/jobs/{id}",
    tag = "jobs",
    summary = "A job with attempts, checkpoints, latest metric values and goodput",
    params(("id" = String, Path, description = JOB_ID)),
    responses(
        (status = 200, description = "The job", body = JobDetail),
        (status = 404, description = "`not_found`: no such job or experiment (did-you-mean in details)", body = ErrorBody),
    ),
)]
async fn detail(
    State(state): State<AppState>,
    acting: Acting,
    JobRef(id): JobRef,
) -> Result<Json<JobDetail>, ApiError> {
    let mut detail = state.scheduler.job_detail(id).await?;
    state.scheduler.with_actions(&acting, [&mut detail.job]);
    Ok(Json(detail))
}

/// The job an action answers, with what its caller may do to it now.
fn answer(state: &AppState, acting: &Acting, mut job: Job) -> Json<Job> {
    state.scheduler.with_actions(acting, [&mut job]);
    Json(job)
}

#[derive(Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
struct EventsQuery {
    /// Only events with a greater id.
    after: Option<i64>,
    /// At most this many (default 500, clamped to 1..=5000).
    limit: Option<i64>,
}

#[utoipa::path(
    get,
    path = "/jobs/{id}/events",
    tag = "jobs",
    summary = "The job's timeline",
    params(("id" = String, Path, description = JOB_ID), EventsQuery),
    responses(
        (status = 200, description = "Events, oldest first", body = Vec<Event>),
        (status = 404, description = "`not_found`: no such job or experiment", body = ErrorBody),
    ),
)]
async fn events(
    State(state): State<AppState>,
    JobRef(id): JobRef,
    QueryParams(q): QueryParams<EventsQuery>,
) -> Result<Json<Vec<Event>>, ApiError> {
    let limit = q.limit.unwrap_or(500).clamp(1, 5000);
    Ok(Json(
        state
            .scheduler
            .job_events(id, q.after.unwrap_or(0), limit)
            .await?,
    ))
}

#[utoipa::path(
    get,
    path = "/jobs/{id}/checkpoints",
    tag = "jobs",
    summary = "Checkpoints seen in the store",
    params(("id" = String, Path, description = JOB_ID)),
    responses(
        (status = 200, description = "Checkpoints of the job's run", body = Vec<Checkpoint>),
        (status = 404, description = "`not_found`: no such job or experiment", body = ErrorBody),
    ),
)]
async fn checkpoints(
    State(state): State<AppState>,
    JobRef(id): JobRef,
) -> Result<Json<Vec<Checkpoint>>, ApiError> {
    Ok(Json(state.scheduler.job_checkpoints(id).await?))
}

#[derive(Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
struct MetricsQuery {
    /// Comma-separated series names (default: every series).
    names: Option<String>,
    /// Points per series at most (default 2000).
    #[param(minimum = 2, maximum = 100000)]
    max_points: Option<i64>,
}

#[utoipa::path(
    get,
    path = "/jobs/{id}/metrics",
    tag = "jobs",
    summary = "Metric series, downsampled",
    params(("id" = String, Path, description = JOB_ID), MetricsQuery),
    responses(
        (status = 200, description = "The series", body = JobMetrics),
        (status = 404, description = "`not_found`: no such job or experiment", body = ErrorBody),
    ),
)]
async fn job_metrics(
    State(state): State<AppState>,
    JobRef(id): JobRef,
    QueryParams(q): QueryParams<MetricsQuery>,
) -> Result<Json<JobMetrics>, ApiError> {
    let max_points = q.max_points.unwrap_or(2000);
    if !(2..=100_000).contains(&max_points) {
        return Err(ApiError::bad_request(
            "invalid_query",
            "max_points must be between 2 and 100000",
        ));
    }
    let names: Option<Vec<String>> = q.names.map(|n| {
        n.split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(str::to_owned)
            .collect()
    });
    Ok(Json(
        state.scheduler.job_metrics(id, names, max_points).await?,
    ))
}

#[utoipa::path(
    post,
    path = "/jobs/{id}/cancel",
    tag = "jobs",
    summary = "Cancel a job; a running one is stopped on its pod",
    params(("id" = String, Path, description = JOB_ID), ("Idempotency-Key" = Option<String>, Header, description = "1 to 200 visible ASCII characters; the same key with another request is 422", pattern = "^[!-~]{1,200}$")),
    responses(
        (status = 200, description = "The job, cancelled", body = Job),
        (status = 404, description = "`not_found`: no such job or experiment", body = ErrorBody),
        (status = 409, description = "The job's state does not allow it", body = ErrorBody),
        (status = 422, description = "`idempotency_key_reused`", body = ErrorBody),
    ),
    security(("admin_token" = ["submitter"])),
)]
async fn cancel(
    State(state): State<AppState>,
    acting: Acting,
    JobRef(id): JobRef,
    IdempotencyKey(key): IdempotencyKey,
) -> Result<Json<Job>, ApiError> {
    let key = remembered(
        &acting,
        key,
        "POST /jobs/{id}/cancel",
        BodyDigest(id.to_string()),
    );
    let job = state.scheduler.cancel(&acting, id, key).await?;
    Ok(answer(&state, &acting, job))
}

#[utoipa::path(
    post,
    path = "/jobs/{id}/requeue",
    tag = "jobs",
    summary = "Requeue a failed, cancelled, held or stopped job",
    params(("id" = String, Path, description = JOB_ID), podq_api::RequeueQuery, ("Idempotency-Key" = Option<String>, Header, description = "1 to 200 visible ASCII characters; the same key with another request is 422", pattern = "^[!-~]{1,200}$")),
    responses(
        (status = 200, description = "The job, requeued", body = Job),
        (status = 404, description = "`not_found`: no such job or experiment", body = ErrorBody),
        (status = 409, description = "The job's state does not allow it", body = ErrorBody),
        (status = 422, description = "`idempotency_key_reused`", body = ErrorBody),
    ),
    security(("admin_token" = ["submitter"])),
)]
async fn requeue(
    State(state): State<AppState>,
    acting: Acting,
    JobRef(id): JobRef,
    QueryParams(query): QueryParams<podq_api::RequeueQuery>,
    IdempotencyKey(key): IdempotencyKey,
) -> Result<Json<Job>, ApiError> {
    let key = remembered(
        &acting,
        key,
        "POST /jobs/{id}/requeue",
        BodyDigest(format!("{id} {}", query.ignore_stop_rules)),
    );
    let lift = query.ignore_stop_rules;
    let job = state.scheduler.requeue(&acting, id, lift, key).await?;
    Ok(answer(&state, &acting, job))
}

#[utoipa::path(
    patch,
    path = "/jobs/{id}",
    tag = "jobs",
    summary = "Change a job's priority or priority class",
    params(("id" = String, Path, description = JOB_ID)),
    request_body = PatchJobRequest,
    responses(
        (status = 200, description = "The job", body = Job),
        (status = 403, description = "`not_owner`: a submitter changing another's job; `class_not_allowed`, `priority_not_allowed`: as at submit. Nothing is changed", body = ErrorBody),
        (status = 404, description = "`not_found`: no such job or experiment", body = ErrorBody),
        (status = 422, description = "`unknown_class`, with the closest class", body = ErrorBody),
        (status = 409, description = "`job_finished`, `shares_run`: the job's state does not allow it (its `actions` do not list `reprioritise`)", body = ErrorBody),
    ),
    security(("admin_token" = ["submitter"])),
)]
async fn patch(
    State(state): State<AppState>,
    acting: Acting,
    JobRef(id): JobRef,
    JsonBody(req, _): JsonBody<PatchJobRequest>,
) -> Result<Json<Job>, ApiError> {
    if req.priority.is_none() && req.priority_class.is_none() {
        return Err(ApiError::bad_request(
            "empty_patch",
            "nothing to change: give `priority`, `priority_class` or both",
        ));
    }
    // A finished job, or one that shares another's run, has no place in a queue to change:
    // its state does not list `reprioritise` (`store::job_state::actions`).
    let mut job = state.scheduler.job(id).await?;
    state.scheduler.with_actions(&acting, [&mut job]);
    if !scheduler::reads::state_allows(&job, JobAction::Reprioritise) {
        let (code, why) = match job.same_as {
            Some(run) => (
                "shares_run",
                format!("it shares the run of job {run}: change that job"),
            ),
            None => ("job_finished", "it is finished".to_owned()),
        };
        return Err(scheduler::SchedulerError::wrong_state(
            id,
            job.state,
            code,
            format!("job {id} is {}; {why}", job.state),
        )
        .into());
    }
    let change = JobChange {
        priority: req.priority,
        class: req.priority_class,
    };
    let job = state.scheduler.change_job(&acting, id, change).await?;
    Ok(answer(&state, &acting, job))
}

#[utoipa::path(
    post,
    path = "/jobs/{id}/suspend",
    tag = "jobs",
    summary = "Pause a job: a queued one is held, a running one saves, stops and is held",
    description = "A person's pause, uncharged: the trainer gets its full stop grace, so it saves. `resume` puts it back in the queue.",
    params(("id" = String, Path, description = JOB_ID)),
    responses(
        (status = 200, description = "The job, held or stopping", body = Job),
        (status = 403, description = "`not_owner`: a submitter suspending another's job", body = ErrorBody),
        (status = 404, description = "`not_found`: no such job or experiment", body = ErrorBody),
        (status = 409, description = "`not_suspendable`: the job is neither queued nor running", body = ErrorBody),
    ),
    security(("admin_token" = ["submitter"])),
)]
async fn suspend(
    State(state): State<AppState>,
    acting: Acting,
    JobRef(id): JobRef,
) -> Result<Json<Job>, ApiError> {
    let job = state.scheduler.suspend(&acting, id).await?;
    Ok(answer(&state, &acting, job))
}

#[utoipa::path(
    post,
    path = "/jobs/{id}/resume",
    tag = "jobs",
    summary = "Put a held job back in the queue, its failure budget as it was",
    params(("id" = String, Path, description = JOB_ID)),
    responses(
        (status = 200, description = "The job, queued", body = Job),
        (status = 403, description = "`not_owner`: a submitter resuming another's job", body = ErrorBody),
        (status = 404, description = "`not_found`: no such job or experiment", body = ErrorBody),
        (status = 409, description = "`not_held`, or `job_stopping` while its pod still stops it", body = ErrorBody),
    ),
    security(("admin_token" = ["submitter"])),
)]
async fn resume(
    State(state): State<AppState>,
    acting: Acting,
    JobRef(id): JobRef,
) -> Result<Json<Job>, ApiError> {
    let job = state.scheduler.resume(&acting, id).await?;
    Ok(answer(&state, &acting, job))
}
