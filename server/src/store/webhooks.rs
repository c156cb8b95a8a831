//! The webhook table and the outbox of deliveries (migration 0005).

use super::db::{self, Conn};
use super::rows::EventRow;
use super::{now_ms, StoreError};
use podq_api::JobId;

/// Makes the table match the configured receivers: adds new ones, updates their format and
/// kinds, disables those no longer configured (their history stays). Answers each url's id.
pub async fn sync(
    conn: &mut Conn,
    hooks: &[(String, String, Vec<String>)],
) -> Result<Vec<i64>, StoreError> {
    db::query("UPDATE webhooks SET enabled = 0")
        .execute(conn)
        .await?;
    let mut ids = Vec::with_capacity(hooks.len());
    for (url, format, kinds) in hooks {
        let kinds = serde_json::to_string(kinds)
            .map_err(|e| StoreError::Corrupt(format!("webhook kinds: {e}")))?;
        let id: i64 = db::query_scalar(
            "INSERT INTO webhooks (url, format, kinds_json, enabled) VALUES (?, ?, ?, 1) \
             ON CONFLICT (url) DO UPDATE SET format = excluded.format, \
             kinds_json = excluded.kinds_json, enabled = 1 RETURNING id",
        )
        .bind(url)
        .bind(format)
        .bind(kinds)
        .fetch_one(conn)
        .await?;
        ids.push(id);
    }
    Ok(ids)
}

/// A webhook's oldest undelivered notice, with its event.
pub struct Pending {
    pub delivery: i64,
    pub attempts: i64,
    pub next_attempt_at: i64,
    pub event: EventRow,
    pub experiment: Option<String>,
    pub group: Option<String>,
}

pub async fn head(db: &mut Conn, webhook: i64) -> Result<Option<Pending>, StoreError> {
    type Row = (
        i64,
        i64,
        i64,
        i64,
        i64,
        Option<JobId>,
        Option<String>,
        String,
        String,
        String,
        Option<String>,
        Option<String>,
    );
    let row: Option<Row> = db::query_as(
        "SELECT o.id, o.attempts, o.next_attempt_at, e.id, e.at, e.job_id, e.pod, e.kind, \
         e.message, e.actor, j.experiment, j.group_name FROM webhook_outbox o \
         JOIN events e ON e.id = o.event_id LEFT JOIN jobs j ON j.id = e.job_id \
         WHERE o.webhook_id = ? AND o.delivered_at IS NULL ORDER BY o.id LIMIT 1",
    )
    .bind(webhook)
    .fetch_optional(db)
    .await?;
    Ok(row.map(
        |(
            delivery,
            attempts,
            next,
            id,
            at,
            job_id,
            pod,
            kind,
            message,
            actor,
            experiment,
            group,
        )| {
            Pending {
                delivery,
                attempts,
                next_attempt_at: next,
                event: EventRow {
                    id,
                    at,
                    job_id,
                    pod,
                    kind,
                    message,
                    actor,
                },
                experiment,
                group,
            }
        },
    ))
}

pub async fn delivered(conn: &mut Conn, delivery: i64) -> Result<(), StoreError> {
    db::query(
        "UPDATE webhook_outbox SET delivered_at = ?, attempts = attempts + 1, last_error = NULL \
         WHERE id = ?",
    )
    .bind(now_ms())
    .bind(delivery)
    .execute(conn)
    .await?;
    Ok(())
}

pub async fn failed(
    conn: &mut Conn,
    delivery: i64,
    next_attempt_at: i64,
    error: &str,
) -> Result<(), StoreError> {
    db::query(
        "UPDATE webhook_outbox SET attempts = attempts + 1, next_attempt_at = ?, last_error = ? \
         WHERE id = ?",
    )
    .bind(next_attempt_at)
    .bind(error)
    .bind(delivery)
    .execute(conn)
    .await?;
    Ok(())
}

/// Per webhook: id, url, format, kinds, enabled, pending, delivered, and the oldest pending
/// notice's attempts and last error.
#[derive(sqlx::FromRow)]
pub struct WebhookRow {
    pub id: i64,
    pub url: String,
    pub format: String,
    pub kinds_json: String,
    pub enabled: bool,
    pub pending: i64,
    pub delivered: i64,
    pub head_attempts: Option<i64>,
    pub last_error: Option<String>,
}

pub async fn list(db: &mut Conn) -> Result<Vec<WebhookRow>, StoreError> {
    Ok(db::query_as(
        "SELECT w.id, w.url, w.format, w.kinds_json, (w.enabled <> 0) AS enabled, \
         (SELECT COUNT(*) FROM webhook_outbox o WHERE o.webhook_id = w.id AND o.delivered_at IS NULL) AS pending, \
         (SELECT COUNT(*) FROM webhook_outbox o WHERE o.webhook_id = w.id AND o.delivered_at IS NOT NULL) AS delivered, \
         h.attempts AS head_attempts, h.last_error \
         FROM webhooks w LEFT JOIN webhook_outbox h ON h.id = (SELECT id FROM webhook_outbox \
           WHERE webhook_id = w.id AND delivered_at IS NULL ORDER BY id LIMIT 1) ORDER BY w.id",
    )
    .fetch_all(db)
    .await?)
}

#[derive(sqlx::FromRow)]
pub struct DeliveryRow {
    pub id: i64,
    pub webhook_id: i64,
    pub event_id: i64,
    pub kind: String,
    pub attempts: i64,
    pub next_attempt_at: i64,
    pub delivered_at: Option<i64>,
    pub last_error: Option<String>,
}

/// The newest deliveries (of one webhook, and only pending ones, if asked), newest first.
pub async fn deliveries(
    db: &mut Conn,
    webhook: Option<i64>,
    pending_only: bool,
    limit: i64,
) -> Result<Vec<DeliveryRow>, StoreError> {
    Ok(db::query_as(
        "SELECT o.id, o.webhook_id, o.event_id, e.kind, o.attempts, o.next_attempt_at, \
         o.delivered_at, o.last_error FROM webhook_outbox o JOIN events e ON e.id = o.event_id \
         WHERE (?1 IS NULL OR o.webhook_id = ?1) AND (?2 = 0 OR o.delivered_at IS NULL) \
         ORDER BY o.id DESC LIMIT ?3",
    )
    .bind(webhook)
    .bind(pending_only)
    .bind(limit)
    .fetch_all(db)
    .await?)
}
