//! What live logs cost and how fast they arrive: the same 8-host run twice, each on its own
//! real server, worker and sim trainers, once quiet and once with every host printing 50
//! lines a second (`PODQ_SIM_LOG_LINES_PER_S`).
//!
//!     cargo bench --profile dev --bench live_logs     # about 3 minutes; PODQ_BENCH_RUN_SECS
//!
//! Printed, each against the quiet run measured in the same bench run:
//! - the store's size after the run (the database file after a clean shutdown) and the
//!   writer's load (commits and write calls a second, from `/metrics`);
//! - delivery latency, p50 and p99: a trainer's line to its output by `podq logs --follow`,
//!   against a metric report (stamped `sim/printed_ms` by the trainer) to the `progress`
//!   event on `/events/stream` of the batch that carried it. Both take the same path (agent,
//!   the worker's flush every `--metrics-flush-s`, server), so the metric figure is the
//!   baseline. No assertion: these machines are shared and noisy.

use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode, Stdio};
use std::sync::{Arc, LazyLock, Mutex};
use std::time::{Duration, Instant};

use podq_testkit::{RunningServer, ServerLaunch};
use serde_json::{json, Value};

/// Built by cargo for this bench, or `PODQ_BENCH_PROGRAM` (see
/// `podq_testkit::program_under_test`).
static PODQ: LazyLock<String> =
    LazyLock::new(|| podq_testkit::program_under_test(env!("CARGO_BIN_EXE_podq")));
const HOSTS: u32 = 8;
const LINES_PER_S: u32 = 50;

type Res<T> = Result<T, Box<dyn std::error::Error + Send + Sync>>;

fn now_ms() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64() * 1000.0)
}

