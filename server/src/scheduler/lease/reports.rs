//! Storing the metrics and log batches of many workers in one write (see `merge.rs`): each
//! report is fenced, stored and judged as it was alone, with a handful of statements for
//! all of them.

use std::collections::HashMap;
use std::sync::Arc;

use futures::FutureExt;
use podq_api::{HostLogLine, LeaseId, MetricsBatch};

use super::judge;
use super::merge::{Merger, StoreMany};
use super::rung_judge::{self, AutoKeeps};
use crate::catalog::Catalog;
use crate::scheduler::{Result, SchedulerError};
use crate::store::events::{insert_event, Actor};
use crate::store::leases::{fence_many, FencedReport};
use crate::store::{logs, metrics, pod_time, stop_rules, Conn};

/// A metrics batch from the worker holding `lease_id` on `pod`.
pub(in crate::scheduler) struct MetricsReport {
    pub lease_id: LeaseId,
    pub pod: String,
    pub batch: MetricsBatch,
}

/// Answers the stop a rule asked for, if one fired on the batch.
pub(in crate::scheduler) type MetricsMerger = Merger<MetricsReport, Option<String>>;

/// Log lines from the worker holding `lease_id`.
pub(in crate::scheduler) struct LogReport {
    pub lease_id: LeaseId,
    pub lines: Vec<HostLogLine>,
}

/// Answers how many lines were new.
pub(in crate::scheduler) type LogMerger = Merger<LogReport, u64>;

pub(in crate::scheduler) fn metrics_merger(
    catalog: Arc<Catalog>,
    keeps: Arc<AutoKeeps>,
) -> Arc<MetricsMerger> {
    let series_ids = Arc::new(metrics::SeriesIds::default());
    let store_many: StoreMany<MetricsReport, Option<String>> = Arc::new(move |conn, reports| {
        let catalog = Arc::clone(&catalog);
        let keeps = Arc::clone(&keeps);
        let series_ids = Arc::clone(&series_ids);
        async move { store_metrics(conn, &catalog, &keeps, &series_ids, reports).await }.boxed()
    });
    Merger::new(store_many)
}

pub(in crate::scheduler) fn log_merger(cap: i64) -> Arc<LogMerger> {
    let store_many: StoreMany<LogReport, u64> =
        Arc::new(move |conn, reports| async move { store_logs(conn, reports, cap).await }.boxed());
    Merger::new(store_many)
}

/// The reports' indexes in rounds: a lease's k-th report goes in round k, so a round holds
/// each lease (and job) once, and a lease's reports are stored in the order they came.
fn rounds(leases: impl Iterator<Item = LeaseId>) -> Vec<Vec<usize>> {
    let mut rounds: Vec<Vec<usize>> = Vec::new();
    let mut seen: HashMap<LeaseId, usize> = HashMap::new();
    for (index, lease) in leases.enumerate() {
        let round = seen.entry(lease).or_default();
        if rounds.len() <= *round {
            rounds.push(Vec::new());
        }
        rounds[*round].push(index);
        *round += 1;
    }
    rounds
}

/// The round's reports whose lease is still its job's live one; the others are answered
/// `LeaseLost`.
async fn fence<A>(
    conn: &mut Conn,
    round: &[usize],
    lease_of: impl Fn(usize) -> LeaseId,
    answers: &mut [Option<Result<A>>],
) -> Result<Vec<(usize, FencedReport)>> {
    let leases: Vec<LeaseId> = round.iter().map(|&i| lease_of(i)).collect();
    let mut fenced = fence_many(conn, &leases).await?;
    let mut live = Vec::with_capacity(round.len());
    for &index in round {
        let lease = lease_of(index);
        match fenced.remove(&lease) {
            Some(report) => live.push((index, report)),
            None => answers[index] = Some(Err(SchedulerError::LeaseLost(lease))),
        }
    }
    Ok(live)
}

