//! The grant and the plan: `GET|PUT /grant`, `GET /plan` (a table for curl, JSON on
//! request) and `POST /plan/apply`.

use std::fmt::Write;

use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::Response;
use axum::Json;
use chrono::{DateTime, Utc};
use podq_api::{ErrorBody, Grant, GrantRequest, Plan, PlanApplied, PlannedRun};
use serde::Deserialize;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::error::ApiError;
use super::extract::{JsonBody, QueryParams};
use super::negotiate::{json_or_table, Table};
use crate::team::Acting;
use crate::AppState;

pub fn read_routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(plan))
        .routes(routes!(grant))
}

pub fn admin_routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(apply))
        .routes(routes!(set_grant))
}

#[derive(Deserialize, Default, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
struct PlanQuery {
    /// Plan against this time (RFC 3339, e.g. `2026-12-23T00:00:00Z`) instead of the grant's end.
    #[param(format = DateTime)]
    deadline: Option<String>,
}

impl PlanQuery {
    fn deadline(&self) -> Result<Option<DateTime<Utc>>, ApiError> {
        self.deadline
            .as_deref()
            .map(|d| {
                podq_api::time::parse_rfc3339(d)
                    .map_err(|e| ApiError::bad_request("invalid_query", format!("deadline {e}")))
            })
            .transpose()
    }
}

#[utoipa::path(
    get,
    path = "/plan",
    tag = "plan",
    summary = "The queue in run order with projected start and end, against the deadline",
    description = "Today's order and the recommended one (the most whole groups before the deadline). JSON when the request's `Accept` names `application/json`; otherwise (curl's `*/*`) a plain-text table.",
    params(PlanQuery),
    responses(
        (
            status = 200,
            description = "The plan",
            content((Plan = "application/json"), (String = "text/plain")),
        ),
        (status = 422, description = "`deadline_passed`: the deadline asked for is not in the future", body = ErrorBody),
    ),
)]
async fn plan(
    State(state): State<AppState>,
    headers: HeaderMap,
    QueryParams(q): QueryParams<PlanQuery>,
) -> Result<Response, ApiError> {
    let plan = state.scheduler.plan(q.deadline()?).await?;
    Ok(json_or_table(&headers, &plan))
}

#[utoipa::path(
    post,
    path = "/plan/apply",
    tag = "plan",
    summary = "Apply the recommended order",
    description = "Submits the experiments the recommended order includes and sets priorities to follow it.",
    params(PlanQuery),
    responses(
        (status = 200, description = "What applying did, and the plan after it", body = PlanApplied),
        (status = 422, description = "`deadline_passed`: the deadline asked for is not in the future", body = ErrorBody),
    ),
    security(("admin_token" = ["admin"])),
)]
async fn apply(
    State(state): State<AppState>,
    acting: Acting,
    QueryParams(q): QueryParams<PlanQuery>,
) -> Result<Json<PlanApplied>, ApiError> {
    Ok(Json(
        state
            .scheduler
            .apply_plan(&acting.actor, q.deadline()?)
            .await?,
    ))
}

#[utoipa::path(
    get,
    path = "/grant",
    tag = "plan",
    summary = "The compute grant the plan measures against",
    responses((status = 200, description = "The grant; null when none is set", body = Option<Grant>)),
)]
async fn grant(State(state): State<AppState>) -> Result<Json<Option<Grant>>, ApiError> {
    Ok(Json(state.scheduler.grant().await?))
}

#[utoipa::path(
    put,
    path = "/grant",
    tag = "plan",
    summary = "Set the compute grant",
    request_body = GrantRequest,
    description = "`end` must be in the future and after `start`; each budget names an accelerator a pod or an experiment uses.",
    responses(
        (status = 200, description = "The grant as stored", body = Grant),
        (status = 422, description = "`deadline_passed`, `invalid_grant` (it ends before it starts), `unknown_accelerator` (with the known ones)", body = ErrorBody),
    ),
    security(("admin_token" = ["admin"])),
)]
async fn set_grant(
    State(state): State<AppState>,
    acting: Acting,
    JsonBody(req, _): JsonBody<GrantRequest>,
) -> Result<Json<Grant>, ApiError> {
    Ok(Json(state.scheduler.set_grant(&acting.actor, req).await?))
}

fn fits(f: Option<bool>) -> &'static str {
    match f {
        Some(true) => "yes",
        Some(false) => "no",
        None => "-",
    }
}

fn of(fit: Option<usize>, total: usize) -> String {
    fit.map_or_else(|| format!("- of {total}"), |f| format!("{f} of {total}"))
}

fn day(t: Option<DateTime<Utc>>) -> String {
    t.map_or("-".into(), |t| t.format("%b %d %H:%M").to_string())
}

