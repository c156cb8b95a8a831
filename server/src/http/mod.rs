//! The HTTP API: routing, authentication and the handlers' shared pieces.

mod audit;
mod auth;
mod cross_site;
mod dashboard;
pub mod error;
mod experiments;
mod extract;
mod jobs;
mod json_errors;
mod logs;
mod metrics;
mod negotiate;
mod openapi;
mod plan;
mod pod_time;
mod pools;
mod recoveries;
mod results;
mod schedules;
mod standby;
mod state;
mod status;
mod stream;
mod trace;
mod users;
mod webhooks;
mod worker;

use std::time::Duration;

use axum::extract::DefaultBodyLimit;
use axum::http::StatusCode;
use axum::routing::get;
use axum::{Extension, Router};
use utoipa::OpenApi;
use utoipa_axum::router::OpenApiRouter;

pub use state::AppState;

/// Largest JSON body accepted (a metrics batch of a few thousand points fits).
pub const MAX_BODY_BYTES: usize = 4 * 1024 * 1024;
/// How long a request's body may take to arrive once its headers have.
pub const BODY_TIMEOUT: Duration = Duration::from_secs(10);

/// Only `/metrics`, for a separate listen address (`--metrics-listen`), behind the same
/// read check as the API's.
pub fn metrics_router(state: AppState) -> Router {
    let routes = metrics::routes().route_layer(axum::middleware::from_fn_with_state(
        state.clone(),
        auth::require_read,
    ));
    Router::from(routes)
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            cross_site::refuse_cross_site,
        ))
        .with_state(state)
}

pub fn router(state: AppState) -> Router {
    let (documented, document) = documented(&state).split_for_parts();
    documented
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(readyz))
        .merge(dashboard::routes())
        .route_layer(axum::middleware::from_fn_with_state(
            state.clone(),
            trace::observe,
        ))
        .fallback(not_found)
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            standby::refuse_unless_active,
        ))
        .layer(Extension(openapi::Document::new(document, &state.catalog)))
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        // A client that announces a body and does not send it must not hold a task open.
        .layer(tower_http::timeout::RequestBodyTimeoutLayer::new(
            BODY_TIMEOUT,
        ))
        .layer(axum::middleware::from_fn(extract::refuse_declared_oversize))
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            cross_site::refuse_cross_site,
        ))
        .layer(axum::middleware::from_fn(json_errors::json_errors))
        .with_state(state)
}

/// Every route of the API and `/metrics`: the router and its OpenAPI document, both made from
/// the handlers' `#[utoipa::path]` declarations, so the two cannot drift apart.
fn documented(state: &AppState) -> OpenApiRouter<AppState> {
    macro_rules! layer {
        ($router:expr, $check:expr $(,)?) => {
            $router.route_layer(axum::middleware::from_fn_with_state(state.clone(), $check))
        };
    }
    // Each group's routes need a role (http/auth.rs); `/whoami` only names the caller.
    let submit = layer!(
        OpenApiRouter::new().merge(jobs::admin_routes()),
        auth::require_submitter
    );
    let admin = layer!(
        OpenApiRouter::new()
            .merge(schedules::admin_routes())
            .merge(plan::admin_routes())
            .merge(users::admin_routes()),
        auth::require_admin,
    );
    let worker = layer!(
        worker::routes().merge(pools::report_routes()),
        auth::require_worker
    );
    let reads = layer!(
        OpenApiRouter::new()
            .merge(experiments::routes())
            .merge(jobs::read_routes())
            .merge(logs::routes())
            .merge(schedules::read_routes())
            .merge(status::routes())
            .merge(stream::routes())
            .merge(webhooks::routes())
            .merge(plan::read_routes())
            .merge(pod_time::routes())
            .merge(recoveries::routes())
            .merge(pools::read_routes())
            .merge(results::routes())
            .merge(audit::routes())
            .merge(openapi::routes()),
        auth::require_read,
    );
    let api = OpenApiRouter::new()
        .merge(reads)
        .merge(layer!(users::open_routes(), auth::identify))
        .merge(submit)
        .merge(admin)
        .merge(worker);
    let router =
        OpenApiRouter::with_openapi(openapi::ApiDoc::openapi()).nest(podq_api::API_PREFIX, api);
    // With an address of its own, `/metrics` is served there alone.
    if state.config.metrics_listen.is_some() {
        return router;
    }
    router.merge(layer!(metrics::routes(), auth::require_read))
}

/// 200 when this server answers everything; 503 `standby` when another server sharing its
/// database is active; 503 `store_unavailable` when the database does not answer.
async fn readyz(
    axum::extract::State(state): axum::extract::State<AppState>,
) -> Result<&'static str, error::ApiError> {
    if state.scheduler.role() == crate::store::Role::Standby {
        return Err(error::ApiError::standby());
    }
    tokio::time::timeout(Duration::from_secs(2), state.scheduler.ping())
        .await
        .map_err(|_| {
            error::ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "store_unavailable",
                "the database did not answer within 2 s",
            )
        })??;
    Ok("ready\n")
}

async fn not_found(uri: axum::http::Uri) -> error::ApiError {
    error::ApiError::not_found(format!("no route {}", uri.path()))
}
