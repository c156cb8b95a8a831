//! A record per interruption (`GET /api/v1/recoveries`): a real worker on a simulated pod, a
//! real sim trainer reporting its compile and restore, the pod preempted (or the run
//! suspended) once. Each record's phases follow each other and sum to its whole, on both
//! stores and across a server's kill -9; `/metrics` has the histogram; bad queries are
//! refused. And a real JAX trainer's resumed attempt loads its compiled step from the cache
//! the worker gives it.

mod common;

use std::time::Duration;

use common::pools::{pool_yaml, PoolProcess};
use common::{eventually, python, Server, StoreKind, Worker};
use serde_json::{json, Value};

const RUN: Duration = Duration::from_secs(180);

const SEQUENTIAL: [&str; 5] = [
    "stopping_s",
    "waiting_s",
    "setup_s",
    "startup_s",
    "restore_s",
];

fn seconds(at: &Value) -> f64 {
    chrono::DateTime::parse_from_rfc3339(at.as_str().unwrap())
        .unwrap()
        .timestamp_millis() as f64
        / 1000.0
}

fn phase(record: &Value, name: &str) -> f64 {
    record["phases"][name].as_f64().unwrap()
}

/// The sequential phases sum to the whole, which is the time from the notice to the first
/// step; the parts lie within their phases; nothing is negative.
fn assert_whole(record: &Value) {
    let sum: f64 = SEQUENTIAL.iter().map(|p| phase(record, p)).sum();
    let total = record["total_s"].as_f64().unwrap();
    assert!((sum - total).abs() < 1e-6, "{sum} vs {total}: {record}");
    let span = seconds(&record["resumed_at"]) - seconds(&record["noticed_at"]);
    assert!((span - total).abs() < 0.01, "{span} vs {total}: {record}");
    for name in SEQUENTIAL.iter().chain(&["creating_s", "compile_s"]) {
        assert!(phase(record, name) >= 0.0, "{name}: {record}");
    }
    assert!(
        phase(record, "creating_s") <= phase(record, "waiting_s"),
        "{record}"
    );
    assert!(
        phase(record, "compile_s") <= phase(record, "startup_s"),
        "{record}"
    );
}

fn sim_worker(server: &Server, pod: &str) -> Worker {
    server.worker(
        pod,
        2,
        &[
            "--trainer-env",
            "PODQ_SIM_RUN_SECS=20",
            "--recovery-delay-s",
            "2",
        ],
    )
}

async fn recoveries(server: &Server, query: &str) -> Value {
    let (status, body) = server.get(&format!("/recoveries{query}")).await;
    assert_eq!(status, 200, "{body}");
    body
}

/// Runs exp07a on `pod`, preempts it a fifth of the way in, and waits for it to succeed.
async fn preempted_run(server: &Server, pod: &str) -> (String, Value, Worker) {
    let id = server.submit_one("exp07a", json!({})).await;
    let worker = sim_worker(server, pod);
    let running = server.wait_state(&id, "running", RUN).await;
    let total = running["total_steps"].as_i64().unwrap_or(5000);
    server.committed_at_least(&id, total / 5, RUN).await;
    worker.control("preempt");
    let job = server.wait_state(&id, "succeeded", RUN).await;
    (id, job, worker)
}

/// The one record of a run preempted once and resumed on its recovered pod.
fn assert_one_preemption(body: &Value, id: &str, pod: &str, job: &Value) -> Value {
    let records = body["recoveries"].as_array().unwrap();
    assert_eq!(records.len(), 1, "{body}");
    let r = records[0].clone();
    assert_whole(&r);
    assert_eq!(r["job_id"], id, "{r}");
    assert_eq!(r["attempt"], 1, "{r}");
    assert_eq!(r["cause"], "preempted", "{r}");
    assert_eq!(
        (r["pod"].as_str(), r["resumed_on"].as_str()),
        (Some(pod), Some(pod))
    );
    let attempts = job["attempts"].as_array().unwrap();
    assert_eq!(r["accelerator"], attempts[0]["accelerator"], "{r} {job}");
    // The pod's recovery (2 s here) is the wait's part spent remaking it.
    assert!(phase(&r, "creating_s") >= 1.5, "{r}");
    // The sim trainer reports its compile and its restore.
    assert!(phase(&r, "compile_s") > 0.0, "{r}");
    assert!(phase(&r, "restore_s") > 0.0, "{r}");
    assert!(phase(&r, "stopping_s") > 0.0, "{r}");
    // It resumed where the next attempt started, having lost what came after.
    let lost = r["lost_steps"].as_i64().unwrap();
    let end = attempts[0]["end_step"].as_i64().unwrap();
    let start = attempts[1]["start_step"].as_i64().unwrap();
    assert_eq!(lost, end - start, "{r} {job}");
    assert_eq!(
        seconds(&r["resumed_at"]),
        seconds(&attempts[1]["first_step_at"]),
        "{r} {job}"
    );
    let summary = body["summary"].as_array().unwrap();
    assert_eq!(summary.len(), 1, "{body}");
    assert_eq!(summary[0]["count"], 1);
    assert_eq!(summary[0]["cause"], "preempted");
    assert_eq!(summary[0]["p50_s"], r["total_s"]);
    assert_eq!(summary[0]["p95_s"], r["total_s"]);
    r
}

