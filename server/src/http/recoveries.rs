//! `GET /recoveries`: a record per interruption of a run, with its phases, and their summary.

use std::fmt::Write;

use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::Response;
use podq_api::RecoveriesReport;
use serde::Deserialize;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::error::ApiError;
use super::extract::{JobRef, QueryParams};
use super::negotiate::{json_or_table, Table};
use crate::scheduler::reads::recoveries::MAX_RECOVERIES;
use crate::AppState;

pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(recoveries))
}

#[derive(Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
struct Query {
    /// Only this job's recoveries: its uuid, or an experiment name (its newest job).
    #[param(min_length = 1)]
    job: Option<String>,
    /// At most this many records, newest first (default 100).
    #[param(minimum = 1, maximum = 1000)]
    limit: Option<i64>,
}

#[utoipa::path(
    get,
    path = "/recoveries",
    tag = "plan",
    summary = "Each interruption of a run and how long its recovery took, by phase",
    description = "One record per attempt that ended `preempted`, `lost`, `evicted` or `suspended` and whose run trained again: from when podq noticed the interruption to the next attempt's first step. `stopping_s`, `waiting_s`, `setup_s`, `startup_s` and `restore_s` sum to `total_s`; `creating_s` is the part of `waiting_s` while the pod it resumed on was being made or recreated, `compile_s` the part of `startup_s` the trainer reported compiling. `summary` gives p50 and p95 of `total_s` (and each phase's median) per slice type, zone and cause over the newest 10,000 records. JSON when `Accept` names `application/json`; otherwise a plain-text table.",
    params(Query),
    responses(
        (status = 200, description = "The records and their summary", content((RecoveriesReport = "application/json"), (String = "text/plain"))),
        (status = 400, description = "`invalid_limit`, or a malformed query", body = podq_api::ErrorBody),
        (status = 404, description = "`not_found`: `job` names no job or experiment (with did-you-mean)", body = podq_api::ErrorBody),
    ),
)]
async fn recoveries(
    State(state): State<AppState>,
    headers: HeaderMap,
    QueryParams(q): QueryParams<Query>,
) -> Result<Response, ApiError> {
    let limit = q.limit.unwrap_or(100);
    if !(1..=MAX_RECOVERIES).contains(&limit) {
        return Err(ApiError::bad_request(
            "invalid_limit",
            format!("limit must be 1 to {MAX_RECOVERIES}, not {limit}"),
        ));
    }
    let job = match q.job.as_deref() {
        Some("") => {
            return Err(ApiError::bad_request(
                "invalid_query",
                "`job` is empty: name one, or leave it out",
            ))
        }
        Some(job) => Some(JobRef::resolve(&state, job).await?),
        None => None,
    };
    Ok(json_or_table(
        &headers,
        &state.scheduler.recoveries(job, limit).await?,
    ))
}

impl Table for RecoveriesReport {
    fn table(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "{:<12} {:<24} {:<10} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8}",
            "type",
            "zone",
            "cause",
            "count",
            "p50 s",
            "p95 s",
            "stop",
            "wait",
            "setup",
            "start",
            "restore"
        );
        for s in &self.summary {
            let p = &s.phases_p50;
            let _ = writeln!(
                out,
                "{:<12} {:<24} {:<10} {:>8} {:>8.1} {:>8.1} {:>8.1} {:>8.1} {:>8.1} {:>8.1} {:>8.1}",
                s.accelerator,
                s.zone.as_deref().unwrap_or("-"),
                s.cause,
                s.count,
                s.p50_s,
                s.p95_s,
                p.stopping_s,
                p.waiting_s,
                p.setup_s,
                p.startup_s,
                p.restore_s
            );
        }
        let _ = writeln!(out);
        for r in &self.recoveries {
            let _ = writeln!(
                out,
                "{} attempt {} {} on {} -> {}: {:.1} s (stop {:.1}, wait {:.1} of which creating {:.1}, setup {:.1}, startup {:.1} of which compile {:.1}, restore {:.1}), {} steps lost",
                r.job_id,
                r.attempt,
                r.cause,
                r.pod,
                r.resumed_on,
                r.total_s,
                r.phases.stopping_s,
                r.phases.waiting_s,
                r.phases.creating_s,
                r.phases.setup_s,
                r.phases.startup_s,
                r.phases.compile_s,
                r.phases.restore_s,
                r.lost_steps.map_or("?".to_owned(), |s| s.to_string()),
            );
        }
        out
    }
}
