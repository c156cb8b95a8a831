//! The compute grant, and the pod time spent since it began.

use super::db::{self, Conn};
use std::collections::BTreeMap;

use super::{now_ms, StoreError};

pub struct GrantRow {
    pub start_ms: i64,
    pub end_ms: i64,
    pub pod_hours: BTreeMap<String, f64>,
}

pub async fn get(db: &mut Conn) -> Result<Option<GrantRow>, StoreError> {
    let row: Option<(i64, i64, String)> =
        db::query_as("SELECT start_at, end_at, pod_hours_json FROM grant_terms WHERE id = 1")
            .fetch_optional(db)
            .await?;
    row.map(|(start_ms, end_ms, json)| {
        Ok(GrantRow {
            start_ms,
            end_ms,
            pod_hours: serde_json::from_str(&json)
                .map_err(|e| StoreError::Corrupt(format!("the grant's pod_hours: {e}")))?,
        })
    })
    .transpose()
}

pub async fn put(conn: &mut Conn, grant: &GrantRow) -> Result<(), StoreError> {
    let json = serde_json::to_string(&grant.pod_hours)
        .map_err(|e| StoreError::Corrupt(format!("the grant's pod_hours: {e}")))?;
    db::query(
        "INSERT INTO grant_terms (id, start_at, end_at, pod_hours_json, updated_at) \
         VALUES (1, ?, ?, ?, ?) ON CONFLICT (id) DO UPDATE SET start_at = excluded.start_at, \
         end_at = excluded.end_at, pod_hours_json = excluded.pod_hours_json, \
         updated_at = excluded.updated_at",
    )
    .bind(grant.start_ms)
    .bind(grant.end_ms)
    .bind(json)
    .bind(now_ms())
    .execute(conn)
    .await?;
    Ok(())
}

/// Pod-hours of the attempts on pods of `accelerator` that started since `since_ms` (a
/// running one counted until now).
pub async fn hours_used(
    db: &mut Conn,
    accelerator: &str,
    since_ms: i64,
) -> Result<f64, StoreError> {
    let ms: i64 = db::query_scalar(
        "SELECT CAST(COALESCE(SUM(COALESCE(a.ended_at, ?2) - a.started_at), 0) AS BIGINT) FROM attempts a \
         WHERE a.started_at >= ?1 AND a.accelerator = ?3",
    )
    .bind(since_ms)
    .bind(now_ms())
    .bind(accelerator)
    .fetch_one(db)
    .await?;
    Ok(ms.max(0) as f64 / 3_600_000.0)
}
