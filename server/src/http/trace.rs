//! Every matched request: one span (method, the route as declared, the job, lease or pod it
//! names) that the handler's own logs nest in, one log line with status and latency, and the
//! request-duration histogram of `/metrics`. Headers are never recorded, so a bearer token
//! cannot reach a log.

use std::time::Instant;

use axum::extract::{MatchedPath, Request, State};
use axum::middleware::Next;
use axum::response::Response;
use tracing::{field, Instrument, Span};

use crate::telemetry::RouteLabels;
use crate::AppState;

pub async fn observe(State(state): State<AppState>, request: Request, next: Next) -> Response {
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map_or_else(|| "unmatched".to_owned(), |p| p.as_str().to_owned());
    let method = request.method().clone();
    let span = span_for(&request, &route);
    let started = Instant::now();
    let response = next.run(request).instrument(span.clone()).await;
    let latency = started.elapsed();
    let status = response.status().as_u16();
    let latency_ms = (latency.as_secs_f64() * 1000.0 * 10.0).round() / 10.0;
    // The worker protocol's successes are frequent (heartbeats, metrics): DEBUG.
    let worker_call = route.contains("/leases/") || route.contains("/pods/{name}/");
    match status {
        500.. => tracing::error!(parent: &span, status, latency_ms, "answered"),
        400.. => tracing::warn!(parent: &span, status, latency_ms, "answered"),
        _ if worker_call => tracing::debug!(parent: &span, status, latency_ms, "answered"),
        _ => tracing::info!(parent: &span, status, latency_ms, "answered"),
    }
    state
        .scheduler
        .telemetry()
        .requests
        .get_or_create(&RouteLabels {
            method: method.to_string(),
            route,
            status: status.to_string(),
        })
        .observe(latency.as_secs_f64());
    response
}

fn span_for(request: &Request, route: &str) -> Span {
    let span = tracing::info_span!(
        "request",
        method = %request.method(),
        route = %route,
        job = field::Empty,
        lease = field::Empty,
        pod = field::Empty,
    );
    let mut segments = request.uri().path().split('/');
    while let Some(segment) = segments.next() {
        let name = match segment {
            "jobs" => "job",
            "leases" => "lease",
            "pods" => "pod",
            _ => continue,
        };
        if let Some(value) = segments.next().filter(|v| !v.is_empty()) {
            span.record(name, value);
        }
    }
    span
}
