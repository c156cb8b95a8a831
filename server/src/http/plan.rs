//! `GET /plan`: the queue in order, projected onto the pods, against the grant's deadline.

use axum::extract::State;
use axum::routing::get;
use axum::{Json, Router};
use podq_api::Plan;

use super::error::ApiError;
use crate::AppState;

pub fn routes() -> Router<AppState> {
    Router::new().route("/plan", get(plan))
}

async fn plan(State(state): State<AppState>) -> Result<Json<Plan>, ApiError> {
    Ok(Json(state.scheduler.plan().await?))
}
