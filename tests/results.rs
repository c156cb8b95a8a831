//! Results out, against the real server: `results.csv` read by Python's `csv`
//! module and by pandas (the test venv's, `PODQ_TEST_PYTHON`) says what the study view says;
//! `metrics.csv` of a 100k-point job streams in bounded memory; bad input is a 4xx in the
//! API's JSON error shape.

mod browser;
mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use common::rungs::{catalog_with_rungs, RungPod, RUNG_GROUP, RUNG_METRIC};
use common::{Server, ServerOptions};
use serde_json::{json, Value};

const GROUP: &str = "exp02b-h-cycles";

/// A server whose leases outlive a slow machine: the tests post their metrics by hand,
/// with heartbeats between batches, and 100,000 points take seconds in a debug build on
/// two shared cores (the harness's TTL is 5 s).
async fn start() -> Server {
    let mut options = ServerOptions::default();
    if let Some(i) = options.args.iter().position(|a| a == "--lease-ttl-s") {
        options.args[i + 1] = "120".into();
    }
    Server::start_with(options).await
}

fn python() -> PathBuf {
    let python = std::env::var("PODQ_TEST_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|_| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(".venv/bin/python"));
    assert!(
        python.exists(),
        "{} is missing: run scripts/venv (scripts/test does)",
        python.display()
    );
    python
}

/// What Python's `csv` module and pandas read from `file` (tests/python/read_results.py).
fn read_with_python(file: &Path, summary: bool) -> Value {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/python/read_results.py");
    let mut command = Command::new(python());
    command.arg(script).arg(file);
    if summary {
        command.arg("summary");
    }
    let output = command.output().expect("run python");
    assert!(
        output.status.success(),
        "python could not read {}: {}",
        file.display(),
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).expect("python's JSON")
}

/// Leases the next queued job on `pod` through the worker protocol, reports `batches` of
/// metrics for it and finishes it `succeeded`. Returns the job's id.
async fn run_next_job(server: &Server, pod: &str, batches: &[Value]) -> String {
    run_next_job_as(server, &[], pod, batches).await
}

/// [`run_next_job`] with the worker's `auth` headers.
async fn run_next_job_as(
    server: &Server,
    auth: &[(&str, &str)],
    pod: &str,
    batches: &[Value],
) -> String {
    let post = |path: String, body: Value| async move {
        server
            .send(reqwest::Method::POST, &path, body.to_string(), auth)
            .await
    };
    let ask = json!({
        "accelerator": "v4-64", "hosts": 8, "state": "READY", "health": "HEALTHY",
        "preflight": {"passed": true, "at": "2026-01-01T00:00:00Z", "failures": []},
        "wait_s": 0,
    });
    let (status, lease) = post(format!("/pods/{pod}/lease"), ask).await;
    assert_eq!(status, 200, "a lease for a queued job: {lease}");
    let lease_id = lease["lease_id"].as_str().unwrap().to_owned();
    let heartbeat = json!({"phase": "running", "step": 0, "hosts_alive": vec![true; 8]});
    let (status, answer) = post(format!("/leases/{lease_id}/heartbeat"), heartbeat).await;
    assert_eq!(status, 200, "{answer}");
    let mut end = 0;
    for batch in batches {
        // Each batch renews the lease, as the worker's heartbeats do.
        let heartbeat = json!({"phase": "running", "step": end, "hosts_alive": vec![true; 8]});
        let (status, answer) = post(format!("/leases/{lease_id}/heartbeat"), heartbeat).await;
        assert_eq!(status, 200, "{answer}");
        let (status, answer) = post(format!("/leases/{lease_id}/metrics"), batch.clone()).await;
        assert_eq!(status, 200, "the metrics batch is taken: {answer}");
        end = batch["points"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["step"].as_i64().unwrap())
            .max()
            .unwrap_or(end)
            .max(end);
    }
    let finish =
        json!({"outcome": "succeeded", "exit_codes": vec![0; 8], "start_step": 0, "end_step": end});
    let (status, answer) = post(format!("/leases/{lease_id}/finish"), finish).await;
    assert_eq!(status, 200, "{answer}");
    lease["job_id"].as_str().unwrap().to_owned()
}

/// Steps 100..=1000 of an eval every 100 steps and a train loss every 10, with values that
/// are exact in binary and differ per run `k`, so that final and best differ.
fn study_points(k: i64) -> Value {
    let mut points = Vec::new();
    for step in (10..=1000).step_by(10) {
        let mut values = serde_json::Map::new();
        values.insert("train/lm_loss".into(), json!(4.0 - step as f64 / 512.0));
        if step % 100 == 0 {
            let i = step / 100;
            // Rises to a peak at step 800, then falls: best is not final.
            let acc = (i.min(8) * 4 - (i - 8).max(0) * 2 + k) as f64 / 64.0;
            // Falls to its lowest at step 700, then rises.
            let loss = ((i - 7).abs() * 8 + 16 + k) as f64 / 32.0;
            values.insert("eval/exact_accuracy".into(), json!(acc));
            values.insert("eval/loss".into(), json!(loss));
        }
        points.push(json!({"step": step, "values": values}));
    }
    json!({ "points": points })
}

async fn download(server: &Server, path: &str) -> (reqwest::header::HeaderMap, String) {
    let response = server.client.get(server.api(path)).send().await.unwrap();
    assert_eq!(response.status(), 200, "GET {path}");
    let headers = response.headers().clone();
    (headers, response.text().await.unwrap())
}

fn header<'h>(headers: &'h reqwest::header::HeaderMap, name: &str) -> &'h str {
    headers
        .get(name)
        .unwrap_or_else(|| panic!("no {name} header"))
        .to_str()
        .unwrap()
}

