//! Section 4, `history`: read latency and memory against a growing history, read alongside a
//! control server whose history stays at the smallest size.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use podq_api::{JobDetail, JobList, Lease, Status};
use podq_api::{JobId, JobState};
use sqlx::Connection;
use tokio_util::sync::CancellationToken;

use crate::cycles::{cycle_metrics_body, run_cycle, CYCLE_END_STEP};
use crate::Row;
use podq_testkit::harness::{
    attempts_running, p50_p99, read_only, thousands, Api, Res, ServerProc, WorkerClient,
    ACCELERATOR, METRIC_NAMES,
};

/// History and reads.
pub const DEFAULT_HISTORY: [usize; 3] = [1000, 10_000, 100_000];
const HISTORY_WORKERS: usize = 64;
const LIVE_QUEUE: usize = 100;
pub const HELD_RUNNING: usize = 8;
/// Submitted jobs kept ahead of the cycles while the history is built.
const QUEUE_AHEAD: usize = 2000;
const READ_WARMUP_ROUNDS: usize = 20;
const READ_ROUNDS: usize = 400;
pub const WALK_PAGE: usize = 100;
const TARGET_READ_GROWTH: f64 = 1.5;
const TARGET_READ_P99_MS: f64 = 20.0;
const TARGET_RSS_MB: f64 = 150.0;

/// A small deterministic generator, for picking jobs at random.
struct XorShift(u64);

impl XorShift {
    fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % n.max(1) as u64) as usize
    }
}

const READS: [&str; 5] = [
    "GET /status (JSON)",
    "GET /jobs?limit=100",
    "GET /jobs?state=running&limit=100",
    "GET /jobs?limit=100&after=<deep>",
    "GET /jobs/{id}, a finished job",
];

/// A server whose history the lease cycles build, with its live jobs: 100 queued, and 8
/// held running by other pods between the steps of the build.
struct History {
    server: ServerProc,
    admin: Api,
    reader: Api,
    names: Arc<Vec<String>>,
    workers: Vec<WorkerClient>,
    holders: Vec<WorkerClient>,
    /// Jobs finished so far, in no particular order.
    finished: Vec<JobId>,
    submitted: usize,
    held: Option<Held>,
}

/// Jobs held running, and the task that heartbeats them every second.
struct Held {
    leases: Vec<Lease>,
    beat: CancellationToken,
    task: tokio::task::JoinHandle<Res<()>>,
}

impl History {
    async fn start() -> Res<History> {
        let server = ServerProc::start(&crate::PODQ).await?;
        let admin = Api::new(&server.base);
        let names = Arc::new(admin.experiment_names().await?);
        let workers = (0..HISTORY_WORKERS)
            .map(|w| WorkerClient::new(&server.base, format!("bench-pod-{w:03}")))
            .collect();
        let holders = (0..HELD_RUNNING)
            .map(|w| WorkerClient::new(&server.base, format!("bench-busy-{w}")))
            .collect();
        Ok(History {
            reader: Api::new(&server.base),
            admin,
            names,
            workers,
            holders,
            finished: Vec::new(),
            submitted: 0,
            held: None,
            server,
        })
    }

