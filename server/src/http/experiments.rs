//! The catalog: experiments, groups, and dry-run validation of a config.

use axum::extract::{Path, Request, State};
use axum::http::StatusCode;
use axum::Json;
use podq_api::{
    ErrorBody, ExperimentDetail, ExperimentSummary, GroupStudy, GroupSummary, Severity,
    ValidateResponse,
};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::error::ApiError;
use super::extract::{read_body, require_content_type, YAML_TYPES};
use crate::catalog::{self, source::MAX_YAML_BYTES};
use crate::AppState;

pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(list))
        .routes(routes!(validate))
        .routes(routes!(detail))
        .routes(routes!(groups))
        .routes(routes!(study))
}

#[utoipa::path(
    get,
    path = "/experiments",
    tag = "catalog",
    summary = "The catalog, with findings per experiment",
    responses((status = 200, description = "Every experiment, in catalog order", body = Vec<ExperimentSummary>)),
)]
async fn list(State(state): State<AppState>) -> Json<Vec<ExperimentSummary>> {
    Json(
        state
            .catalog
            .experiments
            .iter()
            .map(|e| e.summary())
            .collect(),
    )
}

#[utoipa::path(
    get,
    path = "/experiments/{name}",
    tag = "catalog",
    summary = "One experiment with its resolved config",
    params(("name" = String, Path, description = "The experiment")),
    responses(
        (status = 200, description = "The experiment", body = ExperimentDetail),
        (status = 404, description = "`not_found`: no such experiment", body = ErrorBody),
    ),
)]
async fn detail(
    State(state): State<AppState>,
    Path(name): Path<String>,
) -> Result<Json<ExperimentDetail>, ApiError> {
    let e = state
        .catalog
        .experiment(&name)
        .ok_or_else(|| ApiError::not_found(format!("no experiment `{name}`")))?;
    Ok(Json(ExperimentDetail {
        summary: e.summary(),
        source_file: e.source_file.clone(),
        config: e.config.clone(),
    }))
}

#[utoipa::path(
    get,
    path = "/groups/{name}/study",
    tag = "catalog",
    summary = "What a group's runs show, row by row",
    params(("name" = String, Path, description = "The group")),
    responses(
        (status = 200, description = "The group's rows with their params and metrics, and, for a group with rungs, the rungs and each run's value, rank and decision at each", body = GroupStudy),
        (status = 404, description = "`not_found`: no such group (with did-you-mean in details)", body = ErrorBody),
    ),
)]
async fn study(
    State(state): State<AppState>,
    Path(name): Path<String>,
) -> Result<Json<GroupStudy>, ApiError> {
    Ok(Json(state.scheduler.study(&name).await?))
}

#[utoipa::path(
    get,
    path = "/groups",
    tag = "catalog",
    summary = "Groups with job counts per state",
    responses((status = 200, description = "Every group, in catalog order", body = Vec<GroupSummary>)),
)]
async fn groups(State(state): State<AppState>) -> Result<Json<Vec<GroupSummary>>, ApiError> {
    Ok(Json(state.scheduler.groups().await?))
}

/// Resolves a YAML document as if it were an experiment file of the catalog and reports
/// what the catalog would say about it. Stores nothing.
#[utoipa::path(
    post,
    path = "/experiments/validate",
    tag = "catalog",
    summary = "Dry-run a YAML experiment document; stores nothing",
    description = "The body is resolved as if it were an experiment file of the catalog. 400 when it is not UTF-8 text; 422 `invalid_yaml` when it is not YAML or not a mapping, 422 `invalid_config` with `details.findings` and `details.summary` when it does not resolve to a config the trainer accepts.",
    request_body(content = String, content_type = "text/yaml", description = "An experiment file"),
    responses(
        (status = 200, description = "The resolved config and any warnings", body = ValidateResponse),
        (status = 422, description = "`invalid_yaml` (not YAML, or not a mapping) or `invalid_config`: errors, in `details.findings` and `details.summary`", body = ErrorBody),
    ),
)]
async fn validate(
    State(state): State<AppState>,
    req: Request,
) -> Result<Json<ValidateResponse>, ApiError> {
    let headers = req.headers().clone();
    let bytes = read_body(req, &()).await?;
    require_content_type(&headers, &bytes, YAML_TYPES)?;
    if bytes.len() > MAX_YAML_BYTES {
        return Err(ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "body_too_large",
            format!(
                "YAML documents are limited to {MAX_YAML_BYTES} bytes; this one has {}",
                bytes.len()
            ),
        ));
    }
    let text = std::str::from_utf8(&bytes)
        .map_err(|_| ApiError::bad_request("invalid_yaml", "the body is not UTF-8 text"))?
        .to_owned();
    let root = state.config.experiments.clone();
    let options = state.config.catalog.clone();
    let (experiment, findings) =
        tokio::task::spawn_blocking(move || catalog::validate_document(&root, &text, &options))
            .await
            .map_err(|_| {
                ApiError::new(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "internal",
                    "validation crashed",
                )
            })?;
    // Findings one by one, and grouped by root cause with the fix (what `podq validate` prints).
    let summary = catalog::summarize(&findings);
    let Some(experiment) = experiment else {
        let first = findings.first();
        return Err(ApiError::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_yaml",
            first.map_or("the body is not valid YAML".to_owned(), |f| {
                f.message.clone()
            }),
        )
        .with_details(serde_json::json!({ "findings": findings, "summary": summary })));
    };
    if findings.iter().any(|f| f.severity == Severity::Error) {
        return Err(ApiError::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_config",
            "the config does not resolve to one the trainer accepts; see details.summary (each root cause once, with its fix) and details.findings",
        )
        .with_details(serde_json::json!({ "findings": findings, "summary": summary })));
    }
    Ok(Json(ValidateResponse {
        valid: true,
        config_sha256: Some(experiment.config_sha256),
        config: Some(experiment.config),
        findings,
        summary,
    }))
}
