//! Where the pod time goes: a real worker on a simulated pod runs a sim trainer
//! that reports its compile, restore and saves; the pod is preempted once. Every attempt's
//! split adds up, the recovery is charged to the preempted attempt, the run under
//! `checkpoint_interval: auto` saves at the advised interval, and the grant's, pod's and
//! group's totals reach the API, `/metrics` and the CLI.

mod common;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use common::{eventually, Server, ServerOptions, PODQ};
use serde_json::{json, Value};

const RUN: Duration = Duration::from_secs(120);

/// The repository's catalog with `checkpoint_interval: auto` for the whole suite.
fn auto_catalog(dir: &Path) -> std::path::PathBuf {
    let root = dir.join("experiments-auto");
    common::copy_dir(&common::experiments_dir(), &root);
    let suite = root.join("suite.yaml");
    let mut text = std::fs::read_to_string(&suite).unwrap();
    text.push_str("checkpoint_interval: auto\n");
    std::fs::write(&suite, text).unwrap();
    root
}

fn causes(time: &Value) -> Vec<(&'static str, f64)> {
    [
        "provisioning",
        "setup",
        "startup",
        "restore",
        "productive",
        "save",
        "wasted",
        "stopping",
        "idle",
    ]
    .into_iter()
    .map(|cause| (cause, time[format!("{cause}_s")].as_f64().unwrap()))
    .collect()
}

fn assert_adds_up(what: &str, time: &Value) {
    let sum: f64 = causes(time).iter().map(|(_, s)| s).sum();
    let total = time["total_s"].as_f64().unwrap();
    assert!(
        (sum - total).abs() < 1e-6,
        "{what}: causes sum to {sum}, total {total}: {time}"
    );
    assert!(
        causes(time).iter().all(|(_, s)| *s >= 0.0),
        "{what}: {time}"
    );
}

fn seconds(at: &Value) -> f64 {
    chrono::DateTime::parse_from_rfc3339(at.as_str().unwrap())
        .unwrap()
        .timestamp_millis() as f64
        / 1000.0
}

