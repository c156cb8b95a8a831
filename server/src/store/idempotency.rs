//! Idempotency keys: a POST retried with the same `Idempotency-Key` gets the first answer.

use super::db::{self, Conn};
use super::{now_ms, StoreError};

pub struct StoredAnswer {
    pub request_sha256: String,
    pub status: u16,
    pub response_json: String,
}

pub async fn find(
    conn: &mut Conn,
    key: &str,
    route: &str,
) -> Result<Option<StoredAnswer>, StoreError> {
    let row: Option<(String, i64, String)> = db::query_as(
        "SELECT request_sha256, status, response_json FROM idempotency_keys WHERE key = ? AND route = ?",
    )
    .bind(key)
    .bind(route)
    .fetch_optional(conn)
    .await?;
    Ok(
        row.map(|(request_sha256, status, response_json)| StoredAnswer {
            request_sha256,
            status: u16::try_from(status).unwrap_or(200),
            response_json,
        }),
    )
}

pub async fn remember(
    conn: &mut Conn,
    key: &str,
    route: &str,
    answer: &StoredAnswer,
) -> Result<(), StoreError> {
    db::query(
        "INSERT INTO idempotency_keys (key, route, request_sha256, status, response_json, created_at) \
         VALUES (?, ?, ?, ?, ?, ?)",
    )
    .bind(key)
    .bind(route)
    .bind(&answer.request_sha256)
    .bind(i64::from(answer.status))
    .bind(&answer.response_json)
    .bind(now_ms())
    .execute(conn)
    .await?;
    Ok(())
}
