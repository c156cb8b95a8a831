//! `cargo bench --bench throughput`: the scheduler's throughput, read latency and memory
//! against a real `podq server` process, each figure printed next to a baseline measured in
//! the same run (these machines are shared and noisy: absolute timings mean little alone).
//! Targets are printed as targets, never as baselines.
//!
//! The server under test is `target/release/podq server`, the binary a user runs, started as
//! its own process on port 0 with an admin and a worker token, on a fresh SQLite file in a
//! temporary directory, serving the repository's `experiments/` catalog. Cargo builds it for
//! the bench and names it in `CARGO_BIN_EXE_podq`. Being a separate process, its CPU time and
//! RSS are its own (`/proc/<pid>/stat`, `/proc/<pid>/status`), not mixed with the simulated
//! clients'. The clients still share the machine's cores with it. Every job enters through
//! `POST /api/v1/jobs` (one experiment per call, or `"all": true`, always `"force": true` so
//! the same experiments can be submitted again); nothing is inserted behind the server's back.
//! The bench reads the server's database only to verify what the run left (read-only).
//!
//! Baselines, each measured just before and just after the run it serves, and averaged (both
//! printed; the machine drifts):
//! - raw durable commits/s: one single-row INSERT per transaction on a scratch SQLite file in
//!   the same file system, WAL, `synchronous=FULL` (the server's settings);
//! - raw batched insert points/s: 1,000 rows per transaction into a scratch table shaped like
//!   `metric_points`, with the server's upsert clause.
//!
//! Sections:
//!
//! 1. Lease cycles/s with 1, 8 and 64 workers, against raw commits/s (target: at least 0.5 of
//!    it with 64 workers). A cycle is what a real worker does with a lease: lease, heartbeats
//!    with phase `running` every 100 ms for at least 300 ms, one metrics batch (10 steps x 10
//!    names = 100 points), one committed checkpoint (`gs://bench/ckpt/<job>/<step>`), finish
//!    `succeeded`. The heartbeats stand for the running trainer. Of the two ways to make sure
//!    the server records `running` (its reaper writes it within 250 ms), heartbeating on a
//!    timer is what a real worker does; polling `GET /jobs/{id}` is not (a worker never reads
//!    its job's state). 300 ms spans more than one reaper tick, and after each run the bench
//!    counts from the database how many finished attempts have `running_at` set. The running
//!    period is a floor under every cycle: N workers cannot exceed N / 0.3 s cycles/s whatever
//!    the server does (213/s for 64); the bench prints that ceiling next to the result.
//! 2. Metric points/s through `POST /leases/{id}/metrics` (1,000-point batches) against the raw
//!    batched insert (target 0.5), and `GET /jobs/{id}/metrics` of a 1,000,000-point series
//!    cut to 2,000 points (target p99 <= 50 ms; a raw read of every point is the baseline).
//! 3. Submissions/s with workers waiting. Sequential single-experiment submits (one client, as
//!    in the measurement behind issue 10: 319, 146 and 45/s with 0, 64 and 256 waiters), each
//!    run on a fresh server, with 0, 1, 64 and 256 workers long-polling
//!    `POST /pods/{name}/lease` (`wait_s` 30) for the SAME accelerator as the jobs, so every
//!    submit has waiters to wake. A woken waiter takes its job and finishes it at once, then waits
//!    again: waiters that kept their jobs would all be busy within a second and the figure
//!    would measure nothing. (A pod whose preflight failed never waits on the wake-up at all,
//!    so it would test nothing either.) So with waiters each submit also costs the server a
//!    lease and a finish. The target as the issue states it: with 256 waiters at least 0.9 of
//!    the rate with nobody waiting (such a run is made on either side of each run with waiters;
//!    the mean of the two is its baseline). That ratio also charges the waiters with running
//!    the jobs they take, so the herd itself (every waiter waking on every submit) is isolated
//!    by comparing 256 waiters with 64: both take every job at once, the same work per submit,
//!    and only the number of waiters differs (a herd's cost grows with it: 146 -> 45/s in the
//!    issue). The server's CPU time per submit is printed for each run, and 1 waiter (who falls
//!    behind and so takes only some of the jobs) for context. A run with 256 waiters for
//!    ANOTHER accelerator (never woken) shows the cost of waiting alone. Then the idle server's
//!    CPU time over 5 s with the 256 waiters parked and nothing submitted (target: at most 1 %
//!    of one core; /proc counts in 10 ms ticks), next to the idle server with none.
//! 4. Read latency against history. The history is built by the lease cycles themselves (64
//!    workers; each finished job keeps an attempt, 100 metric points in 10 series, a committed
//!    checkpoint and its events), fed by `"all": true` submits, up to 1,000, 10,000 and 100,000
//!    finished jobs. At each size the cycles stop, 100 jobs stay queued and 8 held by other
//!    pods run (heartbeating every second), and one client times, round-robin, `GET /status`
//!    (JSON), `GET /jobs?limit=100`, `GET /jobs?state=running&limit=100`, a deep keyset page
//!    (`after` = the `next_after` that gives the last full page, found by walking the whole
//!    history in pages of 100) and `GET /jobs/{id}` of a random finished job. The same reads
//!    are timed, interleaved request by request, on a control server: a second `podq server`
//!    whose history was built the same way to the smallest size (1,000) and left there. Its p99
//!    is the baseline, so that both figures come from the same minutes of this shared machine;
//!    the main server's own figures at 1,000 are printed too. Targets: each p99 at 100,000
//!    within 1.5 x the p99 at 1,000 and <= 20 ms. Then the server's RSS with 100,000 jobs and
//!    10 million metric points (target < 150 MB; the control's RSS is printed as the baseline).
//!    `PODQ_BENCH_HISTORY=1000,10000` shortens the history (default 1000,10000,100000; the
//!    100,000 step takes about 12 minutes on 2 cores).
//!
//! 5. `cycles-postgres`: section 1 again on a server whose store is PostgreSQL (issue 20), each
//!    figure against PostgreSQL's own raw durable commits/s: one single-row INSERT per
//!    transaction on a scratch table of a scratch database on the same PostgreSQL server,
//!    `synchronous_commit=on` (the server's setting). PostgreSQL is `PODQ_BENCH_DATABASE_URL`
//!    (a server where the bench may create databases) or else a throwaway cluster started with
//!    `scripts/postgres-cluster` on this machine.
//!
//! It is a report: the process exits 0 whether the targets are met or not (1 only when a
//! section could not run; its error is printed). `PODQ_BENCH_ONLY=cycles,metrics,submit,history,cycles-postgres`
//! runs only the sections named (the baselines always run).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode, Stdio};
use std::str::FromStr;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use podq_api::{JobDetail, JobList, Lease, Status, SubmitResponse};
use sqlx::sqlite::{SqliteConnectOptions, SqliteConnection, SqliteJournalMode, SqliteSynchronous};
use sqlx::{ConnectOptions, Connection, QueryBuilder, Sqlite};
use tempfile::TempDir;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

