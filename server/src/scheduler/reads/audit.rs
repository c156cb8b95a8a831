//! The audit trail as people read it: every change, who made it, newest first.

use podq_api::{AuditEntry, AuditPage, JobId};

use crate::scheduler::{Result, Scheduler};
use crate::store::audit::{self, AuditFilter};
use crate::store::ms_to_datetime;
use crate::team::{Acting, Role};

#[derive(Debug, Clone, Default)]
pub struct AuditQuery {
    pub by: Option<String>,
    pub job: Option<JobId>,
    pub since: Option<chrono::DateTime<chrono::Utc>>,
    pub before: Option<i64>,
    pub limit: i64,
}

impl Scheduler {
    /// A page of the trail as `acting` may read it: the callers' addresses are an admin's.
    pub async fn audit(&self, q: AuditQuery, acting: &Acting) -> Result<AuditPage> {
        let addresses = acting.caller.role.covers(Role::Admin);
        let filter = AuditFilter {
            by: q.by,
            job_id: q.job,
            since_ms: q.since.map(|t| t.timestamp_millis()),
            before: q.before,
            // One more than asked tells whether there is another page.
            limit: q.limit + 1,
        };
        let mut rows = audit::entries(&mut self.store.read().await?, &filter).await?;
        let more = rows.len() as i64 > q.limit;
        rows.truncate(usize::try_from(q.limit).unwrap_or(0));
        let next_before = more.then(|| rows.last().map(|r| r.id)).flatten();
        let entries = rows
            .into_iter()
            .map(|row| {
                Ok(AuditEntry {
                    id: row.id,
                    at: ms_to_datetime(row.at),
                    by: row.actor,
                    action: row.kind,
                    job_id: row.job_id,
                    pod: row.pod,
                    message: row.message,
                    address: row.address.filter(|_| addresses),
                    request_id: row.request_id,
                    token_holder: row.token_holder,
                })
            })
            .collect::<std::result::Result<_, crate::store::StoreError>>()?;
        Ok(AuditPage {
            entries,
            next_before,
        })
    }
}
