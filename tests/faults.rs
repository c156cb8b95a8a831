//! Fault injection on the simulated pod: preemptions, dead and hung hosts, stale lock files,
//! trainers that crash or never progress, and a worker killed mid-run.

mod common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use common::{alive, eventually, Server};
use serde_json::{json, Value};

const RUN: Duration = Duration::from_secs(120);

fn checkpoint_dir(job: &Value) -> PathBuf {
    let uri = job["checkpoint_dir"].as_str().unwrap();
    // A plain path, as Orbax takes it (it fails on `file://`).
    assert!(uri.starts_with('/'), "{uri}");
    PathBuf::from(uri)
}

fn assert_complete_series(steps: &[i64]) {
    let gaps: Vec<&[i64]> = steps.windows(2).filter(|w| w[1] - w[0] != 10).collect();
    assert!(gaps.is_empty(), "gaps in the metric series: {gaps:?}");
    assert_eq!((steps.first(), steps.last()), (Some(&10), Some(&8130)));
}

fn attempts(job: &Value) -> Vec<Value> {
    job["attempts"].as_array().cloned().unwrap_or_default()
}

#[tokio::test]
async fn a_preempted_run_resumes_from_its_last_committed_checkpoint() {
    let server = Server::start().await;
    let id = server.submit_one("exp01a", json!({})).await;
    let worker = server.worker("pod-p", 2, &["--trainer-env", "PODQ_SIM_RUN_SECS=15"]);
    let kept = server.committed_at_least(&id, 2000, RUN).await;
    worker.control("preempt");
    let job = server.wait_state(&id, "succeeded", RUN).await;
    let attempts = attempts(&job);
    assert_eq!(attempts.len(), 2, "{job}");
    assert_eq!(attempts[0]["outcome"], "preempted", "{job}");
    let resumed = attempts[1]["start_step"].as_i64().unwrap();
    assert!(
        resumed >= kept,
        "resumed at {resumed}, a checkpoint at {kept} was committed"
    );
    assert_eq!(job["preemptions"], 1);
    assert_eq!(job["failures"], 0, "a preemption spends no failure budget");
    assert_eq!(job["last_step"], 8138);
    assert_complete_series(&server.metric_steps(&id, "train/lm_loss").await);
    let (_, events) = server.get(&format!("/jobs/{id}/events")).await;
    let text = events.to_string();
    assert!(
        text.contains("PREEMPTED"),
        "the evidence is recorded: {text}"
    );
}

#[tokio::test]
async fn a_checkpoint_cut_by_preemption_is_never_resumed() {
    let server = Server::start().await;
    let id = server.submit_one("exp01b", json!({})).await;
    let worker = server.worker("pod-w", 2, &["--trainer-env", "PODQ_SIM_RUN_SECS=40"]);
    let job = server.wait_state(&id, "running", RUN).await;
    let dir = checkpoint_dir(&job);
    server.committed_at_least(&id, 1, RUN).await;
    // Preempt while the next checkpoint is still a temporary directory.
    let partial = eventually(RUN, "a checkpoint being written", || async {
        let partial = std::fs::read_dir(&dir)
            .ok()?
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .find(|name| name.contains(".orbax-checkpoint-tmp"));
        if partial.is_some() {
            worker.control("preempt");
            for pid in worker.trainer_pids() {
                let _ = nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(pid),
                    nix::sys::signal::Signal::SIGKILL,
                );
            }
        }
        partial
    })
    .await;
    let cut_step: i64 = partial.split('.').next().unwrap().parse().unwrap();
    let job = server.wait_state(&id, "succeeded", RUN).await;
    let attempts = attempts(&job);
    assert_eq!(attempts[0]["outcome"], "preempted", "{job}");
    let resumed = attempts[1]["start_step"].as_i64().unwrap();
    assert!(
        resumed < cut_step,
        "resumed at {resumed}, but {cut_step} was never committed"
    );
    assert!(resumed > 0, "the previous committed checkpoint was used");
    assert!(Path::new(&dir).join(resumed.to_string()).is_dir());
}

