//! What the divergence guard saves (issue 28): the same run, diverging at 10% of its steps,
//! twice in one bench run, each on its own real server, worker and 2-host simulated pod:
//!
//!     cargo bench --profile dev --bench divergence    # about 2 minutes
//!
//! - `guard off` (the baseline): `divergence_guard: off` in the suite; the run trains to its
//!   end on NaN losses and ends `succeeded`, as it did before issue 28;
//! - `guard on`: the shipped default (train/loss or train/lm_loss non-finite, or
//!   train/diverged set, for 3 reports in a row); the run ends `stopped`.
//!
//! Printed for each: the run's pod time and where it ended. For the guarded run also the
//! latency from the trainer printing its first non-finite report to the server's decision,
//! and to the end of the attempt (the trainer stopped with its grace and the worker
//! finished), measured on the trainer's own print stamps (`sim/printed_ms`). Pod-hours saved
//! are scaled to the study's 40-hour run. No assertion: these machines are shared and noisy.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

const PODQ: &str = env!("CARGO_BIN_EXE_podq");
/// Training time of the whole run (the sim's 8,138 steps).
const RUN_SECS: u64 = 60;
const STEPS: f64 = 8138.0;
/// 10% of the run, on a report step (the trainer reports every 10 steps).
const DIVERGE_AT: u64 = 810;
/// The study's budget per experiment (TPU_FACTS.md).
const STUDY_RUN_HOURS: f64 = 40.0;

type Res<T> = Result<T, Box<dyn std::error::Error + Send + Sync>>;

struct Proc(Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn copy_dir(from: &Path, to: &Path) -> Res<()> {
    std::fs::create_dir_all(to)?;
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        let target = to.join(entry.file_name());
        if entry.file_type()?.is_dir() {
            copy_dir(&entry.path(), &target)?;
        } else {
            std::fs::copy(entry.path(), &target)?;
        }
    }
    Ok(())
}

/// The repository's catalog, with the guard turned off when `guard` is false.
fn catalog(dir: &Path, guard: bool) -> Res<PathBuf> {
    let root = dir.join("experiments");
    copy_dir(
        &PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("experiments"),
        &root,
    )?;
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

async fn one_run(http: &reqwest::Client, guard: bool) -> Res<Measured> {
    let dir = tempfile::tempdir()?;
    let experiments = catalog(dir.path(), guard)?;
    let mut child = Command::new(PODQ)
        .args(["server", "--listen", "127.0.0.1:0", "--db"])
        .arg(dir.path().join("podq.db"))
        .arg("--experiments")
        .arg(&experiments)
        .arg("--bucket")
        .arg(dir.path().join("bucket"))
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()?;
    let stdout = child.stdout.take().ok_or("no stdout")?;
    let base = BufReader::new(stdout)
        .lines()
        .map_while(Result::ok)
        .find_map(|l| {
            l.strip_prefix("podq server listening on ")
                .map(str::to_owned)
        })
        .ok_or("the server did not start")?;
    let _server = Proc(child);
    let api = |path: &str| format!("{base}/api/v1{path}");
    let get = |url: String| async move {
        Ok::<Value, Box<dyn std::error::Error + Send + Sync>>(
            http.get(url)
                .header("accept", "application/json")
                .send()
                .await?
                .json()
                .await?,
        )
    };
    let submitted: Value = http
        .post(api("/jobs"))
        .json(&json!({"experiments": ["exp07a"]}))
        .send()
        .await?
        .json()
        .await?;
    let job = submitted["created"][0]["job_id"]
        .as_str()
        .ok_or("no job created")?
        .to_owned();
    let _worker = Proc(
        Command::new(PODQ)
            .args([
                "worker", "--server", &base, "--pod", "bench", "--hosts", "2",
            ])
            .arg("--pod-root")
            .arg(dir.path().join("pod"))
            .args(["--trainer-env", &format!("PODQ_SIM_RUN_SECS={RUN_SECS}")])
            .args([
                "--trainer-env",
                &format!("PODQ_SIM_FAULT=diverge-at-step={DIVERGE_AT}"),
            ])
            // Stamps each report with the time it was printed (`sim/printed_ms`).
            .args(["--trainer-env", "PODQ_SIM_LOG_LINES_PER_S=1"])
            .args(["--lease-wait-s", "1", "--status-poll-s", "0.5"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()?,
    );
    let deadline = Instant::now() + Duration::from_secs(RUN_SECS * 10);
    let finished = loop {
        let detail = get(api(&format!("/jobs/{job}"))).await?;
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
        let metrics = get(api(&format!(
            "/jobs/{job}/metrics?names=sim/printed_ms&max_points=100000"
        )))
        .await?;
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
    let http = reqwest::Client::new();
    let mut runs = Vec::new();
    for guard in [false, true] {
        match one_run(&http, guard).await {
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