impl Table for Plan {
    fn table(&self) -> String {
        let mut out = String::new();
        let deadline = match (&self.deadline, &self.grant) {
            (Some(d), Some(g)) if *d == g.end => {
                format!("grant ends {}", d.format("%Y-%m-%d %H:%M UTC"))
            }
            (Some(d), _) => format!("deadline {}", d.format("%Y-%m-%d %H:%M UTC")),
            (None, _) => "no deadline: set one with PUT /api/v1/grant or ?deadline=".into(),
        };
        let _ = writeln!(
            out,
            "podq plan at {}: {deadline}",
            self.now.format("%Y-%m-%d %H:%M UTC")
        );
        let capacity = self
            .capacity_hours
            .map(|c| format!(", {c:.0} pod-hours of capacity"))
            .unwrap_or_default();
        let _ = writeln!(
            out,
            "{} pod(s){capacity}; {:.0} pod-hours to go, {:.0} of them work redone after \
             interruptions; estimates x{:.2} for setup and start-up",
            self.pods, self.total_hours, self.expected_waste_hours, self.overhead_factor
        );
        // With more than one accelerator type, each type's pods and hours are their own.
        if self.pools.len() > 1 {
            for pool in &self.pools {
                let budget = pool
                    .budget_hours_left
                    .map(|b| format!(", {b:.0} of its budget left"))
                    .unwrap_or_default();
                let capacity = pool
                    .capacity_hours
                    .map(|c| format!(", {c:.0} pod-hours of capacity"))
                    .unwrap_or_default();
                let _ = writeln!(
                    out,
                    "  {}: {} pod(s){capacity}{budget}; {} runs, {:.0} pod-hours to go",
                    pool.accelerator, pool.pods, pool.runs_to_go, pool.total_hours
                );
            }
        }
        let sources: Vec<String> = self
            .estimates
            .iter()
            .map(|(k, v)| format!("{v} {}", k.replace('_', " ")))
            .collect();
        let _ = writeln!(out, "estimates: {}", sources.join(", "));
        let _ = writeln!(out);
        let runs = self.current.runs.len();
        let groups = self.groups.len();
        let _ = writeln!(
            out,
            "{:<16} {:>14} {:>14}",
            "", "TODAY'S ORDER", "RECOMMENDED"
        );
        let _ = writeln!(
            out,
            "{:<16} {:>14} {:>14}",
            "runs that fit",
            of(self.current.runs_fit, runs),
            of(self.recommended.runs_fit, runs)
        );
        let _ = writeln!(
            out,
            "{:<16} {:>14} {:>14}",
            "whole groups",
            of(self.current.groups_fit, groups),
            of(self.recommended.groups_fit, groups)
        );
        let _ = writeln!(out);
        let _ = writeln!(
            out,
            "CHECKPOINT INTERVALS: the advised ones (Young/Daly) would save {:.1} pod-hours",
            self.pod_hours_saved_by_advice
        );
        let _ = writeln!(
            out,
            "{:<22} {:>12} {:>11} {:>12} {:>11}",
            "ASSUMING", "WASTE HOURS", "HOURS", "RUNS FIT", "GROUPS FIT"
        );
        for s in &self.scenarios {
            let _ = writeln!(
                out,
                "{:<22} {:>12.1} {:>11.0} {:>12} {:>11}",
                s.name.replace('_', " "),
                s.expected_waste_hours,
                s.total_hours,
                of(s.runs_fit, runs),
                of(s.groups_fit, groups)
            );
        }
        let _ = writeln!(out);
        let _ = writeln!(
            out,
            "{:<28} {:>4} {:>4}  {:<18} {:<18}",
            "GROUP", "RUNS", "DONE", "TODAY (ENDS)", "RECOMMENDED (ENDS)"
        );
        for g in &self.groups {
            let _ = writeln!(
                out,
                "{:<28} {:>4} {:>4}  {:<18} {:<18}",
                g.name,
                g.runs,
                g.runs_done,
                format!("{:<3} {}", fits(g.fits_current), day(g.end_current)),
                format!("{:<3} {}", fits(g.fits_recommended), day(g.end_recommended)),
            );
        }
        for g in &self.groups {
            if let Some(rungs) = &g.rungs {
                let _ = writeln!(out, "  {} rungs: {}", g.name, rungs.describe());
            }
        }
        let _ = writeln!(out);
        let _ = writeln!(
            out,
            "RECOMMENDED ORDER (POST /api/v1/plan/apply applies it)"
        );
        let _ = writeln!(
            out,
            "{:>3} {:<22} {:<28} {:<13} {:>6} {:<8} {:<12} {:<4} CHECKPOINT EVERY (ADVISED)",
            "#", "EXPERIMENT", "GROUP", "STATE", "HOURS", "ESTIMATE", "ENDS", "FITS"
        );
        for (i, r) in self.recommended.runs.iter().enumerate() {
            let _ = writeln!(out, "{:>3} {}", i + 1, row(r));
        }
        out
    }
}

fn row(r: &PlannedRun) -> String {
    let estimate = serde_json::to_value(r.estimate)
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_default();
    let also = if r.also_finishes.is_empty() {
        String::new()
    } else {
        format!(" (+ {})", r.also_finishes.join(", "))
    };
    let interval = r.checkpoint_advice.as_ref().map_or_else(String::new, |a| {
        let auto = if a.auto { ", auto" } else { "" };
        format!(
            "{} steps ({}{auto}, saves {:.1} h)",
            a.interval_steps_now, a.interval_steps_advised, a.pod_hours_saved
        )
    });
    format!(
        "{:<22} {:<28} {:<13} {:>6.1} {:<8} {:<12} {:<4} {interval}{also}",
        r.experiment,
        r.group,
        r.state,
        r.remaining_hours,
        estimate,
        day(Some(r.end)),
        fits(r.fits_deadline)
    )
}
