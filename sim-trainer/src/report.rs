//! Everything the trainer writes: `PODQ {json}` report lines on stdout (process 0 only) and
//! human log lines on stderr.

use std::collections::BTreeMap;
use std::io::{self, Write};
use std::sync::OnceLock;

use serde::Serialize;

static LOG_PREFIX: OnceLock<String> = OnceLock::new();

/// Tags every later log line with the process index, so interleaved logs of several hosts
/// stay readable.
pub fn set_process_index(index: usize) {
    let _ = LOG_PREFIX.set(format!("podq-sim-trainer[{index}]"));
}

pub fn log_line(args: std::fmt::Arguments<'_>) {
    let prefix = LOG_PREFIX
        .get()
        .map(String::as_str)
        .unwrap_or("podq-sim-trainer");
    // A closed stderr must not take the run down: logs are best effort.
    let _ = writeln!(io::stderr().lock(), "{prefix}: {args}");
}

/// Writes one log line to stderr (never to stdout, so it can never look like a report line).
macro_rules! log {
    ($($arg:tt)*) => {
        $crate::report::log_line(format_args!($($arg)*))
    };
}
pub(crate) use log;

#[derive(Serialize)]
#[serde(tag = "event", rename_all = "lowercase")]
enum Event<'a> {
    Metrics {
        step: u64,
        /// NaN and the infinities as podq's markers (`podq_api::nonfinite`), not as JSON's
        /// `null`.
        values: BTreeMap<&'a str, podq_api::nonfinite::Number>,
    },
    Checkpoint {
        step: u64,
        uri: &'a str,
    },
    /// The edges of work only the trainer sees, which the worker times with its own clock.
    Phase {
        phase: Phase,
        edge: Edge,
        #[serde(skip_serializing_if = "Option::is_none")]
        step: Option<u64>,
    },
    /// Where the run lives elsewhere, as `podq_trainer.report_link` prints it.
    Link {
        name: &'a str,
        url: &'a str,
    },
}

/// What a `phase` line brackets: what costs pod time without advancing a step.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Phase {
    Compile,
    Restore,
    Save,
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Edge {
    Start,
    End,
}

/// Emits the trainer contract's report lines. Only process 0 reports, as in the real
/// trainer; the other processes hold a muted reporter.
pub struct Reporter {
    enabled: bool,
}

impl Reporter {
    pub fn new(process_index: usize) -> Self {
        Self {
            enabled: process_index == 0,
        }
    }

    pub fn metrics(&self, step: u64, values: &[(&str, f64)]) -> io::Result<()> {
        let values = values
            .iter()
            .map(|(name, value)| (*name, podq_api::nonfinite::Number(*value)))
            .collect();
        self.emit(&Event::Metrics { step, values })
    }

    pub fn checkpoint(&self, step: u64, uri: &str) -> io::Result<()> {
        self.emit(&Event::Checkpoint { step, uri })
    }

    /// Printed just before the work starts and just after it ends, so the worker's arrival
    /// times bracket it.
    pub fn phase(&self, phase: Phase, edge: Edge, step: Option<u64>) -> io::Result<()> {
        self.emit(&Event::Phase { phase, edge, step })
    }

    pub fn link(&self, name: &str, url: &str) -> io::Result<()> {
        self.emit(&Event::Link { name, url })
    }

    fn emit(&self, event: &Event<'_>) -> io::Result<()> {
        if !self.enabled {
            return Ok(());
        }
        let json = serde_json::to_string(event).map_err(io::Error::other)?;
        let mut out = io::stdout().lock();
        writeln!(out, "PODQ {json}")?;
        // The worker parses lines as they come; a line stuck in a buffer when the pod is
        // preempted would be a lost checkpoint report.
        out.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_serialize_in_contract_order() {
        let metrics = Event::Metrics {
            step: 1200,
            values: [("train/lm_loss", podq_api::nonfinite::Number(0.53))]
                .into_iter()
                .collect(),
        };
        assert_eq!(
            serde_json::to_string(&metrics).unwrap(),
            r#"{"event":"metrics","step":1200,"values":{"train/lm_loss":0.53}}"#
        );
        let checkpoint = Event::Checkpoint {
            step: 5000,
            uri: "file:///c/step_5000",
        };
        assert_eq!(
            serde_json::to_string(&checkpoint).unwrap(),
            r#"{"event":"checkpoint","step":5000,"uri":"file:///c/step_5000"}"#
        );
    }

    #[test]
    fn phases_serialize_in_the_workers_wire_format() {
        let cases = [
            (
                Event::Phase {
                    phase: Phase::Compile,
                    edge: Edge::Start,
                    step: None,
                },
                r#"{"event":"phase","phase":"compile","edge":"start"}"#,
            ),
            (
                Event::Phase {
                    phase: Phase::Restore,
                    edge: Edge::End,
                    step: None,
                },
                r#"{"event":"phase","phase":"restore","edge":"end"}"#,
            ),
            (
                Event::Phase {
                    phase: Phase::Save,
                    edge: Edge::Start,
                    step: Some(5000),
                },
                r#"{"event":"phase","phase":"save","edge":"start","step":5000}"#,
            ),
        ];
        for (event, line) in cases {
            assert_eq!(serde_json::to_string(&event).unwrap(), line);
        }
    }

    #[test]
    fn links_serialize_as_the_sdk_prints_them() {
        let link = Event::Link {
            name: "wandb",
            url: "https://wandb.ai/t/p/runs/j",
        };
        assert_eq!(
            serde_json::to_string(&link).unwrap(),
            r#"{"event":"link","name":"wandb","url":"https://wandb.ai/t/p/runs/j"}"#
        );
    }
}
