//! A run that diverged stops itself, stop rules end hopeless runs, and a stopped
//! run is neither charged nor retried, gives its hours back to the plan, and can be run on
//! with its rules lifted. On the simulated pod: the real server, worker and sim trainer.

mod common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use common::{eventually, Server, ServerOptions, StoreKind};
use serde_json::{json, Value};

const RUN: Duration = Duration::from_secs(150);

/// The repository's catalog with `rows` (experiment name to extra YAML of its row) added to
/// the exp01 group's rows.
fn catalog_with_rules(dir: &Path, rows: &[(&str, &str)]) -> PathBuf {
    let root = dir.join("experiments");
    common::copy_dir(&common::experiments_dir(), &root);
    let group = root.join("groups/exp01-model-scaling/group.yaml");
    let mut text = std::fs::read_to_string(&group).unwrap();
    for (experiment, extra) in rows {
        let start = text
            .find(&format!("  {experiment}: {{"))
            .expect("the row is in the group");
        let end = start + text[start..].find("}\n").unwrap();
        text.insert_str(end, &format!(", {extra}"));
    }
    std::fs::write(&group, text).unwrap();
    root
}

/// The plan's pod-hours to go over the whole catalog, before its overhead factor (which the
/// sim runs' own start-up and stopping change as they go).
async fn plan_hours(server: &Server) -> f64 {
    let (status, plan) = server.get("/plan").await;
    assert_eq!(status, 200, "{plan}");
    plan["total_hours"].as_f64().unwrap() / plan["overhead_factor"].as_f64().unwrap()
}

fn outcomes(job: &Value) -> Vec<String> {
    job["attempts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["outcome"].as_str().unwrap_or("-").to_owned())
        .collect()
}

on_both_stores!(
    a_run_that_diverges_stops_itself_uncharged_and_gives_its_hours_back,
    stop_rules_end_the_runs_that_meet_them_and_a_requeue_can_lift_them,
);

async fn a_run_that_diverges_stops_itself_uncharged_and_gives_its_hours_back(store: StoreKind) {
    let server = Server::start_on(store).await;
    let diverging = server.submit_one("exp01a", json!({})).await;
    let next = server.submit_one("exp01b", json!({})).await;
    let hours_before = plan_hours(&server).await;
    // Diverges at step 800 of 8138 (10%): from there its losses are NaN and TRM's own
    // `train/diverged` is 1; a report every 10 steps.
    let _worker = server.worker(
        "pod-d",
        2,
        &[
            "--trainer-env",
            "PODQ_SIM_RUN_SECS=20",
            "--trainer-env",
            "PODQ_SIM_FAULT=diverge-at-step=800",
        ],
    );
    let job = server.wait_state(&diverging, "stopped", RUN).await;

    // The guard fired on the third bad report in a row: steps 800, 810, 820.
    let fired = &job["stopped_by"];
    assert_eq!(fired["step"], 820, "{job}");
    assert!(
        fired["rule"]
            .as_str()
            .unwrap()
            .starts_with("divergence guard"),
        "{job}"
    );
    assert_eq!(fired["metric"], "train/loss", "{job}");
    assert_eq!(fired["value"], "NaN", "{job}");
    // Not charged, not retried: one attempt, stopped with the full grace like an eviction.
    assert_eq!(job["failures"], 0, "{job}");
    assert_eq!(outcomes(&job), ["preempted"], "{job}");
    assert_eq!(job["attempts"][0]["cause"], "ruled", "{job}");
    assert!(
        job["message"].as_str().unwrap().contains("job stopped"),
        "{job}"
    );
    // It stopped well before its end: the stop took the flush, one call and the grace.
    let last = job["last_step"].as_i64().unwrap();
    assert!((820..8138).contains(&last), "last step {last}");

    // The curve shows where it happened: the NaN values are stored and served as markers.
    let (_, metrics) = server
        .get(&format!(
            "/jobs/{diverging}/metrics?names=train/loss&max_points=100000"
        ))
        .await;
    let points = metrics["series"][0]["points"].as_array().unwrap();
    let first_nan = points.iter().find(|p| p["value"] == "NaN").unwrap();
    assert_eq!(first_nan["step"], 800, "{metrics}");
    assert!(points
        .iter()
        .filter(|p| p["step"].as_i64() < Some(800))
        .all(|p| p["value"].is_f64()));

    // The pod takes the next job.
    eventually(RUN, "the next job to run", || async {
        let job = server.job(&next).await;
        (job["state"] == "running").then_some(())
    })
    .await;

    // The events say why, for people and for webhooks.
    let (_, events) = server.get(&format!("/jobs/{diverging}/events")).await;
    let kinds: Vec<&str> = events
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|e| e["kind"].as_str())
        .collect();
    assert!(
        kinds.contains(&"stop_rule") && kinds.contains(&"stopped"),
        "{events}"
    );

    // The plan no longer counts the rest of the run (90% of its 40 estimated hours; the
    // next run's own progress only lowers the figure further), and pod time says what
    // stopping saved.
    let hours_after = plan_hours(&server).await;
    assert!(
        hours_after <= hours_before - 0.9 * 40.0,
        "hours to go {hours_before} -> {hours_after}"
    );
    let (_, pod_time) = server.get("/pod-time").await;
    assert_eq!(pod_time["saved_by_stopping"]["runs"], 1, "{pod_time}");
    assert!(pod_time["saved_by_stopping"]["pod_hours"].as_f64().unwrap() > 0.0);

    // Submitting the experiment again does not start it over: it was judged.
    let (status, answer) = server
        .post("/jobs", json!({"experiments": ["exp01a"]}))
        .await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["created"], json!([]), "{answer}");
    assert_eq!(answer["skipped"][0]["existing_job"], diverging.as_str());
}

