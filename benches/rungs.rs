//! What rungs save on a sweep: a group of 16 runs, twice in one bench run, each on its own
//! real server with two real workers on 2-host simulated pods:
//!
//!     cargo bench --profile dev --bench rungs    # about 12 minutes
//!
//! - `no rungs` (the baseline): every run trains to its end, as before rungs;
//! - `rungs`: `at: [12.5%, 25%, 50%]`, `keep: 1/2`, by `eval/exact_accuracy`.
//!
//! Each run's final accuracy is set by its config (`sim: {final_accuracy: X}`), and the sim
//! trainer's curves rank runs the same at every step (docs/trainer.md, "Curves"), as a sweep
//! whose loser shows early does. Printed: the group's pod time each way and its share, and
//! whether the run that is best at the end is the one best at the last rung. The target is
//! printed as a target; nothing is asserted: these machines are shared and noisy.

#[path = "../tests/common/mod.rs"]
mod common;

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use common::{Server, ServerOptions};
use serde_json::Value;

const GROUP: &str = "exp99-rung-sweep";
const RUNS: usize = 16;
/// Training time of a whole run (the sim's 8,138 steps).
const RUN_SECS: u64 = 30;
/// The share of the baseline's pod time the rungs should leave (issue 66).
const TARGET_SHARE: f64 = 0.40;

type Res<T> = Result<T, Box<dyn std::error::Error + Send + Sync>>;

fn name(i: usize) -> String {
    format!("exp99{}", (b'a' + i as u8) as char)
}

/// Run `i`'s final accuracy: spread over [0.30, 0.75], shuffled so the queue's order is not
/// the ranking's.
fn final_accuracy(i: usize) -> f64 {
    let rank = (i * 7) % RUNS;
    0.30 + 0.03 * rank as f64
}

/// The run the group's baseline row is: the second best, as a study's baseline is its
/// known-good config. The baseline always trains to its end, so a median one would add
/// about a sixteenth of the group's pod time to the rungs' figure.
const BASELINE: usize = 2;

/// The repository's catalog with a group of 16 runs that differ only in how good they
/// end; with `rungs` when given.
fn catalog(dir: &Path, rungs: Option<&str>) -> Res<PathBuf> {
    let root = dir.join("experiments");
    common::copy_dir(&common::experiments_dir(), &root);
    let group = root.join("groups").join(GROUP);
    std::fs::create_dir_all(&group)?;
    let mut rows = String::new();
    for i in 0..RUNS {
        let experiment = name(i);
        rows.push_str(&format!(
            "  {experiment}: {{summary: \"final accuracy {:.2}\", est_hours: 40}}\n",
            final_accuracy(i)
        ));
        std::fs::write(
            group.join(format!("{experiment}.yaml")),
            format!(
                "# @package _global_\ndefaults:\n  - /baseline\n  - _self_\nrun_name: {experiment}\n\
                 eval_interval: 625\nsim:\n  final_accuracy: {:.2}\n",
                final_accuracy(i)
            ),
        )?;
    }
    let suite = root.join("suite.yaml");
    let listed = std::fs::read_to_string(&suite)?.replace(
        "  - contrib02-adaptive-halting\n",
        &format!("  - contrib02-adaptive-halting\n  - {GROUP}\n"),
    );
    std::fs::write(&suite, listed)?;
    let rungs = rungs.map(|r| format!("rungs: {r}\n")).unwrap_or_default();
    std::fs::write(
        group.join("group.yaml"),
        format!(
            "title: A sweep for the rungs bench\nproject_name: TRM-Bench-Sweep\n\
             goal: Which of 16 runs is best.\nvaries: the final accuracy\n\
             hypothesis: one is best\nexpected_result: one is best\n\
             metrics_to_watch: [eval/exact_accuracy]\nbaseline_row: {}\nplanned_hours: 640\n\
             {rungs}experiments:\n{rows}",
            name(BASELINE)
        ),
    )?;
    Ok(root)
}

struct Swept {
    /// The group's pod time, over every attempt of every run.
    pod_time_s: f64,
    wall_s: f64,
    /// Runs that trained to their end, and runs pruned.
    finished: usize,
    pruned: usize,
    /// The best run by final accuracy among those that finished, and the best at the last
    /// rung any run was judged at.
    best_at_end: Option<String>,
    best_at_last_rung: Option<String>,
}

