//! `GET /openapi.json`: the API described for tools (OpenAPI 3.1). Bodies are named by their
//! wire type in `podq-api`; keep it in step with the routers.

use axum::routing::get;
use axum::{Json, Router};
use serde_json::{json, Value};

use crate::AppState;

pub fn routes() -> Router<AppState> {
    Router::new().route("/openapi.json", get(|| async { Json(document()) }))
}

/// One documented operation.
struct Operation {
    method: &'static str,
    path: &'static str,
    summary: &'static str,
    /// The request body's wire type (`text/yaml` for a YAML document).
    body: Option<&'static str>,
    /// The answer's wire type; empty for no content.
    response: &'static str,
    /// `admin`, `worker` or `none`.
    auth: &'static str,
}

const fn op(
    method: &'static str,
    path: &'static str,
    summary: &'static str,
    body: Option<&'static str>,
    response: &'static str,
    auth: &'static str,
) -> Operation {
    Operation {
        method,
        path,
        summary,
        body,
        response,
        auth,
    }
}

const OPERATIONS: &[Operation] = &[
    op(
        "get",
        "/experiments",
        "The catalog, with findings per experiment",
        None,
        "ExperimentSummary[]",
        "none",
    ),
    op(
        "get",
        "/experiments/{name}",
        "One experiment with its resolved config",
        None,
        "ExperimentDetail",
        "none",
    ),
    op(
        "post",
        "/experiments/validate",
        "Dry-run a YAML experiment document (body: YAML text); stores nothing",
        Some("text/yaml"),
        "ValidateResponse",
        "none",
    ),
    op(
        "get",
        "/groups",
        "Groups with job counts per state",
        None,
        "GroupSummary[]",
        "none",
    ),
    op(
        "post",
        "/jobs",
        "Submit a group, a list of experiments or all (Idempotency-Key honoured)",
        Some("SubmitRequest"),
        "SubmitResponse",
        "admin",
    ),
    op(
        "get",
        "/jobs",
        "Jobs in submission order, filtered by state, group, experiment; paged by limit and after (the previous page's next_after), or offset",
        None,
        "JobList",
        "none",
    ),
    op(
        "get",
        "/jobs/{id}",
        "A job with attempts, checkpoints and latest metric values",
        None,
        "JobDetail",
        "none",
    ),
    op(
        "patch",
        "/jobs/{id}",
        "Change a job's priority",
        Some("PatchJobRequest"),
        "Job",
        "admin",
    ),
    op(
        "post",
        "/jobs/{id}/cancel",
        "Cancel a job; a running one is stopped on its pod",
        None,
        "Job",
        "admin",
    ),
    op(
        "post",
        "/jobs/{id}/requeue",
        "Requeue a failed, cancelled or held job",
        None,
        "Job",
        "admin",
    ),
    op(
        "get",
        "/jobs/{id}/events",
        "The job's timeline",
        None,
        "Event[]",
        "none",
    ),
    op(
        "get",
        "/jobs/{id}/checkpoints",
        "Checkpoints seen in the store",
        None,
        "Checkpoint[]",
        "none",
    ),
    op(
        "get",
        "/jobs/{id}/metrics",
        "Metric series, downsampled (names=a,b&max_points=N)",
        None,
        "JobMetrics",
        "none",
    ),
    op(
        "get",
        "/status",
        "Summary: JSON with Accept: application/json, else a text table",
        None,
        "Status",
        "none",
    ),
    op(
        "get",
        "/pods",
        "Pods and what they hold",
        None,
        "Pod[]",
        "none",
    ),
    op("get", "/pods/{name}", "One pod", None, "Pod", "none"),
    op(
        "post",
        "/pods/{name}/lease",
        "Worker: long-poll for a lease (204 when nothing is leasable)",
        Some("LeaseRequest"),
        "Lease",
        "worker",
    ),
    op(
        "post",
        "/pods/{name}/report",
        "Worker: pod state, health, preflight, recovery",
        Some("PodReport"),
        "",
        "worker",
    ),
    op(
        "post",
        "/leases/{id}/heartbeat",
        "Worker: extend the lease; answers cancel",
        Some("HeartbeatRequest"),
        "HeartbeatResponse",
        "worker",
    ),
    op(
        "post",
        "/leases/{id}/metrics",
        "Worker: a batch of metric points",
        Some("MetricsBatch"),
        "MetricsAck",
        "worker",
    ),
    op(
        "post",
        "/leases/{id}/checkpoints",
        "Worker: checkpoints found in the store",
        Some("CheckpointsBatch"),
        "",
        "worker",
    ),
    op(
        "post",
        "/leases/{id}/events",
        "Worker: observations for the job's timeline",
        Some("WorkerEvents"),
        "",
        "worker",
    ),
    op(
        "post",
        "/leases/{id}/finish",
        "Worker: end the attempt with its outcome",
        Some("FinishRequest"),
        "FinishResponse",
        "worker",
    ),
    op(
        "get",
        "/schedules",
        "Cron submissions",
        None,
        "Schedule[]",
        "none",
    ),
    op(
        "post",
        "/schedules",
        "Submit on a cron schedule (5-field cron, UTC)",
        Some("ScheduleRequest"),
        "Schedule",
        "admin",
    ),
    op(
        "delete",
        "/schedules/{id}",
        "Remove a schedule",
        None,
        "",
        "admin",
    ),
    op(
        "get",
        "/plan",
        "The queue in run order with projected start and end, against the deadline",
        None,
        "Plan",
        "none",
    ),
    op("get", "/openapi.json", "This document", None, "", "none"),
];

pub fn document() -> Value {
    let mut paths = serde_json::Map::new();
    for Operation {
        method,
        path,
        summary,
        body,
        response,
        auth,
    } in OPERATIONS
    {
        let entry = paths
            .entry(format!("{}{path}", podq_api::API_PREFIX))
            .or_insert_with(|| json!({}));
        let mut op = json!({
            "summary": summary,
            "responses": {
                "2XX": { "description": response_description(response) },
                "4XX": { "description": "ErrorBody: {\"error\": {\"code\", \"message\", \"details\"}}" },
            },
        });
        if let Some(body) = body {
            let media = if *body == "text/yaml" {
                "text/yaml"
            } else {
                "application/json"
            };
            op["requestBody"] = json!({ "required": true, "content": { media: { "schema": { "description": body } } } });
        }
        if *auth != "none" {
            op["security"] = json!([{ format!("{auth}Token"): [] }]);
        }
        let params: Vec<Value> = path
            .split('/')
            .filter_map(|seg| seg.strip_prefix('{')?.strip_suffix('}').map(str::to_owned))
            .map(|name| json!({ "name": name, "in": "path", "required": true, "schema": { "type": "string" } }))
            .collect();
        if !params.is_empty() {
            op["parameters"] = Value::Array(params);
        }
        entry[*method] = op;
    }
    json!({
        "openapi": "3.1.0",
        "info": { "title": "podq", "version": env!("CARGO_PKG_VERSION"),
                  "description": "Schedules ML experiments onto whole TPU pod slices. Wire types: crate podq-api." },
        "paths": paths,
        "components": { "securitySchemes": {
            "adminToken": { "type": "http", "scheme": "bearer" },
            "workerToken": { "type": "http", "scheme": "bearer" },
        }},
    })
}

fn response_description(response: &str) -> String {
    if response.is_empty() {
        "No content".into()
    } else {
        format!("JSON: {response}")
    }
}
