//! The webhooks and their deliveries, for a person checking that notices go out.

use axum::extract::State;
use axum::Json;
use podq_api::{Delivery, Webhook};
use serde::Deserialize;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::error::ApiError;
use super::extract::QueryParams;
use crate::webhooks::redacted;
use crate::AppState;

pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(list))
        .routes(routes!(deliveries))
}

#[utoipa::path(
    get,
    path = "/webhooks",
    tag = "webhooks",
    summary = "The configured webhooks, with what is pending and delivered",
    responses((status = 200, description = "Every webhook", body = Vec<Webhook>)),
)]
async fn list(State(state): State<AppState>) -> Result<Json<Vec<Webhook>>, ApiError> {
    Ok(Json(state.scheduler.webhooks(redacted).await?))
}

#[derive(Deserialize, Default, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
struct DeliveriesQuery {
    /// Only this webhook's deliveries.
    webhook: Option<i64>,
    /// Only notices not delivered yet.
    #[serde(default)]
    pending: bool,
    /// At most this many, newest first (default 100).
    #[param(minimum = 1, maximum = 1000)]
    limit: Option<i64>,
}

#[utoipa::path(
    get,
    path = "/webhooks/deliveries",
    tag = "webhooks",
    summary = "Deliveries of notices to webhooks",
    params(DeliveriesQuery),
    responses((status = 200, description = "Deliveries", body = Vec<Delivery>)),
)]
async fn deliveries(
    State(state): State<AppState>,
    QueryParams(q): QueryParams<DeliveriesQuery>,
) -> Result<Json<Vec<Delivery>>, ApiError> {
    let limit = q.limit.unwrap_or(100);
    if !(1..=1000).contains(&limit) {
        return Err(ApiError::bad_request(
            "invalid_query",
            "limit must be between 1 and 1000",
        ));
    }
    Ok(Json(
        state
            .scheduler
            .webhook_deliveries(q.webhook, q.pending, limit)
            .await?,
    ))
}