/// A study value as the CSV writes it: strings as they are, anything else as its JSON.
fn as_cell(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

#[tokio::test]
async fn results_csv_reads_in_python_and_pandas_and_matches_the_study() {
    let server = start().await;
    // Four of the group's five experiments run to the end; exp02b_05 is never submitted.
    let submitted = ["exp02b_01", "exp02b_02", "exp02b_03", "exp02b_04"];
    let (status, answer) = server
        .post("/jobs", json!({"experiments": submitted}))
        .await;
    assert_eq!(status, 201, "{answer}");
    for k in 0..submitted.len() as i64 {
        run_next_job(&server, "p1", &[study_points(k)]).await;
    }

    let (status, study) = server.get(&format!("/groups/{GROUP}/study")).await;
    assert_eq!(status, 200, "{study}");
    let (headers, text) = download(&server, &format!("/groups/{GROUP}/results.csv")).await;
    assert_eq!(header(&headers, "content-type"), "text/csv; charset=utf-8");
    assert_eq!(
        header(&headers, "content-disposition"),
        format!("attachment; filename=\"results-{GROUP}.csv\"")
    );
    let file = server.dir.path().join("results.csv");
    std::fs::write(&file, &text).unwrap();
    let read = read_with_python(&file, false);
    let rows = read["csv"].as_array().unwrap();
    let frame = &read["pandas"];

    // The columns: the study table's varied keys, each eval metric's final and best.
    let varied: Vec<String> = {
        let mut keys: Vec<String> = study["rows"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|r| r["params"].as_object().unwrap().keys().cloned())
            .collect();
        keys.sort();
        keys.dedup();
        keys
    };
    assert!(!varied.is_empty(), "the group varies something: {study}");
    let mut expected_columns = vec!["experiment".to_owned(), "group".to_owned()];
    expected_columns.extend(varied.iter().cloned());
    for m in ["eval/exact_accuracy", "eval/loss"] {
        expected_columns.push(format!("{m}.final"));
        expected_columns.push(format!("{m}.best"));
    }
    expected_columns.extend(
        [
            "steps",
            "state",
            "pod_hours",
            "attempts",
            "accelerators",
            "rung",
            "rung_decision",
            "job_id",
        ]
        .map(String::from),
    );
    assert_eq!(
        frame["columns"].as_array().unwrap(),
        &expected_columns
            .iter()
            .map(|c| json!(c))
            .collect::<Vec<_>>(),
        "pandas reads the header as the columns"
    );
    assert_eq!(frame["len"], study["rows"].as_array().unwrap().len());
    for column in ["eval/loss.final", "eval/loss.best", "pod_hours"] {
        assert_eq!(
            frame["dtypes"][column], "float64",
            "pandas reads {column} as numbers: {}",
            frame["dtypes"]
        );
    }

    // Row by row, the study's table: same experiments in the same order, same values.
    let study_rows = study["rows"].as_array().unwrap();
    assert_eq!(rows.len(), study_rows.len());
    for ((row, pandas_row), s) in rows
        .iter()
        .zip(frame["rows"].as_array().unwrap())
        .zip(study_rows)
    {
        let exp = s["experiment"].as_str().unwrap();
        assert_eq!(row["experiment"], exp);
        assert_eq!(row["group"], GROUP);
        assert_eq!(row["state"], s["state"], "{exp}");
        let config = server.get(&format!("/experiments/{exp}")).await.1;
        for key in &varied {
            match s["params"].get(key) {
                // Where the study shows a value, the CSV has that value.
                Some(v) => assert_eq!(row[key], as_cell(v), "{exp} {key}"),
                // Where the study says "= baseline", the CSV has the experiment's value.
                None => {
                    let mut value = &config["config"];
                    for part in key.split('.') {
                        value = &value[part];
                    }
                    assert_eq!(row[key], as_cell(value), "{exp} {key}: the config's value");
                }
            }
        }
        if s["job_id"].is_null() {
            assert_eq!(exp, "exp02b_05");
            assert_eq!(s["state"], "not_submitted");
            for column in expected_columns.iter().filter(|c| {
                !varied.contains(c) && !["experiment", "group", "state"].contains(&c.as_str())
            }) {
                assert_eq!(
                    row[column], "",
                    "{exp} was never submitted: {column} is empty"
                );
            }
            continue;
        }
        assert_eq!(row["job_id"], s["job_id"], "{exp}");
        assert_eq!(row["attempts"], s["attempts"].to_string(), "{exp}");
        // A group without rungs: no rung, no decision.
        assert_eq!(
            (&row["rung"], &row["rung_decision"]),
            (&json!(""), &json!("")),
            "{exp}"
        );
        for m in ["eval/exact_accuracy", "eval/loss"] {
            for (column, key) in [("final", "final"), ("best", "best")] {
                let want = s[key][m]["value"].as_f64().unwrap();
                let got: f64 = row[format!("{m}.{column}")]
                    .as_str()
                    .unwrap()
                    .parse()
                    .unwrap();
                assert_eq!(got, want, "{exp} {m}.{column}: the study's value");
                assert_eq!(
                    pandas_row[format!("{m}.{column}")].as_f64(),
                    Some(want),
                    "{exp} {m}.{column} in pandas"
                );
            }
            assert_ne!(
                s["final"][m]["value"], s["best"][m]["value"],
                "{exp} {m}: the test's series make best and final differ"
            );
        }
        // Best is the lowest loss and the highest accuracy.
        assert_eq!(s["best"]["eval/loss"]["step"], 700);
        assert_eq!(s["best"]["eval/exact_accuracy"]["step"], 800);
        let job = server.job(s["job_id"].as_str().unwrap()).await;
        assert_eq!(row["steps"], "1000", "{exp}");
        let hours: f64 = row["pod_hours"].as_str().unwrap().parse().unwrap();
        let detail_hours = job["pod_time"]["total_s"].as_f64().unwrap() / 3600.0;
        assert!(
            hours > 0.0 && (hours - detail_hours).abs() < 1e-9,
            "{exp}: pod_hours {hours} is the job's pod time {detail_hours}"
        );
    }

    // The JSON form is the same table.
    let (status, results) = server.get(&format!("/groups/{GROUP}/results")).await;
    assert_eq!(status, 200, "{results}");
    assert_eq!(results["params"], json!(varied));
    assert_eq!(results["rows"].as_array().unwrap().len(), rows.len());

    // `podq results`: the same file, and the same rows as JSON objects keyed by its columns.
    let podq = |args: &[&str]| {
        let output = Command::new(common::PODQ)
            .arg("results")
            .args(args)
            .env("PODQ_SERVER", &server.url)
            .env_remove("PODQ_ADMIN_TOKEN")
            .output()
            .expect("run podq");
        (
            output.status.code(),
            String::from_utf8_lossy(&output.stdout).into_owned(),
            String::from_utf8_lossy(&output.stderr).into_owned(),
        )
    };
    let (code, out, err) = podq(&["--group", GROUP]);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(out, text, "podq results prints the server's CSV");
    let (code, out, err) = podq(&["--group", GROUP, "--format", "json"]);
    assert_eq!(code, Some(0), "{err}");
    let objects: Vec<Value> = serde_json::from_str(&out).expect("a JSON array");
    assert_eq!(objects.len(), rows.len());
    for (object, row) in objects.iter().zip(rows) {
        for (column, cell) in row.as_object().unwrap() {
            let cell = cell.as_str().unwrap();
            let same = match &object[column] {
                Value::Null => cell.is_empty(),
                Value::String(s) => s == cell,
                Value::Number(n) => n.as_f64() == cell.parse::<f64>().ok(),
                other => other.to_string().as_str() == cell,
            };
            assert!(
                same,
                "{column}: JSON {} against CSV `{cell}`",
                object[column]
            );
        }
    }
    let (code, _, err) = podq(&["--group", "exp02b-h-cycle"]);
    assert_eq!(code, Some(1), "an unknown group fails");
    assert!(err.contains(&format!("did you mean `{GROUP}`?")), "{err}");

    // The whole suite: one row per experiment of the catalog, every group's varied keys.
    let (headers, suite) = download(&server, "/results.csv").await;
    assert_eq!(
        header(&headers, "content-disposition"),
        "attachment; filename=\"results.csv\""
    );
    let file = server.dir.path().join("suite.csv");
    std::fs::write(&file, &suite).unwrap();
    let read = read_with_python(&file, false);
    let (_, experiments) = server.get("/experiments").await;
    assert_eq!(
        read["pandas"]["len"],
        experiments.as_array().unwrap().len(),
        "one row per experiment of the suite"
    );
    let columns = read["pandas"]["columns"].as_array().unwrap();
    for key in &varied {
        assert!(columns.contains(&json!(key)), "the suite has {key}");
    }
    let by_experiment: BTreeMap<String, &Value> = read["csv"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| (r["experiment"].as_str().unwrap().to_owned(), r))
        .collect();
    for row in rows {
        let suite_row = by_experiment[row["experiment"].as_str().unwrap()];
        for (column, value) in row.as_object().unwrap() {
            assert_eq!(
                &suite_row[column], value,
                "{column} of {} in the suite's file",
                row["experiment"]
            );
        }
    }
}

/// 100,000 points (two series of 50,000 steps) downloaded as `metrics.csv`.
///
/// Bounded memory, checked two ways that fail if the body is built in memory:
/// - the answer is chunked, with no Content-Length (a body built first would know its length);
/// - the server process's peak RSS while it sends the file grows by less than 3/4 of the
///   file's size. The peak is reset (`/proc/<pid>/clear_refs`, "5") just before the download,
///   and the names are long so the file is large (about 8 MB): a server that read all rows
///   or wrote the whole text before sending holds at least the whole file at once; one that
///   streams holds a page of 10,000 rows or two (0.8 MB of text each). Measured once: 3.2 MB
///   streamed; 14.7 MB when the handler collected the body first and sent it in chunks.
#[tokio::test]
async fn metrics_csv_of_a_100k_point_job_streams_in_bounded_memory() {
    let server = start().await;
    let id = server.submit_one("exp02b_01", json!({})).await;
    const STEPS: i64 = 50_000;
    let names = [
        "train/a_long_metric_name_so_each_row_weighs_something_like_a_real_one",
        "train/another_long_metric_name_so_each_row_weighs_like_a_real_one",
    ];
    let value = |step: i64, i: usize| (step as f64) / 8.0 + i as f64;
    let batches: Vec<Value> = (0..STEPS / 5_000)
        .map(|b| {
            let points: Vec<Value> = (b * 5_000 + 1..=(b + 1) * 5_000)
                .map(|step| {
                    json!({"step": step, "values": {names[0]: value(step, 0), names[1]: value(step, 1)}})
                })
                .collect();
            json!({ "points": points })
        })
        .collect();
    assert_eq!(run_next_job(&server, "p1", &batches).await, id);

    let pid = server.process.as_ref().unwrap().pid();
    let status_kb = |field: &str| -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
        status
            .lines()
            .find(|l| l.starts_with(field))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("no {field} in /proc/{pid}/status"))
    };
    std::fs::write(format!("/proc/{pid}/clear_refs"), "5").expect("reset the peak RSS");
    let before_kb = status_kb("VmRSS:");
    let mut response = server
        .client
        .get(server.api(&format!("/jobs/{id}/metrics.csv")))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let headers = response.headers().clone();
    let mut body = Vec::new();
    let mut chunks = 0;
    while let Some(chunk) = response.chunk().await.unwrap() {
        body.extend_from_slice(&chunk);
        chunks += 1;
    }
    let growth_kb = status_kb("VmHWM:").saturating_sub(before_kb);
    let file_kb = body.len() as u64 / 1024;
    eprintln!(
        "metrics.csv: {} bytes in {chunks} chunks; server peak RSS grew {growth_kb} kB",
        body.len()
    );
    assert!(
        growth_kb < file_kb * 3 / 4,
        "the server's peak RSS grew {growth_kb} kB sending a {file_kb} kB file: it holds \
         more than a few pages at once"
    );
    assert_eq!(
        headers.get("content-length"),
        None,
        "a streamed body has no length up front"
    );
    assert_eq!(header(&headers, "transfer-encoding"), "chunked");
    assert_eq!(header(&headers, "content-type"), "text/csv; charset=utf-8");
    assert_eq!(
        header(&headers, "content-disposition"),
        "attachment; filename=\"exp02b_01-metrics.csv\""
    );

    let text = String::from_utf8(body).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(
        lines.len() as i64,
        1 + 2 * STEPS,
        "a header and every point"
    );
    assert_eq!(lines[0], "step,name,value");
    // By name (`train/a_long...` sorts before `train/another...`), then step.
    assert_eq!(lines[1], format!("1,{},{:?}", names[0], value(1, 0)));
    let second = 1 + STEPS as usize;
    assert_eq!(
        lines[second - 1],
        format!("{STEPS},{},{:?}", names[0], value(STEPS, 0))
    );
    assert_eq!(lines[second], format!("1,{},{:?}", names[1], value(1, 1)));
    assert_eq!(
        lines[second + 12_344],
        format!("12345,{},{:?}", names[1], value(12_345, 1))
    );

    // pandas reads it back whole.
    let file = server.dir.path().join("metrics.csv");
    std::fs::write(&file, &text).unwrap();
    let read = read_with_python(&file, true);
    assert_eq!(read["len"], 2 * STEPS);
    assert_eq!(read["columns"], json!(["step", "name", "value"]));
    assert_eq!(read["dtypes"]["step"], "int64");
    assert_eq!(read["dtypes"]["value"], "float64");
    assert_eq!(read["by_name"][names[0]], STEPS);
    let sum: f64 = (1..=STEPS).map(|s| value(s, 0) + value(s, 1)).sum();
    assert_eq!(read["value_sum"].as_f64(), Some(sum));

    // NDJSON of one series and a step range: exactly those points, in order.
    let (headers, ndjson) = download(
        &server,
        &format!(
            "/jobs/{id}/metrics.ndjson?metric={}&from_step=9990&to_step=10010",
            names[0]
        ),
    )
    .await;
    assert_eq!(header(&headers, "content-type"), "application/x-ndjson");
    let points: Vec<Value> = ndjson
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(points.len(), 21);
    assert_eq!(
        points[0],
        json!({"step": 9990, "name": names[0], "value": value(9990, 0)})
    );
    assert_eq!(points[20]["step"], 10010);
    // Repeated and comma-separated names, a range across a page boundary of the store.
    let (_, csv) = download(
        &server,
        &format!(
            "/jobs/exp02b_01/metrics.csv?metric={},{}&from_step=9999&to_step=20001",
            names[0], names[1]
        ),
    )
    .await;
    assert_eq!(csv.lines().count(), 1 + 2 * 10_003);
}