struct Proc(Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// One run: a server with its own database, a worker on an 8-host simulated pod, one job.
struct Run {
    server: RunningServer,
    dir: tempfile::TempDir,
    base: String,
}

impl Run {
    fn start() -> Res<Run> {
        let dir = tempfile::tempdir()?;
        let server = ServerLaunch::new(PODQ.as_str(), dir.path())
            .experiments(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("experiments"))
            .args(["--bucket", &dir.path().join("bucket").to_string_lossy()])
            .start()?;
        Ok(Run {
            base: server.url.clone(),
            dir,
            server,
        })
    }

    fn worker(&self, chatter: u32, run_secs: u64) -> Res<Proc> {
        Ok(Proc(
            Command::new(PODQ.as_str())
                .args([
                    "worker", "--server", &self.base, "--pod", "bench", "--hosts",
                ])
                .arg(HOSTS.to_string())
                .arg("--pod-root")
                .arg(self.dir.path().join("pod"))
                .args(["--trainer-env", &format!("PODQ_SIM_RUN_SECS={run_secs}")])
                .args([
                    "--trainer-env",
                    &format!("PODQ_SIM_LOG_LINES_PER_S={chatter}"),
                ])
                .args(["--lease-wait-s", "2"])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()?,
        ))
    }

    async fn get(&self, http: &reqwest::Client, path: &str) -> Res<Value> {
        Ok(http
            .get(format!("{}/api/v1{path}", self.base))
            .header("accept", "application/json")
            .send()
            .await?
            .json()
            .await?)
    }

    /// (commits, write calls) so far, from the writer's batch-size histogram.
    async fn writer(&self, http: &reqwest::Client) -> Res<(f64, f64)> {
        let text = http
            .get(format!("{}/metrics", self.base))
            .send()
            .await?
            .text()
            .await?;
        let read = |name: &str| {
            text.lines()
                .find_map(|l| l.strip_prefix(name)?.trim().parse::<f64>().ok())
                .unwrap_or(0.0)
        };
        Ok((
            read("podq_store_write_batch_size_count"),
            read("podq_store_write_batch_size_sum"),
        ))
    }

    /// Stops the server cleanly (SQLite folds its WAL back in) and answers the database's
    /// size and its log line count.
    async fn stop(mut self) -> Res<(u64, i64)> {
        // A clean stop, however long folding the WAL back in takes.
        self.server.terminate(Duration::from_secs(3600));
        let db = self.dir.path().join("podq.db");
        let size = file_size(&db) + file_size(&db.with_extension("db-wal"));
        let url = format!("sqlite://{}?mode=ro", db.display());
        let pool = sqlx::SqlitePool::connect(&url).await?;
        let lines: i64 = sqlx::query_scalar("SELECT COALESCE(SUM(lines), 0) FROM log_chunks")
            .fetch_one(&pool)
            .await?;
        pool.close().await;
        Ok((size, lines))
    }
}

fn file_size(path: &Path) -> u64 {
    std::fs::metadata(path).map_or(0, |m| m.len())
}

struct Measured {
    seconds: f64,
    commits: f64,
    writes: f64,
    size: u64,
    lines: i64,
    log_ms: Vec<f64>,
    metric_ms: Vec<f64>,
}

async fn one_run(http: &reqwest::Client, chatter: u32, run_secs: u64) -> Res<Measured> {
    let run = Run::start()?;
    let submitted: Value = http
        .post(format!("{}/api/v1/jobs", run.base))
        .json(&json!({"experiments": ["exp07a"]}))
        .send()
        .await?
        .json()
        .await?;
    let job = submitted["created"][0]["job_id"]
        .as_str()
        .ok_or("no job created")?
        .to_owned();

    // Metric delivery: when each step's `progress` event arrives.
    let progress: Arc<Mutex<HashMap<i64, f64>>> = Arc::default();
    let mut events = http
        .get(format!("{}/api/v1/events/stream", run.base))
        .send()
        .await?;
    let seen = progress.clone();
    let events_task = tokio::spawn(async move {
        let mut buffer = String::new();
        while let Ok(Some(chunk)) = events.chunk().await {
            let at = now_ms();
            buffer.push_str(&String::from_utf8_lossy(&chunk));
            while let Some(end) = buffer.find("\n\n") {
                let block: String = buffer.drain(..end + 2).collect();
                if !block.contains("event: progress") {
                    continue;
                }
                let data = block.lines().find_map(|l| l.strip_prefix("data:"));
                if let Some(v) = data.and_then(|d| serde_json::from_str::<Value>(d.trim()).ok()) {
                    if let Some(step) = v["step"].as_i64() {
                        seen.lock().unwrap().entry(step).or_insert(at);
                    }
                }
            }
        }
    });

    // Log delivery: `podq logs --follow` from before the job starts.
    let mut follower = Command::new(PODQ.as_str())
        .args(["logs", &job, "--follow"])
        .env("PODQ_SERVER", &run.base)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()?;
    let stdout = follower.stdout.take().ok_or("no stdout")?;
    let follower = Proc(follower);
    let reader = std::thread::spawn(move || {
        let mut latencies = Vec::new();
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let at = now_ms();
            if let Some(printed) = line
                .split("printed_ms=")
                .nth(1)
                .and_then(|t| t.trim().parse::<f64>().ok())
            {
                latencies.push(at - printed);
            }
        }
        latencies
    });

    let (commits0, writes0) = run.writer(http).await?;
    let began = Instant::now();
    let worker = run.worker(chatter, run_secs)?;
    let deadline = Instant::now() + Duration::from_secs(run_secs * 4 + 120);
    loop {
        let state = run.get(http, &format!("/jobs/{job}")).await?["state"].clone();
        if state == "succeeded" {
            break;
        }
        if Instant::now() > deadline || state == "failed" || state == "held" {
            return Err(format!("the bench job ended {state}").into());
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let seconds = began.elapsed().as_secs_f64();
    let (commits1, writes1) = run.writer(http).await?;
    drop(worker);
    let log_ms = tokio::task::spawn_blocking(move || reader.join().unwrap_or_default()).await?;
    drop(follower);
    events_task.abort();

    let metrics = run
        .get(
            http,
            &format!("/jobs/{job}/metrics?names=sim/printed_ms&max_points=100000"),
        )
        .await?;
    let printed: HashMap<i64, f64> = metrics["series"][0]["points"]
        .as_array()
        .map(|points| {
            points
                .iter()
                .filter_map(|p| Some((p["step"].as_i64()?, p["value"].as_f64()?)))
                .collect()
        })
        .unwrap_or_default();
    // A batch's `progress` event names its newest step: every point up to it arrived then.
    let mut arrivals: Vec<(i64, f64)> = progress.lock().unwrap().clone().into_iter().collect();
    arrivals.sort_by_key(|(step, _)| *step);
    let metric_ms = printed
        .iter()
        .filter_map(|(step, printed)| {
            let i = arrivals.partition_point(|(s, _)| s < step);
            Some(arrivals.get(i)?.1 - printed)
        })
        .collect();
    let (size, lines) = run.stop().await?;
    Ok(Measured {
        seconds,
        commits: commits1 - commits0,
        writes: writes1 - writes0,
        size,
        lines,
        log_ms,
        metric_ms,
    })
}

fn quantile(mut ms: Vec<f64>, q: f64) -> f64 {
    if ms.is_empty() {
        return f64::NAN;
    }
    ms.sort_by(f64::total_cmp);
    ms[((ms.len() as f64 - 1.0) * q).round() as usize]
}

async fn run() -> Res<()> {
    let run_secs: u64 = std::env::var("PODQ_BENCH_RUN_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(45);
    let http = reqwest::Client::new();
    eprintln!("live_logs: a {run_secs} s run on {HOSTS} hosts, quiet, then {LINES_PER_S} lines/s per host ...");
    let quiet = one_run(&http, 0, run_secs).await?;
    let chatty = one_run(&http, LINES_PER_S, run_secs).await?;

    println!("| figure | {LINES_PER_S} lines/s on each of {HOSTS} hosts | baseline: the same run quiet, same bench run | ratio |");
    println!("|---|---|---|---|");
    let mib = |b: u64| b as f64 / (1024.0 * 1024.0);
    println!(
        "| store size after the run | {:.2} MiB ({} log lines kept) | {:.2} MiB ({} lines) | {:.2} |",
        mib(chatty.size),
        chatty.lines,
        mib(quiet.size),
        quiet.lines,
        chatty.size as f64 / quiet.size.max(1) as f64
    );
    let rate = |n: f64, m: &Measured| n / m.seconds;
    println!(
        "| writer commits / s | {:.2} | {:.2} | {:.2} |",
        rate(chatty.commits, &chatty),
        rate(quiet.commits, &quiet),
        rate(chatty.commits, &chatty) / rate(quiet.commits, &quiet).max(1e-9)
    );
    println!(
        "| writer write calls / s | {:.2} | {:.2} | {:.2} |",
        rate(chatty.writes, &chatty),
        rate(quiet.writes, &quiet),
        rate(chatty.writes, &chatty) / rate(quiet.writes, &quiet).max(1e-9)
    );
    println!(
        "| run wall time | {:.1} s | {:.1} s | {:.2} |",
        chatty.seconds,
        quiet.seconds,
        chatty.seconds / quiet.seconds
    );
    println!();
    println!("| delivery, print to reader | p50 | p99 | samples |");
    println!("|---|---|---|---|");
    let (log_n, metric_n) = (chatty.log_ms.len(), chatty.metric_ms.len());
    println!(
        "| log line to `podq logs --follow` | {:.0} ms | {:.0} ms | {log_n} |",
        quantile(chatty.log_ms.clone(), 0.5),
        quantile(chatty.log_ms, 0.99)
    );
    println!(
        "| baseline: metric report to its `progress` event, same run | {:.0} ms | {:.0} ms | {metric_n} |",
        quantile(chatty.metric_ms.clone(), 0.5),
        quantile(chatty.metric_ms, 0.99)
    );
    Ok(())
}

fn main() -> ExitCode {
    let runtime = tokio::runtime::Runtime::new().expect("a tokio runtime");
    match runtime.block_on(run()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("live_logs bench: {e}");
            ExitCode::FAILURE
        }
    }
}
