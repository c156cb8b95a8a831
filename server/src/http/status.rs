//! `GET /status` (a JSON summary, or a table for curl) and the pods.

use std::fmt::Write;

use axum::extract::{Path, State};
use axum::http::{header, HeaderMap};
use axum::response::{IntoResponse, Response};
use axum::Json;
use podq_api::{ErrorBody, JobState, Pod, Status};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::error::ApiError;
use super::negotiate::{json_or_table, wants_json, Table};
use crate::AppState;

pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(status))
        .routes(routes!(pods))
        .routes(routes!(pod))
}

#[utoipa::path(
    get,
    path = "/status",
    tag = "status",
    summary = "Jobs per state, what runs where, the pods, the queue and goodput",
    description = "JSON when the request's `Accept` names `application/json`; otherwise (curl's `*/*`) a plain-text table.",
    responses((
        status = 200,
        description = "The summary",
        content((Status = "application/json"), (String = "text/plain")),
    )),
)]
async fn status(State(state): State<AppState>, headers: HeaderMap) -> Result<Response, ApiError> {
    if wants_json(&headers) {
        let json = state.scheduler.status_json().await?;
        return Ok(([(header::CONTENT_TYPE, "application/json")], json).into_response());
    }
    Ok(json_or_table(&headers, &state.scheduler.status().await?))
}

impl Table for Status {
    fn table(&self) -> String {
        render_table(self)
    }
}

fn render_table(s: &Status) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "podq status at {}",
        s.now.format("%Y-%m-%d %H:%M:%S UTC")
    );
    let counts: Vec<String> = JobState::ALL
        .iter()
        .map(|state| format!("{} {}", state, s.jobs.get(state).copied().unwrap_or(0)))
        .collect();
    let _ = writeln!(out, "jobs: {}", counts.join("  "));
    if let Some(g) = &s.grant {
        let _ = writeln!(
            out,
            "grant ends {}: {} of {} runs, {} of {} groups fit (GET /api/v1/plan)",
            g.end.format("%Y-%m-%d"),
            g.runs_fit,
            g.runs,
            g.groups_fit,
            g.groups
        );
    }
    let _ = writeln!(out);
    let _ = writeln!(
        out,
        "{:<22} {:<9} {:<12} {:>7} {:>17} {:>10}",
        "RUNNING", "STATE", "POD", "ATTEMPT", "STEP", "STEPS/S"
    );
    if s.running.is_empty() {
        let _ = writeln!(out, "  (nothing on a pod)");
    }
    for r in &s.running {
        let step = match (r.step, r.total_steps) {
            (Some(step), Some(total)) if total > 0 => {
                format!(
                    "{step}/{total} {:>3.0}%",
                    100.0 * step as f64 / total as f64
                )
            }
            (Some(step), _) => step.to_string(),
            _ => "-".into(),
        };
        let rate = r.steps_per_s.map_or("-".into(), |r| format!("{r:.2}"));
        let _ = writeln!(
            out,
            "{:<22} {:<9} {:<12} {:>7} {:>17} {:>10}",
            r.experiment,
            r.state,
            r.pod.as_deref().unwrap_or("-"),
            r.attempt,
            step,
            rate
        );
    }
    let _ = writeln!(out);
    let _ = writeln!(
        out,
        "{:<22} {:<9} {:>5} {:<28} LAST SEEN",
        "POD", "TYPE", "HOSTS", "STATE"
    );
    if s.pods.is_empty() {
        let _ = writeln!(out, "  (no worker has registered)");
    }
    for p in &s.pods {
        let ago = (s.now - p.last_seen_at).num_seconds().max(0);
        let mut pod_state = format!("{}/{}", p.state, p.health);
        if let Some(recovery) = &p.recovery {
            pod_state.push_str(&format!(" ({recovery})"));
        }
        let _ = writeln!(
            out,
            "{:<22} {:<9} {:>5} {:<28} {}s ago",
            p.name, p.accelerator, p.hosts, pod_state, ago
        );
    }
    let _ = writeln!(out);
    let runs = s.jobs.get(&JobState::Queued).copied().unwrap_or(0);
    let eta = s
        .queue_eta
        .map(|t| {
            format!(
                ", drains about {} on one pod",
                t.format("%Y-%m-%d %H:%M UTC")
            )
        })
        .unwrap_or_default();
    let _ = writeln!(
        out,
        "queue: {runs} queued, {:.0} pod-hours left{eta}",
        s.queue_hours
    );
    let g = &s.goodput;
    if let Some(ratio) = g.ratio {
        let _ = writeln!(
            out,
            "goodput: {:.0}% of pod time kept ({:.2} h kept, {:.2} h lost to interruptions, {:.2} h overhead)",
            100.0 * ratio,
            g.kept_s / 3600.0,
            g.lost_s / 3600.0,
            g.overhead_s / 3600.0
        );
    }
    out
}

#[utoipa::path(
    get,
    path = "/pods",
    tag = "status",
    summary = "Pods and what they hold",
    responses((status = 200, description = "Every pod a worker has registered", body = Vec<Pod>)),
)]
async fn pods(State(state): State<AppState>) -> Result<Json<Vec<Pod>>, ApiError> {
    Ok(Json(state.scheduler.pods().await?))
}

#[utoipa::path(
    get,
    path = "/pods/{name}",
    tag = "status",
    summary = "One pod",
    params(("name" = String, Path, description = "The pod")),
    responses(
        (status = 200, description = "The pod", body = Pod),
        (status = 404, description = "`not_found`: no such pod", body = ErrorBody),
    ),
)]
async fn pod(
    State(state): State<AppState>,
    Path(name): Path<String>,
) -> Result<Json<Pod>, ApiError> {
    state
        .scheduler
        .pods()
        .await?
        .into_iter()
        .find(|p| p.name == name)
        .map(Json)
        .ok_or_else(|| ApiError::not_found(format!("no pod `{name}`")))
}
