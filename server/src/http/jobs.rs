//! Jobs: submit, list, inspect, cancel, requeue, reprioritise.

use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::{get, post};
use axum::{Json, Router};
use podq_api::{
    Attempt, Checkpoint, Event, Job, JobDetail, JobList, JobMetrics, JobState, PatchJobRequest,
    SubmitRequest, SubmitResponse,
};
use serde::Deserialize;
use uuid::Uuid;

use super::error::ApiError;
use super::extract::{BodyDigest, IdempotencyKey, JobRef, JsonBody, QueryParams};
use crate::names;
use crate::scheduler;
use crate::store::checkpoints as store_checkpoints;
use crate::store::jobs::{self as store_jobs, JobFilter};
use crate::store::{goodput, metrics, JobRow};
use crate::AppState;

pub fn read_routes() -> Router<AppState> {
    Router::new()
        .route("/jobs", get(list))
        .route("/jobs/{id}", get(detail))
        .route("/jobs/{id}/events", get(events))
        .route("/jobs/{id}/checkpoints", get(checkpoints))
        .route("/jobs/{id}/metrics", get(job_metrics))
}

pub fn admin_routes() -> Router<AppState> {
    Router::new()
        .route("/jobs", post(submit_jobs))
        .route("/jobs/{id}", axum::routing::patch(patch))
        .route("/jobs/{id}/cancel", post(cancel))
        .route("/jobs/{id}/requeue", post(requeue))
}

async fn submit_jobs(
    State(state): State<AppState>,
    IdempotencyKey(key): IdempotencyKey,
    JsonBody(req, digest): JsonBody<SubmitRequest>,
) -> Result<(StatusCode, Json<SubmitResponse>), ApiError> {
    let key = remembered(key, "POST /jobs", digest);
    let answer = state.scheduler.submit(req, key).await?;
    let status = if answer.dry_run || (answer.created.is_empty() && answer.linked.is_empty()) {
        StatusCode::OK
    } else {
        StatusCode::CREATED
    };
    Ok((status, Json(answer)))
}

