//! Checkpoints the workers found in the checkpoint store, and where a job resumes.

use super::db::{self, Conn};
use podq_api::CheckpointReport;
use podq_api::JobId;

use super::events::{insert_event, Actor};
use super::rows::CheckpointRow;
use super::{now_ms, StoreError};

/// Records what attempt `attempt` of `job_id` saw. A checkpoint already known committed is
/// never downgraded; the newest committed one becomes where the next attempt resumes.
pub async fn record(
    conn: &mut Conn,
    actor: &Actor,
    job_id: JobId,
    attempt: i64,
    checkpoints: &[CheckpointReport],
) -> Result<(), StoreError> {
    for cp in checkpoints {
        let known: Option<bool> = db::query_scalar(
            "SELECT committed <> 0 FROM checkpoints WHERE job_id = ? AND step = ?",
        )
        .bind(job_id)
        .bind(cp.step)
        .fetch_optional(conn)
        .await?;
        if known == Some(true) || known == Some(cp.committed) {
            continue;
        }
        db::query(
            "INSERT INTO checkpoints (job_id, step, uri, committed, attempt, seen_at) \
             VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (job_id, step) DO UPDATE SET \
             uri = excluded.uri, committed = excluded.committed, attempt = excluded.attempt, \
             seen_at = excluded.seen_at",
        )
        .bind(job_id)
        .bind(cp.step)
        .bind(&cp.uri)
        .bind(cp.committed)
        .bind(attempt)
        .bind(now_ms())
        .execute(conn)
        .await?;
        if cp.committed {
            db::query(
                "UPDATE jobs SET resume_from = ?, resume_step = ?, updated_at = ? \
                 WHERE id = ? AND COALESCE(resume_step, -1) < ?",
            )
            .bind(&cp.uri)
            .bind(cp.step)
            .bind(now_ms())
            .bind(job_id)
            .bind(cp.step)
            .execute(conn)
            .await?;
            insert_event(
                conn,
                actor,
                Some(job_id),
                None,
                "checkpoint",
                &podq_api::bounded_event_message(&format!(
                    "committed checkpoint at step {}: {}",
                    cp.step, cp.uri
                )),
            )
            .await?;
        }
    }
    Ok(())
}

/// The job's own checkpoint directory: every checkpoint of it lies directly in it.
pub async fn dir_of(conn: &mut Conn, job_id: JobId) -> Result<String, StoreError> {
    Ok(
        db::query_scalar("SELECT checkpoint_dir FROM jobs WHERE id = ?")
            .bind(job_id)
            .fetch_one(conn)
            .await?,
    )
}

pub async fn of_job(db: &mut Conn, job_id: JobId) -> Result<Vec<CheckpointRow>, StoreError> {
    Ok(db::query_as::<CheckpointRow>(
        "SELECT step, uri, (committed <> 0) AS committed, attempt, seen_at FROM checkpoints WHERE job_id = ? ORDER BY step",
    )
    .bind(job_id)
    .fetch_all(db)
    .await?)
}