type Res<T> = Result<T, Box<dyn std::error::Error + Send + Sync>>;

/// The binary under test, built by cargo for this bench (release profile).
const PODQ: &str = env!("CARGO_BIN_EXE_podq");
/// The accelerator the server submits jobs for (`ServerConfig::accelerator`).
const ACCELERATOR: &str = "v4-64";
/// An accelerator no job is for.
const OTHER_ACCELERATOR: &str = "v5e-16";
const HOSTS: usize = 8;
const ADMIN_TOKEN: &str = "bench-admin-token";
const WORKER_TOKEN: &str = "bench-worker-token";

/// Raw baselines: how long each loop runs.
const RAW_WINDOW: Duration = Duration::from_secs(2);
const RAW_BATCH: usize = 1000;

/// Lease cycles.
const CYCLE_WORKERS: [usize; 3] = [1, 8, 64];
const MAIN_WORKERS: usize = 64;
const CYCLE_WARMUP: Duration = Duration::from_secs(1);
const CYCLE_WINDOW: Duration = Duration::from_secs(5);
const HEARTBEAT_EVERY: Duration = Duration::from_millis(100);
const RUNNING_FOR: Duration = Duration::from_millis(300);
/// The cycle's metrics batch: steps 10, 20, ..., 100, each with every name.
const CYCLE_STEPS: i64 = 10;
const CYCLE_STEP_SIZE: i64 = 10;
const TARGET_CYCLE_RATIO: f64 = 0.5;
const METRIC_NAMES: [&str; 10] = [
    "train/loss",
    "train/lm_loss",
    "train/q_halt_loss",
    "train/q_continue_loss",
    "train/accuracy",
    "train/exact_accuracy",
    "train/steps",
    "train/lr",
    "train/grad_norm",
    "train/tokens_per_s",
];

/// Metric ingestion and the long-series query.
const METRIC_WARMUP: Duration = Duration::from_millis(500);
const METRIC_WINDOW: Duration = Duration::from_secs(4);
const METRIC_SENDERS: usize = 4;
const INGEST_STEPS_PER_BATCH: i64 = 100;
const TARGET_METRIC_RATIO: f64 = 0.5;
const QUERY_POINTS: i64 = 1_000_000;
const QUERY_BATCH: i64 = 1000;
const QUERY_MAX_POINTS: i64 = 2000;
const QUERY_REQUESTS: usize = 200;
const TARGET_QUERY_P99_MS: f64 = 50.0;

/// Submissions with waiting workers.
const SUBMIT_WARMUP: Duration = Duration::from_millis(500);
const SUBMIT_WINDOW: Duration = Duration::from_secs(4);
const WAITER_WAIT_S: u64 = 30;
/// Time for every waiter to make its first lease call and park.
const WAITERS_SETTLE: Duration = Duration::from_millis(1500);
const IDLE_WINDOW: Duration = Duration::from_secs(5);
const TARGET_SUBMIT_RATIO: f64 = 0.9;
/// "Near zero": 1 % of one core over the idle window.
const TARGET_IDLE_CPU_S: f64 = 0.01 * 5.0;

/// History and reads.
const DEFAULT_HISTORY: [usize; 3] = [1000, 10_000, 100_000];
const HISTORY_WORKERS: usize = 64;
const LIVE_QUEUE: usize = 100;
const HELD_RUNNING: usize = 8;
/// Submitted jobs kept ahead of the cycles while the history is built.
const QUEUE_AHEAD: usize = 2000;
const READ_WARMUP_ROUNDS: usize = 20;
const READ_ROUNDS: usize = 400;
const WALK_PAGE: usize = 100;
const TARGET_READ_GROWTH: f64 = 1.5;
const TARGET_READ_P99_MS: f64 = 20.0;
const TARGET_RSS_MB: f64 = 150.0;

/// Linux reports CPU times in /proc in USER_HZ, 100 on every architecture it runs on.
const CLOCK_TICKS_PER_S: f64 = 100.0;

fn main() -> ExitCode {
    // `cargo bench` passes `--bench`; nothing to parse.
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    match runtime.block_on(run()) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("throughput bench failed: {e}");
            ExitCode::FAILURE
        }
    }
}

#[derive(Default)]
struct Report {
    cycles: Vec<CycleRun>,
    metrics: Vec<MetricRun>,
    query: Option<QueryRun>,
    submits: Vec<SubmitRun>,
    history: Option<HistoryRun>,
    failed: Vec<String>,
}

