//! Every boundary of the team model attacked from outside, on real servers
//! (docs/security.md): the role matrix of every documented operation, a pod-limited worker
//! token against another pod's lease in every spelling of its id, worker events posing as
//! people, another site's page against a tokenless server, catalog paths out of the root, a
//! disabled token on an open stream; checkpoint URIs that would be commands,
//! worker calls on a server without a worker token, pool reports out of bounds, a submitter's
//! evicting class, a framed dashboard, and two workers of one pod racing for leases; names
//! of megabytes, leases for slice types podq does not know, classes and priorities beyond a
//! submitter's, formulas in CSV cells, another caller's idempotency key, and a trainer
//! command that quotes a placeholder.

mod common;

use std::time::Duration;

use common::{Server, ServerOptions};
use futures::StreamExt;
use reqwest::Method;
use serde_json::{json, Value};

const ADMIN: &str = "security-test-admin-token";
const WORKER: &str = "security-test-worker-token";

async fn team_server(experiments: Option<&std::path::Path>) -> Server {
    let mut options = ServerOptions {
        env: vec![
            ("PODQ_ADMIN_TOKEN".into(), ADMIN.into()),
            ("PODQ_WORKER_TOKEN".into(), WORKER.into()),
        ],
        ..ServerOptions::default()
    };
    if let Some(dir) = experiments {
        options.experiments = dir.to_owned();
    }
    Server::start_with(options).await
}

/// One call with `token` (None: no Authorization header), a JSON body and extra headers.
async fn call(
    server: &Server,
    token: Option<&str>,
    method: Method,
    path: &str,
    body: Value,
    headers: &[(&str, &str)],
) -> (u16, Value) {
    let auth = token.map(|t| format!("Bearer {t}"));
    let mut all: Vec<(&str, &str)> = headers.to_vec();
    if let Some(auth) = &auth {
        all.push(("authorization", auth));
    }
    if !headers
        .iter()
        .any(|(n, _)| n.eq_ignore_ascii_case("content-type"))
    {
        all.push(("content-type", "application/json"));
    }
    let body = if body.is_null() {
        String::new()
    } else {
        body.to_string()
    };
    server.send(method, path, body, &all).await
}

/// Submits one experiment as the admin, answering the job's id.
async fn submit(server: &Server, experiment: &str) -> String {
    let body = json!({"experiments": [experiment]});
    let (status, answer) = call(server, Some(ADMIN), Method::POST, "/jobs", body, &[]).await;
    assert_eq!(status, 201, "{answer}");
    answer["created"][0]["job_id"].as_str().unwrap().to_owned()
}

async fn add_person(server: &Server, name: &str, role: &str, pods: Option<&[&str]>) -> String {
    let mut body = json!({"name": name, "role": role});
    if let Some(pods) = pods {
        body["pods"] = json!(pods);
    }
    let (status, added) = call(server, Some(ADMIN), Method::POST, "/users", body, &[]).await;
    assert_eq!(status, 201, "{added}");
    added["token"].as_str().unwrap().to_owned()
}

/// Leases the queue's next job to `pod` with `token`, answering the lease's id.
async fn lease_for(server: &Server, pod: &str, token: &str) -> String {
    let ask = json!({"accelerator": "v4-64", "hosts": 4, "state": "READY", "health": "HEALTHY", "wait_s": 0});
    let path = format!("/pods/{pod}/lease");
    let (status, lease) = call(server, Some(token), Method::POST, &path, ask, &[]).await;
    assert_eq!(status, 200, "{lease}");
    lease["lease_id"].as_str().unwrap().to_owned()
}

/// The newest audit entry of `job` whose action is `action`, as an admin reads it.
async fn audit_entry(server: &Server, job: &str, action: &str) -> Value {
    let path = format!("/audit?job={job}");
    let (_, trail) = call(server, Some(ADMIN), Method::GET, &path, Value::Null, &[]).await;
    trail["entries"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["action"] == action)
        .cloned()
        .unwrap_or_else(|| panic!("no {action} in the trail: {trail}"))
}

/// The rows that a refused call must not change.
async fn snapshot(server: &Server) -> Vec<(&'static str, i64)> {
    let mut counts = Vec::new();
    for table in [
        "jobs",
        "attempts",
        "events",
        "users",
        "schedules",
        "checkpoints",
        "metric_series",
        "log_counts",
        "job_links",
        "grant_terms",
        "webhooks",
    ] {
        counts.push((table, server.count_rows(table).await));
    }
    counts
}

/// The role an operation needs, as the OpenAPI document declares it: the role named in its
/// security requirement (OpenAPI 3.1 lets a bearer scheme's requirement list roles), else a
/// read (no requirement).
fn needed(operation: &Value) -> String {
    let requirement = operation["security"]
        .as_array()
        .and_then(|s| s.first())
        .and_then(|r| r.as_object())
        .and_then(|r| r.values().next())
        .and_then(|roles| roles.as_array())
        .and_then(|roles| roles.first())
        .and_then(|role| role.as_str());
    requirement.unwrap_or("read").to_owned()
}

/// Whether a caller of `role` (None: no token) may make a call that needs `need`, on a
/// loopback server where admin and worker tokens exist (reads are open on loopback).
fn allowed(role: Option<&str>, need: &str) -> bool {
    match (role, need) {
        (_, "read") => true,
        (Some("worker"), "worker") => true,
        (_, "worker") => false,
        (None, _) => false,
        (Some("admin"), _) => true,
        (Some("submitter"), "submitter") => true,
        _ => false,
    }
}

#[tokio::test]
async fn the_role_matrix_of_every_documented_operation_holds() {
    let server = team_server(None).await;
    let viewer = add_person(&server, "vera", "viewer", None).await;
    let submitter = add_person(&server, "sam", "submitter", None).await;
    let (_, doc) = server.get("/openapi.json").await;
    let roles: [(Option<&str>, Option<&str>); 5] = [
        (None, None),
        (Some("viewer"), Some(viewer.as_str())),
        (Some("submitter"), Some(submitter.as_str())),
        (Some("admin"), Some(ADMIN)),
        (Some("worker"), Some(WORKER)),
    ];
    let id = uuid::Uuid::new_v4().to_string();
    let mut operations = Vec::new();
    for (path, item) in doc["paths"].as_object().expect("paths") {
        for (method, operation) in item.as_object().expect("a path item") {
            if !["get", "put", "post", "delete", "patch"].contains(&method.as_str()) {
                continue;
            }
            let concrete = path
                .trim_start_matches("/api/v1")
                .replace("{id}", &id)
                .replace("{name}", "nobody");
            operations.push((path.clone(), method.clone(), concrete, needed(operation)));
        }
    }
    assert!(operations.len() > 40, "{} operations", operations.len());
    // Every refused call first: together they must change no row.
    let before = snapshot(&server).await;
    let (mut calls, mut refused) = (0, 0);
    for (path, method, concrete, need) in &operations {
        for (role, token) in roles {
            if allowed(role, need) {
                continue;
            }
            let method = Method::from_bytes(method.to_uppercase().as_bytes()).unwrap();
            let (status, answer) = if path.starts_with("/api/v1") {
                call(&server, token, method.clone(), concrete, json!({}), &[]).await
            } else {
                let response = server
                    .client
                    .request(method.clone(), format!("{}{path}", server.url))
                    .send()
                    .await
                    .unwrap();
                (response.status().as_u16(), Value::Null)
            };
            calls += 1;
            refused += 1;
            assert!(
                status == 401 || status == 403,
                "{method} {path} as {role:?} (needs {need}): {status} {answer}"
            );
        }
    }
    assert_eq!(
        snapshot(&server).await,
        before,
        "a refused call changed a row"
    );
    // And every allowed one gets past the door (a 404 for the made-up id is fine).
    for (path, method, concrete, need) in &operations {
        if path.ends_with("/events/stream") || !path.starts_with("/api/v1") {
            continue;
        }
        for (role, token) in roles {
            if !allowed(role, need) {
                continue;
            }
            let method = Method::from_bytes(method.to_uppercase().as_bytes()).unwrap();
            let (status, answer) =
                call(&server, token, method.clone(), concrete, json!({}), &[]).await;
            calls += 1;
            assert!(
                status != 401 && status != 403,
                "{method} {path} as {role:?} (needs {need}) was refused: {status} {answer}"
            );
        }
    }
    eprintln!(
        "role matrix: {} operations x {} callers, {calls} calls, {refused} refused",
        operations.len(),
        roles.len()
    );
}

