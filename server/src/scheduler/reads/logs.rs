//! Trainer logs: the lines workers forward from every host while an attempt runs, kept per
//! attempt and host up to a cap, and read back by job with filters.

use podq_api::{JobId, JobLogs, LogDropped, LogLine};
use regex::Regex;

use crate::scheduler::{Result, Scheduler, SchedulerError};
use crate::store::logs::{self, LogFilter};
use crate::store::{jobs, ms_to_datetime, pods};

pub use podq_api::MAX_LOG_LINE_BYTES as MAX_LINE_BYTES;

/// Lines read from the store per step while filtering by `grep`, and at most per request:
/// a search over a long log answers a partial page with `more` rather than read it all.
const SCAN_STEP: i64 = 2_000;
const SCAN_MAX: i64 = 100_000;

/// What to read of a job's log.
#[derive(Debug, Clone, Default)]
pub struct LogQuery {
    pub attempt: Option<i64>,
    pub host: Option<u32>,
    pub since_ms: Option<i64>,
    pub grep: Option<Regex>,
    /// Lines after this id (the previous page's `next_after`); `None` for the start, or,
    /// with `tail`, for the newest lines.
    pub after: Option<i64>,
    /// With no `after`: only the newest `limit` matching lines, as `tail -n` does.
    pub tail: bool,
    pub limit: i64,
}

/// The job a log read is about: the run whose attempts printed the lines.
#[derive(Debug, Clone)]
pub struct LogSubject {
    pub job_id: JobId,
    pub run_id: JobId,
}

impl Scheduler {
    /// A page of the log of job `id`; the query's attempt and host must exist.
    pub async fn job_logs(&self, id: JobId, query: &LogQuery) -> Result<JobLogs> {
        let subject = self.log_subject(id, query).await?;
        self.log_page(&subject, query).await
    }

    /// The job `id` as its log sees it; checks that the query's attempt and host exist.
    pub(in crate::scheduler) async fn log_subject(
        &self,
        id: JobId,
        query: &LogQuery,
    ) -> Result<LogSubject> {
        let mut db = self.store.read().await?;
        let row = jobs::get_job(&mut db, id)
            .await?
            .ok_or_else(|| SchedulerError::UnknownJob(id))?;
        let attempts = jobs::attempts(&mut db, row.run_id).await?;
        if let Some(wanted) = query.attempt {
            if !attempts.iter().any(|a| a.attempt == wanted) {
                let numbers: Vec<i64> = attempts.iter().map(|a| a.attempt).collect();
                let message = if numbers.is_empty() {
                    format!(
                        "{} has no attempt {wanted}: none has started yet",
                        row.experiment
                    )
                } else {
                    format!(
                        "{} has no attempt {wanted}; its attempts are {}",
                        row.experiment,
                        numbers
                            .iter()
                            .map(i64::to_string)
                            .collect::<Vec<_>>()
                            .join(", ")
                    )
                };
                return Err(SchedulerError::missing("unknown_attempt", message)
                    .with_details(serde_json::json!({ "attempts": numbers })));
            }
        }
        if let Some(host) = query.host {
            // The hosts of the pods its attempts ran on (every pod's before any attempt).
            let pods = pods::list(&mut db).await?;
            let hosts = pods
                .iter()
                .filter(|p| attempts.is_empty() || attempts.iter().any(|a| a.pod == p.name))
                .map(|p| p.hosts)
                .max();
            if let Some(hosts) = hosts.filter(|&n| i64::from(host) >= n) {
                return Err(SchedulerError::missing(
                    "unknown_host",
                    format!(
                        "there is no host {host}: {}'s pod has hosts 0 to {}",
                        row.experiment,
                        hosts - 1
                    ),
                )
                .with_details(serde_json::json!({ "hosts": hosts })));
            }
        }
        Ok(LogSubject {
            job_id: id,
            run_id: row.run_id,
        })
    }

