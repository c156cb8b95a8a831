//! The user API against a real server process: submission and deduplication, bad input,
//! tokens, idempotency, and durability across SIGKILL.

mod common;

use std::process::Command;
use std::time::Duration;

use common::{experiments_dir, original_configs, Server, ServerOptions, StoreKind, PODQ};
use reqwest::Method;
use serde_json::{json, Value};

/// Row counts of every table: "nothing changed" means this is equal before and after.
async fn table_counts(server: &Server) -> Vec<(String, i64)> {
    let mut counts = Vec::new();
    for table in [
        "jobs",
        "attempts",
        "checkpoints",
        "metric_chunks",
        "metric_tail",
        "events",
        "pods",
        "schedules",
        "idempotency_keys",
    ] {
        counts.push((table.to_owned(), server.count_rows(table).await));
    }
    counts
}

on_both_stores!(
    submitting_the_whole_suite_runs_each_training_config_once,
    jobs_page_by_keyset_and_filters_name_their_total,
    dry_run_answers_and_stores_nothing,
    bad_input_gets_a_clear_error_and_changes_nothing,
    validate_resolves_a_document_against_the_catalog,
    idempotency_key_returns_the_first_answer,
    cancel_requeue_and_priority,
    acknowledged_submissions_survive_sigkill,
    schedules_submit_when_their_cron_fires,
    a_body_that_never_comes_is_answered_408_and_changes_nothing,
    an_oversized_content_length_is_answered_413_before_any_body,
    every_error_is_json_even_from_the_http_layers,
);

fn assert_error(status: u16, body: &Value, want_status: u16, want_code: &str) {
    assert_eq!(
        status, want_status,
        "expected {want_status} {want_code}, got {status}: {body}"
    );
    assert_eq!(
        body["error"]["code"], want_code,
        "wrong error code in {body}"
    );
    let message = body["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.len() > 10,
        "the error message should explain itself: {body}"
    );
}

async fn submitting_the_whole_suite_runs_each_training_config_once(store: StoreKind) {
    let server = Server::start_on(store).await;
    let (status, answer) = server.post("/jobs", json!({"all": true})).await;
    assert_eq!(status, 201, "{answer}");
    assert_eq!(answer["created"].as_array().unwrap().len(), 54, "{answer}");
    let linked = answer["linked"].as_array().unwrap();
    assert_eq!(linked.len(), 13, "{answer}");
    let linked_names: Vec<&str> = linked
        .iter()
        .map(|l| l["experiment"].as_str().unwrap())
        .collect();
    for name in ["exp02a_03", "exp10b", "exp06_f", "exp09e"] {
        assert!(
            linked_names.contains(&name),
            "{name} should share a run: {linked_names:?}"
        );
    }
    let baseline = linked.iter().find(|l| l["experiment"] == "exp09a").unwrap();
    assert_eq!(baseline["same_as_experiment"], "exp01c");

    // Again: nothing new, every experiment skipped with its reason.
    let (status, again) = server.post("/jobs", json!({"all": true})).await;
    assert_eq!(status, 200, "{again}");
    assert_eq!(again["created"].as_array().unwrap().len(), 0);
    assert_eq!(again["linked"].as_array().unwrap().len(), 0);
    assert_eq!(again["skipped"].as_array().unwrap().len(), 67);
    assert!(again["skipped"][0]["reason"]
        .as_str()
        .unwrap()
        .contains("already has job"));

    // A linked job mirrors its run and is never leased.
    let linked_job = server.job_of("exp10b").await;
    let run = server.job_of("exp01c").await;
    assert_eq!(linked_job["same_as"], run["id"]);
    assert_eq!(linked_job["state"], "queued");
    assert_eq!(linked_job["checkpoint_dir"], run["checkpoint_dir"]);

    // Forcing runs it again regardless.
    let (status, forced) = server
        .post("/jobs", json!({"experiments": ["exp10b"], "force": true}))
        .await;
    assert_eq!(status, 201, "{forced}");
    assert_eq!(forced["created"][0]["experiment"], "exp10b");

    // Groups count jobs per state; the status table reads for a person.
    let (_, groups) = server.get("/groups").await;
    let exp01 = groups
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["name"] == "exp01-model-scaling")
        .unwrap();
    assert_eq!(exp01["jobs"]["queued"], 6);
    let table = server
        .client
        .get(server.api("/status"))
        .header("accept", "*/*")
        .send()
        .await
        .unwrap();
    assert!(table.headers()["content-type"]
        .to_str()
        .unwrap()
        .starts_with("text/plain"));
    let table = table.text().await.unwrap();
    assert!(table.contains("jobs: queued 68"), "{table}");
    assert!(table.contains("queue:"), "{table}");
    let (_, status_json) = server.get("/status").await;
    assert_eq!(status_json["jobs"]["queued"], 68);
}

