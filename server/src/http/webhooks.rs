//! The webhooks and their deliveries, for a person checking that notices go out.

use axum::extract::State;
use axum::routing::get;
use axum::{Json, Router};
use podq_api::{Delivery, Webhook};
use serde::Deserialize;

use super::error::ApiError;
use super::extract::QueryParams;
use crate::store::{ms_to_datetime, webhooks as outbox, StoreError};
use crate::webhooks::redacted;
use crate::AppState;

pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/webhooks", get(list))
        .route("/webhooks/deliveries", get(deliveries))
}

async fn list(State(state): State<AppState>) -> Result<Json<Vec<Webhook>>, ApiError> {
    let rows = outbox::list(state.store.reader()).await?;
    let hooks = rows
        .into_iter()
        .map(|row| {
            Ok(Webhook {
                id: row.id,
                url: redacted(&row.url),
                format: row.format,
                events: serde_json::from_str(&row.kinds_json)
                    .map_err(|e| StoreError::Corrupt(format!("webhook kinds: {e}")))?,
                enabled: row.enabled,
                pending: row.pending,
                delivered: row.delivered,
                oldest_pending_attempts: row.head_attempts,
                last_error: row.last_error,
            })
        })
        .collect::<Result<_, StoreError>>()?;
    Ok(Json(hooks))
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct DeliveriesQuery {
    webhook: Option<i64>,
    /// Only notices not delivered yet.
    #[serde(default)]
    pending: bool,
    limit: Option<i64>,
}

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
    let rows = outbox::deliveries(state.store.reader(), q.webhook, q.pending, limit).await?;
    Ok(Json(
        rows.into_iter()
            .map(|r| Delivery {
                id: r.id,
                webhook_id: r.webhook_id,
                event_id: r.event_id,
                kind: r.kind,
                attempts: r.attempts,
                next_attempt_at: ms_to_datetime(r.next_attempt_at),
                delivered_at: r.delivered_at.map(ms_to_datetime),
                last_error: r.last_error,
            })
            .collect(),
    ))
}
