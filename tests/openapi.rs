//! `GET /api/v1/openapi.json` against the real server: the document is valid OpenAPI, every
//! schema it references exists, every operation it lists is routed, and schemathesis (from the
//! test venv) finds no server error and no answer that breaks the document.

mod common;

use std::collections::BTreeSet;
use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use common::{Server, ServerOptions};
use reqwest::Method;
use serde_json::Value;

const ADMIN_TOKEN: &str = "openapi-admin-token";
const WORKER_TOKEN: &str = "openapi-worker-token";

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

async fn document(server: &Server) -> Value {
    let (status, doc) = server.get("/openapi.json").await;
    assert_eq!(status, 200, "{doc}");
    doc
}

fn refs(value: &Value, found: &mut BTreeSet<String>) {
    match value {
        Value::Object(map) => {
            for (key, value) in map {
                match (key.as_str(), value) {
                    ("$ref", Value::String(target)) => {
                        found.insert(target.clone());
                    }
                    _ => refs(value, found),
                }
            }
        }
        Value::Array(items) => items.iter().for_each(|v| refs(v, found)),
        _ => {}
    }
}

/// (path, method) of every operation.
fn operations(doc: &Value) -> Vec<(String, String)> {
    doc["paths"]
        .as_object()
        .expect("paths")
        .iter()
        .flat_map(|(path, item)| {
            item.as_object()
                .expect("a path item")
                .keys()
                .filter(|k| {
                    ["get", "put", "post", "delete", "patch", "head", "options"]
                        .contains(&k.as_str())
                })
                .map(move |method| (path.clone(), method.clone()))
        })
        .collect()
}

