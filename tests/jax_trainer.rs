//! The real JAX + Orbax example trainer (`examples/jax-trainer`) under a real worker on
//! the simulated pod: real `jax.distributed` across host processes, real Orbax
//! checkpoints, real Hydra. The project venv (`scripts/venv`, which the test command runs)
//! provides them; `PODQ_TEST_PYTHON` names its interpreter.

mod common;

use std::path::PathBuf;
use std::time::Duration;

use common::{eventually, python, Server};
use serde_json::{json, Value};

const RUN: Duration = Duration::from_secs(240);

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn trainer_command() -> String {
    format!(
        "exec '{}' '{}' --config-path {{config_dir}} --config-name {{experiment}} \
         checkpoint_path={{checkpoint_dir}} load_checkpoint={{resume_from}}",
        python(),
        repo().join("examples/jax-trainer/pretrain.py").display()
    )
}

fn jax_worker(
    server: &Server,
    pod: &str,
    hosts: u32,
    sleep_s: &str,
    checkpoint_every: u32,
) -> common::Worker {
    let command = trainer_command();
    server.worker(
        pod,
        hosts,
        &[
            "--trainer-command",
            &command,
            "--trainer-env",
            "PODQ_EXAMPLE_TOTAL_STEPS=300",
            "--trainer-env",
            &format!("PODQ_EXAMPLE_CHECKPOINT_EVERY={checkpoint_every}"),
            "--trainer-env",
            &format!("PODQ_EXAMPLE_STEP_SLEEP_S={sleep_s}"),
            "--trainer-env",
            "JAX_PLATFORMS=cpu",
            // The working tree's SDK, and a fake `wandb` that needs no account.
            "--trainer-env",
            &format!(
                "PYTHONPATH={}:{}",
                repo().join("tests/python/fake_wandb").display(),
                repo().join("trainer/src").display()
            ),
            "--stop-grace-s",
            "30",
            "--hang-timeout-s",
            "120",
        ],
    )
}

fn committed_steps(job: &Value) -> Vec<i64> {
    job["checkpoints"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["committed"] == true)
        .filter_map(|c| c["step"].as_i64())
        .collect()
}

fn attempts(job: &Value) -> Vec<Value> {
    job["attempts"].as_array().cloned().unwrap_or_default()
}