#[tokio::test]
async fn a_dead_host_stops_every_host_and_the_job_is_retried() {
    let server = Server::start().await;
    let id = server.submit_one("exp01d", json!({})).await;
    let worker = server.worker("pod-k", 4, &["--trainer-env", "PODQ_SIM_RUN_SECS=20"]);
    server.wait_state(&id, "running", RUN).await;
    server.committed_at_least(&id, 1, RUN).await;
    let pids = worker.trainer_pids();
    assert!(pids.len() >= 4, "{pids:?}");
    worker.control("kill-host-1");
    let job = eventually(RUN, "attempt 1 to end", || async {
        let job = server.job(&id).await;
        attempts(&job)
            .first()
            .filter(|a| !a["outcome"].is_null())
            .map(|_| job)
    })
    .await;
    for pid in &pids {
        assert!(
            !alive(*pid),
            "trainer {pid} outlived the dead host's attempt"
        );
    }
    let first = &attempts(&job)[0];
    assert_eq!(first["outcome"], "failed", "{first}");
    assert!(
        first["message"]
            .as_str()
            .unwrap()
            .contains("host 1 was killed by SIGKILL"),
        "{first}"
    );
    let job = server.wait_state(&id, "succeeded", RUN).await;
    assert_eq!(job["failures"], 1);
    assert_eq!(attempts(&job).len(), 2);
}

#[tokio::test]
async fn a_hung_host_is_detected_and_every_host_stopped() {
    let server = Server::start().await;
    let id = server.submit_one("exp01e", json!({})).await;
    let worker = server.worker(
        "pod-h",
        2,
        &[
            "--trainer-env",
            "PODQ_SIM_RUN_SECS=20",
            "--hang-timeout-s",
            "2",
        ],
    );
    server.wait_state(&id, "running", RUN).await;
    server.committed_at_least(&id, 1, RUN).await;
    let pids = worker.trainer_pids();
    worker.control("hang-host-1");
    let job = eventually(RUN, "the hang to be declared", || async {
        let job = server.job(&id).await;
        attempts(&job)
            .first()
            .filter(|a| !a["outcome"].is_null())
            .map(|_| job)
    })
    .await;
    assert_eq!(attempts(&job)[0]["outcome"], "hung", "{job}");
    for pid in &pids {
        assert!(!alive(*pid), "trainer {pid} survived the hang");
    }
    server.wait_state(&id, "succeeded", RUN).await;
}

#[tokio::test]
async fn a_stale_lock_file_is_cleaned_before_launch() {
    let server = Server::start().await;
    let id = server.submit_one("exp02a_01", json!({})).await;
    let lock = server
        .dir
        .path()
        .join("pod-pod-l/hosts/host-1/tmp/libtpu_lockfile");
    std::fs::create_dir_all(lock.parent().unwrap()).unwrap();
    std::fs::write(&lock, "4242").unwrap();
    let _worker = server.worker("pod-l", 2, &["--trainer-env", "PODQ_SIM_RUN_SECS=3"]);
    let job = server.wait_state(&id, "succeeded", RUN).await;
    assert_eq!(attempts(&job).len(), 1, "the first launch succeeds: {job}");
    let (_, events) = server.get(&format!("/jobs/{id}/events")).await;
    assert!(
        events
            .to_string()
            .contains("host 1: removed stale tmp/libtpu_lockfile"),
        "{events}"
    );
}

#[tokio::test]
async fn a_trainer_that_always_crashes_fails_after_its_budget_with_backoff() {
    let server = Server::start().await;
    let id = server
        .submit_one("exp02a_02", json!({"max_failures": 3}))
        .await;
    let _worker = server.worker("pod-x", 2, &["--trainer-env", "PODQ_SIM_FAULT=crash"]);
    let job = server.wait_state(&id, "failed", RUN).await;
    let attempts = attempts(&job);
    assert_eq!(attempts.len(), 3, "{job}");
    assert!(attempts.iter().all(|a| a["outcome"] == "failed"));
    assert!(
        job["message"].as_str().unwrap().contains("failure budget"),
        "{job}"
    );
    // Backoff (base 1 s, doubling, jitter in [0.5, 1]): at least 0.5 s then 1 s between tries.
    let time = |a: &Value, key: &str| {
        chrono::DateTime::parse_from_rfc3339(a[key].as_str().unwrap()).unwrap()
    };
    let waits: Vec<i64> = attempts
        .windows(2)
        .map(|w| (time(&w[1], "started_at") - time(&w[0], "ended_at")).num_milliseconds())
        .collect();
    assert!(
        waits[0] >= 500 && waits[1] >= 1000,
        "backoff not observed: {waits:?} ms"
    );
}

