//! Section 2, `metrics`: metric ingestion over HTTP against the raw batched insert, and
//! reading a long series cut to 2,000 points.

use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use podq_api::Lease;
use sqlx::Connection;

use podq_testkit::harness::{
    metrics_body, p50_p99, raw_batched_points_per_s, read_only, Api, Res, ServerProc, WorkerClient,
    ACCELERATOR, METRIC_NAMES,
};

/// Metric ingestion and the long-series query.
const METRIC_WARMUP: Duration = Duration::from_millis(500);
const METRIC_WINDOW: Duration = Duration::from_secs(4);
pub const METRIC_SENDERS: usize = 4;
const INGEST_STEPS_PER_BATCH: i64 = 100;
pub const TARGET_METRIC_RATIO: f64 = 0.5;
const QUERY_POINTS: i64 = 1_000_000;
const QUERY_BATCH: i64 = 1000;
const QUERY_MAX_POINTS: i64 = 2000;
const QUERY_REQUESTS: usize = 200;
pub const TARGET_QUERY_P99_MS: f64 = 50.0;

/// A fresh server with one submitted job leased to `pod` and running.
async fn server_with_running_job(pod: &str) -> Res<(ServerProc, WorkerClient, Lease)> {
    let server = ServerProc::start(&crate::PODQ).await?;
    let admin = Api::new(&server.base);
    let names = admin.experiment_names().await?;
    admin.submit_jobs(&names, 1).await?;
    let worker = WorkerClient::new(&server.base, pod.to_owned());
    let lease = worker
        .lease(ACCELERATOR, 5)
        .await?
        .ok_or("the submitted job was not leased")?;
    worker.heartbeat(lease.lease_id, 0).await?;
    Ok((server, worker, lease))
}

pub struct MetricRun {
    pub senders: usize,
    pub points_per_s: f64,
    batch: (f64, f64),
    errors: u64,
    first_error: Option<String>,
    /// Raw batched insert points/s just before and just after the run.
    pub raw: (f64, f64),
}

