//! Section 6, `crowded`: submissions/s with 64 workers long-polling for a slice type no job
//! lists, on a store that already holds 40,000 jobs of other types (issue 67, item 10).
//!
//! One server throughout, so that the baseline sees the same store: 40,000 jobs are submitted
//! first (`"all": true`, for `ACCELERATOR`; no pod of that type asks, so they stay queued),
//! then sequential single-experiment submits are timed with nobody waiting, with 64 workers
//! waiting for `OTHER_ACCELERATOR` (which no job lists), and with nobody waiting again. The
//! baseline of the run with waiters is the mean of the two runs around it. Each run adds a
//! few thousand jobs: the store grows from 40,000 during the section, never shrinks.
//!
//! Also timed, to show what a waiter's empty claim costs: a lease call for `OTHER_ACCELERATOR`
//! with `wait_s` 0 (it checks the type's queue once and answers 204), on the empty store and
//! then at 40,000 jobs.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use podq_api::SubmitResponse;
use podq_testkit::harness::{
    mean, p50_p99, Api, Res, ServerProc, WorkerClient, ADMIN_TOKEN, OTHER_ACCELERATOR,
};

use crate::submit::{waiter, WaiterCounts};

/// Jobs in the store before anything is timed; `PODQ_BENCH_CROWDED_JOBS` overrides it.
pub const CROWDED_JOBS: usize = 40_000;
pub const CROWDED_WAITERS: usize = 64;
pub const TARGET_CROWDED_RATIO: f64 = 0.8;
const WINDOW: Duration = Duration::from_secs(4);
const WARMUP: Duration = Duration::from_millis(500);
const SETTLE: Duration = Duration::from_millis(1500);
/// Empty claims timed at each size.
const EMPTY_CLAIMS: usize = 100;

/// One timed window of sequential submits.
#[derive(Clone, Copy)]
pub struct Window {
    pub submits_per_s: f64,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub server_cpu_ms_per_submit: f64,
    /// Jobs in the store when the window began.
    pub jobs_before: usize,
}

pub struct CrowdedRun {
    pub before: Window,
    pub waiting: Window,
    pub after: Window,
    /// p50 and p99 (ms) of an empty claim for `OTHER_ACCELERATOR`: on the empty store, and
    /// with the store crowded.
    pub empty_claim: ((f64, f64), (f64, f64)),
    pub prefill_s: f64,
    waiter_errors: u64,
    timeouts: u64,
    first_error: Option<String>,
}

impl CrowdedRun {
    pub fn baseline(&self) -> f64 {
        mean(&[self.before.submits_per_s, self.after.submits_per_s])
    }

    pub fn ratio(&self) -> f64 {
        self.waiting.submits_per_s / self.baseline()
    }

    pub fn print(&self) {
        let line = |what: &str, w: &Window| {
            println!(
                "crowded store, {what}: {:>6.1} submits/s (p50 {:.2} ms p99 {:.2} ms); server \
                 CPU {:.2} ms a submit; {} jobs stored at its start",
                w.submits_per_s, w.p50_ms, w.p99_ms, w.server_cpu_ms_per_submit, w.jobs_before
            )
        };
        println!(
            "crowded store: {} jobs submitted in {:.1} s before timing",
            self.before.jobs_before, self.prefill_s
        );
        line("0 waiting (before)", &self.before);
        line(
            &format!("{CROWDED_WAITERS} waiting for {OTHER_ACCELERATOR}"),
            &self.waiting,
        );
        line("0 waiting (after)", &self.after);
        let ((e50, e99), (c50, c99)) = self.empty_claim;
        println!(
            "crowded store: with waiters {:.1} /s against 0 waiting {:.1} /s (mean of before and \
             after): ratio {:.3} (target ≥ {TARGET_CROWDED_RATIO}); {} empty long polls, {} \
             waiter errors{}; an empty claim for {OTHER_ACCELERATOR}: p50 {e50:.2} ms p99 \
             {e99:.2} ms on the empty store, p50 {c50:.2} ms p99 {c99:.2} ms crowded",
            self.waiting.submits_per_s,
            self.baseline(),
            self.ratio(),
            self.timeouts,
            self.waiter_errors,
            self.first_error
                .as_deref()
                .map(|e| format!(", first: {e}"))
                .unwrap_or_default(),
        );
    }
}

fn crowded_jobs() -> Res<usize> {
    match std::env::var("PODQ_BENCH_CROWDED_JOBS") {
        Ok(text) => Ok(text
            .replace('_', "")
            .parse()
            .map_err(|e| format!("PODQ_BENCH_CROWDED_JOBS: `{text}`: {e}"))?),
        Err(_) => Ok(CROWDED_JOBS),
    }
}

