//! Sends what an attempt produces to the server: metric batches (every `flush` or every
//! `max_points`, whichever comes first), the hosts' log lines (every `flush`) and
//! checkpoints found in the store. Nothing is dropped while the server is away: unsent
//! points stay buffered and calls are retried; log lines are held up to a cap.

use std::collections::{BTreeMap, HashSet};
use std::time::Duration;

use podq_api::LeaseId;
use podq_api::{
    CheckpointReport, CheckpointsBatch, JobLink, LinksBatch, LogBatch, MetricStep, MetricsBatch,
    TrainerPhases,
};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::attempt::log_tail::LogTail;
use crate::checkpoints::CheckpointStore;
use crate::client::{CallError, ServerClient};

/// Log lines per call at most, and about this much text: well under the server's 4 MiB
/// body limit, so a batch is never refused for its size.
const LOG_BATCH: usize = 5_000;
const LOG_BATCH_BYTES: usize = 1024 * 1024;
const LOG_BATCHES_PER_FLUSH: usize = 8;

pub enum Report {
    Metrics {
        step: i64,
        values: BTreeMap<String, f64>,
    },
    /// The trainer said it saved one: look at the store now rather than at the next scan.
    CheckpointHint,
    /// The trainer's phase totals changed: they ride the next metrics batch.
    Phases(TrainerPhases),
    /// A link the trainer reported (already checked): sent at once.
    Link(JobLink),
}

pub struct ReporterSettings {
    pub flush: Duration,
    pub max_points: usize,
    pub scan: Duration,
}

/// What the reporter does when the server answers a batch with a stop order (a stop rule or
/// the divergence guard fired on it): the attempt stops as for the heartbeat's order, without
/// waiting for the next heartbeat.
pub type OnStop = Box<dyn Fn(String) + Send + Sync>;

/// How the reporter passes on what the server's answers mean for the attempt.
pub struct Answers {
    /// Cancelled if the server says the lease is gone.
    pub lease_lost: CancellationToken,
    pub on_stop: OnStop,
}

/// Runs until `reports` closes, then flushes what is left and scans the store once more.
pub async fn run(
    client: ServerClient,
    lease: LeaseId,
    store: Option<CheckpointStore>,
    log: LogTail,
    settings: ReporterSettings,
    mut reports: mpsc::UnboundedReceiver<Report>,
    answers: Answers,
) {
    let Answers {
        lease_lost,
        on_stop,
    } = answers;
    let mut buffer = Pending::default();
    let mut points = 0usize;
    let mut reported: HashSet<(i64, bool)> = HashSet::new();
    let mut flush_timer = tokio::time::interval(settings.flush);
    let mut scan_timer = tokio::time::interval(settings.scan);
    loop {
        tokio::select! {
            report = reports.recv() => match report {
                Some(Report::Metrics { step, values }) => {
                    points += values.len();
                    buffer.points.push(MetricStep { step, values });
                    if points >= settings.max_points {
                        send_metrics(&client, lease, &mut buffer, &mut points, &lease_lost, &on_stop).await;
                    }
                }
                Some(Report::Phases(phases)) => buffer.phases = Some(phases),
                Some(Report::Link(link)) => send_link(&client, lease, link, &lease_lost).await,
                Some(Report::CheckpointHint) => {
                    scan(&client, lease, store.as_ref(), &mut reported, &lease_lost).await;
                }
                None => break,
            },
            _ = flush_timer.tick() => {
                send_logs(&client, lease, &log, &lease_lost).await;
                send_metrics(&client, lease, &mut buffer, &mut points, &lease_lost, &on_stop).await;
            }
            _ = scan_timer.tick() => scan(&client, lease, store.as_ref(), &mut reported, &lease_lost).await,
        }
    }
    send_logs(&client, lease, &log, &lease_lost).await;
    send_metrics(
        &client,
        lease,
        &mut buffer,
        &mut points,
        &lease_lost,
        &on_stop,
    )
    .await;
    scan(&client, lease, store.as_ref(), &mut reported, &lease_lost).await;
}

