//! SQL about events: what happened to a job or a pod, in the order it happened. Every other
//! file that changes state writes its event here, so this file imports none of them.

use super::db::{self, Conn};
use super::rows::EventRow;
use super::{now_ms, StoreError};

pub async fn insert_event(
    conn: &mut Conn,
    job_id: Option<&str>,
    pod: Option<&str>,
    kind: &str,
    message: &str,
) -> Result<(), StoreError> {
    db::query("INSERT INTO events (at, job_id, pod, kind, message) VALUES (?, ?, ?, ?, ?)")
        .bind(now_ms())
        .bind(job_id)
        .bind(pod)
        .bind(kind)
        .bind(message)
        .execute(conn)
        .await?;
    Ok(())
}

pub(crate) const JOB_EVENTS: &str = "SELECT id, at, job_id, pod, kind, message FROM events \
     WHERE job_id = ? AND id > ? ORDER BY id LIMIT ?";

pub async fn job_events(
    db: &mut Conn,
    job_id: &str,
    after_id: i64,
    limit: i64,
) -> Result<Vec<EventRow>, StoreError> {
    Ok(db::query_as::<EventRow>(JOB_EVENTS)
        .bind(job_id)
        .bind(after_id)
        .bind(limit)
        .fetch_all(db)
        .await?)
}

/// The id of the newest event, 0 when there is none.
pub async fn last_event_id(db: &mut Conn) -> Result<i64, StoreError> {
    Ok(db::query_scalar("SELECT COALESCE(MAX(id), 0) FROM events")
        .fetch_one(db)
        .await?)
}

pub async fn recent_events(
    db: &mut Conn,
    after_id: i64,
    limit: i64,
) -> Result<Vec<EventRow>, StoreError> {
    Ok(db::query_as::<EventRow>(
        "SELECT id, at, job_id, pod, kind, message FROM events WHERE id > ? ORDER BY id LIMIT ?",
    )
    .bind(after_id)
    .bind(limit)
    .fetch_all(db)
    .await?)
}