    /// A page of the log of `subject` (from [`Scheduler::log_subject`]).
    pub(in crate::scheduler) async fn log_page(
        &self,
        subject: &LogSubject,
        query: &LogQuery,
    ) -> Result<JobLogs> {
        let mut db = self.store.read().await?;
        let filter = LogFilter {
            attempt: query.attempt,
            host: query.host,
            since_ms: query.since_ms,
        };
        let limit = query.limit.max(1);
        let matches =
            |row: &logs::LogRow| query.grep.as_ref().is_none_or(|re| re.is_match(&row.text));
        let (rows, next_after, more) = match query.after {
            // The newest lines, as `tail -n` shows them.
            None if query.tail => {
                let read = if query.grep.is_some() {
                    SCAN_MAX
                } else {
                    limit
                };
                let newest = logs::newest(&mut db, subject.run_id, &filter, read).await?;
                let next_after = newest.first().map_or(0, |r| r.id);
                let mut rows: Vec<logs::LogRow> = newest
                    .into_iter()
                    .filter(|r| matches(r))
                    .take(limit as usize)
                    .collect();
                rows.reverse();
                (rows, next_after, false)
            }
            after => {
                let mut after = after.unwrap_or(0);
                let mut rows = Vec::new();
                let mut scanned = 0;
                let mut more = false;
                'scan: loop {
                    let step = if query.grep.is_some() {
                        SCAN_STEP
                    } else {
                        limit + 1
                    };
                    let page = logs::page(&mut db, subject.run_id, &filter, after, step).await?;
                    let exhausted = (page.len() as i64) < step;
                    scanned += page.len() as i64;
                    for row in page {
                        if !matches(&row) {
                            after = row.id;
                            continue;
                        }
                        if rows.len() as i64 == limit {
                            more = true;
                            break 'scan;
                        }
                        after = row.id;
                        rows.push(row);
                    }
                    if exhausted {
                        break;
                    }
                    if scanned >= SCAN_MAX {
                        more = true;
                        break;
                    }
                }
                (rows, after, more)
            }
        };
        let lines = rows
            .into_iter()
            .map(|row| LogLine {
                id: row.id,
                attempt: row.attempt,
                host: u32::try_from(row.host).unwrap_or_default(),
                at: ms_to_datetime(row.at),
                text: row.text,
            })
            .collect();
        let dropped = logs::dropped(&mut db, subject.run_id)
            .await?
            .into_iter()
            .filter(|(attempt, host, _)| {
                query.attempt.is_none_or(|a| a == *attempt)
                    && query.host.is_none_or(|h| i64::from(h) == *host)
            })
            .map(|(attempt, host, lines)| LogDropped {
                attempt,
                host: u32::try_from(host).unwrap_or_default(),
                lines,
            })
            .collect();
        Ok(JobLogs {
            job_id: subject.job_id,
            next_after,
            lines,
            more,
            dropped,
            kept_per_host: self.config.log_lines_per_host,
        })
    }

    /// Whether the job's run still may print: false once no attempt will start without a
    /// person. A follower reads once more after this turns false, then stops.
    pub(in crate::scheduler) async fn log_may_grow(&self, subject: &LogSubject) -> Result<bool> {
        let row = jobs::get_job(&mut self.store.read().await?, subject.job_id)
            .await?
            .ok_or_else(|| SchedulerError::UnknownJob(subject.job_id))?;
        Ok(!row.state.is_settled())
    }

    /// Changes each time the store commits: a log follower waits on it.
    pub fn commits(&self) -> tokio::sync::watch::Receiver<u64> {
        self.store.commits()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_line_is_cut_at_a_character_boundary_and_says_so() {
        let mut text = "é".repeat(MAX_LINE_BYTES);
        podq_api::cut_long_log_line(&mut text);
        assert!(text.len() < MAX_LINE_BYTES + 64, "{}", text.len());
        assert!(text.ends_with(&format!(" [... {} more bytes cut by podq]", MAX_LINE_BYTES)));
        let mut short = "loss 0.25".to_owned();
        podq_api::cut_long_log_line(&mut short);
        assert_eq!(short, "loss 0.25");
    }
}
