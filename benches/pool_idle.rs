//! What an idle slice costs: the same bursty workload twice in one bench run, on a
//! real server and a real `podq pool` of simulated slices, once with `idle_after` and once
//! with `never` (the baseline: slices kept, as a pod made by hand is):
//!
//!     cargo bench --profile dev --bench pool_idle    # about 4 minutes
//!
//! Time is scaled: one second here stands for one minute. The workload is three bursts of
//! two jobs (what a group submitted at once looks like to the pool), each job training
//! `RUN_S`, `GAP_S` apart, then `TAIL_S` with no work before the window closes. The pool
//! holds up to two slices in one zone with room.
//!
//! Printed for each run: slice-time paid (every second a slice of the pool was alive, from
//! the pool's own journal, as the grant counts it), slice-time leased (the attempts' lease
//! to end), and the idle share. No assertion: these machines are shared and noisy.

#[path = "../tests/common/mod.rs"]
mod common;

use std::process::ExitCode;
use std::time::{Duration, Instant};

use common::pools::PoolProcess;
use common::Server;
use serde_json::{json, Value};

/// "10 min": the idle_after the issue compares with `never`.
const IDLE_AFTER: &str = "10s";
const RUN_S: u32 = 8;
const GAP_S: u64 = 30;
const TAIL_S: u64 = 40;
const BURSTS: [[&str; 2]; 3] = [
    ["exp02a_01", "exp02a_02"],
    ["exp02a_03", "exp02a_04"],
    ["exp02a_05", "exp02a_06"],
];
const WAIT: Duration = Duration::from_secs(180);

type Res<T> = Result<T, Box<dyn std::error::Error + Send + Sync>>;

struct Measured {
    paid_s: f64,
    leased_s: f64,
    slices_made: usize,
}

async fn one_run(idle_after: &str) -> Res<Measured> {
    let server = Server::start().await;
    let yaml = format!(
        "pools:\n  - name: bench\n    accelerator: v4-64\n    max_slices: 2\n    \
         idle_after: {idle_after}\n    provisioning: spot\n    driver: local\n    zones:\n      \
         - zone-a\n"
    );
    let pool = PoolProcess::start(&server, &yaml, RUN_S);
    let mut jobs = Vec::new();
    for (i, burst) in BURSTS.iter().enumerate() {
        if i > 0 {
            tokio::time::sleep(Duration::from_secs(GAP_S)).await;
        }
        let mut ids = Vec::new();
        for experiment in burst {
            ids.push(server.submit_one(experiment, json!({})).await);
        }
        for id in &ids {
            server.wait_state(id, "succeeded", WAIT).await;
        }
        jobs.extend(ids);
    }
    tokio::time::sleep(Duration::from_secs(TAIL_S)).await;
    let (_, page) = server.get("/pools").await;
    let view = &page["pools"][0];
    let paid_s = view["slice_hours"].as_f64().unwrap_or_default() * 3600.0;
    let mut leased_s = 0.0;
    for id in &jobs {
        let job = server.job(id).await;
        for attempt in job["attempts"].as_array().cloned().unwrap_or_default() {
            leased_s += lease_seconds(&attempt);
        }
    }
    let (_, audit) = server.get("/audit?person=pool:bench&limit=1000").await;
    let slices_made = audit["entries"].as_array().map_or(0, |e| {
        e.iter().filter(|e| e["action"] == "slice_created").count()
    });
    drop(pool);
    Ok(Measured {
        paid_s,
        leased_s,
        slices_made,
    })
}

fn lease_seconds(attempt: &Value) -> f64 {
    let time = |key: &str| {
        attempt[key]
            .as_str()
            .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok())
    };
    match (time("started_at"), time("ended_at")) {
        (Some(start), Some(end)) => (end - start).num_milliseconds() as f64 / 1000.0,
        _ => 0.0,
    }
}

fn print(label: &str, m: &Measured) {
    let idle = (m.paid_s - m.leased_s).max(0.0);
    println!(
        "{label:<22} paid {:>6.0} slice-min   leased {:>5.0} slice-min   idle {:>5.0} slice-min \
         ({:>3.0}% of paid)   slices made {}",
        m.paid_s,
        m.leased_s,
        idle,
        if m.paid_s > 0.0 {
            100.0 * idle / m.paid_s
        } else {
            0.0
        },
        m.slices_made,
    );
}

#[tokio::main]
async fn main() -> ExitCode {
    let started = Instant::now();
    println!(
        "pool idle cost: 3 bursts of 2 jobs ({RUN_S} min each), {GAP_S} min apart, then \
         {TAIL_S} min idle; 1 s stands for 1 min"
    );
    let runs = [
        ("never (baseline)", "never"),
        ("idle_after 10 min", IDLE_AFTER),
    ];
    let mut measured = Vec::new();
    for (label, idle_after) in runs {
        match one_run(idle_after).await {
            Ok(m) => {
                print(label, &m);
                measured.push(m);
            }
            Err(e) => {
                eprintln!("{label}: {e}");
                return ExitCode::FAILURE;
            }
        }
    }
    if let [never, idle] = &measured[..] {
        println!(
            "idle_after 10 min pays {:.0}% of what `never` pays for the same leased time \
             (bench took {:.0} s)",
            100.0 * idle.paid_s / never.paid_s.max(1.0),
            started.elapsed().as_secs_f64()
        );
    }
    ExitCode::SUCCESS
}
