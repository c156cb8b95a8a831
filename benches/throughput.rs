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
//!    in the original measurement: 319, 146 and 45/s with 0, 64 and 256 waiters), each
//!    run on a fresh server, with 0, 1, 64 and 256 workers long-polling
//!    `POST /pods/{name}/lease` (`wait_s` 30) for the SAME accelerator as the jobs, so every
//!    submit has waiters to wake. A woken waiter takes its job and finishes it at once, then waits
//!    again: waiters that kept their jobs would all be busy within a second and the figure
//!    would measure nothing. (A pod whose preflight failed never waits on the wake-up at all,
//!    so it would test nothing either.) So with waiters each submit also costs the server a
//!    lease and a finish. The target: with 256 waiters at least 0.9 of
//!    the rate with nobody waiting (such a run is made on either side of each run with waiters;
//!    the mean of the two is its baseline). That ratio also charges the waiters with running
//!    the jobs they take, so the herd itself (every waiter waking on every submit) is isolated
//!    by comparing 256 waiters with 64: both take every job at once, the same work per submit,
//!    and only the number of waiters differs (a herd's cost grows with it: 146 -> 45/s in the
//!    original measurement). The server's CPU time per submit is printed for each run, and 1
//!    waiter (who falls behind and so takes only some of the jobs) for context. A run with 256
//!    waiters for ANOTHER accelerator (never woken) shows the cost of waiting alone. Then the
//!    idle server's CPU time over 5 s with the 256 waiters parked and nothing submitted
//!    (target: at most 1 % of one core; /proc counts in 10 ms ticks), next to the idle server
//!    with none.
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
//! 5. `cycles-postgres`: section 1 again on a server whose store is PostgreSQL, each
//!    figure against PostgreSQL's own raw durable commits/s: one single-row INSERT per
//!    transaction on a scratch table of a scratch database on the same PostgreSQL server,
//!    `synchronous_commit=on` (the server's setting). PostgreSQL is `PODQ_BENCH_DATABASE_URL`
//!    (a server where the bench may create databases) or else a throwaway cluster started with
//!    `scripts/postgres-cluster` on this machine.
//!
//! 6. `crowded`: submissions/s on a store already holding 40,000 jobs of other types, with
//!    nobody waiting and with 64 workers long-polling for a slice type no job lists, on one
//!    server (`crowded.rs` says how; target: with the waiters at least 0.8 of the rate
//!    without, the mean of a run before and a run after), and the p50 of an empty claim for
//!    that type on the empty store and on the crowded one. `PODQ_BENCH_CROWDED_JOBS` changes
//!    the 40,000. Only this section: `PODQ_BENCH_ONLY=crowded cargo bench --profile dev
//!    --bench throughput` (the dev profile builds the server in a fraction of release's time;
//!    the ratio is what is judged).
//!
//! It is a report: the process exits 0 whether the targets are met or not (1 only when a
//! section could not run; its error is printed). `PODQ_BENCH_ONLY=cycles,metrics,submit,crowded,history,cycles-postgres`
//! runs only the sections named (the baselines always run).
//!
//! Each section is a file of its own under `benches/throughput/`: `cycles.rs` (sections 1 and
//! 5), `metrics.rs`, `submit.rs`, `history.rs` and `crowded.rs`, with `postgres.rs` for the PostgreSQL server
//! of section 5. They share `podq_testkit::harness` with the fleet bench: the server as its
//! own process, the simulated clients, the raw baselines, /proc's figures and percentiles. This file picks the sections, runs them
//! and prints the table.

#[path = "throughput/crowded.rs"]
mod crowded;
#[path = "throughput/cycles.rs"]
mod cycles;
#[path = "throughput/history.rs"]
mod history;
#[path = "throughput/metrics.rs"]
mod metrics;
#[path = "throughput/submit.rs"]
mod submit;

use std::fmt::Write as _;
use std::path::Path;
use std::process::ExitCode;
use std::sync::LazyLock;
use std::time::Instant;

/// The binary under test: built by cargo for this bench (release profile), or
/// `PODQ_BENCH_PROGRAM` (see `podq_testkit::program_under_test`).
static PODQ: LazyLock<String> =
    LazyLock::new(|| podq_testkit::program_under_test(env!("CARGO_BIN_EXE_podq")));

use crate::crowded::{crowded_submit_rate, CrowdedRun, CROWDED_WAITERS, TARGET_CROWDED_RATIO};
use crate::cycles::{
    lease_cycles, lease_cycles_on, CycleRun, CYCLE_WORKERS, MAIN_WORKERS, TARGET_CYCLE_RATIO,
};
use crate::history::{history, HistoryRun, DEFAULT_HISTORY, HELD_RUNNING, WALK_PAGE};
use crate::metrics::{
    metric_ingestion, metrics_query, MetricRun, QueryRun, METRIC_SENDERS, TARGET_METRIC_RATIO,
    TARGET_QUERY_P99_MS,
};
use crate::submit::{submit_rate, SubmitRun, IDLE_WINDOW, TARGET_IDLE_CPU_S, TARGET_SUBMIT_RATIO};
use podq_testkit::harness::{mean, thousands, Res, ACCELERATOR, OTHER_ACCELERATOR};
use podq_testkit::postgres::PostgresServer;

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
    crowded: Option<CrowdedRun>,
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
    let podq = PODQ.as_str();
    if !Path::new(podq).exists() {
        return Err(format!("{podq} is missing: build it with `cargo build --release`").into());
    }
    println!(
        "podq throughput bench: {} cores visible; server: {podq} (a process of its own); \
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
    if wanted("crowded") {
        match crowded_submit_rate().await {
            Ok(run) => {
                run.print();
                report.crowded = Some(run);
            }
            Err(e) => report.fail("submissions on a crowded store", e),
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
        if let Some(c) = &self.crowded {
            let ratio = c.ratio();
            rows.push((
                format!(
                    "submits/s, {} jobs stored, {CROWDED_WAITERS} waiting for a type no job lists",
                    thousands(c.waiting.jobs_before as f64)
                ),
                format!("{} /s", thousands(c.waiting.submits_per_s)),
                format!("0 waiting, same store {} /s", thousands(c.baseline())),
                format!("{ratio:.3}"),
                format!("≥ {TARGET_CROWDED_RATIO} × baseline"),
                Some(ratio >= TARGET_CROWDED_RATIO),
            ));
            let ((empty, _), (crowded, _)) = c.empty_claim;
            rows.push((
                format!(
                    "empty claim p50, {} jobs of other types stored",
                    thousands(c.before.jobs_before as f64)
                ),
                format!("{crowded:.2} ms"),
                format!("empty store {empty:.2} ms"),
                format!("{:.2}", crowded / empty),
                String::new(),
                None,
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
