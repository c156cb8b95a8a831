//! `GET /pod-time`: where the grant's, each pod's and each group's pod time went.

use std::fmt::Write;

use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::Response;
use podq_api::{PodTime, PodTimeReport};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::error::ApiError;
use super::negotiate::{json_or_table, Table};
use crate::AppState;

pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(pod_time))
}

#[utoipa::path(
    get,
    path = "/pod-time",
    tag = "plan",
    summary = "Where the pod time went, by cause",
    description = "The grant's, each pod's and each group's pod time split into provisioning, setup, startup, restore, productive, save, wasted, stopping and idle seconds, up to now. JSON when the request's `Accept` names `application/json`; otherwise a plain-text table in hours.",
    responses((
        status = 200,
        description = "The split",
        content((PodTimeReport = "application/json"), (String = "text/plain")),
    )),
)]
async fn pod_time(State(state): State<AppState>, headers: HeaderMap) -> Result<Response, ApiError> {
    Ok(json_or_table(&headers, &state.scheduler.pod_time().await?))
}

impl Table for PodTimeReport {
    fn table(&self) -> String {
        let mut out = String::new();
        let causes = PodTime::default().causes();
        let _ = write!(out, "{:<34}", "pod-hours");
        for (name, _) in causes {
            let _ = write!(out, " {name:>12}");
        }
        let _ = writeln!(out, " {:>12} {:>8}", "total", "goodput");
        let mut row = |label: &str, time: &PodTime| {
            let _ = write!(out, "{label:<34}");
            for (_, seconds) in time.causes() {
                let _ = write!(out, " {:>12.2}", seconds / 3600.0);
            }
            let goodput = if time.total_s > 0.0 {
                format!("{:.0}%", 100.0 * time.productive_s / time.total_s)
            } else {
                "-".into()
            };
            let _ = writeln!(out, " {:>12.2} {goodput:>8}", time.total_s / 3600.0);
        };
        row("grant", &self.grant);
        for (pod, time) in &self.pods {
            row(&format!("pod {pod}"), time);
        }
        for (group, time) in &self.groups {
            row(&format!("group {group}"), time);
        }
        let saved = &self.saved_by_stopping;
        let _ = writeln!(
            out,
            "saved by stopping: {:.2} pod-hours over {} stopped run{}",
            saved.pod_hours,
            saved.runs,
            if saved.runs == 1 { "" } else { "s" }
        );
        out
    }
}