async fn jobs_page_by_keyset_and_filters_name_their_total(store: StoreKind) {
    let server = Server::start_on(store).await;
    let (status, _) = server.post("/jobs", json!({"all": true})).await;
    assert_eq!(status, 201);
    let mut seen = Vec::new();
    let mut after: Option<i64> = None;
    loop {
        let query = match after {
            Some(after) => format!("/jobs?limit=20&after={after}"),
            None => "/jobs?limit=20".to_owned(),
        };
        let (status, page) = server.get(&query).await;
        assert_eq!(status, 200, "{page}");
        assert_eq!(page["total"], 67);
        seen.extend(
            page["jobs"]
                .as_array()
                .unwrap()
                .iter()
                .map(|j| j["experiment"].as_str().unwrap().to_owned()),
        );
        match page["next_after"].as_i64() {
            Some(next) => after = Some(next),
            None => break,
        }
    }
    assert_eq!(seen.len(), 67, "every job once, in submission order");
    let mut unique = seen.clone();
    unique.sort();
    unique.dedup();
    assert_eq!(unique.len(), 67);

    // A linked job is listed in its run's state, and counted there.
    let (_, queued) = server.get("/jobs?state=queued&limit=1000").await;
    assert_eq!(queued["total"], 67);
    assert_eq!(queued["jobs"].as_array().unwrap().len(), 67);
    let (_, group) = server
        .get("/jobs?group=exp07-precision&state=queued&limit=1")
        .await;
    assert_eq!(group["total"], 3, "{group}");
    assert!(group["next_after"].is_i64());

    // A queued job's detail answers before it ever ran (goodput all zero).
    let id = group["jobs"][0]["id"].as_str().unwrap().to_owned();
    let (status, detail) = server.get(&format!("/jobs/{id}")).await;
    assert_eq!(status, 200, "{detail}");
    assert_eq!(detail["goodput"]["kept_s"], 0.0);

    // Both a cursor and an offset: the offset counts from the cursor.
    let (_, all) = server.get("/jobs?limit=1000").await;
    let seq_of = |job: &Value| job["id"].clone();
    let first = all["jobs"][0].clone();
    let (status, both) = server.get("/jobs?after=0&offset=2&limit=1").await;
    assert_eq!(status, 200, "{both}");
    assert_eq!(seq_of(&both["jobs"][0]), seq_of(&all["jobs"][2]), "{first}");
    let (status, negative) = server.get("/jobs?offset=-1").await;
    assert_eq!(status, 400, "{negative}");
    assert_eq!(negative["error"]["code"], "invalid_query");
}

async fn dry_run_answers_and_stores_nothing(store: StoreKind) {
    let server = Server::start_on(store).await;
    let before = table_counts(&server).await;
    let (status, answer) = server
        .post(
            "/jobs",
            json!({"group": "exp06-batch-size", "dry_run": true}),
        )
        .await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["dry_run"], true);
    assert_eq!(answer["created"].as_array().unwrap().len(), 5);
    assert_eq!(answer["linked"][0]["experiment"], "exp06_f");
    // Nothing was created, so no job id is named: none is invented.
    for entry in answer["created"].as_array().unwrap() {
        assert!(entry["job_id"].is_null(), "{answer}");
    }
    assert!(answer["linked"][0]["job_id"].is_null(), "{answer}");
    assert!(answer["linked"][0]["same_as"].is_null(), "{answer}");
    assert_eq!(table_counts(&server).await, before);
}

