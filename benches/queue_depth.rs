//! Reads against the depth of the queue: `GET /api/v1/status` (with the grant line) and
//! `GET /api/v1/plan` p99 on a server holding 40,000 queued jobs, against a second server
//! holding 1,000, both real `podq server` processes read alongside in the same run.
//!
//!     cargo bench --bench queue_depth        # about 2 minutes; PODQ_BENCH_DEEP=N to change 40,000
//!
//! Two figures per read: steady reads (nothing committed between them, as a dashboard's
//! polls mostly are: the views are computed once per commit) and the first read after a
//! commit (one job submitted before each read: the view is computed again). And the lease
//! call, whose claim finds the head of the pod type's queue: `LEASES` pods each lease once
//! and finish at once, on both servers alternately. The target,
//! ≤ 1.5 × the 1,000-job baseline, is printed as a target. No assertion: these machines are
//! shared and noisy.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use podq_testkit::{RunningServer, ServerLaunch};

use serde_json::json;

const PODQ: &str = env!("CARGO_BIN_EXE_podq");
const TOKEN: &str = "bench-admin-token";
const READS: usize = 200;
const LEASES: usize = 100;
const WORKER_TOKEN: &str = "bench-worker-token";

type Res<T> = Result<T, Box<dyn std::error::Error + Send + Sync>>;

struct ServerProc {
    _running: RunningServer,
    base: String,
    _dir: tempfile::TempDir,
}

impl ServerProc {
    fn start() -> Res<ServerProc> {
        let dir = tempfile::tempdir()?;
        let running = ServerLaunch::new(PODQ, dir.path())
            .experiments(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("experiments"))
            .tokens(TOKEN, WORKER_TOKEN)
            .start()?;
        Ok(ServerProc {
            base: running.base(),
            _running: running,
            _dir: dir,
        })
    }
}

async fn send(
    http: &reqwest::Client,
    method: reqwest::Method,
    url: String,
    body: Option<serde_json::Value>,
) -> Res<()> {
    let mut request = http.request(method, url).bearer_auth(TOKEN);
    if let Some(body) = body {
        request = request.json(&body);
    }
    let response = request.send().await?;
    let status = response.status();
    let text = response.text().await?;
    if !status.is_success() {
        return Err(format!("{status}: {text}").into());
    }
    Ok(())
}

/// Submits the whole suite (`force`: no deduplication) until `jobs` are queued, and sets a
/// grant so status carries its grant line.
async fn fill(http: &reqwest::Client, server: &ServerProc, jobs: usize) -> Res<()> {
    let end = chrono::Utc::now() + chrono::TimeDelta::days(29);
    send(
        http,
        reqwest::Method::PUT,
        format!("{}/grant", server.base),
        Some(json!({"end": end.to_rfc3339(), "pod_hours": {"v4-64": 720}})),
    )
    .await?;
    let mut queued = 0;
    while queued < jobs {
        send(
            http,
            reqwest::Method::POST,
            format!("{}/jobs", server.base),
            Some(json!({"all": true, "force": true})),
        )
        .await?;
        queued += 67;
    }
    Ok(())
}

fn p99(mut ms: Vec<f64>) -> f64 {
    ms.sort_by(|a, b| a.partial_cmp(b).unwrap());
    ms[((ms.len() as f64 * 0.99).ceil() as usize).clamp(1, ms.len()) - 1]
}

/// p99 of `READS` GETs of `path` on both servers, interleaved; with `commit_first`, one job
/// is submitted to each server before each of its reads.
async fn measure(
    http: &reqwest::Client,
    shallow: &ServerProc,
    deep: &ServerProc,
    path: &str,
    commit_first: bool,
) -> Res<(f64, f64)> {
    let (mut a, mut b) = (Vec::new(), Vec::new());
    for _ in 0..READS {
        for (server, out) in [(shallow, &mut a), (deep, &mut b)] {
            if commit_first {
                send(
                    http,
                    reqwest::Method::POST,
                    format!("{}/jobs", server.base),
                    Some(json!({"experiments": ["exp01a"], "force": true})),
                )
                .await?;
            }
            let started = Instant::now();
            let response = http
                .get(format!("{}{path}", server.base))
                .header("accept", "application/json")
                .send()
                .await?;
            let ok = response.status().is_success();
            response.bytes().await?;
            if !ok {
                return Err(format!("GET {path} failed").into());
            }
            out.push(started.elapsed().as_secs_f64() * 1000.0);
        }
    }
    Ok((p99(a), p99(b)))
}