/// Runs every section; false when one could not run.
async fn run() -> Res<bool> {
    let started = Instant::now();
    let only: Option<Vec<String>> = std::env::var("PODQ_BENCH_ONLY")
        .ok()
        .map(|s| s.split(',').map(|p| p.trim().to_owned()).collect());
    let wanted = |section: &str| only.as_ref().is_none_or(|o| o.iter().any(|s| s == section));
    let history_sizes = history_sizes()?;
    if !Path::new(PODQ).exists() {
        return Err(format!("{PODQ} is missing: build it with `cargo build --release`").into());
    }
    println!(
        "podq throughput bench: {} cores visible; server: {PODQ} (a process of its own); \
         history {history_sizes:?}",
        std::thread::available_parallelism().map_or(0, |n| n.get()),
    );
    let mut report = Report::default();
    if wanted("cycles") {
        for workers in CYCLE_WORKERS {
            match lease_cycles(workers).await {
                Ok(run) => {
                    run.print();
                    report.cycles.push(run);
                }
                Err(e) => report.fail(&format!("lease cycles, {workers} workers"), e),
            }
        }
    }
    if wanted("cycles-postgres") {
        match PostgresServer::find() {
            Ok(postgres) => {
                for workers in CYCLE_WORKERS {
                    match lease_cycles_on(workers, Some(&postgres)).await {
                        Ok(run) => {
                            run.print();
                            report.cycles.push(run);
                        }
                        Err(e) => report
                            .fail(&format!("lease cycles on PostgreSQL, {workers} workers"), e),
                    }
                }
            }
            Err(e) => report.fail("lease cycles on PostgreSQL", e),
        }
    }
    if wanted("metrics") {
        for senders in [METRIC_SENDERS, 1] {
            match metric_ingestion(senders).await {
                Ok(run) => {
                    run.print();
                    report.metrics.push(run);
                }
                Err(e) => report.fail(&format!("metric ingestion, {senders} senders"), e),
            }
        }
        match metrics_query().await {
            Ok(run) => {
                run.print();
                report.query = Some(run);
            }
            Err(e) => report.fail("metrics query", e),
        }
    }
    if wanted("submit") {
        // Nobody waiting is the baseline: run before and after the others, so each run with
        // waiters has one on either side (the machine drifts).
        let runs = [
            (0, ACCELERATOR),
            (256, ACCELERATOR),
            (0, ACCELERATOR),
            (64, ACCELERATOR),
            (1, ACCELERATOR),
            (0, ACCELERATOR),
            (256, OTHER_ACCELERATOR),
            (0, ACCELERATOR),
        ];
        for (waiters, accelerator) in runs {
            let idle = waiters == 0 || waiters == 256;
            match submit_rate(waiters, accelerator, idle).await {
                Ok(run) => {
                    run.print();
                    report.submits.push(run);
                }
                Err(e) => report.fail(
                    &format!("submissions with {waiters} {accelerator} waiters"),
                    e,
                ),
            }
        }
    }
    if wanted("history") {
        match history(&history_sizes).await {
            Ok(run) => report.history = Some(run),
            Err(e) => report.fail("history and reads", e),
        }
    }
    report.print_table();
    println!("total bench time {:.1} s", started.elapsed().as_secs_f64());
    Ok(report.failed.is_empty())
}

fn history_sizes() -> Res<Vec<usize>> {
    let Ok(text) = std::env::var("PODQ_BENCH_HISTORY") else {
        return Ok(DEFAULT_HISTORY.to_vec());
    };
    let mut sizes = Vec::new();
    for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let n: usize = part
            .replace('_', "")
            .parse()
            .map_err(|e| format!("PODQ_BENCH_HISTORY: `{part}`: {e}"))?;
        sizes.push(n);
    }
    if sizes.is_empty()
        || sizes[0] < 2 * WALK_PAGE
        || sizes.windows(2).any(|w| w[0] + HELD_RUNNING > w[1])
    {
        return Err(
            "PODQ_BENCH_HISTORY: give increasing sizes from 200 on, e.g. 1000,10000".into(),
        );
    }
    Ok(sizes)
}

/// A table row: figure, measured, baseline, ratio, target, and whether the target was met
/// (none when the row has no target).
type Row = (String, String, String, String, String, Option<bool>);

impl Report {
    fn fail(&mut self, section: &str, e: Box<dyn std::error::Error + Send + Sync>) {
        let message = format!("{section}: {e}");
        println!("FAILED {message}");
        self.failed.push(message);
    }

    /// The mean of the nobody-waiting runs nearest before and after submit run `i`.
    fn submit_baseline(&self, i: usize) -> Option<(f64, Option<f64>)> {
        let before = self.submits[..i].iter().rev().find(|s| s.waiters == 0);
        let after = self.submits[i + 1..].iter().find(|s| s.waiters == 0);
        let around: Vec<&SubmitRun> = before.into_iter().chain(after).collect();
        if around.is_empty() {
            return None;
        }
        let rate = mean(&around.iter().map(|s| s.submits_per_s).collect::<Vec<_>>());
        let idle: Vec<f64> = around
            .iter()
            .filter_map(|s| s.idle_cpu.map(|(server, _)| server))
            .collect();
        Some((rate, (!idle.is_empty()).then(|| mean(&idle))))
    }

