//! Section 3, `submit`: submissions/s with workers waiting, and the idle server's CPU time.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use podq_api::SubmitResponse;

use podq_testkit::harness::{cpu_s_of, p50_p99, Api, Res, ServerProc, WorkerClient, ADMIN_TOKEN};

/// Submissions with waiting workers.
const SUBMIT_WARMUP: Duration = Duration::from_millis(500);
const SUBMIT_WINDOW: Duration = Duration::from_secs(4);
const WAITER_WAIT_S: u64 = 30;
/// Time for every waiter to make its first lease call and park.
const WAITERS_SETTLE: Duration = Duration::from_millis(1500);
pub const IDLE_WINDOW: Duration = Duration::from_secs(5);
pub const TARGET_SUBMIT_RATIO: f64 = 0.9;
/// "Near zero": 1 % of one core over the idle window.
pub const TARGET_IDLE_CPU_S: f64 = 0.01 * 5.0;

pub struct SubmitRun {
    pub waiters: usize,
    pub accelerator: &'static str,
    pub submits_per_s: f64,
    submit: (f64, f64),
    /// Jobs the waiters took (and finished) during the window.
    taken: u64,
    timeouts: u64,
    waiter_errors: u64,
    first_error: Option<String>,
    pub server_cpu_ms_per_submit: f64,
    /// (server, bench) CPU seconds over `IDLE_WINDOW` with nothing submitted.
    pub idle_cpu: Option<(f64, f64)>,
}

impl SubmitRun {
    pub fn print(&self) {
        println!(
            "submits, {:>3} workers waiting for {:<6}: {:>6.1} submits/s (p50 {:.2} ms p99 \
             {:.2} ms); server CPU {:.2} ms a submit; {} jobs taken by waiters in the window, \
             {} empty long polls, {} waiter errors{}{}",
            self.waiters,
            self.accelerator,
            self.submits_per_s,
            self.submit.0,
            self.submit.1,
            self.server_cpu_ms_per_submit,
            self.taken,
            self.timeouts,
            self.waiter_errors,
            self.first_error
                .as_deref()
                .map(|e| format!(", first: {e}"))
                .unwrap_or_default(),
            self.idle_cpu
                .map(|(server, bench)| format!(
                    "; idle {} s after: server CPU {:.0} ms, bench (clients) CPU {:.0} ms",
                    IDLE_WINDOW.as_secs(),
                    server * 1e3,
                    bench * 1e3
                ))
                .unwrap_or_default(),
        );
    }
}

#[derive(Default)]
pub struct WaiterCounts {
    pub taken: AtomicU64,
    pub timeouts: AtomicU64,
    pub errors: AtomicU64,
    pub first_error: Mutex<Option<String>>,
}

/// A worker whose pod is idle: long-polls for a job; finishes a job it gets at once and
/// waits again.
pub async fn waiter(w: WorkerClient, accelerator: &'static str, counts: Arc<WaiterCounts>) {
    loop {
        let result = async {
            match w.lease(accelerator, WAITER_WAIT_S).await? {
                Some(lease) => {
                    w.finish(lease.lease_id, 0).await?;
                    counts.taken.fetch_add(1, Ordering::Relaxed);
                }
                None => {
                    counts.timeouts.fetch_add(1, Ordering::Relaxed);
                }
            }
            Ok::<_, Box<dyn std::error::Error + Send + Sync>>(())
        }
        .await;
        if let Err(e) = result {
            counts.errors.fetch_add(1, Ordering::Relaxed);
            counts
                .first_error
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .get_or_insert_with(|| e.to_string());
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

pub async fn submit_rate(waiters: usize, accelerator: &'static str, idle: bool) -> Res<SubmitRun> {
    let server = ServerProc::start(&crate::PODQ).await?;
    let admin = Api::new(&server.base);
    let names = admin.experiment_names().await?;
    let counts = Arc::new(WaiterCounts::default());
    let clients: Vec<WorkerClient> = (0..waiters)
        .map(|w| WorkerClient::new(&server.base, format!("bench-idle-{w:03}")))
        .collect();
    let tasks: Vec<_> = clients
        .into_iter()
        .map(|w| tokio::spawn(waiter(w, accelerator, Arc::clone(&counts))))
        .collect();
    tokio::time::sleep(WAITERS_SETTLE).await;

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
    let mut i = 0;
    let warm_until = Instant::now() + SUBMIT_WARMUP;
    while Instant::now() < warm_until {
        submit_one(i).await?;
        i += 1;
    }
    let taken0 = counts.taken.load(Ordering::SeqCst);
    let (t0, cpu0) = (Instant::now(), server.cpu_s()?);
    let mut latencies = Vec::new();
    while t0.elapsed() < SUBMIT_WINDOW {
        let a = Instant::now();
        submit_one(i).await?;
        latencies.push(a.elapsed().as_secs_f64() * 1e3);
        i += 1;
    }
    let (t1, cpu1) = (Instant::now(), server.cpu_s()?);
    let taken = counts.taken.load(Ordering::SeqCst) - taken0;

    let idle_cpu = if idle {
        // Let the last jobs be taken and the waiters park again.
        tokio::time::sleep(Duration::from_secs(1)).await;
        let (server0, bench0) = (server.cpu_s()?, cpu_s_of("/proc/self/stat")?);
        tokio::time::sleep(IDLE_WINDOW).await;
        let (server1, bench1) = (server.cpu_s()?, cpu_s_of("/proc/self/stat")?);
        Some((server1 - server0, bench1 - bench0))
    } else {
        None
    };
    for task in &tasks {
        task.abort();
    }
    for task in tasks {
        let _ = task.await;
    }
    server.stop().await;
    let n = latencies.len();
    let first_error = counts
        .first_error
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .clone();
    Ok(SubmitRun {
        waiters,
        accelerator,
        submits_per_s: n as f64 / (t1 - t0).as_secs_f64(),
        submit: p50_p99(&mut latencies),
        taken,
        timeouts: counts.timeouts.load(Ordering::SeqCst),
        waiter_errors: counts.errors.load(Ordering::SeqCst),
        first_error,
        server_cpu_ms_per_submit: (cpu1 - cpu0) * 1e3 / n.max(1) as f64,
        idle_cpu,
    })
}
