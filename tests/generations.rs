//! One job, several TPU generations: a group's `accelerators:` list, pods that lease by it,
//! demand that falls from a v4 out of capacity to a v6e and back, a run that resumes on
//! another slice type, a plan that reckons each run's speed there, and a real JAX + Orbax
//! checkpoint restored onto fewer devices than saved it.

mod common;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use common::pools::PoolProcess;
use common::{
    copy_dir, eventually, experiments_dir, python_json, validate, Server, ServerOptions, PODQ,
};
use serde_json::{json, Value};

const RUN: Duration = Duration::from_secs(120);

fn attempts(job: &Value) -> Vec<Value> {
    job["attempts"].as_array().cloned().unwrap_or_default()
}

/// A copy of the repository's catalog with `text` appended to `group`'s group.yaml.
fn catalog_with(group: &str, text: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    copy_dir(&experiments_dir(), dir.path());
    let path = dir.path().join(format!("groups/{group}/group.yaml"));
    let mut content = std::fs::read_to_string(&path).unwrap();
    content.push_str(text);
    std::fs::write(path, content).unwrap();
    dir
}

fn set_accelerators(catalog: &Path, group: &str, list: &str) {
    let path = catalog.join(format!("groups/{group}/group.yaml"));
    let content = std::fs::read_to_string(&path).unwrap();
    let kept: String = content
        .lines()
        .filter(|l| !l.starts_with("accelerators:"))
        .map(|l| format!("{l}\n"))
        .collect();
    std::fs::write(path, format!("{kept}accelerators: {list}\n")).unwrap();
}

#[tokio::test]
async fn validate_takes_an_ordered_list_and_names_a_near_miss() {
    let dir = tempfile::tempdir().unwrap();
    copy_dir(&experiments_dir(), dir.path());
    set_accelerators(dir.path(), "exp07-precision", "[v4-64, v6e-32]");
    let (ok, text) = validate(dir.path());
    assert!(ok, "{text}");

    set_accelerators(dir.path(), "exp07-precision", "[v4-64, v6e-23]");
    let (ok, text) = validate(dir.path());
    assert!(!ok, "{text}");
    let line = text
        .lines()
        .find(|l| l.contains("v6e-23"))
        .unwrap_or_else(|| panic!("no line names v6e-23: {text}"));
    assert!(
        line.contains("groups/exp07-precision/group.yaml:") && line.contains("v6e-32"),
        "the file, its line and the type it missed: {line}"
    );

    // A list whose every type cannot divide the batch is refused for the one that cannot.
    set_accelerators(dir.path(), "exp07-precision", "[v4-64, v5p-8192]");
    let (ok, text) = validate(dir.path());
    assert!(!ok && text.contains("4096 devices of a v5p-8192"), "{text}");
}