    /// Finishes the held jobs, runs cycles until `size` jobs have finished, with `size` + the
    /// live jobs submitted, then holds 8 of the queued ones running. Answers the time and the
    /// cycles it took.
    async fn grow_to(&mut self, size: usize) -> Res<(Duration, usize)> {
        self.release().await?;
        let started = Instant::now();
        let finished_before = self.finished.len();
        let cycles = size.saturating_sub(finished_before);
        let goal = size + LIVE_QUEUE + HELD_RUNNING;
        let tickets = Arc::new(AtomicI64::new(cycles as i64));
        let done = Arc::new(AtomicU64::new(0));
        let abort = Arc::new(AtomicBool::new(false));
        let submitter = {
            let (admin, names, done, abort) = (
                self.admin.clone(),
                Arc::clone(&self.names),
                Arc::clone(&done),
                Arc::clone(&abort),
            );
            let mut submitted = self.submitted;
            tokio::spawn(async move {
                while submitted < goal && !abort.load(Ordering::Relaxed) {
                    let finished = finished_before + done.load(Ordering::Relaxed) as usize;
                    if submitted.saturating_sub(finished) >= QUEUE_AHEAD {
                        tokio::time::sleep(Duration::from_millis(20)).await;
                        continue;
                    }
                    match admin
                        .submit(&names, (goal - submitted).min(names.len()))
                        .await
                    {
                        Ok(n) => submitted += n,
                        Err(e) => {
                            abort.store(true, Ordering::SeqCst);
                            return Err(e);
                        }
                    }
                }
                Ok(submitted)
            })
        };
        let mut tasks = Vec::new();
        for w in &self.workers {
            let (w, tickets, done, abort) = (
                w.clone(),
                Arc::clone(&tickets),
                Arc::clone(&done),
                Arc::clone(&abort),
            );
            tasks.push(tokio::spawn(async move {
                let mut ids = Vec::new();
                while !abort.load(Ordering::Relaxed) && tickets.fetch_sub(1, Ordering::SeqCst) > 0 {
                    loop {
                        match run_cycle(&w, 5).await {
                            Ok(Some((job, _))) => {
                                ids.push(job);
                                done.fetch_add(1, Ordering::Relaxed);
                                break;
                            }
                            Ok(None) if abort.load(Ordering::Relaxed) => return Ok(ids),
                            Ok(None) => {}
                            Err(e) => {
                                abort.store(true, Ordering::SeqCst);
                                return Err(e);
                            }
                        }
                    }
                }
                Ok::<_, Box<dyn std::error::Error + Send + Sync>>(ids)
            }));
        }
        let mut first_error = None;
        for task in tasks {
            match task.await? {
                Ok(ids) => self.finished.extend(ids),
                Err(e) => {
                    first_error.get_or_insert(e);
                }
            }
        }
        match submitter.await? {
            Ok(n) => self.submitted = n,
            Err(e) => {
                first_error.get_or_insert(e);
            }
        }
        if let Some(e) = first_error {
            return Err(format!("building the history to {size} jobs: {e}").into());
        }
        let build = started.elapsed();
        self.hold().await?;
        Ok((build, cycles))
    }

