//! The checkpoint interval podq advises against a run's own: the same run under the
//! same preemption schedule, twice in one bench run, each on its own real server, worker and
//! 2-host simulated pod with sim trainers that really spend `SAVE_S` per save.
//!
//!     cargo bench --profile dev --bench checkpoint_interval    # about 10 minutes
//!
//! - `configured`: `checkpoint_interval: CONFIGURED_STEPS` (a save every ~20 s of training);
//! - `auto`: `checkpoint_interval: auto`, each attempt given the Young/Daly interval from the
//!   trainer's reported save cost and the pod's interruption history (prior: `PREEMPT_EVERY`).
//!
//! The pod is preempted on one schedule for both runs, measured from the run's first lease:
//! exponential gaps of mean `PREEMPT_EVERY` drawn from a fixed seed (at least 5 s apart, so
//! an attempt gets past its start-up), until the run succeeds. Printed for each: pod time, goodput (productive / pod time), the measured
//! waste (saves and redone work per productive second) beside Young and Daly's first-order
//! prediction, C/τ + (τ + C)/2M, for the interval it ran at. No assertion: these machines are
//! shared and noisy; the configured run is the baseline measured in the same bench run.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use podq_testkit::ServerLaunch;
use serde_json::{json, Value};

const PODQ: &str = env!("CARGO_BIN_EXE_podq");
/// Training time of the whole run without saves or interruptions (the sim's 8,138 steps).
const RUN_SECS: u64 = 180;
const STEPS: f64 = 8138.0;
const SAVE_S: f64 = 1.0;
/// The mean time between preemptions: they arrive as a Poisson process (exponential gaps, as
/// Young and Daly assume), from a fixed seed, so both runs get the same schedule.
const PREEMPT_EVERY: Duration = Duration::from_secs(30);
const SEED: u64 = 0x9E37_79B9_7F4A_7C15;
/// About 20 s of training between saves (a save per 2/3 of the mean time between
/// preemptions; the study's is a save every 4 h against one preemption a day).
const CONFIGURED_STEPS: u64 = 904;

type Res<T> = Result<T, Box<dyn std::error::Error + Send + Sync>>;