#[tokio::test]
async fn a_trainer_that_never_progresses_is_held_after_three_attempts() {
    let server = Server::start().await;
    let id = server
        .submit_one("exp02a_04", json!({"max_failures": 10}))
        .await;
    let _worker = server.worker(
        "pod-n",
        2,
        &[
            "--trainer-env",
            "PODQ_SIM_FAULT=no-progress",
            "--hang-timeout-s",
            "1.5",
        ],
    );
    let job = server.wait_state(&id, "held", RUN).await;
    assert_eq!(attempts(&job).len(), 3, "{job}");
    assert!(
        job["message"]
            .as_str()
            .unwrap()
            .contains("no step progress"),
        "{job}"
    );
    let (status, requeued) = server.post(&format!("/jobs/{id}/requeue"), json!({})).await;
    assert_eq!(status, 200, "a person can release it: {requeued}");
}

#[tokio::test]
async fn a_killed_worker_loses_its_lease_and_another_resumes_the_run() {
    let server = Server::start().await;
    let id = server.submit_one("exp02a_05", json!({})).await;
    let mut first = server.worker("pod-z", 2, &["--trainer-env", "PODQ_SIM_RUN_SECS=20"]);
    server.wait_state(&id, "running", RUN).await;
    let kept = server.committed_at_least(&id, 1, RUN).await;
    let old_lease = server.job(&id).await["attempts"][0]["lease_id"]
        .as_str()
        .unwrap()
        .to_owned();
    first.process.kill();
    let job = eventually(Duration::from_secs(30), "the lease to expire", || async {
        let job = server.job(&id).await;
        (job["attempts"][0]["outcome"] == "lost").then_some(job)
    })
    .await;
    assert_eq!(job["state"], "queued", "lost is requeued like a preemption");
    assert_eq!(job["failures"], 0);
    // The dead worker's late calls are fenced off.
    let (status, answer) = server
        .post(
            &format!("/leases/{old_lease}/heartbeat"),
            json!({"phase": "running", "step": 1}),
        )
        .await;
    assert_eq!(status, 409, "{answer}");
    assert_eq!(answer["error"]["code"], "lease_lost");
    let (status, _) = server
        .post(
            &format!("/leases/{old_lease}/finish"),
            json!({"outcome": "succeeded"}),
        )
        .await;
    assert_eq!(status, 409);
    // A new worker on the same pod cleans up the orphans and resumes.
    let _second = server.worker("pod-z", 2, &["--trainer-env", "PODQ_SIM_RUN_SECS=20"]);
    let job = server.wait_state(&id, "succeeded", RUN).await;
    let attempts = attempts(&job);
    assert_eq!(attempts.len(), 2, "{job}");
    assert!(attempts[1]["start_step"].as_i64().unwrap() >= kept, "{job}");
}

#[tokio::test]
async fn five_preemptions_keep_every_metric_and_count_no_step_twice() {
    let server = Server::start().await;
    let id = server.submit_one("exp02a_06", json!({})).await;
    let worker = server.worker("pod-5", 2, &["--trainer-env", "PODQ_SIM_RUN_SECS=15"]);
    let mut next = 1;
    for round in 1..=5 {
        eventually(RUN, &format!("attempt {round} to be running"), || async {
            let job = server.job(&id).await;
            (job["state"] == "running" && attempts(&job).len() == round).then_some(())
        })
        .await;
        let kept = server.committed_at_least(&id, next, RUN).await;
        worker.control("preempt");
        eventually(
            RUN,
            &format!("preemption {round} to be recorded"),
            || async {
                let job = server.job(&id).await;
                (job["preemptions"] == round as i64).then_some(())
            },
        )
        .await;
        next = kept + 1;
    }
    let job = server.wait_state(&id, "succeeded", RUN).await;
    assert_eq!(job["preemptions"], 5);
    assert_eq!(attempts(&job).len(), 6);
    assert_complete_series(&server.metric_steps(&id, "train/lm_loss").await);
    let goodput = &job["goodput"];
    assert_eq!(
        goodput["kept_steps"], 8138,
        "each step kept once: {goodput}"
    );
    assert!(goodput["lost_s"].as_f64().unwrap() >= 0.0);
    assert!(goodput["overhead_s"].as_f64().unwrap() > 0.0, "{goodput}");
    let (_, status) = server.get("/status").await;
    assert_eq!(status["goodput"]["kept_steps"], 8138);
}
