//! `/metrics` read by a real Prometheus parser (prometheus_client's, from the test venv)
//! while a job runs on the simulated pod: the counters move.

mod common;

use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use common::{eventually, Server, ServerOptions};
use serde_json::{json, Value};

fn python() -> String {
    let python = std::env::var("PODQ_TEST_PYTHON").unwrap_or_else(|_| {
        PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join(".venv/bin/python")
            .display()
            .to_string()
    });
    assert!(
        std::path::Path::new(&python).exists(),
        "{python} is missing: run scripts/venv (scripts/test does)"
    );
    python
}

/// The samples of `text` as prometheus_client parses them; panics if it cannot.
fn parse(text: &str) -> Vec<Value> {
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/python/parse_metrics.py");
    let mut child = Command::new(python())
        .arg(script)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let output = child.wait_with_output().unwrap();
    assert!(
        output.status.success(),
        "the parser refused /metrics: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).unwrap()
}

fn value(samples: &[Value], name: &str, labels: Value) -> Option<f64> {
    samples
        .iter()
        .find(|s| {
            s["name"] == name
                && labels
                    .as_object()
                    .unwrap()
                    .iter()
                    .all(|(k, v)| &s["labels"][k] == v)
        })
        .and_then(|s| s["value"].as_f64())
}

async fn scrape(url: &str) -> Vec<Value> {
    let text = reqwest::get(url).await.unwrap().text().await.unwrap();
    parse(&text)
}

#[tokio::test]
async fn metrics_parse_and_move_while_a_job_runs() {
    let mut options = ServerOptions::default();
    // /metrics on its own address too, as an operator may run it.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    options
        .args
        .extend(["--metrics-listen".into(), format!("127.0.0.1:{port}")]);
    let server = Server::start_with(options).await;
    // With an address of its own, /metrics is served there alone.
    let metrics_url = format!("http://127.0.0.1:{port}/metrics");
    let main = reqwest::get(format!("{}/metrics", server.url))
        .await
        .unwrap();
    assert_eq!(
        main.status(),
        404,
        "/metrics is not on the main address too"
    );
    let before = scrape(&metrics_url).await;
    assert_eq!(
        value(&before, "podq_leases_granted_total", json!({})),
        Some(0.0)
    );
    assert_eq!(
        value(&before, "podq_jobs", json!({"state": "running"})),
        Some(0.0)
    );

    let job = server.submit_one("exp07a", json!({})).await;
    let _worker = server.worker("pod-m", 2, &["--trainer-env", "PODQ_SIM_RUN_SECS=20"]);
    server
        .wait_state(&job, "running", Duration::from_secs(60))
        .await;
    // The step's gauge comes from the status view, which can lag the points' counter by a
    // scrape (seen once in a full run on 4af68b6): wait for both, then assert on that scrape.
    let first = eventually(
        Duration::from_secs(30),
        "metric points ingested and the job's step shown",
        || async {
            let samples = scrape(&metrics_url).await;
            let ingested =
                value(&samples, "podq_metric_points_ingested_total", json!({})).unwrap_or(0.0);
            let step = value(&samples, "podq_job_step", json!({"experiment": "exp07a"}));
            (ingested > 0.0 && step.is_some()).then_some(samples)
        },
    )
    .await;
    assert_eq!(
        value(&first, "podq_leases_granted_total", json!({})),
        Some(1.0)
    );
    assert_eq!(
        value(&first, "podq_jobs", json!({"state": "running"})),
        Some(1.0)
    );
    assert_eq!(
        value(
            &first,
            "podq_pod_info",
            json!({"pod": "pod-m", "state": "READY"})
        ),
        Some(1.0)
    );
    let heartbeats = value(
        &first,
        "podq_http_request_duration_seconds_count",
        json!({"route": "/api/v1/leases/{id}/heartbeat", "status": "200"}),
    )
    .expect("heartbeats are timed by route, not by lease id");
    assert!(heartbeats >= 1.0);
    assert!(value(&first, "podq_job_step", json!({"experiment": "exp07a"})).is_some());
    assert!(value(&first, "podq_store_write_batch_size_count", json!({})).unwrap() > 0.0);

    // The Grafana dashboard shipped in deploy/ asks only for metrics that exist.
    let dashboard = std::fs::read_to_string(
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("deploy/grafana/podq.json"),
    )
    .unwrap();
    let text = reqwest::get(&metrics_url)
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let families: Vec<&str> = text
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    for word in dashboard.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')) {
        if !word.starts_with("podq_") {
            continue;
        }
        let family = ["_total", "_bucket", "_sum", "_count"]
            .iter()
            .find_map(|suffix| word.strip_suffix(suffix))
            .unwrap_or(word);
        assert!(
            families.contains(&family),
            "deploy/grafana/podq.json asks for {word}, which /metrics does not declare"
        );
    }

    let points = value(&first, "podq_metric_points_ingested_total", json!({})).unwrap();
    let separate = format!("http://127.0.0.1:{port}/metrics");
    eventually(Duration::from_secs(30), "the counters move", || async {
        let later = scrape(&separate).await;
        (value(&later, "podq_metric_points_ingested_total", json!({})).unwrap() > points)
            .then_some(())
    })
    .await;
}