    fn rows(&self) -> Vec<Row> {
        let mut rows: Vec<Row> = Vec::new();
        let target = |main: bool, text: String| if main { text } else { String::new() };
        for run in &self.cycles {
            let main = run.workers == MAIN_WORKERS;
            let raw = mean(&[run.raw.0, run.raw.1]);
            let ratio = run.cycles_per_s / raw;
            rows.push((
                format!(
                    "lease cycles/s, {} worker{}{}",
                    run.workers,
                    if run.workers == 1 { "" } else { "s" },
                    if run.store == "sqlite" {
                        ""
                    } else {
                        ", PostgreSQL"
                    }
                ),
                format!("{} /s", thousands(run.cycles_per_s)),
                format!("raw durable commits {} /s ({})", thousands(raw), run.store),
                format!("{ratio:.3}"),
                target(main, format!("≥ {TARGET_CYCLE_RATIO} × baseline")),
                main.then_some(ratio >= TARGET_CYCLE_RATIO),
            ));
        }
        for run in &self.metrics {
            let main = run.senders == METRIC_SENDERS;
            let raw = mean(&[run.raw.0, run.raw.1]);
            let ratio = run.points_per_s / raw;
            rows.push((
                format!(
                    "metric points/s over HTTP, {} sender{}",
                    run.senders,
                    if run.senders == 1 { "" } else { "s" }
                ),
                format!("{} /s", thousands(run.points_per_s)),
                format!("raw batched insert {} /s", thousands(raw)),
                format!("{ratio:.3}"),
                target(main, format!("≥ {TARGET_METRIC_RATIO} × baseline")),
                main.then_some(ratio >= TARGET_METRIC_RATIO),
            ));
        }
        if let Some(q) = &self.query {
            rows.push((
                "metrics query p99, 1,000,000 points cut to 2,000".to_owned(),
                format!("{:.1} ms", q.p99_ms),
                format!("raw read of every point {:.0} ms", q.full_read_ms),
                format!("{:.3}", q.p99_ms / q.full_read_ms),
                format!("≤ {TARGET_QUERY_P99_MS:.0} ms"),
                Some(q.p99_ms <= TARGET_QUERY_P99_MS),
            ));
        }
        let same = |run: &SubmitRun| run.accelerator == ACCELERATOR;
        for (i, run) in self.submits.iter().enumerate() {
            if run.waiters == 0 {
                continue;
            }
            let Some((base, _)) = self.submit_baseline(i) else {
                continue;
            };
            let ratio = run.submits_per_s / base;
            let main = run.waiters == 256 && same(run);
            rows.push((
                format!(
                    "submits/s, {} worker{} waiting ({})",
                    run.waiters,
                    if run.waiters == 1 { "" } else { "s" },
                    if same(run) {
                        "same accelerator"
                    } else {
                        "another accelerator"
                    }
                ),
                format!("{} /s", thousands(run.submits_per_s)),
                format!("0 waiting {} /s", thousands(base)),
                format!("{ratio:.3}"),
                target(main, format!("≥ {TARGET_SUBMIT_RATIO} × baseline")),
                main.then_some(ratio >= TARGET_SUBMIT_RATIO),
            ));
        }
        // 64 and 256 waiters both take every job as it comes: the same work per submit, so
        // only the number of waiters differs. A herd's cost grows with it; wake-one's not.
        let some = self.submits.iter().find(|s| s.waiters == 64 && same(s));
        let many = self.submits.iter().find(|s| s.waiters == 256 && same(s));
        if let (Some(some), Some(many)) = (some, many) {
            rows.push((
                "submits/s, 256 waiting vs 64 (both take every job)".to_owned(),
                format!("{} /s", thousands(many.submits_per_s)),
                format!("64 waiting {} /s", thousands(some.submits_per_s)),
                format!("{:.3}", many.submits_per_s / some.submits_per_s),
                String::new(),
                None,
            ));
            rows.push((
                "server CPU per submit, 256 waiting vs 64".to_owned(),
                format!("{:.2} ms", many.server_cpu_ms_per_submit),
                format!("64 waiting {:.2} ms", some.server_cpu_ms_per_submit),
                format!(
                    "{:.2}",
                    many.server_cpu_ms_per_submit / some.server_cpu_ms_per_submit
                ),
                String::new(),
                None,
            ));
        }
        for (i, run) in self.submits.iter().enumerate() {
            let (Some((server_s, _)), true) = (run.idle_cpu, run.waiters > 0) else {
                continue;
            };
            let base = self.submit_baseline(i).and_then(|(_, idle)| idle);
            let main = same(run);
            rows.push((
                format!(
                    "idle server CPU over {} s, {} waiting ({})",
                    IDLE_WINDOW.as_secs(),
                    run.waiters,
                    if main { "same accel." } else { "other accel." }
                ),
                format!("{:.0} ms", server_s * 1e3),
                base.map_or(String::new(), |b| format!("0 waiting {:.0} ms", b * 1e3)),
                String::new(),
                format!("≈ 0: ≤ {:.0} ms (1 % of a core)", TARGET_IDLE_CPU_S * 1e3),
                main.then_some(server_s <= TARGET_IDLE_CPU_S),
            ));
        }
        if let Some(h) = &self.history {
            rows.extend(h.rows());
        }
        rows
    }

    fn print_table(&self) {
        let rows: Vec<[String; 6]> = self
            .rows()
            .into_iter()
            .map(|(figure, measured, baseline, ratio, target, met)| {
                let met = match met {
                    Some(true) => "yes",
                    Some(false) => "NO",
                    None => "",
                };
                [figure, measured, baseline, ratio, target, met.to_owned()]
            })
            .collect();
        println!();
        println!("== issue 10: one run; every baseline measured in this run ==");
        let header = [
            "figure",
            "measured",
            "baseline (same run)",
            "ratio",
            "target",
            "met?",
        ]
        .map(str::to_owned);
        let mut widths = header.clone().map(|h| h.chars().count());
        for r in &rows {
            for (w, cell) in widths.iter_mut().zip(r) {
                *w = (*w).max(cell.chars().count());
            }
        }
        let line = |cells: &[String; 6]| {
            let mut out = String::from("|");
            for (cell, w) in cells.iter().zip(widths) {
                let pad = w - cell.chars().count();
                let _ = write!(out, " {cell}{} |", " ".repeat(pad));
            }
            out
        };
        println!("{}", line(&header));
        let mut rule = String::from("|");
        for w in widths {
            let _ = write!(rule, "{}|", "-".repeat(w + 2));
        }
        println!("{rule}");
        for r in &rows {
            println!("{}", line(r));
        }
        println!();
        println!(
            "Raw baselines are measured just before and just after the run they serve, and \
             averaged; submits with nobody waiting run on either side of each run with waiters. \
             Reference figures, not baselines: the original design's 2,000 cycles/s (a cycle of \
             lease, heartbeat, finish); Slurm's documented ~500 jobs/s."
        );
        for f in &self.failed {
            println!("FAILED {f}");
        }
    }
}

fn mean(v: &[f64]) -> f64 {
    v.iter().sum::<f64>() / v.len().max(1) as f64
}

/// 1234567.8 -> "1,234,568".
fn thousands(x: f64) -> String {
    if !x.is_finite() {
        return format!("{x}");
    }
    let digits = format!("{:.0}", x.abs());
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    if x < 0.0 {
        out.insert(0, '-');
    }
    out
}

fn percentile(v: &mut [f64], q: f64) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(|a, b| a.total_cmp(b));
    let i = ((v.len() - 1) as f64 * q).round() as usize;
    v[i]
}

fn p50_p99(v: &mut [f64]) -> (f64, f64) {
    (percentile(v, 0.50), percentile(v, 0.99))
}

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

// ---------------------------------------------------------------------------------------
// Raw SQLite baselines, on scratch files