fn assert_error(status: u16, body: &Value, want: u16, code: &str) {
    assert_eq!(status, want, "{body}");
    assert_eq!(body["error"]["code"], code, "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .is_some_and(|m| !m.is_empty()),
        "{body}"
    );
}

#[tokio::test]
async fn bad_input_is_a_4xx_in_the_api_error_shape() {
    let server = start().await;
    // An unknown group: 404 with did-you-mean, as the study answers.
    for path in [
        "/groups/exp02b-h-cycle/results.csv",
        "/groups/exp02b-h-cycle/results",
    ] {
        let (status, body) = server.get(path).await;
        assert_error(status, &body, 404, "not_found");
        assert_eq!(body["error"]["details"]["did_you_mean"][0], GROUP, "{body}");
        assert!(
            body["error"]["message"].as_str().unwrap().contains(GROUP),
            "the message suggests the group: {body}"
        );
    }
    // An unknown job.
    let (status, body) = server
        .get("/jobs/00000000-0000-4000-8000-000000000000/metrics.csv")
        .await;
    assert_error(status, &body, 404, "not_found");
    let (status, body) = server.get("/jobs/exp02b_0l/metrics.ndjson").await;
    assert_error(status, &body, 404, "not_found");

    let id = server.submit_one("exp02b_01", json!({})).await;
    run_next_job(&server, "p1", &[study_points(0)]).await;
    for (query, status_code, code) in [
        ("from_step=20&to_step=10", 422, "invalid_range"),
        ("from_step=ten", 400, "invalid_query"),
        ("to_step=99999999999999999999", 400, "invalid_query"),
        ("metric=eval/los", 404, "unknown_metric"),
        ("names=eval/loss", 400, "invalid_query"),
    ] {
        for ext in ["csv", "ndjson"] {
            let (status, body) = server
                .get(&format!("/jobs/{id}/metrics.{ext}?{query}"))
                .await;
            assert_error(status, &body, status_code, code);
        }
    }
    let (_, body) = server
        .get(&format!("/jobs/{id}/metrics.csv?metric=eval/los"))
        .await;
    assert_eq!(
        body["error"]["details"]["did_you_mean"][0], "eval/loss",
        "{body}"
    );
    // A range with nothing in it is an empty file, not an error.
    let (_, csv) = download(&server, &format!("/jobs/{id}/metrics.csv?from_step=5000")).await;
    assert_eq!(csv, "step,name,value\n");
}