async fn bad_input_gets_a_clear_error_and_changes_nothing(store: StoreKind) {
    let server = Server::start_on(store).await;
    let (status, _) = server
        .post("/jobs", json!({"group": "exp07-precision"}))
        .await;
    assert_eq!(status, 201);
    let before = table_counts(&server).await;

    let cases: Vec<(Method, &str, String, u16, &str)> = vec![
        (
            Method::POST,
            "/jobs",
            "{\"group\": ".into(),
            400,
            "malformed_json",
        ),
        (
            Method::POST,
            "/jobs",
            json!({"group": "exp99-nothing"}).to_string(),
            400,
            "unknown_group",
        ),
        (
            Method::POST,
            "/jobs",
            json!({"experiments": ["exp01a", "nope"]}).to_string(),
            400,
            "unknown_experiment",
        ),
        (
            Method::POST,
            "/jobs",
            json!({"experiments": []}).to_string(),
            400,
            "empty_selection",
        ),
        (
            Method::POST,
            "/jobs",
            json!({"group": "exp01-model-scaling", "priority": "high"}).to_string(),
            400,
            "invalid_body",
        ),
        (
            Method::POST,
            "/jobs",
            json!({"group": "exp01-model-scaling", "all": true}).to_string(),
            400,
            "invalid_selection",
        ),
        (
            Method::POST,
            "/jobs",
            json!({"grup": "exp01-model-scaling"}).to_string(),
            400,
            "invalid_body",
        ),
        (
            Method::GET,
            "/jobs/not-a-uuid",
            String::new(),
            404,
            "not_found",
        ),
        (
            Method::POST,
            "/jobs/not-a-uuid/cancel",
            String::new(),
            404,
            "not_found",
        ),
        (
            Method::GET,
            &format!("/jobs/{}", uuid::Uuid::new_v4()),
            String::new(),
            404,
            "not_found",
        ),
        (
            Method::GET,
            "/jobs?state=sleeping",
            String::new(),
            400,
            "invalid_query",
        ),
        (
            Method::PATCH,
            "/jobs/not-a-uuid",
            json!({"priority": 3}).to_string(),
            404,
            "not_found",
        ),
    ]
    .into_iter()
    .map(|(m, p, b, s, c)| (m, Box::leak(p.to_owned().into_boxed_str()) as &str, b, s, c))
    .collect();
    for (method, path, body, want_status, want_code) in cases {
        let (status, answer) = server.send(method.clone(), path, body, &[]).await;
        assert_error(status, &answer, want_status, want_code);
    }

    // An oversized body, on a connection of its own: the server answers 413 from its
    // Content-Length, before reading any of it, and closes that connection. (A client that
    // writes the whole body before reading the answer sees the connection closed under it.)
    let request = format!(
        "POST /api/v1/jobs HTTP/1.1\r\nHost: podq\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{{\"experiments\": [\"xxxx",
        5 * 1024 * 1024
    );
    let (status, answer) = raw_exchange(&server, &request, Duration::from_secs(30));
    assert_error(status, &answer, 413, "body_too_large");
    assert_eq!(table_counts(&server).await, before);

    // Cancelling a job that already ended is a conflict.
    let job = server.job_of("exp07a").await;
    let id = job["id"].as_str().unwrap();
    let (status, _) = server.post(&format!("/jobs/{id}/cancel"), json!({})).await;
    assert_eq!(status, 200);
    let after_cancel = table_counts(&server).await;
    let (status, answer) = server.post(&format!("/jobs/{id}/cancel"), json!({})).await;
    assert_error(status, &answer, 409, "job_finished");
    assert_eq!(table_counts(&server).await, after_cancel);
    assert_ne!(before, after_cancel, "the cancel itself is a change");

    // YAML sent to validate: bombs and deep nesting are refused before they cost anything.
    let mut bomb = String::from("a: &a [\"x\",\"x\",\"x\",\"x\",\"x\",\"x\",\"x\",\"x\",\"x\"]\n");
    let mut prev = 'a';
    for name in 'b'..='k' {
        let refs = vec![format!("*{prev}"); 9].join(",");
        bomb.push_str(&format!("{name}: &{name} [{refs}]\n"));
        prev = name;
    }
    let (status, answer) = server
        .send(Method::POST, "/experiments/validate", bomb, &[])
        .await;
    assert_error(status, &answer, 422, "invalid_yaml");
    let deep = format!("a: {}1{}\n", "[".repeat(1000), "]".repeat(1000));
    let (status, answer) = server
        .send(Method::POST, "/experiments/validate", deep, &[])
        .await;
    assert_error(status, &answer, 422, "invalid_yaml");
    let (status, answer) = server
        .send(
            Method::POST,
            "/experiments/validate",
            "x".repeat(300 * 1024),
            &[],
        )
        .await;
    assert_error(status, &answer, 413, "body_too_large");
    assert_eq!(table_counts(&server).await, after_cancel);
}

