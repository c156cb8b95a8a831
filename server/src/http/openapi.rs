//! `GET /openapi.json`: the API described for tools (OpenAPI 3.1), generated from the same
//! declarations that build the router. Every documented route is registered through
//! `utoipa_axum`'s `routes!` from its handler's `#[utoipa::path]`, so a route cannot be served
//! without being documented or documented without being served; every body is a `podq-api`
//! wire type deriving `ToSchema`. The error answers all routes share (a request the API
//! cannot read, a missing or wrong token, a body too large or too slow, the store) are added
//! here once, by what each operation takes.
//!
//! Not documented: `/healthz`, `/readyz` and the dashboard's static files (`/`, `/web/*`).

use std::sync::Arc;

use axum::http::header;
use axum::response::{IntoResponse, Response};
use axum::Extension;
use utoipa::openapi::path::Operation;
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::openapi::{ContentBuilder, Ref, RefOr, ResponseBuilder};
use utoipa::{Modify, OpenApi};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use serde_json::json;

use crate::catalog::Catalog;
use crate::AppState;

/// The document's fixed parts; the paths and schemas come from the routers.
#[derive(OpenApi)]
#[openapi(
    info(
        title = "podq",
        description = "Schedules ML experiments onto whole TPU pod slices. Every body is a wire type of the crate podq-api; every error answer is an `ErrorBody`. Each person has a token and a role (viewer, submitter, admin, worker): reads need a viewer's when the server listens beyond loopback without --open-reads; submitting and acting on one's own jobs a submitter's; the grant, plan, schedules and people an admin's; the worker protocol a worker's. A role's calls are not checked while no token of it exists."
    ),
    components(schemas(podq_api::ErrorBody)),
    modifiers(&BearerTokens),
    tags(
        (name = "catalog", description = "Experiments and groups as the catalog defines them"),
        (name = "jobs", description = "Submit, list, inspect, cancel, requeue, reprioritise"),
        (name = "status", description = "What runs where, the pods, live events"),
        (name = "plan", description = "The compute grant and the order that completes the most groups"),
        (name = "schedules", description = "Cron submissions"),
        (name = "team", description = "People, their roles and tokens, and the audit trail"),
        (name = "webhooks", description = "Notices sent out and their deliveries"),
        (name = "worker", description = "The worker protocol (docs/architecture.md §3.2)"),
        (name = "operations", description = "Metrics and this document"),
    )
)]
pub struct ApiDoc;

struct BearerTokens;

impl Modify for BearerTokens {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        for (name, what) in [
            (
                ADMIN,
                "A person's token (`podq users add`), or the server's PODQ_ADMIN_TOKEN",
            ),
            (
                WORKER,
                "A worker's token (role worker, maybe limited to pods), or PODQ_WORKER_TOKEN",
            ),
        ] {
            components.add_security_scheme(
                name,
                SecurityScheme::Http(
                    HttpBuilder::new()
                        .scheme(HttpAuthScheme::Bearer)
                        .description(Some(what))
                        .build(),
                ),
            );
        }
    }
}

/// The security scheme names the handlers' `security(...)` use.
pub const ADMIN: &str = "admin_token";
pub const WORKER: &str = "worker_token";

pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(openapi_json))
}

/// The finished document, serialised once when the router is built.
#[derive(Clone)]
pub struct Document(Arc<String>);

impl Document {
    pub fn new(mut openapi: utoipa::openapi::OpenApi, catalog: &Catalog) -> Self {
        openapi.info.version = env!("CARGO_PKG_VERSION").to_owned();
        for item in openapi.paths.paths.values_mut() {
            for operation in [
                &mut item.get,
                &mut item.put,
                &mut item.post,
                &mut item.delete,
                &mut item.patch,
            ]
            .into_iter()
            .flatten()
            {
                // Handlers in different modules share names (`list`, `detail`): the tag makes
                // the operation id unique, as OpenAPI requires.
                if let (Some(tag), Some(id)) = (
                    operation.tags.as_ref().and_then(|t| t.first()),
                    operation.operation_id.as_mut(),
                ) {
                    *id = format!("{tag}_{id}");
                }
                add_shared_errors(operation);
            }
        }
        let mut document = serde_json::to_value(&openapi).expect("the OpenAPI document serialises");
        describe_checks(&mut document, catalog);
        Document(Arc::new(document.to_string()))
    }
}

