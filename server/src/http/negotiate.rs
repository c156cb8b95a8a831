//! Answers that are a plain-text table for a person with curl and JSON for a program.

use axum::http::{header, HeaderMap};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Serialize;

/// A body that reads as a table.
pub trait Table {
    fn table(&self) -> String;
}

/// JSON only when the caller asks for it; `curl` sends `*/*` and gets the table.
pub fn wants_json(headers: &HeaderMap) -> bool {
    headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|accept| accept.contains("application/json"))
}

pub fn json_or_table<T: Serialize + Table>(headers: &HeaderMap, body: &T) -> Response {
    if wants_json(headers) {
        return Json(body).into_response();
    }
    (
        [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
        body.table(),
    )
        .into_response()
}
