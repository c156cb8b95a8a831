//! `GET /jobs/{id}/logs`: what every host's trainer printed, by attempt and host, as a page;
//! `/logs/follow` streams it live. The lines arrive from workers through `POST /leases/{id}/logs`.

use std::convert::Infallible;

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use chrono::{DateTime, Utc};
use podq_api::{ErrorBody, JobLogs, LogLine};
use serde::Deserialize;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::error::ApiError;
use super::extract::{JobRef, QueryParams};
use super::negotiate::wants_json;
use crate::scheduler::LogQuery;
use crate::team::Acting;
use crate::AppState;

/// Lines per page unless `limit` says otherwise, and at most.
const DEFAULT_LIMIT: i64 = 1_000;
const MAX_LIMIT: i64 = 10_000;

pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(logs))
        .routes(routes!(follow))
}

#[derive(Deserialize, Default, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
struct LogsQuery {
    /// Only this attempt (1 is the first).
    #[param(minimum = 1)]
    attempt: Option<i64>,
    /// Only this host (0 is the first), or `all` (the default).
    #[param(pattern = "^(all|[0-9]{1,4})$")]
    host: Option<String>,
    /// Only lines that arrived since: an RFC 3339 time, or an age such as `90s`, `10m`,
    /// `2h` or `1d`.
    #[param(
        pattern = "^([0-9]{1,9}[smhd]|[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(\\.[0-9]+)?(Z|[+-][0-9]{2}:[0-9]{2}))$"
    )]
    since: Option<String>,
    /// Only lines matching this regular expression (Rust `regex` syntax).
    #[param(min_length = 1, max_length = 1000)]
    grep: Option<String>,
    /// Lines after this cursor: the previous page's `next_after`.
    #[param(minimum = 0)]
    after: Option<i64>,
    /// Lines per page (default 1000).
    #[param(minimum = 1, maximum = 10000)]
    limit: Option<i64>,
    /// Without `after`: the newest `limit` lines instead of the oldest.
    tail: Option<bool>,
}

#[utoipa::path(
    get,
    path = "/jobs/{id}/logs",
    tag = "jobs",
    summary = "What the trainer printed on every host",
    description = "Lines in arrival order, each with its attempt and host. As text (the default, for curl) one line each, `[attempt N host H] text`; as JSON a `JobLogs` page. The server keeps the newest lines of each attempt and host (`kept_per_host`); `dropped` says where older ones went. `/logs/follow` streams them.",
    params(("id" = String, Path, description = "A job's uuid, or an experiment name: that experiment's newest job"), LogsQuery),
    responses(
        (
            status = 200,
            description = "A page of lines (JSON), or the lines (text)",
            content((JobLogs = "application/json"), (String = "text/plain")),
        ),
        (status = 404, description = "`not_found` (no such job or experiment), `unknown_attempt` or `unknown_host` (with what exists)", body = ErrorBody),
        (status = 422, description = "`invalid_grep` (not a regular expression), `invalid_since` (no such time)", body = ErrorBody),
    ),
)]
async fn logs(
    State(state): State<AppState>,
    JobRef(id): JobRef,
    headers: HeaderMap,
    QueryParams(q): QueryParams<LogsQuery>,
) -> Result<Response, ApiError> {
    let query = parse(q, Utc::now())?;
    let page = state.scheduler.job_logs(id, &query).await?;
    if wants_json(&headers) {
        return Ok(Json(page).into_response());
    }
    let mut text = String::new();
    for dropped in &page.dropped {
        text.push_str(&format!(
            "[attempt {} host {}] ... {} older lines dropped: the server keeps the newest {} per attempt and host\n",
            dropped.attempt, dropped.host, dropped.lines, page.kept_per_host
        ));
    }
    for line in &page.lines {
        text.push_str(&as_text(line));
    }
    Ok(([(header::CONTENT_TYPE, "text/plain; charset=utf-8")], text).into_response())
}

#[utoipa::path(
    get,
    path = "/jobs/{id}/logs/follow",
    tag = "jobs",
    summary = "Follow what the trainer prints on every host",
    description = "The lines the same query would page through, then each new one as it arrives, across the attempt's end and the next attempt's start, until the job settles (succeeded, failed, cancelled, held or stopped). Text lines `[attempt N host H] text`, or NDJSON `LogLine`s when the request's `Accept` names `application/json`. With `tail`, it starts from the newest `limit` lines.",
    params(("id" = String, Path, description = "A job's uuid, or an experiment name: that experiment's newest job"), LogsQuery),
    responses(
        (
            status = 200,
            description = "The stream, open until the job settles",
            content((String = "text/plain"), (LogLine = "application/x-ndjson")),
        ),
        (status = 404, description = "`not_found` (no such job or experiment), `unknown_attempt` or `unknown_host` (with what exists)", body = ErrorBody),
        (status = 422, description = "`invalid_grep` (not a regular expression), `invalid_since` (no such time)", body = ErrorBody),
    ),
)]
async fn follow(
    State(state): State<AppState>,
    acting: Acting,
    JobRef(id): JobRef,
    headers: HeaderMap,
    QueryParams(q): QueryParams<LogsQuery>,
) -> Result<Response, ApiError> {
    let query = parse(q, Utc::now())?;
    let (until, guard) = super::auth::while_credential_holds(&state, &acting);
    let lines = state.scheduler.follow_logs(id, query, until).await?;
    Ok(follow_stream(lines, guard, wants_json(&headers)))
}

