//! Section 1, `cycles` (and `cycles-postgres`): lease cycles/s with 1, 8 and 64 workers,
//! each against the raw durable commits/s of the server's store. The lease cycle is also what
//! builds section 4's history.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use podq_api::JobId;

use podq_testkit::harness::{
    attempts_running, metrics_body, p50_p99, raw_commits_per_s, Api, Res, ServerProc, WorkerClient,
    ACCELERATOR, METRIC_NAMES,
};
use podq_testkit::postgres::{attempts_running_postgres, PostgresServer};

/// Lease cycles.
pub const CYCLE_WORKERS: [usize; 3] = [1, 8, 64];
pub const MAIN_WORKERS: usize = 64;
const CYCLE_WARMUP: Duration = Duration::from_secs(1);
const CYCLE_WINDOW: Duration = Duration::from_secs(5);
const HEARTBEAT_EVERY: Duration = Duration::from_millis(100);
const RUNNING_FOR: Duration = Duration::from_millis(300);
/// The cycle's metrics batch: steps 10, 20, ..., 100, each with every name.
const CYCLE_STEPS: i64 = 10;
const CYCLE_STEP_SIZE: i64 = 10;
pub const TARGET_CYCLE_RATIO: f64 = 0.5;

pub const CYCLE_END_STEP: i64 = CYCLE_STEPS * CYCLE_STEP_SIZE;

pub fn cycle_metrics_body() -> String {
    metrics_body(
        (1..=CYCLE_STEPS).map(|i| i * CYCLE_STEP_SIZE),
        &METRIC_NAMES,
    )
}

/// When a cycle ended and how long each of its parts took.
#[derive(Clone, Copy)]
pub struct CycleTimes {
    end: Instant,
    lease: Duration,
    /// From the first `running` heartbeat to the last: at least `RUNNING_FOR`.
    running: Duration,
    metrics: Duration,
    checkpoint: Duration,
    finish: Duration,
}

/// One lease cycle as a real worker runs it; `None` when the lease call found no job.
pub async fn run_cycle(w: &WorkerClient, wait_s: u64) -> Res<Option<(JobId, CycleTimes)>> {
    let a = Instant::now();
    let Some(lease) = w.lease(ACCELERATOR, wait_s).await? else {
        return Ok(None);
    };
    let b = Instant::now();
    // The trainer runs: heartbeats on the worker's timer until the running period is over.
    let mut beats = 0u32;
    loop {
        w.heartbeat(lease.lease_id, 0).await?;
        if b.elapsed() >= RUNNING_FOR {
            break;
        }
        beats += 1;
        tokio::time::sleep_until((b + HEARTBEAT_EVERY * beats).into()).await;
    }
    let c = Instant::now();
    w.metrics(lease.lease_id, cycle_metrics_body()).await?;
    let d = Instant::now();
    w.checkpoint(lease.lease_id, lease.job_id, CYCLE_END_STEP)
        .await?;
    let e = Instant::now();
    w.finish(lease.lease_id, CYCLE_END_STEP).await?;
    let f = Instant::now();
    Ok(Some((
        lease.job_id,
        CycleTimes {
            end: f,
            lease: b - a,
            running: c - b,
            metrics: d - c,
            checkpoint: e - d,
            finish: f - e,
        },
    )))
}

pub struct CycleRun {
    /// The server's store: `sqlite` or `postgres`.
    pub store: &'static str,
    pub workers: usize,
    pub cycles_per_s: f64,
    /// What the running period alone allows: workers / RUNNING_FOR.
    ceiling: f64,
    submitted: usize,
    empty_leases: u64,
    errors: u64,
    first_error: Option<String>,
    /// Finished attempts, and how many of them the server recorded as running.
    attempts: (i64, i64),
    /// p50/p99 in ms of cycles that ended inside the window.
    lease: (f64, f64),
    running: (f64, f64),
    metrics: (f64, f64),
    checkpoint: (f64, f64),
    finish: (f64, f64),
    cycle: (f64, f64),
    server_cpu_s: f64,
    /// Raw durable commits/s just before and just after the run.
    pub raw: (f64, f64),
}

impl CycleRun {
    pub fn print(&self) {
        println!(
            "lease cycles ({}), {:>2} worker(s): {:>6.1} cycles/s (ceiling of the {} ms running \
             period: {:.0}/s); cycle p50 {:.0} ms p99 {:.0} ms; p50/p99 ms: lease {:.1}/{:.1}, \
             running {:.0}/{:.0}, metrics {:.1}/{:.1}, checkpoint {:.1}/{:.1}, finish \
             {:.1}/{:.1}; server CPU {:.2} s over the window; running recorded for {} of {} \
             finished attempts; {} jobs submitted, {} empty leases, {} errors{}; raw durable \
             commits/s before {:.0}, after {:.0}",
            self.store,
            self.workers,
            self.cycles_per_s,
            RUNNING_FOR.as_millis(),
            self.ceiling,
            self.cycle.0,
            self.cycle.1,
            self.lease.0,
            self.lease.1,
            self.running.0,
            self.running.1,
            self.metrics.0,
            self.metrics.1,
            self.checkpoint.0,
            self.checkpoint.1,
            self.finish.0,
            self.finish.1,
            self.server_cpu_s,
            self.attempts.1,
            self.attempts.0,
            self.submitted,
            self.empty_leases,
            self.errors,
            self.first_error
                .as_deref()
                .map(|e| format!(", first: {e}"))
                .unwrap_or_default(),
            self.raw.0,
            self.raw.1,
        );
    }
}

