//! Results out: a group's or the suite's results table as CSV or JSON, and a run's
//! metric series whole, in long format, as CSV or NDJSON. The table and its cells are
//! `podq_api::results`'s; CSV is written by the `csv` crate (quoting), a series page by page
//! as the scheduler reads it (`scheduler/reads/results.rs`), never whole in memory.

use axum::body::{Body, Bytes};
use axum::extract::{Path, RawQuery, State};
use axum::http::header;
use axum::response::{IntoResponse, Response};
use axum::Json;
use futures::StreamExt;
use podq_api::{ErrorBody, JsonNumber, MetricPoint, Results};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::error::ApiError;
use super::extract::JobRef;
use crate::scheduler::{ExportPage, MetricsExportQuery};
use crate::AppState;

pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(suite_results))
        .routes(routes!(suite_results_csv))
        .routes(routes!(group_results))
        .routes(routes!(group_results_csv))
        .routes(routes!(metrics_csv))
        .routes(routes!(metrics_ndjson))
}

const CSV: &str = "text/csv; charset=utf-8";
const NDJSON: &str = "application/x-ndjson";

#[utoipa::path(
    get,
    path = "/results",
    tag = "catalog",
    summary = "The whole suite's results, one row per experiment",
    description = "Every group's rows, in catalog order: each experiment's varied config keys (the union of every group's), the final and best value of each eval metric, steps, state, pod-hours, attempts and job. `results.csv` is the same table as CSV.",
    responses((status = 200, description = "The results table", body = Results)),
)]
async fn suite_results(State(state): State<AppState>) -> Result<Json<Results>, ApiError> {
    Ok(Json(state.scheduler.results(None).await?))
}

#[utoipa::path(
    get,
    path = "/results.csv",
    tag = "catalog",
    summary = "The whole suite's results as CSV",
    description = "Columns: `experiment`, `group`, the varied config keys (dotted; empty where an experiment's config lacks one), `<metric>.final` and `<metric>.best` for each eval metric (best: the lowest for a name with loss, error or perplexity, else the highest), `steps`, `state`, `pod_hours`, `attempts`, `accelerators` (the slice types its attempts ran on), `rung` and `rung_decision` (the last rung its group's rungs decided the run at, 1 for the first, and the decision there: `promoted`, `paused`, `pruned` or `no_value`; empty without rungs or before the first), `job_id`. A never-submitted experiment has state `not_submitted` and empty cells. Non-finite values are `NaN`, `inf`, `-inf`. A text cell or column name that begins with `=`, `+`, `-` or `@` (or a tab or carriage return) is written after a `'` (OWASP's rule against CSV injection); numbers are written as they are.",
    responses((status = 200, description = "The results table", content_type = "text/csv", body = String)),
)]
async fn suite_results_csv(State(state): State<AppState>) -> Result<Response, ApiError> {
    let results = state.scheduler.results(None).await?;
    Ok(csv_file("results.csv", results_csv(&results)?))
}

#[utoipa::path(
    get,
    path = "/groups/{name}/results",
    tag = "catalog",
    summary = "A group's results, one row per experiment",
    params(("name" = String, Path, description = "The group")),
    responses(
        (status = 200, description = "The results table; its rows are the study's", body = Results),
        (status = 404, description = "`not_found`: no such group (with did-you-mean in details)", body = ErrorBody),
    ),
)]
async fn group_results(
    State(state): State<AppState>,
    Path(name): Path<String>,
) -> Result<Json<Results>, ApiError> {
    Ok(Json(state.scheduler.results(Some(&name)).await?))
}

#[utoipa::path(
    get,
    path = "/groups/{name}/results.csv",
    tag = "catalog",
    summary = "A group's results as CSV",
    description = "The columns of `/results.csv`, for one group's experiments: the rows of its study view.",
    params(("name" = String, Path, description = "The group")),
    responses(
        (status = 200, description = "The results table", content_type = "text/csv", body = String),
        (status = 404, description = "`not_found`: no such group (with did-you-mean in details)", body = ErrorBody),
    ),
)]
async fn group_results_csv(
    State(state): State<AppState>,
    Path(name): Path<String>,
) -> Result<Response, ApiError> {
    let results = state.scheduler.results(Some(&name)).await?;
    Ok(csv_file(
        &format!("results-{}.csv", file_safe(&name)),
        results_csv(&results)?,
    ))
}

/// `metrics.csv`'s and `metrics.ndjson`'s query, for the document (the handlers parse the
/// raw query themselves: `metric` may repeat).
#[derive(utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[allow(dead_code)]
struct MetricsExportParams {
    /// Series to include, repeated (`metric=a&metric=b`) or comma-separated; default every
    /// series. A name the job never reported is 404 `unknown_metric`, with did-you-mean.
    #[param(style = Form, explode)]
    metric: Option<Vec<String>>,
    /// The first step to include.
    from_step: Option<i64>,
    /// The last step to include; before `from_step` is 422 `invalid_range`.
    to_step: Option<i64>,
}