/// Sends the lines the hosts printed since the last call, in batches: at most
/// `LOG_BATCHES_PER_FLUSH` of them, so a backlog (a worker that reattached and takes every
/// host's log again) does not hold up metrics; the rest go at the next flush.
async fn send_logs(
    client: &ServerClient,
    lease: LeaseId,
    log: &LogTail,
    lease_lost: &CancellationToken,
) {
    for _ in 0..LOG_BATCHES_PER_FLUSH {
        if lease_lost.is_cancelled() {
            return;
        }
        let (lines, dropped) = log.take_unsent(LOG_BATCH, LOG_BATCH_BYTES);
        if dropped > 0 {
            tracing::warn!(%lease, dropped, "log lines dropped while the server was away");
        }
        if lines.is_empty() {
            return;
        }
        let more = log.has_unsent();
        let batch = LogBatch { lines };
        match client.logs(lease, &batch).await {
            Ok(()) => {}
            Err(CallError::LeaseLost(message)) => {
                tracing::warn!(%lease, "{message}");
                lease_lost.cancel();
                return;
            }
            Err(CallError::Shutdown) => {
                log.put_back(batch.lines);
                return;
            }
            Err(e) => {
                tracing::error!(%lease, error = %e, "log batch refused; dropping it");
            }
        }
        if !more {
            return;
        }
    }
}

/// What waits for the next metrics call.
#[derive(Default)]
struct Pending {
    points: Vec<MetricStep>,
    phases: Option<TrainerPhases>,
}

async fn send_metrics(
    client: &ServerClient,
    lease: LeaseId,
    buffer: &mut Pending,
    points: &mut usize,
    lease_lost: &CancellationToken,
    on_stop: &OnStop,
) {
    if (buffer.points.is_empty() && buffer.phases.is_none()) || lease_lost.is_cancelled() {
        return;
    }
    let batch = MetricsBatch {
        points: std::mem::take(&mut buffer.points),
        phases: buffer.phases.take(),
    };
    match client.metrics(lease, &batch).await {
        Ok(stop) => {
            *points = 0;
            if let Some(order) = stop {
                on_stop(order.reason);
            }
        }
        Err(CallError::LeaseLost(message)) => {
            tracing::warn!(%lease, "{message}");
            lease_lost.cancel();
        }
        Err(CallError::Shutdown) => {
            buffer.points = batch.points;
            buffer.phases = batch.phases;
        }
        Err(e) => {
            tracing::error!(%lease, error = %e, "metrics batch refused; dropping it");
            *points = 0;
        }
    }
}

/// A link is rare (one per attempt, as a rule): it goes alone, retried like every call
/// while the server is away. One the server refuses is logged and dropped: a link never
/// stops a run.
async fn send_link(
    client: &ServerClient,
    lease: LeaseId,
    link: JobLink,
    lease_lost: &CancellationToken,
) {
    if lease_lost.is_cancelled() {
        return;
    }
    let name = link.name.clone();
    match client.links(lease, &LinksBatch { links: vec![link] }).await {
        Ok(()) => {}
        Err(CallError::LeaseLost(message)) => {
            tracing::warn!(%lease, "{message}");
            lease_lost.cancel();
        }
        Err(e) => tracing::warn!(%lease, link = %name, error = %e, "link not accepted"),
    }
}

async fn scan(
    client: &ServerClient,
    lease: LeaseId,
    store: Option<&CheckpointStore>,
    reported: &mut HashSet<(i64, bool)>,
    lease_lost: &CancellationToken,
) {
    let Some(store) = store else { return };
    if lease_lost.is_cancelled() {
        return;
    }
    let found = match store.list().await {
        Ok(found) => found,
        Err(e) => {
            tracing::warn!(error = %format!("{e:#}"), "cannot list checkpoints");
            return;
        }
    };
    let new: Vec<CheckpointReport> = found
        .into_iter()
        .filter(|c| !reported.contains(&(c.step, c.committed)))
        .map(|c| CheckpointReport {
            step: c.step,
            uri: c.uri,
            committed: c.committed,
        })
        .collect();
    if new.is_empty() {
        return;
    }
    let keys: Vec<(i64, bool)> = new.iter().map(|c| (c.step, c.committed)).collect();
    match client
        .checkpoints(lease, &CheckpointsBatch { checkpoints: new })
        .await
    {
        Ok(()) => reported.extend(keys),
        Err(CallError::LeaseLost(message)) => {
            tracing::warn!(%lease, "{message}");
            lease_lost.cancel();
        }
        Err(e) => tracing::warn!(%lease, error = %e, "checkpoint report not accepted"),
    }
}
