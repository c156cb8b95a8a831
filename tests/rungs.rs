//! Rungs across a group: a sweep's runs are judged against each other at each rung, the best
//! go on, the others pause and are pruned once the rung closes, uncharged, their checkpoints
//! kept. The real server on a temporary store; a pod is played through the worker API here,
//! so each run reports exactly the value the case needs, or the real worker and sim trainer
//! run the sweep on the simulated pod.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use common::rungs::{catalog_with_rungs, RungPod, RUNG_GROUP};
use common::{eventually, Server, ServerOptions, StoreKind};
use serde_json::{json, Value};

const RUN: Duration = Duration::from_secs(150);
const GROUP: &str = RUNG_GROUP;

async fn server_with_rungs(dir: &Path, rungs: &str) -> Server {
    server_with_rungs_on(dir, rungs, StoreKind::Sqlite).await
}

async fn server_with_rungs_on(dir: &Path, rungs: &str, store: StoreKind) -> Server {
    let options = ServerOptions {
        experiments: catalog_with_rungs(dir, rungs),
        ..ServerOptions::default()
    };
    Server::start_with_on(options, store).await
}

/// Submits the exp10 group: its jobs by experiment.
async fn submit_group(server: &Server) -> BTreeMap<String, String> {
    let (status, answer) = server.post("/jobs", json!({"group": GROUP})).await;
    assert_eq!(status, 201, "{answer}");
    answer["created"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["experiment"].as_str().unwrap().to_owned(),
                c["job_id"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

/// The five runs' values at their rung: exp10b, the baseline row, is the worst.
fn spread() -> BTreeMap<&'static str, f64> {
    BTreeMap::from([
        ("exp10a", 0.9),
        ("exp10b", 0.1),
        ("exp10c", 0.5),
        ("exp10d", 0.7),
        ("exp10e", 0.3),
    ])
}

async fn state_of(server: &Server, jobs: &BTreeMap<String, String>, experiment: &str) -> Value {
    server.job(&jobs[experiment]).await
}

async fn events_of(server: &Server, job: &str) -> Vec<Value> {
    let (_, events) = server.get(&format!("/jobs/{job}/events")).await;
    events.as_array().cloned().unwrap_or_default()
}

fn kinds(events: &[Value]) -> Vec<String> {
    events
        .iter()
        .filter_map(|e| e["kind"].as_str().map(str::to_owned))
        .collect()
}

on_both_stores!(promotions_and_prunes_follow_the_values_and_the_pruned_are_not_charged);

async fn promotions_and_prunes_follow_the_values_and_the_pruned_are_not_charged(store: StoreKind) {
    let dir = tempfile::tempdir().unwrap();
    let rungs = "{metric: eval/exact_accuracy, at: [25%], keep: 1/2}";
    let server = server_with_rungs_on(dir.path(), rungs, store).await;
    let jobs = submit_group(&server).await;
    let values = spread();
    let pod = RungPod::new(&server, "pod-a");
    let judged = pod.play(0.25, &values).await;
    assert_eq!(judged.len(), 5, "every run judged at 25%: {judged:?}");
    // The best ⌈5 × 1/2⌉ by value go on, and the baseline with them.
    for experiment in ["exp10a", "exp10b", "exp10c", "exp10d"] {
        let job = state_of(&server, &jobs, experiment).await;
        assert_eq!(job["state"], "succeeded", "{experiment}: {job}");
    }
    let pruned = state_of(&server, &jobs, "exp10e").await;
    assert_eq!(pruned["state"], "stopped", "{pruned}");
    assert_eq!(pruned["failures"], 0, "not charged: {pruned}");
    let message = pruned["message"].as_str().unwrap();
    assert!(
        message.contains("pruned at rung 1: rank 4 of 5 by eval/exact_accuracy (0.3)"),
        "{message}"
    );
    let events = events_of(&server, &jobs["exp10e"]).await;
    let reason = events
        .iter()
        .find(|e| e["kind"] == "rung_pruned")
        .unwrap_or_else(|| panic!("no rung_pruned: {events:?}"));
    assert!(
        reason["message"]
            .as_str()
            .unwrap()
            .contains("rank 4 of 5 by eval/exact_accuracy (0.3)"),
        "{reason}"
    );
    // The job panel says the rung decision.
    assert_eq!(pruned["rungs"][0]["verdict"], "pruned", "{pruned}");
    assert_eq!(pruned["rungs"][0]["value"], 0.3, "{pruned}");
    // The group's pod time: the pruned run trained a quarter of its steps.
    let (_, pod_time) = server.get("/pod-time").await;
    let saved = pod_time["saved_by_rungs"]["pod_hours"].as_f64().unwrap();
    assert!(
        (29.0..=31.0).contains(&saved),
        "3/4 of 40 hours: {pod_time}"
    );
    assert_eq!(pod_time["saved_by_rungs"]["runs"], 1, "{pod_time}");
}

#[tokio::test]
async fn a_run_judged_first_waits_then_is_promoted_when_its_siblings_rank_below_it() {
    let dir = tempfile::tempdir().unwrap();
    let server = server_with_rungs(
        dir.path(),
        "{metric: eval/exact_accuracy, at: [25%], keep: 1/2}",
    )
    .await;
    let jobs = submit_group(&server).await;
    let pod = RungPod::new(&server, "pod-a");
    // The first run judged beside the baseline (which goes on at once, whatever its rank):
    // below it, it is not among the best ⌊n × 1/2⌋ so far, so it waits.
    let first = pod.lease_not_baseline(0.25, 0.95).await;
    let experiment = first.experiment.clone();
    let step = (first.total as f64 * 0.25).ceil() as i64;
    let stop = pod.report(&first, step, 0.8).await;
    let reason = stop.expect("the first run judged pauses");
    assert!(reason.contains("rung 1"), "{reason}");
    let answer = pod.finish(first, "cancelled", step).await;
    assert_eq!(answer["job_state"], "held", "{answer}");
    let held = state_of(&server, &jobs, &experiment).await;
    assert_eq!(held["failures"], 0, "{held}");
    assert_eq!(held["rungs"][0]["verdict"], "paused", "{held}");
    // The others are judged below it: it is promoted, back in the queue, uncharged.
    let rest: BTreeMap<&str, f64> = [
        ("exp10a", 0.1),
        ("exp10b", 0.95),
        ("exp10c", 0.3),
        ("exp10d", 0.4),
        ("exp10e", 0.5),
    ]
    .into_iter()
    .filter(|(e, _)| *e != experiment)
    .collect();
    let mut values = rest.clone();
    values.insert(&experiment, 0.8);
    // Plays the rest until the first is promoted.
    let mut judged = vec![experiment.clone()];
    let promoted = loop {
        let job = state_of(&server, &jobs, &experiment).await;
        if job["state"] == "queued" {
            break job;
        }
        let played = pod.play_one(0.25, &mut judged, |e| values[e]).await;
        assert!(
            played.is_some(),
            "the queue ran dry, {experiment} still waits: {job}"
        );
    };
    assert_eq!(promoted["rungs"][0]["verdict"], "promoted", "{promoted}");
    let events = kinds(&events_of(&server, &jobs[&experiment]).await);
    assert!(
        events.contains(&"rung_paused".to_owned()) && events.contains(&"rung_promoted".to_owned()),
        "{events:?}"
    );
}

#[tokio::test]
async fn the_baseline_row_is_never_pruned_however_it_ranks() {
    let dir = tempfile::tempdir().unwrap();
    let server = server_with_rungs(
        dir.path(),
        "{metric: eval/exact_accuracy, at: [25%], keep: 0.2}",
    )
    .await;
    let jobs = submit_group(&server).await;
    let values = BTreeMap::from([
        ("exp10a", 0.9),
        ("exp10b", 0.0),
        ("exp10c", 0.5),
        ("exp10d", 0.7),
        ("exp10e", 0.3),
    ]);
    let pod = RungPod::new(&server, "pod-a");
    pod.play(0.25, &values).await;
    let baseline = state_of(&server, &jobs, "exp10b").await;
    assert_eq!(baseline["state"], "succeeded", "{baseline}");
    assert_eq!(
        state_of(&server, &jobs, "exp10a").await["state"],
        "succeeded"
    );
    for experiment in ["exp10c", "exp10d", "exp10e"] {
        let job = state_of(&server, &jobs, experiment).await;
        assert_eq!(job["state"], "stopped", "{experiment}: {job}");
        // Paused first or judged last, the job says why as the rung did.
        let message = job["message"].as_str().unwrap_or_default();
        assert!(
            message.contains("pruned at rung 1: rank ")
                && message.contains(" by eval/exact_accuracy ("),
            "{experiment}: {message}"
        );
    }
}

#[tokio::test]
async fn a_preemption_before_a_rung_and_after_it_costs_nothing_and_judges_once() {
    let dir = tempfile::tempdir().unwrap();
    let server = server_with_rungs(
        dir.path(),
        "{metric: eval/exact_accuracy, at: [50%], keep: 1/2}",
    )
    .await;
    let jobs = submit_group(&server).await;
    let values = spread();
    let pod = RungPod::new(&server, "pod-a");
    // Preempted at 10%: requeued uncharged, no rung decision yet.
    let first = pod.lease().await.unwrap();
    let before = first.experiment.clone();
    let early = (first.total as f64 * 0.1) as i64;
    assert_eq!(
        pod.report(&first, early, values[before.as_str()]).await,
        None
    );
    let answer = pod.finish(first, "preempted", early).await;
    assert_eq!(answer["job_state"], "queued", "{answer}");
    assert_eq!(state_of(&server, &jobs, &before).await["rungs"], json!([]));
    // Each run is judged at 50%; the first one promoted past it is then preempted, and
    // resumes without being judged there again.
    let mut after: Option<String> = None;
    let mut judged: Vec<String> = Vec::new();
    while let Some(held) = pod.lease().await {
        let step = (held.total as f64 * 0.5).ceil() as i64;
        let value = values[held.experiment.as_str()];
        if judged.contains(&held.experiment) {
            assert_eq!(pod.report(&held, step + 20, value).await, None);
            pod.finish(held, "succeeded", step + 20).await;
            continue;
        }
        judged.push(held.experiment.clone());
        match pod.report(&held, step, value).await {
            Some(_) => {
                pod.finish(held, "cancelled", step).await;
            }
            None if after.is_none() && held.experiment != before => {
                after = Some(held.experiment.clone());
                let answer = pod.finish(held, "preempted", step + 10).await;
                assert_eq!(answer["job_state"], "queued", "{answer}");
            }
            None => {
                let total = held.total;
                pod.finish(held, "succeeded", total).await;
            }
        }
    }
    assert!(judged.contains(&before), "{judged:?}");
    let after = after.expect("a run promoted at once");
    for experiment in [&before, &after] {
        let job = state_of(&server, &jobs, experiment).await;
        assert_eq!(job["preemptions"], 1, "{experiment}: {job}");
        assert_eq!(job["failures"], 0, "{experiment}: {job}");
        assert_eq!(
            job["rungs"].as_array().unwrap().len(),
            1,
            "judged once: {job}"
        );
    }
    assert_eq!(state_of(&server, &jobs, "exp10e").await["state"], "stopped");
}

#[tokio::test]
async fn a_cancelled_run_leaves_its_groups_count_and_closes_the_rung() {
    let dir = tempfile::tempdir().unwrap();
    let server = server_with_rungs(
        dir.path(),
        "{metric: eval/exact_accuracy, at: [25%], keep: 1/2}",
    )
    .await;
    let jobs = submit_group(&server).await;
    let pod = RungPod::new(&server, "pod-a");
    // Four runs judged; the fifth is cancelled before it reaches the rung.
    let values = spread();
    let mut judged = Vec::new();
    while judged.len() < 4 {
        pod.play_one(0.25, &mut judged, |e| values[e])
            .await
            .unwrap();
    }
    let last = pod.lease().await.unwrap();
    let cancelled = last.experiment.clone();
    let (status, answer) = server
        .post(&format!("/jobs/{}/cancel", jobs[&cancelled]), json!({}))
        .await;
    assert_eq!(status, 200, "{answer}");
    // The rung closed with four: the best two go on, baseline included.
    let judged: Vec<&str> = values.keys().copied().filter(|e| *e != cancelled).collect();
    let mut ranked: Vec<&str> = judged.clone();
    ranked.sort_by(|a, b| values[b].partial_cmp(&values[a]).unwrap());
    eventually(RUN, "the rung to close", || async {
        for (rank, experiment) in ranked.iter().enumerate() {
            let job = state_of(&server, &jobs, experiment).await;
            let verdict = job["rungs"][0]["verdict"].as_str()?.to_owned();
            let goes_on = rank < 2 || *experiment == "exp10b";
            let expected = if goes_on { "promoted" } else { "pruned" };
            if verdict != expected {
                return None;
            }
        }
        Some(())
    })
    .await;
}

#[tokio::test]
async fn a_server_killed_during_decisions_leaves_none_both_promoted_and_pruned() {
    let dir = tempfile::tempdir().unwrap();
    let mut server = server_with_rungs(
        dir.path(),
        "{metric: eval/exact_accuracy, at: [25%], keep: 1/2}",
    )
    .await;
    let jobs = submit_group(&server).await;
    let values = spread();
    // Three runs judged, then the server is killed with -9 and started again.
    {
        let pod = RungPod::new(&server, "pod-a");
        let mut judged = Vec::new();
        for _ in 0..3 {
            pod.play_one(0.25, &mut judged, |e| values[e])
                .await
                .unwrap();
        }
    }
    let before: BTreeMap<String, Value> = {
        let mut decided = BTreeMap::new();
        for (experiment, job) in &jobs {
            decided.insert(experiment.clone(), server.job(job).await["rungs"].clone());
        }
        decided
    };
    server.crash();
    server.restart();
    for (experiment, job) in &jobs {
        assert_eq!(
            server.job(job).await["rungs"],
            before[experiment],
            "{experiment}: a decision was lost"
        );
    }
    let pod = RungPod::new(&server, "pod-b");
    pod.play(0.25, &values).await;
    for (experiment, job) in &jobs {
        let job = server.job(job).await;
        let verdict = job["rungs"][0]["verdict"]
            .as_str()
            .unwrap_or("-")
            .to_owned();
        let state = job["state"].as_str().unwrap();
        // One standing decision each, and the job's state agrees with it.
        match verdict.as_str() {
            "promoted" => assert_eq!(state, "succeeded", "{experiment}: {job}"),
            "pruned" => assert_eq!(state, "stopped", "{experiment}: {job}"),
            other => panic!("{experiment} left {other}: {job}"),
        }
    }
    assert_eq!(server.job(&jobs["exp10e"]).await["state"], "stopped");
}

#[tokio::test]
async fn a_paused_run_promoted_by_hand_goes_on_and_is_not_pruned_there() {
    let dir = tempfile::tempdir().unwrap();
    let server = server_with_rungs(
        dir.path(),
        "{metric: eval/exact_accuracy, at: [25%], keep: 1/2}",
    )
    .await;
    let jobs = submit_group(&server).await;
    let pod = RungPod::new(&server, "pod-a");
    let first = pod.lease_not_baseline(0.25, 0.1).await;
    let experiment = first.experiment.clone();
    let step = (first.total as f64 * 0.25).ceil() as i64;
    pod.report(&first, step, 0.01).await.expect("paused");
    pod.finish(first, "cancelled", step).await;
    let (status, answer) = server
        .post(&format!("/jobs/{}/resume", jobs[&experiment]), json!({}))
        .await;
    assert_eq!(status, 200, "{answer}");
    let values = spread();
    let mut values = values;
    values.insert(Box::leak(experiment.clone().into_boxed_str()), 0.01);
    pod.play(0.25, &values).await;
    let job = state_of(&server, &jobs, &experiment).await;
    assert_eq!(job["rungs"][0]["verdict"], "promoted", "{job}");
    assert_eq!(job["state"], "succeeded", "{job}");
}

/// The real JAX + Orbax example trainer under a real worker: three learning rates of exp10,
/// judged by their eval loss at 30% of 300 steps, keeping one in three.
#[tokio::test]
async fn a_real_jax_sweep_prunes_the_two_worst_and_the_best_resumes_where_it_paused() {
    let dir = tempfile::tempdir().unwrap();
    let root = catalog_with_rungs(dir.path(), "{metric: eval/loss, at: [30%], keep: 1/3}");
    // The baseline row is one not submitted here: each of the three may be pruned.
    let group = root.join(format!("groups/{GROUP}/group.yaml"));
    let text = std::fs::read_to_string(&group)
        .unwrap()
        .replace("baseline_row: exp10b", "baseline_row: exp10d")
        .replace("metrics_to_watch: [", "metrics_to_watch: [eval/loss, ");
    std::fs::write(&group, text).unwrap();
    // 299 steps with ten evaluations, as podq and the trainer both count them (1,000 groups
    // at a global batch of 6,144), so the rung's step (90) is the trainer's too.
    for experiment in ["exp10a", "exp10b", "exp10c"] {
        let path = root.join(format!("groups/{GROUP}/{experiment}.yaml"));
        let mut config = std::fs::read_to_string(&path).unwrap();
        config.push_str("epochs: 1840\neval_interval: 184\n");
        std::fs::write(&path, config).unwrap();
    }
    let server = Server::start_with(ServerOptions {
        experiments: root,
        ..ServerOptions::default()
    })
    .await;
    // The highest rate first: it is judged first, alone, and waits at the rung for the others.
    let mut jobs = BTreeMap::new();
    for (experiment, priority) in [("exp10c", 2), ("exp10b", 1), ("exp10a", 0)] {
        let body = json!({"experiments": [experiment], "priority": priority});
        let (status, answer) = server.post("/jobs", body).await;
        assert_eq!(status, 201, "{answer}");
        let id = answer["created"][0]["job_id"].as_str().unwrap().to_owned();
        jobs.insert(experiment.to_owned(), id);
    }
    let repo = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let command = format!(
        "exec '{}' '{}' --config-path {{config_dir}} --config-name {{experiment}} \
         checkpoint_path={{checkpoint_dir}} load_checkpoint={{resume_from}}",
        common::python(),
        repo.join("examples/jax-trainer/pretrain.py").display()
    );
    let _worker = server.worker(
        "pod-jax-sweep",
        2,
        &[
            "--trainer-command",
            &command,
            "--trainer-env",
            "PODQ_EXAMPLE_CHECKPOINT_EVERY=10",
            "--trainer-env",
            "PODQ_EXAMPLE_STEP_SLEEP_S=0.05",
            "--trainer-env",
            "JAX_PLATFORMS=cpu",
            "--trainer-env",
            &format!(
                "PYTHONPATH={}:{}",
                repo.join("tests/python/fake_wandb").display(),
                repo.join("trainer/src").display()
            ),
            "--stop-grace-s",
            "30",
            "--hang-timeout-s",
            "120",
        ],
    );
    let sweep = Duration::from_secs(900);
    let ended = eventually(sweep, "the sweep to end", || async {
        let mut ended = BTreeMap::new();
        for (experiment, id) in &jobs {
            let job = server.job(id).await;
            let state = job["state"].as_str()?.to_owned();
            if !matches!(state.as_str(), "succeeded" | "stopped" | "failed") {
                return None;
            }
            ended.insert(experiment.clone(), job);
        }
        Some(ended)
    })
    .await;
    let (winners, pruned): (Vec<_>, Vec<_>) = ended
        .iter()
        .partition(|(_, job)| job["state"] == "succeeded");
    assert_eq!(winners.len(), 1, "one of three goes on: {ended:?}");
    assert_eq!(pruned.len(), 2, "{ended:?}");
    for (experiment, job) in &pruned {
        assert_eq!(job["state"], "stopped", "{experiment}: {job}");
        assert_eq!(job["failures"], 0, "{experiment}: {job}");
        assert_eq!(job["rungs"][0]["verdict"], "pruned", "{experiment}: {job}");
        let message = job["message"].as_str().unwrap_or_default();
        assert!(
            message.contains("pruned at rung 1"),
            "{experiment}: {message}"
        );
    }
    let (winner, job) = winners[0];
    assert_eq!(
        job["last_step"], job["total_steps"],
        "{winner} trained to its end: {job}"
    );
    assert_eq!(job["rungs"][0]["verdict"], "promoted", "{job}");
    // It paused at the rung (judged before the others) and resumed from the checkpoint it
    // saved as it stopped there.
    let tries = job["attempts"].as_array().unwrap();
    assert!(
        tries.len() >= 2,
        "{winner} was judged last and never paused: {job}"
    );
    assert_eq!(tries[0]["cause"], "paused", "{job}");
    let paused_at = tries[0]["end_step"].as_i64().unwrap();
    assert!(paused_at >= 90, "paused past its rung (step 90): {job}");
    let resumed = tries[1]["start_step"].as_i64().unwrap();
    let committed: Vec<i64> = job["checkpoints"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["committed"] == true)
        .filter_map(|c| c["step"].as_i64())
        .collect();
    assert!(
        committed.contains(&resumed),
        "resumed at {resumed}: {committed:?}"
    );
    assert!(
        resumed >= 90 && resumed <= paused_at,
        "resumed at {resumed}, paused at {paused_at}"
    );
}

/// `keep: auto`: a grant that holds everything prunes nothing; a tight one prunes as far as
/// the plan needs to finish the group before the deadline.
#[tokio::test]
async fn keep_auto_prunes_nothing_with_a_large_grant_and_prunes_with_a_tight_one() {
    for (hours, prunes) in [(1.0e6, false), (150.0, true)] {
        let dir = tempfile::tempdir().unwrap();
        let rungs = "{metric: eval/exact_accuracy, at: [25%], keep: auto}";
        // The suite is this one group, so the plan weighs its share alone: 200 pod-hours
        // whole, about half with one run in five past the rung.
        let root = catalog_with_rungs(dir.path(), rungs);
        for entry in std::fs::read_dir(root.join("groups")).unwrap().flatten() {
            if entry.file_name() != GROUP {
                std::fs::remove_dir_all(entry.path()).unwrap();
            }
        }
        let suite = root.join("suite.yaml");
        let text = std::fs::read_to_string(&suite).unwrap();
        let start = text.find("groups:\n").unwrap();
        let end = start + text[start..].find("\n# ").unwrap();
        let only = format!("groups:\n  - {GROUP}");
        std::fs::write(&suite, format!("{}{only}{}", &text[..start], &text[end..])).unwrap();
        let server = Server::start_with(ServerOptions {
            experiments: root,
            ..ServerOptions::default()
        })
        .await;
        let jobs = submit_group(&server).await;
        let grant = json!({"end": (chrono::Utc::now() + chrono::Duration::days(30)).to_rfc3339(),
                           "pod_hours": {"v4-64": hours}});
        let (status, answer) = server
            .send(reqwest::Method::PUT, "/grant", grant.to_string(), &[])
            .await;
        assert_eq!(status, 200, "{answer}");
        // The plan chooses the share (the server also makes it again every minute).
        let (status, plan) = server.get("/plan").await;
        assert_eq!(status, 200, "{plan}");
        let group = plan["groups"]
            .as_array()
            .unwrap()
            .iter()
            .find(|g| g["name"] == GROUP)
            .cloned()
            .unwrap();
        let chosen = group["rungs"]["keep_chosen"].as_f64().unwrap();
        assert_eq!(chosen < 1.0, prunes, "{hours} pod-hours: {group}");
        RungPod::new(&server, "pod-a").play(0.25, &spread()).await;
        let mut stopped = 0;
        for job in jobs.values() {
            stopped += usize::from(server.job(job).await["state"] == "stopped");
        }
        assert_eq!(
            stopped > 0,
            prunes,
            "{hours} pod-hours, keep {chosen}: {stopped} pruned"
        );
    }
}

/// A trainer that crashes while it saves at its pause still waits at the rung, uncharged:
/// requeued, it would train past the rung its siblings are still deciding.
#[tokio::test]
async fn a_run_that_fails_on_its_way_out_of_a_pause_still_waits_at_its_rung() {
    let dir = tempfile::tempdir().unwrap();
    let rungs = "{metric: eval/exact_accuracy, at: [25%], keep: 1/2}";
    let server = server_with_rungs(dir.path(), rungs).await;
    let jobs = submit_group(&server).await;
    let pod = RungPod::new(&server, "pod-a");
    let first = pod.lease_not_baseline(0.25, 0.95).await;
    let experiment = first.experiment.clone();
    let step = (first.total as f64 * 0.25).ceil() as i64;
    pod.report(&first, step, 0.5).await.expect("paused");
    let answer = pod.finish(first, "failed", step).await;
    assert_eq!(answer["job_state"], "held", "{answer}");
    let job = state_of(&server, &jobs, &experiment).await;
    assert_eq!(job["failures"], 0, "{job}");
    assert_eq!(job["rungs"][0]["verdict"], "paused", "{job}");
}
