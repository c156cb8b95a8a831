//! The audit trail: who changed what, newest first.

use axum::extract::State;
use axum::Json;
use podq_api::AuditPage;
use serde::Deserialize;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::error::ApiError;
use super::extract::{JobRef, QueryParams};
use crate::scheduler::reads::audit::AuditQuery;
use crate::team::Acting;
use crate::AppState;

pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(audit))
}

#[derive(Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
struct Query {
    /// Only changes made by this person (or `worker:POD`, `schedule:ID`, `podq`).
    #[param(min_length = 1)]
    person: Option<String>,
    /// Only changes to this job: its uuid, or an experiment name (its newest job).
    #[param(min_length = 1)]
    job: Option<String>,
    /// Only changes at or after this time (RFC 3339).
    since: Option<chrono::DateTime<chrono::Utc>>,
    /// The previous page's `next_before`.
    before: Option<i64>,
    /// Page size (default 100).
    #[param(minimum = 1, maximum = 1000)]
    limit: Option<i64>,
}

#[utoipa::path(
    get,
    path = "/audit",
    tag = "team",
    summary = "Who changed what: every state change with its person, time, address and request id",
    description = "Newest first. `by` is a person's name, `worker:POD`, `schedule:ID` or `podq`; `token_holder` whose token made the change. `address` (the caller's IP) is shown to admins only.",
    params(Query),
    responses(
        (status = 200, description = "A page of the trail", body = AuditPage),
        (status = 400, description = "`invalid_limit`, or a malformed filter", body = podq_api::ErrorBody),
        (status = 404, description = "`not_found`: `job` names no job or experiment (with did-you-mean)", body = podq_api::ErrorBody),
    ),
)]
async fn audit(
    State(state): State<AppState>,
    acting: Acting,
    QueryParams(q): QueryParams<Query>,
) -> Result<Json<AuditPage>, ApiError> {
    let limit = q.limit.unwrap_or(100);
    if !(1..=1000).contains(&limit) {
        return Err(ApiError::bad_request(
            "invalid_limit",
            format!("limit must be 1 to 1000, not {limit}"),
        ));
    }
    for (name, value) in [("person", &q.person), ("job", &q.job)] {
        if value.as_deref().is_some_and(str::is_empty) {
            return Err(ApiError::bad_request(
                "invalid_query",
                format!("`{name}` is empty: name one, or leave it out"),
            ));
        }
    }
    let job = match q.job {
        Some(job) => Some(JobRef::resolve(&state, &job).await?),
        None => None,
    };
    let query = AuditQuery {
        by: q.person,
        job,
        since: q.since,
        before: q.before,
        limit,
    };
    Ok(Json(state.scheduler.audit(query, &acting).await?))
}
