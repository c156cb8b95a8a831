//! Where the hosts' lines go: every line to the log tail; host 0's report lines are parsed,
//! their metric values go straight to the reporter, and only the progress they show goes to
//! the attempt's loop.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use podq_api::JobLink;
use tokio::sync::mpsc;

use super::log_tail::LogTail;
use super::watch::started_over;
use crate::agent::hub::HostLine;
use crate::events::{parse_line, PhaseEdge, TrainerEvent, TrainerPhase};
use crate::report::Report;

/// What host 0's report lines tell the attempt's loop: that it progressed, not the values.
#[derive(Debug)]
pub enum Progress {
    /// A metrics line of this step.
    Step(i64),
    /// The trainer said it saved a checkpoint.
    Checkpoint,
    /// The start or end of a phase, timed when the line was read off the agent's stream.
    Phase {
        phase: TrainerPhase,
        edge: PhaseEdge,
        received: tokio::time::Instant,
    },
    /// The SDK's sum of JAX's compile time before the first step.
    Compiled(f64),
}

/// Where host 0's report lines go.
#[derive(Clone)]
pub struct Routes {
    pub progress: mpsc::UnboundedSender<Progress>,
    /// The reporter's channel. Weak: the reporter ends once the attempt lets go of it, even
    /// if lines still come.
    pub reports: mpsc::WeakUnboundedSender<Report>,
    /// The step the trainer was given to resume from.
    pub resume_step: Option<i64>,
    /// Set once the attempt's loop decided to stop.
    pub stopping: Arc<AtomicBool>,
}

impl Routes {
    pub fn new(
        progress: mpsc::UnboundedSender<Progress>,
        reports: &mpsc::UnboundedSender<Report>,
    ) -> Routes {
        Routes {
            progress,
            reports: reports.downgrade(),
            resume_step: None,
            stopping: Arc::default(),
        }
    }

    fn report(&self, report: Report) {
        if let Some(reports) = self.reports.upgrade() {
            let _ = reports.send(report);
        }
    }
}