#[tokio::test]
async fn a_preempted_runs_pod_time_adds_up_by_cause_and_auto_saves_at_the_advised_interval() {
    let scratch = tempfile::tempdir().unwrap();
    let mut options = ServerOptions {
        experiments: auto_catalog(scratch.path()),
        ..ServerOptions::default()
    };
    options.args.extend(["--prior-mtbf-h".into(), "24".into()]);
    let server = Server::start_with(options).await;
    let id = server.submit_one("exp07a", json!({})).await;
    let worker = server.worker(
        "pod-t",
        2,
        &[
            "--trainer-env",
            "PODQ_SIM_RUN_SECS=30",
            "--trainer-env",
            "PODQ_SIM_SAVE_S=0.2",
            "--recovery-delay-s",
            "2",
        ],
    );

    // While it runs: the advice is the run's own interval, and the trainer's saves are timed.
    let running = eventually(RUN, "a timed save while running", || async {
        let job = server.job(&id).await;
        let advice = &job["checkpoint_advice"];
        (job["state"] == "running" && advice["save_cost_source"] == "trainer").then_some(job)
    })
    .await;
    let advice = &running["checkpoint_advice"];
    assert_eq!(advice["auto"], true, "{advice}");
    assert_eq!(
        advice["interval_steps_now"], advice["interval_steps_advised"],
        "{advice}"
    );
    assert!(advice["save_cost_s"].as_f64().unwrap() >= 0.2, "{advice}");
    assert_eq!(advice["pod_hours_saved"], 0.0, "{advice}");
    // Preempted a fifth of the way in, not at its first checkpoint: the first attempt then
    // has training kept between its first step and its last committed checkpoint on a slow
    // machine too (the first checkpoint can come before the first metrics batch lands).
    let total_steps = running["total_steps"].as_i64().unwrap_or(5000);
    server.committed_at_least(&id, total_steps / 5, RUN).await;
    worker.control("preempt");
    let job = server.wait_state(&id, "succeeded", RUN).await;

    let attempts = job["attempts"].as_array().unwrap();
    assert!(attempts.len() >= 2, "{job}");
    assert_eq!(attempts[0]["outcome"], "preempted", "{job}");
    let first = &attempts[0]["pod_time"];
    assert_adds_up("attempt 1", first);
    // Its time is its lease to its end plus the pod's recovery after it (2 s here).
    let lease_to_end = seconds(&attempts[0]["ended_at"]) - seconds(&attempts[0]["started_at"]);
    let provisioning = first["provisioning_s"].as_f64().unwrap();
    assert!(
        provisioning >= 1.5,
        "the recovery is the preempted attempt's: {first}"
    );
    let total = first["total_s"].as_f64().unwrap();
    assert!(
        (total - provisioning - lease_to_end).abs() < 0.01,
        "{total} = {provisioning} + {lease_to_end}: {first}"
    );
    for cause in [
        "setup_s",
        "startup_s",
        "productive_s",
        "save_s",
        "stopping_s",
    ] {
        assert!(first[cause].as_f64().unwrap() > 0.0, "{cause}: {first}");
    }
    let last = &attempts[attempts.len() - 1];
    assert_eq!(last["outcome"], "succeeded", "{job}");
    assert_adds_up("the last attempt", &last["pod_time"]);
    assert_eq!(last["pod_time"]["wasted_s"], 0.0, "{last}");
    assert!(
        last["pod_time"]["restore_s"].as_f64().unwrap() > 0.0,
        "the resumed attempt's restore was reported: {last}"
    );
    let run_total: f64 = attempts
        .iter()
        .map(|a| a["pod_time"]["total_s"].as_f64().unwrap())
        .sum();
    assert_adds_up("the run", &job["pod_time"]);
    assert!((job["pod_time"]["total_s"].as_f64().unwrap() - run_total).abs() < 1e-6);
    assert_eq!(
        job["checkpoint_advice"],
        Value::Null,
        "a finished run needs none"
    );

    // Under `auto` the first attempt saved at the interval its lease advised, not at the
    // evaluations (every 814 steps). That advice came from the catalog's estimate of the step
    // time; later ones from the sim's measured one, thousands of times shorter.
    let (_, said) = server
        .get(&format!(
            "/jobs/{id}/logs?attempt=1&host=0&grep=PODQ_CHECKPOINT_INTERVAL_STEPS"
        ))
        .await;
    let said = said["lines"][0]["text"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let advised: i64 = said
        .split("checkpoints at every ")
        .nth(1)
        .and_then(|rest| rest.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("the trainer names its interval: {said:?}"));
    assert!(advised < 814, "{said}");
    let first_checkpoint = job["checkpoints"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["committed"] == true)
        .filter_map(|c| c["step"].as_i64())
        .min();
    assert_eq!(first_checkpoint, Some(advised), "{job}");

    // The grant's, pod's and group's splits.
    let (code, report) = server.get("/pod-time").await;
    assert_eq!(code, 200, "{report}");
    assert_adds_up("the grant", &report["grant"]);
    let pod = &report["pods"]["pod-t"];
    assert_adds_up("the pod", pod);
    assert!(
        pod["provisioning_s"].as_f64().unwrap() >= provisioning,
        "{report}"
    );
    let group = &report["groups"][job["group"].as_str().unwrap()];
    assert!(
        (group["productive_s"].as_f64().unwrap()
            - job["pod_time"]["productive_s"].as_f64().unwrap())
        .abs()
            < 1e-6,
        "{report}"
    );
    assert!(
        report["grant"]["total_s"].as_f64().unwrap() >= run_total,
        "{report}"
    );
    let text = server.text("/pod-time").await;
    assert!(text.contains("pod pod-t"), "{text}");
    let metrics = server.metrics().await;
    assert!(
        metrics.contains(r#"podq_pod_time_seconds{scope="pod",name="pod-t",cause="provisioning"}"#),
        "{}",
        metrics
            .lines()
            .filter(|l| l.contains("pod_time"))
            .collect::<Vec<_>>()
            .join("\n")
    );
    let shown = Command::new(PODQ)
        .args(["job", &id])
        .env("PODQ_SERVER", &server.url)
        .output()
        .unwrap();
    let shown = String::from_utf8_lossy(&shown.stdout);
    assert!(
        shown.contains("pod time") && shown.contains("productive"),
        "{shown}"
    );

    // The plan carries each waiting run's advice and its expected redo work.
    let (_, plan) = server.get("/plan").await;
    let waiting = plan["recommended"]["runs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["state"] == "not_submitted")
        .expect("a run still to go");
    assert!(
        waiting["expected_waste_hours"].as_f64().unwrap() > 0.0,
        "{waiting}"
    );
    assert_eq!(waiting["checkpoint_advice"]["auto"], true, "{waiting}");
    let names: Vec<&str> = plan["scenarios"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "no_interruptions",
            "configured_intervals",
            "advised_intervals"
        ]
    );

    // What no trainer can report is refused, and changes nothing.
    let (code, body) = server
        .post(
            &format!("/leases/{}/finish", uuid::Uuid::new_v4()),
            json!({"outcome": "succeeded", "stopping_s": -1.0}),
        )
        .await;
    assert_eq!(code, 400, "{body}");
    assert_eq!(body["error"]["code"], "invalid_phases", "{body}");
}