/// The study view's Download CSV: a plain link to `results.csv` without a token; with one,
/// a click fetches the file with the token (a wrong one is refused, which shows the header
/// is sent) and saves the fetched file, the same bytes as the server's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_study_views_download_sends_the_token() {
    let mut options = ServerOptions::default();
    options.env.extend([
        ("PODQ_ADMIN_TOKEN".to_owned(), "results-admin".to_owned()),
        ("PODQ_WORKER_TOKEN".to_owned(), "results-worker".to_owned()),
    ]);
    let server = Server::start_with(options).await;
    let (status, answer) = server
        .send(
            reqwest::Method::POST,
            "/jobs",
            json!({"experiments": ["exp02b_01"]}).to_string(),
            &[("authorization", "Bearer results-admin")],
        )
        .await;
    assert_eq!(status, 201, "{answer}");
    let worker = [("authorization", "Bearer results-worker")];
    run_next_job_as(&server, &worker, "p1", &[study_points(0)]).await;
    let (_, csv) = download(&server, &format!("/groups/{GROUP}/results.csv")).await;

    let browser = browser::Browser::launch().await;
    let page = browser
        .open(&format!("{}/#study={GROUP}", server.url))
        .await;
    let link: Value = page
        .wait_for(
            std::time::Duration::from_secs(60),
            "the Download CSV link",
            "(() => { const a = document.getElementById('study-csv'); \
              return a && !a.hidden && {href: a.getAttribute('href'), download: a.download}; })()",
        )
        .await;
    assert_eq!(
        link,
        json!({"href": format!("/api/v1/groups/{GROUP}/results.csv"), "download": format!("results-{GROUP}.csv")})
    );
    // Catch what the page saves instead of letting the browser save it.
    page.eval::<Value>(
        "(() => { const create = URL.createObjectURL; \
           URL.createObjectURL = (blob) => { window.savedBlob = blob; return create.call(URL, blob); }; \
           const click = HTMLAnchorElement.prototype.click; \
           HTMLAnchorElement.prototype.click = function () { \
             if (this.id === 'study-csv') return click.call(this); \
             window.savedAs = this.download; }; return null; })()",
    )
    .await;
    page.eval::<Value>(
        "(() => { sessionStorage.setItem('podq-token', 'not-a-token'); \
           document.getElementById('study-csv').click(); return null; })()",
    )
    .await;
    let refused: String = page
        .wait_for(
            std::time::Duration::from_secs(30),
            "the wrong token refused",
            "document.getElementById('study-csv').dataset.error",
        )
        .await;
    assert!(!refused.is_empty());
    let saved: Value = page
        .wait_for(
            std::time::Duration::from_secs(30),
            "the file saved with the right token",
            "(async () => { sessionStorage.setItem('podq-token', 'results-admin'); \
               if (!window.clicked) { window.clicked = true; document.getElementById('study-csv').click(); } \
               return window.savedBlob && {as: window.savedAs, text: await window.savedBlob.text()}; })()",
        )
        .await;
    assert_eq!(saved["as"], format!("results-{GROUP}.csv"));
    assert_eq!(
        saved["text"], csv,
        "the saved file is the server's results.csv"
    );
    browser.close().await;
}

