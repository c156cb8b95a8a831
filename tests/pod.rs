//! Leases and the worker on the simulated pod: real server, worker and trainer processes.

mod common;

use std::collections::HashSet;
use std::time::Duration;

use common::{alive, eventually, Server};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use serde_json::{json, Value};

const RUN: Duration = Duration::from_secs(90);

#[tokio::test]
async fn a_group_runs_to_success_with_metrics_and_checkpoints() {
    let server = Server::start().await;
    let (status, answer) = server
        .post("/jobs", json!({"group": "exp07-precision"}))
        .await;
    assert_eq!(status, 201, "{answer}");
    let worker = server.worker("pod-a", 4, &["--trainer-env", "PODQ_SIM_RUN_SECS=3"]);
    for experiment in ["exp07b", "exp07a", "exp07c"] {
        let id = server.job_of(experiment).await["id"]
            .as_str()
            .unwrap()
            .to_owned();
        let job = server.wait_state(&id, "succeeded", RUN).await;
        assert_eq!(job["last_step"], 8138, "{job}");
        let attempts = job["attempts"].as_array().unwrap();
        assert_eq!(attempts.len(), 1, "{job}");
        assert_eq!(attempts[0]["outcome"], "succeeded");
        assert_eq!(attempts[0]["exit_codes"], json!([0, 0, 0, 0]));
        let committed: Vec<i64> = job["checkpoints"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|c| c["committed"] == true)
            .map(|c| c["step"].as_i64().unwrap())
            .collect();
        assert_eq!(
            committed.len(),
            10,
            "one checkpoint per eval: {committed:?}"
        );
        assert_eq!(*committed.last().unwrap(), 8138);
        assert!(job["resume_from"].as_str().unwrap().ends_with("/8138"));
        let loss = server.metric_steps(&id, "train/lm_loss").await;
        assert_eq!(loss.len(), 813, "a point every 10 steps");
        assert!(
            job["latest_metrics"]["train/exact_accuracy"]["value"]
                .as_f64()
                .unwrap()
                > 0.8,
            "{job}"
        );
        // The config every host trained is the one the catalog resolved.
        for host in 0..4 {
            let staged = std::fs::read_to_string(
                worker
                    .host_dir(host)
                    .join(format!("podq/configs/{experiment}.yaml")),
            )
            .unwrap();
            assert!(
                staged.contains("checkpoint_path: /"),
                "a plain path: {staged}"
            );
        }
    }
    let (_, pods) = server.get("/pods").await;
    assert_eq!(pods[0]["name"], "pod-a");
    assert_eq!(pods[0]["hosts"], 4);
}

