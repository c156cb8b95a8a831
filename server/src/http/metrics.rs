//! `GET /metrics` in Prometheus' text format.

use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::error::ApiError;
use crate::AppState;

pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(metrics))
}

#[utoipa::path(
    get,
    path = "/metrics",
    tag = "operations",
    summary = "Prometheus metrics",
    description = "Prometheus' text exposition format 0.0.4. Needs a reader's token when reads do. With `--metrics-listen` it is served on that address instead of this one.",
    responses((status = 200, description = "The metrics", body = String, content_type = "text/plain")),
)]
async fn metrics(State(state): State<AppState>) -> Result<Response, ApiError> {
    let text = state.scheduler.metrics_text().await?;
    Ok((
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        text,
    )
        .into_response())
}