/// A group with rungs: the study says each run's value, rank and decision at each rung, and
/// `results.csv` (read by Python's `csv` and pandas) its last rung and the decision there.
#[tokio::test]
async fn the_study_and_results_csv_say_each_runs_rung_decision() {
    let dir = tempfile::tempdir().unwrap();
    let mut options = ServerOptions {
        experiments: catalog_with_rungs(
            dir.path(),
            "{metric: eval/exact_accuracy, at: [25%], keep: 1/2}",
        ),
        ..ServerOptions::default()
    };
    if let Some(i) = options.args.iter().position(|a| a == "--lease-ttl-s") {
        options.args[i + 1] = "120".into();
    }
    let server = Server::start_with(options).await;
    let (status, answer) = server.post("/jobs", json!({"group": RUNG_GROUP})).await;
    assert_eq!(status, 201, "{answer}");
    // exp10b is the baseline row, and the worst: it goes on all the same.
    let values = BTreeMap::from([
        ("exp10a", 0.9),
        ("exp10b", 0.1),
        ("exp10c", 0.5),
        ("exp10d", 0.7),
        ("exp10e", 0.3),
    ]);
    RungPod::new(&server, "pod-r").play(0.25, &values).await;

    let (status, study) = server.get(&format!("/groups/{RUNG_GROUP}/study")).await;
    assert_eq!(status, 200, "{study}");
    assert_eq!(study["rungs"]["metric"], RUNG_METRIC, "{study}");
    assert_eq!(study["rungs"]["at"], json!([0.25]), "{study}");
    assert_eq!(study["rungs"]["keep"], 0.5, "{study}");
    assert_eq!(study["rungs"]["keep_auto"], false, "{study}");
    assert_eq!(study["rungs"]["lower_is_better"], false, "{study}");
    let rows = study["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 5, "{study}");
    for row in rows {
        let exp = row["experiment"].as_str().unwrap();
        let job = server.job(row["job_id"].as_str().unwrap()).await;
        let rung = &row["rungs"][0];
        assert_eq!(row["rungs"].as_array().unwrap().len(), 1, "{exp}: {row}");
        assert_eq!(rung["rung"], 1, "{exp}: {row}");
        assert_eq!(rung["value"], values[exp], "{exp}: {row}");
        let total = job["total_steps"].as_i64().unwrap();
        assert_eq!(
            rung["step"],
            (total as f64 * 0.25).ceil() as i64,
            "{exp}: judged on its value at 25% of its steps"
        );
        // The study says what the job's detail says.
        for key in ["verdict", "rank", "of", "value", "decided_by"] {
            assert_eq!(
                rung[key], job["rungs"][0][key],
                "{exp} {key}: {row} / {job}"
            );
        }
        let want = if exp == "exp10e" {
            "pruned"
        } else {
            "promoted"
        };
        assert_eq!(rung["verdict"], want, "{exp}: {row}");
    }
    let pruned = rows.iter().find(|r| r["experiment"] == "exp10e").unwrap();
    assert_eq!(
        (&pruned["rungs"][0]["rank"], &pruned["rungs"][0]["of"]),
        (&json!(4), &json!(5))
    );
    assert_eq!(pruned["state"], "stopped");

    // results.csv: the last rung and its decision, as Python and pandas read them.
    let (_, text) = download(&server, &format!("/groups/{RUNG_GROUP}/results.csv")).await;
    let file = server.dir.path().join("rungs.csv");
    std::fs::write(&file, &text).unwrap();
    let read = read_with_python(&file, false);
    let columns = read["pandas"]["columns"].as_array().unwrap();
    let at = |name: &str| columns.iter().position(|c| c == name);
    assert_eq!(
        (
            at("rung").map(|i| i + 1),
            at("rung_decision").map(|i| i + 1)
        ),
        (at("rung_decision"), at("job_id")),
        "rung, rung_decision just before job_id: {columns:?}"
    );
    assert_eq!(
        read["pandas"]["dtypes"]["rung"], "int64",
        "{}",
        read["pandas"]["dtypes"]
    );
    for row in read["csv"].as_array().unwrap() {
        let exp = row["experiment"].as_str().unwrap();
        let want = if exp == "exp10e" {
            "pruned"
        } else {
            "promoted"
        };
        assert_eq!(row["rung"], "1", "{exp}: {row}");
        assert_eq!(row["rung_decision"], want, "{exp}: {row}");
    }
    // The JSON form, and the suite's file, say the same; other groups have no rung.
    let (_, results) = server.get(&format!("/groups/{RUNG_GROUP}/results")).await;
    let e = results["rows"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["experiment"] == "exp10e")
        .unwrap();
    assert_eq!(
        (&e["rung"], &e["rung_decision"]),
        (&json!(1), &json!("pruned")),
        "{e}"
    );
    let (_, suite) = download(&server, "/results.csv").await;
    let file = server.dir.path().join("suite-rungs.csv");
    std::fs::write(&file, &suite).unwrap();
    let read = read_with_python(&file, false);
    for row in read["csv"].as_array().unwrap() {
        let exp10 = row["group"] == RUNG_GROUP;
        assert_eq!(row["rung"] != "", exp10, "{row}");
    }
}