async fn validate_resolves_a_document_against_the_catalog(store: StoreKind) {
    let server = Server::start_on(store).await;
    let doc = "defaults:\n  - /baseline\n  - override /arch: hidden256_heads4\n  - _self_\nrun_name: mine\nlr: 0.0002\n";
    let (status, answer) = server
        .send(Method::POST, "/experiments/validate", doc.into(), &[])
        .await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["valid"], true);
    assert_eq!(answer["config"]["arch"]["hidden_size"], 256);
    assert_eq!(answer["config"]["lr"], 0.0002);

    let broken = "defaults:\n  - /baseline\n  - _self_\nglobal_batch_size: 1000\nlr: fast\n";
    let (status, answer) = server
        .send(Method::POST, "/experiments/validate", broken.into(), &[])
        .await;
    assert_error(status, &answer, 422, "invalid_config");
    let findings = answer["error"]["details"]["findings"].as_array().unwrap();
    let codes: Vec<&str> = findings
        .iter()
        .map(|f| f["code"].as_str().unwrap())
        .collect();
    assert!(codes.contains(&"batch_not_divisible"), "{codes:?}");
    assert!(codes.contains(&"invalid_value"), "{codes:?}");
    let lr = findings.iter().find(|f| f["key"] == "lr").unwrap();
    assert_eq!(lr["line"], 5, "the finding points at the line: {lr}");

    let unknown_arch = "defaults:\n  - /baseline\n  - override /arch: hidden9999\n  - _self_\n";
    let (status, answer) = server
        .send(
            Method::POST,
            "/experiments/validate",
            unknown_arch.into(),
            &[],
        )
        .await;
    assert_error(status, &answer, 422, "invalid_config");
    assert!(answer.to_string().contains("unknown_option"), "{answer}");
}

async fn idempotency_key_returns_the_first_answer(store: StoreKind) {
    let server = Server::start_on(store).await;
    let body = json!({"group": "exp08-ema"}).to_string();
    let headers = [("idempotency-key", "submit-ema-1")];
    let (status, first) = server
        .send(Method::POST, "/jobs", body.clone(), &headers)
        .await;
    assert_eq!(status, 201, "{first}");
    let (status, second) = server.send(Method::POST, "/jobs", body, &headers).await;
    assert!(status == 201 || status == 200, "{second}");
    assert_eq!(first, second, "a retried request gets the first answer");
    assert_eq!(server.jobs().await.len(), 5);
    let (status, other) = server
        .send(
            Method::POST,
            "/jobs",
            json!({"group": "exp09-optimizer"}).to_string(),
            &headers,
        )
        .await;
    assert_error(status, &other, 422, "idempotency_key_reused");
    assert_eq!(server.jobs().await.len(), 5);
}

async fn cancel_requeue_and_priority(store: StoreKind) {
    let server = Server::start_on(store).await;
    server
        .post("/jobs", json!({"group": "exp07-precision"}))
        .await;
    let id = server.job_of("exp07c").await["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let (status, patched) = server
        .send(
            Method::PATCH,
            &format!("/jobs/{id}"),
            json!({"priority": 7}).to_string(),
            &[],
        )
        .await;
    assert_eq!(status, 200, "{patched}");
    assert_eq!(patched["priority"], 7);
    let (_, cancelled) = server.post(&format!("/jobs/{id}/cancel"), json!({})).await;
    assert_eq!(cancelled["state"], "cancelled");
    let (status, requeued) = server.post(&format!("/jobs/{id}/requeue"), json!({})).await;
    assert_eq!(status, 200, "{requeued}");
    assert_eq!(requeued["state"], "queued");
    let (status, answer) = server.post(&format!("/jobs/{id}/requeue"), json!({})).await;
    assert_error(status, &answer, 409, "job_active");
    let (_, events) = server.get(&format!("/jobs/{id}/events")).await;
    let kinds: Vec<&str> = events
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["kind"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, ["submitted", "priority", "cancelled", "requeued"]);
}

#[tokio::test]
async fn tokens_guard_state_changes() {
    let options = ServerOptions {
        env: vec![
            ("PODQ_ADMIN_TOKEN".into(), "admin-secret".into()),
            ("PODQ_WORKER_TOKEN".into(), "worker-secret".into()),
        ],
        ..ServerOptions::default()
    };
    let server = Server::start_with(options).await;
    let body = json!({"group": "exp07-precision"}).to_string();
    let (status, answer) = server.send(Method::POST, "/jobs", body.clone(), &[]).await;
    assert_error(status, &answer, 401, "unauthorized");
    let (status, answer) = server
        .send(
            Method::POST,
            "/jobs",
            body.clone(),
            &[("authorization", "Bearer wrong")],
        )
        .await;
    // A token the server does not know is not a role too small: 401.
    assert_error(status, &answer, 401, "unauthorized");
    let (status, answer) = server
        .send(
            Method::POST,
            "/jobs",
            body.clone(),
            &[("authorization", "Bearer worker-secret")],
        )
        .await;
    assert_error(status, &answer, 403, "forbidden");
    let (status, answer) = server
        .send(Method::POST, "/pods/p1/lease", json!({"accelerator": "v4-64", "hosts": 1, "state": "READY", "health": "HEALTHY", "wait_s": 0}).to_string(), &[("authorization", "Bearer admin-secret")])
        .await;
    assert_error(status, &answer, 403, "forbidden");
    assert!(
        server.jobs().await.is_empty(),
        "reads stay open, and nothing was submitted"
    );
    let (status, _) = server
        .send(
            Method::POST,
            "/jobs",
            body,
            &[("authorization", "Bearer admin-secret")],
        )
        .await;
    assert_eq!(status, 201);
    let log = std::fs::read_to_string(server.dir.path().join("server.log")).unwrap();
    assert!(!log.contains("admin-secret"), "tokens never reach the log");
}

#[test]
fn refuses_a_public_address_without_tokens() {
    let dir = tempfile::tempdir().unwrap();
    let output = Command::new(PODQ)
        .args(["server", "--listen", "0.0.0.0:0", "--db"])
        .arg(dir.path().join("podq.db"))
        .arg("--experiments")
        .arg(experiments_dir())
        .env_remove("PODQ_ADMIN_TOKEN")
        .env_remove("PODQ_WORKER_TOKEN")
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("without tokens"), "{stderr}");
}