/// p99 of `LEASES` lease calls on both servers, alternately: each a pod of its own that
/// claims the head of the v4-64 queue, then finishes the attempt so the next finds another.
async fn measure_leases(
    http: &reqwest::Client,
    shallow: &ServerProc,
    deep: &ServerProc,
) -> Res<(f64, f64)> {
    let (mut a, mut b) = (Vec::new(), Vec::new());
    for i in 0..LEASES {
        for (server, out) in [(shallow, &mut a), (deep, &mut b)] {
            let body = json!({"accelerator": "v4-64", "hosts": 8, "state": "READY",
                              "health": "HEALTHY", "wait_s": 0});
            let started = Instant::now();
            let response = http
                .post(format!("{}/pods/bench-{i}/lease", server.base))
                .bearer_auth(WORKER_TOKEN)
                .json(&body)
                .send()
                .await?;
            let status = response.status();
            let lease: serde_json::Value = response.json().await?;
            out.push(started.elapsed().as_secs_f64() * 1000.0);
            let Some(id) = lease["lease_id"].as_str().filter(|_| status.is_success()) else {
                return Err(format!("lease {i}: {status} {lease}").into());
            };
            let finished = http
                .post(format!("{}/leases/{id}/finish", server.base))
                .bearer_auth(WORKER_TOKEN)
                .json(&json!({"outcome": "succeeded"}))
                .send()
                .await?;
            if !finished.status().is_success() {
                return Err(format!("finish {i}: {}", finished.text().await?).into());
            }
        }
    }
    Ok((p99(a), p99(b)))
}

async fn run() -> Res<()> {
    let deep_jobs: usize = std::env::var("PODQ_BENCH_DEEP")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(40_000);
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(120))
        .build()?;
    let shallow = ServerProc::start()?;
    let deep = ServerProc::start()?;
    let filled = Instant::now();
    fill(&http, &shallow, 1_000).await?;
    fill(&http, &deep, deep_jobs).await?;
    eprintln!(
        "queued 1,000 and {deep_jobs} jobs in {:.0} s",
        filled.elapsed().as_secs_f64()
    );
    // Warm both (the first read after the fill computes the views).
    measure(&http, &shallow, &deep, "/status", false).await?;
    println!(
        "| read | p99 at {deep_jobs} queued | baseline: p99 at 1,000, same run | ratio | target |"
    );
    println!("|---|---|---|---|---|");
    for (label, path, commit_first) in [
        ("GET /status (JSON, grant line), steady", "/status", false),
        ("GET /plan, steady", "/plan", false),
        ("GET /status, first read after a commit", "/status", true),
        ("GET /plan, first read after a commit", "/plan", true),
    ] {
        let (base, deep_p99) = measure(&http, &shallow, &deep, path, commit_first).await?;
        println!(
            "| {label} | {deep_p99:.2} ms | {base:.2} ms | {:.2} | ≤ 1.5 × baseline |",
            deep_p99 / base
        );
    }
    let (base, deep_p99) = measure_leases(&http, &shallow, &deep).await?;
    println!(
        "| POST /pods/NAME/lease (claims the queue's head) | {deep_p99:.2} ms | {base:.2} ms | {:.2} | ≤ 1.5 × baseline |",
        deep_p99 / base
    );
    Ok(())
}

fn main() -> ExitCode {
    let runtime = tokio::runtime::Runtime::new().expect("a runtime");
    match runtime.block_on(run()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("queue_depth bench: {e}");
            ExitCode::FAILURE
        }
    }
}