#[utoipa::path(
    get,
    path = "/jobs/{id}/metrics.csv",
    tag = "jobs",
    summary = "Every point of the run's metric series as CSV, streamed",
    description = "Long format, `step,name,value`, ordered by name then step; every stored point, not downsampled. Non-finite values are `NaN`, `inf`, `-inf`. A name that begins with `=`, `+`, `-` or `@` (or a tab or carriage return) is written after a `'`, as OWASP's rule against CSV injection says. The body is streamed (chunked) as the store is read page by page.",
    params(("id" = String, Path, description = "A job's uuid, or an experiment name: that experiment's newest job"), MetricsExportParams),
    responses(
        (status = 200, description = "The points", content_type = "text/csv", body = String),
        (status = 400, description = "`invalid_query`: a step that is not a whole number, a parameter this route does not take", body = ErrorBody),
        (status = 404, description = "`not_found`: no such job or experiment; `unknown_metric`: the job has no such series (with did-you-mean in details)", body = ErrorBody),
        (status = 422, description = "`invalid_range`: `to_step` is before `from_step`", body = ErrorBody),
    ),
)]
async fn metrics_csv(
    State(state): State<AppState>,
    JobRef(id): JobRef,
    RawQuery(raw): RawQuery,
) -> Result<Response, ApiError> {
    let query = export_query(raw.as_deref())?;
    let export = state.scheduler.metrics_export(id, query).await?;
    let header = csv_bytes(|w| w.write_record(["step", "name", "value"]))?;
    let body = stream_pages(export.pages, header, |page| {
        let name = podq_api::csv_text(&page.name);
        csv_bytes(|w| {
            for (step, value) in &page.points {
                w.write_record([
                    step.to_string().as_str(),
                    name.as_ref(),
                    podq_api::csv_number(*value).as_str(),
                ])?;
            }
            Ok(())
        })
    })
    .await?;
    let name = format!("{}-metrics.csv", file_safe(&export.experiment));
    Ok(file(CSV, &name, body))
}

#[utoipa::path(
    get,
    path = "/jobs/{id}/metrics.ndjson",
    tag = "jobs",
    summary = "Every point of the run's metric series as NDJSON, streamed",
    description = "One JSON object a line, `{\"step\":..,\"name\":..,\"value\":..}`, ordered by name then step; every stored point. Non-finite values are the strings \"NaN\", \"Infinity\", \"-Infinity\". Streamed as the store is read page by page.",
    params(("id" = String, Path, description = "A job's uuid, or an experiment name: that experiment's newest job"), MetricsExportParams),
    responses(
        (status = 200, description = "The points, one a line", content_type = "application/x-ndjson", body = String),
        (status = 400, description = "`invalid_query`: a step that is not a whole number, a parameter this route does not take", body = ErrorBody),
        (status = 404, description = "`not_found`: no such job or experiment; `unknown_metric`: the job has no such series (with did-you-mean in details)", body = ErrorBody),
        (status = 422, description = "`invalid_range`: `to_step` is before `from_step`", body = ErrorBody),
    ),
)]
async fn metrics_ndjson(
    State(state): State<AppState>,
    JobRef(id): JobRef,
    RawQuery(raw): RawQuery,
) -> Result<Response, ApiError> {
    let query = export_query(raw.as_deref())?;
    let export = state.scheduler.metrics_export(id, query).await?;
    let body = stream_pages(export.pages, Bytes::new(), |page| {
        let mut out = Vec::with_capacity(page.points.len() * (page.name.len() + 40));
        for (step, value) in &page.points {
            let point = MetricPoint {
                step: *step,
                name: page.name.clone(),
                value: JsonNumber(*value),
            };
            serde_json::to_writer(&mut out, &point).map_err(|e| internal(&e))?;
            out.push(b'\n');
        }
        Ok(Bytes::from(out))
    })
    .await?;
    let name = format!("{}-metrics.ndjson", file_safe(&export.experiment));
    Ok(file(NDJSON, &name, body))
}