#[test]
fn refuses_to_start_on_a_catalog_with_errors() {
    let dir = tempfile::tempdir().unwrap();
    let output = Command::new(PODQ)
        .args(["server", "--listen", "127.0.0.1:0", "--db"])
        .arg(dir.path().join("podq.db"))
        .arg("--experiments")
        .arg(original_configs())
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&output.stderr);
    // `podq validate`'s grouped report: the root cause once, with its count and fix.
    assert!(
        stderr.contains("the experiment catalog")
            && stderr.contains("error: 67 experiments have no `arch` config group: rename `arch_config/` to `arch/`"),
        "{stderr}"
    );
    let arch_lines = stderr.lines().filter(|l| l.contains("`arch`")).count();
    assert_eq!(arch_lines, 1, "one line per root cause: {stderr}");
    assert!(stderr.contains("podq validate --experiments"), "{stderr}");
}

async fn acknowledged_submissions_survive_sigkill(store: StoreKind) {
    let mut server = Server::start_on(store).await;
    let mut acknowledged = Vec::new();
    for group in [
        "exp01-model-scaling",
        "exp05-supervision-steps",
        "exp08-ema",
    ] {
        let (status, answer) = server.post("/jobs", json!({"group": group})).await;
        assert_eq!(status, 201, "{answer}");
        for job in answer["created"]
            .as_array()
            .unwrap()
            .iter()
            .chain(answer["linked"].as_array().unwrap())
        {
            acknowledged.push(job["job_id"].as_str().unwrap().to_owned());
        }
    }
    server.restart();
    let jobs = server.jobs().await;
    for id in &acknowledged {
        assert!(
            jobs.iter().any(|j| j["id"] == id.as_str()),
            "acknowledged job {id} lost in the crash"
        );
    }
    assert_eq!(jobs.len(), acknowledged.len());
}

#[test]
fn validate_cli_reports_both_layouts() {
    let ours = Command::new(PODQ)
        .args(["validate", "--experiments"])
        .arg(experiments_dir())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&ours.stdout);
    assert!(ours.status.success(), "{text}");
    assert!(
        text.contains("67 experiments in 14 groups, 54 distinct training configs"),
        "{text}"
    );
    assert!(text.contains("0 errors"), "{text}");

    let original = original_configs();
    let theirs = Command::new(PODQ)
        .args(["validate", "--experiments"])
        .arg(&original)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&theirs.stdout);
    assert!(
        !theirs.status.success(),
        "the original layout has errors: {text}"
    );
    // The missing `arch` is one root cause: reported once, with its count and its fix.
    assert!(
        text.contains(
            "67 experiments have no `arch` config group: rename `arch_config/` to `arch/`"
        ),
        "{text}"
    );
    assert!(text.contains("exp01c, exp02a_03, exp02b_03, exp03b, exp04b_1000, exp05_d, exp06_c, exp07b, exp08d, exp09a, exp09b, exp10b have the same training config"), "{text}");
    assert!(text.contains("exp06_e, exp06_f have"), "{text}");
    assert!(text.contains("exp09c, exp09e have"), "{text}");
    for flaw in [
        "unread_keys",
        "same_trained_run",
        "checkpoint_path_outside_group",
        "dataset_alias",
    ] {
        assert!(text.contains(flaw), "the report names {flaw}: {text}");
    }
    assert!(text.contains("exp10-position-encodings"), "{text}");
}

