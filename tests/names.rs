//! Names where ids are expected, against a real server process: an experiment name stands for
//! its newest job on every job route, and a name podq does not know is a 4xx that says what
//! was probably meant, never a silent empty answer.

mod common;

use common::Server;
use reqwest::Method;
use serde_json::{json, Value};

fn suggestions(body: &Value) -> Vec<String> {
    body["error"]["details"]["did_you_mean"]
        .as_array()
        .unwrap_or_else(|| panic!("no did_you_mean list in {body}"))
        .iter()
        .map(|s| s.as_str().unwrap().to_owned())
        .collect()
}

#[tokio::test]
async fn an_experiment_name_is_its_newest_job_on_every_job_route() {
    let server = Server::start().await;
    let first = server.submit_one("exp07a", json!({})).await;

    let (status, job) = server.get("/jobs/exp07a").await;
    assert_eq!(status, 200, "{job}");
    assert_eq!(job["id"], first.as_str());
    assert!(
        job["attempts"].is_array(),
        "the detail, not the bare job: {job}"
    );
    for route in ["events", "checkpoints", "metrics"] {
        let (status, body) = server.get(&format!("/jobs/exp07a/{route}")).await;
        assert_eq!(status, 200, "{route}: {body}");
    }
    let (_, events) = server.get("/jobs/exp07a/events").await;
    assert_eq!(events[0]["job_id"], first.as_str(), "{events}");

    let (status, patched) = server
        .send(
            Method::PATCH,
            "/jobs/exp07a",
            json!({"priority": 7}).to_string(),
            &[],
        )
        .await;
    assert_eq!(status, 200, "{patched}");
    assert_eq!(patched["id"], first.as_str());
    assert_eq!(patched["priority"], 7);

    let (status, cancelled) = server.post("/jobs/exp07a/cancel", json!({})).await;
    assert_eq!(status, 200, "{cancelled}");
    assert_eq!(cancelled["state"], "cancelled");

    // Submitted again: the name now means the new job, and the old one is still reachable
    // by its id.
    let second = server.submit_one("exp07a", json!({})).await;
    assert_ne!(first, second);
    let (_, job) = server.get("/jobs/exp07a").await;
    assert_eq!(job["id"], second.as_str(), "the newest job: {job}");
    let (_, old) = server.get(&format!("/jobs/{first}")).await;
    assert_eq!(old["state"], "cancelled");

    let (status, cancelled) = server.post("/jobs/exp07a/cancel", json!({})).await;
    assert_eq!(status, 200, "{cancelled}");
    assert_eq!(cancelled["id"], second.as_str());
    let (status, requeued) = server.post("/jobs/exp07a/requeue", json!({})).await;
    assert_eq!(status, 200, "{requeued}");
    assert_eq!(requeued["id"], second.as_str());
    assert_eq!(requeued["state"], "queued");
}

#[tokio::test]
async fn an_unknown_job_name_is_a_404_with_the_closest_experiments() {
    let server = Server::start().await;
    server.submit_one("exp07a", json!({})).await;

    let (status, body) = server.get("/jobs/exp07z").await;
    assert_eq!(status, 404, "{body}");
    assert_eq!(body["error"]["code"], "not_found");
    let close = suggestions(&body);
    assert!(close.contains(&"exp07a".to_owned()), "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("did you mean `exp07a`"),
        "{body}"
    );
    // The same on a route that changes state, which changes nothing.
    let (status, body) = server.post("/jobs/exp07z/cancel", json!({})).await;
    assert_eq!(status, 404, "{body}");
    assert_eq!(server.job_of("exp07a").await["state"], "queued");

    // An experiment of the catalog that was never submitted.
    let (status, body) = server.get("/jobs/exp07b").await;
    assert_eq!(status, 404, "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("has no job yet"),
        "{body}"
    );

    // Nothing close: no suggestion, still a 404.
    let (status, body) = server.get("/jobs/not-a-name-at-all").await;
    assert_eq!(status, 404, "{body}");
    assert!(suggestions(&body).is_empty(), "{body}");
}

#[tokio::test]
async fn job_lists_refuse_names_no_job_can_have() {
    let server = Server::start().await;

    let (status, body) = server.get("/jobs?group=exp01-model-scalling").await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["error"]["code"], "unknown_group");
    assert_eq!(suggestions(&body), ["exp01-model-scaling"]);
    assert_eq!(
        body["error"]["details"]["groups"].as_array().unwrap().len(),
        14,
        "every group is listed: {body}"
    );

    let (status, body) = server.get("/jobs?group=nope").await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["error"]["code"], "unknown_group");
    assert!(suggestions(&body).is_empty(), "{body}");

    let (status, body) = server.get("/jobs?experiment=exp01aa").await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["error"]["code"], "unknown_experiment");
    assert_eq!(suggestions(&body), ["exp01a"]);

    let (status, body) = server.get("/jobs?state=runing").await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(suggestions(&body), ["running"]);
    assert_eq!(
        body["error"]["details"]["states"],
        json!([
            "queued",
            "leased",
            "running",
            "succeeded",
            "failed",
            "cancelled",
            "held",
            "stopped"
        ])
    );

    // Known names with no jobs yet are an empty list, as they should be.
    let (status, body) = server
        .get("/jobs?group=exp07-precision&experiment=exp07a&state=running")
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["total"], 0);
}

#[tokio::test]
async fn submitting_an_unknown_name_says_what_was_meant() {
    let server = Server::start().await;
    let (status, body) = server
        .post("/jobs", json!({"group": "exp01-model-scalling"}))
        .await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["error"]["code"], "unknown_group");
    assert_eq!(suggestions(&body), ["exp01-model-scaling"]);
    assert_eq!(
        body["error"]["message"],
        "no group `exp01-model-scalling`; did you mean `exp01-model-scaling`?"
    );

    let (status, body) = server
        .post("/jobs", json!({"experiments": ["exp01aa"]}))
        .await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["error"]["code"], "unknown_experiment");
    assert_eq!(suggestions(&body), ["exp01a"]);

    // Several unknown names: suggestions per name.
    let (status, body) = server
        .post(
            "/jobs",
            json!({"experiments": ["exp01a", "exp01aa", "zzzzzzzz"]}),
        )
        .await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(
        body["error"]["details"]["did_you_mean"],
        json!({"exp01aa": ["exp01a"], "zzzzzzzz": []}),
        "{body}"
    );
    assert!(server.jobs().await.is_empty(), "nothing was submitted");
}