impl MetricRun {
    pub fn print(&self) {
        println!(
            "metric ingestion over HTTP, {} sender(s): {:.0} points/s (batch of {} p50 {:.2} ms \
             p99 {:.2} ms; {} errors{}); raw batched insert points/s before {:.0}, after {:.0}",
            self.senders,
            self.points_per_s,
            INGEST_STEPS_PER_BATCH as usize * METRIC_NAMES.len(),
            self.batch.0,
            self.batch.1,
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

pub async fn metric_ingestion(senders: usize) -> Res<MetricRun> {
    let raw_before = raw_batched_points_per_s().await?;
    let (server, _worker, lease) = server_with_running_job("bench-metrics").await?;
    let lease_id = lease.lease_id;
    let next_step = Arc::new(AtomicI64::new(0));
    let points = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let per_batch = (INGEST_STEPS_PER_BATCH as usize * METRIC_NAMES.len()) as u64;
    let clients: Vec<WorkerClient> = (0..senders)
        .map(|_| WorkerClient::new(&server.base, "bench-metrics".into()))
        .collect();
    let mut tasks = Vec::new();
    for w in clients {
        let (next_step, points, stop) = (
            Arc::clone(&next_step),
            Arc::clone(&points),
            Arc::clone(&stop),
        );
        tasks.push(tokio::spawn(async move {
            let mut latencies = Vec::new();
            let (mut errors, mut first_error) = (0u64, None::<String>);
            while !stop.load(Ordering::Relaxed) {
                let step0 = next_step.fetch_add(INGEST_STEPS_PER_BATCH, Ordering::Relaxed);
                let body = metrics_body(step0..step0 + INGEST_STEPS_PER_BATCH, &METRIC_NAMES);
                let a = Instant::now();
                match w.metrics(lease_id, body).await {
                    Ok(()) => {
                        points.fetch_add(per_batch, Ordering::Relaxed);
                        latencies.push((Instant::now(), a.elapsed()));
                    }
                    Err(e) => {
                        errors += 1;
                        first_error.get_or_insert_with(|| e.to_string());
                        tokio::time::sleep(Duration::from_millis(10)).await;
                    }
                }
            }
            (latencies, errors, first_error)
        }));
    }
    tokio::time::sleep(METRIC_WARMUP).await;
    let (t0, n0) = (Instant::now(), points.load(Ordering::SeqCst));
    tokio::time::sleep(METRIC_WINDOW).await;
    let (t1, n1) = (Instant::now(), points.load(Ordering::SeqCst));
    stop.store(true, Ordering::SeqCst);
    let mut lat = Vec::new();
    let (mut errors, mut first_error) = (0, None);
    for task in tasks {
        let (l, e, f) = task.await?;
        lat.extend(
            l.into_iter()
                .filter(|(end, _)| *end >= t0 && *end <= t1)
                .map(|(_, d)| d.as_secs_f64() * 1e3),
        );
        errors += e;
        first_error = first_error.or(f);
    }
    server.stop().await;
    let raw_after = raw_batched_points_per_s().await?;
    Ok(MetricRun {
        senders,
        points_per_s: (n1 - n0) as f64 / (t1 - t0).as_secs_f64(),
        batch: p50_p99(&mut lat),
        errors,
        first_error,
        raw: (raw_before, raw_after),
    })
}

pub struct QueryRun {
    p50_ms: f64,
    pub p99_ms: f64,
    points_returned: usize,
    ingest_s: f64,
    /// Baseline: one raw read of the whole series from the server's database.
    pub full_read_ms: f64,
}

impl QueryRun {
    pub fn print(&self) {
        println!(
            "metrics query, {QUERY_POINTS} points -> {QUERY_MAX_POINTS}: p50 {:.1} ms, p99 \
             {:.1} ms ({} points returned, {QUERY_REQUESTS} requests); raw read of every point \
             {:.0} ms; the series went in over HTTP in {:.1} s",
            self.p50_ms, self.p99_ms, self.points_returned, self.full_read_ms, self.ingest_s
        );
    }
}

pub async fn metrics_query() -> Res<QueryRun> {
    const NAME: &str = "train/lm_loss";
    let (server, _worker, lease) = server_with_running_job("bench-query").await?;
    let lease_id = lease.lease_id;
    // 1,000,000 points of one series, in batches of 1,000 steps, over HTTP.
    let started = Instant::now();
    let next = Arc::new(AtomicI64::new(0));
    let mut tasks = Vec::new();
    for _ in 0..METRIC_SENDERS {
        let w = WorkerClient::new(&server.base, "bench-query".into());
        let next = Arc::clone(&next);
        tasks.push(tokio::spawn(async move {
            loop {
                let batch = next.fetch_add(1, Ordering::Relaxed);
                if batch * QUERY_BATCH >= QUERY_POINTS {
                    return Ok::<_, Box<dyn std::error::Error + Send + Sync>>(());
                }
                let steps = (batch * QUERY_BATCH + 1..=(batch + 1) * QUERY_BATCH).map(|i| i * 10);
                w.metrics(lease_id, metrics_body(steps, &[NAME])).await?;
            }
        }));
    }
    for task in tasks {
        task.await??;
    }
    let ingest_s = started.elapsed().as_secs_f64();

    let mut conn = read_only(&server.db).await?;
    let started = Instant::now();
    let chunks: Vec<Vec<u8>> = sqlx::query_scalar(
        "SELECT data FROM (SELECT c.last_step, c.data FROM metric_chunks c \
         JOIN metric_series s ON s.id = c.series_id WHERE s.job_id = ?1 AND s.name = ?2 \
         UNION ALL SELECT t.last_step, t.data FROM metric_series s \
         JOIN jobs j ON j.id = s.job_id \
         JOIN metric_tail t ON t.job_seq = j.seq AND t.series_id = s.id \
         WHERE s.job_id = ?1 AND s.name = ?2) ORDER BY last_step",
    )
    .bind(lease.job_id.to_string())
    .bind(NAME)
    .fetch_all(&mut conn)
    .await?;
    let mut all: Vec<(i64, f64)> = Vec::new();
    for data in &chunks {
        all.extend(podq_server::store::chunks::decode_points(data)?);
    }
    let full_read_ms = started.elapsed().as_secs_f64() * 1e3;
    conn.close().await?;
    if all.len() as i64 != QUERY_POINTS {
        return Err(format!("the series holds {} points, not {QUERY_POINTS}", all.len()).into());
    }

    let reader = Api::new(&server.base);
    let path = format!(
        "/jobs/{}/metrics?names={NAME}&max_points={QUERY_MAX_POINTS}",
        lease.job_id
    );
    let mut latencies = Vec::with_capacity(QUERY_REQUESTS);
    let mut points_returned = 0;
    for _ in 0..QUERY_REQUESTS {
        let (elapsed, body) = reader.get_timed(&path).await?;
        latencies.push(elapsed.as_secs_f64() * 1e3);
        let body: serde_json::Value = serde_json::from_slice(&body)?;
        points_returned = body["series"][0]["points"].as_array().map_or(0, Vec::len);
    }
    server.stop().await;
    let (p50_ms, p99_ms) = p50_p99(&mut latencies);
    Ok(QueryRun {
        p50_ms,
        p99_ms,
        points_returned,
        ingest_s,
        full_read_ms,
    })
}