#[derive(Default)]
struct WorkerLog {
    cycles: Vec<CycleTimes>,
    empty: u64,
    errors: u64,
    first_error: Option<String>,
}

pub async fn lease_cycles(workers: usize) -> Res<CycleRun> {
    lease_cycles_on(workers, None).await
}

/// Lease cycles on a server whose store is SQLite, or PostgreSQL on `postgres`, each against
/// its own store's raw commits/s.
pub async fn lease_cycles_on(workers: usize, postgres: Option<&PostgresServer>) -> Res<CycleRun> {
    let raw_commits = || async {
        match postgres {
            Some(postgres) => postgres.raw_commits_per_s().await,
            None => raw_commits_per_s().await,
        }
    };
    let raw_before = raw_commits().await?;
    let database = match postgres {
        Some(postgres) => Some(postgres.create_database().await?),
        None => None,
    };
    let server = ServerProc::start_on(&crate::PODQ, database.clone()).await?;
    let admin = Api::new(&server.base);
    let names = admin.experiment_names().await?;
    let ceiling = workers as f64 / RUNNING_FOR.as_secs_f64();
    // Enough for the ceiling over warm-up and window, and some; an empty lease is reported.
    let submitted = (ceiling * (CYCLE_WARMUP + CYCLE_WINDOW + Duration::from_secs(2)).as_secs_f64())
        as usize
        + 100;
    admin.submit_jobs(&names, submitted).await?;
    let stop = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicU64::new(0));
    // Built before any worker starts, so their setup is not inside the warm-up.
    let clients: Vec<WorkerClient> = (0..workers)
        .map(|w| WorkerClient::new(&server.base, format!("bench-pod-{w:03}")))
        .collect();
    let mut tasks = Vec::new();
    for w in clients {
        let (stop, done) = (Arc::clone(&stop), Arc::clone(&done));
        tasks.push(tokio::spawn(async move {
            let mut log = WorkerLog::default();
            while !stop.load(Ordering::Relaxed) {
                match run_cycle(&w, 1).await {
                    Ok(Some((_, times))) => {
                        done.fetch_add(1, Ordering::Relaxed);
                        log.cycles.push(times);
                    }
                    Ok(None) => log.empty += 1,
                    Err(e) => {
                        log.errors += 1;
                        log.first_error.get_or_insert_with(|| e.to_string());
                        tokio::time::sleep(Duration::from_millis(10)).await;
                    }
                }
            }
            log
        }));
    }
    tokio::time::sleep(CYCLE_WARMUP).await;
    let (t0, n0, cpu0) = (Instant::now(), done.load(Ordering::SeqCst), server.cpu_s()?);
    tokio::time::sleep(CYCLE_WINDOW).await;
    let (t1, n1, cpu1) = (Instant::now(), done.load(Ordering::SeqCst), server.cpu_s()?);
    stop.store(true, Ordering::SeqCst);
    let mut logs = Vec::new();
    for task in tasks {
        logs.push(task.await?);
    }
    // Every attempt has ended; running marks are written by the reaper's tick.
    tokio::time::sleep(Duration::from_millis(600)).await;
    let attempts = match &database {
        Some(url) => attempts_running_postgres(url).await?,
        None => attempts_running(&server.db).await?,
    };
    server.stop().await;
    let raw_after = raw_commits().await?;

    let in_window: Vec<&CycleTimes> = logs
        .iter()
        .flat_map(|l| l.cycles.iter())
        .filter(|c| c.end >= t0 && c.end <= t1)
        .collect();
    let pct = |f: &dyn Fn(&CycleTimes) -> Duration| {
        let mut v: Vec<f64> = in_window.iter().map(|c| f(c).as_secs_f64() * 1e3).collect();
        p50_p99(&mut v)
    };
    Ok(CycleRun {
        store: if postgres.is_some() {
            "postgres"
        } else {
            "sqlite"
        },
        workers,
        cycles_per_s: (n1 - n0) as f64 / (t1 - t0).as_secs_f64(),
        ceiling,
        submitted,
        empty_leases: logs.iter().map(|l| l.empty).sum(),
        errors: logs.iter().map(|l| l.errors).sum(),
        first_error: logs.iter().find_map(|l| l.first_error.clone()),
        attempts,
        lease: pct(&|c| c.lease),
        running: pct(&|c| c.running),
        metrics: pct(&|c| c.metrics),
        checkpoint: pct(&|c| c.checkpoint),
        finish: pct(&|c| c.finish),
        cycle: pct(&|c| c.lease + c.running + c.metrics + c.checkpoint + c.finish),
        server_cpu_s: cpu1 - cpu0,
        raw: (raw_before, raw_after),
    })
}
