//! Extractors whose every rejection is a JSON error in the API's format.

use axum::body::Bytes;
use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::request::Parts;
use axum::http::StatusCode;
use podq_api::JobId;
use serde::de::DeserializeOwned;
use sha2::{Digest, Sha256};
use uuid::Uuid;

use super::error::ApiError;
use crate::names;
use crate::AppState;

/// A JSON body, sent as `application/json` (`curl --json`): a body of any other type is
/// 415, for a form's types are what another site's page can send unasked
/// (`cross_site.rs`). An empty body may come without a type.
pub struct JsonBody<T>(pub T, pub BodyDigest);

/// The media types a JSON route reads.
pub const JSON_TYPES: &[&str] = &["application/json"];

/// The media types a YAML route reads (JSON is YAML too).
pub const YAML_TYPES: &[&str] = &[
    "application/yaml",
    "application/x-yaml",
    "text/yaml",
    "text/x-yaml",
    "application/json",
];

/// 415 unless the request's body, when it has one or declares a type, is of one of
/// `accepted` (or a `+json` type where JSON is accepted).
pub fn require_content_type(
    headers: &axum::http::HeaderMap,
    body: &[u8],
    accepted: &[&str],
) -> Result<(), ApiError> {
    let declared = headers.get(axum::http::header::CONTENT_TYPE);
    if declared.is_none() && body.is_empty() {
        return Ok(());
    }
    let essence = declared.and_then(|v| v.to_str().ok()).map(|v| {
        v.split(';')
            .next()
            .unwrap_or_default()
            .trim()
            .to_ascii_lowercase()
    });
    let ok = essence.as_deref().is_some_and(|t| {
        accepted.contains(&t)
            || (accepted.contains(&"application/json")
                && t.starts_with("application/")
                && t.ends_with("+json"))
    });
    if ok {
        return Ok(());
    }
    Err(ApiError::new(
        StatusCode::UNSUPPORTED_MEDIA_TYPE,
        "unsupported_media_type",
        format!(
            "this route reads {}; the body was sent as {} (with curl: `--json '{{...}}'`, or \
             `-H 'Content-Type: {}'`)",
            accepted[0],
            essence.map_or("no Content-Type".to_owned(), |t| format!(
                "`{}`",
                podq_api::escape_controls(&t)
            )),
            accepted[0],
        ),
    )
    .with_details(serde_json::json!({ "accepted": accepted })))
}

/// sha256 of the raw body, for idempotency keys.
#[derive(Clone)]
pub struct BodyDigest(pub String);

impl<S: Send + Sync, T: DeserializeOwned> FromRequest<S> for JsonBody<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        let headers = req.headers().clone();
        let bytes = read_body(req, state).await?;
        require_content_type(&headers, &bytes, JSON_TYPES)?;
        let digest = BodyDigest(hex::encode(Sha256::digest(&bytes)));
        let refused = |e: serde_json::Error| {
            let code = if e.is_syntax() || e.is_eof() {
                "malformed_json"
            } else {
                "invalid_body"
            };
            ApiError::bad_request(code, format!("request body: {e}"))
        };
        let value = match serde_json::from_slice(&bytes) {
            Ok(value) => value,
            // JSON Schema's `integer` (what the document says) includes `3.0`; serde's
            // integers do not. Such a body is read again with whole floats as integers.
            Err(e) if e.is_data() && e.to_string().contains("floating point") => {
                let mut tree: serde_json::Value =
                    serde_json::from_slice(&bytes).map_err(refused)?;
                whole_floats_as_integers(&mut tree);
                serde_json::from_value(tree).map_err(refused)?
            }
            Err(e) => return Err(refused(e)),
        };
        Ok(JsonBody(value, digest))
    }
}

/// Every float with no fractional part within ±2^53 becomes that integer.
fn whole_floats_as_integers(value: &mut serde_json::Value) {
    match value {
        serde_json::Value::Number(n) if !n.is_i64() && !n.is_u64() => {
            if let Some(f) = n.as_f64() {
                // Only where every integer is exact (2^53): a larger float was rounded
                // already, and may stand for a number out of range.
                if f.fract() == 0.0 && f.abs() <= 9_007_199_254_740_992.0 {
                    *value = serde_json::Value::from(f as i64);
                }
            }
        }
        serde_json::Value::Array(items) => items.iter_mut().for_each(whole_floats_as_integers),
        serde_json::Value::Object(fields) => fields.values_mut().for_each(whole_floats_as_integers),
        _ => {}
    }
}