fn sqlite_options(path: &Path) -> Res<SqliteConnectOptions> {
    // The server's settings (server/src/store/mod.rs).
    Ok(SqliteConnectOptions::from_str("sqlite:")?
        .filename(path)
        .journal_mode(SqliteJournalMode::Wal)
        .synchronous(SqliteSynchronous::Full)
        .busy_timeout(Duration::from_secs(5))
        .create_if_missing(true)
        .disable_statement_logging())
}

/// A read-only connection to the server's database, to verify what a run left.
async fn read_only(path: &Path) -> Res<SqliteConnection> {
    Ok(SqliteConnectOptions::from_str("sqlite:")?
        .filename(path)
        .read_only(true)
        .busy_timeout(Duration::from_secs(5))
        .disable_statement_logging()
        .connect()
        .await?)
}

/// Raw durable commits: one single-row INSERT per (implicit) transaction, in a loop.
async fn raw_commits_per_s() -> Res<f64> {
    let dir = tempfile::tempdir()?;
    let mut conn = sqlite_options(&dir.path().join("raw.db"))?
        .connect()
        .await?;
    sqlx::query(
        "CREATE TABLE scratch (id INTEGER PRIMARY KEY, at INTEGER NOT NULL, payload TEXT NOT NULL)",
    )
    .execute(&mut conn)
    .await?;
    let start = Instant::now();
    let mut n = 0u64;
    while start.elapsed() < RAW_WINDOW {
        sqlx::query("INSERT INTO scratch (at, payload) VALUES (?, ?)")
            .bind(n as i64)
            .bind("a row about the size of an event message")
            .execute(&mut conn)
            .await?;
        n += 1;
    }
    let rate = n as f64 / start.elapsed().as_secs_f64();
    conn.close().await?;
    Ok(rate)
}

/// Raw batched insert: 1,000 rows per transaction, one multi-row INSERT with the server's
/// upsert clause, into a table shaped like `metric_points`.
async fn raw_batched_points_per_s() -> Res<f64> {
    let dir = tempfile::tempdir()?;
    let mut conn = sqlite_options(&dir.path().join("raw-points.db"))?
        .connect()
        .await?;
    sqlx::query(
        "CREATE TABLE points (series_id INTEGER NOT NULL, step INTEGER NOT NULL, \
         value REAL NOT NULL, attempt INTEGER NOT NULL, PRIMARY KEY (series_id, step)) \
         WITHOUT ROWID",
    )
    .execute(&mut conn)
    .await?;
    let series: Vec<i64> = (1..=METRIC_NAMES.len() as i64).collect();
    let steps_per_batch = (RAW_BATCH / series.len()) as i64;
    let start = Instant::now();
    let mut points = 0u64;
    let mut step0 = 0i64;
    while start.elapsed() < RAW_WINDOW {
        let rows: Vec<(i64, i64, f64)> = (step0..step0 + steps_per_batch)
            .flat_map(|step| {
                series
                    .iter()
                    .enumerate()
                    .map(move |(i, id)| (*id, step, value(step, i)))
            })
            .collect();
        sqlx::query("BEGIN IMMEDIATE").execute(&mut conn).await?;
        let mut insert =
            QueryBuilder::<Sqlite>::new("INSERT INTO points (series_id, step, value, attempt) ");
        insert.push_values(&rows, |mut row, (series_id, step, value)| {
            row.push_bind(*series_id)
                .push_bind(*step)
                .push_bind(*value)
                .push_bind(1i64);
        });
        insert.push(
            " ON CONFLICT (series_id, step) DO UPDATE SET value = excluded.value, \
             attempt = excluded.attempt",
        );
        insert.build().execute(&mut conn).await?;
        sqlx::query("COMMIT").execute(&mut conn).await?;
        points += rows.len() as u64;
        step0 += steps_per_batch;
    }
    let rate = points as f64 / start.elapsed().as_secs_f64();
    conn.close().await?;
    Ok(rate)
}

fn value(step: i64, i: usize) -> f64 {
    1.0 / (1.0 + step as f64 * 0.001) + i as f64 * 0.01
}

// ---------------------------------------------------------------------------------------
// The real server, as its own process

struct ServerProc {
    child: Child,
    pid: u32,
    /// `http://127.0.0.1:<port>/api/v1`
    base: String,
    db: PathBuf,
    dir: TempDir,
}

impl ServerProc {
    /// `podq server` on port 0 with a fresh database, as a user runs it (default settings,
    /// default logging, both tokens set).
    async fn start() -> Res<ServerProc> {
        ServerProc::start_on(None).await
    }

