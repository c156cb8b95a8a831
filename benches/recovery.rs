//! How long a preempted run takes to train again, three ways in one run, each on a real
//! server and a real `podq pool` of simulated slices whose creates take `CREATE_S` (20 s), in
//! a zone that preempts its slices (`sim: {preempt_young: N}`: the zone's first N slices are
//! preempted 20 s after they are ready, worker/src/pool/sim.rs):
//!
//!     cargo bench --profile dev --bench recovery    # about 3 minutes
//!
//! - (a) replacement: one pool of one type and one slice; the run's slice is preempted and
//!   the pool makes a replacement, as podq does today;
//! - (b) idle slice: exp07a lists `[v4-64, v6e-32]`; a v6e-32 pool holds an idle slice (made
//!   for a v6e-only job, then cancelled), and the run resumes there at once;
//! - (c) spare: `spares: 1` in the pool file, the pool keeping a ready idle slice while it
//!   runs jobs. It starts the spare once the run leased its slice, and the young preemption
//!   comes one create time (20 s) after that slice was ready: the spare is ready within a
//!   tick of the preemption, a few tenths of a second before or after it (any part after it
//!   is `creating_s`). A real preemption comes later, when the spare is long ready.
//!   A build whose pool file refuses `spares:` prints "spares: not supported by this build".
//!
//! Printed for each: the record `GET /api/v1/recoveries` keeps of the interruption, its
//! whole and its phases, and podq's own share: the whole less the wait for a slice being made
//! (`creating_s`) and the trainer's startup (compile included) and restore. Then the targets,
//! as targets: podq's own share at most 5 s; with an idle slice or a spare, the whole at most
//! 10 s. No assertion: these machines are shared and noisy.

#[path = "../tests/common/mod.rs"]
mod common;

use std::path::Path;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use common::pools::PoolProcess;
use common::{copy_dir, experiments_dir, shared_tempdir, Server, ServerOptions};
use podq_api::{RecoveriesReport, Recovery};
use serde_json::{json, Value};

/// Seconds the simulated cloud takes to make a slice.
const CREATE_S: f64 = 20.0;
/// The sim trainer's whole run: long enough that no run ends while it is measured, short
/// enough that it commits a checkpoint before its slice is preempted.
const RUN_SECS: u32 = 120;
/// Target: podq's own share of a recovery, in seconds.
const OWN_SHARE_TARGET_S: f64 = 5.0;
/// Target: the whole recovery when a slice is ready for the run, in seconds.
const WARM_TARGET_S: f64 = 10.0;
/// The longest any one condition is waited for.
const WAIT: Duration = Duration::from_secs(150);

type Res<T> = Result<T, Box<dyn std::error::Error + Send + Sync>>;

