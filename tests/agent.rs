//! The host agent on the simulated pod: real server, worker, agent and trainer processes.

mod common;

use std::path::Path;
use std::time::Duration;

use common::{alive, eventually, Server};
use serde_json::{json, Value};

const RUN: Duration = Duration::from_secs(120);

/// The trainer process group each host's agent started (its tag file).
fn trainer_pgids(worker: &common::Worker, hosts: u32) -> Vec<Option<i32>> {
    (0..hosts)
        .map(|host| {
            std::fs::read_to_string(worker.host_dir(host).join("tmp/podq-trainer.pgid"))
                .ok()
                .and_then(|t| t.trim().parse().ok())
        })
        .collect()
}

fn running_file(worker: &common::Worker, pod: &str) -> Value {
    let path = worker
        .root
        .join("worker-state")
        .join(format!("{pod}.running.json"));
    serde_json::from_str(&std::fs::read_to_string(path).unwrap_or_default()).unwrap_or(Value::Null)
}

/// Every step from the first to the last, ten apart, once each.
fn assert_no_gap(steps: &[i64]) {
    assert!(!steps.is_empty());
    let expected: Vec<i64> = (1..=steps.len() as i64).map(|i| i * 10).collect();
    assert_eq!(steps, expected.as_slice(), "a gap or a duplicate");
}

#[tokio::test]
async fn a_restarted_worker_reattaches_to_the_running_trainers() {
    let server = Server::start().await;
    let id = server.submit_one("exp01a", json!({})).await;
    let args = ["--trainer-env", "PODQ_SIM_RUN_SECS=20"];
    let mut worker = server.worker("pod-r", 2, &args);
    server.committed_at_least(&id, 1000, RUN).await;
    let before = trainer_pgids(&worker, 2);
    assert!(before.iter().all(Option::is_some), "{before:?}");

    // The worker dies without a word; its agents and trainers do not notice.
    worker.process.kill();
    let _ = worker.process.child.wait();
    for pgid in before.iter().flatten() {
        assert!(alive(*pgid), "trainer {pgid} died with the worker");
    }
    assert!(running_file(&worker, "pod-r")["attempt"]["lease"]["lease_id"].is_string());

    let restarted = server.worker("pod-r", 2, &args);
    let job = server.wait_state(&id, "succeeded", RUN).await;
    let attempts = job["attempts"].as_array().unwrap();
    assert_eq!(
        attempts.len(),
        1,
        "the restarted worker made no new attempt: {job}"
    );
    assert_eq!(attempts[0]["outcome"], "succeeded", "{job}");
    assert_eq!(job["failures"], 0);
    assert_eq!(
        trainer_pgids(&restarted, 2),
        before,
        "the same trainer ran on every host from start to end"
    );
    assert!(restarted.log_text().contains("reattaching"));
    assert_no_gap(&server.metric_steps(&id, "train/lm_loss").await);
    assert!(running_file(&restarted, "pod-r")["attempt"].is_null());
    drop(worker);
}

