//! The recoveries: a record per interruption of a run, and their summary per slice type,
//! zone and cause (store/recoveries.rs derives them).

use std::sync::Arc;

use podq_api::{JobId, RecoveriesReport, Recovery};

use crate::scheduler::{Result, Scheduler};
use crate::store::recoveries::{self, SUMMARY_WINDOW};

/// The records a request may ask for at most.
pub const MAX_RECOVERIES: i64 = 1_000;

impl Scheduler {
    /// The newest [`SUMMARY_WINDOW`] records, newest first: what the summary, the
    /// `podq_recovery_seconds` histograms, the plan's restarts and a `spares: auto` pool's
    /// wait are made of. A join over up to that many attempts, made once per change
    /// (`read_cache.rs`), not once per scrape, plan or pool report.
    pub(in crate::scheduler) async fn recent_recoveries(&self) -> Result<Arc<Vec<Recovery>>> {
        self.read_cache
            .recoveries
            .get_or(|| async {
                let records =
                    recoveries::list(&mut self.store.read().await?, None, SUMMARY_WINDOW).await?;
                Ok(Arc::new(records))
            })
            .await
    }

    /// The newest `limit` records (of `job`, if given), and the summary over the newest
    /// [`SUMMARY_WINDOW`] records of every job.
    pub async fn recoveries(&self, job: Option<JobId>, limit: i64) -> Result<RecoveriesReport> {
        let limit = limit.clamp(1, MAX_RECOVERIES);
        let all = self.recent_recoveries().await?;
        let records = match job {
            Some(job) => recoveries::list(&mut self.store.read().await?, Some(job), limit).await?,
            None => all.iter().take(limit as usize).cloned().collect(),
        };
        Ok(RecoveriesReport {
            summary: recoveries::summarize(&all),
            recoveries: records,
        })
    }
}
