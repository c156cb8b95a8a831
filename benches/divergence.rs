//! What the divergence guard saves: the same run, diverging at 10% of its steps,
//! twice in one bench run, each on its own real server, worker and 2-host simulated pod:
//!
//!     cargo bench --profile dev --bench divergence    # about 2 minutes
//!
//! - `guard off` (the baseline): `divergence_guard: off` in the suite; the run trains to its
//!   end on NaN losses and ends `succeeded`, as it did before the guard;
//! - `guard on`: the shipped default (train/loss or train/lm_loss non-finite, or
//!   train/diverged set, for 3 reports in a row); the run ends `stopped`.
//!
//! Printed for each: the run's pod time and where it ended. For the guarded run also the
//! latency from the trainer printing its first non-finite report to the server's decision,
//! and to the end of the attempt (the trainer stopped with its grace and the worker
//! finished), measured on the trainer's own print stamps (`sim/printed_ms`). Pod-hours saved
//! are scaled to the study's 40-hour run. No assertion: these machines are shared and noisy.

#[path = "../tests/common/mod.rs"]
mod common;

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use common::{Server, ServerOptions};
use serde_json::{json, Value};

/// Training time of the whole run (the sim's 8,138 steps).
const RUN_SECS: u64 = 60;
const STEPS: f64 = 8138.0;
/// 10% of the run, on a report step (the trainer reports every 10 steps).
const DIVERGE_AT: u64 = 810;
/// The study's budget per experiment (TPU_FACTS.md).
const STUDY_RUN_HOURS: f64 = 40.0;

type Res<T> = Result<T, Box<dyn std::error::Error + Send + Sync>>;

/// The repository's catalog, with the guard turned off when `guard` is false.
fn catalog(dir: &Path, guard: bool) -> Res<PathBuf> {
    let root = dir.join("experiments");
    common::copy_dir(&common::experiments_dir(), &root);
    if !guard {
        let suite = root.join("suite.yaml");
        let mut text = std::fs::read_to_string(&suite)?;
        text.push_str("divergence_guard: off\n");
        std::fs::write(&suite, text)?;
    }
    Ok(root)
}

struct Measured {
    state: String,
    pod_time_s: f64,
    last_step: i64,
    /// Trainer's first non-finite report printed -> the server's verdict, and -> the
    /// attempt's end (guarded run only).
    to_verdict_s: Option<f64>,
    to_end_s: Option<f64>,
}

async fn one_run(guard: bool) -> Res<Measured> {
    let dir = tempfile::tempdir()?;
    // The server's and the worker's own defaults, so the latency is a deployment's: the
    // worker flushes metrics every 2 s.
    let server = Server::start_with(ServerOptions {
        args: Vec::new(),
        env: Vec::new(),
        experiments: catalog(dir.path(), guard)?,
    })
    .await;
    let job = server.submit_one("exp07a", json!({})).await;
    let _worker = server.worker(
        "bench",
        2,
        &[
            "--trainer-env",
            &format!("PODQ_SIM_RUN_SECS={RUN_SECS}"),
            "--trainer-env",
            &format!("PODQ_SIM_FAULT=diverge-at-step={DIVERGE_AT}"),
            // Stamps each report with the time it was printed (`sim/printed_ms`).
            "--trainer-env",
            "PODQ_SIM_LOG_LINES_PER_S=1",
            "--metrics-flush-s",
            "2",
            "--status-poll-s",
            "0.5",
        ],
    );
    let deadline = Instant::now() + Duration::from_secs(RUN_SECS * 10);
    let finished = loop {
        let detail = server.job(&job).await;
        match detail["state"].as_str() {
            Some("succeeded" | "stopped") => break detail,
            Some(state @ ("failed" | "held" | "cancelled")) => {
                return Err(format!("the run ended {state}: {}", detail["message"]).into())
            }
            _ => {}
        }
        if Instant::now() >= deadline {
            return Err("the run did not end in 10 times its length".into());
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let (mut to_verdict_s, mut to_end_s) = (None, None);
    if finished["state"] == "stopped" {
        let (_, metrics) = server
            .get(&format!(
                "/jobs/{job}/metrics?names=sim/printed_ms&max_points=100000"
            ))
            .await;
        let printed_ms = metrics["series"][0]["points"]
            .as_array()
            .and_then(|points| {
                points
                    .iter()
                    .find(|p| p["step"].as_u64() == Some(DIVERGE_AT))
            })
            .and_then(|p| p["value"].as_f64())
            .ok_or("no print stamp at the first non-finite report")?;
        let at_ms = |text: &Value| {
            text.as_str()
                .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok())
                .map(|t| t.timestamp_millis() as f64)
        };
        let verdict_ms = at_ms(&finished["stopped_by"]["at"]).ok_or("no verdict time")?;
        let ended_ms = at_ms(&finished["attempts"][0]["ended_at"]).ok_or("no end time")?;
        to_verdict_s = Some((verdict_ms - printed_ms) / 1000.0);
        to_end_s = Some((ended_ms - printed_ms) / 1000.0);
    }
    Ok(Measured {
        state: finished["state"].as_str().unwrap_or("?").to_owned(),
        pod_time_s: finished["pod_time"]["total_s"].as_f64().unwrap_or(0.0),
        last_step: finished["last_step"].as_i64().unwrap_or(0),
        to_verdict_s,
        to_end_s,
    })
}

#[tokio::main]
async fn main() -> ExitCode {
    let mut runs = Vec::new();
    for guard in [false, true] {
        match one_run(guard).await {
            Ok(m) => runs.push(m),
            Err(e) => {
                eprintln!("divergence bench: {e}");
                return ExitCode::FAILURE;
            }
        }
    }
    let (off, on) = (&runs[0], &runs[1]);
    println!(
        "a run of {STEPS} steps ({RUN_SECS} s of sim training) that diverges at step {DIVERGE_AT} (10%):"
    );
    for (label, m) in [("guard off (baseline)", off), ("guard on", on)] {
        println!(
            "  {label:<22} ended {:<10} at step {:>5}, pod time {:>6.1} s",
            m.state, m.last_step, m.pod_time_s
        );
    }
    let saved = (off.pod_time_s - on.pod_time_s) / off.pod_time_s.max(f64::EPSILON);
    println!(
        "  pod time saved by the guard: {:.1} s of {:.1} s ({:.0}%), {:.1} of a {STUDY_RUN_HOURS} h study run",
        off.pod_time_s - on.pod_time_s,
        off.pod_time_s,
        saved * 100.0,
        saved * STUDY_RUN_HOURS
    );
    if let (Some(verdict), Some(end)) = (on.to_verdict_s, on.to_end_s) {
        println!(
            "  first non-finite report printed -> verdict {verdict:.2} s, -> attempt ended {end:.2} s"
        );
    }
    ExitCode::SUCCESS
}