/// Every spelling of a lease id a path may carry.
fn spellings(lease: &str) -> Vec<String> {
    let simple = lease.replace('-', "");
    vec![
        lease.to_owned(),
        // One character percent-encoded.
        format!("%{:02X}{}", lease.as_bytes()[0], &lease[1..]),
        // Wrapped in encoded braces, as `Uuid::parse_str` accepts.
        format!("%7B{lease}%7D"),
        lease.to_uppercase(),
        simple,
        format!("urn:uuid:{lease}"),
    ]
}

#[tokio::test]
async fn a_pod_limited_token_cannot_act_on_another_pods_lease_however_spelt() {
    let server = team_server(None).await;
    let pod_a = add_person(&server, "pod-a-worker", "worker", Some(&["pod-a"])).await;
    let job = submit(&server, "exp07a").await;
    let lease_id = lease_for(&server, "pod-b", WORKER).await;
    let before = snapshot(&server).await;
    let calls: Vec<(&str, Value)> = vec![
        (
            "heartbeat",
            json!({"phase": "running", "hosts_alive": [true, true, true, true]}),
        ),
        (
            "metrics",
            json!({"points": [{"step": 1, "values": {"loss": 1.0}}]}),
        ),
        (
            "logs",
            json!({"lines": [{"host": 0, "offset": 0, "at": "2026-11-28T00:00:00Z", "text": "forged"}]}),
        ),
        (
            "checkpoints",
            json!({"checkpoints": [{"step": 9999, "uri": "gs://evil/ckpt", "committed": true}]}),
        ),
        (
            "events",
            json!({"events": [{"kind": "resume_fallback", "message": "forged"}]}),
        ),
        (
            "links",
            json!({"links": [{"name": "wandb", "url": "https://evil.example/"}]}),
        ),
        ("finish", json!({"outcome": "succeeded", "exit_codes": [0]})),
    ];
    let mut tried = 0;
    for spelling in spellings(&lease_id) {
        for (what, body) in &calls {
            let path = format!("/leases/{spelling}/{what}");
            let (status, answer) = call(
                &server,
                Some(&pod_a),
                Method::POST,
                &path,
                body.clone(),
                &[],
            )
            .await;
            tried += 1;
            assert_eq!(status, 403, "{path}: {answer}");
            assert_eq!(
                answer["error"]["code"], "pod_not_allowed",
                "{path}: {answer}"
            );
        }
    }
    assert_eq!(
        snapshot(&server).await,
        before,
        "a refused call changed a row"
    );
    assert_eq!(server.job(&job).await["state"], "leased");
    // A lease id that does not parse is 400, never a skipped check.
    for bad in ["not-a-lease", "%7Bnope%7D", "..%2F..%2Fjobs"] {
        let (status, answer) = call(
            &server,
            Some(&pod_a),
            Method::POST,
            &format!("/leases/{bad}/finish"),
            json!({"outcome": "succeeded"}),
            &[],
        )
        .await;
        assert!(status == 400 || status == 404, "{bad}: {status} {answer}");
        assert_ne!(status / 100, 2, "{bad}: {answer}");
    }
    // The pod's own worker may, and the audit names the pod and whose token spoke for it.
    let (status, answer) = call(
        &server,
        Some(WORKER),
        Method::POST,
        &format!("/leases/{}/events", spellings(&lease_id)[2]),
        json!({"events": [{"kind": "host_cleanup", "message": "cleaned host 0"}]}),
        &[],
    )
    .await;
    assert_eq!(status, 204, "{answer}");
    let cleanup = audit_entry(&server, &job, "host_cleanup").await;
    assert_eq!(cleanup["by"], "worker:pod-b", "{cleanup}");
    assert_eq!(cleanup["token_holder"], "worker", "{cleanup}");
    // A pod-limited token of pod-a still leases for pod-a.
    let (status, _) = call(
        &server,
        Some(&pod_a),
        Method::POST,
        "/pods/pod-a/lease",
        json!({"accelerator": "v4-64", "hosts": 4, "state": "READY", "health": "HEALTHY", "wait_s": 0}),
        &[],
    )
    .await;
    assert!(status == 200 || status == 204, "{status}");
    eprintln!("lease spellings: {tried} calls of another pod's token refused");
}

#[tokio::test]
async fn worker_events_cannot_pose_as_people() {
    let server = team_server(None).await;
    let job = submit(&server, "exp07a").await;
    let events = format!(
        "/leases/{}/events",
        lease_for(&server, "pod-b", WORKER).await
    );
    let before = server.count_rows("events").await;
    for kind in ["cancelled", "user_added", "submitted", "priority", "leased"] {
        let (status, answer) = call(
            &server,
            Some(WORKER),
            Method::POST,
            &events,
            json!({"events": [{"kind": kind, "message": "by alice"}]}),
            &[],
        )
        .await;
        assert_eq!(status, 422, "{kind}: {answer}");
        assert_eq!(answer["error"]["code"], "unknown_event_kind", "{answer}");
    }
    let (status, answer) = call(
        &server,
        Some(WORKER),
        Method::POST,
        "/pods/pod-b/report",
        json!({"accelerator": "v4-64", "hosts": 4, "state": "READY", "health": "HEALTHY",
               "event": {"kind": "user_disabled", "message": "by alice"}}),
        &[],
    )
    .await;
    assert_eq!(status, 422, "{answer}");
    assert_eq!(server.count_rows("events").await, before);
    // A known kind's message is kept as one printable line, and bounded.
    let forged = format!("cleaned\ncancelled by alice\u{1b}[2J{}", "x".repeat(10_000));
    let (status, answer) = call(
        &server,
        Some(WORKER),
        Method::POST,
        &events,
        json!({"events": [{"kind": "host_cleanup", "message": forged}]}),
        &[],
    )
    .await;
    assert_eq!(status, 204, "{answer}");
    let stored = audit_entry(&server, &job, "host_cleanup").await;
    let message = stored["message"].as_str().unwrap();
    assert!(!message.chars().any(char::is_control), "{message:?}");
    assert!(
        message.starts_with("cleaned\\ncancelled by alice\\u{1b}[2J"),
        "{message:?}"
    );
    assert!(message.len() <= 4096, "{} bytes", message.len());
    assert_eq!(stored["by"], "worker:pod-b");
}

