//! What live views read: the server-sent event stream and a group's study.

mod common;

use std::time::Duration;

use common::Server;
use serde_json::{json, Value};

/// Reads server-sent events until one satisfies `wanted`, within `within`; returns it as
/// (event name, id, data).
async fn read_until(
    body: &mut reqwest::Response,
    buffer: &mut String,
    within: Duration,
    wanted: impl Fn(&str, &Value) -> bool,
) -> (String, Option<String>, Value) {
    let deadline = tokio::time::Instant::now() + within;
    loop {
        while let Some(end) = buffer.find("\n\n") {
            let block: String = buffer.drain(..end + 2).collect();
            let (mut name, mut id, mut data) = (String::from("message"), None, String::new());
            for line in block.lines() {
                if let Some(v) = line.strip_prefix("event:") {
                    name = v.trim().to_owned();
                } else if let Some(v) = line.strip_prefix("id:") {
                    id = Some(v.trim().to_owned());
                } else if let Some(v) = line.strip_prefix("data:") {
                    data.push_str(v.trim());
                }
            }
            let value: Value = serde_json::from_str(&data).unwrap_or(Value::Null);
            if wanted(&name, &value) {
                return (name, id, value);
            }
        }
        let chunk = tokio::time::timeout_at(deadline, body.chunk())
            .await
            .expect("the wanted event within the time allowed")
            .expect("a chunk")
            .expect("the stream stays open");
        buffer.push_str(&String::from_utf8_lossy(&chunk));
    }
}

#[tokio::test]
async fn the_event_stream_delivers_new_events_and_replays_missed_ones() {
    let server = Server::start().await;
    let open = |last: Option<String>| {
        let mut request = server.client.get(server.api("/events/stream"));
        if let Some(last) = last {
            request = request.header("last-event-id", last);
        }
        request.send()
    };
    let response = open(None).await.unwrap();
    assert_eq!(response.status(), 200);
    assert!(response.headers()["content-type"]
        .to_str()
        .unwrap()
        .starts_with("text/event-stream"));
    let mut body = response;
    let mut buffer = String::new();

    let first = server.submit_one("exp07a", json!({})).await;
    let (name, id, event) = read_until(&mut body, &mut buffer, Duration::from_secs(10), |n, v| {
        n == "event" && v["kind"] == "submitted"
    })
    .await;
    assert_eq!(name, "event");
    assert_eq!(event["job_id"], first.as_str());
    drop(body);

    // Missed while disconnected, replayed on reconnecting with the last id seen.
    let second = server.submit_one("exp07c", json!({})).await;
    let mut body = open(id).await.unwrap();
    let mut buffer = String::new();
    let (_, _, event) = read_until(&mut body, &mut buffer, Duration::from_secs(10), |n, _| {
        n == "event"
    })
    .await;
    assert_eq!(
        event["job_id"],
        second.as_str(),
        "the first event after the last one seen"
    );

    let (status, error) = server.get("/events/stream?since=3").await;
    assert_eq!(status, 400, "{error}");
}

#[tokio::test]
async fn a_groups_study_sets_what_varies_against_what_each_run_shows() {
    let server = Server::start().await;
    let (status, study) = server.get("/groups/exp07-precision/study").await;
    assert_eq!(status, 200, "{study}");
    let rows = study["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 3);
    let baseline = rows.iter().find(|r| r["baseline"] == true).unwrap();
    assert_eq!(baseline["experiment"], "exp07b");
    assert_eq!(
        baseline["params"],
        json!({}),
        "the baseline differs from itself in nothing"
    );
    let float32 = rows.iter().find(|r| r["experiment"] == "exp07a").unwrap();
    assert_eq!(
        float32["params"]["arch.forward_dtype"], "float32",
        "{float32}"
    );
    assert_eq!(float32["state"], "not_submitted");
    assert!(!study["metrics_to_watch"].as_array().unwrap().is_empty());

    let (status, error) = server.get("/groups/exp07-precison/study").await;
    assert_eq!(status, 404, "{error}");
    assert!(error["error"]["details"]["groups"]
        .as_array()
        .unwrap()
        .contains(&json!("exp07-precision")));
}
