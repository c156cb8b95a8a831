//! The audit trail: every event with who made it, filtered by person, job and time. The
//! events table is the trail (each change writes its event in the change's own transaction),
//! so the trail survives restarts, reaches webhooks and moves with `podq migrate`.

use super::db::{Builder, Conn};
use super::StoreError;
use podq_api::JobId;

#[derive(Debug, Clone, sqlx::FromRow)]
pub struct AuditRow {
    pub id: i64,
    pub at: i64,
    pub actor: String,
    pub kind: String,
    pub job_id: Option<JobId>,
    pub pod: Option<String>,
    pub message: String,
    pub address: Option<String>,
    pub request_id: Option<String>,
    pub token_holder: Option<String>,
}

#[derive(Debug, Clone, Default)]
pub struct AuditFilter {
    /// Only changes made by this actor (a person's name, `worker:POD`, `schedule:ID`, `podq`).
    pub by: Option<String>,
    pub job_id: Option<JobId>,
    /// Only changes at or after this time (ms since the epoch).
    pub since_ms: Option<i64>,
    /// Only entries older than this id (the previous page's `next_before`).
    pub before: Option<i64>,
    pub limit: i64,
}

/// A page of the trail, newest first.
pub async fn entries(db: &mut Conn, filter: &AuditFilter) -> Result<Vec<AuditRow>, StoreError> {
    let mut q = Builder::new(
        "SELECT id, at, actor, kind, job_id, pod, message, address, request_id, token_holder \
         FROM events WHERE 1=1"
            .to_owned(),
    );
    if let Some(by) = &filter.by {
        q.push(" AND actor = ").push_bind(by.clone());
    }
    if let Some(job) = &filter.job_id {
        q.push(" AND job_id = ").push_bind(*job);
    }
    if let Some(since) = filter.since_ms {
        q.push(" AND at >= ").push_bind(since);
    }
    if let Some(before) = filter.before {
        q.push(" AND id < ").push_bind(before);
    }
    q.push(" ORDER BY id DESC LIMIT ").push_bind(filter.limit);
    Ok(q.build_query_as::<AuditRow>().fetch_all(db).await?)
}
