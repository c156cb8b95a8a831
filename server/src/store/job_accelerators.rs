//! A job's slice types, most preferred first, and the queue of each type they make: each row
//! of a job's list carries what the queue is ordered by (migration 0027), so that a claim for
//! a type walks only the jobs that list it (`leases::queue_head`).

use podq_api::JobId;

use sqlx::AssertSqlSafe;

use super::db::{self, Conn};
use super::job_state;
use super::StoreError;

/// Writes job `id`'s list, most preferred first, with the job's place in the queue, after
/// the job itself.
pub async fn insert(conn: &mut Conn, id: JobId, accelerators: &[String]) -> Result<(), StoreError> {
    for (preference, accelerator) in accelerators.iter().enumerate() {
        db::query(AssertSqlSafe(format!(
            "INSERT INTO job_accelerators (job_id, accelerator, preference, queued, class_rank, \
             queue_head, priority, seq, later_choice) \
             SELECT id, ?, ?, CASE WHEN {} THEN 1 ELSE 0 END, \
             class_rank, queue_head, priority, seq, ? FROM jobs WHERE id = ?",
            job_state::in_queue("")
        )))
        .bind(accelerator)
        .bind(preference as i64)
        .bind(i64::from(preference > 0))
        .bind(id)
        .execute(&mut *conn)
        .await?;
    }
    Ok(())
}

/// The slice types a job may lease, most preferred first.
pub async fn of_job(db: &mut Conn, job: JobId) -> Result<Vec<String>, StoreError> {
    Ok(db::query_scalar(
        "SELECT accelerator FROM job_accelerators WHERE job_id = ? ORDER BY preference",
    )
    .bind(job)
    .fetch_all(db)
    .await?)
}