pub async fn read_body<S: Send + Sync>(req: Request, state: &S) -> Result<Bytes, ApiError> {
    Bytes::from_request(req, state).await.map_err(|e| {
        if e.status() == StatusCode::PAYLOAD_TOO_LARGE {
            ApiError::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                "body_too_large",
                format!(
                    "request body is larger than the limit of {} bytes",
                    super::MAX_BODY_BYTES
                ),
            )
        } else if e.body_text().contains("timeout") {
            // The client announced a body and did not send it in time.
            ApiError::new(
                StatusCode::REQUEST_TIMEOUT,
                "request_timeout",
                format!(
                    "the request body did not arrive within {} s",
                    super::BODY_TIMEOUT.as_secs()
                ),
            )
        } else {
            ApiError::bad_request(
                "unreadable_body",
                format!("cannot read the request body: {e}"),
            )
        }
    })
}

/// A request whose `Content-Length` is over the limit is answered `413` before any of its
/// body is read: waiting for a body that would be refused anyway held the connection until
/// the body timeout (`408` after 10 s).
pub async fn refuse_declared_oversize(
    req: Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    use axum::response::IntoResponse;
    let declared = req
        .headers()
        .get(axum::http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    match declared {
        Some(length) if length > super::MAX_BODY_BYTES as u64 => ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "body_too_large",
            format!(
                "request body of {length} bytes is larger than the limit of {} bytes",
                super::MAX_BODY_BYTES
            ),
        )
        .into_response(),
        _ => next.run(req).await,
    }
}

/// A uuid path segment (`/leases/{id}`, `/schedules/{id}`), as the id it names.
pub struct PathId<T>(pub T);

impl<S: Send + Sync, T: From<Uuid>> FromRequestParts<S> for PathId<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        let axum::extract::Path(raw): axum::extract::Path<String> =
            axum::extract::Path::from_request_parts(parts, state)
                .await
                .map_err(|e| ApiError::bad_request("invalid_path", e.to_string()))?;
        Uuid::parse_str(&raw)
            .map(|id| PathId(T::from(id)))
            .map_err(|_| ApiError::bad_request("invalid_id", format!("`{raw}` is not a uuid")))
    }
}

/// The `{id}` of a job route: a job's uuid, or an experiment name, which means the newest job
/// of that experiment (by submission order). The one place a person's name for a job is
/// resolved; an unknown name is a 404 that says which experiment names are close.
pub struct JobRef(pub JobId);

impl FromRequestParts<AppState> for JobRef {
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &AppState,
    ) -> Result<Self, Self::Rejection> {
        let axum::extract::Path(raw): axum::extract::Path<String> =
            axum::extract::Path::from_request_parts(parts, state)
                .await
                .map_err(|e| ApiError::bad_request("invalid_path", e.to_string()))?;
        JobRef::resolve(state, &raw).await.map(JobRef)
    }
}

impl JobRef {
    /// The job a uuid or an experiment name means (a query's `job=` too).
    pub async fn resolve(state: &AppState, raw: &str) -> Result<JobId, ApiError> {
        let raw = raw.to_owned();
        if let Some(id) = state.scheduler.job_id_of(&raw).await? {
            return Ok(id);
        }
        if state.catalog.experiment(&raw).is_some() {
            return Err(ApiError::not_found(format!(
                "experiment `{raw}` has no job yet: submit it first"
            ))
            .with_details(serde_json::json!({ "experiment": raw })));
        }
        let suggestions = names::did_you_mean(
            &raw,
            state.catalog.experiments.iter().map(|e| e.name.as_str()),
        );
        Err(ApiError::not_found(format!(
            "no job or experiment `{raw}`{}",
            names::phrase(&suggestions)
        ))
        .with_details(serde_json::json!({ "did_you_mean": suggestions })))
    }
}

/// Query parameters, rejected as a JSON error.
pub struct QueryParams<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequestParts<S> for QueryParams<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        axum::extract::Query::<T>::from_request_parts(parts, state)
            .await
            .map(|q| QueryParams(q.0))
            .map_err(|e| ApiError::bad_request("invalid_query", e.body_text()))
    }
}

/// The `Idempotency-Key` header, if sent.
pub struct IdempotencyKey(pub Option<String>);

impl<S: Send + Sync> FromRequestParts<S> for IdempotencyKey {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Self::Rejection> {
        match parts.headers.get("idempotency-key") {
            None => Ok(IdempotencyKey(None)),
            Some(value) => {
                let key = value
                    .to_str()
                    .ok()
                    .filter(|k| {
                        (1..=200).contains(&k.len())
                            && k.bytes().all(|b| b.is_ascii_graphic())
                    })
                    .ok_or_else(|| {
                        ApiError::bad_request(
                            "invalid_idempotency_key",
                            "Idempotency-Key must be 1 to 200 visible ASCII characters, without spaces",
                        )
                    })?;
                Ok(IdempotencyKey(Some(key.to_owned())))
            }
        }
    }
}