async fn store_metrics(
    conn: &mut Conn,
    catalog: &Catalog,
    keeps: &AutoKeeps,
    series_ids: &metrics::SeriesIds,
    reports: &[MetricsReport],
) -> Result<Vec<Result<Option<String>>>> {
    let mut answers: Vec<Option<Result<Option<String>>>> = std::iter::repeat_with(|| None)
        .take(reports.len())
        .collect();
    for round in rounds(reports.iter().map(|r| r.lease_id)) {
        let live = fence(conn, &round, |i| reports[i].lease_id, &mut answers).await?;
        let points: Vec<metrics::Report> = live
            .iter()
            .map(|(index, fenced)| metrics::Report {
                job_id: fenced.job_id,
                job_seq: fenced.job_seq,
                attempt: fenced.attempt,
                batch: &reports[*index].batch,
            })
            .collect();
        metrics::insert_points_many(conn, series_ids, &points).await?;
        let mut streaks = Vec::new();
        for (index, fenced) in &live {
            let report = &reports[*index];
            if let Some(phases) = &report.batch.phases {
                pod_time::record_phases(conn, report.lease_id, phases).await?;
            }
            let (stop, streak) = judge_report(conn, catalog, report, fenced).await?;
            // A run a rule stops is judged at no rung: it is not going on either way.
            let stop = match stop {
                Some(stop) => Some(stop),
                None => {
                    let (job, judged) = (fenced.job_id, &fenced.judged);
                    rung_judge::judge_batch(conn, catalog, keeps, job, judged, &report.batch)
                        .await?
                }
            };
            if let Some(streak) = streak {
                streaks.push((fenced.job_id, streak.reports, streak.step));
            }
            answers[*index] = Some(Ok(stop));
        }
        // Before the next round's fence, which reads them.
        stop_rules::set_diverged_reports(conn, &streaks).await?;
    }
    Ok(answers
        .into_iter()
        .map(|answer| answer.expect("every report is answered"))
        .collect())
}

/// Judges the run on the batch just stored; a verdict is recorded with an event, and its
/// message is the stop the worker is asked for. Also answers the guard's count if the
/// batch moved it, which the caller stores.
async fn judge_report(
    conn: &mut Conn,
    catalog: &Catalog,
    report: &MetricsReport,
    fenced: &FencedReport,
) -> Result<(Option<String>, Option<judge::Streak>)> {
    let job = &fenced.job_id;
    let judge::Judgement { verdict, streak } =
        judge::judge(conn, catalog, *job, &fenced.judged, &report.batch).await?;
    let Some(verdict) = verdict else {
        return Ok((None, streak));
    };
    let message = verdict.message();
    let fired = stop_rules::Fired {
        rule: &verdict.rule,
        metric: &verdict.metric,
        step: verdict.step,
        value: verdict.value,
        message: &message,
    };
    stop_rules::record_fired(conn, *job, &fired).await?;
    insert_event(
        conn,
        &Actor::podq(),
        Some(*job),
        Some(&report.pod),
        "stop_rule",
        &message,
    )
    .await?;
    Ok((Some(message), streak))
}

async fn store_logs(conn: &mut Conn, reports: &[LogReport], cap: i64) -> Result<Vec<Result<u64>>> {
    let mut answers: Vec<Option<Result<u64>>> = std::iter::repeat_with(|| None)
        .take(reports.len())
        .collect();
    for round in rounds(reports.iter().map(|r| r.lease_id)) {
        let live = fence(conn, &round, |i| reports[i].lease_id, &mut answers).await?;
        let lines: Vec<logs::Report> = live
            .iter()
            .map(|(index, fenced)| logs::Report {
                job_id: fenced.job_id,
                job_seq: fenced.job_seq,
                attempt: fenced.attempt,
                lines: &reports[*index].lines,
            })
            .collect();
        let new = logs::insert_lines_many(conn, &lines, cap).await?;
        for ((index, _), new) in live.into_iter().zip(new) {
            answers[index] = Some(Ok(new));
        }
    }
    Ok(answers
        .into_iter()
        .map(|answer| answer.expect("every report is answered"))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_round_holds_each_lease_once_and_a_leases_reports_keep_their_order() {
        let (a, b) = (LeaseId::new_random(), LeaseId::new_random());
        assert_eq!(
            rounds([a, b, a, a, b].into_iter()),
            vec![vec![0, 1], vec![2, 4], vec![3]]
        );
        assert!(rounds(std::iter::empty()).is_empty());
    }
}