#[tokio::test]
async fn a_preempted_run_has_one_record_whose_phases_sum_to_its_whole_across_a_kill_9() {
    let mut server = Server::start().await;
    let (id, job, worker) = preempted_run(&server, "pod-r").await;
    drop(worker);
    let body = recoveries(&server, "").await;
    let record = assert_one_preemption(&body, &id, "pod-r", &job);
    assert_eq!(recoveries(&server, &format!("?job={id}")).await, body);
    assert_eq!(recoveries(&server, "?job=exp07a&limit=1").await, body);

    // The histogram: one recovery, whole and by phase.
    let metrics = server.metrics().await;
    for phase in [
        "total", "stopping", "waiting", "creating", "setup", "startup", "compile", "restore",
    ] {
        let line = format!("podq_recovery_seconds_count{{phase=\"{phase}\"}} 1");
        assert!(metrics.contains(&line), "{line} in\n{metrics}");
    }
    // The plain-text answer names it.
    let table = server.text("/recoveries").await;
    assert!(
        table.contains("preempted") && table.contains(&id),
        "{table}"
    );

    // Derived from what was acknowledged: the same after a kill -9.
    server.crash();
    server.restart();
    assert_eq!(recoveries(&server, "").await["recoveries"][0], record);
}

#[tokio::test]
async fn a_record_appears_only_once_the_resumed_attempt_trains_on_postgresql_too() {
    let server = Server::start_on(StoreKind::Postgres).await;
    let id = server.submit_one("exp07a", json!({})).await;
    let worker = server.worker(
        "pod-pg",
        2,
        &[
            "--trainer-env",
            "PODQ_SIM_RUN_SECS=20",
            // A slow recovery: time enough to look while the run waits.
            "--recovery-delay-s",
            "4",
        ],
    );
    let running = server.wait_state(&id, "running", RUN).await;
    let total = running["total_steps"].as_i64().unwrap_or(5000);
    server.committed_at_least(&id, total / 5, RUN).await;
    worker.control("preempt");
    // Until the next attempt's first step there is no record: read the records first, then
    // the job, so a record seen means the job had already resumed.
    let seen_waiting = std::cell::Cell::new(false);
    eventually(RUN, "the resumed attempt's record", || async {
        let body = recoveries(&server, "").await;
        let job = server.job(&id).await;
        let attempts = job["attempts"].as_array().cloned().unwrap_or_default();
        let resumed = attempts.len() >= 2 && !attempts[1]["first_step_at"].is_null();
        let records = body["recoveries"].as_array().unwrap().len();
        if attempts
            .first()
            .is_some_and(|a| a["outcome"] == "preempted")
            && !resumed
        {
            assert_eq!(records, 0, "no record before the run trains again: {body}");
            seen_waiting.set(true);
        }
        (records == 1).then_some(())
    })
    .await;
    assert!(seen_waiting.get(), "the wait was seen");
    let job = server.wait_state(&id, "succeeded", RUN).await;
    let body = recoveries(&server, "").await;
    assert_one_preemption(&body, &id, "pod-pg", &job);
    drop(worker);
}

