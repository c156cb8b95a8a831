//! The hosts' log lines, as the worker holding a lease sends them.

use podq_api::{LeaseId, LogBatch};

use super::reports::LogReport;
use crate::scheduler::{Result, Scheduler};
use crate::team::Acting;

impl Scheduler {
    /// Stores a batch of log lines of the lease's attempt; answers how many were new.
    pub async fn record_logs(
        &self,
        lease_id: LeaseId,
        mut batch: LogBatch,
        acting: &Acting,
    ) -> Result<u64> {
        self.held_lease(lease_id, acting)?;
        for line in &mut batch.lines {
            podq_api::cut_long_log_line(&mut line.text);
        }
        let report = LogReport {
            lease_id,
            lines: batch.lines,
        };
        let new = self.log_reports.submit(&self.store, report).await?;
        self.telemetry.log_lines.inc_by(new);
        Ok(new)
    }
}