#[tokio::test]
async fn an_agent_started_twice_for_a_lease_runs_one_trainer_and_refuses_bad_calls() {
    let server = Server::start().await;
    let id = server.submit_one("exp01a", json!({})).await;
    let worker = server.worker("pod-i", 1, &["--trainer-env", "PODQ_SIM_RUN_SECS=15"]);
    server.committed_at_least(&id, 800, RUN).await;
    let running = running_file(&worker, "pod-i");
    let lease = running["attempt"]["lease"]["lease_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let secret = running["attempt"]["secret"].as_str().unwrap().to_owned();
    let agent_url = format!("http://{}", running["agent_listen"].as_str().unwrap());
    let pgid = trainer_pgids(&worker, 1)[0].unwrap();

    // What a retried ssh call would do: start the lease's agent again.
    let host = worker.host_dir(0);
    let second = std::process::Command::new(env!("CARGO_BIN_EXE_podq"))
        .args(["agent", "--worker-url", &agent_url, "--lease", &lease])
        .args(["--host", "0", "--dir"])
        .arg(host.join("podq-agent"))
        .arg("--secret-file")
        .arg(host.join(format!("tmp/podq-agent-{lease}.secret")))
        .args(["--command", "echo second trainer; sleep 60"])
        .output()
        .unwrap();
    assert!(second.status.success());
    assert!(
        String::from_utf8_lossy(&second.stdout).contains("already has an agent"),
        "{second:?}"
    );
    assert_eq!(trainer_pgids(&worker, 1)[0], Some(pgid));

    // Calls the agents' endpoint refuses, each with a JSON error, changing nothing.
    let client = reqwest::Client::new();
    let sync = format!("{agent_url}/agent/v1/sync");
    let body = json!({"protocol": 1, "lease": lease, "host": 0, "offset": 0, "end": 6,
                      "data": "PODQ x\n", "exit": {"code": 0, "signal": null}});
    for (bearer, body, want) in [
        ("wrong", body.clone(), 401),
        (secret.as_str(), json!({"lease": lease}), 400),
        (
            secret.as_str(),
            json!({"protocol": 1, "lease": "nope", "host": 0, "offset": 0, "end": 0}),
            404,
        ),
        (
            secret.as_str(),
            json!({"protocol": 1, "lease": lease, "host": 7, "offset": 0, "end": 0}),
            400,
        ),
    ] {
        let answer = client
            .post(&sync)
            .bearer_auth(bearer)
            .json(&body)
            .send()
            .await
            .unwrap();
        assert_eq!(answer.status().as_u16(), want, "{body}");
        let error: Value = answer.json().await.unwrap();
        assert!(error["error"]["code"].is_string(), "{error}");
    }
    let job = server.wait_state(&id, "succeeded", RUN).await;
    assert_eq!(job["attempts"].as_array().unwrap().len(), 1, "{job}");
    assert_eq!(job["attempts"][0]["exit_codes"], json!([0]));
    let log = std::fs::read_to_string(
        Path::new(&host)
            .join("podq-agent")
            .join(&lease)
            .join("trainer.log"),
    )
    .unwrap();
    assert!(!log.contains("second trainer"));
    eventually(
        Duration::from_secs(10),
        "the agent quits once done",
        || async {
            let pid: i32 =
                std::fs::read_to_string(host.join("podq-agent").join(&lease).join("agent.pid"))
                    .ok()?
                    .trim()
                    .parse()
                    .ok()?;
            (!alive(pid)).then_some(())
        },
    )
    .await;
}

#[tokio::test]
async fn lines_printed_while_the_worker_is_away_arrive_once_when_it_is_back() {
    use nix::sys::signal::{kill, Signal};
    use nix::unistd::Pid;
    let server = Server::start().await;
    let id = server.submit_one("exp01a", json!({})).await;
    let worker = server.worker("pod-n", 2, &["--trainer-env", "PODQ_SIM_RUN_SECS=20"]);
    let before = server.committed_at_least(&id, 800, RUN).await;
    // Frozen, the worker answers no agent: for them the network is gone. The trainers
    // go on printing into their hosts' log files.
    let pid = Pid::from_raw(worker.process.pid());
    kill(pid, Signal::SIGSTOP).unwrap();
    let pgids = trainer_pgids(&worker, 2);
    let log = worker
        .host_dir(0)
        .join("podq-agent")
        .join(
            running_file(&worker, "pod-n")["attempt"]["lease"]["lease_id"]
                .as_str()
                .unwrap(),
        )
        .join("trainer.log");
    let printed = std::fs::metadata(&log).unwrap().len();
    eventually(
        Duration::from_secs(30),
        "the trainer printing on",
        || async { (std::fs::metadata(&log).ok()?.len() > printed + 2000).then_some(()) },
    )
    .await;
    kill(pid, Signal::SIGCONT).unwrap();

    let job = server.wait_state(&id, "succeeded", RUN).await;
    assert_eq!(job["attempts"].as_array().unwrap().len(), 1, "{job}");
    assert_eq!(job["failures"], 0);
    assert!(before < 8138);
    assert_eq!(
        trainer_pgids(&worker, 2),
        pgids,
        "one trainer per host throughout"
    );
    assert_no_gap(&server.metric_steps(&id, "train/lm_loss").await);
}

#[tokio::test]
async fn a_restarted_worker_whose_agents_are_gone_gives_the_attempt_up_as_lost() {
    use nix::sys::signal::{kill, killpg, Signal};
    use nix::unistd::Pid;
    let server = Server::start().await;
    let id = server.submit_one("exp01a", json!({})).await;
    let args = ["--trainer-env", "PODQ_SIM_RUN_SECS=20"];
    let mut worker = server.worker("pod-g", 2, &args);
    server.committed_at_least(&id, 800, RUN).await;
    // The worker dies, and the hosts with their agents and trainers, as if rebooted.
    worker.process.kill();
    let _ = worker.process.child.wait();
    for host in 0..2 {
        let dir = worker.host_dir(host);
        if let Some(pid) = std::fs::read_to_string(dir.join("tmp/podq-agent.pid"))
            .ok()
            .and_then(|t| t.trim().parse::<i32>().ok())
        {
            let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
        }
    }
    for pgid in trainer_pgids(&worker, 2).into_iter().flatten() {
        let _ = killpg(Pid::from_raw(pgid), Signal::SIGKILL);
    }
    let _restarted = server.worker("pod-g", 2, &args);
    // No agent calls the reattached worker: the attempt ends as lost (no failure charged)
    // and the job runs again from its last checkpoint.
    let job = server.wait_state(&id, "succeeded", RUN).await;
    let attempts = job["attempts"].as_array().unwrap();
    assert_eq!(attempts.len(), 2, "{job}");
    assert_eq!(attempts[0]["outcome"], "lost", "{job}");
    assert!(
        attempts[0]["message"]
            .as_str()
            .unwrap()
            .contains("no agent called"),
        "{job}"
    );
    assert_eq!(job["failures"], 0);
    drop(worker);
}