#[tokio::test]
async fn another_sites_page_cannot_drive_a_tokenless_server() {
    // `podq up`'s default: loopback, no tokens.
    let server = Server::start().await;
    let before = snapshot(&server).await;
    let eve = json!({"name": "eve", "role": "admin"});
    // What an HTML form can send: text/plain, urlencoded, multipart.
    for kind in [
        "text/plain",
        "application/x-www-form-urlencoded",
        "multipart/form-data; boundary=x",
    ] {
        for path in ["/users", "/jobs"] {
            let body = if path == "/users" {
                eve.clone()
            } else {
                json!({"group": "exp07-precision"})
            };
            let (status, answer) = call(
                &server,
                None,
                Method::POST,
                path,
                body,
                &[("content-type", kind)],
            )
            .await;
            assert_eq!(status, 415, "{path} as {kind}: {answer}");
            assert_eq!(answer["error"]["code"], "unsupported_media_type");
        }
    }
    // Another site's Origin, whatever the body's type.
    let (status, answer) = call(
        &server,
        None,
        Method::POST,
        "/jobs",
        json!({"group": "exp07-precision"}),
        &[("origin", "https://evil.example")],
    )
    .await;
    assert_eq!(status, 403, "{answer}");
    assert_eq!(answer["error"]["code"], "cross_origin");
    let (status, _) = call(
        &server,
        None,
        Method::POST,
        "/jobs",
        json!({"group": "exp07-precision"}),
        &[("origin", "null")],
    )
    .await;
    assert_eq!(status, 403);
    // A rebound name: the page's own host, resolving to 127.0.0.1.
    for method in [Method::GET, Method::POST] {
        let (status, answer) = call(
            &server,
            None,
            method.clone(),
            "/jobs",
            json!({"group": "exp07-precision"}),
            &[("host", "rebind.evil.example:8080")],
        )
        .await;
        assert_eq!(status, 421, "{method}: {answer}");
        assert_eq!(answer["error"]["code"], "unknown_host");
    }
    // No token: no credential is made, even where no call is checked.
    let (status, answer) = call(&server, None, Method::POST, "/users", eve, &[]).await;
    assert_eq!(status, 403, "{answer}");
    assert_eq!(answer["error"]["code"], "token_required");
    assert!(answer.get("token").is_none(), "{answer}");
    assert_eq!(
        snapshot(&server).await,
        before,
        "a refused call changed a row"
    );
    // The server's own page still works: same origin, JSON.
    let origin = server.url.clone();
    let (status, answer) = call(
        &server,
        None,
        Method::POST,
        "/jobs",
        json!({"experiments": ["exp07a"]}),
        &[("origin", &origin)],
    )
    .await;
    assert_eq!(status, 201, "{answer}");
}

#[tokio::test]
async fn the_catalog_stays_inside_the_catalog() {
    let root = common::shared_tempdir();
    let catalog = root.path().join("catalog");
    common::copy_dir(&common::experiments_dir(), &catalog);
    let outside = root.path().join("outside");
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::write(outside.join("leaked-secret-name.yaml"), "lr: 1\n").unwrap();
    std::os::unix::fs::symlink(&outside, catalog.join("linked")).unwrap();
    let server = team_server(Some(&catalog)).await;
    // (entry, whether it must be named as leaving the catalog): an absolute path is read as
    // Hydra's `/group`, under the root, where it names nothing.
    let absolute = outside.display().to_string();
    let entries = [
        ("- ../outside: leaked-secret-name".to_owned(), true),
        ("- ../outside: nothing-here".to_owned(), true),
        ("- ../outside/leaked-secret-name".to_owned(), true),
        ("- linked: leaked-secret-name".to_owned(), true),
        ("- linked: nothing-here".to_owned(), true),
        ("- linked/leaked-secret-name".to_owned(), true),
        // A missing file behind the symlink reads as outside too: nothing tells what is there.
        ("- linked/nothing-here".to_owned(), true),
        (format!("- {absolute}: nothing-here"), false),
    ];
    for (entry, named_outside) in entries {
        let doc = format!("defaults:\n  - /baseline\n  {entry}\n  - _self_\nrun_name: mine\n");
        let response = server
            .client
            .post(server.api("/experiments/validate"))
            .header("content-type", "application/yaml")
            .body(doc)
            .send()
            .await
            .unwrap();
        let status = response.status().as_u16();
        let text = response.text().await.unwrap();
        assert_eq!(status, 422, "{entry}: {text}");
        if named_outside {
            assert!(text.contains("outside_catalog"), "{entry}: {text}");
        }
        assert!(!text.contains("leaked-secret-name.yaml"), "{entry}: {text}");
        assert!(!text.contains("available: leaked"), "{entry}: {text}");
    }
}

#[tokio::test]
async fn an_open_stream_ends_when_its_token_is_disabled() {
    let server = team_server(None).await;
    let viewer = add_person(&server, "vic", "viewer", None).await;
    let response = server
        .client
        .get(server.api("/events/stream"))
        .bearer_auth(&viewer)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let mut body = response.bytes_stream();
    let (status, answer) = call(
        &server,
        Some(ADMIN),
        Method::POST,
        "/users/vic/disable",
        Value::Null,
        &[],
    )
    .await;
    assert_eq!(status, 200, "{answer}");
    // The stream ends within a few seconds (the check runs every second; SSE keep-alives
    // come every 15 s, so an end before then is the server closing it).
    let ended = tokio::time::timeout(Duration::from_secs(10), async {
        while let Some(chunk) = body.next().await {
            if chunk.is_err() {
                break;
            }
        }
    })
    .await;
    assert!(
        ended.is_ok(),
        "the stream was still open 10 s after the disable"
    );
    // And the token is refused at once.
    let (status, _) = call(
        &server,
        Some(&viewer),
        Method::GET,
        "/whoami",
        Value::Null,
        &[],
    )
    .await;
    assert_eq!(status, 401);
}

#[tokio::test]
async fn a_worker_token_makes_no_persons_change_nor_an_unbounded_pool() {
    // The worker's is the only token: user calls are not checked, yet a worker's token is
    // no person's.
    let server = Server::start_with(ServerOptions {
        env: vec![("PODQ_WORKER_TOKEN".into(), WORKER.into())],
        ..ServerOptions::default()
    })
    .await;
    let before = snapshot(&server).await;
    let eve = json!({"name": "eve", "role": "admin"});
    let (status, answer) = call(&server, Some(WORKER), Method::POST, "/users", eve, &[]).await;
    assert_eq!(status, 403, "{answer}");
    let job = json!({"experiments": ["exp07a"]});
    let (status, answer) = call(&server, Some(WORKER), Method::POST, "/jobs", job, &[]).await;
    assert_eq!(status, 403, "{answer}");
    // A pool's report the plan would play out without end, or that names no pod.
    let report = |max_slices: u64, pod: &str| {
        json!({"accelerator": "v4-64", "max_slices": max_slices, "zones": [],
               "slices": [{"pod": pod, "zone": "zone-a", "state": "ready",
                           "created_at": "2026-11-28T00:00:00Z"}]})
    };
    for (body, what) in [
        (report(4_294_967_295, "p-1"), "max_slices"),
        (report(2, "p-1\n\u{1b}[2J"), "a pod name"),
        (report(2, &"p".repeat(64)), "a long pod name"),
    ] {
        assert_pool_report_refused(&server, body, what).await;
    }
    let (_, pools) = server.get("/pools").await;
    assert_eq!(pools["pools"], json!([]), "a refused report is not kept");
    assert_eq!(
        snapshot(&server).await,
        before,
        "a refused call changed a row"
    );
}

