//! A job's links (`job_links`): where its run lives elsewhere, as its trainer reported. One
//! row per job and name; the newest URL wins and outlives the attempt that reported it.

use podq_api::{JobId, JobLink};

use super::db::{self, Conn};
use super::{now_ms, StoreError};

/// The links of `job_id`, by name.
pub async fn of_job(db: &mut Conn, job_id: JobId) -> Result<Vec<JobLink>, StoreError> {
    let rows: Vec<(String, String)> =
        db::query_as("SELECT name, url FROM job_links WHERE job_id = ? ORDER BY name")
            .bind(job_id)
            .fetch_all(db)
            .await?;
    Ok(rows
        .into_iter()
        .map(|(name, url)| JobLink { name, url })
        .collect())
}

/// Keeps `link` as the newest of its name for `job_id`, reported by `attempt`.
pub async fn upsert(
    conn: &mut Conn,
    job_id: JobId,
    attempt: i64,
    link: &JobLink,
) -> Result<(), StoreError> {
    db::query(
        "INSERT INTO job_links (job_id, name, url, attempt, at) VALUES (?, ?, ?, ?, ?) \
         ON CONFLICT (job_id, name) DO UPDATE SET \
         url = excluded.url, attempt = excluded.attempt, at = excluded.at",
    )
    .bind(job_id)
    .bind(&link.name)
    .bind(&link.url)
    .bind(attempt)
    .bind(now_ms())
    .execute(conn)
    .await?;
    Ok(())
}
