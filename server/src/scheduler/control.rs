//! What a person does to a job: cancel it, requeue it, change its priority.

use podq_api::JobState;
use sqlx::sqlite::SqliteConnection;

use crate::http::error::ApiError;
use crate::store::jobs::{self, get_job};
use crate::store::{now_ms, JobRow};

async fn existing(conn: &mut SqliteConnection, id: &str) -> Result<JobRow, ApiError> {
    get_job(&mut *conn, id)
        .await?
        .ok_or_else(|| ApiError::not_found(format!("no job {id}")))
}

/// Cancels a job. A job on a pod keeps its lease until the worker has stopped every host;
/// the answer's second part is that lease, which the next heartbeat tells to stop.
pub async fn cancel(
    conn: &mut SqliteConnection,
    id: &str,
) -> Result<(JobRow, Option<String>), ApiError> {
    let job = existing(conn, id).await?;
    let state = job.state()?;
    if state.is_terminal() {
        return Err(ApiError::conflict(
            "job_finished",
            format!("job {id} is already {state}; there is nothing to cancel"),
        ));
    }
    // A linked job only stops sharing the run; the run itself goes on for the others.
    let lease: Option<String> = if job.same_as.is_some() {
        None
    } else {
        sqlx::query_scalar("SELECT lease_id FROM jobs WHERE id = ?")
            .bind(id)
            .fetch_one(&mut *conn)
            .await?
    };
    sqlx::query(
        "UPDATE jobs SET state = 'cancelled', cancel_requested = (lease_id IS NOT NULL), \
         message = 'cancelled by request', updated_at = ? WHERE id = ?",
    )
    .bind(now_ms())
    .bind(id)
    .execute(&mut *conn)
    .await?;
    let message = match (&job.same_as, &lease) {
        (Some(run), _) => format!("cancelled; stopped sharing the run of job {run}"),
        (None, Some(lease)) => format!("cancelled; the pod holding lease {lease} is told to stop"),
        (None, None) => "cancelled".to_owned(),
    };
    jobs::insert_event(conn, Some(id), None, "cancelled", &message).await?;
    Ok((existing(conn, id).await?, lease))
}

/// Puts a failed, cancelled or held job back in the queue with a fresh failure budget. It
/// resumes from its newest committed checkpoint.
pub async fn requeue(conn: &mut SqliteConnection, id: &str) -> Result<JobRow, ApiError> {
    let job = existing(conn, id).await?;
    let state = job.state()?;
    match state {
        JobState::Failed | JobState::Cancelled | JobState::Held => {}
        JobState::Succeeded => {
            return Err(ApiError::conflict(
                "job_succeeded",
                format!(
                "job {id} succeeded; to train it again submit its experiment with \"force\": true"
            ),
            ))
        }
        _ => {
            return Err(ApiError::conflict(
                "job_active",
                format!("job {id} is {state}; only failed, cancelled or held jobs can be requeued"),
            ))
        }
    }
    let live_lease: Option<String> = sqlx::query_scalar("SELECT lease_id FROM jobs WHERE id = ?")
        .bind(id)
        .fetch_one(&mut *conn)
        .await?;
    if live_lease.is_some() {
        return Err(ApiError::conflict(
            "job_stopping",
            format!("job {id} is still stopping on its pod; requeue it once the pod has let go"),
        ));
    }
    sqlx::query(
        "UPDATE jobs SET state = 'queued', failures = 0, stalled_attempts = 0, not_before = NULL, \
         cancel_requested = 0, message = NULL, updated_at = ? WHERE id = ?",
    )
    .bind(now_ms())
    .bind(id)
    .execute(&mut *conn)
    .await?;
    let from = job
        .resume_from
        .as_deref()
        .map(|r| format!("; it resumes from {r}"))
        .unwrap_or_default();
    jobs::insert_event(
        conn,
        Some(id),
        None,
        "requeued",
        &format!("requeued from {state}{from}"),
    )
    .await?;
    existing(conn, id).await
}

pub async fn set_priority(
    conn: &mut SqliteConnection,
    id: &str,
    priority: i64,
) -> Result<JobRow, ApiError> {
    let job = existing(conn, id).await?;
    sqlx::query("UPDATE jobs SET priority = ?, updated_at = ? WHERE id = ?")
        .bind(priority)
        .bind(now_ms())
        .bind(id)
        .execute(&mut *conn)
        .await?;
    jobs::insert_event(
        conn,
        Some(id),
        None,
        "priority",
        &format!("priority {} -> {priority}", job.priority),
    )
    .await?;
    existing(conn, id).await
}