#[tokio::test]
async fn the_document_is_generated_from_the_wire_types() {
    let server = Server::start().await;
    let doc = document(&server).await;
    assert!(
        doc["openapi"].as_str().unwrap_or("").starts_with("3.1"),
        "{}",
        doc["openapi"]
    );

    // Every reference resolves, and the wire types are there with their fields.
    let schemas = doc["components"]["schemas"].as_object().expect("schemas");
    let mut found = BTreeSet::new();
    refs(&doc, &mut found);
    assert!(!found.is_empty());
    for target in &found {
        let name = target
            .strip_prefix("#/components/schemas/")
            .unwrap_or_else(|| panic!("a reference outside the schemas: {target}"));
        assert!(
            schemas.contains_key(name),
            "{target} is referenced but not defined"
        );
    }
    for name in [
        "Job",
        "JobDetail",
        "SubmitRequest",
        "ErrorBody",
        "Lease",
        "Status",
        "Plan",
        "ExperimentSummary",
        "ValidateResponse",
    ] {
        assert!(schemas.contains_key(name), "no schema {name}");
    }
    assert!(schemas["Job"]["properties"]["state"].is_object());

    let ops = operations(&doc);
    assert!(ops.len() >= 30, "{ops:?}");
    for (path, method) in &ops {
        let op = &doc["paths"][path][method];
        let responses = op["responses"].as_object().expect("responses");
        // Every operation answers something on success, and its errors are the JSON error body.
        assert!(
            responses.keys().any(|s| s.starts_with('2')),
            "{method} {path} documents no success"
        );
        for (status, response) in responses {
            if status.starts_with('4') || status.starts_with('5') {
                assert_eq!(
                    response["content"]["application/json"]["schema"]["$ref"],
                    "#/components/schemas/ErrorBody",
                    "{method} {path} {status}"
                );
            }
        }
        // Calls that change something need the admin token; the worker protocol its own.
        let security = op["security"].to_string();
        if path.contains("/leases/") || path.ends_with("/lease") || path.ends_with("/report") {
            assert!(security.contains("worker_token"), "{method} {path}");
        } else if method != "get" {
            let open = path.ends_with("/experiments/validate");
            assert_eq!(
                !open,
                security.contains("admin_token"),
                "{method} {path}: {security}"
            );
        }
    }
    // Bodies and queries are described, not only named.
    assert_eq!(
        doc["paths"]["/api/v1/jobs"]["post"]["requestBody"]["content"]["application/json"]
            ["schema"]["$ref"],
        "#/components/schemas/SubmitRequest"
    );
    let list_params: Vec<&str> = doc["paths"]["/api/v1/jobs"]["get"]["parameters"]
        .as_array()
        .expect("GET /jobs parameters")
        .iter()
        .filter_map(|p| p["name"].as_str())
        .collect();
    for name in ["state", "group", "experiment", "limit", "after", "offset"] {
        assert!(list_params.contains(&name), "{list_params:?}");
    }
    // Tables for curl and the event stream say what they are.
    for (path, media) in [
        ("/api/v1/status", "text/plain"),
        ("/api/v1/status", "application/json"),
        ("/api/v1/plan", "text/plain"),
        ("/api/v1/plan", "application/json"),
        ("/api/v1/events/stream", "text/event-stream"),
        ("/metrics", "text/plain"),
    ] {
        assert!(
            doc["paths"][path]["get"]["responses"]["200"]["content"][media].is_object(),
            "GET {path} does not document {media}"
        );
    }

    // A real OpenAPI validator accepts the document.
    let mut child = Command::new(python())
        .args([
            "-c",
            "import json, sys\n\
             from openapi_spec_validator import validate\n\
             validate(json.load(sys.stdin))\n\
             print('valid')",
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("python");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(doc.to_string().as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "openapi-spec-validator refused the document: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The document is made from the same declarations as the router; this checks the outcome:
/// every documented operation is routed (placeholder ids may be a JSON 404 of the API, never
/// the fallback's "no route" or a 405).
#[tokio::test]
async fn every_documented_operation_is_routed() {
    let server = Server::start().await;
    let doc = document(&server).await;
    let id = uuid::Uuid::new_v4().to_string();
    for (path, method) in operations(&doc) {
        let concrete = path.replace("{id}", &id).replace("{name}", "stable-1");
        let method = Method::from_bytes(method.to_uppercase().as_bytes()).unwrap();
        let response = server
            .client
            .request(method.clone(), format!("{}{concrete}", server.url))
            .header("accept", "application/json")
            .body("{}")
            .timeout(Duration::from_secs(30))
            .send()
            .await
            .unwrap_or_else(|e| panic!("{method} {path}: {e}"));
        let status = response.status().as_u16();
        if path.ends_with("/events/stream") {
            // The stream stays open: its headers are the answer.
            assert_eq!(status, 200, "{method} {path}");
            continue;
        }
        let text = response.text().await.unwrap();
        let body: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
        let unrouted = status == 405
            || (status == 404
                && body["error"]["message"]
                    .as_str()
                    .is_some_and(|m| m.starts_with("no route")));
        assert!(
            !unrouted,
            "{method} {path} is documented but not routed ({status}: {text})"
        );
        if status == 404 {
            assert_eq!(
                body["error"]["code"], "not_found",
                "{method} {path}: {text}"
            );
        }
    }
}

/// schemathesis generates requests from the document: no answer is a server error, and every
/// answer's status, content type and body are what the document says, with `--checks all`
/// (a request the document allows is taken, one it forbids is refused) and the stateful
/// phase. The event stream and a log's follow stream do not end, so they are left out. The first run sends the admin token, which the worker protocol
/// refuses (403, documented); the second sends the worker token to the worker protocol, all
/// but the lease long poll, which would spend up to `wait_s` per case.
#[tokio::test(flavor = "multi_thread")]
async fn schemathesis_finds_no_server_error_or_schema_violation() {
    let mut options = ServerOptions::default();
    options.args.extend([
        "--admin-token".into(),
        ADMIN_TOKEN.into(),
        "--worker-token".into(),
        WORKER_TOKEN.into(),
    ]);
    let server = Server::start_with(options).await;
    schemathesis(
        &server,
        ADMIN_TOKEN,
        &[
            "--exclude-path",
            "/api/v1/events/stream",
            "--exclude-path",
            "/api/v1/jobs/{id}/logs/follow",
        ],
    )
    .await;
    schemathesis(
        &server,
        WORKER_TOKEN,
        &[
            "--include-tag",
            "worker",
            "--exclude-path",
            "/api/v1/pods/{name}/lease",
        ],
    )
    .await;
}

async fn schemathesis(server: &Server, token: &str, filters: &[&str]) {
    let schemathesis = python().with_file_name("schemathesis");
    assert!(
        schemathesis.exists(),
        "{} is missing: run scripts/venv (scripts/test does)",
        schemathesis.display()
    );
    let url = format!("{}/api/v1/openapi.json", server.url);
    let header = format!("Authorization: Bearer {token}");
    let config = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/schemathesis.toml");
    let mut args = vec![
        "--config-file",
        config,
        "run",
        &url,
        "--header",
        &header,
        "--checks",
        "all",
        "--max-examples",
        "10",
        "--phases",
        "examples,coverage,fuzzing,stateful",
        "--seed",
        "1",
        // One worker: Hypothesis on Python 3.11 can fail in its own code ("AST constructor
        // recursion depth mismatch") when several threads generate at once.
        "--workers",
        "1",
        "--request-timeout",
        "20",
        "--no-color",
    ];
    args.extend_from_slice(filters);
    let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
    let dir = server.dir.path().to_owned();
    let out = tokio::task::spawn_blocking(move || {
        Command::new(schemathesis)
            .args(&args)
            // Hypothesis keeps its example database in the working directory.
            .current_dir(dir)
            .env("NO_COLOR", "1")
            .output()
            .expect("run schemathesis")
    })
    .await
    .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    println!("{stdout}");
    assert!(
        out.status.success(),
        "schemathesis found problems:\n{stdout}\n{stderr}\nserver errors:\n{}",
        std::fs::read_to_string(server.dir.path().join("server.log"))
            .unwrap_or_default()
            .lines()
            .filter(|l| l.contains("ERROR"))
            .take(20)
            .collect::<Vec<_>>()
            .join("\n")
    );
}
