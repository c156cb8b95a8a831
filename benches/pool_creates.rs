//! How long a pool takes from demand to N slices ready, with creates in flight against the
//! same pool making one slice at a time (`max_creating: 1`, what a pool that waits on each
//! create does), both in this run, on a real server and a real `podq pool` of simulated
//! slices whose creates each take `CREATE_S` (answered once the slice is made, as
//! `tpu-vm create` without `--async` is):
//!
//!     cargo bench --profile dev --bench pool_creates    # about 3 minutes
//!
//! Printed for N = 1, 4 and 16: seconds from the submit to N slices READY, each way, and the
//! oldest the pool's report at the server grew while its creates ran. The target
//! is printed as a target. No assertion: these machines are shared and noisy.

#[path = "../tests/common/mod.rs"]
mod common;

use std::process::ExitCode;
use std::time::{Duration, Instant};

use common::pools::PoolProcess;
use common::Server;
use serde_json::json;

/// Seconds each create takes.
const CREATE_S: f64 = 4.0;
const SIZES: [u32; 3] = [1, 4, 16];
const WAIT: Duration = Duration::from_secs(300);

type Res<T> = Result<T, Box<dyn std::error::Error + Send + Sync>>;

struct Measured {
    to_ready: Duration,
    oldest_report: Duration,
}

/// Submits the whole suite (more jobs than slices), then watches `/pools` until `n` slices
/// are READY.
async fn one_run(n: u32, max_creating: u32) -> Res<Measured> {
    let server = Server::start().await;
    let yaml = format!(
        "pools:\n  - name: bench\n    accelerator: v4-64\n    max_slices: {n}\n    \
         max_creating: {max_creating}\n    idle_after: never\n    provisioning: spot\n    \
         driver: local\n    hosts: 1\n    zones:\n      - zone-a\n"
    );
    let create_s = CREATE_S.to_string();
    // The trainers run long and mostly sleep: this measures the slices, not training.
    let pool = PoolProcess::start_with(&server, &yaml, 3600, &["--sim-create-s", &create_s]);
    let started = Instant::now();
    let (status, answer) = server.post("/jobs", json!({"all": true})).await;
    if status != 201 {
        return Err(format!("submit: {status} {answer}").into());
    }
    let mut oldest_report = Duration::ZERO;
    loop {
        let (_, page) = server.get("/pools").await;
        if let Some(view) = page["pools"].as_array().and_then(|p| p.first()) {
            let reported: Option<chrono::DateTime<chrono::Utc>> =
                serde_json::from_value(view["reported_at"].clone()).ok();
            if let Some(reported) = reported {
                let age = (chrono::Utc::now() - reported).to_std().unwrap_or_default();
                oldest_report = oldest_report.max(age);
            }
            let ready = view["slices"]
                .as_array()
                .map_or(0, |s| s.iter().filter(|s| s["state"] == "ready").count());
            if ready >= n as usize {
                break;
            }
        }
        if started.elapsed() > WAIT {
            return Err(format!("{n} slices not ready after {WAIT:?}: {}", pool.log()).into());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let to_ready = started.elapsed();
    drop(pool);
    Ok(Measured {
        to_ready,
        oldest_report,
    })
}

#[tokio::main]
async fn main() -> ExitCode {
    let started = Instant::now();
    println!(
        "pool creates: demand to N slices READY, each create {CREATE_S} s, a 0.3 s tick; \
         target: 16 slices in under {:.0} s (twice one create)",
        2.0 * CREATE_S
    );
    for n in SIZES {
        let mut row: Vec<Measured> = Vec::new();
        for max_creating in [1, n] {
            match one_run(n, max_creating).await {
                Ok(m) => row.push(m),
                Err(e) => {
                    eprintln!("N = {n}, max_creating {max_creating}: {e}");
                    return ExitCode::FAILURE;
                }
            }
        }
        let (baseline, in_flight) = (&row[0], &row[1]);
        println!(
            "N = {n:>2}   one at a time (baseline) {:>6.1} s   in flight {:>6.1} s   \
             ({:.1}x)   oldest report {:.1} s / {:.1} s",
            baseline.to_ready.as_secs_f64(),
            in_flight.to_ready.as_secs_f64(),
            baseline.to_ready.as_secs_f64() / in_flight.to_ready.as_secs_f64().max(1e-9),
            baseline.oldest_report.as_secs_f64(),
            in_flight.oldest_report.as_secs_f64(),
        );
    }
    println!("({:.0} s in all)", started.elapsed().as_secs_f64());
    ExitCode::SUCCESS
}