async fn schedules_submit_when_their_cron_fires(store: StoreKind) {
    let server = Server::start_on(store).await;
    let (status, answer) = server
        .post(
            "/schedules",
            json!({"cron": "61 * * * *", "submit": {"group": "exp07-precision"}}),
        )
        .await;
    assert_error(status, &answer, 422, "invalid_cron");
    let (status, answer) = server
        .post(
            "/schedules",
            json!({"cron": "* * * * *", "submit": {"group": "nope"}}),
        )
        .await;
    assert_error(status, &answer, 400, "unknown_group");
    // Every second (the 6-field form with seconds).
    let (status, schedule) = server
        .post(
            "/schedules",
            json!({"cron": "* * * * * *", "submit": {"group": "exp07-precision"}}),
        )
        .await;
    assert_eq!(status, 201, "{schedule}");
    let jobs = common::eventually(
        Duration::from_secs(30),
        "the schedule to submit",
        || async {
            let jobs = server.jobs().await;
            (jobs.len() == 3).then_some(jobs)
        },
    )
    .await;
    assert!(jobs.iter().all(|j| j["group"] == "exp07-precision"));
    let (_, listed) = server.get("/schedules").await;
    assert!(listed[0]["last_run_at"].is_string(), "{listed}");
    let id = schedule["id"].as_str().unwrap();
    let (status, _) = server
        .send(
            Method::DELETE,
            &format!("/schedules/{id}"),
            String::new(),
            &[],
        )
        .await;
    assert_eq!(status, 204);
    let (status, answer) = server
        .send(
            Method::DELETE,
            &format!("/schedules/{id}"),
            String::new(),
            &[],
        )
        .await;
    assert_error(status, &answer, 404, "not_found");
    // Firing again would only skip: deduplication holds for scheduled submissions too.
    assert_eq!(server.jobs().await.len(), 3);
}

/// A raw HTTP/1.1 exchange: what a slow or odd client sends, and the status and body it
/// gets, within `within`.
fn raw_exchange(server: &Server, request: &str, within: Duration) -> (u16, Value) {
    use std::io::{Read, Write};
    let address = server.url.trim_start_matches("http://");
    let mut stream = std::net::TcpStream::connect(address).unwrap();
    stream.set_read_timeout(Some(within)).unwrap();
    stream.write_all(request.as_bytes()).unwrap();
    let mut answer = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        match stream.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => {
                answer.extend_from_slice(&chunk[..n]);
                let text = String::from_utf8_lossy(&answer);
                if let Some((head, body)) = text.split_once("\r\n\r\n") {
                    let length = head
                        .lines()
                        .find_map(|l| {
                            l.to_ascii_lowercase()
                                .strip_prefix("content-length:")
                                .map(|v| v.trim().parse::<usize>().unwrap_or(0))
                        })
                        .unwrap_or(0);
                    if body.len() >= length {
                        break;
                    }
                }
            }
            Err(e) => panic!("no answer within {within:?}: {e}"),
        }
    }
    let text = String::from_utf8_lossy(&answer).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").expect("an HTTP answer");
    let status = head.split_whitespace().nth(1).unwrap().parse().unwrap();
    (status, serde_json::from_str(body).unwrap_or(Value::Null))
}

async fn a_body_that_never_comes_is_answered_408_and_changes_nothing(store: StoreKind) {
    let server = Server::start_on(store).await;
    let before = server.jobs().await.len();
    for path in ["/api/v1/jobs", "/api/v1/experiments/validate"] {
        let request = format!(
            "POST {path} HTTP/1.1\r\nHost: podq\r\nContent-Type: application/json\r\nContent-Length: 1000000\r\n\r\n{{"
        );
        let (status, body) = raw_exchange(&server, &request, Duration::from_secs(30));
        assert_eq!(status, 408, "{path}: {body}");
        assert_eq!(body["error"]["code"], "request_timeout", "{body}");
    }
    assert_eq!(server.jobs().await.len(), before);
}

/// A declared body over the limit is refused from its headers alone: `413`, not the `408`
/// that waiting for a body that never comes would give.
async fn an_oversized_content_length_is_answered_413_before_any_body(store: StoreKind) {
    let server = Server::start_on(store).await;
    let before = server.jobs().await.len();
    for path in [
        "/api/v1/jobs",
        "/api/v1/experiments/validate",
        "/api/v1/grant",
    ] {
        let method = if path.ends_with("grant") {
            "PUT"
        } else {
            "POST"
        };
        let request = format!(
            "{method} {path} HTTP/1.1\r\nHost: podq\r\nContent-Type: application/json\r\nContent-Length: 10000000000\r\n\r\n{{"
        );
        let (status, body) = raw_exchange(&server, &request, Duration::from_secs(30));
        assert_eq!(status, 413, "{path}: {body}");
        assert_eq!(body["error"]["code"], "body_too_large", "{body}");
        assert!(
            body["error"]["message"]
                .as_str()
                .unwrap()
                .contains("10000000000 bytes"),
            "{body}"
        );
    }
    assert_eq!(server.jobs().await.len(), before);
}