fn parse(q: LogsQuery, now: DateTime<Utc>) -> Result<LogQuery, ApiError> {
    let host = match q.host.as_deref() {
        None | Some("all") => None,
        Some(text) => Some(text.parse::<u32>().map_err(|_| {
            ApiError::bad_request(
                "invalid_query",
                format!("host must be a host number or `all`, got `{text}`"),
            )
        })?),
    };
    if q.attempt.is_some_and(|a| a < 1) {
        return Err(ApiError::bad_request(
            "invalid_query",
            "attempt counts from 1",
        ));
    }
    if q.after.is_some_and(|a| a < 0) {
        return Err(ApiError::bad_request(
            "invalid_query",
            "after must be 0 or more",
        ));
    }
    let limit = q.limit.unwrap_or(DEFAULT_LIMIT);
    if !(1..=MAX_LIMIT).contains(&limit) {
        return Err(ApiError::bad_request(
            "invalid_query",
            format!("limit must be 1 to {MAX_LIMIT}, got {limit}"),
        ));
    }
    let since_ms = q
        .since
        .as_deref()
        .map(|since| parse_since(since, now))
        .transpose()?;
    let grep = q
        .grep
        .as_deref()
        .map(|pattern| {
            if pattern.chars().count() > 1000 {
                return Err(ApiError::bad_request(
                    "invalid_query",
                    "grep is at most 1000 characters",
                ));
            }
            if pattern.is_empty() {
                return Err(ApiError::new(
                    StatusCode::UNPROCESSABLE_ENTITY,
                    "invalid_grep",
                    "grep is empty: leave it out to see every line",
                ));
            }
            regex::RegexBuilder::new(pattern)
                .size_limit(1 << 20)
                .build()
                .map_err(|e| {
                    ApiError::new(
                        StatusCode::UNPROCESSABLE_ENTITY,
                        "invalid_grep",
                        format!("grep: {e}"),
                    )
                })
        })
        .transpose()?;
    Ok(LogQuery {
        attempt: q.attempt,
        host,
        since_ms,
        grep,
        after: q.after,
        tail: q.tail.unwrap_or(false),
        limit,
    })
}

/// `since` as ms since the epoch: an RFC 3339 time, or an age before `now` (`90s`, `10m`,
/// `2h`, `1d`).
fn parse_since(since: &str, now: DateTime<Utc>) -> Result<i64, ApiError> {
    if let Ok(time) = podq_api::time::parse_rfc3339(since) {
        return Ok(time.timestamp_millis());
    }
    let invalid = || {
        ApiError::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_since",
            format!(
                "since must be an RFC 3339 time (2026-11-24T08:00:00Z) or an age such as 90s, 10m, 2h or 1d, got `{since}`"
            ),
        )
    };
    let unit = since.chars().last().ok_or_else(invalid)?;
    let count: u32 = since[..since.len() - unit.len_utf8()]
        .parse()
        .map_err(|_| invalid())?;
    let seconds = match unit {
        's' => 1,
        'm' => 60,
        'h' => 3600,
        'd' => 86_400,
        _ => return Err(invalid()),
    };
    Ok(now.timestamp_millis() - i64::from(count) * seconds * 1000)
}

fn as_text(line: &LogLine) -> String {
    format!(
        "[attempt {} host {}] {}\n",
        line.attempt, line.host, line.text
    )
}

/// The follower's pages as one streamed body, text or NDJSON.
fn follow_stream(
    lines: tokio::sync::mpsc::Receiver<Vec<LogLine>>,
    guard: tokio_util::sync::DropGuard,
    json: bool,
) -> Response {
    let stream = futures::stream::unfold((lines, guard), move |(mut lines, guard)| async move {
        let page = lines.recv().await?;
        let mut chunk = String::new();
        for line in &page {
            if json {
                chunk.push_str(&serde_json::to_string(line).unwrap_or_default());
                chunk.push('\n');
            } else {
                chunk.push_str(&as_text(line));
            }
        }
        Some((Ok::<_, Infallible>(Bytes::from(chunk)), (lines, guard)))
    });
    let content_type = if json {
        "application/x-ndjson"
    } else {
        "text/plain; charset=utf-8"
    };
    (
        [
            (header::CONTENT_TYPE, content_type),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        Body::from_stream(stream),
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn since_takes_a_time_or_an_age() {
        let now = DateTime::parse_from_rfc3339("2026-11-24T08:00:00Z")
            .unwrap()
            .with_timezone(&Utc);
        let ms = |text: &str| parse_since(text, now).unwrap();
        assert_eq!(ms("10m"), now.timestamp_millis() - 600_000);
        assert_eq!(ms("2h"), now.timestamp_millis() - 7_200_000);
        assert_eq!(
            ms("2026-11-24T07:00:00Z"),
            now.timestamp_millis() - 3_600_000
        );
        for bad in ["", "m", "10w", "ten minutes", "-5m"] {
            assert!(parse_since(bad, now).is_err(), "{bad}");
        }
    }
}
