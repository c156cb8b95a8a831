//! Every error answer is the API's JSON error body, including the ones the HTTP layers
//! make themselves before a handler runs: a method a path does not take (405, empty
//! body), a path segment that is not UTF-8 or a body that never arrived (plain text).

use axum::body::Body;
use axum::extract::Request;
use axum::http::{header, HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::error::ApiError;

/// How much of a plain-text error is kept as the message.
const MAX_MESSAGE: usize = 64 * 1024;

pub async fn json_errors(request: Request, next: Next) -> Response {
    let response = next.run(request).await;
    let status = response.status();
    if !(status.is_client_error() || status.is_server_error()) || is_json(&response) {
        return response;
    }
    let allow = response.headers().get(header::ALLOW).cloned();
    let text = match axum::body::to_bytes(response.into_body(), MAX_MESSAGE).await {
        Ok(bytes) => String::from_utf8_lossy(&bytes).trim().to_owned(),
        Err(_) => String::new(),
    };
    let mut json =
        ApiError::new(status, code_of(status), message_of(status, text, &allow)).into_response();
    if let Some(allow) = allow {
        json.headers_mut().insert(header::ALLOW, allow);
    }
    json
}

fn is_json(response: &Response<Body>) -> bool {
    response
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json"))
}

fn code_of(status: StatusCode) -> &'static str {
    match status {
        StatusCode::BAD_REQUEST => "bad_request",
        StatusCode::NOT_FOUND => "not_found",
        StatusCode::METHOD_NOT_ALLOWED => "method_not_allowed",
        StatusCode::REQUEST_TIMEOUT => "request_timeout",
        StatusCode::PAYLOAD_TOO_LARGE => "too_large",
        StatusCode::UNSUPPORTED_MEDIA_TYPE => "unsupported_media_type",
        StatusCode::UNPROCESSABLE_ENTITY => "invalid",
        s if s.is_server_error() => "internal",
        _ => "error",
    }
}

fn message_of(status: StatusCode, text: String, allow: &Option<HeaderValue>) -> String {
    if status == StatusCode::METHOD_NOT_ALLOWED {
        let allowed = allow
            .as_ref()
            .and_then(|v| v.to_str().ok())
            .unwrap_or("another method");
        return format!("this path does not take that method; it takes {allowed}");
    }
    if text.is_empty() {
        status
            .canonical_reason()
            .unwrap_or("request refused")
            .to_owned()
    } else {
        text
    }
}