struct Proc(Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The repository's catalog with exp07a estimated at the sim's real length (so the advice's
/// step time is right before the run has measured one) and the interval under test.
fn catalog(dir: &Path, interval: &str) -> Res<PathBuf> {
    let root = dir.join("experiments");
    copy_dir(
        &PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("experiments"),
        &root,
    )?;
    let group = root.join("groups/exp07-precision/group.yaml");
    let text = std::fs::read_to_string(&group)?;
    let row = r#"exp07a: {summary: "forward pass in float32 (baseline bfloat16)", est_hours: 40}"#;
    if !text.contains(row) {
        return Err("exp07a's row in group.yaml changed: update the bench".into());
    }
    let hours = RUN_SECS as f64 / 3600.0;
    let text = text.replace(
        row,
        &format!(
            r#"exp07a: {{summary: "forward pass in float32", est_hours: {hours}, checkpoint_interval: {interval}}}"#
        ),
    );
    std::fs::write(&group, text)?;
    Ok(root)
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

struct Measured {
    wall_s: f64,
    attempts: usize,
    time: Value,
    /// The intervals the trainers said they were given, one per attempt.
    intervals: Vec<u64>,
    advice_mtbf_s: Option<f64>,
}

async fn one_run(http: &reqwest::Client, interval: &str) -> Res<Measured> {
    let dir = tempfile::tempdir()?;
    let experiments = catalog(dir.path(), interval)?;
    let server = ServerLaunch::new(PODQ, dir.path())
        .experiments(&experiments)
        .args(["--bucket", &dir.path().join("bucket").to_string_lossy()])
        .args([
            "--prior-mtbf-h",
            &(PREEMPT_EVERY.as_secs_f64() / 3600.0).to_string(),
        ])
        .start()?;
    let base = server.url.clone();
    let api = |path: &str| format!("{base}/api/v1{path}");
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
    let pod_root = dir.path().join("pod");
    let _worker = Proc(
        Command::new(PODQ)
            .args([
                "worker", "--server", &base, "--pod", "bench", "--hosts", "2",
            ])
            .arg("--pod-root")
            .arg(&pod_root)
            .args(["--trainer-env", &format!("PODQ_SIM_RUN_SECS={RUN_SECS}")])
            .args(["--trainer-env", &format!("PODQ_SIM_SAVE_S={SAVE_S}")])
            .args(["--lease-wait-s", "1", "--recovery-delay-s", "0.5"])
            .args(["--status-poll-s", "0.2", "--checkpoint-scan-s", "0.3"])
            .args(["--metrics-flush-s", "0.5"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()?,
    );
    let detail = |http: reqwest::Client, url: String| async move {
        Ok::<Value, Box<dyn std::error::Error + Send + Sync>>(
            http.get(url)
                .header("accept", "application/json")
                .send()
                .await?
                .json()
                .await?,
        )
    };
    // The schedule starts at the first lease, so both runs see the same one.
    let started = loop {
        let job: Value = detail(http.clone(), api(&format!("/jobs/{job}"))).await?;
        if job["attempt_count"].as_i64().unwrap_or(0) > 0 {
            break Instant::now();
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let mut schedule = preemptions().into_iter().map(|offset| started + offset);
    let mut next_preemption = schedule.next().ok_or("no preemption schedule")?;
    let deadline = started + Duration::from_secs(RUN_SECS * 20);
    let mut advice_mtbf_s = None;
    let finished = loop {
        let job: Value = detail(http.clone(), api(&format!("/jobs/{job}"))).await?;
        if let Some(m) = job["checkpoint_advice"]["mtbf_s"].as_f64() {
            advice_mtbf_s = Some(m);
        }
        match job["state"].as_str() {
            Some("succeeded") => break job,
            Some("failed" | "held" | "cancelled") => {
                return Err(format!("the run ended {}: {}", job["state"], job["message"]).into())
            }
            _ => {}
        }
        if Instant::now() >= deadline {
            return Err("the run did not finish in 20 times its length".into());
        }
        if Instant::now() >= next_preemption {
            std::fs::create_dir_all(pod_root.join("control"))?;
            std::fs::write(pod_root.join("control/preempt"), b"")?;
            next_preemption = schedule.next().unwrap_or(deadline);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let wall_s = started.elapsed().as_secs_f64();
    let attempts = finished["attempts"].as_array().map_or(0, Vec::len);
    let mut intervals = Vec::new();
    for n in 1..=attempts {
        let logs: Value = detail(
            http.clone(),
            api(&format!(
                "/jobs/{job}/logs?attempt={n}&host=0&grep=checkpoints%20at%20every"
            )),
        )
        .await?;
        let text = logs["lines"][0]["text"].as_str().unwrap_or_default();
        if let Some(steps) = text
            .split("checkpoints at every ")
            .nth(1)
            .and_then(|rest| rest.split(' ').next())
            .and_then(|n| n.parse().ok())
        {
            intervals.push(steps);
        }
    }
    Ok(Measured {
        wall_s,
        attempts,
        time: finished["pod_time"].clone(),
        intervals,
        advice_mtbf_s,
    })
}

/// The preemption times, from the first lease: exponential gaps from a fixed seed (xorshift64*),
/// the same in every bench run.
fn preemptions() -> Vec<Duration> {
    let mut state = SEED;
    let mut uniform = move || {
        state ^= state >> 12;
        state ^= state << 25;
        state ^= state >> 27;
        (state.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 11) as f64 / (1u64 << 53) as f64
    };
    let mut at = 0.0;
    let mut times = Vec::new();
    while at < (RUN_SECS * 20) as f64 {
        let gap = -PREEMPT_EVERY.as_secs_f64() * (1.0 - uniform()).ln();
        at += gap.max(5.0);
        times.push(Duration::from_secs_f64(at));
    }
    times
}

/// Young/Daly's first-order waste per useful second at interval `tau`.
fn predicted_waste(tau: f64, c: f64, m: f64) -> f64 {
    c / tau + (tau + c) / (2.0 * m)
}

fn report(name: &str, m: &Measured) {
    let f = |k: &str| m.time[k].as_f64().unwrap_or(0.0);
    let (productive, saves, wasted, total) =
        (f("productive_s"), f("save_s"), f("wasted_s"), f("total_s"));
    let step_s = RUN_SECS as f64 / STEPS;
    let mean_interval = if m.intervals.is_empty() {
        f64::NAN
    } else {
        m.intervals.iter().sum::<u64>() as f64 / m.intervals.len() as f64
    };
    let tau = mean_interval * step_s;
    let predicted = predicted_waste(tau, SAVE_S, PREEMPT_EVERY.as_secs_f64());
    let measured = (saves + wasted) / productive.max(1e-9);
    println!(
        "{name:<11} pod time {total:>6.1} s   goodput {:>5.1}%   attempts {:>2}   wall {:>6.1} s",
        100.0 * productive / total.max(1e-9),
        m.attempts,
        m.wall_s
    );
    println!(
        "{:<11} interval {:>6.0} steps ({tau:>5.1} s; per attempt {:?})   waste per useful s: measured {measured:.3}, Young/Daly {predicted:.3}",
        "", mean_interval, m.intervals
    );
    println!(
        "{:<11} saves {saves:.1} s, redone {wasted:.1} s, startup {:.1} s, restore {:.1} s, setup {:.1} s, stopping {:.1} s, provisioning {:.1} s{}",
        "",
        f("startup_s"),
        f("restore_s"),
        f("setup_s"),
        f("stopping_s"),
        f("provisioning_s"),
        m.advice_mtbf_s
            .map(|mtbf| format!("; MTBF the server estimated {mtbf:.1} s"))
            .unwrap_or_default()
    );
}

fn main() -> ExitCode {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        let http = reqwest::Client::new();
        let first: Vec<String> = preemptions()
            .iter()
            .take(8)
            .map(|d| format!("{:.0}", d.as_secs_f64()))
            .collect();
        println!(
            "checkpoint interval: a {RUN_SECS} s run, {SAVE_S} s saves, preemptions every {} s on \
             average (at {} s, ...), 2 hosts",
            PREEMPT_EVERY.as_secs(),
            first.join(", ")
        );
        let configured = match one_run(&http, &CONFIGURED_STEPS.to_string()).await {
            Ok(m) => m,
            Err(e) => {
                eprintln!("configured run: {e}");
                return ExitCode::FAILURE;
            }
        };
        let auto = match one_run(&http, "auto").await {
            Ok(m) => m,
            Err(e) => {
                eprintln!("auto run: {e}");
                return ExitCode::FAILURE;
            }
        };
        report("configured", &configured);
        report("auto", &auto);
        let total = |m: &Measured| m.time["total_s"].as_f64().unwrap_or(0.0);
        let step_s = RUN_SECS as f64 / STEPS;
        let m = PREEMPT_EVERY.as_secs_f64();
        let tau_daly = (2.0 * SAVE_S * m).sqrt();
        let predicted_saving = RUN_SECS as f64
            * (predicted_waste(CONFIGURED_STEPS as f64 * step_s, SAVE_S, m)
                - predicted_waste(tau_daly, SAVE_S, m));
        println!(
            "auto against configured: pod time {:.1} s against {:.1} s (x{:.2}); saved {:.1} s, \
             Young/Daly predicted {predicted_saving:.1} s (at τ = sqrt(2CM) = {tau_daly:.1} s)",
            total(&auto),
            total(&configured),
            total(&auto) / total(&configured).max(1e-9),
            total(&configured) - total(&auto),
        );
        ExitCode::SUCCESS
    })
}