#[tokio::test]
async fn a_pod_leases_only_what_lists_its_type_and_first_what_prefers_it() {
    // exp07 prefers v4 (as shipped); exp08 prefers v6e; exp01 runs on v4 only.
    let catalog = catalog_with("exp08-ema", "accelerators: [v6e-32, v4-64]\n");
    let server = Server::start_with(ServerOptions {
        experiments: catalog.path().to_path_buf(),
        ..ServerOptions::default()
    })
    .await;
    let v4_only = server.submit_one("exp01a", json!({})).await;
    let prefers_v4 = server.submit_one("exp07a", json!({})).await;
    let prefers_v6e = server.submit_one("exp08a", json!({})).await;
    let (_, detail) = server.get(&format!("/jobs/{prefers_v6e}")).await;
    assert_eq!(
        detail["accelerators"],
        json!(["v6e-32", "v4-64"]),
        "{detail}"
    );
    assert_eq!(detail["accelerator"], "v6e-32", "{detail}");

    let _v6e = server.worker(
        "trillium-1",
        2,
        &[
            "--accelerator",
            "v6e-32",
            "--trainer-env",
            "PODQ_SIM_RUN_SECS=6",
        ],
    );
    let first = server.wait_state(&prefers_v6e, "succeeded", RUN).await;
    let second = server.wait_state(&prefers_v4, "succeeded", RUN).await;
    let leased_at = |job: &Value| attempts(job)[0]["started_at"].as_str().unwrap().to_owned();
    assert!(
        leased_at(&first) < leased_at(&second),
        "among equals the job that prefers v6e goes first, though submitted later"
    );
    for job in [&first, &second] {
        assert_eq!(attempts(job)[0]["accelerator"], "v6e-32", "{job}");
    }
    // The v4-only job is never offered to a v6e pod.
    let job = server.job(&v4_only).await;
    assert_eq!(job["state"], "queued", "{job}");
    assert_eq!(attempts(&job).len(), 0, "{job}");
    // The results say where each run ran.
    let (status, results) = server.get("/results?group=exp07-precision").await;
    assert_eq!(status, 200, "{results}");
    let row = results["rows"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["experiment"] == "exp07a")
        .cloned()
        .unwrap();
    assert_eq!(row["accelerators"], "v6e-32", "{row}");
    let csv = server.text("/results.csv?group=exp07-precision").await;
    assert!(
        csv.lines().next().unwrap().contains(",accelerators,"),
        "{csv}"
    );
}

