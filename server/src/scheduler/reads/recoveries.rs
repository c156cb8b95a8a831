//! The recoveries: a record per interruption of a run, and their summary per slice type,
//! zone and cause (store/recoveries.rs derives them).

use futures::FutureExt;
use podq_api::{JobId, RecoveriesReport};

use crate::scheduler::{Result, Scheduler};
use crate::store::recoveries::{self, SUMMARY_WINDOW};
use crate::store::StoreError;

/// The records a request may ask for at most.
pub const MAX_RECOVERIES: i64 = 1_000;

impl Scheduler {
    /// The newest `limit` records (of `job`, if given), and the summary over the newest
    /// [`SUMMARY_WINDOW`] records of every job, from one snapshot.
    pub async fn recoveries(&self, job: Option<JobId>, limit: i64) -> Result<RecoveriesReport> {
        let limit = limit.clamp(1, MAX_RECOVERIES);
        let (records, all) = self
            .store
            .read_snapshot(|conn| {
                async move {
                    let all = recoveries::list(conn, None, SUMMARY_WINDOW).await?;
                    let records = match job {
                        Some(job) => recoveries::list(conn, Some(job), limit).await?,
                        None => all.iter().take(limit as usize).cloned().collect(),
                    };
                    Ok::<_, StoreError>((records, all))
                }
                .boxed()
            })
            .await?;
        Ok(RecoveriesReport {
            summary: recoveries::summarize(&all),
            recoveries: records,
        })
    }
}