/// The scheduler's form of a request's `Idempotency-Key`, if it sent one.
fn remembered(
    key: Option<String>,
    route: &'static str,
    digest: BodyDigest,
) -> Option<scheduler::IdempotencyKey> {
    key.map(|key| scheduler::IdempotencyKey {
        key,
        route,
        request_sha256: digest.0,
    })
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ListQuery {
    state: Option<String>,
    group: Option<String>,
    experiment: Option<String>,
    limit: Option<i64>,
    after: Option<i64>,
    offset: Option<i64>,
}

async fn list(
    State(state): State<AppState>,
    QueryParams(q): QueryParams<ListQuery>,
) -> Result<Json<JobList>, ApiError> {
    let job_state = q.state.as_deref().map(parse_state).transpose()?;
    // A name no job can have is a mistake to point out, not an empty list.
    if let Some(group) = &q.group {
        if state.catalog.group(group).is_none()
            && !store_jobs::group_has_jobs(state.store.reader(), group).await?
        {
            return Err(scheduler::submit::unknown_group(&state.catalog, group).into());
        }
    }
    if let Some(experiment) = &q.experiment {
        if state.catalog.experiment(experiment).is_none()
            && store_jobs::newest_job_of_experiment(state.store.reader(), experiment)
                .await?
                .is_none()
        {
            return Err(
                scheduler::submit::unknown_experiments(&state.catalog, &[experiment]).into(),
            );
        }
    }
    let limit = q.limit.unwrap_or(100);
    if !(1..=1000).contains(&limit) {
        return Err(ApiError::bad_request(
            "invalid_query",
            "limit must be between 1 and 1000",
        ));
    }
    if q.after.is_some() && q.offset.is_some() {
        return Err(ApiError::bad_request(
            "invalid_query",
            "give `after` (the `next_after` of the previous page) or `offset`, not both",
        ));
    }
    let offset = q.offset.unwrap_or(0).max(0);
    let filter = JobFilter {
        state: job_state,
        group: q.group,
        experiment: q.experiment,
        limit,
        after: q.after,
        offset,
    };
    let (rows, total) = store_jobs::list_jobs(state.store.reader(), &filter).await?;
    let next_after = (rows.len() as i64 == limit)
        .then(|| rows.last().map(|r| r.seq))
        .flatten();
    Ok(Json(JobList {
        jobs: rows
            .into_iter()
            .map(JobRow::into_api)
            .collect::<Result<_, _>>()?,
        total,
        limit,
        offset,
        next_after,
    }))
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

async fn job_row(state: &AppState, id: Uuid) -> Result<JobRow, ApiError> {
    store_jobs::get_job(state.store.reader(), &id.to_string())
        .await?
        .ok_or_else(|| ApiError::not_found(format!("no job {id}")))
}

async fn detail(
    State(state): State<AppState>,
    JobRef(id): JobRef,
) -> Result<Json<JobDetail>, ApiError> {
    let row = job_row(&state, id).await?;
    let run_id = row.run_id.clone();
    let db = state.store.reader();
    let attempts = store_jobs::attempts(db, &run_id)
        .await?
        .into_iter()
        .map(|a| a.into_api())
        .collect::<Result<Vec<Attempt>, _>>()?;
    let checkpoints = store_checkpoints::of_job(db, &run_id)
        .await?
        .into_iter()
        .map(Checkpoint::from)
        .collect();
    let latest_metrics = store_jobs::latest_metrics(db, &run_id).await?;
    let goodput = goodput::of_run(db, &run_id).await?;
    Ok(Json(JobDetail {
        job: row.into_api()?,
        attempts,
        checkpoints,
        latest_metrics,
        goodput,
    }))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct EventsQuery {
    after: Option<i64>,
    limit: Option<i64>,
}

async fn events(
    State(state): State<AppState>,
    JobRef(id): JobRef,
    QueryParams(q): QueryParams<EventsQuery>,
) -> Result<Json<Vec<Event>>, ApiError> {
    let row = job_row(&state, id).await?;
    let limit = q.limit.unwrap_or(500).clamp(1, 5000);
    let mut events: Vec<Event> =
        store_jobs::job_events(state.store.reader(), &row.id, q.after.unwrap_or(0), limit)
            .await?
            .into_iter()
            .map(|e| e.into_api())
            .collect::<Result<_, _>>()?;
    if row.run_id != row.id {
        // A linked job's timeline includes the run it shares.
        let run: Vec<Event> = store_jobs::job_events(
            state.store.reader(),
            &row.run_id,
            q.after.unwrap_or(0),
            limit,
        )
        .await?
        .into_iter()
        .map(|e| e.into_api())
        .collect::<Result<_, _>>()?;
        events.extend(run);
        events.sort_by_key(|e| e.id);
        events.truncate(limit as usize);
    }
    Ok(Json(events))
}

async fn checkpoints(
    State(state): State<AppState>,
    JobRef(id): JobRef,
) -> Result<Json<Vec<Checkpoint>>, ApiError> {
    let row = job_row(&state, id).await?;
    Ok(Json(
        store_checkpoints::of_job(state.store.reader(), &row.run_id)
            .await?
            .into_iter()
            .map(Checkpoint::from)
            .collect(),
    ))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct MetricsQuery {
    names: Option<String>,
    max_points: Option<i64>,
}

async fn job_metrics(
    State(state): State<AppState>,
    JobRef(id): JobRef,
    QueryParams(q): QueryParams<MetricsQuery>,
) -> Result<Json<JobMetrics>, ApiError> {
    let row = job_row(&state, id).await?;
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
    let series = metrics::downsampled(
        state.store.reader(),
        &row.run_id,
        names.as_deref(),
        max_points,
    )
    .await?;
    Ok(Json(JobMetrics { job_id: id, series }))
}

async fn cancel(
    State(state): State<AppState>,
    JobRef(id): JobRef,
    IdempotencyKey(key): IdempotencyKey,
) -> Result<Json<Job>, ApiError> {
    let key = remembered(key, "POST /jobs/{id}/cancel", BodyDigest(id.to_string()));
    Ok(Json(state.scheduler.cancel(id, key).await?))
}

async fn requeue(
    State(state): State<AppState>,
    JobRef(id): JobRef,
    IdempotencyKey(key): IdempotencyKey,
) -> Result<Json<Job>, ApiError> {
    let key = remembered(key, "POST /jobs/{id}/requeue", BodyDigest(id.to_string()));
    Ok(Json(state.scheduler.requeue(id, key).await?))
}

async fn patch(
    State(state): State<AppState>,
    JobRef(id): JobRef,
    JsonBody(req, _): JsonBody<PatchJobRequest>,
) -> Result<Json<Job>, ApiError> {
    let Some(priority) = req.priority else {
        return Err(ApiError::bad_request(
            "empty_patch",
            "nothing to change: give `priority`",
        ));
    };
    Ok(Json(state.scheduler.set_priority(id, priority).await?))
}
