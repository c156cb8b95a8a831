//! Following a job's log: the lines from a query's cursor on, then each new one as it is
//! committed, until the job settles and every line is sent. `GET /jobs/{id}/logs/follow`
//! shapes what this sends as text or NDJSON.

use std::sync::Arc;
use std::time::Duration;

use podq_api::{JobId, LogLine};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::logs::LogQuery;
use crate::scheduler::{Result, Scheduler};

/// A follower re-checks the job's state at least this often, commits or not.
const FOLLOW_RECHECK: Duration = Duration::from_secs(2);

/// Pages of lines that wait for a slow client at most; a full channel pauses the follower.
const PAGES_IN_FLIGHT: usize = 4;

impl Scheduler {
    /// Follows the log of job `id` from `query`'s cursor on, page by page; the query's
    /// attempt and host must exist. The receiver ends when the job has settled and every
    /// line was sent, on shutdown, or on a read error; dropping it (the client left) ends
    /// the follower at once.
    pub async fn follow_logs(
        self: &Arc<Self>,
        id: JobId,
        mut query: LogQuery,
        shutdown: CancellationToken,
    ) -> Result<mpsc::Receiver<Vec<LogLine>>> {
        let subject = self.log_subject(id, &query).await?;
        let scheduler = Arc::clone(self);
        let mut commits = scheduler.commits();
        let (tx, rx) = mpsc::channel::<Vec<LogLine>>(PAGES_IN_FLIGHT);
        tokio::spawn(async move {
            let mut last_read = false;
            loop {
                // Checked on every page, not only while waiting: a follower sending a long
                // backlog ends as soon as its reader's token stops holding.
                if shutdown.is_cancelled() {
                    return;
                }
                commits.borrow_and_update();
                let page = match scheduler.log_page(&subject, &query).await {
                    Ok(page) => page,
                    Err(e) => {
                        tracing::warn!(job = %subject.job_id, error = %e, "a log follower could not read");
                        return;
                    }
                };
                query.after = Some(page.next_after);
                query.tail = false;
                if !page.lines.is_empty() {
                    tokio::select! {
                        _ = shutdown.cancelled() => return,
                        sent = tx.send(page.lines) => if sent.is_err() { return },
                    }
                }
                if page.more {
                    continue;
                }
                if last_read {
                    return;
                }
                match scheduler.log_may_grow(&subject).await {
                    Ok(true) => {}
                    // Settled: one more read takes the lines committed with the last finish.
                    Ok(false) => {
                        last_read = true;
                        continue;
                    }
                    Err(_) => return,
                }
                tokio::select! {
                    _ = shutdown.cancelled() => return,
                    // The client left: nothing to wait for.
                    _ = tx.closed() => return,
                    changed = commits.changed() => if changed.is_err() { return },
                    _ = tokio::time::sleep(FOLLOW_RECHECK) => {}
                }
            }
        });
        Ok(rx)
    }
}