/// The export's query: `metric` (repeated or comma-separated), `from_step`, `to_step`.
fn export_query(raw: Option<&str>) -> Result<MetricsExportQuery, ApiError> {
    let pairs: Vec<(String, String)> = serde_urlencoded::from_str(raw.unwrap_or(""))
        .map_err(|e| ApiError::bad_request("invalid_query", e.to_string()))?;
    let mut query = MetricsExportQuery::default();
    let step = |key: &str, value: &str| {
        value.trim().parse::<i64>().map_err(|_| {
            ApiError::bad_request(
                "invalid_query",
                format!("{key} must be a whole number of steps, not `{value}`"),
            )
        })
    };
    for (key, value) in pairs {
        match key.as_str() {
            "metric" => query.metrics.get_or_insert_with(Vec::new).extend(
                value
                    .split(',')
                    .map(str::trim)
                    .filter(|m| !m.is_empty())
                    .map(str::to_owned),
            ),
            "from_step" => query.from_step = Some(step(&key, &value)?),
            "to_step" => query.to_step = Some(step(&key, &value)?),
            other => {
                return Err(ApiError::bad_request(
                    "invalid_query",
                    format!("unknown query parameter `{other}`; this route takes metric, from_step and to_step"),
                ))
            }
        }
    }
    // `metric=` alone names nothing: every series.
    if query.metrics.as_ref().is_some_and(Vec::is_empty) {
        query.metrics = None;
    }
    Ok(query)
}

/// The body of an export: `first`, then each page as `write` shapes it, as the pages come.
/// The first page is awaited before answering, so a store that fails at once is a JSON
/// error with its status; one that fails later ends the body early (the client sees a
/// truncated transfer, not a complete file), and is logged.
async fn stream_pages(
    mut pages: tokio::sync::mpsc::Receiver<crate::scheduler::Result<ExportPage>>,
    first: Bytes,
    write: impl Fn(&ExportPage) -> Result<Bytes, ApiError> + Send + 'static,
) -> Result<Body, ApiError> {
    let head = match pages.recv().await {
        Some(page) => Some(write(&page?)?),
        None => None,
    };
    let rest = futures::stream::unfold(pages, |mut pages| async move {
        let page = pages.recv().await?;
        Some((page, pages))
    })
    .map(move |page| {
        let page = page.map_err(|e| {
            tracing::error!(error = %e, "a metrics export failed part way");
            std::io::Error::other("the store failed part way through the export")
        })?;
        write(&page).map_err(|e| std::io::Error::other(e.message))
    });
    let start = futures::stream::iter(
        [Some(first), head]
            .into_iter()
            .flatten()
            .filter(|b| !b.is_empty())
            .map(Ok::<_, std::io::Error>),
    );
    Ok(Body::from_stream(start.chain(rest)))
}

fn results_csv(results: &Results) -> Result<Bytes, ApiError> {
    csv_bytes(|w| {
        w.write_record(results.csv_columns())?;
        for row in &results.rows {
            w.write_record(results.cells(row).iter().map(|c| c.to_csv()))?;
        }
        Ok(())
    })
}

/// CSV written by `write`, as bytes.
fn csv_bytes(
    write: impl FnOnce(&mut csv::Writer<Vec<u8>>) -> csv::Result<()>,
) -> Result<Bytes, ApiError> {
    let mut writer = csv::Writer::from_writer(Vec::new());
    write(&mut writer).map_err(|e| internal(&e))?;
    let bytes = writer.into_inner().map_err(|e| internal(e.error()))?;
    Ok(Bytes::from(bytes))
}

fn internal(e: &dyn std::fmt::Display) -> ApiError {
    tracing::error!(error = %e, "writing an export failed");
    ApiError::new(
        axum::http::StatusCode::INTERNAL_SERVER_ERROR,
        "internal",
        "the server failed unexpectedly; an operator must look at its log",
    )
}

fn csv_file(name: &str, body: Bytes) -> Response {
    file(CSV, name, Body::from(body))
}

/// A download: its type, and the name a browser saves it under.
fn file(content_type: &'static str, name: &str, body: Body) -> Response {
    (
        [
            (header::CONTENT_TYPE, content_type.to_owned()),
            (
                header::CONTENT_DISPOSITION,
                format!("attachment; filename=\"{name}\""),
            ),
        ],
        body,
    )
        .into_response()
}

/// A name fit for a file name in a header: letters, digits, `.`, `-` and `_`.
fn file_safe(name: &str) -> String {
    name.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_') {
                c
            } else {
                '_'
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_query_takes_repeated_and_comma_separated_metrics() {
        let q = export_query(Some("metric=a,b&metric=c&from_step=10&to_step=20")).unwrap();
        assert_eq!(q.metrics.unwrap(), ["a", "b", "c"]);
        assert_eq!((q.from_step, q.to_step), (Some(10), Some(20)));
        assert!(export_query(None).unwrap().metrics.is_none());
        assert!(export_query(Some("metric=")).unwrap().metrics.is_none());
        assert_eq!(export_query(Some("from_step=x")).unwrap_err().status, 400);
        assert_eq!(export_query(Some("names=a")).unwrap_err().status, 400);
    }

    #[test]
    fn file_names_keep_to_safe_characters() {
        assert_eq!(file_safe("exp01a"), "exp01a");
        assert_eq!(file_safe("a\"b/c d"), "a_b_c_d");
    }
}