async fn sweep(rungs: Option<&str>) -> Res<Swept> {
    let dir = tempfile::tempdir()?;
    let server = Server::start_with(ServerOptions {
        experiments: catalog(dir.path(), rungs)?,
        ..ServerOptions::default()
    })
    .await;
    let started = Instant::now();
    let (status, answer) = server
        .post("/jobs", serde_json::json!({"group": GROUP}))
        .await;
    if status != 201 {
        return Err(format!("submit: {status} {answer}").into());
    }
    let jobs: Vec<String> = answer["created"]
        .as_array()
        .ok_or("no jobs created")?
        .iter()
        .filter_map(|c| c["job_id"].as_str().map(str::to_owned))
        .collect();
    let extra = [
        "--trainer-env",
        &format!("PODQ_SIM_RUN_SECS={RUN_SECS}"),
        // A save at each of the 80 evaluations would otherwise take 2% of the run each:
        // a pause saves as often as a whole run does, and that is not what is measured.
        "--trainer-env",
        "PODQ_SIM_SAVE_S=0.05",
        // A run goes on between its value at a rung and the server's word: flushed often.
        "--metrics-flush-s",
        "0.2",
    ];
    let _workers = [
        server.worker("bench-1", 2, &extra),
        server.worker("bench-2", 2, &extra),
    ];
    let deadline = Instant::now() + Duration::from_secs(RUN_SECS * RUNS as u64 * 4);
    let ended: Vec<Value> = loop {
        let mut ended = Vec::new();
        for job in &jobs {
            let detail = server.job(job).await;
            match detail["state"].as_str() {
                Some("succeeded" | "stopped") => ended.push(detail),
                Some(state @ ("failed" | "cancelled")) => {
                    return Err(format!("a run ended {state}: {}", detail["message"]).into())
                }
                _ => {}
            }
        }
        if ended.len() == jobs.len() {
            break ended;
        }
        if Instant::now() >= deadline {
            return Err("the sweep did not end in four times its length".into());
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    let wall_s = started.elapsed().as_secs_f64();
    let (_, pod_time) = server.get("/pod-time").await;
    let pod_time_s = pod_time["groups"][GROUP]["total_s"]
        .as_f64()
        .ok_or("no pod time for the group")?;
    let accuracy = |job: &Value| job["latest_metrics"]["eval/exact_accuracy"]["value"].as_f64();
    let best_at_end = ended
        .iter()
        .filter(|j| j["state"] == "succeeded")
        .max_by(|a, b| accuracy(a).partial_cmp(&accuracy(b)).unwrap())
        .map(|j| j["experiment"].as_str().unwrap_or("?").to_owned());
    let last_rung = ended
        .iter()
        .filter_map(|j| j["rungs"].as_array().map(Vec::len))
        .max()
        .unwrap_or(0);
    let at_last = |job: &Value| {
        job["rungs"]
            .as_array()
            .and_then(|r| r.get(last_rung.checked_sub(1)?))
            .and_then(|d| d["value"].as_f64())
    };
    let best_at_last_rung = ended
        .iter()
        .filter(|j| at_last(j).is_some())
        .max_by(|a, b| at_last(a).partial_cmp(&at_last(b)).unwrap())
        .map(|j| j["experiment"].as_str().unwrap_or("?").to_owned());
    Ok(Swept {
        pod_time_s,
        wall_s,
        finished: ended.iter().filter(|j| j["state"] == "succeeded").count(),
        pruned: ended.iter().filter(|j| j["state"] == "stopped").count(),
        best_at_end,
        best_at_last_rung,
    })
}

#[tokio::main]
async fn main() -> ExitCode {
    let mut swept = Vec::new();
    for rungs in [
        None,
        Some("{metric: eval/exact_accuracy, at: [12.5%, 25%, 50%], keep: 1/2}"),
    ] {
        match sweep(rungs).await {
            Ok(s) => swept.push(s),
            Err(e) => {
                eprintln!("rungs bench: {e}");
                return ExitCode::FAILURE;
            }
        }
    }
    let (without, with) = (&swept[0], &swept[1]);
    println!("a group of {RUNS} runs ({RUN_SECS} s of sim training each), on two 2-host sim pods:");
    for (label, s) in [
        ("no rungs (baseline)", without),
        ("rungs 12.5/25/50%, 1/2", with),
    ] {
        println!(
            "  {label:<24} pod time {:>7.1} s, wall {:>6.1} s, {:>2} trained to the end, {:>2} pruned",
            s.pod_time_s, s.wall_s, s.finished, s.pruned
        );
    }
    let share = with.pod_time_s / without.pod_time_s.max(f64::EPSILON);
    println!(
        "  pod time with rungs: {:.0}% of the baseline's (target: at most {:.0}%)",
        share * 100.0,
        TARGET_SHARE * 100.0
    );
    println!(
        "  best at the end: {} (without rungs: {}); best at the last rung: {}; the same: {}",
        with.best_at_end.as_deref().unwrap_or("-"),
        without.best_at_end.as_deref().unwrap_or("-"),
        with.best_at_last_rung.as_deref().unwrap_or("-"),
        with.best_at_end.is_some() && with.best_at_end == with.best_at_last_rung
    );
    ExitCode::SUCCESS
}