/// Pool `x`'s report `body`, sent with the worker's token, is 422 `invalid_pool_report`.
async fn assert_pool_report_refused(server: &Server, body: Value, what: &str) {
    let (status, answer) = call(
        server,
        Some(WORKER),
        Method::POST,
        "/pools/x/report",
        body,
        &[],
    )
    .await;
    assert_eq!(status, 422, "{what}: {answer}");
    assert_eq!(answer["error"]["code"], "invalid_pool_report", "{answer}");
}

/// Runs `sql` on the server's SQLite file, as an older release might have left a row.
async fn write_row(server: &Server, sql: &str) {
    use sqlx::{ConnectOptions, Connection};
    let mut conn = sqlx::sqlite::SqliteConnectOptions::new()
        .filename(server.db())
        .busy_timeout(Duration::from_secs(10))
        .connect()
        .await
        .expect("open the database");
    sqlx::query(sqlx::AssertSqlSafe(sql.to_owned()))
        .execute(&mut conn)
        .await
        .expect("write the row");
    conn.close().await.unwrap();
}

#[tokio::test]
async fn a_checkpoint_uri_is_data_and_never_a_command() {
    let server = team_server(None).await;
    let id = submit(&server, "exp01a").await;
    let worker = server.worker(
        "pod-c",
        2,
        &["--token", WORKER, "--trainer-env", "PODQ_SIM_RUN_SECS=15"],
    );
    let kept = server
        .committed_at_least(&id, 1000, Duration::from_secs(120))
        .await;
    let job = server.job(&id).await;
    let dir = job["checkpoint_dir"].as_str().unwrap().to_owned();
    let lease = job["attempts"][0]["lease_id"]
        .as_str()
        .unwrap_or_else(|| panic!("no lease in {job}"))
        .to_owned();
    // Each payload, if a shell ever read it, makes a file beside the checkpoint directory
    // (the trainer's environment names the directory; a file name holds no `/`).
    let ran = |tag: &str| std::path::PathBuf::from(format!("{dir}.{tag}"));
    let payload = |tag: &str| format!("$(touch${{IFS}}$PODQ_CHECKPOINT_DIR.{tag})");

    // 1. The lease holder reports hostile URIs: each 422, nothing stored.
    let before = snapshot(&server).await;
    let path = format!("/leases/{lease}/checkpoints");
    for (step, uri, what) in [
        (
            1_000_000_000,
            format!("{dir}/x{}/814", payload("reported")),
            "a command",
        ),
        (
            1_000_000_000,
            format!("{dir}/814"),
            "another step's directory",
        ),
        (814, format!("{dir}/../exp01b/814"), "a way out"),
        (814, format!("{dir}x/814"), "another job's directory"),
        (814, format!("{dir}/81\n4"), "a control character"),
    ] {
        let body = json!({"checkpoints": [{"step": step, "uri": uri, "committed": true}]});
        let (status, answer) = call(&server, Some(WORKER), Method::POST, &path, body, &[]).await;
        assert_eq!(status, 422, "{what}: {answer}");
        assert_eq!(
            answer["error"]["code"], "invalid_checkpoint_uri",
            "{answer}"
        );
    }
    assert_eq!(
        snapshot(&server).await,
        before,
        "a refused checkpoint changed a row"
    );

    // 2. A trainer names a committed step directory with a command in it: the worker never
    //    reports it, so it is never a resume point.
    let hostile_dir = format!("{dir}/x{}_900000000", payload("trainer"));
    std::fs::create_dir_all(&hostile_dir).unwrap();
    std::fs::write(format!("{hostile_dir}/_CHECKPOINT_METADATA"), b"{}").unwrap();

    // 3. A URI an older release stored, as the job's resume point and as a checkpoint.
    let stored = format!("{dir}/x{}/950000000", payload("stored"));
    let quoted = stored.replace('\'', "''");
    write_row(
        &server,
        &format!(
            "UPDATE jobs SET resume_from = '{quoted}', resume_step = 950000000 WHERE id = '{id}'"
        ),
    )
    .await;
    write_row(
        &server,
        &format!(
            "INSERT INTO checkpoints (job_id, step, uri, committed, attempt, seen_at) \
             VALUES ('{id}', 950000000, '{quoted}', 1, 1, 0)"
        ),
    )
    .await;

    worker.control("preempt");
    let job = server
        .wait_state(&id, "succeeded", Duration::from_secs(180))
        .await;
    let attempts = job["attempts"].as_array().unwrap();
    assert_eq!(attempts[0]["outcome"], "preempted", "{job}");
    let resumed_from = attempts[1]["resume_from"].as_str().unwrap_or_default();
    let name = resumed_from.strip_prefix(&format!("{dir}/")).unwrap_or("");
    assert!(
        !name.is_empty() && name.bytes().all(|b| b.is_ascii_digit()),
        "the second attempt resumed from {resumed_from:?}, not a plain step of {dir}"
    );
    assert!(attempts[1]["start_step"].as_i64().unwrap() >= kept, "{job}");
    assert_eq!(job["failures"], 0, "{job}");
    for tag in ["reported", "trainer", "stored"] {
        assert!(!ran(tag).exists(), "the {tag} URI ran as a command");
    }
    let (_, events) = server.get(&format!("/jobs/{id}/events")).await;
    assert!(
        !events.to_string().contains("900000000"),
        "the trainer's hostile step directory reached the server: {events}"
    );
}

#[tokio::test]
async fn worker_calls_need_a_worker_token_once_any_credential_exists() {
    let server = Server::start_with(ServerOptions {
        env: vec![("PODQ_ADMIN_TOKEN".into(), ADMIN.into())],
        ..ServerOptions::default()
    })
    .await;
    let id = submit(&server, "exp07a").await;
    let before = snapshot(&server).await;
    let ask = json!({"accelerator": "v4-64", "hosts": 4, "state": "READY", "health": "HEALTHY", "wait_s": 0});
    for (token, expected) in [(None, 401), (Some("not-a-token"), 401), (Some(ADMIN), 403)] {
        let (status, answer) = call(
            &server,
            token,
            Method::POST,
            "/pods/anon-pod/lease",
            ask.clone(),
            &[],
        )
        .await;
        assert_eq!(status, expected, "{token:?}: {answer}");
    }
    let report = json!({"accelerator": "v4-64", "max_slices": 1, "zones": [], "slices": []});
    let (status, answer) = call(&server, None, Method::POST, "/pools/p/report", report, &[]).await;
    assert_eq!(status, 401, "{answer}");
    assert_eq!(
        snapshot(&server).await,
        before,
        "a refused call changed a row"
    );
    assert_eq!(server.job(&id).await["state"], "queued");
}