/// What the server checks that the types alone cannot say, written into the document so a
/// client generated from it sends only what the server takes: the catalog's group and
/// experiment names (fixed while the server runs), exactly one selection in a submission,
/// a patch that changes something, and a grant's budgets of 0 or more.
fn describe_checks(document: &mut serde_json::Value, catalog: &Catalog) {
    let groups: Vec<&str> = catalog.groups.iter().map(|g| g.name.as_str()).collect();
    let experiments: Vec<&str> = catalog
        .experiments
        .iter()
        .map(|e| e.name.as_str())
        .collect();
    tighten_formats(document);
    let schemas = &mut document["components"]["schemas"];
    let submit = &mut schemas["SubmitRequest"];
    if submit.is_object() {
        let mut group_values: Vec<serde_json::Value> = groups.iter().map(|g| json!(g)).collect();
        group_values.push(serde_json::Value::Null);
        submit["properties"]["group"]["enum"] = json!(group_values);
        submit["properties"]["all"] = json!({"enum": [true, null]});
        let list = &mut submit["properties"]["experiments"];
        list["minItems"] = json!(1);
        list["items"] = json!({"type": "string", "enum": experiments});
        submit["properties"]["max_failures"]["maximum"] =
            json!(crate::scheduler::submit::MAX_MAX_FAILURES);
        // Exactly one of them, given and not null (`all` only as true).
        submit["oneOf"] = json!([
            {"required": ["group"], "properties": {"group": {"type": "string"}}},
            {"required": ["experiments"], "properties": {"experiments": {"type": "array"}}},
            {"required": ["all"], "properties": {"all": {"const": true}}},
        ]);
    }
    // A patch that changes nothing is refused (utoipa 5 writes `min_properties` as
    // `maxProperties`, so it is set here).
    let patch = &mut schemas["PatchJobRequest"];
    if patch.is_object() {
        patch["minProperties"] = json!(1);
    }
    let grant = &mut schemas["GrantRequest"];
    if grant.is_object() {
        grant["properties"]["pod_hours"]["additionalProperties"] =
            json!({"type": "number", "minimum": 0});
    }
    if let Some(operation) = document["paths"]["/api/v1/jobs"]["get"].as_object_mut() {
        for parameter in operation
            .get_mut("parameters")
            .and_then(|p| p.as_array_mut())
            .into_iter()
            .flatten()
        {
            let names: &[&str] = match parameter["name"].as_str() {
                Some("group") => &groups,
                Some("experiment") => &experiments,
                _ => continue,
            };
            parameter["schema"] = json!({"type": "string", "enum": names});
        }
    }
}

/// An RFC 3339 date and time, as `podq_api::time` reads one.
const RFC_3339: &str = "^[0-9]{4}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])[Tt]([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](\\.[0-9]+)?([Zz]|[+-]([01][0-9]|2[0-3]):[0-5][0-9])$";

/// utoipa writes a `u32` as `int32` with a minimum of 0, which reads as at most 2^31 - 1;
/// the server takes up to 2^32 - 1. A `date-time` gets the pattern the server enforces.
fn tighten_formats(value: &mut serde_json::Value) {
    match value {
        serde_json::Value::Object(fields) => {
            if fields.get("format").and_then(|f| f.as_str()) == Some("int32")
                && fields.get("minimum").and_then(|m| m.as_f64()) == Some(0.0)
            {
                fields.insert("format".into(), json!("uint32"));
                fields.entry("maximum").or_insert(json!(u32::MAX));
            }
            // In OpenAPI 3.1 a `format` only annotates; the server takes RFC 3339 only.
            if fields.get("format").and_then(|f| f.as_str()) == Some("date-time") {
                fields.entry("pattern").or_insert(json!(RFC_3339));
            }
            fields.values_mut().for_each(tighten_formats);
        }
        serde_json::Value::Array(items) => items.iter_mut().for_each(tighten_formats),
        _ => {}
    }
}

/// The error answers an operation can get from the layers around its handler, each unless
/// the handler's declaration already describes it.
fn add_shared_errors(operation: &mut Operation) {
    let takes_input = operation.request_body.is_some()
        || operation.parameters.as_ref().is_some_and(|p| !p.is_empty());
    let has_body = operation.request_body.is_some();
    let needs_token = operation.security.as_ref().is_some_and(|s| !s.is_empty());
    let shared: [(&str, bool, &str); 7] = [
        ("400", takes_input, "The path, query or body cannot be read (`invalid_query`, `invalid_id`, `invalid_body`, `malformed_json`, ...)"),
        ("401", true, "`unauthorized` or `token_disabled`: a token is needed and none was sent, or the one sent is unknown or disabled"),
        ("403", needs_token, "`forbidden`: the caller's role is too small (the answer names the role needed); `not_owner`: another's job; `pod_not_allowed`: a worker token limited to other pods"),
        ("408", has_body, "`request_timeout`: the body did not arrive in time"),
        ("413", has_body, "`body_too_large`: the body is larger than the server accepts"),
        ("500", true, "`internal` or `store_corrupt`: the server failed; its log says why"),
        ("503", true, "`store_unavailable`: the database could not answer; nothing was changed, try again"),
    ];
    for (status, applies, description) in shared {
        if applies && !operation.responses.responses.contains_key(status) {
            operation
                .responses
                .responses
                .insert(status.to_owned(), RefOr::T(error_response(description)));
        }
    }
}

fn error_response(description: &str) -> utoipa::openapi::Response {
    ResponseBuilder::new()
        .description(description)
        .content(
            "application/json",
            ContentBuilder::new()
                .schema(Some(Ref::from_schema_name("ErrorBody")))
                .build(),
        )
        .build()
}

#[utoipa::path(
    get,
    path = "/openapi.json",
    tag = "operations",
    summary = "This document",
    responses((status = 200, description = "The API as OpenAPI 3.1", body = Object)),
)]
async fn openapi_json(Extension(document): Extension<Document>) -> Response {
    (
        [(header::CONTENT_TYPE, "application/json")],
        document.0.as_str().to_owned(),
    )
        .into_response()
}
