//! Webhooks against a receiver run by the test: signed, in order, once each, and nothing lost
//! when the server is killed between a change and its delivery.

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use axum::Router;
use common::{eventually, Server, ServerOptions};
use serde_json::{json, Value};

const SECRET: &str = "s3cret-for-tests";

#[derive(Clone, Default)]
struct Receiver {
    /// Answer 503 while false: the receiver is "down".
    up: Arc<Mutex<bool>>,
    /// (delivery id, kind, body) of every accepted notice, in arrival order.
    got: Arc<Mutex<Vec<(i64, String, Value)>>>,
    refused: Arc<Mutex<usize>>,
}

async fn receive(State(r): State<Receiver>, headers: HeaderMap, body: String) -> StatusCode {
    if !*r.up.lock().unwrap() {
        *r.refused.lock().unwrap() += 1;
        return StatusCode::SERVICE_UNAVAILABLE;
    }
    let signature = headers["x-podq-signature"].to_str().unwrap().to_owned();
    let expected = format!(
        "sha256={}",
        podq_server::webhooks::sign(SECRET.as_bytes(), body.as_bytes())
    );
    assert_eq!(signature, expected, "the body is signed with the secret");
    let delivery: i64 = headers["x-podq-delivery"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    let kind = headers["x-podq-event"].to_str().unwrap().to_owned();
    let value: Value = serde_json::from_str(&body).unwrap();
    r.got.lock().unwrap().push((delivery, kind, value));
    StatusCode::NO_CONTENT
}

async fn start_receiver() -> (Receiver, String) {
    let receiver = Receiver::default();
    let app = Router::new()
        .route("/hook", post(receive))
        .with_state(receiver.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/hook", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    (receiver, url)
}

/// A worker's calls, by hand: lease the job, say it runs, end the attempt.
async fn attempt(server: &Server, outcome: &str) -> Value {
    let (status, lease) = server
        .post(
            "/pods/p1/lease",
            json!({"accelerator": "v4-64", "hosts": 8, "state": "READY", "health": "HEALTHY", "wait_s": 5}),
        )
        .await;
    assert_eq!(status, 200, "{lease}");
    let id = lease["lease_id"].as_str().unwrap().to_owned();
    let (status, _) = server
        .post(
            &format!("/leases/{id}/heartbeat"),
            json!({"phase": "running", "step": 1, "hosts_alive": vec![true; 8]}),
        )
        .await;
    assert_eq!(status, 200);
    let job = lease["job_id"].as_str().unwrap().to_owned();
    eventually(
        Duration::from_secs(10),
        "the attempt is recorded running",
        || async { (server.job(&job).await["state"] == "running").then_some(()) },
    )
    .await;
    let (status, answer) = server
        .post(
            &format!("/leases/{id}/finish"),
            json!({"outcome": outcome, "exit_codes": [0, 0, 0, 0, 0, 0, 0, 0]}),
        )
        .await;
    assert_eq!(status, 200, "{answer}");
    lease
}

#[tokio::test]
async fn a_preempted_then_resumed_job_is_announced_in_order_once_each_across_a_crash() {
    let (receiver, url) = start_receiver().await;
    let dir = tempfile::tempdir().unwrap();
    let hooks = dir.path().join("webhooks.yaml");
    std::fs::write(
        &hooks,
        format!(
            "- url: {url}\n  secret: {SECRET}\n  events: [leased, running, preempted, succeeded]\n"
        ),
    )
    .unwrap();
    let mut options = ServerOptions::default();
    options
        .args
        .extend(["--webhooks".to_owned(), hooks.display().to_string()]);
    let mut server = Server::start_with(options).await;

    let job = server.submit_one("exp07a", json!({})).await;
    attempt(&server, "preempted").await;
    attempt(&server, "succeeded").await;
    assert_eq!(server.job(&job).await["state"], "succeeded");

    // Every notice is queued, none delivered (the receiver is down): kill -9 now.
    eventually(
        Duration::from_secs(10),
        "a delivery was tried and refused",
        || async { (*receiver.refused.lock().unwrap() > 0).then_some(()) },
    )
    .await;
    let (_, hooks_before) = server.get("/webhooks").await;
    assert_eq!(hooks_before[0]["delivered"], 0, "{hooks_before}");
    assert_eq!(hooks_before[0]["pending"], 6, "{hooks_before}");
    assert!(hooks_before[0]["last_error"]
        .as_str()
        .unwrap()
        .contains("503"));
    assert!(
        !hooks_before[0]["url"].as_str().unwrap().contains("/hook"),
        "the URL's path is not shown: {hooks_before}"
    );
    server.crash();
    *receiver.up.lock().unwrap() = true;
    server.restart();

    let got = eventually(Duration::from_secs(30), "all six notices", || async {
        let got = receiver.got.lock().unwrap().clone();
        (got.len() >= 6).then_some(got)
    })
    .await;
    let kinds: Vec<&str> = got.iter().map(|(_, k, _)| k.as_str()).collect();
    assert_eq!(
        kinds,
        [
            "leased",
            "running",
            "preempted",
            "leased",
            "running",
            "succeeded"
        ]
    );
    let ids: Vec<i64> = got.iter().map(|(id, _, _)| *id).collect();
    let mut unique = ids.clone();
    unique.dedup();
    assert_eq!(ids, unique, "each notice once");
    assert!(ids.windows(2).all(|w| w[0] < w[1]), "in order: {ids:?}");
    for (_, _, body) in &got {
        assert_eq!(body["job"]["experiment"], "exp07a", "{body}");
        assert_eq!(body["event"]["job_id"], job.as_str());
    }
    let (_, hooks_after) = server.get("/webhooks").await;
    assert_eq!(hooks_after[0]["delivered"], 6, "{hooks_after}");
    assert_eq!(hooks_after[0]["pending"], 0);
    let (_, deliveries) = server.get("/webhooks/deliveries?limit=10").await;
    assert_eq!(deliveries.as_array().unwrap().len(), 6, "{deliveries}");
    assert!(deliveries[0]["attempts"].as_i64().unwrap() >= 1);
}

#[tokio::test]
async fn a_webhooks_file_with_a_mistake_stops_the_server_with_the_reason() {
    let dir = tempfile::tempdir().unwrap();
    let hooks = dir.path().join("webhooks.yaml");
    std::fs::write(&hooks, "- url: ftp://example.com/x\n  secret: a\n").unwrap();
    let output = std::process::Command::new(common::PODQ)
        .args(["server", "--listen", "127.0.0.1:0", "--db"])
        .arg(dir.path().join("podq.db"))
        .arg("--experiments")
        .arg(common::experiments_dir())
        .arg("--webhooks")
        .arg(&hooks)
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("http or https"), "{stderr}");
}