#[tokio::test]
async fn a_pool_report_is_bounded_in_value_and_its_messages_escaped() {
    let server = team_server(None).await;
    let before = snapshot(&server).await;
    let now = chrono::Utc::now();
    let at = |offset: chrono::Duration| (now + offset).to_rfc3339();
    let slice = |pod: &str, created: String| json!({"pod": pod, "zone": "zone-a", "state": "creating", "created_at": created});
    let report = |slices: Vec<Value>, hours: f64| {
        json!({"accelerator": "v4-64", "max_slices": 2, "zones": [],
               "slices": slices, "slice_hours": hours})
    };
    let fresh = at(chrono::Duration::zero());
    for (body, what) in [
        (report(vec![], -1e12), "negative slice hours"),
        (
            report(vec![slice("x-1", at(chrono::Duration::hours(3)))], 0.0),
            "a slice made in the future",
        ),
        (
            report(vec![slice("x-1", at(-chrono::Duration::days(3)))], 0.0),
            "a new slice made days ago",
        ),
        (
            report(
                (1..=5)
                    .map(|i| slice(&format!("x-{i}"), fresh.clone()))
                    .collect(),
                0.0,
            ),
            "more slices than twice max_slices",
        ),
    ] {
        assert_pool_report_refused(&server, body, what).await;
    }
    let (_, pools) = server.get("/pools").await;
    assert_eq!(pools["pools"], json!([]), "a refused report is not kept");
    assert_eq!(
        snapshot(&server).await,
        before,
        "a refused report changed a row"
    );

    // A report within bounds is taken; its event's message is bounded and escaped.
    let mut body = report(vec![slice("x-1", fresh)], 0.5);
    let long = format!("\u{1b}[2J{}", "z".repeat(10_000));
    body["events"] = json!([{"kind": "zone_blocked", "message": long}]);
    let (status, answer) = call(
        &server,
        Some(WORKER),
        Method::POST,
        "/pools/x/report",
        body,
        &[],
    )
    .await;
    assert_eq!(status, 200, "{answer}");
    let (_, trail) = call(
        &server,
        Some(ADMIN),
        Method::GET,
        "/audit",
        Value::Null,
        &[],
    )
    .await;
    let entry = trail["entries"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["action"] == "zone_blocked")
        .cloned()
        .unwrap_or_else(|| panic!("no zone_blocked in {trail}"));
    let message = entry.to_string();
    assert!(!message.contains('\u{1b}'), "{message}");
    assert!(message.len() < 6_000, "the message was kept whole");
}

#[tokio::test]
async fn a_class_that_evicts_is_not_every_submitters_to_choose() {
    let server = team_server(None).await;
    let sam = add_person(&server, "sam", "submitter", None).await;
    let before = snapshot(&server).await;
    let urgent = json!({"experiments": ["exp07a"], "priority_class": "urgent"});
    let (status, answer) = call(&server, Some(&sam), Method::POST, "/jobs", urgent, &[]).await;
    assert_eq!(status, 403, "{answer}");
    assert_eq!(answer["error"]["code"], "class_not_allowed", "{answer}");
    assert_eq!(
        snapshot(&server).await,
        before,
        "a refused submit changed a row"
    );
    let normal = json!({"experiments": ["exp07a"]});
    let (status, answer) = call(&server, Some(&sam), Method::POST, "/jobs", normal, &[]).await;
    assert_eq!(status, 201, "{answer}");
    let id = answer["created"][0]["job_id"].as_str().unwrap().to_owned();
    let path = format!("/jobs/{id}");
    let change = json!({"priority_class": "urgent"});
    let (status, answer) = call(
        &server,
        Some(&sam),
        Method::PATCH,
        &path,
        change.clone(),
        &[],
    )
    .await;
    assert_eq!(status, 403, "{answer}");
    assert_eq!(answer["error"]["code"], "class_not_allowed", "{answer}");
    assert_eq!(server.job(&id).await["priority_class"], "normal");
    // An admin may.
    let (status, answer) = call(&server, Some(ADMIN), Method::PATCH, &path, change, &[]).await;
    assert_eq!(status, 200, "{answer}");
}

#[tokio::test]
async fn the_dashboard_cannot_be_framed() {
    let server = Server::start().await;
    for path in ["/", "/web/app.js"] {
        let response = server
            .client
            .get(format!("{}{path}", server.url))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200, "{path}");
        let header = |name: &str| {
            response
                .headers()
                .get(name)
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default()
                .to_owned()
        };
        assert_eq!(header("x-frame-options"), "DENY", "{path}");
        let policy = header("content-security-policy");
        assert!(
            policy.contains("frame-ancestors 'none'"),
            "{path}: {policy}"
        );
        assert!(policy.contains("default-src 'self'"), "{path}: {policy}");
    }
}