async fn every_error_is_json_even_from_the_http_layers(store: StoreKind) {
    let server = Server::start_on(store).await;
    // A method a path does not take.
    let (status, body) = raw_exchange(
        &server,
        "DELETE /api/v1/status HTTP/1.1\r\nHost: podq\r\nConnection: close\r\n\r\n",
        Duration::from_secs(10),
    );
    assert_eq!(status, 405);
    assert_eq!(body["error"]["code"], "method_not_allowed", "{body}");
    // A path segment that is not UTF-8.
    let (status, body) = raw_exchange(
        &server,
        "GET /api/v1/experiments/%FF HTTP/1.1\r\nHost: podq\r\nConnection: close\r\n\r\n",
        Duration::from_secs(10),
    );
    assert_eq!(status, 400);
    assert!(body["error"]["message"].is_string(), "{body}");
}

/// `podq server` with this `--database`: its exit code and what it said.
fn start_on_database(url: &str) -> (Option<i32>, String) {
    let output = Command::new(PODQ)
        .args(["server", "--listen", "127.0.0.1:0", "--database", url])
        .arg("--experiments")
        .arg(experiments_dir())
        .output()
        .unwrap();
    (
        output.status.code(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[test]
fn a_database_url_that_cannot_work_stops_the_start_and_says_what_was_tried() {
    // Nothing listens on port 1; the password must not show in what is printed.
    let (code, stderr) = start_on_database("postgres://podq:hunter2@127.0.0.1:1/podq");
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains("cannot open the database postgres://podq:***@127.0.0.1:1/podq"),
        "{stderr}"
    );
    assert!(!stderr.contains("hunter2"), "{stderr}");
    let (code, stderr) = start_on_database("mysql://127.0.0.1/podq");
    assert_ne!(code, Some(0), "{stderr}");
    assert!(
        stderr.contains("neither a postgres:// nor a sqlite:// URL"),
        "{stderr}"
    );
}

/// A database a newer podq has migrated is refused, not written with an older schema.
#[tokio::test]
async fn a_database_with_a_newer_schema_is_refused() {
    use sqlx::Connection;
    let database = common::postgres::PostgresDatabase::create().await;
    {
        let server = Server::start_on_url(&database.url).await;
        drop(server);
    }
    let mut conn = sqlx::PgConnection::connect(&database.url).await.unwrap();
    sqlx::query(
        "INSERT INTO _sqlx_migrations (version, description, success, checksum, execution_time) \
         VALUES (9999, 'from a newer podq', TRUE, '\\x00', 0)",
    )
    .execute(&mut conn)
    .await
    .unwrap();
    let (code, stderr) = start_on_database(&database.url);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains("migration 9999 was previously applied but is missing"),
        "{stderr}"
    );
}

/// A job's `actions` are what its state allows and its caller may do: its submitter and an
/// admin get the same, another submitter and a viewer none (each refused action says who
/// may). Each endpoint then accepts exactly what it listed: an action not listed is refused
/// (403 or 409) and changes nothing, and each listed one goes through.
#[tokio::test]
async fn a_jobs_actions_are_its_callers_and_its_endpoints_accept_exactly_them() {
    const ADMIN: &str = "admin-secret";
    let server = Server::start_with(ServerOptions {
        env: vec![("PODQ_ADMIN_TOKEN".into(), ADMIN.into())],
        ..ServerOptions::default()
    })
    .await;
    let call = |token: String, method: Method, path: String, body: Value| {
        let server = &server;
        async move {
            let auth = format!("Bearer {token}");
            let body = if body.is_null() {
                String::new()
            } else {
                body.to_string()
            };
            server
                .send(
                    method,
                    &path,
                    body,
                    &[
                        ("authorization", &auth),
                        ("content-type", "application/json"),
                    ],
                )
                .await
        }
    };
    let mut tokens = std::collections::BTreeMap::new();
    tokens.insert("admin", ADMIN.to_owned());
    for (name, role) in [
        ("alice", "submitter"),
        ("bob", "submitter"),
        ("vic", "viewer"),
    ] {
        let (status, added) = call(
            ADMIN.into(),
            Method::POST,
            "/users".into(),
            json!({"name": name, "role": role}),
        )
        .await;
        assert_eq!(status, 201, "{added}");
        tokens.insert(name, added["token"].as_str().unwrap().to_owned());
    }
    let alice = tokens["alice"].clone();
    // A job of alice's in `state` (queued, held or cancelled), new.
    let job_in = |state: &'static str| {
        let alice = alice.clone();
        async move {
            let (status, answer) = call(
                alice.clone(),
                Method::POST,
                "/jobs".into(),
                json!({"experiments": ["exp01a"], "force": true}),
            )
            .await;
            assert_eq!(status, 201, "{answer}");
            let id = answer["created"][0]["job_id"].as_str().unwrap().to_owned();
            let verb = match state {
                "queued" => None,
                "held" => Some("suspend"),
                "cancelled" => Some("cancel"),
                other => panic!("no way to {other}"),
            };
            if let Some(verb) = verb {
                let (status, answer) = call(
                    alice,
                    Method::POST,
                    format!("/jobs/{id}/{verb}"),
                    Value::Null,
                )
                .await;
                assert_eq!(status, 200, "{answer}");
                assert_eq!(answer["state"], state, "{answer}");
            }
            id
        }
    };
    // The call that takes `action` on job `id`.
    let act = |token: String, id: String, action: String| async move {
        let (method, path, body) = match action.as_str() {
            "reprioritise" => (Method::PATCH, format!("/jobs/{id}"), json!({"priority": 3})),
            "requeue_ignoring_stop_rules" => (
                Method::POST,
                format!("/jobs/{id}/requeue?ignore_stop_rules=true"),
                Value::Null,
            ),
            verb => (Method::POST, format!("/jobs/{id}/{verb}"), Value::Null),
        };
        call(token, method, path, body).await
    };
    let names = |list: &Value, key: Option<&str>| -> Vec<String> {
        list.as_array()
            .map(|a| {
                a.iter()
                    .map(|v| key.map_or(v, |k| &v[k]).as_str().unwrap().to_owned())
                    .collect()
            })
            .unwrap_or_default()
    };
    let every = [
        "cancel",
        "requeue",
        "requeue_ignoring_stop_rules",
        "suspend",
        "resume",
        "reprioritise",
    ];
    let by_state: [(&str, &[&str]); 3] = [
        ("queued", &["cancel", "suspend", "reprioritise"]),
        (
            "held",
            &[
                "cancel",
                "requeue",
                "requeue_ignoring_stop_rules",
                "resume",
                "reprioritise",
            ],
        ),
        ("cancelled", &["requeue", "requeue_ignoring_stop_rules"]),
    ];
    for (state, allowed) in by_state {
        let id = job_in(state).await;
        for (who, token) in &tokens {
            let (status, job) = call(
                token.clone(),
                Method::GET,
                format!("/jobs/{id}"),
                Value::Null,
            )
            .await;
            assert_eq!(status, 200, "{job}");
            let actions = names(&job["actions"], None);
            let refused = names(&job["refused_actions"], Some("action"));
            let theirs = matches!(*who, "alice" | "admin");
            if theirs {
                assert_eq!(actions, allowed, "{who} on a {state} job: {job}");
                assert!(refused.is_empty(), "{who} on a {state} job: {job}");
            } else {
                assert!(actions.is_empty(), "{who} on a {state} job: {job}");
                assert_eq!(refused, allowed, "{who} on a {state} job: {job}");
                for r in job["refused_actions"].as_array().unwrap() {
                    assert_eq!(r["only"], "alice or an admin", "{job}");
                }
            }
            // The list says the same to the same caller.
            let (_, page) = call(
                token.clone(),
                Method::GET,
                "/jobs?limit=1000".into(),
                Value::Null,
            )
            .await;
            let listed = page["jobs"]
                .as_array()
                .unwrap()
                .iter()
                .find(|j| j["id"] == id.as_str())
                .unwrap();
            assert_eq!(names(&listed["actions"], None), actions, "{listed}");
            // What is not listed is refused, and changes nothing.
            for action in every.iter().filter(|a| !actions.iter().any(|b| b == *a)) {
                let (status, answer) = act(token.clone(), id.clone(), (*action).to_owned()).await;
                assert!(
                    status == 403 || status == 409,
                    "{who} may not {action} a {state} job, yet {status}: {answer}"
                );
                let after = server.job(&id).await;
                assert_eq!(after["state"], state, "{who}'s {action}: {after}");
                assert_eq!(after["priority"], 0, "{who}'s {action}: {after}");
            }
        }
        // Each listed action goes through, for its submitter and for an admin alike.
        for (n, action) in allowed.iter().enumerate() {
            let id = job_in(state).await;
            let who = if n % 2 == 0 { "alice" } else { "admin" };
            let (status, answer) = act(tokens[who].clone(), id.clone(), (*action).to_owned()).await;
            assert_eq!(status, 200, "{who}'s {action} of a {state} job: {answer}");
            assert!(
                answer["actions"].is_array(),
                "the answer lists what comes next: {answer}"
            );
        }
    }
}