#[tokio::test]
async fn cancel_stops_every_host_process() {
    let server = Server::start().await;
    server
        .post("/jobs", json!({"experiments": ["exp01a"]}))
        .await;
    let id = server.job_of("exp01a").await["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let worker = server.worker("pod-c", 4, &["--trainer-env", "PODQ_SIM_RUN_SECS=120"]);
    server.wait_state(&id, "running", RUN).await;
    let pids = eventually(RUN, "four trainer processes", || async {
        let pids = worker.trainer_pids();
        (pids.len() >= 4).then_some(pids)
    })
    .await;
    let (status, cancelled) = server.post(&format!("/jobs/{id}/cancel"), json!({})).await;
    assert_eq!(status, 200, "{cancelled}");
    let job = eventually(RUN, "the attempt to finish as cancelled", || async {
        let job = server.job(&id).await;
        (job["attempts"][0]["outcome"] == "cancelled").then_some(job)
    })
    .await;
    assert_eq!(job["state"], "cancelled");
    for pid in pids {
        assert!(!alive(pid), "trainer pid {pid} survived the cancel");
    }
    assert!(
        worker.trainer_pids().is_empty(),
        "no trainer process of the pod is left"
    );
}

#[tokio::test]
async fn a_reaped_worker_gets_409_and_stops_its_processes() {
    let server = Server::start().await;
    server
        .post("/jobs", json!({"experiments": ["exp01b"]}))
        .await;
    let id = server.job_of("exp01b").await["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let worker = server.worker("pod-r", 2, &["--trainer-env", "PODQ_SIM_RUN_SECS=120"]);
    server.wait_state(&id, "running", RUN).await;
    let first_pids = eventually(RUN, "trainer processes", || async {
        let pids = worker.trainer_pids();
        (pids.len() >= 2).then_some(pids)
    })
    .await;
    // Freeze the worker past the lease TTL (5 s): its heartbeats stop, the reaper ends the
    // lease as lost.
    let worker_pid = Pid::from_raw(worker.process.pid());
    kill(worker_pid, Signal::SIGSTOP).unwrap();
    let job = eventually(
        Duration::from_secs(30),
        "the lease to be reaped",
        || async {
            let job = server.job(&id).await;
            (job["attempts"][0]["outcome"] == "lost").then_some(job)
        },
    )
    .await;
    assert_eq!(
        job["preemptions"], 1,
        "lost counts like a preemption: {job}"
    );
    kill(worker_pid, Signal::SIGCONT).unwrap();
    eventually(RUN, "the old attempt's processes to stop", || async {
        first_pids.iter().all(|pid| !alive(*pid)).then_some(())
    })
    .await;
    eventually(RUN, "the worker to log the lost lease", || async {
        worker.log_text().contains("lease").then_some(())
    })
    .await;
    assert!(
        worker.log_text().contains("is not the job's live lease"),
        "{}",
        worker.log_text()
    );
}

#[tokio::test]
async fn the_run_survives_a_server_crash_without_losing_points() {
    let mut server = Server::start().await;
    server
        .post("/jobs", json!({"experiments": ["exp08a"]}))
        .await;
    let id = server.job_of("exp08a").await["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let _worker = server.worker("pod-k", 2, &["--trainer-env", "PODQ_SIM_RUN_SECS=12"]);
    server.wait_state(&id, "running", RUN).await;
    eventually(RUN, "some metrics stored", || async {
        (server.metric_steps(&id, "train/lm_loss").await.len() > 50).then_some(())
    })
    .await;
    server.crash();
    tokio::time::sleep(Duration::from_secs(2)).await; // the outage itself
    server.restart();
    let job = server.wait_state(&id, "succeeded", RUN).await;
    assert_eq!(
        job["attempts"].as_array().unwrap().len(),
        1,
        "no second attempt: {job}"
    );
    let steps = server.metric_steps(&id, "train/lm_loss").await;
    let gaps: Vec<(i64, i64)> = steps
        .windows(2)
        .filter(|w| w[1] - w[0] != 10)
        .map(|w| (w[0], w[1]))
        .collect();
    assert!(gaps.is_empty(), "the metric series has gaps: {gaps:?}");
    assert_eq!(steps.first(), Some(&10));
    assert_eq!(steps.last(), Some(&8130));
}

#[tokio::test]
async fn concurrent_lease_requests_never_share_a_job() {
    let server = Server::start().await;
    server.post("/jobs", json!({"all": true})).await;
    let mut tasks = Vec::new();
    for pod in 0..60 {
        let client = server.client.clone();
        let url = server.api(&format!("/pods/bench-{pod}/lease"));
        tasks.push(tokio::spawn(async move {
            let response = client
                .post(&url)
                .json(&json!({"accelerator": "v4-64", "hosts": 8, "state": "READY", "health": "HEALTHY", "wait_s": 1}))
                .send()
                .await
                .unwrap();
            match response.status().as_u16() {
                200 => Some(response.json::<Value>().await.unwrap()["job_id"].as_str().unwrap().to_owned()),
                204 => None,
                other => panic!("unexpected status {other}"),
            }
        }));
    }
    let mut leased = Vec::new();
    for task in tasks {
        leased.extend(task.await.unwrap());
    }
    let distinct: HashSet<&String> = leased.iter().collect();
    assert_eq!(distinct.len(), leased.len(), "a job was leased twice");
    assert_eq!(
        leased.len(),
        54,
        "60 pods asked at once: every runnable job leased once, 6 pods got nothing"
    );
}

/// Overlapping lease calls for one pod each end that pod's old leases when they start;
/// only one of them may then claim a job.
#[tokio::test]
async fn a_pod_holds_at_most_one_live_lease_whatever_calls_overlap() {
    let server = Server::start().await;
    server.post("/jobs", json!({"all": true})).await;
    let url = server.api("/pods/same/lease");
    let calls = (0..4).map(|_| {
        let client = server.client.clone();
        let url = url.clone();
        tokio::spawn(async move {
            client
                .post(&url)
                .json(&json!({"accelerator": "v4-64", "hosts": 8, "state": "READY", "health": "HEALTHY", "wait_s": 0}))
                .send()
                .await
                .unwrap()
                .status()
                .as_u16()
        })
    });
    let statuses: Vec<u16> = futures::future::join_all(calls)
        .await
        .into_iter()
        .map(Result::unwrap)
        .collect();
    assert!(
        statuses.iter().all(|s| *s == 200 || *s == 204),
        "{statuses:?}"
    );
    let leased: Vec<Value> = server
        .jobs()
        .await
        .into_iter()
        // Linked jobs (`same_as`) only mirror the state of the job they share a run with.
        .filter(|j| j["same_as"].is_null())
        .filter(|j| j["state"] == "leased" || j["state"] == "running")
        .collect();
    assert_eq!(
        leased.len(),
        1,
        "pod `same` holds {} live leases",
        leased.len()
    );
}

#[tokio::test]
async fn two_workers_never_run_the_same_job() {
    let server = Server::start().await;
    server
        .post("/jobs", json!({"group": "exp02b-h-cycles"}))
        .await;
    let _a = server.worker("pod-1", 2, &["--trainer-env", "PODQ_SIM_RUN_SECS=2"]);
    let _b = server.worker("pod-2", 2, &["--trainer-env", "PODQ_SIM_RUN_SECS=2"]);
    eventually(Duration::from_secs(120), "the group to finish", || async {
        let jobs = server.jobs().await;
        jobs.iter().all(|j| j["state"] == "succeeded").then_some(())
    })
    .await;
    let mut pods = HashSet::new();
    for job in server.jobs().await {
        let detail = server.job(job["id"].as_str().unwrap()).await;
        assert_eq!(detail["attempts"].as_array().unwrap().len(), 1, "{detail}");
        pods.insert(detail["attempts"][0]["pod"].as_str().unwrap().to_owned());
    }
    assert_eq!(pods.len(), 2, "both pods took work: {pods:?}");
}