/// Two workers of one pod name race for leases while their jobs are cancelled under them
/// and the server is killed: the pod never holds two live leases.
#[tokio::test]
async fn two_workers_of_one_pod_never_hold_two_leases_through_cancels_and_a_crash() {
    let mut server = team_server(None).await;
    let (status, answer) = call(
        &server,
        Some(ADMIN),
        Method::POST,
        "/jobs",
        json!({"all": true}),
        &[],
    )
    .await;
    assert_eq!(status, 201, "{answer}");
    let two_leases = |server: &Server| {
        let db = server.db();
        async move {
            use sqlx::{ConnectOptions, Connection};
            let mut conn = sqlx::sqlite::SqliteConnectOptions::new()
                .filename(db)
                .read_only(true)
                .connect()
                .await
                .expect("open the database");
            let worst: Option<i64> = sqlx::query_scalar(
                "SELECT MAX(n) FROM (SELECT COUNT(*) AS n FROM jobs \
                 WHERE lease_pod IS NOT NULL GROUP BY lease_pod)",
            )
            .fetch_one(&mut conn)
            .await
            .unwrap();
            conn.close().await.unwrap();
            worst.unwrap_or(0) > 1
        }
    };
    let mut granted = 0;
    for round in 0..2 {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(8);
        let racers: Vec<_> = (0..2)
            .map(|_| {
                let (client, base) = (server.client.clone(), server.api(""));
                tokio::spawn(async move {
                    let mut leased = Vec::new();
                    while tokio::time::Instant::now() < deadline {
                        let ask = json!({"accelerator": "v4-64", "hosts": 4, "state": "READY",
                                         "health": "HEALTHY", "wait_s": 0});
                        let Ok(response) = client
                            .post(format!("{base}/pods/pod-2/lease"))
                            .bearer_auth(WORKER)
                            .json(&ask)
                            .send()
                            .await
                        else {
                            continue;
                        };
                        if response.status() == 200 {
                            let lease: Value = response.json().await.unwrap();
                            let job = lease["job_id"].as_str().unwrap().to_owned();
                            if leased.len() % 2 == 0 {
                                // Cancelled at once: its lease lives until a worker ends it.
                                let _ = client
                                    .post(format!("{base}/jobs/{job}/cancel"))
                                    .bearer_auth(ADMIN)
                                    .json(&json!({}))
                                    .send()
                                    .await;
                            } else {
                                // Preempted: the job goes back to the queue for the race.
                                let id = lease["lease_id"].as_str().unwrap();
                                let _ = client
                                    .post(format!("{base}/leases/{id}/finish"))
                                    .bearer_auth(WORKER)
                                    .json(&json!({"outcome": "preempted"}))
                                    .send()
                                    .await;
                            }
                            leased.push(job);
                        }
                    }
                    leased
                })
            })
            .collect();
        while tokio::time::Instant::now() < deadline {
            assert!(
                !two_leases(&server).await,
                "pod-2 held two live leases (round {round})"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        for racer in racers {
            granted += racer.await.unwrap().len();
        }
        assert!(
            !two_leases(&server).await,
            "pod-2 held two live leases (round {round})"
        );
        if round == 0 {
            server.crash();
            assert!(
                !two_leases(&server).await,
                "pod-2 held two live leases after the crash"
            );
            server.restart();
        }
    }
    assert!(
        granted >= 2,
        "the race leased {granted} jobs: it raced nothing"
    );
}

/// Pool `pool`'s report `body` with `token`: its status and answer.
async fn report_pool(server: &Server, token: &str, pool: &str, body: Value) -> (u16, Value) {
    let path = format!("/pools/{pool}/report");
    let (status, answer) = call(server, Some(token), Method::POST, &path, body, &[]).await;
    (status, answer)
}

#[tokio::test]
async fn one_pools_report_spends_no_other_pools_grant_nor_claims_capacity_it_lacks() {
    let server = team_server(None).await;
    let grant = json!({"end": (chrono::Utc::now() + chrono::Duration::days(30)).to_rfc3339(),
                       "pod_hours": {"v4-64": 100.0}});
    let (status, answer) = call(&server, Some(ADMIN), Method::PUT, "/grant", grant, &[]).await;
    assert_eq!(status, 200, "{answer}");
    let evil = add_person(&server, "evil", "worker", Some(&["pool:evil"])).await;
    let zone = json!([{"zone": "zone-a", "state": "ready"}]);
    let report = |accelerator: &str, hours: f64| {
        json!({"accelerator": accelerator, "max_slices": 1, "zones": zone,
               "slices": [], "slice_hours": hours})
    };
    // A pool that says it used a billion years of v4-64 has used what the server saw: none.
    let (status, answer) = report_pool(&server, &evil, "evil", report("v4-64", 1e15)).await;
    assert_eq!(status, 200, "{answer}");
    let (status, answer) = report_pool(&server, WORKER, "a", report("v4-64", 0.0)).await;
    assert_eq!(status, 200, "{answer}");
    let left = answer["grant_pod_hours"].as_f64().unwrap();
    assert!(
        left > 99.9,
        "pool a's grant was spent by pool evil's word: {answer}"
    );

    // Forty thousand events in one report: refused whole, nothing written.
    let before = snapshot(&server).await;
    let mut flood = report("v4-64", 0.0);
    flood["events"] = json!(vec![
        json!({"kind": "slice_created", "message": "x"});
        40_000
    ]);
    let (status, answer) = report_pool(&server, &evil, "evil", flood).await;
    assert_eq!(status, 422, "{answer}");
    assert_eq!(answer["error"]["code"], "invalid_pool_report", "{answer}");
    assert_eq!(snapshot(&server).await, before, "a refused report wrote");

    // A job that lists v4-64 then v6e-32, the v4 pools out of capacity: its demand goes to
    // the v6e pool, and a pod that never asks for a lease (its preflight failed) does not
    // take it away.
    let later = (chrono::Utc::now() + chrono::Duration::hours(1)).to_rfc3339();
    for (pool, token) in [("a", WORKER), ("evil", evil.as_str())] {
        let mut blocked = report("v4-64", 0.0);
        blocked["zones"] = json!([{"zone": "zone-a", "state": "stockout", "next_try_at": later}]);
        let (status, answer) = report_pool(&server, token, pool, blocked).await;
        assert_eq!(status, 200, "{answer}");
    }
    let job = submit(&server, "exp07a").await;
    let (status, answer) = report_pool(&server, WORKER, "b", report("v6e-32", 0.0)).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["demand"], 1, "{answer}");
    let broken = json!({"accelerator": "v6e-32", "hosts": 8, "state": "READY",
                        "health": "HEALTHY",
                        "preflight": {"passed": false, "failures": [
                            {"check": "tpu", "message": "no TPU devices"}]}});
    let (status, answer) = call(
        &server,
        Some(WORKER),
        Method::POST,
        "/pods/broken-1/report",
        broken,
        &[],
    )
    .await;
    assert!((200..300).contains(&status), "{answer}");
    for _ in 0..3 {
        let (status, answer) = report_pool(&server, WORKER, "b", report("v6e-32", 0.0)).await;
        assert_eq!(status, 200, "{answer}");
        assert_eq!(
            answer["demand"], 1,
            "a pod that never leases is no capacity: {answer}"
        );
    }
    assert_eq!(server.job(&job).await["state"], "queued");
}

/// An answer as a failed assertion prints it: its first 300 bytes.
fn short(answer: &Value) -> String {
    answer.to_string().chars().take(300).collect()
}

/// One call and how long its answer took.
async fn timed_call(
    server: &Server,
    token: Option<&str>,
    path: &str,
    body: Value,
) -> (u16, Value, Duration) {
    let started = std::time::Instant::now();
    let (status, answer) = call(server, token, Method::POST, path, body, &[]).await;
    (status, answer, started.elapsed())
}

/// A name of megabytes costs the server no search: a submitter's experiment or group, a
/// class, a pool's accelerator and a pod's are refused at the cost of reading them, quoted
/// only in part, and `/healthz` answers meanwhile. (Before the bound, one 3 MiB name took
/// seconds of a release build's CPU in edit distances.)
#[tokio::test]
async fn a_name_of_megabytes_is_refused_without_a_search() {
    let server = team_server(None).await;
    let sam = add_person(&server, "sam", "submitter", None).await;
    let before = snapshot(&server).await;
    let pods = server.count_rows("pods").await;
    let huge = "A".repeat(3 << 20);
    // Far more than the bounded work takes in a debug build on a loaded machine; an edit
    // distance against every name takes many times this.
    let quick = Duration::from_secs(5);
    let lease = json!({"accelerator": huge, "hosts": 4, "state": "READY",
                       "health": "HEALTHY", "wait_s": 30});
    let pool = json!({"accelerator": huge, "max_slices": 1, "zones": [], "slices": []});
    for (token, path, body, status_wanted, code) in [
        (
            sam.as_str(),
            "/jobs",
            json!({"experiments": [huge]}),
            400,
            "unknown_experiment",
        ),
        (
            sam.as_str(),
            "/jobs",
            json!({"experiments": (0..200_000).map(|i| format!("e{i:06}")).collect::<Vec<_>>()}),
            400,
            "unknown_experiment",
        ),
        (
            sam.as_str(),
            "/jobs",
            json!({"group": huge}),
            400,
            "unknown_group",
        ),
        (
            sam.as_str(),
            "/jobs",
            json!({"experiments": ["exp07a"], "priority_class": huge}),
            422,
            "unknown_class",
        ),
        (
            WORKER,
            "/pools/evil/report",
            pool,
            422,
            "invalid_pool_report",
        ),
        (
            WORKER,
            "/pods/pod-x/lease",
            lease,
            422,
            "unknown_accelerator",
        ),
    ] {
        let healthz = async {
            tokio::time::sleep(Duration::from_millis(50)).await;
            let started = std::time::Instant::now();
            let url = format!("{}/healthz", server.url);
            let response = server.client.get(url).send().await.unwrap();
            (response.status().as_u16(), started.elapsed())
        };
        let ((status, answer, took), (health, health_took)) =
            tokio::join!(timed_call(&server, Some(token), path, body), healthz);
        let what = format!("{path} {code}");
        assert_eq!(status, status_wanted, "{what}: {}", short(&answer));
        assert_eq!(answer["error"]["code"], code, "{what}: {}", short(&answer));
        eprintln!("{what}: answered in {took:?}, /healthz in {health_took:?}");
        assert!(took < quick, "{what} took {took:?}");
        assert!(
            answer.to_string().len() < 16_384,
            "{what}: the answer quotes the name whole ({} bytes)",
            answer.to_string().len()
        );
        assert_eq!(health, 200);
        assert!(
            health_took < quick,
            "/healthz took {health_took:?} meanwhile"
        );
    }
    assert_eq!(
        snapshot(&server).await,
        before,
        "a refused name changed a row"
    );
    assert_eq!(server.count_rows("pods").await, pods, "a pod was recorded");
    // A near miss of a short name is still named.
    let (status, answer) = call(
        &server,
        Some(&sam),
        Method::POST,
        "/jobs",
        json!({"experiments": ["exp07z"]}),
        &[],
    )
    .await;
    assert_eq!(status, 400, "{answer}");
    assert!(
        !answer["error"]["details"]["did_you_mean"]
            .as_array()
            .unwrap()
            .is_empty(),
        "{answer}"
    );
}

/// A lease call for a slice type podq's table does not hold is 422 with the nearest known
/// type, at once: it is not parked for its wait (a waiter kept for each new string would
/// grow without end), and nothing of the pod is written. Only the canonical spelling is a
/// type: `v4-064` and `v4-+64` are not `v4-64`.
#[tokio::test]
async fn a_lease_for_a_slice_type_podq_does_not_know_is_refused_not_parked() {
    let server = team_server(None).await;
    submit(&server, "exp07a").await;
    let before = snapshot(&server).await;
    let pods = server.count_rows("pods").await;
    let xs = "x".repeat(2_000);
    for (accelerator, near) in [
        ("v9-999", None),
        ("v4-064", Some("v4-64")),
        ("v4-+64", Some("v4-64")),
        ("v4-63", Some("v4-64")),
        ("v5e-16", Some("v5p-16")),
        (xs.as_str(), None),
        ("v4-64\u{1b}[2J", None),
    ] {
        let ask = json!({"accelerator": accelerator, "hosts": 4, "state": "READY",
                         "health": "HEALTHY", "wait_s": 30});
        let (status, answer, took) =
            timed_call(&server, Some(WORKER), "/pods/pod-x/lease", ask).await;
        let shown = &accelerator[..accelerator.len().min(20)];
        assert_eq!(status, 422, "{shown}: {}", short(&answer));
        assert_eq!(
            answer["error"]["code"],
            "unknown_accelerator",
            "{}",
            short(&answer)
        );
        assert!(
            took < Duration::from_secs(10),
            "{shown} was parked {took:?}"
        );
        let suggested: Vec<&str> = answer["error"]["details"]["did_you_mean"]
            .as_array()
            .unwrap_or_else(|| panic!("no did_you_mean: {}", short(&answer)))
            .iter()
            .map(|v| v.as_str().unwrap())
            .collect();
        assert_eq!(suggested, near.into_iter().collect::<Vec<_>>(), "{shown}");
        let message = answer["error"]["message"].as_str().unwrap();
        assert!(!message.chars().any(char::is_control), "{message:?}");
        assert!(message.len() < 1_000, "{} bytes", message.len());
    }
    assert_eq!(
        snapshot(&server).await,
        before,
        "a refused lease changed a row"
    );
    assert_eq!(server.count_rows("pods").await, pods, "a pod was recorded");
    // The known type leases the job.
    lease_for(&server, "pod-x", WORKER).await;
}

/// A catalog, copied from the shipped one, whose `suite.yaml` declares these classes.
fn catalog_with_classes(root: &std::path::Path, classes: &str) -> std::path::PathBuf {
    let catalog = root.join("catalog");
    common::copy_dir(&common::experiments_dir(), &catalog);
    let suite = std::fs::read_to_string(catalog.join("suite.yaml")).unwrap();
    let start = suite
        .find("priority_classes:")
        .expect("the suite's classes");
    let end = suite[start..]
        .find("\n#")
        .map_or(suite.len(), |i| start + i + 1);
    let suite = format!("{}{classes}{}", &suite[..start], &suite[end..]);
    std::fs::write(catalog.join("suite.yaml"), suite).unwrap();
    catalog
}

/// A class that runs ahead of the default or is never evicted is an admin's unless its
/// `allowed:` says otherwise; classes below the default stay open. A submitter's priority
/// lies in 0–100, an admin's anywhere; a refused submit or change writes nothing.
#[tokio::test]
async fn a_class_ahead_of_the_default_and_a_priority_out_of_range_are_admins() {
    let root = common::shared_tempdir();
    let catalog = catalog_with_classes(
        root.path(),
        "priority_classes:\n  - name: first\n  - name: lab\n    allowed: [submitter]\n  - name: normal\n    default: true\n  - name: pinned\n    evictable: false\n  - name: later\n",
    );
    let server = team_server(Some(&catalog)).await;
    let sam = add_person(&server, "sam", "submitter", None).await;
    let before = snapshot(&server).await;
    let submit_as = |token: String, extra: Value| {
        let server = &server;
        async move {
            let mut body = json!({"experiments": ["exp07a"], "force": true});
            body.as_object_mut()
                .unwrap()
                .extend(extra.as_object().unwrap().clone());
            call(server, Some(&token), Method::POST, "/jobs", body, &[]).await
        }
    };
    for (extra, code) in [
        (json!({"priority_class": "first"}), "class_not_allowed"),
        (json!({"priority_class": "pinned"}), "class_not_allowed"),
        (json!({"priority": 101}), "priority_not_allowed"),
        (json!({"priority": -1}), "priority_not_allowed"),
        (json!({"priority": i64::MAX}), "priority_not_allowed"),
        (
            json!({"priority_class": "later", "priority": 1_000_000}),
            "priority_not_allowed",
        ),
    ] {
        let (status, answer) = submit_as(sam.clone(), extra.clone()).await;
        assert_eq!(status, 403, "{extra}: {answer}");
        assert_eq!(answer["error"]["code"], code, "{extra}: {answer}");
        assert!(answer["error"]["message"].as_str().unwrap().contains("sam"));
    }
    assert_eq!(
        snapshot(&server).await,
        before,
        "a refused submit changed a row"
    );
    // Open to a submitter: the default, a class below it, one whose `allowed:` says so, and
    // the ends of the range.
    let mut sams = Vec::new();
    for extra in [
        json!({}),
        json!({"priority_class": "later", "priority": 100}),
        json!({"priority_class": "lab", "priority": 0}),
    ] {
        let (status, answer) = submit_as(sam.clone(), extra.clone()).await;
        assert_eq!(status, 201, "{extra}: {answer}");
        sams.push(answer["created"][0]["job_id"].as_str().unwrap().to_owned());
    }
    // `GET /whoami` says the same.
    let (_, me) = call(
        &server,
        Some(&sam),
        Method::GET,
        "/whoami",
        Value::Null,
        &[],
    )
    .await;
    let allowed: Vec<(&str, bool)> = me["classes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| (c["name"].as_str().unwrap(), c["allowed"].as_bool().unwrap()))
        .collect();
    assert_eq!(
        allowed,
        [
            ("first", false),
            ("lab", true),
            ("normal", true),
            ("pinned", false),
            ("later", true)
        ],
        "{me}"
    );
    // A change is held to the same rules.
    let path = format!("/jobs/{}", sams[0]);
    for change in [
        json!({"priority": 1000}),
        json!({"priority_class": "first"}),
        json!({"priority_class": "pinned", "priority": 5}),
    ] {
        let (status, answer) = call(
            &server,
            Some(&sam),
            Method::PATCH,
            &path,
            change.clone(),
            &[],
        )
        .await;
        assert_eq!(status, 403, "{change}: {answer}");
    }
    let job = server.job(&sams[0]).await;
    assert_eq!(
        (&job["priority"], &job["priority_class"]),
        (&json!(0), &json!("normal")),
        "{job}"
    );
    // An admin may do all of it.
    let (status, answer) = submit_as(
        ADMIN.to_owned(),
        json!({"priority_class": "first", "priority": -5_000}),
    )
    .await;
    assert_eq!(status, 201, "{answer}");
    let change = json!({"priority_class": "pinned", "priority": 1000});
    let (status, answer) = call(&server, Some(ADMIN), Method::PATCH, &path, change, &[]).await;
    assert_eq!(status, 200, "{answer}");
}

/// Each line of `text` split at its commas (no cell of these files holds a comma but those
/// the test joins back).
fn csv_lines(text: &str) -> Vec<Vec<String>> {
    text.lines()
        .map(|line| line.split(',').map(str::to_owned).collect())
        .collect()
}

/// Every CSV podq writes neutralises a text cell a spreadsheet would read as a formula
/// (OWASP: a `'` before a leading `=`, `+`, `-`, `@`), and leaves numbers as numbers.
#[tokio::test]
async fn a_csv_cell_is_never_a_spreadsheet_formula() {
    let root = common::shared_tempdir();
    let catalog = root.path().join("catalog");
    common::copy_dir(&common::experiments_dir(), &catalog);
    let exp = catalog.join("groups/exp07-precision/exp07a.yaml");
    let text = std::fs::read_to_string(&exp).unwrap();
    std::fs::write(&exp, format!("{text}sweep_tag: \"=1+2*cmd|x\"\n")).unwrap();
    let server = team_server(Some(&catalog)).await;
    let job = submit(&server, "exp07a").await;
    let lease = lease_for(&server, "pod-c", WORKER).await;
    let hostile = [
        "=HYPERLINK(\"http://evil.example\")",
        "+1",
        "-2+3",
        "@SUM(A1)",
    ];
    let mut values = serde_json::Map::new();
    for name in hostile {
        values.insert(name.to_owned(), json!(-0.5));
    }
    values.insert("eval/exact_accuracy".to_owned(), json!(-0.5));
    let (status, answer) = call(
        &server,
        Some(WORKER),
        Method::POST,
        &format!("/leases/{lease}/metrics"),
        json!({"points": [{"step": 1, "values": values}]}),
        &[],
    )
    .await;
    assert_eq!(status, 200, "{answer}");

    let metrics = server.text(&format!("/jobs/{job}/metrics.csv")).await;
    let rows = csv_lines(&metrics);
    assert_eq!(rows[0], ["step", "name", "value"], "{metrics}");
    for row in &rows[1..] {
        let name = row[1..row.len() - 1].join(",");
        assert!(
            !name
                .trim_start_matches('"')
                .starts_with(['=', '+', '-', '@']),
            "a formula in metrics.csv: {name}"
        );
        assert_eq!(row.last().unwrap(), "-0.5", "a number was quoted: {row:?}");
    }
    for name in ["'+1", "'-2+3", "'@SUM(A1)"] {
        assert!(
            rows.iter().any(|r| r[1] == name),
            "{name} missing: {metrics}"
        );
    }
    assert!(metrics.contains("'=HYPERLINK("), "{metrics}");

    for path in ["/results.csv", "/groups/exp07-precision/results.csv"] {
        let results = server.text(path).await;
        for (i, row) in csv_lines(&results).iter().enumerate() {
            for cell in row {
                let bare = cell.trim_start_matches('"');
                assert!(
                    !bare.starts_with(['=', '+', '@']),
                    "{path} line {i}: a formula {cell}: {results}"
                );
                if bare.starts_with('-') {
                    assert!(bare.parse::<f64>().is_ok(), "{path}: {cell} is text");
                }
            }
        }
        assert!(results.contains("'=1+2*cmd|x"), "{path}: {results}");
        assert!(
            results.contains(",-0.5,"),
            "{path}: a number was quoted: {results}"
        );
    }
}

/// An `Idempotency-Key` is its caller's: the same key from another caller is another
/// request. It never replays the first caller's answer, nor says the key was used.
#[tokio::test]
async fn an_idempotency_key_is_its_callers_own() {
    let server = team_server(None).await;
    let sam = add_person(&server, "sam", "submitter", None).await;
    let ada = add_person(&server, "ada", "submitter", None).await;
    let body = json!({"experiments": ["exp07a"], "force": true});
    let key = [("idempotency-key", "nightly-1")];
    let submit_with = |token: String, body: Value| {
        let server = &server;
        async move { call(server, Some(&token), Method::POST, "/jobs", body, &key).await }
    };
    let (status, first) = submit_with(sam.clone(), body.clone()).await;
    assert_eq!(status, 201, "{first}");
    let sams = first["created"][0]["job_id"].clone();
    // Sam's retry gets Sam's answer, and makes nothing.
    let jobs = server.count_rows("jobs").await;
    let (_, again) = submit_with(sam.clone(), body.clone()).await;
    assert_eq!(again["created"][0]["job_id"], sams, "{again}");
    assert_eq!(server.count_rows("jobs").await, jobs);
    // Ada, same key, same body: her own request, her own job.
    let (status, hers) = submit_with(ada.clone(), body.clone()).await;
    assert_eq!(status, 201, "{hers}");
    assert_ne!(hers["created"][0]["job_id"], sams, "Ada got Sam's answer");
    let job = server
        .job(hers["created"][0]["job_id"].as_str().unwrap())
        .await;
    assert_eq!(job["submitted_by"], "ada", "{job}");
    // Her own key with another body is hers to be told of; the admin's first use of it,
    // with any body, is a new request: nothing tells a caller that another used a key.
    let (status, other) = submit_with(
        ada.clone(),
        json!({"experiments": ["exp07b"], "force": true, "dry_run": true}),
    )
    .await;
    assert_eq!(status, 422, "{other}");
    assert_eq!(other["error"]["code"], "idempotency_key_reused", "{other}");
    let (status, other) = submit_with(
        ADMIN.to_owned(),
        json!({"experiments": ["exp07b"], "dry_run": true}),
    )
    .await;
    assert_eq!(status, 200, "the admin's first use of the key: {other}");
    // A cancel with a key Sam used is Ada's own, and she may not cancel Sam's job.
    let cancel = format!("/jobs/{}/cancel", sams.as_str().unwrap());
    let (status, answer) = call(
        &server,
        Some(&sam),
        Method::POST,
        &cancel,
        Value::Null,
        &key,
    )
    .await;
    assert_eq!(status, 200, "{answer}");
    let (status, answer) = call(
        &server,
        Some(&ada),
        Method::POST,
        &cancel,
        Value::Null,
        &key,
    )
    .await;
    assert_eq!(status, 403, "Ada was answered with Sam's cancel: {answer}");
}

/// A trainer command that writes a placeholder inside quotes would undo podq's quoting of
/// its value: the worker refuses to start with it, and leases nothing.
#[tokio::test]
async fn a_trainer_command_that_quotes_a_placeholder_is_refused() {
    let server = team_server(None).await;
    let job = submit(&server, "exp07a").await;
    for command in [
        "exec run --dir '{checkpoint_dir}'",
        "exec run \"{resume_from}\"",
    ] {
        let mut worker = server.worker(
            "pod-q",
            2,
            &["--token", WORKER, "--trainer-command", command],
        );
        let exited = tokio::time::timeout(Duration::from_secs(60), async {
            loop {
                if let Some(status) = worker.process.child.try_wait().unwrap() {
                    return status;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })
        .await
        .unwrap_or_else(|_| panic!("the worker ran with {command}"));
        assert!(!exited.success(), "{command}");
        let log = worker.log_text();
        assert!(log.contains("inside quotes"), "{command}: {log}");
    }
    assert_eq!(server.job(&job).await["state"], "queued");
}