#[tokio::test]
async fn the_jax_example_resumes_from_its_newest_committed_step_after_a_preemption() {
    let server = Server::start().await;
    let id = server.submit_one("exp01a", json!({})).await;
    // Frequent saves, so the poll below catches one being written.
    let worker = jax_worker(&server, "pod-jax", 2, "0.05", 10);
    let kept = server.committed_at_least(&id, 100, RUN).await;
    // Preempt while Orbax is writing the next step: the poll catches it in the act.
    let dir = PathBuf::from(server.job(&id).await["checkpoint_dir"].as_str().unwrap());
    let cut = eventually(Duration::from_secs(60), "a save in progress", || async {
        std::fs::read_dir(&dir)
            .ok()?
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .find(|name| name.contains(".orbax-checkpoint-tmp"))
    })
    .await;
    worker.control("preempt");
    let cut_step: i64 = cut.split('.').next().unwrap().parse().unwrap();
    let job = server.wait_state(&id, "succeeded", RUN).await;
    let attempts = attempts(&job);
    assert!(attempts.len() >= 2, "{job}");
    assert_eq!(attempts[0]["outcome"], "preempted", "{job}");
    assert_eq!(job["failures"], 0, "{job}");
    let resumed = attempts[1]["start_step"].as_i64().unwrap();
    assert!(
        resumed >= kept,
        "resumed at {resumed}, {kept} was committed"
    );
    assert_eq!(resumed % 10, 0, "a committed save step: {resumed}");
    // The step cut mid-write was never resumed from (unless it committed after all).
    let cut_committed = dir.join(cut_step.to_string()).is_dir();
    assert!(
        resumed < cut_step || cut_committed,
        "resumed at the cut step {cut_step}"
    );
    assert_eq!(job["last_step"], 300, "{job}");
    // Every tenth step exactly once, whatever the resumed attempt reported again.
    let steps: Vec<i64> = server
        .metric_steps(&id, "train/lm_loss")
        .await
        .into_iter()
        .filter(|s| s % 10 == 0)
        .collect();
    let expected: Vec<i64> = (1..=30).map(|i| i * 10).collect();
    assert_eq!(steps, expected);
    assert!(committed_steps(&job).contains(&300), "{job}");
    // One W&B run for the job: every attempt opened the same run id, podq_trainer.run_id(),
    // and the link reported is the same, so it went on the timeline once.
    let (_, inits) = server
        .get(&format!("/jobs/{id}/logs?grep=fake%20wandb.init&limit=100"))
        .await;
    let inits: Vec<(i64, String)> = inits["lines"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| {
            (
                l["attempt"].as_i64().unwrap(),
                l["text"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    let started: Vec<i64> = inits.iter().map(|(attempt, _)| *attempt).collect();
    assert_eq!(
        started.len(),
        attempts.len(),
        "process 0 of each attempt: {inits:?}"
    );
    for (_, text) in &inits {
        assert!(text.contains(&format!("id={id} resume=allow")), "{inits:?}");
    }
    let url = format!("https://wandb.ai/fake/podq-jax-example/runs/{id}");
    assert_eq!(
        job["links"],
        json!([{"name": "wandb", "url": url}]),
        "{job}"
    );
    let (_, events) = server.get(&format!("/jobs/{id}/events?limit=1000")).await;
    let link_events = events
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["kind"] == "link")
        .count();
    assert_eq!(link_events, 1, "{events}");
}

#[tokio::test]
async fn a_cancelled_jax_run_saves_where_it_stopped_and_exits_within_the_grace() {
    let server = Server::start().await;
    let id = server.submit_one("exp01a", json!({})).await;
    let _worker = jax_worker(&server, "pod-jax-c", 2, "0.2", 50);
    eventually(RUN, "the trainer past its first checkpoint", || async {
        server.job(&id).await["last_step"]
            .as_i64()
            .filter(|s| *s >= 60)
    })
    .await;
    let (status, body) = server.post(&format!("/jobs/{id}/cancel"), json!({})).await;
    assert!(status == 200 || status == 202, "{status} {body}");
    // The job is cancelled at once; its attempt ends once the hosts have stopped.
    let job = eventually(RUN, "the attempt to end cancelled", || async {
        let job = server.job(&id).await;
        (attempts(&job).first()?["outcome"] == "cancelled").then_some(job)
    })
    .await;
    let first = &attempts(&job)[0];
    // Not SIGKILLed: every host exited on its own, with the SDK's "stopped" code.
    let message = first["message"].as_str().unwrap();
    assert!(
        message.contains("every host exited within the grace period"),
        "{message}"
    );
    assert_eq!(first["exit_codes"], json!([143, 143]), "{first}");
    // The stop step was saved: the newest committed checkpoint is at or past the last
    // step the trainer reported.
    let last = job["last_step"].as_i64().unwrap();
    let job = eventually(
        Duration::from_secs(30),
        "the stop checkpoint listed",
        || async {
            let job = server.job(&id).await;
            committed_steps(&job)
                .iter()
                .any(|s| *s >= last)
                .then_some(job)
        },
    )
    .await;
    assert!(committed_steps(&job).iter().any(|s| *s >= last), "{job}");
}

/// Eviction gives the victim's trainer its full stop grace: the JAX example saves
/// the step it stopped at, and its next attempt resumes there, losing no step.
#[tokio::test]
async fn an_evicted_jax_run_saves_where_it_stopped_and_resumes_there() {
    let mut options = common::ServerOptions::default();
    options
        .args
        .extend(["--eviction-min-runtime".to_owned(), "0s".to_owned()]);
    let server = Server::start_with(options).await;
    let victim = server.submit_one("exp01a", json!({})).await;
    let _worker = jax_worker(&server, "pod-jax-e", 2, "0.2", 50);
    eventually(RUN, "the trainer past its first checkpoint", || async {
        server.job(&victim).await["last_step"]
            .as_i64()
            .filter(|s| *s >= 60)
    })
    .await;
    let urgent = server
        .submit_one("exp07a", json!({"priority_class": "urgent"}))
        .await;
    let job = eventually(RUN, "the victim's attempt to end", || async {
        let job = server.job(&victim).await;
        attempts(&job).first()?["ended_at"]
            .is_string()
            .then_some(job)
    })
    .await;
    let first = &attempts(&job)[0];
    assert_eq!(
        (&first["outcome"], &first["cause"]),
        (&json!("preempted"), &json!("evicted")),
        "{first}"
    );
    assert_eq!(
        first["exit_codes"],
        json!([143, 143]),
        "saved and stopped: {first}"
    );
    assert_eq!(job["failures"], 0, "{job}");
    let stopped_at = job["last_step"].as_i64().unwrap();
    // The urgent job has the pod; once it runs, it is cancelled to give the pod back.
    server.wait_state(&urgent, "running", RUN).await;
    let (status, body) = server
        .post(&format!("/jobs/{urgent}/cancel"), json!({}))
        .await;
    assert_eq!(status, 200, "{body}");
    let job = eventually(RUN, "the victim's second attempt to start", || async {
        let job = server.job(&victim).await;
        attempts(&job).get(1)?["start_step"].as_i64().map(|_| job)
    })
    .await;
    let resumed = attempts(&job)[1]["start_step"].as_i64().unwrap();
    let lost = stopped_at - resumed;
    eprintln!("eviction figures (JAX example): stopped at step {stopped_at}, resumed at {resumed}: {lost} steps lost");
    assert!(
        lost <= 0,
        "resumed at {resumed}, stopped at {stopped_at}: {job}"
    );
    let (status, body) = server
        .post(&format!("/jobs/{victim}/cancel"), json!({}))
        .await;
    assert_eq!(status, 200, "{body}");
}

#[tokio::test]
async fn a_jax_run_whose_loss_becomes_nan_is_stopped_by_the_divergence_guard() {
    let server = Server::start().await;
    let id = server.submit_one("exp01a", json!({})).await;
    // A NaN learning rate from step 60: the update makes every parameter NaN, so the loss is
    // NaN from step 61 on. The trainer reports every 10 steps: 70, 80 and 90 are the three
    // bad reports in a row the guard waits for.
    let command = trainer_command();
    let _worker = server.worker(
        "pod-jax-nan",
        2,
        &[
            "--trainer-command",
            &command,
            "--trainer-env",
            "PODQ_EXAMPLE_TOTAL_STEPS=300",
            "--trainer-env",
            "PODQ_EXAMPLE_NAN_AT_STEP=60",
            "--trainer-env",
            "PODQ_EXAMPLE_STEP_SLEEP_S=0.2",
            "--trainer-env",
            "JAX_PLATFORMS=cpu",
            "--stop-grace-s",
            "30",
            "--hang-timeout-s",
            "120",
        ],
    );
    let job = server.wait_state(&id, "stopped", RUN).await;
    let fired = &job["stopped_by"];
    assert_eq!(
        (&fired["step"], &fired["value"]),
        (&json!(90), &json!("NaN")),
        "{job}"
    );
    assert_eq!(job["failures"], 0, "{job}");
    let first = &attempts(&job)[0];
    assert_eq!(
        first["exit_codes"],
        json!([143, 143]),
        "saved and stopped: {first}"
    );
    // The non-finite values reached the server as what they are.
    let (_, metrics) = server
        .get(&format!(
            "/jobs/{id}/metrics?names=train/loss,train/diverged&max_points=1000"
        ))
        .await;
    let series = metrics["series"].as_array().unwrap();
    let value_at = |name: &str, step: i64| {
        series.iter().find(|s| s["name"] == name).unwrap()["points"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["step"] == step)
            .map(|p| p["value"].clone())
    };
    assert!(value_at("train/loss", 60).unwrap().is_f64(), "{metrics}");
    assert_eq!(value_at("train/loss", 70), Some(json!("NaN")), "{metrics}");
    assert_eq!(
        value_at("train/diverged", 70),
        Some(json!(1.0)),
        "{metrics}"
    );
    let last = job["last_step"].as_i64().unwrap();
    eprintln!("divergence figures (JAX example): NaN from step 61, guard fired at 90, trainer stopped at {last} of 300");
    assert!(last < 300, "{job}");
}

/// Every experiment's config as the worker stages it loads with real Hydra's compose API
/// and has `arch`.
#[tokio::test]
async fn every_staged_config_composes_with_hydra() {
    let server = Server::start().await;
    let (status, experiments) = server.get("/experiments").await;
    assert_eq!(status, 200);
    let dir = tempfile::tempdir().unwrap();
    let mut written = 0;
    for experiment in experiments.as_array().unwrap() {
        let name = experiment["name"].as_str().unwrap();
        let (status, detail) = server.get(&format!("/experiments/{name}")).await;
        assert_eq!(status, 200, "{detail}");
        let mut config = detail["config"].clone();
        config["checkpoint_path"] = json!("/tmp/ckpt");
        config["load_checkpoint"] = Value::Null;
        std::fs::write(
            dir.path().join(format!("{name}.yaml")),
            serde_yaml::to_string(&config).unwrap(),
        )
        .unwrap();
        written += 1;
    }
    assert_eq!(written, 67);
    let output = std::process::Command::new(python())
        .arg(repo().join("tests/python/compose_staged.py"))
        .arg(dir.path())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let summary: Value = serde_json::from_str(stdout.lines().last().unwrap()).unwrap();
    assert_eq!(summary["composed"], 67, "{summary}");
}