#[tokio::test]
async fn demand_falls_from_a_v4_out_of_capacity_to_v6e_and_every_attempt_says_so() {
    let server = Server::start().await;
    let yaml = "pools:\n\
        \x20 - name: v4-spot\n    accelerator: v4-64\n    max_slices: 2\n    idle_after: 30s\n    \
        provisioning: spot\n    driver: local\n    zones:\n      \
        - {zone: us-central2-b, sim: {fault: stockout}}\n\
        \x20 - name: v6e-spot\n    accelerator: v6e-32\n    max_slices: 2\n    idle_after: 30s\n    \
        provisioning: spot\n    driver: local\n    zones:\n      \
        - {zone: us-east1-d, sim: {capacity: 2}}\n";
    let pool = PoolProcess::start(&server, yaml, 12);
    let (status, answer) = server
        .post("/jobs", json!({"group": "exp07-precision"}))
        .await;
    assert_eq!(status, 201, "{answer}");
    let ids: Vec<String> = answer["created"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["job_id"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(ids.len(), 3, "{answer}");

    // Once its one zone is out of capacity, the v4 pool says it passed demand on.
    eventually(RUN, "the v4 pool to pass its demand on", || async {
        let (_, page) = server.get("/pools").await;
        let v4 = page["pools"]
            .as_array()?
            .iter()
            .find(|p| p["name"] == "v4-spot")?
            .clone();
        (v4["zones"][0]["state"] == "stockout" && v4["demand_passed_on"].as_u64()? > 0)
            .then_some(v4)
    })
    .await;

    for id in &ids {
        let job = server.wait_state(id, "succeeded", RUN).await;
        for attempt in attempts(&job) {
            assert_eq!(attempt["accelerator"], "v6e-32", "{job}");
            assert!(
                attempt["pod"].as_str().unwrap().starts_with("v6e-spot-"),
                "{job}"
            );
        }
    }
    let (_, page) = server.get("/pools").await;
    let v4 = page["pools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "v4-spot")
        .cloned()
        .unwrap();
    assert_eq!(v4["slices"], json!([]), "{v4}");
    assert_eq!(v4["zones"][0]["state"], "stockout", "{v4}");
    let v4_slices: Vec<Value> = pool
        .cloud_slices()
        .into_iter()
        .filter(|s| {
            s["name"]
                .as_str()
                .unwrap_or_default()
                .starts_with("v4-spot")
        })
        .collect();
    assert!(v4_slices.is_empty(), "{v4_slices:?}");
    let (_, audit) = server.get("/audit?person=pool:v4-spot&limit=1000").await;
    assert!(
        !audit.to_string().contains("slice_created"),
        "the v4 pool made no slice: {audit}"
    );
}

#[tokio::test]
async fn a_run_preempted_on_a_v4_resumes_on_a_v6e_from_its_newest_checkpoint() {
    let server = Server::start().await;
    let id = server.submit_one("exp07a", json!({})).await;
    // A v4 pod that, once preempted, stays down: the run's next pod is the v6e.
    let v4 = server.worker(
        "stable-1",
        2,
        &[
            "--trainer-env",
            "PODQ_SIM_RUN_SECS=20",
            "--recovery-delay-s",
            "600",
        ],
    );
    let kept = server.committed_at_least(&id, 2000, RUN).await;
    v4.control("preempt");
    eventually(RUN, "the v4 attempt to end preempted", || async {
        let job = server.job(&id).await;
        (attempts(&job).first()?["outcome"] == "preempted").then_some(())
    })
    .await;
    let command = format!(
        "exec '{PODQ}' sim-trainer --config-path {{config_dir}} --config-name {{experiment}} \
         checkpoint_path={{checkpoint_dir}} load_checkpoint={{resume_from}} +slice={{accelerator}}"
    );
    let _v6e = server.worker(
        "trillium-1",
        2,
        &[
            "--accelerator",
            "v6e-32",
            "--trainer-command",
            &command,
            "--trainer-env",
            "PODQ_SIM_RUN_SECS=20",
        ],
    );
    let job = server.wait_state(&id, "succeeded", RUN).await;
    let attempts = attempts(&job);
    assert_eq!(attempts.len(), 2, "{job}");
    assert_eq!(attempts[0]["accelerator"], "v4-64", "{job}");
    assert_eq!(attempts[1]["accelerator"], "v6e-32", "{job}");
    let resumed = attempts[1]["start_step"].as_i64().unwrap();
    assert!(
        resumed >= kept,
        "resumed at {resumed}; {kept} was committed"
    );
    let from = attempts[1]["resume_from"].as_str().unwrap();
    assert!(
        from.starts_with(job["checkpoint_dir"].as_str().unwrap()),
        "{from}"
    );
    assert_eq!(job["failures"], 0, "a preemption is uncharged: {job}");
    // The trainer heard which slice it runs on, both in its environment and its command.
    let (status, logs) = server.get(&format!("/jobs/{id}/logs?attempt=2")).await;
    assert_eq!(status, 200, "{logs}");
    let text: String = logs["lines"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| format!("{}\n", l["text"].as_str().unwrap_or_default()))
        .collect();
    assert!(text.contains("on a v6e-32 slice of 32 devices"), "{text}");
    assert!(text.contains("+slice=v6e-32"), "{text}");
    let (_, events) = server.get(&format!("/jobs/{id}/events")).await;
    assert!(
        events
            .to_string()
            .contains("leased to pod trillium-1 (v6e-32)"),
        "{events}"
    );
}

#[tokio::test]
async fn the_plan_plays_a_run_out_on_the_faster_generation_it_may_use() {
    let server = Server::start().await;
    // One idle pod of each type, serving nothing: exp07's runs may use either.
    let _v4 = server.worker("stable-1", 2, &[]);
    let _v6e = server.worker("trillium-1", 2, &["--accelerator", "v6e-32"]);
    eventually(RUN, "both pods to be seen", || async {
        let (_, status) = server.get("/status").await;
        (status["pods"].as_array()?.len() == 2).then_some(())
    })
    .await;
    let (status, plan) = server.get("/plan").await;
    assert_eq!(status, 200, "{plan}");
    let runs = plan["current"]["runs"].as_array().unwrap();
    let on_v6e: Vec<&Value> = runs
        .iter()
        .filter(|r| r["accelerator"] == "v6e-32")
        .collect();
    assert!(!on_v6e.is_empty(), "{runs:?}");
    for run in &on_v6e {
        assert_eq!(
            run["group"], "exp07-precision",
            "only exp07 may use a v6e: {run}"
        );
        let start: chrono::DateTime<chrono::Utc> =
            serde_json::from_value(run["start"].clone()).unwrap();
        let end: chrono::DateTime<chrono::Utc> =
            serde_json::from_value(run["end"].clone()).unwrap();
        let hours = (end - start).num_seconds() as f64 / 3600.0;
        let on_v4 = run["remaining_hours"].as_f64().unwrap();
        // Never measured: the prior, the two slices' peak bf16 FLOPs.
        let expected = on_v4 * 275.0 / 918.0;
        assert!(
            (hours - expected).abs() < 0.01,
            "{hours} h on the v6e, {expected} expected: {run}"
        );
    }
    assert!(
        runs.iter()
            .filter(|r| r["group"] != "exp07-precision")
            .all(|r| r["accelerator"] == "v4-64"),
        "{runs:?}"
    );
}

#[tokio::test]
async fn an_unknown_slice_type_is_refused_with_the_one_meant() {
    let server = Server::start().await;
    let report = json!({"accelerator": "v6e-23", "max_slices": 1, "slices": [], "zones": [],
                        "slice_hours": 0.0});
    let (status, answer) = server.post("/pools/p/report", report).await;
    assert_eq!(status, 422, "{answer}");
    assert!(
        answer["error"]["message"]
            .as_str()
            .unwrap()
            .contains("did you mean `v6e-32`?"),
        "{answer}"
    );
    let (_, page) = server.get("/pools").await;
    assert_eq!(page["pools"], json!([]), "a refused report changes nothing");

    // A server whose default type podq does not know is refused before it starts.
    let dir = tempfile::tempdir().unwrap();
    let output = Command::new(PODQ)
        .args([
            "server",
            "--accelerator",
            "v4-63",
            "--listen",
            "127.0.0.1:0",
            "--db",
        ])
        .arg(dir.path().join("podq.db"))
        .arg("--experiments")
        .arg(experiments_dir())
        .output()
        .unwrap();
    assert!(!output.status.success());
    let text = String::from_utf8_lossy(&output.stderr);
    assert!(text.contains("did you mean `v4-64`?"), "{text}");
}

#[test]
fn jax_and_orbax_restore_on_four_devices_what_eight_saved_and_the_loss_runs_on() {
    let work = tempfile::tempdir().unwrap();
    let report = python_json("resume_on_fewer_devices.py", work.path());
    let (saved, resumed) = (&report["reference"], &report["resumed"]);
    let k = report["checkpoint_step"].as_i64().unwrap();
    assert_eq!(saved["devices"], 8, "{report}");
    assert_eq!(resumed["devices"], 4, "{report}");
    assert_eq!(resumed["restored_step"], k, "{report}");
    assert_eq!(resumed["first_step"], k + 1, "{report}");
    let loss = |run: &Value, step: i64| run["loss"][step.to_string()].as_f64().unwrap();
    // The run goes on from where it was saved: the same loss as the run that never stopped,
    // and not the loss of a run started afresh.
    for step in [k + 1, k + 2, report["total_steps"].as_i64().unwrap()] {
        let (a, b) = (loss(saved, step), loss(resumed, step));
        assert!(
            (a - b).abs() < 1e-4,
            "step {step}: {a} on 8 devices, {b} on 4"
        );
    }
    assert!(
        loss(saved, 1) - loss(resumed, k + 1) > 0.01,
        "the resumed loss is below the first step's: {report}"
    );
    eprintln!(
        "resume 8 -> 4 devices: max loss difference {} over steps {}..{}, {} s",
        report["max_loss_diff"],
        k + 1,
        report["total_steps"],
        report["wall_s"]
    );
}