async fn stop_rules_end_the_runs_that_meet_them_and_a_requeue_can_lift_them(store: StoreKind) {
    let dir = common::shared_tempdir();
    let experiments = catalog_with_rules(
        dir.path(),
        &[
            // Met: exact accuracy at 25% of the run is far below 0.5.
            (
                "exp01a",
                r#"stop_when: "eval/exact_accuracy below 0.5 at 25%""#,
            ),
            // Met: from step 3000 the run's metrics stay where they were.
            (
                "exp01b",
                r#"stop_when: ["eval/loss not improved in 2 evaluations"]"#,
            ),
        ],
    );
    let options = ServerOptions {
        experiments,
        ..ServerOptions::default()
    };
    let server = Server::start_with_on(options, store).await;
    let threshold = server.submit_one("exp01a", json!({})).await;
    let plateau = server.submit_one("exp01b", json!({})).await;
    let _worker = server.worker(
        "pod-r",
        2,
        &[
            "--trainer-env",
            "PODQ_SIM_RUN_SECS=20",
            "--trainer-env",
            "PODQ_SIM_FAULT=plateau-at-step=3000",
        ],
    );

    let job = server.wait_state(&threshold, "stopped", RUN).await;
    let fired = &job["stopped_by"];
    assert_eq!(
        fired["rule"], "eval/exact_accuracy below 0.5 at 25%",
        "{job}"
    );
    // Judged on the first evaluation at or after 25% of 8138 steps (step 2035).
    let evals = server.metric_steps(&threshold, "eval/exact_accuracy").await;
    let first_after = evals.iter().copied().find(|s| *s >= 2035).unwrap();
    assert_eq!(fired["step"], first_after, "{job}");
    assert!(fired["value"].as_f64().unwrap() < 0.5);
    assert_eq!(
        (job["failures"].as_i64(), outcomes(&job).len()),
        (Some(0), 1)
    );

    let job = server.wait_state(&plateau, "stopped", RUN).await;
    let fired = &job["stopped_by"];
    assert_eq!(
        fired["rule"], "eval/loss not improved in 2 evaluations",
        "{job}"
    );
    // The evaluations after 3000 repeat the value of 3000: the first of them still improves
    // on the one before 3000; the next two do not, and the second of those fires it.
    let evals: Vec<i64> = server
        .metric_steps(&plateau, "eval/loss")
        .await
        .into_iter()
        .filter(|s| *s > 3000)
        .collect();
    assert_eq!(fired["step"], evals[2], "{job}");

    // Run the threshold's run on from its checkpoint, its rule lifted.
    let (status, requeued) = server
        .post(
            &format!("/jobs/{threshold}/requeue?ignore_stop_rules=true"),
            json!({}),
        )
        .await;
    assert_eq!(status, 200, "{requeued}");
    assert_eq!(requeued["ignore_stop_rules"], true, "{requeued}");
    assert!(requeued["stopped_by"].is_null(), "{requeued}");
    let job = server.wait_state(&threshold, "succeeded", RUN).await;
    assert_eq!(outcomes(&job), ["preempted", "succeeded"], "{job}");
    let resumed = job["attempts"][1]["start_step"].as_i64().unwrap_or(0);
    assert!(resumed > 0, "it ran on from its checkpoint: {job}");
}

#[tokio::test]
async fn rules_a_run_does_not_meet_leave_it_alone() {
    let dir = common::shared_tempdir();
    let experiments = catalog_with_rules(
        dir.path(),
        &[(
            "exp01a",
            r#"stop_when: ["eval/exact_accuracy below 0.02 at 25%", "eval/loss not improved in 2 evaluations", "train/loss above 50 at step 100"]"#,
        )],
    );
    let server = Server::start_with(ServerOptions {
        experiments,
        ..ServerOptions::default()
    })
    .await;
    let id = server.submit_one("exp01a", json!({})).await;
    let _worker = server.worker("pod-a", 2, &["--trainer-env", "PODQ_SIM_RUN_SECS=15"]);
    let job = server.wait_state(&id, "succeeded", RUN).await;
    assert!(job["stopped_by"].is_null(), "{job}");
    assert_eq!(outcomes(&job), ["succeeded"], "{job}");
}

#[tokio::test]
async fn validate_refuses_a_malformed_rule_at_its_line_and_questions_an_unknown_metric() {
    let dir = common::shared_tempdir();
    let experiments = catalog_with_rules(
        dir.path(),
        &[
            (
                "exp01a",
                r#"stop_when: "eval/exact_accuracy below about-zero at 25%""#,
            ),
            (
                "exp01b",
                r#"stop_when: "eval/exact_acuracy below 0.1 at 25%""#,
            ),
        ],
    );
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_podq"))
        .args(["validate", "--experiments"])
        .arg(&experiments)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&output.stdout).to_string()
        + &String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "{text}");
    let group =
        std::fs::read_to_string(experiments.join("groups/exp01-model-scaling/group.yaml")).unwrap();
    let line = group
        .lines()
        .position(|l| l.contains("about-zero"))
        .unwrap()
        + 1;
    assert!(text.contains("invalid_stop_rule"), "{text}");
    assert!(
        text.contains(&format!("group.yaml:{line}")),
        "the error names line {line}: {text}"
    );
    assert!(text.contains("`about-zero` is not a number"), "{text}");
    assert!(text.contains("unknown_stop_metric"), "{text}");
    assert!(
        text.contains("did you mean `eval/exact_accuracy`?"),
        "{text}"
    );
}