/// p50 and p99 of `EMPTY_CLAIMS` lease calls for `OTHER_ACCELERATOR` that wait for nothing.
async fn empty_claims(w: &WorkerClient) -> Res<(f64, f64)> {
    let mut ms = Vec::with_capacity(EMPTY_CLAIMS);
    for _ in 0..EMPTY_CLAIMS {
        let a = Instant::now();
        if w.lease(OTHER_ACCELERATOR, 0).await?.is_some() {
            return Err(format!("a job for {OTHER_ACCELERATOR} was leased").into());
        }
        ms.push(a.elapsed().as_secs_f64() * 1e3);
    }
    Ok(p50_p99(&mut ms))
}

pub async fn crowded_submit_rate() -> Res<CrowdedRun> {
    let jobs = crowded_jobs()?;
    let server = ServerProc::start(&crate::PODQ).await?;
    let admin = Api::new(&server.base);
    let names = admin.experiment_names().await?;
    let prober = WorkerClient::new(&server.base, "bench-prober".to_owned());
    let empty = empty_claims(&prober).await?;

    let t = Instant::now();
    admin.submit_jobs(&names, jobs).await?;
    let prefill_s = t.elapsed().as_secs_f64();
    let crowded = empty_claims(&prober).await?;

    let mut stored = jobs;
    let mut i = 0;
    let before = window(&server, &admin, &names, &mut i, &mut stored).await?;

    let counts = Arc::new(WaiterCounts::default());
    let tasks: Vec<_> = (0..CROWDED_WAITERS)
        .map(|w| WorkerClient::new(&server.base, format!("bench-crowded-{w:03}")))
        .map(|w| tokio::spawn(waiter(w, OTHER_ACCELERATOR, Arc::clone(&counts))))
        .collect();
    tokio::time::sleep(SETTLE).await;
    let waiting = window(&server, &admin, &names, &mut i, &mut stored).await?;
    for task in &tasks {
        task.abort();
    }
    for task in tasks {
        let _ = task.await;
    }
    tokio::time::sleep(SETTLE).await;
    let after = window(&server, &admin, &names, &mut i, &mut stored).await?;
    server.stop().await;
    let first_error = counts
        .first_error
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .clone();
    Ok(CrowdedRun {
        before,
        waiting,
        after,
        empty_claim: (empty, crowded),
        prefill_s,
        waiter_errors: counts.errors.load(Ordering::SeqCst),
        timeouts: counts.timeouts.load(Ordering::SeqCst),
        first_error,
    })
}

/// Sequential single-experiment submits: a warm-up, then `WINDOW` timed.
async fn window(
    server: &ServerProc,
    admin: &Api,
    names: &[String],
    i: &mut usize,
    stored: &mut usize,
) -> Res<Window> {
    let submit_one = |i: usize| {
        let body = serde_json::json!({"experiments": [&names[i % names.len()]], "force": true});
        let admin = admin.clone();
        async move {
            let (status, body) = admin.post("/jobs", ADMIN_TOKEN, body.to_string()).await?;
            let answer: SubmitResponse = serde_json::from_slice(&body)?;
            if status != 201 || answer.created.len() != 1 {
                return Err(
                    format!("POST /jobs: {status}, {} created", answer.created.len()).into(),
                );
            }
            Ok::<_, Box<dyn std::error::Error + Send + Sync>>(())
        }
    };
    let warm_until = Instant::now() + WARMUP;
    while Instant::now() < warm_until {
        submit_one(*i).await?;
        *i += 1;
        *stored += 1;
    }
    let jobs_before = *stored;
    let (t0, cpu0) = (Instant::now(), server.cpu_s()?);
    let mut latencies = Vec::new();
    while t0.elapsed() < WINDOW {
        let a = Instant::now();
        submit_one(*i).await?;
        latencies.push(a.elapsed().as_secs_f64() * 1e3);
        *i += 1;
        *stored += 1;
    }
    let (t1, cpu1) = (Instant::now(), server.cpu_s()?);
    let n = latencies.len();
    let (p50_ms, p99_ms) = p50_p99(&mut latencies);
    Ok(Window {
        submits_per_s: n as f64 / (t1 - t0).as_secs_f64(),
        p50_ms,
        p99_ms,
        server_cpu_ms_per_submit: (cpu1 - cpu0) * 1e3 / n.max(1) as f64,
        jobs_before,
    })
}
