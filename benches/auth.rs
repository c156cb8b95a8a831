//! What authentication costs: a read (`GET /api/v1/status`) and a worker heartbeat
//! on a server that checks tokens (the built-in ones and 100 people in its store, each call
//! sending a token the server hashes and looks up) against the same calls on a server that
//! checks none, both real `podq server` processes measured alternately in the same run.
//!
//!     cargo bench --bench auth        # about 30 s; PODQ_BENCH_CALLS=N to change 2,000
//!
//! The target (the check adds at most 10% to p99) is printed as a target. No assertion:
//! these machines are shared and noisy.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use podq_testkit::{RunningServer, ServerLaunch};
use serde_json::{json, Value};

const PODQ: &str = env!("CARGO_BIN_EXE_podq");
const ADMIN: &str = "bench-admin-token";
const WORKER: &str = "bench-worker-token";
const PEOPLE: usize = 100;

type Res<T> = Result<T, Box<dyn std::error::Error + Send + Sync>>;

struct ServerProc {
    _running: RunningServer,
    base: String,
    _dir: tempfile::TempDir,
    /// The token a reader sends, and the worker's (None: the server checks none).
    reader: Option<String>,
    worker: Option<String>,
    lease: String,
}

fn spawn(tokens: bool) -> Res<(RunningServer, tempfile::TempDir)> {
    let dir = tempfile::tempdir()?;
    let mut launch = ServerLaunch::new(PODQ, dir.path())
        .experiments(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("experiments"));
    if tokens {
        launch = launch.tokens(ADMIN, WORKER);
    }
    Ok((launch.start()?, dir))
}

fn with_token(request: reqwest::RequestBuilder, token: &Option<String>) -> reqwest::RequestBuilder {
    match token {
        Some(token) => request.bearer_auth(token),
        None => request,
    }
}

impl ServerProc {
    /// A server with one job leased to pod `bench`, and (with `tokens`) 100 people.
    async fn start(http: &reqwest::Client, tokens: bool) -> Res<ServerProc> {
        let (running, dir) = spawn(tokens)?;
        let base = running.base();
        let admin = tokens.then(|| ADMIN.to_owned());
        let mut reader = None;
        for i in 0..if tokens { PEOPLE } else { 0 } {
            let role = if i % 2 == 0 { "viewer" } else { "submitter" };
            let added: Value = with_token(http.post(format!("{base}/users")), &admin)
                .json(&json!({"name": format!("person{i}"), "role": role}))
                .send()
                .await?
                .error_for_status()?
                .json()
                .await?;
            reader = Some(added["token"].as_str().ok_or("no token")?.to_owned());
        }
        with_token(http.post(format!("{base}/jobs")), &admin)
            .json(&json!({"experiments": ["exp07a"]}))
            .send()
            .await?
            .error_for_status()?;
        let worker = tokens.then(|| WORKER.to_owned());
        let lease: Value = with_token(http.post(format!("{base}/pods/bench/lease")), &worker)
            .json(&json!({"accelerator": "v4-64", "hosts": 8, "state": "READY", "health": "HEALTHY", "wait_s": 0}))
            .send()
            .await?
            .error_for_status()?
            .json()
            .await?;
        Ok(ServerProc {
            _running: running,
            base,
            _dir: dir,
            reader,
            worker,
            lease: lease["lease_id"].as_str().ok_or("no lease")?.to_owned(),
        })
    }

    async fn read(&self, http: &reqwest::Client) -> Res<()> {
        with_token(http.get(format!("{}/status", self.base)), &self.reader)
            .header("accept", "application/json")
            .send()
            .await?
            .error_for_status()?
            .bytes()
            .await?;
        Ok(())
    }

    async fn heartbeat(&self, http: &reqwest::Client) -> Res<()> {
        let url = format!("{}/leases/{}/heartbeat", self.base, self.lease);
        with_token(http.post(url), &self.worker)
            .json(&json!({"phase": "running", "step": 1, "hosts_alive": vec![true; 8]}))
            .send()
            .await?
            .error_for_status()?
            .bytes()
            .await?;
        Ok(())
    }
}

fn percentile(samples: &mut [f64], p: f64) -> f64 {
    samples.sort_by(f64::total_cmp);
    samples[((samples.len() as f64 - 1.0) * p).round() as usize]
}

async fn run() -> Res<()> {
    let calls: usize = std::env::var("PODQ_BENCH_CALLS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2_000);
    let http = reqwest::Client::new();
    let open = ServerProc::start(&http, false).await?;
    let checked = ServerProc::start(&http, true).await?;
    println!("| call | p50 with tokens | p50 without (baseline, same run) | p99 with tokens | p99 without (baseline, same run) | p99 ratio | target |");
    println!("|---|---|---|---|---|---|---|");
    for kind in ["GET /status", "POST /leases/{id}/heartbeat"] {
        let (mut with, mut without) = (Vec::new(), Vec::new());
        // Alternating calls share whatever else the machine does.
        for i in 0..calls + 100 {
            for (server, out) in [(&open, &mut without), (&checked, &mut with)] {
                let started = Instant::now();
                match kind {
                    "GET /status" => server.read(&http).await?,
                    _ => server.heartbeat(&http).await?,
                }
                if i >= 100 {
                    out.push(started.elapsed().as_secs_f64() * 1000.0);
                }
            }
        }
        let p99 = (percentile(&mut with, 0.99), percentile(&mut without, 0.99));
        println!(
            "| {kind} | {:.2} ms | {:.2} ms | {:.2} ms | {:.2} ms | {:.2} | ≤ 1.10 × baseline |",
            percentile(&mut with, 0.5),
            percentile(&mut without, 0.5),
            p99.0,
            p99.1,
            p99.0 / p99.1
        );
    }
    Ok(())
}

fn main() -> ExitCode {
    let runtime = tokio::runtime::Runtime::new().expect("a runtime");
    match runtime.block_on(run()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("auth bench: {e}");
            ExitCode::FAILURE
        }
    }
}