    /// Leases 8 queued jobs to other pods and keeps them running.
    async fn hold(&mut self) -> Res<()> {
        let mut leases = Vec::new();
        for h in &self.holders {
            let lease = h
                .lease(ACCELERATOR, 5)
                .await?
                .ok_or("no job left for a holder")?;
            h.heartbeat(lease.lease_id, 0).await?;
            leases.push(lease);
        }
        for lease in &leases {
            let deadline = Instant::now() + Duration::from_secs(10);
            loop {
                let job: JobDetail = self
                    .reader
                    .get_json(&format!("/jobs/{}", lease.job_id))
                    .await?;
                if job.job.state == podq_api::JobState::Running {
                    break;
                }
                if Instant::now() > deadline {
                    return Err(format!("held job {} never showed running", lease.job_id).into());
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
        let beat = CancellationToken::new();
        let task = {
            let (beat, holders, leases) = (beat.clone(), self.holders.clone(), leases.clone());
            tokio::spawn(async move {
                loop {
                    tokio::select! {
                        _ = beat.cancelled() => return Ok(()),
                        _ = tokio::time::sleep(Duration::from_secs(1)) => {}
                    }
                    for (h, lease) in holders.iter().zip(&leases) {
                        h.heartbeat(lease.lease_id, 0).await?;
                    }
                }
            })
        };
        self.held = Some(Held { leases, beat, task });
        Ok(())
    }

    /// The held jobs finish as any other, joining the history.
    async fn release(&mut self) -> Res<()> {
        let Some(held) = self.held.take() else {
            return Ok(());
        };
        held.beat.cancel();
        held.task.await??;
        for (h, lease) in self.holders.iter().zip(&held.leases) {
            h.metrics(lease.lease_id, cycle_metrics_body()).await?;
            h.checkpoint(lease.lease_id, lease.job_id, CYCLE_END_STEP)
                .await?;
            h.finish(lease.lease_id, CYCLE_END_STEP).await?;
            self.finished.push(lease.job_id);
        }
        Ok(())
    }
}

/// Reads at one size of the history. Latencies are p50, p99 and max in ms, per `READS`.
struct Phase {
    jobs: usize,
    /// Time to build this step of the history, and the cycles it ran.
    build: Duration,
    cycles: usize,
    /// Pages of 100 walked by `after` over the whole history, and how long the walk took.
    walk: (usize, Duration),
    reads: Vec<(f64, f64, f64)>,
    /// The same reads of the control server (the smallest history), timed alongside.
    control_reads: Vec<(f64, f64, f64)>,
    counts: BTreeMap<JobState, i64>,
    rss_kb: u64,
    hwm_kb: u64,
    control_rss_kb: u64,
    db_bytes: (u64, u64),
    server_cpu_s: f64,
}

pub struct HistoryRun {
    phases: Vec<Phase>,
    control_jobs: usize,
    total: Duration,
    metric_points: i64,
    metric_series: i64,
    attempts: (i64, i64),
}

impl HistoryRun {
    pub fn rows(&self) -> Vec<Row> {
        let mut rows = Vec::new();
        let Some(last) = self.phases.last() else {
            return rows;
        };
        let first = &self.phases[0];
        let full = last.jobs >= 100_000;
        let control = thousands(self.control_jobs as f64);
        for (k, read) in READS.iter().enumerate() {
            let (p99, base) = (last.reads[k].1, last.control_reads[k].1);
            let ratio = p99 / base;
            let met = ratio <= TARGET_READ_GROWTH && p99 <= TARGET_READ_P99_MS;
            rows.push((
                format!("{read} p99 at {} jobs", thousands(last.jobs as f64)),
                format!("{p99:.2} ms"),
                format!("at {control} jobs, alongside: {base:.2} ms"),
                format!("{ratio:.2}"),
                format!("≤ {TARGET_READ_GROWTH} × baseline, ≤ {TARGET_READ_P99_MS:.0} ms"),
                full.then_some(met),
            ));
        }
        let mb = |kb: u64| kb as f64 / 1024.0;
        rows.push((
            format!(
                "server RSS, {} jobs, {} metric points",
                thousands(last.jobs as f64),
                thousands(self.metric_points as f64)
            ),
            format!("{:.1} MB", mb(last.rss_kb)),
            format!("at {control} jobs {:.1} MB", mb(last.control_rss_kb)),
            format!("{:.2}", last.rss_kb as f64 / last.control_rss_kb as f64),
            format!("< {TARGET_RSS_MB:.0} MB at 100,000 jobs"),
            full.then_some(mb(last.rss_kb) < TARGET_RSS_MB),
        ));
        if let Some(prev) = self.phases.iter().rev().nth(1) {
            let rate = |p: &Phase| p.cycles as f64 / p.build.as_secs_f64();
            rows.push((
                format!(
                    "lease cycles/s building {} -> {} jobs",
                    thousands(prev.jobs as f64),
                    thousands(last.jobs as f64)
                ),
                format!("{} /s", thousands(rate(last))),
                format!(
                    "0 -> {} jobs {} /s",
                    thousands(first.jobs as f64),
                    thousands(rate(first))
                ),
                format!("{:.2}", rate(last) / rate(first)),
                String::new(),
                None,
            ));
        }
        rows
    }
}

pub async fn history(sizes: &[usize]) -> Res<HistoryRun> {
    let started = Instant::now();
    // The control: a second server with the smallest history, read alongside the main one so
    // that both p99s come from the same minutes of this shared machine.
    let control_jobs = sizes[0];
    let mut control = History::start().await?;
    let (build, _) = control.grow_to(control_jobs).await?;
    let control_deep = walk_history(&control.reader).await?.0;
    println!(
        "history: control server with {} jobs built in {:.1} s; {} experiments in the \
         catalog; {HISTORY_WORKERS} workers cycling",
        thousands(control_jobs as f64),
        build.as_secs_f64(),
        control.names.len()
    );
    let mut main = History::start().await?;
    let mut rng = XorShift(0x9E37_79B9_7F4A_7C15);
    let mut phases = Vec::new();
    for &size in sizes {
        let (build, cycles) = main.grow_to(size).await?;
        println!(
            "history: {} jobs finished in {:.1} s ({:.0} cycles/s), {} submitted",
            thousands(main.finished.len() as f64),
            build.as_secs_f64(),
            cycles as f64 / build.as_secs_f64(),
            thousands(main.submitted as f64)
        );
        let cpu0 = main.server.cpu_s()?;
        let walk = walk_history(&main.reader).await?;
        let (reads, control_reads) =
            measure_reads([(&main, walk.0), (&control, control_deep)], &mut rng).await?;
        let server_cpu_s = main.server.cpu_s()? - cpu0;
        let status: Status = main.reader.get_json("/status").await?;
        let (rss_kb, hwm_kb) = main.server.rss_kb()?;
        let (control_rss_kb, _) = control.server.rss_kb()?;
        let phase = Phase {
            jobs: size,
            build,
            cycles,
            walk: (walk.1, walk.2),
            reads,
            control_reads,
            counts: status.jobs,
            rss_kb,
            hwm_kb,
            control_rss_kb,
            db_bytes: main.server.db_bytes(),
            server_cpu_s,
        };
        phase.print(control_jobs);
        phases.push(phase);
    }
    main.release().await?;
    control.release().await?;
    tokio::time::sleep(Duration::from_millis(600)).await;
    let mut conn = read_only(&main.server.db).await?;
    let (metric_points,): (i64,) = sqlx::query_as(
        "SELECT CAST(COALESCE((SELECT SUM(points) FROM metric_chunks), 0) \
             + COALESCE((SELECT SUM(points) FROM metric_tail), 0) AS INTEGER)",
    )
    .fetch_one(&mut conn)
    .await?;
    let (metric_series,): (i64,) = sqlx::query_as("SELECT COUNT(*) FROM metric_series")
        .fetch_one(&mut conn)
        .await?;
    conn.close().await?;
    let attempts = attempts_running(&main.server.db).await?;
    main.server.stop().await;
    control.server.stop().await;
    let run = HistoryRun {
        phases,
        control_jobs,
        total: started.elapsed(),
        metric_points,
        metric_series,
        attempts,
    };
    println!(
        "history: {} metric points in {} series, {} finished attempts ({} recorded running); \
         built and read in {:.1} s",
        thousands(run.metric_points as f64),
        thousands(run.metric_series as f64),
        thousands(run.attempts.0 as f64),
        thousands(run.attempts.1 as f64),
        run.total.as_secs_f64()
    );
    Ok(run)
}

impl Phase {
    fn print(&self, control_jobs: usize) {
        let counts: Vec<String> = self
            .counts
            .iter()
            .filter(|(_, n)| **n > 0)
            .map(|(s, n)| format!("{s} {n}"))
            .collect();
        println!(
            "reads at {} jobs of history ({}); server RSS {:.1} MB (peak {:.1} MB; control \
             {:.1} MB); database {:.0} MB + WAL {:.0} MB; keyset walk of {} pages of \
             {WALK_PAGE} in {:.0} ms; server CPU {:.2} s over the walk and reads",
            thousands(self.jobs as f64),
            counts.join(", "),
            self.rss_kb as f64 / 1024.0,
            self.hwm_kb as f64 / 1024.0,
            self.control_rss_kb as f64 / 1024.0,
            self.db_bytes.0 as f64 / 1e6,
            self.db_bytes.1 as f64 / 1e6,
            self.walk.0,
            self.walk.1.as_secs_f64() * 1e3,
            self.server_cpu_s,
        );
        for ((read, (p50, p99, max)), (c50, c99, _)) in
            READS.iter().zip(&self.reads).zip(&self.control_reads)
        {
            println!(
                "    {read:<36} p50 {p50:>6.2} ms  p99 {p99:>6.2} ms  max {max:>6.2} ms   \
                 ({} jobs alongside: p50 {c50:>6.2} ms  p99 {c99:>6.2} ms)",
                thousands(control_jobs as f64)
            );
        }
    }
}

/// Walks every job by keyset pages of 100; answers the `after` that gives the last full page
/// (the deepest), the pages walked and the walk's time.
async fn walk_history(api: &Api) -> Res<(i64, usize, Duration)> {
    let started = Instant::now();
    let mut afters = Vec::new();
    let mut after: Option<i64> = None;
    loop {
        let path = match after {
            Some(a) => format!("/jobs?limit={WALK_PAGE}&after={a}"),
            None => format!("/jobs?limit={WALK_PAGE}"),
        };
        let page: JobList = api.get_json(&path).await?;
        match page.next_after {
            Some(next) if !page.jobs.is_empty() => {
                afters.push(next);
                after = Some(next);
            }
            _ => break,
        }
    }
    let elapsed = started.elapsed();
    // `afters[i]` starts page i + 2; the last full page is page `afters.len()`.
    let deep = afters
        .len()
        .checked_sub(2)
        .map(|i| afters[i])
        .ok_or("the history has less than two pages")?;
    Ok((deep, afters.len() + 1, elapsed))
}

type Latencies = Vec<(f64, f64, f64)>;

/// p50, p99 and max (ms) of each of `READS` on each of two servers (with the `after` of its
/// deep page), timed round-robin by one client per server, alternating which goes first.
async fn measure_reads(
    servers: [(&History, i64); 2],
    rng: &mut XorShift,
) -> Res<(Latencies, Latencies)> {
    let mut latencies = vec![vec![Vec::with_capacity(READ_ROUNDS); READS.len()]; 2];
    for round in 0..READ_WARMUP_ROUNDS + READ_ROUNDS {
        for (k, _) in READS.iter().enumerate() {
            for turn in 0..2 {
                let which = (round + turn) % 2;
                let (h, deep_after) = servers[which];
                let path = match k {
                    0 => "/status".to_owned(),
                    1 => "/jobs?limit=100".to_owned(),
                    2 => "/jobs?state=running&limit=100".to_owned(),
                    3 => format!("/jobs?limit=100&after={deep_after}"),
                    _ => format!("/jobs/{}", h.finished[rng.below(h.finished.len())]),
                };
                let (elapsed, body) = h.reader.get_timed(&path).await?;
                if round == 0 {
                    check_read(k, &path, &body)?;
                }
                if round >= READ_WARMUP_ROUNDS {
                    latencies[which][k].push(elapsed.as_secs_f64() * 1e3);
                }
            }
        }
    }
    let mut summary = latencies.into_iter().map(|per_read| {
        per_read
            .into_iter()
            .map(|mut v| {
                let (p50, p99) = p50_p99(&mut v);
                (p50, p99, v.last().copied().unwrap_or(f64::NAN))
            })
            .collect::<Latencies>()
    });
    let main = summary.next().unwrap_or_default();
    let control = summary.next().unwrap_or_default();
    Ok((main, control))
}

/// The answers are what they claim to be: a full page, the held jobs, a finished job's detail.
fn check_read(kind: usize, path: &str, body: &[u8]) -> Res<()> {
    let bad = |what: String| -> Res<()> { Err(format!("GET {path}: {what}").into()) };
    match kind {
        0 => {
            let status: Status = serde_json::from_slice(body)?;
            if status.jobs.get(&JobState::Queued) != Some(&(LIVE_QUEUE as i64)) {
                return bad(format!("{:?} jobs queued, not {LIVE_QUEUE}", status.jobs));
            }
        }
        1..=3 => {
            let page: JobList = serde_json::from_slice(body)?;
            let want = if kind == 2 { HELD_RUNNING } else { 100 };
            if page.jobs.len() != want {
                return bad(format!("{} jobs, not {want}", page.jobs.len()));
            }
        }
        _ => {
            let job: JobDetail = serde_json::from_slice(body)?;
            if job.job.state != podq_api::JobState::Succeeded
                || job.attempts.is_empty()
                || job.checkpoints.is_empty()
                || job.latest_metrics.len() != METRIC_NAMES.len()
            {
                return bad(format!(
                    "state {}, {} attempts, {} checkpoints, {} metric series",
                    job.job.state,
                    job.attempts.len(),
                    job.checkpoints.len(),
                    job.latest_metrics.len()
                ));
            }
        }
    }
    Ok(())
}