/// What one mode measured.
enum Outcome {
    Measured(Box<Recovery>),
    Unsupported(&'static str),
    Failed(String),
}

/// Polls `check` every 100 ms until it answers `Some`, or fails with `what` after `limit`.
async fn poll<T, F, Fut>(limit: Duration, what: &str, mut check: F) -> Res<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + limit;
    loop {
        if let Some(value) = check().await {
            return Ok(value);
        }
        if Instant::now() >= deadline {
            return Err(format!("no {what} after {limit:?}").into());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A `podq pool` on `yaml`, its slices made in `CREATE_S`, its cloud under the server's dir.
fn pool(server: &Server, yaml: &str) -> PoolProcess {
    let cloud = server.dir.path().join("pools/cloud");
    let create_s = CREATE_S.to_string();
    PoolProcess::start_with(
        server,
        yaml,
        RUN_SECS,
        &[
            "--sim-create-s",
            &create_s,
            "--sim-cloud",
            cloud.to_str().expect("a UTF-8 path"),
        ],
    )
}

/// A pool of `name` making `accelerator` slices, kept however long they idle, in `zones`
/// (each a line of the YAML list), with `extra` lines of settings.
fn pool_entry(
    name: &str,
    accelerator: &str,
    max_slices: u32,
    extra: &str,
    zones: &[&str],
) -> String {
    let zones: String = zones.iter().map(|z| format!("      - {z}\n")).collect();
    format!(
        "  - name: {name}\n    accelerator: {accelerator}\n    max_slices: {max_slices}\n    \
         idle_after: never\n    provisioning: spot\n    driver: local\n{extra}    zones:\n{zones}"
    )
}

/// The zones of a pool whose first slice is preempted young and whose next go elsewhere.
const PREEMPTING_FIRST: [&str; 2] = ["{zone: zone-a, sim: {preempt_young: 1}}", "zone-b"];

/// The job's attempts.
async fn attempts(server: &Server, id: &str) -> Vec<Value> {
    let (_, job) = server.get(&format!("/jobs/{id}")).await;
    job["attempts"].as_array().cloned().unwrap_or_default()
}

/// Job `id`'s attempts, one line each, for an error.
async fn attempt_lines(server: &Server, id: &str) -> String {
    attempts(server, id)
        .await
        .iter()
        .map(|a| {
            format!(
                "\n  attempt {} on {}: {} to {}, {} ({})",
                a["attempt"], a["pod"], a["started_at"], a["ended_at"], a["outcome"], a["cause"]
            )
        })
        .collect()
}

/// Waits until job `id` runs on a pod whose name starts with `prefix`; answers the pod.
async fn running_on(server: &Server, pool: &PoolProcess, id: &str, prefix: &str) -> Res<String> {
    let what = format!("attempt of {id} on a {prefix} pod");
    let found = poll(WAIT, &what, || async {
        let (_, job) = server.get(&format!("/jobs/{id}")).await;
        let last = job["attempts"].as_array()?.last()?.clone();
        let pod = last["pod"].as_str()?;
        (job["state"] == "running" && pod.starts_with(prefix)).then(|| pod.to_owned())
    })
    .await;
    match found {
        Ok(pod) => Ok(pod),
        Err(e) => {
            let attempts = attempt_lines(server, id).await;
            let tail = tail(&pool.log(), 6000);
            Err(format!("{e}:{attempts}\nthe pool's log ends:\n{tail}").into())
        }
    }
}

/// Waits for the record of job `id`'s first interruption, whole once the resumed attempt
/// took its first step.
async fn recovery_of(server: &Server, pool: &PoolProcess, id: &str) -> Res<Recovery> {
    let found = poll(WAIT, &format!("recovery record of {id}"), || async {
        let (status, body) = server.get(&format!("/recoveries?job={id}")).await;
        if status != 200 {
            return None;
        }
        let report: RecoveriesReport = serde_json::from_value(body).ok()?;
        report.recoveries.into_iter().min_by_key(|r| r.attempt)
    })
    .await;
    match found {
        Ok(record) => {
            if std::env::var_os("PODQ_BENCH_VERBOSE").is_some() {
                eprintln!("{id}:{}", attempt_lines(server, id).await);
                eprintln!("{}", serde_json::to_string(&record).unwrap_or_default());
                let (_, audit) = server.get("/audit?limit=1000").await;
                let mut entries = audit["entries"].as_array().cloned().unwrap_or_default();
                entries.reverse();
                for e in entries
                    .iter()
                    .filter(|e| e["by"].as_str().is_some_and(|b| b.starts_with("pool:")))
                {
                    eprintln!("  {} {} {}", e["at"], e["action"], e["message"]);
                }
            }
            Ok(record)
        }
        Err(e) => {
            let attempts = attempt_lines(server, id).await;
            let tail = tail(&pool.log(), 4000);
            Err(format!("{e}:{attempts}\nthe pool's log ends:\n{tail}").into())
        }
    }
}

/// The last `n` bytes of `text`, without its debug lines.
fn tail(text: &str, n: usize) -> String {
    let kept: String = text
        .lines()
        .filter(|l| !l.contains(" DEBUG "))
        .map(|l| format!("{l}\n"))
        .collect();
    let mut start = kept.len().saturating_sub(n);
    while !kept.is_char_boundary(start) {
        start += 1;
    }
    kept[start..].to_owned()
}

/// Waits until pool `name` has reported to the server; `None` when its process refused the
/// pool file for `key`.
async fn started(server: &Server, pool: &PoolProcess, name: &str, key: &str) -> Res<bool> {
    let refusal = format!("`{key}`");
    poll(
        Duration::from_secs(60),
        &format!("report of pool {name}"),
        || async {
            let log = pool.log();
            if log.contains(&refusal) && (log.contains("unknown field") || log.contains("Error")) {
                return Some(false);
            }
            let (_, page) = server.get("/pools").await;
            let reported = page["pools"]
                .as_array()?
                .iter()
                .any(|p| p["name"] == name && !p["reported_at"].is_null());
            reported.then_some(true)
        },
    )
    .await
}

/// (a) One pool of one type: the run's slice preempted, a replacement made.
async fn replacement() -> Res<Recovery> {
    let server = Server::start().await;
    let yaml = format!(
        "pools:\n{}",
        pool_entry("v4-spot", "v4-64", 1, "", &PREEMPTING_FIRST)
    );
    let pool = pool(&server, &yaml);
    let id = server.submit_one("exp07a", json!({})).await;
    recovery_of(&server, &pool, &id).await
}

/// A copy of the repository's catalog, under the target's tmp dir, in which exp08-ema's runs
/// list only `v6e-32`.
fn catalog_with_a_v6e_group() -> Res<tempfile::TempDir> {
    let dir = shared_tempdir();
    copy_dir(&experiments_dir(), dir.path());
    let group = dir.path().join("groups/exp08-ema/group.yaml");
    let text = std::fs::read_to_string(&group)?;
    let kept: String = text
        .lines()
        .filter(|l| !l.starts_with("accelerator"))
        .map(|l| format!("{l}\n"))
        .collect();
    std::fs::write(&group, format!("{kept}accelerators: [v6e-32]\n"))?;
    Ok(dir)
}

/// (b) An idle slice of the run's second type: a v6e-32 pool's slice, made for a v6e-only
/// job that is cancelled once the run trains on its v4-64.
async fn idle_slice(catalog: &Path) -> Res<Recovery> {
    let server = Server::start_with(ServerOptions {
        experiments: catalog.to_path_buf(),
        ..ServerOptions::default()
    })
    .await;
    let yaml = format!(
        "pools:\n{}{}",
        pool_entry("v4-spot", "v4-64", 1, "", &PREEMPTING_FIRST),
        pool_entry("v6e-spot", "v6e-32", 1, "", &["zone-v"]),
    );
    let pool = pool(&server, &yaml);
    let id = server.submit_one("exp07a", json!({})).await;
    let holder = server.submit_one("exp08a", json!({})).await;
    running_on(&server, &pool, &id, "v4-spot-").await?;
    running_on(&server, &pool, &holder, "v6e-spot-").await?;
    let (status, body) = server
        .post(&format!("/jobs/{holder}/cancel"), json!({}))
        .await;
    if status != 200 {
        return Err(format!("cancel {holder}: {status} {body}").into());
    }
    // The v6e slice is idle (its attempt ended) before the run's slice is preempted.
    poll(WAIT, "the v6e slice idle", || async {
        let done = attempts(&server, &holder)
            .await
            .last()
            .is_some_and(|a| !a["ended_at"].is_null());
        done.then_some(())
    })
    .await?;
    let record = recovery_of(&server, &pool, &id).await?;
    if !record.resumed_on.starts_with("v6e-spot-") {
        eprintln!(
            "(b): the run resumed on {}, not on the idle v6e slice",
            record.resumed_on
        );
    }
    Ok(record)
}

/// (c) `spares: 1`: the pool makes a spare once the run leases its slice; the run's slice is
/// preempted and the run resumes on the spare.
async fn spare() -> Outcome {
    let server = Server::start().await;
    let yaml = format!(
        "pools:\n{}",
        pool_entry("v4-spare", "v4-64", 2, "    spares: 1\n", &PREEMPTING_FIRST)
    );
    let pool = pool(&server, &yaml);
    match started(&server, &pool, "v4-spare", "spares").await {
        Ok(true) => {}
        Ok(false) => return Outcome::Unsupported("spares: not supported by this build"),
        Err(e) => return Outcome::Failed(format!("{e}: {}", tail(&pool.log(), 2000))),
    }
    let id = server.submit_one("exp07a", json!({})).await;
    match recovery_of(&server, &pool, &id).await {
        Ok(record) => Outcome::Measured(Box::new(record)),
        Err(e) => Outcome::Failed(e.to_string()),
    }
}

/// podq's own share: the whole less the wait for a slice being made and the trainer's
/// startup (compile included) and restore.
fn own_share(r: &Recovery) -> f64 {
    r.total_s - r.phases.creating_s - r.phases.startup_s - r.phases.restore_s
}

fn verdict(value: f64, target: f64) -> &'static str {
    if value <= target {
        "met"
    } else {
        "NOT met"
    }
}

fn print_record(label: &str, r: &Recovery) {
    let p = &r.phases;
    println!(
        "{label:<16} total {:>6.2} s = stopping {:.2} + waiting {:.2} (creating {:.2}) + setup \
         {:.2} + startup {:.2} (compile {:.2}) + restore {:.2}; {} on {} -> {}",
        r.total_s,
        p.stopping_s,
        p.waiting_s,
        p.creating_s,
        p.setup_s,
        p.startup_s,
        p.compile_s,
        p.restore_s,
        r.cause,
        r.pod,
        r.resumed_on,
    );
    println!(
        "{:<16} podq's own {:.2} s = stopping {:.2} + waiting beyond creating {:.2} + setup {:.2}",
        "",
        own_share(r),
        p.stopping_s,
        p.waiting_s - p.creating_s,
        p.setup_s,
    );
}

#[tokio::main]
async fn main() -> ExitCode {
    let started = Instant::now();
    println!(
        "recovery of a preempted run: the sim cloud makes a slice in {CREATE_S:.0} s \
         (reference); its zone-a preempts a slice 20 s after it is ready"
    );
    let catalog = match catalog_with_a_v6e_group() {
        Ok(dir) => dir,
        Err(e) => {
            eprintln!("the catalog: {e}");
            return ExitCode::FAILURE;
        }
    };
    let outcome = |r: Res<Recovery>| match r {
        Ok(record) => Outcome::Measured(Box::new(record)),
        Err(e) => Outcome::Failed(e.to_string()),
    };
    // `PODQ_BENCH_ONLY=a` (or `b`, `c`, `ab`, ...) runs only those modes.
    let only = std::env::var("PODQ_BENCH_ONLY").unwrap_or_else(|_| "abc".into());
    let skipped = || Outcome::Unsupported("skipped (PODQ_BENCH_ONLY)");
    let modes = [
        (
            "(a) replacement",
            if only.contains('a') {
                outcome(replacement().await)
            } else {
                skipped()
            },
        ),
        (
            "(b) idle slice",
            if only.contains('b') {
                outcome(idle_slice(catalog.path()).await)
            } else {
                skipped()
            },
        ),
        (
            "(c) spare",
            if only.contains('c') {
                spare().await
            } else {
                skipped()
            },
        ),
    ];
    for (label, result) in &modes {
        match result {
            Outcome::Measured(r) => print_record(label, r),
            Outcome::Unsupported(why) => println!("{label:<16} {why}"),
            Outcome::Failed(e) => println!("{label:<16} failed: {e}"),
        }
    }
    println!(
        "targets (constants, not measured baselines): podq's own share (total - creating - \
         startup - restore) at most {OWN_SHARE_TARGET_S:.0} s; with an idle slice or a \
         spare, the whole recovery at most {WARM_TARGET_S:.0} s"
    );
    let mut failed = false;
    for (i, (label, result)) in modes.iter().enumerate() {
        let Outcome::Measured(r) = result else {
            failed |= matches!(result, Outcome::Failed(_));
            continue;
        };
        let own = own_share(r);
        let mut line = format!(
            "{label:<16} podq's own {own:>5.2} s (target <= {OWN_SHARE_TARGET_S:.0} s): {}",
            verdict(own, OWN_SHARE_TARGET_S)
        );
        if i > 0 {
            line.push_str(&format!(
                "   whole {:>5.2} s (target <= {WARM_TARGET_S:.0} s): {}",
                r.total_s,
                verdict(r.total_s, WARM_TARGET_S)
            ));
        }
        println!("{line}");
    }
    println!("({:.0} s in all)", started.elapsed().as_secs_f64());
    if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}