#[tokio::test]
async fn a_suspended_run_resumed_by_hand_is_a_record_of_its_own_cause() {
    let server = Server::start().await;
    let id = server.submit_one("exp07a", json!({})).await;
    let worker = sim_worker(&server, "pod-s");
    let running = server.wait_state(&id, "running", RUN).await;
    let total = running["total_steps"].as_i64().unwrap_or(5000);
    server.committed_at_least(&id, total / 5, RUN).await;
    let (status, body) = server.post(&format!("/jobs/{id}/suspend"), json!({})).await;
    assert_eq!(status, 200, "{body}");
    server.wait_state(&id, "held", RUN).await;
    let (status, body) = server.post(&format!("/jobs/{id}/resume"), json!({})).await;
    assert_eq!(status, 200, "{body}");
    let job = server.wait_state(&id, "succeeded", RUN).await;
    let body = recoveries(&server, "").await;
    let r = &body["recoveries"][0];
    assert_whole(r);
    assert_eq!(r["cause"], "suspended", "{r}");
    // Nothing was remade: the pod stayed up, the wait was the person's.
    assert_eq!(phase(r, "creating_s"), 0.0, "{r}");
    assert_eq!(body["summary"][0]["cause"], "suspended", "{body}");
    assert_eq!(job["failures"], 0, "uncharged: {job}");
    drop(worker);
}

#[tokio::test]
async fn a_run_never_interrupted_has_no_record_and_bad_queries_are_refused() {
    let server = Server::start().await;
    let id = server.submit_one("exp07a", json!({})).await;
    let worker = sim_worker(&server, "pod-q");
    server.wait_state(&id, "succeeded", RUN).await;
    drop(worker);
    assert_eq!(
        recoveries(&server, "").await,
        json!({"recoveries": [], "summary": []})
    );
    for (query, status, code) in [
        ("?limit=0", 400, "invalid_limit"),
        ("?limit=1001", 400, "invalid_limit"),
        ("?limit=many", 400, "invalid_query"),
        ("?job=", 400, "invalid_query"),
        ("?pod=x", 400, "invalid_query"),
        ("?job=exp07z", 404, "not_found"),
    ] {
        let (got, body) = server.get(&format!("/recoveries{query}")).await;
        assert_eq!(
            (got, body["error"]["code"].as_str()),
            (status, Some(code)),
            "{query}: {body}"
        );
    }
    let (_, body) = server.get("/recoveries?job=exp07z").await;
    assert!(body.to_string().contains("exp07a"), "did you mean: {body}");
}

/// The step compiles in seconds and loads in a fraction of that: the resumed attempt's compile
/// (timed by the trainer, `podq_trainer.phase("compile")`) is at most a quarter of the first's.
#[tokio::test]
async fn a_real_jax_trainers_resumed_attempt_loads_its_compiled_step_from_the_cache() {
    let server = Server::start().await;
    let id = server.submit_one("exp01a", json!({})).await;
    let repo = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let command = format!(
        "exec '{}' '{}'",
        python(),
        repo.join("tests/python/compile_heavy_trainer.py").display()
    );
    let worker = server.worker(
        "pod-jax",
        1,
        &[
            "--trainer-command",
            &command,
            "--trainer-env",
            "JAX_PLATFORMS=cpu",
            "--trainer-env",
            &format!("PYTHONPATH={}", repo.join("trainer/src").display()),
            "--stop-grace-s",
            "10",
            "--hang-timeout-s",
            "120",
        ],
    );
    server.committed_at_least(&id, 20, RUN).await;
    worker.control("preempt");
    let job = server.wait_state(&id, "succeeded", RUN).await;
    drop(worker);
    let attempts = job["attempts"].as_array().unwrap();
    assert_eq!(attempts[0]["outcome"], "preempted", "{job}");
    let compile = |a: &Value| a["pod_time"]["compile_s"].as_f64().unwrap();
    let (first, resumed) = (compile(&attempts[0]), compile(&attempts[1]));
    assert!(first > 0.0, "{job}");
    eprintln!("compile: {first:.2} s, then {resumed:.2} s from the cache");
    assert!(
        resumed <= 0.25 * first,
        "compiled in {first:.2} s, then {resumed:.2} s from the cache: {job}"
    );
    // The cache is the bucket's, one directory per slice type.
    let accelerator = attempts[0]["accelerator"].as_str().unwrap();
    let cache = server
        .dir
        .path()
        .join("bucket/compile-cache")
        .join(accelerator);
    let entries = std::fs::read_dir(&cache).map(|d| d.count()).unwrap_or(0);
    assert!(entries > 0, "{} holds the compiled step", cache.display());
    let record = &recoveries(&server, "").await["recoveries"][0];
    assert_whole(record);
    assert_eq!(phase(record, "compile_s"), resumed, "{record}");
    assert!(phase(record, "restore_s") > 0.0, "{record}");
}