    /// As `start`, on the PostgreSQL database `database` when given.
    async fn start_on(database: Option<String>) -> Res<ServerProc> {
        let dir = tempfile::tempdir()?;
        let db = dir.path().join("podq.db");
        let log = std::fs::File::create(dir.path().join("server.log"))?;
        let experiments = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("experiments");
        let mut child = Command::new(PODQ)
            .arg("server")
            .arg("--listen")
            .arg("127.0.0.1:0")
            .arg("--db")
            .arg(&db)
            .args(database.iter().flat_map(|url| ["--database", url.as_str()]))
            .arg("--experiments")
            .arg(&experiments)
            .arg("--bucket")
            .arg("gs://bench")
            .env("PODQ_ADMIN_TOKEN", ADMIN_TOKEN)
            .env("PODQ_WORKER_TOKEN", WORKER_TOKEN)
            .stdout(Stdio::piped())
            .stderr(log)
            .spawn()
            .map_err(|e| format!("cannot start {PODQ}: {e}"))?;
        let pid = child.id();
        let stdout = child.stdout.take().ok_or("no stdout")?;
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if let Some(url) = line.strip_prefix("podq server listening on ") {
                    let _ = tx.send(url.to_owned());
                }
            }
        });
        let url = tokio::task::spawn_blocking(move || rx.recv_timeout(Duration::from_secs(60)))
            .await?
            .map_err(|_| {
                format!(
                    "the server did not start; its log: {}",
                    std::fs::read_to_string(dir.path().join("server.log")).unwrap_or_default()
                )
            });
        let url = match url {
            Ok(url) => url,
            Err(e) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(e.into());
            }
        };
        Ok(ServerProc {
            child,
            pid,
            base: format!("{url}/api/v1"),
            db,
            dir,
        })
    }

    /// User + system CPU seconds the server has used so far.
    fn cpu_s(&self) -> Res<f64> {
        cpu_s_of(&format!("/proc/{}/stat", self.pid))
    }

    /// (VmRSS, VmHWM) in kB.
    fn rss_kb(&self) -> Res<(u64, u64)> {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid))?;
        let field = |name: &str| -> Res<u64> {
            let line = status
                .lines()
                .find(|l| l.starts_with(name))
                .ok_or_else(|| format!("no {name} in /proc/{}/status", self.pid))?;
            Ok(line
                .split_whitespace()
                .nth(1)
                .ok_or("empty field")?
                .parse()?)
        };
        Ok((field("VmRSS:")?, field("VmHWM:")?))
    }

    /// Sizes of the database file and of its WAL.
    fn db_bytes(&self) -> (u64, u64) {
        let size = |f: &str| std::fs::metadata(self.dir.path().join(f)).map_or(0, |m| m.len());
        (size("podq.db"), size("podq.db-wal"))
    }

    /// SIGTERM, then SIGKILL if it has not stopped within 5 s.
    async fn stop(mut self) {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(self.pid as i32),
            nix::sys::signal::Signal::SIGTERM,
        );
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for ServerProc {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// utime + stime of a /proc stat file, in seconds.
fn cpu_s_of(path: &str) -> Res<f64> {
    let stat = std::fs::read_to_string(path)?;
    // Fields after the command name (which may hold spaces) start at field 3, `state`;
    // utime and stime are fields 14 and 15.
    let rest = stat.rsplit_once(')').ok_or("unreadable stat")?.1;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let utime: f64 = fields.get(11).ok_or("short stat")?.parse()?;
    let stime: f64 = fields.get(12).ok_or("short stat")?.parse()?;
    Ok((utime + stime) / CLOCK_TICKS_PER_S)
}

// ---------------------------------------------------------------------------------------
// HTTP clients

fn http_client() -> reqwest::Client {
    reqwest::Client::builder()
        .pool_max_idle_per_host(4)
        .tcp_nodelay(true)
        .build()
        .expect("http client")
}

/// One HTTP client (one connection, like a separate process) against the server.
#[derive(Clone)]
struct Api {
    http: reqwest::Client,
    base: String,
}

impl Api {
    fn new(base: &str) -> Api {
        Api {
            http: http_client(),
            base: base.to_owned(),
        }
    }

    /// Sends `req`; the status and body, or an error naming the call, its status and body.
    async fn send(&self, req: reqwest::RequestBuilder, what: &str) -> Res<(u16, Vec<u8>)> {
        let resp = req.send().await.map_err(|e| format!("{what}: {e}"))?;
        let status = resp.status();
        let body = resp
            .bytes()
            .await
            .map_err(|e| format!("{what}: reading the body: {e}"))?
            .to_vec();
        if !status.is_success() {
            return Err(format!("{what}: {status}: {}", String::from_utf8_lossy(&body)).into());
        }
        Ok((status.as_u16(), body))
    }

    async fn post(&self, path: &str, token: &str, body: String) -> Res<(u16, Vec<u8>)> {
        let req = self
            .http
            .post(format!("{}{path}", self.base))
            .bearer_auth(token)
            .header("content-type", "application/json")
            .body(body);
        self.send(req, &format!("POST {path}")).await
    }

    /// A GET, timed until the whole body has arrived.
    async fn get_timed(&self, path: &str) -> Res<(Duration, Vec<u8>)> {
        let started = Instant::now();
        let req = self
            .http
            .get(format!("{}{path}", self.base))
            .header("accept", "application/json");
        let resp = req.send().await.map_err(|e| format!("GET {path}: {e}"))?;
        let status = resp.status();
        let body = resp
            .bytes()
            .await
            .map_err(|e| format!("GET {path}: reading the body: {e}"))?;
        let elapsed = started.elapsed();
        if !status.is_success() {
            return Err(format!("GET {path}: {status}: {}", String::from_utf8_lossy(&body)).into());
        }
        Ok((elapsed, body.to_vec()))
    }

    async fn get_json<T: serde::de::DeserializeOwned>(&self, path: &str) -> Res<T> {
        let (_, body) = self.get_timed(path).await?;
        serde_json::from_slice(&body).map_err(|e| format!("GET {path}: {e}").into())
    }

    /// The catalog's experiment names, as the server loaded them.
    async fn experiment_names(&self) -> Res<Vec<String>> {
        let list: Vec<serde_json::Value> = self.get_json("/experiments").await?;
        let names: Vec<String> = list
            .iter()
            .filter_map(|e| e["name"].as_str().map(str::to_owned))
            .collect();
        if names.is_empty() {
            return Err("the server's catalog is empty".into());
        }
        Ok(names)
    }

    /// One submit call, as the admin: `"all": true` when `n` covers the catalog, else the
    /// first `n` experiments. Answers how many jobs it created.
    async fn submit(&self, names: &[String], n: usize) -> Res<usize> {
        let body = if n >= names.len() {
            serde_json::json!({"all": true, "force": true})
        } else {
            serde_json::json!({"experiments": &names[..n], "force": true})
        };
        let (status, body) = self.post("/jobs", ADMIN_TOKEN, body.to_string()).await?;
        let answer: SubmitResponse = serde_json::from_slice(&body)?;
        if status != 201 || answer.created.is_empty() {
            return Err(
                format!("POST /jobs: {status} and {} created", answer.created.len()).into(),
            );
        }
        Ok(answer.created.len())
    }

    /// Submits `n` jobs, a catalog at a time.
    async fn submit_jobs(&self, names: &[String], n: usize) -> Res<()> {
        let mut created = 0;
        while created < n {
            created += self.submit(names, n - created).await?;
        }
        Ok(())
    }
}

/// A simulated worker: one pod, its own connection.
#[derive(Clone)]
struct WorkerClient {
    api: Api,
    pod: String,
}

impl WorkerClient {
    fn new(base: &str, pod: String) -> WorkerClient {
        WorkerClient {
            api: Api::new(base),
            pod,
        }
    }

    /// What the real worker sends: its pod, READY and HEALTHY, with a passed preflight.
    async fn lease(&self, accelerator: &str, wait_s: u64) -> Res<Option<Lease>> {
        let body = serde_json::json!({
            "accelerator": accelerator,
            "hosts": HOSTS,
            "state": "READY",
            "health": "HEALTHY",
            "preflight": {"passed": true, "at": "2026-01-01T00:00:00Z", "failures": []},
            "wait_s": wait_s,
        });
        let path = format!("/pods/{}/lease", self.pod);
        let (status, body) = self.api.post(&path, WORKER_TOKEN, body.to_string()).await?;
        if status == 204 {
            return Ok(None);
        }
        Ok(Some(
            serde_json::from_slice(&body).map_err(|e| format!("POST {path}: {e}"))?,
        ))
    }

    async fn heartbeat(&self, lease: Uuid, step: i64) -> Res<()> {
        let body = serde_json::json!({
            "phase": "running", "step": step, "hosts_alive": vec![true; HOSTS]
        });
        self.api
            .post(
                &format!("/leases/{lease}/heartbeat"),
                WORKER_TOKEN,
                body.to_string(),
            )
            .await?;
        Ok(())
    }

    async fn metrics(&self, lease: Uuid, body: String) -> Res<()> {
        self.api
            .post(&format!("/leases/{lease}/metrics"), WORKER_TOKEN, body)
            .await?;
        Ok(())
    }

    async fn checkpoint(&self, lease: Uuid, job: Uuid, step: i64) -> Res<()> {
        let body = serde_json::json!({"checkpoints": [{
            "step": step, "uri": format!("gs://bench/ckpt/{job}/{step}"), "committed": true
        }]});
        self.api
            .post(
                &format!("/leases/{lease}/checkpoints"),
                WORKER_TOKEN,
                body.to_string(),
            )
            .await?;
        Ok(())
    }

    async fn finish(&self, lease: Uuid, end_step: i64) -> Res<()> {
        let body = serde_json::json!({
            "outcome": "succeeded",
            "exit_codes": vec![0; HOSTS],
            "start_step": 0,
            "end_step": end_step,
        });
        self.api
            .post(
                &format!("/leases/{lease}/finish"),
                WORKER_TOKEN,
                body.to_string(),
            )
            .await?;
        Ok(())
    }
}

/// A metrics batch: each of `steps` with a value for each of `names`.
fn metrics_body(steps: impl Iterator<Item = i64>, names: &[&str]) -> String {
    let mut s = String::with_capacity(64 * 1024);
    s.push_str("{\"points\":[");
    for (k, step) in steps.enumerate() {
        if k > 0 {
            s.push(',');
        }
        let _ = write!(s, "{{\"step\":{step},\"values\":{{");
        for (i, name) in names.iter().enumerate() {
            if i > 0 {
                s.push(',');
            }
            let _ = write!(s, "\"{name}\":{}", value(step, i));
        }
        s.push_str("}}");
    }
    s.push_str("]}");
    s
}

const CYCLE_END_STEP: i64 = CYCLE_STEPS * CYCLE_STEP_SIZE;

fn cycle_metrics_body() -> String {
    metrics_body(
        (1..=CYCLE_STEPS).map(|i| i * CYCLE_STEP_SIZE),
        &METRIC_NAMES,
    )
}

// ---------------------------------------------------------------------------------------
// 1. Lease cycles

/// When a cycle ended and how long each of its parts took.
#[derive(Clone, Copy)]
struct CycleTimes {
    end: Instant,
    lease: Duration,
    /// From the first `running` heartbeat to the last: at least `RUNNING_FOR`.
    running: Duration,
    metrics: Duration,
    checkpoint: Duration,
    finish: Duration,
}

/// One lease cycle as a real worker runs it; `None` when the lease call found no job.
async fn run_cycle(w: &WorkerClient, wait_s: u64) -> Res<Option<(Uuid, CycleTimes)>> {
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

struct CycleRun {
    /// The server's store: `sqlite` or `postgres`.
    store: &'static str,
    workers: usize,
    cycles_per_s: f64,
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
    raw: (f64, f64),
}

impl CycleRun {
    fn print(&self) {
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

/// Finished attempts in the database, and how many were recorded as running.
async fn attempts_running(db: &Path) -> Res<(i64, i64)> {
    let mut conn = read_only(db).await?;
    let counts: (i64, i64) = sqlx::query_as(
        "SELECT COUNT(*), COUNT(running_at) FROM attempts WHERE ended_at IS NOT NULL",
    )
    .fetch_one(&mut conn)
    .await?;
    conn.close().await?;
    Ok(counts)
}

async fn lease_cycles(workers: usize) -> Res<CycleRun> {
    lease_cycles_on(workers, None).await
}

/// Lease cycles on a server whose store is SQLite, or PostgreSQL on `postgres`, each against
/// its own store's raw commits/s.
async fn lease_cycles_on(workers: usize, postgres: Option<&PostgresServer>) -> Res<CycleRun> {
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
    let server = ServerProc::start_on(database.clone()).await?;
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

// ---------------------------------------------------------------------------------------
// 2. Metric ingestion, and reading a long series

/// A fresh server with one submitted job leased to `pod` and running.
async fn server_with_running_job(pod: &str) -> Res<(ServerProc, WorkerClient, Lease)> {
    let server = ServerProc::start().await?;
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

struct MetricRun {
    senders: usize,
    points_per_s: f64,
    batch: (f64, f64),
    errors: u64,
    first_error: Option<String>,
    /// Raw batched insert points/s just before and just after the run.
    raw: (f64, f64),
}

impl MetricRun {
    fn print(&self) {
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

async fn metric_ingestion(senders: usize) -> Res<MetricRun> {
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

struct QueryRun {
    p50_ms: f64,
    p99_ms: f64,
    points_returned: usize,
    ingest_s: f64,
    /// Baseline: one raw read of the whole series from the server's database.
    full_read_ms: f64,
}

impl QueryRun {
    fn print(&self) {
        println!(
            "metrics query, {QUERY_POINTS} points -> {QUERY_MAX_POINTS}: p50 {:.1} ms, p99 \
             {:.1} ms ({} points returned, {QUERY_REQUESTS} requests); raw read of every point \
             {:.0} ms; the series went in over HTTP in {:.1} s",
            self.p50_ms, self.p99_ms, self.points_returned, self.full_read_ms, self.ingest_s
        );
    }
}

async fn metrics_query() -> Res<QueryRun> {
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
    let all: Vec<(i64, f64)> = sqlx::query_as(
        "SELECT p.step, p.value FROM metric_points p JOIN metric_series s ON s.id = p.series_id \
         WHERE s.job_id = ? AND s.name = ? ORDER BY p.step",
    )
    .bind(lease.job_id.to_string())
    .bind(NAME)
    .fetch_all(&mut conn)
    .await?;
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

// ---------------------------------------------------------------------------------------
// 3. Submissions with waiting workers

struct SubmitRun {
    waiters: usize,
    accelerator: &'static str,
    submits_per_s: f64,
    submit: (f64, f64),
    /// Jobs the waiters took (and finished) during the window.
    taken: u64,
    timeouts: u64,
    waiter_errors: u64,
    first_error: Option<String>,
    server_cpu_ms_per_submit: f64,
    /// (server, bench) CPU seconds over `IDLE_WINDOW` with nothing submitted.
    idle_cpu: Option<(f64, f64)>,
}

impl SubmitRun {
    fn print(&self) {
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
struct WaiterCounts {
    taken: AtomicU64,
    timeouts: AtomicU64,
    errors: AtomicU64,
    first_error: Mutex<Option<String>>,
}

/// A worker whose pod is idle: long-polls for a job; finishes a job it gets at once and
/// waits again.
async fn waiter(w: WorkerClient, accelerator: &'static str, counts: Arc<WaiterCounts>) {
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

async fn submit_rate(waiters: usize, accelerator: &'static str, idle: bool) -> Res<SubmitRun> {
    let server = ServerProc::start().await?;
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

// ---------------------------------------------------------------------------------------
// 4. History and reads

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
    finished: Vec<Uuid>,
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
        let server = ServerProc::start().await?;
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
    counts: BTreeMap<String, i64>,
    rss_kb: u64,
    hwm_kb: u64,
    control_rss_kb: u64,
    db_bytes: (u64, u64),
    server_cpu_s: f64,
}

struct HistoryRun {
    phases: Vec<Phase>,
    control_jobs: usize,
    total: Duration,
    metric_points: i64,
    metric_series: i64,
    attempts: (i64, i64),
}

impl HistoryRun {
    fn rows(&self) -> Vec<Row> {
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

async fn history(sizes: &[usize]) -> Res<HistoryRun> {
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
    let (metric_points,): (i64,) = sqlx::query_as("SELECT COUNT(*) FROM metric_points")
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
            if status.jobs.get("queued") != Some(&(LIVE_QUEUE as i64)) {
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

// ---------------------------------------------------------------------------------------
// 5. PostgreSQL

/// The PostgreSQL server the `cycles-postgres` section uses: `PODQ_BENCH_DATABASE_URL`, or a
/// throwaway cluster on this machine (stopped when this is dropped).
struct PostgresServer {
    url: String,
    cluster: Option<PathBuf>,
}

impl PostgresServer {
    fn find() -> Res<PostgresServer> {
        if let Ok(url) = std::env::var("PODQ_BENCH_DATABASE_URL") {
            return Ok(PostgresServer { url, cluster: None });
        }
        let dir = PathBuf::from(format!("/tmp/podq-bench-postgres-{}", std::process::id()));
        let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("scripts/postgres-cluster");
        let output = Command::new(script)
            .arg("start")
            .arg(&dir)
            .stderr(Stdio::inherit())
            .output()?;
        if !output.status.success() {
            return Err("scripts/postgres-cluster could not start PostgreSQL".into());
        }
        Ok(PostgresServer {
            url: String::from_utf8(output.stdout)?.trim().to_owned(),
            cluster: Some(dir),
        })
    }

    /// A fresh database on this server, by URL.
    async fn create_database(&self) -> Res<String> {
        use sqlx::Connection;
        let name = format!("podq_bench_{}", Uuid::new_v4().simple());
        let mut admin = sqlx::PgConnection::connect(&self.url).await?;
        sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
            .execute(&mut admin)
            .await?;
        admin.close().await?;
        let root = self
            .url
            .rsplit_once('/')
            .map_or(self.url.as_str(), |(root, _)| root);
        Ok(format!("{root}/{name}"))
    }

    /// One single-row INSERT per transaction, durably committed, for `RAW_WINDOW`.
    async fn raw_commits_per_s(&self) -> Res<f64> {
        use sqlx::{ConnectOptions, Connection};
        let url = self.create_database().await?;
        let mut conn = sqlx::postgres::PgConnectOptions::from_str(&url)?
            .options([("synchronous_commit", "on")])
            .connect()
            .await?;
        sqlx::query(
            "CREATE TABLE scratch (id BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY, \
             at BIGINT NOT NULL, payload TEXT NOT NULL)",
        )
        .execute(&mut conn)
        .await?;
        let start = Instant::now();
        let mut n = 0u64;
        while start.elapsed() < RAW_WINDOW {
            sqlx::query("INSERT INTO scratch (at, payload) VALUES ($1, $2)")
                .bind(n as i64)
                .bind("a row about the size of an event message")
                .execute(&mut conn)
                .await?;
            n += 1;
        }
        let rate = n as f64 / start.elapsed().as_secs_f64();
        conn.close().await?;
        Ok(rate)
    }
}

impl Drop for PostgresServer {
    fn drop(&mut self) {
        if let Some(dir) = &self.cluster {
            let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("scripts/postgres-cluster");
            let _ = Command::new(script).arg("stop").arg(dir).status();
        }
    }
}

async fn attempts_running_postgres(url: &str) -> Res<(i64, i64)> {
    use sqlx::Connection;
    let mut conn = sqlx::PgConnection::connect(url).await?;
    let counts: (i64, i64) = sqlx::query_as(
        "SELECT COUNT(*), COUNT(running_at) FROM attempts WHERE ended_at IS NOT NULL",
    )
    .fetch_one(&mut conn)
    .await?;
    conn.close().await?;
    Ok(counts)
}