/// Passes the agents' lines on until the hub ends the stream.
pub(super) async fn read(
    mut lines: mpsc::UnboundedReceiver<HostLine>,
    log: LogTail,
    routes: Routes,
) {
    let mut metrics_seen = false;
    while let Some(HostLine { host, offset, line }) = lines.recv().await {
        if host == 0 {
            match parse_line(&line) {
                Some(Ok(event)) => {
                    let progress = match event {
                        TrainerEvent::Metrics { step, values } => {
                            // The first step below the resume step stops the attempt (a
                            // silent restart): it is not sent to overwrite the run's series.
                            // Once the attempt is stopping, lines go as they come.
                            let first = !std::mem::replace(&mut metrics_seen, true);
                            if !(first
                                && started_over(routes.resume_step, step)
                                && !routes.stopping.load(Ordering::SeqCst))
                            {
                                routes.report(Report::Metrics { step, values });
                            }
                            Progress::Step(step)
                        }
                        TrainerEvent::Checkpoint { .. } => Progress::Checkpoint,
                        TrainerEvent::Compiled { seconds } => Progress::Compiled(seconds),
                        TrainerEvent::Phase { phase, edge, .. } => Progress::Phase {
                            phase,
                            edge,
                            received: tokio::time::Instant::now(),
                        },
                        // Not progress: it goes to the reporter only. A bad one is skipped
                        // with a warning and kept as log, like an unreadable report line.
                        TrainerEvent::Link { name, url } => {
                            let link = JobLink { name, url };
                            match link.problem() {
                                Some(problem) => {
                                    tracing::warn!(host, "PODQ link line ignored: {problem}");
                                    log.push(host, offset, line);
                                }
                                None => routes.report(Report::Link(link)),
                            }
                            continue;
                        }
                    };
                    let _ = routes.progress.send(progress);
                    continue;
                }
                Some(Err(problem)) => tracing::warn!(host, "{problem}"),
                None => {}
            }
        }
        log.push(host, offset, line);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(host: u32, offset: u64, text: &str) -> HostLine {
        HostLine {
            host,
            offset,
            line: text.to_owned(),
        }
    }

    #[tokio::test]
    async fn metric_values_go_to_the_reporter_and_only_progress_to_the_loop() {
        let (lines_tx, lines_rx) = mpsc::unbounded_channel();
        let (progress_tx, mut progress_rx) = mpsc::unbounded_channel();
        let (report_tx, mut report_rx) = mpsc::unbounded_channel();
        let routes = Routes {
            resume_step: Some(100),
            ..Routes::new(progress_tx, &report_tx)
        };
        let log = LogTail::default();
        for sent in [
            // The first step is below the resume step: the loop stops on it (a silent
            // restart), and its values are not sent.
            line(
                0,
                0,
                r#"PODQ {"event":"metrics","step":3,"values":{"loss":1.0}}"#,
            ),
            line(
                0,
                1,
                r#"PODQ {"event":"metrics","step":4,"values":{"loss":0.9}}"#,
            ),
            line(
                0,
                2,
                r#"PODQ {"event":"checkpoint","step":4,"uri":"gs://b/4"}"#,
            ),
            line(
                0,
                3,
                r#"PODQ {"event":"phase","phase":"save","edge":"start"}"#,
            ),
            line(1, 0, "hello"),
            // Only host 0 reports.
            line(1, 1, r#"PODQ {"event":"metrics","step":9,"values":{}}"#),
        ] {
            lines_tx.send(sent).unwrap();
        }
        drop(lines_tx);
        read(lines_rx, log.clone(), routes).await;

        let mut progress = Vec::new();
        while let Ok(p) = progress_rx.try_recv() {
            progress.push(p);
        }
        assert!(matches!(
            progress.as_slice(),
            [
                Progress::Step(3),
                Progress::Step(4),
                Progress::Checkpoint,
                Progress::Phase {
                    phase: TrainerPhase::Save,
                    edge: PhaseEdge::Start,
                    ..
                }
            ]
        ));
        let mut reported = Vec::new();
        while let Ok(report) = report_rx.try_recv() {
            if let Report::Metrics { step, .. } = report {
                reported.push(step);
            }
        }
        assert_eq!(reported, [4]);
        let tail = log.text();
        assert!(tail.contains("[host 1] hello") && tail.contains("[host 1] PODQ"));
        assert!(!tail.contains("[host 0]"));
    }

    #[tokio::test]
    async fn a_link_goes_to_the_reporter_and_a_bad_one_to_the_log() {
        let (lines_tx, lines_rx) = mpsc::unbounded_channel();
        let (progress_tx, mut progress_rx) = mpsc::unbounded_channel();
        let (report_tx, mut report_rx) = mpsc::unbounded_channel();
        let routes = Routes::new(progress_tx, &report_tx);
        let log = LogTail::default();
        for sent in [
            line(
                0,
                0,
                r#"PODQ {"event":"link","name":"wandb","url":"https://wandb.ai/t/p/runs/j"}"#,
            ),
            line(
                0,
                1,
                r#"PODQ {"event":"link","name":"wandb","url":"javascript:alert(1)"}"#,
            ),
            line(
                0,
                2,
                r#"PODQ {"event":"link","name":"a b","url":"https://x"}"#,
            ),
            // Only host 0 reports.
            line(
                1,
                0,
                r#"PODQ {"event":"link","name":"tb","url":"https://tb/1"}"#,
            ),
        ] {
            lines_tx.send(sent).unwrap();
        }
        drop(lines_tx);
        read(lines_rx, log.clone(), routes).await;

        assert!(progress_rx.try_recv().is_err(), "a link is not progress");
        let mut links = Vec::new();
        while let Ok(report) = report_rx.try_recv() {
            if let Report::Link(link) = report {
                links.push((link.name, link.url));
            }
        }
        assert_eq!(
            links,
            [("wandb".to_owned(), "https://wandb.ai/t/p/runs/j".to_owned())]
        );
        let tail = log.text();
        assert!(tail.contains("javascript:alert(1)"), "{tail}");
        assert!(tail.contains(r#""name":"a b""#), "{tail}");
        assert!(!tail.contains("runs/j"), "{tail}");
        assert!(tail.contains("[host 1] PODQ"), "{tail}");
    }

    #[tokio::test]
    async fn once_the_attempt_is_stopping_every_line_is_sent() {
        let (lines_tx, lines_rx) = mpsc::unbounded_channel();
        let (progress_tx, _progress_rx) = mpsc::unbounded_channel();
        let (report_tx, mut report_rx) = mpsc::unbounded_channel();
        let routes = Routes {
            resume_step: Some(100),
            ..Routes::new(progress_tx, &report_tx)
        };
        routes.stopping.store(true, Ordering::SeqCst);
        lines_tx
            .send(line(
                0,
                0,
                r#"PODQ {"event":"metrics","step":3,"values":{}}"#,
            ))
            .unwrap();
        drop(lines_tx);
        read(lines_rx, LogTail::default(), routes).await;
        assert!(matches!(
            report_rx.try_recv(),
            Ok(Report::Metrics { step: 3, .. })
        ));
        // The reporter's channel closes with the attempt's sender, whatever the reader holds.
        drop(report_tx);
        assert!(report_rx.recv().await.is_none());
    }
}