/// `--no-compile-cache`: nothing written to the bucket, and the trainer sees no cache.
#[tokio::test]
async fn a_worker_told_not_to_cache_gives_its_trainer_no_cache() {
    let server = Server::start().await;
    let id = server.submit_one("exp07a", json!({})).await;
    let worker = server.worker(
        "pod-n",
        1,
        &[
            "--trainer-command",
            "echo \"cache=[$JAX_COMPILATION_CACHE_DIR]\"; exit 1",
            "--no-compile-cache",
        ],
    );
    let seen = eventually(RUN, "the trainer's line", || async {
        let (_, logs) = server
            .get(&format!("/jobs/{id}/logs?grep=cache%3D&limit=5"))
            .await;
        logs["lines"][0]["text"].as_str().map(str::to_owned)
    })
    .await;
    assert_eq!(seen, "cache=[]");
    drop(worker);
    let worker = server.worker(
        "pod-c",
        1,
        &[
            "--trainer-command",
            "echo \"cache=[$JAX_COMPILATION_CACHE_DIR]\"; exit 1",
        ],
    );
    let bucket = server.dir.path().join("bucket");
    let seen = eventually(RUN, "the cached trainer's line", || async {
        let (_, logs) = server
            .get(&format!("/jobs/{id}/logs?grep=compile-cache&limit=5"))
            .await;
        logs["lines"][0]["text"].as_str().map(str::to_owned)
    })
    .await;
    assert!(
        seen.starts_with(&format!("cache=[{}/compile-cache/", bucket.display())),
        "{seen}"
    );
    drop(worker);
}

/// `spares: 1`: while its run trains, the pool keeps a second slice ready and idle (past its
/// `idle_after`); preempted, the run resumes on that spare at once, nothing made meanwhile;
/// once nothing runs, the idle slices go.
#[tokio::test]
async fn a_preempted_run_resumes_at_once_on_its_pools_warm_spare() {
    let server = Server::start().await;
    let yaml = format!(
        "{}    spares: 1\n",
        pool_yaml("warm", 3, "2s", &["zone-a", "zone-b"])
    );
    let pool = PoolProcess::start(&server, &yaml, 40);
    let id = server.submit_one("exp07a", json!({})).await;
    let running = server.wait_state(&id, "running", RUN).await;
    let first_pod = running["attempts"][0]["pod"].as_str().unwrap().to_owned();
    // The spare: another slice of the pool, up and asking for work, kept past idle_after.
    let spare = eventually(RUN, "a ready, idle spare", || async {
        let (_, page) = server.get("/pools").await;
        let slices = page["pools"][0]["slices"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        let (_, status) = server.get("/status").await;
        let pods = status["pods"].as_array().cloned().unwrap_or_default();
        slices
            .iter()
            .filter_map(|s| s["pod"].as_str())
            .filter(|pod| *pod != first_pod)
            .find(|pod| {
                pods.iter().any(|p| {
                    p["name"] == *pod && p["state"] == "READY" && p["current_job"].is_null()
                })
            })
            .map(str::to_owned)
    })
    .await;
    // The plan runs nothing on the spare: one pod of the type for runs, one spare.
    let (_, plan) = server.get("/plan").await;
    let v4 = plan["pools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["accelerator"] == "v4-64")
        .cloned()
        .unwrap();
    assert_eq!(
        (v4["spares"].as_u64(), v4["pods"].as_u64()),
        (Some(1), Some(1)),
        "{v4}"
    );
    let total = running["total_steps"].as_i64().unwrap_or(5000);
    server.committed_at_least(&id, total / 5, RUN).await;
    std::fs::write(pool.pod_control(&first_pod).join("preempt"), b"").unwrap();
    let job = server.wait_state(&id, "succeeded", RUN).await;
    let attempts = job["attempts"].as_array().unwrap();
    assert_eq!(attempts[0]["outcome"], "preempted", "{job}");
    assert_eq!(
        attempts[1]["pod"],
        spare.as_str(),
        "resumed on the spare: {job}"
    );
    let body = recoveries(&server, "").await;
    let r = &body["recoveries"][0];
    assert_whole(r);
    assert_eq!(r["resumed_on"], spare.as_str(), "{r}");
    assert_eq!(
        phase(r, "creating_s"),
        0.0,
        "the spare was made before: {r}"
    );
    assert!(r["zone"].is_string(), "a pool's slice has its zone: {r}");
    eprintln!("recovery on a warm spare: {r}");
    // Nothing runs now: no spare is kept, and idle slices go.
    eventually(RUN, "the idle slices given back", || async {
        let (_, page) = server.get("/pools").await;
        let slices = page["pools"][0]["slices"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        slices.is_empty().then_some(())
    })
    .await;
    drop(pool);
}
