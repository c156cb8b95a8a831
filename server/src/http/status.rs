//! `GET /status` (a JSON summary, or a table for curl) and the pods.

use std::collections::BTreeMap;
use std::fmt::Write;

use axum::extract::{Path, State};
use axum::http::{header, HeaderMap};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use chrono::Utc;
use podq_api::{JobState, Pod, Preflight, RunningJob, Status};
use uuid::Uuid;

use super::error::ApiError;
use crate::store::{ms_to_datetime, now_ms};
use crate::AppState;

pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/status", get(status))
        .route("/pods", get(pods))
        .route("/pods/{name}", get(pod))
}

/// JSON only when the caller asks for it; `curl` sends `*/*` and gets the table.
fn wants_json(headers: &HeaderMap) -> bool {
    headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|accept| accept.contains("application/json"))
}

async fn status(State(state): State<AppState>, headers: HeaderMap) -> Result<Response, ApiError> {
    let summary = build_status(&state).await?;
    if wants_json(&headers) {
        return Ok(Json(summary).into_response());
    }
    Ok((
        [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
        render_table(&summary),
    )
        .into_response())
}

pub async fn build_status(state: &AppState) -> Result<Status, ApiError> {
    let db = state.store.reader();
    let mut jobs: BTreeMap<String, i64> = JobState::ALL
        .iter()
        .map(|s| (s.as_str().to_owned(), 0))
        .collect();
    let counts: Vec<(String, i64)> =
        sqlx::query_as("SELECT state, COUNT(*) FROM job_view GROUP BY state")
            .fetch_all(db)
            .await?;
    jobs.extend(counts);

    type ActiveRow = (
        String,
        String,
        String,
        i64,
        Option<i64>,
        Option<i64>,
        Option<i64>,
        Option<i64>,
        Option<i64>,
    );
    let active: Vec<ActiveRow> = sqlx::query_as(
        "SELECT j.id, j.experiment, j.state, j.attempts, j.last_step, j.total_steps, \
         a.first_step, a.first_step_at, a.end_step \
         FROM jobs j LEFT JOIN attempts a ON a.job_id = j.id AND a.attempt = j.attempts \
         WHERE j.state IN ('leased', 'running') AND j.same_as IS NULL ORDER BY j.seq",
    )
    .fetch_all(db)
    .await?;
    let live = state.leases.all();
    let now = now_ms();
    let running = active
        .into_iter()
        .map(
            |(
                id,
                experiment,
                job_state,
                attempt,
                last_step,
                total_steps,
                first_step,
                first_at,
                end_step,
            )| {
                let lease = live
                    .iter()
                    .find(|(_, l)| l.job_id == id)
                    .map(|(_, l)| l.clone());
                let step = lease
                    .as_ref()
                    .and_then(|l| l.step)
                    .or(end_step)
                    .or(last_step);
                let steps_per_s = match (first_step, first_at, end_step) {
                    (Some(first), Some(at), Some(end)) if now > at && end > first => {
                        Some((end - first) as f64 / ((now - at) as f64 / 1000.0))
                    }
                    _ => None,
                };
                RunningJob {
                    job_id: Uuid::parse_str(&id).unwrap_or_default(),
                    experiment,
                    state: job_state,
                    pod: lease.map(|l| l.pod),
                    attempt,
                    step,
                    total_steps,
                    steps_per_s,
                }
            },
        )
        .collect();
    let queue: Vec<(f64, Option<i64>, Option<i64>)> = sqlx::query_as(
        "SELECT est_hours, last_step, total_steps FROM jobs \
         WHERE state IN ('queued', 'leased', 'running') AND same_as IS NULL",
    )
    .fetch_all(db)
    .await?;
    let queue_hours: f64 = queue
        .iter()
        .map(|(hours, step, total)| match (step, total) {
            (Some(step), Some(total)) if *total > 0 => {
                hours * (1.0 - (*step as f64 / *total as f64).min(1.0))
            }
            _ => *hours,
        })
        .sum();
    let queue_eta = (queue_hours > 0.0)
        .then(|| Utc::now() + chrono::Duration::seconds((queue_hours * 3600.0) as i64));
    let mut goodput = podq_api::Goodput::default();
    for run in crate::store::goodput::by_run(db, None).await?.values() {
        goodput.add(run);
    }
    Ok(Status {
        goodput,
        now: Utc::now(),
        jobs,
        running,
        pods: list_pods(state).await?,
        queue_hours,
        queue_eta,
    })
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
        .map(|state| {
            format!(
                "{} {}",
                state,
                s.jobs.get(state.as_str()).copied().unwrap_or(0)
            )
        })
        .collect();
    let _ = writeln!(out, "jobs: {}", counts.join("  "));
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
    let runs = s.jobs.get("queued").copied().unwrap_or(0);
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

type PodRow = (
    String,
    String,
    i64,
    String,
    String,
    Option<String>,
    Option<String>,
    i64,
);

async fn list_pods(state: &AppState) -> Result<Vec<Pod>, ApiError> {
    let rows: Vec<PodRow> = sqlx::query_as(
        "SELECT name, accelerator, hosts, state, health, preflight_json, recovery, last_seen_at FROM pods ORDER BY name",
    )
    .fetch_all(state.store.reader())
    .await?;
    let live = state.leases.all();
    Ok(rows
        .into_iter()
        .map(
            |(name, accelerator, hosts, pod_state, health, preflight, recovery, seen)| {
                let lease = live.iter().find(|(_, l)| l.pod == name);
                Pod {
                    accelerator,
                    hosts: u32::try_from(hosts).unwrap_or(0),
                    state: pod_state,
                    health,
                    preflight: preflight.and_then(|p| serde_json::from_str::<Preflight>(&p).ok()),
                    recovery,
                    last_seen_at: ms_to_datetime(seen),
                    current_job: lease.and_then(|(_, l)| Uuid::parse_str(&l.job_id).ok()),
                    current_lease: lease.map(|(id, _)| *id),
                    name,
                }
            },
        )
        .collect())
}

async fn pods(State(state): State<AppState>) -> Result<Json<Vec<Pod>>, ApiError> {
    Ok(Json(list_pods(&state).await?))
}

async fn pod(
    State(state): State<AppState>,
    Path(name): Path<String>,
) -> Result<Json<Pod>, ApiError> {
    list_pods(&state)
        .await?
        .into_iter()
        .find(|p| p.name == name)
        .map(Json)
        .ok_or_else(|| ApiError::not_found(format!("no pod `{name}`")))
}
