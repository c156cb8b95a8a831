//! A scheduler for a team: people with tokens and roles, the audit trail, and
//! priority classes that evict a running job. Real server, worker and trainer processes.

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::tls::{self, Pki};
use common::{eventually, Server, ServerOptions};
use reqwest::Method;
use serde_json::{json, Value};

const ADMIN: &str = "admin-secret";
const WORKER: &str = "worker-secret";
const RUN: Duration = Duration::from_secs(120);

/// A server with the built-in admin and worker tokens, and `args` on top of the defaults.
async fn server_with(args: &[&str], experiments: Option<&Path>) -> Server {
    Server::start_with(options(args, experiments)).await
}

fn options(args: &[&str], experiments: Option<&Path>) -> ServerOptions {
    let mut options = ServerOptions {
        env: vec![
            ("PODQ_ADMIN_TOKEN".into(), ADMIN.into()),
            ("PODQ_WORKER_TOKEN".into(), WORKER.into()),
        ],
        ..ServerOptions::default()
    };
    options.args.extend(args.iter().map(|s| s.to_string()));
    if let Some(dir) = experiments {
        options.experiments = dir.to_owned();
    }
    options
}

/// One call with `token` as the bearer token.
async fn call(
    server: &Server,
    token: &str,
    method: Method,
    path: &str,
    body: Value,
) -> (u16, Value) {
    let auth = format!("Bearer {token}");
    let body = if body.is_null() {
        String::new()
    } else {
        body.to_string()
    };
    server
        .send(
            method,
            path,
            body,
            &[
                ("authorization", &auth),
                ("content-type", "application/json"),
            ],
        )
        .await
}

/// Adds a person as the admin, answering their token.
async fn add_person(server: &Server, name: &str, role: &str, pods: Option<&[&str]>) -> String {
    let mut body = json!({"name": name, "role": role});
    if let Some(pods) = pods {
        body["pods"] = json!(pods);
    }
    let (status, added) = call(server, ADMIN, Method::POST, "/users", body).await;
    assert_eq!(status, 201, "{added}");
    assert_eq!(added["user"]["role"], role);
    added["token"].as_str().unwrap().to_owned()
}

/// Submits one experiment as `token`, in `class` (None: the default), answering the job id.
async fn submit_as(server: &Server, token: &str, experiment: &str, class: Option<&str>) -> String {
    let mut body = json!({"experiments": [experiment]});
    if let Some(class) = class {
        body["priority_class"] = json!(class);
    }
    let (status, answer) = call(server, token, Method::POST, "/jobs", body).await;
    assert_eq!(status, 201, "{answer}");
    answer["created"][0]["job_id"].as_str().unwrap().to_owned()
}

fn assert_error(status: u16, answer: &Value, expected: u16, code: &str) -> String {
    assert_eq!(status, expected, "{answer}");
    assert_eq!(answer["error"]["code"], code, "{answer}");
    answer["error"]["message"].as_str().unwrap().to_owned()
}

/// A worker on the simulated pod `pod` with the worker token; each run takes `run_secs`.
fn worker(server: &Server, pod: &str, run_secs: &str) -> common::Worker {
    let env = format!("PODQ_SIM_RUN_SECS={run_secs}");
    server.worker(pod, 4, &["--token", WORKER, "--trainer-env", &env])
}

/// The same, trusting the private CA of a server that serves HTTPS.
fn tls_worker(server: &Server, pod: &str, run_secs: &str, pki: &Pki) -> common::Worker {
    let env = format!("PODQ_SIM_RUN_SECS={run_secs}");
    let ca = tls::path(&pki.ca);
    server.worker(
        pod,
        4,
        &["--token", WORKER, "--trainer-env", &env, "--ca", &ca],
    )
}

async fn wait_running(server: &Server, id: &str) -> Value {
    server.wait_state(id, "running", RUN).await
}

fn attempts(job: &Value) -> Vec<Value> {
    job["attempts"].as_array().cloned().unwrap_or_default()
}

/// The audit entries for `query`, newest first.
async fn audit(server: &Server, query: &str) -> Vec<Value> {
    let (status, page) = call(
        server,
        ADMIN,
        Method::GET,
        &format!("/audit?{query}"),
        Value::Null,
    )
    .await;
    assert_eq!(status, 200, "{page}");
    page["entries"].as_array().cloned().unwrap()
}

/// The whole flow over TLS: the people's calls, the worker's, and the eviction between them.
#[tokio::test]
async fn an_urgent_job_evicts_a_running_normal_job_which_resumes_after_it_uncharged() {
    let pki = tls::pki();
    let env = [("PODQ_ADMIN_TOKEN", ADMIN), ("PODQ_WORKER_TOKEN", WORKER)];
    let server = tls::tls_server(&pki, &["--eviction-min-runtime", "0s"], &env).await;
    let alice = add_person(&server, "alice", "submitter", None).await;
    // `urgent` may evict, so it is for admins (a submitter's is 403, tests/security.rs).
    let bob = add_person(&server, "bob", "admin", None).await;
    let _worker = tls_worker(&server, "pod-a", "20", &pki);

    let victim = submit_as(&server, &alice, "exp01a", None).await;
    assert_eq!(server.job(&victim).await["priority_class"], "normal");
    wait_running(&server, &victim).await;
    let saved = server.committed_at_least(&victim, 1, RUN).await;

    let submitted = Instant::now();
    let urgent = submit_as(&server, &bob, "exp07a", Some("urgent")).await;
    // The victim's attempt ends preempted, caused by the eviction, and the job is queued
    // (not charged) while the urgent job takes its pod.
    let evicted = eventually(RUN, "the normal job to be evicted", || async {
        let job = server.job(&victim).await;
        let first = attempts(&job).first().cloned()?;
        first["ended_at"].is_string().then_some(job)
    })
    .await;
    let stopped_after = submitted.elapsed();
    let first = &attempts(&evicted)[0];
    assert_eq!(first["outcome"], "preempted", "{evicted}");
    assert_eq!(first["cause"], "evicted", "{evicted}");
    assert!(
        first["message"].as_str().unwrap().contains(&format!(
            "evicted by job {urgent} (exp07a, urgent) submitted by bob"
        )),
        "{first}"
    );
    assert_eq!(evicted["failures"], 0, "{evicted}");
    // Its stop and lost training are charged to the eviction, not to the pod.
    let time = &first["pod_time"];
    assert!(time["evicted_s"].as_f64().unwrap() > 0.0, "{time}");
    assert_eq!(
        (time["stopping_s"].as_f64(), time["wasted_s"].as_f64()),
        (Some(0.0), Some(0.0)),
        "{time}"
    );
    let running = wait_running(&server, &urgent).await;
    assert_eq!(
        attempts(&running)[0]["pod"],
        "pod-a",
        "the urgent job took the freed pod"
    );
    eventually(RUN, "the urgent job's first step", || async {
        server.job(&urgent).await["last_step"].as_i64()
    })
    .await;
    let to_first_step = submitted.elapsed();
    // While the urgent job runs, the evicted one waits at the head of its class.
    assert_eq!(server.job(&victim).await["state"], "queued");

    server.wait_state(&urgent, "succeeded", RUN).await;
    let done = server.wait_state(&victim, "succeeded", RUN).await;
    let all = attempts(&done);
    assert_eq!(all.len(), 2, "{done}");
    assert_eq!(done["failures"], 0, "{done}");
    // The second attempt resumed from the newest checkpoint committed before the eviction.
    let resumed: i64 = all[1]["resume_from"]
        .as_str()
        .unwrap()
        .rsplit('/')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    assert!(
        resumed >= saved,
        "resumed from {resumed}, committed {saved} before: {done}"
    );
    let lost = first["end_step"].as_i64().unwrap_or(resumed) - resumed;
    // The sim trainer models a trainer killed mid-step on SIGTERM (it does not save), so
    // the steps since its last checkpoint are lost; tests/jax_trainer.rs's trainer saves.
    eprintln!(
        "eviction figures: urgent submit -> victim stopped {:.1}s, -> urgent first step {:.1}s; \
         victim steps lost (sim trainer) {lost}",
        stopped_after.as_secs_f64(),
        to_first_step.as_secs_f64()
    );
    // The trail names who caused what.
    let trail = audit(&server, &format!("job={victim}")).await;
    let by = |action: &str| -> Vec<String> {
        trail
            .iter()
            .filter(|e| e["action"] == action)
            .map(|e| e["by"].as_str().unwrap().to_owned())
            .collect()
    };
    assert_eq!(by("submitted"), ["alice"]);
    assert_eq!(by("evicting"), ["podq"]);
    assert_eq!(by("preempted"), ["worker:pod-a"]);
}

/// The experiments directory with `classes` as the suite's priority classes.
fn catalog_with_classes(dir: &Path, classes: &str) -> std::path::PathBuf {
    let target = dir.join("experiments");
    common::copy_dir(&common::experiments_dir(), &target);
    let suite = target.join("suite.yaml");
    let text = std::fs::read_to_string(&suite).unwrap();
    let groups = &text[..text
        .find("priority_classes:")
        .expect("the shipped suite declares its classes")];
    std::fs::write(&suite, format!("{groups}priority_classes:\n{classes}")).unwrap();
    target
}

#[tokio::test]
async fn evictions_keep_to_the_minimum_runtime_the_daily_cap_and_unevictable_classes() {
    let dir = common::shared_tempdir();
    let experiments = catalog_with_classes(
        dir.path(),
        "  - name: urgent\n    may_evict: [normal, capped, pinned]\n\
         \x20 - name: normal\n    default: true\n\
         \x20 - name: capped\n    min_runtime: 0s\n    max_evictions_per_day: 1\n\
         \x20 - name: pinned\n    min_runtime: 0s\n    evictable: false\n",
    );
    let server = server_with(&[], Some(&experiments)).await;
    let _worker = worker(&server, "pod-a", "6");
    let runs_alone = |id: String| {
        let server = &server;
        async move {
            let job = server.wait_state(&id, "succeeded", RUN).await;
            assert_eq!(attempts(&job).len(), 1, "never evicted: {job}");
        }
    };

    // A normal job's attempt has run less than its class's 30 minutes.
    let normal = submit_as(&server, ADMIN, "exp01a", None).await;
    wait_running(&server, &normal).await;
    let first_urgent = submit_as(&server, ADMIN, "exp07a", Some("urgent")).await;
    runs_alone(normal).await;
    server.wait_state(&first_urgent, "succeeded", RUN).await;

    // A class that may never be evicted.
    let pinned = submit_as(&server, ADMIN, "exp01b", Some("pinned")).await;
    wait_running(&server, &pinned).await;
    let second_urgent = submit_as(&server, ADMIN, "exp07b", Some("urgent")).await;
    runs_alone(pinned).await;
    server.wait_state(&second_urgent, "succeeded", RUN).await;

    // A class evicted at most once a day: the first urgent job evicts it, the second not.
    let capped = submit_as(&server, ADMIN, "exp01d", Some("capped")).await;
    wait_running(&server, &capped).await;
    let third_urgent = submit_as(&server, ADMIN, "exp07c", Some("urgent")).await;
    server.wait_state(&third_urgent, "succeeded", RUN).await;
    let job = server.job(&capped).await;
    assert_eq!(attempts(&job)[0]["cause"], "evicted", "{job}");
    eventually(RUN, "the capped job to run again", || async {
        let job = server.job(&capped).await;
        (job["state"] == "running" && attempts(&job).len() == 2).then_some(())
    })
    .await;
    let fourth_urgent = submit_as(&server, ADMIN, "exp01e", Some("urgent")).await;
    let job = server.wait_state(&capped, "succeeded", RUN).await;
    assert_eq!(attempts(&job).len(), 2, "evicted once only: {job}");
    assert_eq!(job["failures"], 0);
    server.wait_state(&fourth_urgent, "succeeded", RUN).await;
}

#[tokio::test]
async fn each_role_does_what_it_may_and_is_told_what_it_may_not() {
    let server = server_with(&[], None).await;
    let alice = add_person(&server, "alice", "submitter", None).await;
    let bob = add_person(&server, "bob", "submitter", None).await;
    let vera = add_person(&server, "vera", "viewer", None).await;
    let pod_worker = add_person(&server, "stable-1-worker", "worker", Some(&["stable-1"])).await;

    // A viewer reads and cannot submit.
    let (status, _) = call(&server, &vera, Method::GET, "/jobs", Value::Null).await;
    assert_eq!(status, 200);
    let (status, answer) = call(
        &server,
        &vera,
        Method::POST,
        "/jobs",
        json!({"experiments": ["exp01a"]}),
    )
    .await;
    let message = assert_error(status, &answer, 403, "forbidden");
    assert!(
        message.contains("submitter"),
        "names the role needed: {message}"
    );
    assert_eq!(answer["error"]["details"]["role_needed"], "submitter");

    // A submitter cannot cancel, requeue or reprioritise someone else's job; an admin can.
    let job = submit_as(&server, &alice, "exp01a", None).await;
    assert_eq!(server.job(&job).await["submitted_by"], "alice");
    for (method, path, body) in [
        (Method::POST, format!("/jobs/{job}/cancel"), Value::Null),
        (
            Method::PATCH,
            format!("/jobs/{job}"),
            json!({"priority": 5}),
        ),
        (Method::POST, format!("/jobs/{job}/suspend"), Value::Null),
    ] {
        let (status, answer) = call(&server, &bob, method, &path, body).await;
        let message = assert_error(status, &answer, 403, "not_owner");
        assert!(
            message.contains("submitted by alice"),
            "names the owner: {message}"
        );
    }
    assert_eq!(server.job(&job).await["priority"], 0, "nothing changed");
    // An unknown class is 422 with the closest.
    let (status, answer) = call(
        &server,
        &alice,
        Method::PATCH,
        &format!("/jobs/{job}"),
        json!({"priority_class": "urgnet"}),
    )
    .await;
    let message = assert_error(status, &answer, 422, "unknown_class");
    assert!(message.contains("did you mean `urgent`?"), "{message}");
    let (status, answer) = call(
        &server,
        &alice,
        Method::POST,
        "/jobs",
        json!({"experiments": ["exp01b"], "priority_class": "sweeep"}),
    )
    .await;
    assert_error(status, &answer, 422, "unknown_class");
    // A class that may evict others' runs is an admin's; one that evicts nothing is hers.
    let (status, answer) = call(
        &server,
        &alice,
        Method::PATCH,
        &format!("/jobs/{job}"),
        json!({"priority_class": "urgent"}),
    )
    .await;
    assert_error(status, &answer, 403, "class_not_allowed");
    let (status, moved) = call(
        &server,
        &alice,
        Method::PATCH,
        &format!("/jobs/{job}"),
        json!({"priority_class": "sweep"}),
    )
    .await;
    assert_eq!(
        (status, &moved["priority_class"]),
        (200, &json!("sweep")),
        "{moved}"
    );
    let (status, _) = call(
        &server,
        ADMIN,
        Method::POST,
        &format!("/jobs/{job}/suspend"),
        Value::Null,
    )
    .await;
    assert_eq!(status, 200, "an admin acts on anyone's job");
    assert_eq!(server.job(&job).await["state"], "held");
    let (status, resumed) = call(
        &server,
        &alice,
        Method::POST,
        &format!("/jobs/{job}/resume"),
        Value::Null,
    )
    .await;
    assert_eq!(
        (status, &resumed["state"]),
        (200, &json!("queued")),
        "{resumed}"
    );
    // Only an admin manages people.
    let (status, answer) = call(
        &server,
        &alice,
        Method::POST,
        "/users",
        json!({"name": "eve", "role": "admin"}),
    )
    .await;
    assert_error(status, &answer, 403, "forbidden");

    // A pod-limited worker token leases for its pod only.
    let ask = json!({"accelerator": "v4-64", "hosts": 4, "state": "READY", "health": "HEALTHY", "wait_s": 0});
    let (status, answer) = call(
        &server,
        &pod_worker,
        Method::POST,
        "/pods/stable-2/lease",
        ask.clone(),
    )
    .await;
    let message = assert_error(status, &answer, 403, "pod_not_allowed");
    assert!(message.contains("stable-2"), "{message}");
    let (status, lease) = call(
        &server,
        &pod_worker,
        Method::POST,
        "/pods/stable-1/lease",
        ask,
    )
    .await;
    assert_eq!(status, 200, "{lease}");
    // A person's token does not speak the worker protocol.
    let lease_id = lease["lease_id"].as_str().unwrap();
    let beat = json!({"phase": "preparing", "hosts_alive": [true, true, true, true]});
    let (status, answer) = call(
        &server,
        &alice,
        Method::POST,
        &format!("/leases/{lease_id}/heartbeat"),
        beat.clone(),
    )
    .await;
    assert_error(status, &answer, 403, "forbidden");
    let (status, _) = call(
        &server,
        &pod_worker,
        Method::POST,
        &format!("/leases/{lease_id}/heartbeat"),
        beat,
    )
    .await;
    assert_eq!(status, 200);

    // Unknown, disabled and rotated tokens are 401.
    let (status, answer) = call(
        &server,
        "podq_nonsense",
        Method::GET,
        "/whoami",
        Value::Null,
    )
    .await;
    assert_error(status, &answer, 401, "unauthorized");
    let (status, me) = call(&server, &bob, Method::GET, "/whoami", Value::Null).await;
    assert_eq!(
        (status, &me["name"], &me["role"]),
        (200, &json!("bob"), &json!("submitter")),
        "{me}"
    );
    let (status, _) = call(
        &server,
        ADMIN,
        Method::POST,
        "/users/bob/disable",
        Value::Null,
    )
    .await;
    assert_eq!(status, 200);
    let (status, answer) = call(&server, &bob, Method::GET, "/whoami", Value::Null).await;
    assert_error(status, &answer, 401, "token_disabled");
    let (status, rotated) = call(
        &server,
        ADMIN,
        Method::POST,
        "/users/bob/rotate",
        Value::Null,
    )
    .await;
    assert_eq!(status, 200, "{rotated}");
    let fresh = rotated["token"].as_str().unwrap();
    let (status, _) = call(&server, fresh, Method::GET, "/whoami", Value::Null).await;
    assert_eq!(status, 200, "the new token works and bob is enabled again");
    let (status, answer) = call(&server, &bob, Method::GET, "/whoami", Value::Null).await;
    assert_error(status, &answer, 401, "unauthorized");
    // Tokens are kept as hashes only.
    let db = std::fs::read(server.db()).unwrap();
    let db = String::from_utf8_lossy(&db);
    assert!(
        !db.contains(fresh) && !db.contains(&alice),
        "no token is stored as itself"
    );
    // Adding a name twice is refused.
    let (status, answer) = call(
        &server,
        ADMIN,
        Method::POST,
        "/users",
        json!({"name": "alice", "role": "viewer"}),
    )
    .await;
    assert_error(status, &answer, 409, "user_exists");
    // The built-in tokens' names are podq's own.
    let (status, answer) = call(
        &server,
        ADMIN,
        Method::POST,
        "/users",
        json!({"name": "admin", "role": "submitter"}),
    )
    .await;
    assert_error(status, &answer, 409, "reserved_name");
    // An idempotency key is its sender's own: bob replaying alice's key is checked afresh.
    let alices = submit_as(&server, &alice, "exp01c", None).await;
    let cancel = |token: String| {
        let server = &server;
        let path = format!("/jobs/{alices}/cancel");
        async move {
            let auth = format!("Bearer {token}");
            server
                .send(
                    Method::POST,
                    &path,
                    String::new(),
                    &[("authorization", &auth), ("idempotency-key", "k1")],
                )
                .await
        }
    };
    let (status, _) = cancel(alice.clone()).await;
    assert_eq!(status, 200);
    let (status, answer) = cancel(fresh.to_owned()).await;
    assert_error(status, &answer, 403, "not_owner");
}

#[tokio::test]
async fn every_change_is_in_the_audit_with_who_made_it_across_a_restart() {
    let mut server = server_with(&[], None).await;
    let alice = add_person(&server, "alice", "submitter", None).await;
    let job = submit_as(&server, &alice, "exp01a", None).await;
    let response = server
        .client
        .post(server.api(&format!("/jobs/{job}/cancel")))
        .bearer_auth(&alice)
        .header("x-request-id", "req-42")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(
        response.headers()["x-request-id"],
        "req-42",
        "the request id comes back"
    );
    let (status, _) = call(
        &server,
        &alice,
        Method::POST,
        &format!("/jobs/{job}/requeue"),
        Value::Null,
    )
    .await;
    assert_eq!(status, 200);
    let (status, _) = call(
        &server,
        ADMIN,
        Method::PATCH,
        &format!("/jobs/{job}"),
        json!({"priority": 7}),
    )
    .await;
    assert_eq!(status, 200);
    let (status, schedule) = call(
        &server,
        ADMIN,
        Method::POST,
        "/schedules",
        json!({"cron": "* * * * * *", "submit": {"experiments": ["exp07a"]}}),
    )
    .await;
    assert_eq!(status, 201, "{schedule}");
    let schedule_id = schedule["id"].as_str().unwrap().to_owned();
    let scheduled = eventually(RUN, "the schedule to submit", || async {
        let (_, jobs) = call(
            &server,
            ADMIN,
            Method::GET,
            "/jobs?experiment=exp07a",
            Value::Null,
        )
        .await;
        jobs["jobs"].as_array()?.first().cloned()
    })
    .await;
    assert_eq!(scheduled["submitted_by"], format!("schedule:{schedule_id}"));
    // A worker leases, then dies: the reaper (podq) ends its attempt after the lease's TTL.
    let mut worker = worker(&server, "pod-a", "600");
    wait_running(&server, &job).await;
    worker.process.kill();
    eventually(RUN, "the reaper to end the attempt", || async {
        let job = server.job(&job).await;
        (attempts(&job).first()?["outcome"] == "lost").then_some(())
    })
    .await;
    drop(worker);

    server.restart();
    let trail = audit(&server, &format!("job={job}")).await;
    let entry = |action: &str| -> Value {
        trail
            .iter()
            .find(|e| e["action"] == action)
            .cloned()
            .unwrap_or_else(|| panic!("no {action} in {trail:?}"))
    };
    assert_eq!(entry("submitted")["by"], "alice");
    let cancelled = entry("cancelled");
    assert_eq!(cancelled["by"], "alice");
    assert_eq!(cancelled["request_id"], "req-42");
    assert_eq!(cancelled["address"], "127.0.0.1");
    assert_eq!(entry("requeued")["by"], "alice");
    assert_eq!(entry("priority")["by"], "admin");
    assert_eq!(entry("leased")["by"], "worker:pod-a");
    assert_eq!(entry("lost")["by"], "podq");
    let scheduled_trail = audit(
        &server,
        &format!("job={}", scheduled["id"].as_str().unwrap()),
    )
    .await;
    assert!(
        scheduled_trail
            .iter()
            .any(|e| e["action"] == "submitted" && e["by"] == format!("schedule:{schedule_id}")),
        "{scheduled_trail:?}"
    );
    // Filters: a person's changes, and since a time.
    let alices = audit(&server, "person=alice").await;
    let actions: Vec<&str> = alices
        .iter()
        .map(|e| e["action"].as_str().unwrap())
        .collect();
    assert_eq!(
        actions,
        ["requeued", "cancelled", "submitted"],
        "newest first"
    );
    let admins = audit(&server, "person=admin").await;
    assert!(admins
        .iter()
        .any(|e| e["action"] == "user_added" && e["message"].as_str().unwrap().contains("alice")));
    assert!(admins.iter().any(|e| e["action"] == "schedule_created"));
    let future = (chrono::Utc::now() + chrono::Duration::hours(1)).to_rfc3339();
    assert!(audit(
        &server,
        &format!("since={}", future.replace('+', "%2B").replace(':', "%3A"))
    )
    .await
    .is_empty());
    // The job says who cancelled it, and its events carry `by`.
    let (_, events) = call(
        &server,
        ADMIN,
        Method::GET,
        &format!("/jobs/{job}/events"),
        Value::Null,
    )
    .await;
    let events = events.as_array().cloned().unwrap_or_default();
    assert!(
        events
            .iter()
            .any(|e| e["kind"] == "cancelled" && e["by"] == "alice"),
        "{events:?}"
    );
}

#[test]
fn a_users_file_with_a_duplicate_or_a_bad_role_is_refused_at_its_line() {
    let dir = common::shared_tempdir();
    let hash = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad";
    let other = "3f5c8c2ba5d0b8d9c2d3a7f1e0b4c6d8e9f0a1b2c3d4e5f60718293a4b5c6d7e";
    for (text, said) in [
        (format!("- name: a\n  role: admin\n  token_sha256: {hash}\n- name: a\n  role: viewer\n  token_sha256: {other}\n"), "users.yaml:4: `a` is listed twice"),
        (format!("- name: a\n  role: admin\n  token_sha256: {hash}\n- name: b\n  role: boss\n  token_sha256: {other}\n"), "users.yaml:4: no role `boss`"),
    ] {
        let file = dir.path().join("users.yaml");
        std::fs::write(&file, text).unwrap();
        let output = std::process::Command::new(common::PODQ)
            .args(["server", "--listen", "127.0.0.1:0", "--users"])
            .arg(&file)
            .arg("--db")
            .arg(dir.path().join("podq.db"))
            .arg("--experiments")
            .arg(common::experiments_dir())
            .output()
            .unwrap();
        assert!(!output.status.success());
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(stderr.contains(said), "{stderr}");
    }
    // A built-in token that is also a person's would act beyond the person's role.
    let admins_hash = podq_server::team::tokens::hash(ADMIN);
    let file = dir.path().join("users.yaml");
    std::fs::write(
        &file,
        format!("- name: alice\n  role: viewer\n  token_sha256: {admins_hash}\n"),
    )
    .unwrap();
    let output = std::process::Command::new(common::PODQ)
        .args(["server", "--listen", "127.0.0.1:0", "--users"])
        .arg(&file)
        .arg("--db")
        .arg(dir.path().join("podq.db"))
        .arg("--experiments")
        .arg(common::experiments_dir())
        .env("PODQ_ADMIN_TOKEN", ADMIN)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        !output.status.success()
            && stderr.contains("PODQ_ADMIN_TOKEN is the token of the person alice"),
        "{stderr}"
    );
    let output = std::process::Command::new(common::PODQ)
        .args(["server", "--listen", "127.0.0.1:0", "--users"])
        .arg(dir.path().join("missing.yaml"))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("cannot read the users file"), "{stderr}");
}

/// A server listening on every address (it is reached here through loopback only).
fn public_server(dir: &Path, extra: &[&str]) -> (common::Process, String) {
    let mut child = std::process::Command::new(common::PODQ)
        .args(["server", "--listen", "0.0.0.0:0", "--db"])
        .arg(dir.join(format!("podq-{}.db", extra.len())))
        .arg("--experiments")
        .arg(common::experiments_dir())
        .args(extra)
        .env("PODQ_ADMIN_TOKEN", ADMIN)
        .env("PODQ_WORKER_TOKEN", WORKER)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let url = std::io::BufRead::lines(std::io::BufReader::new(stdout))
        .map_while(Result::ok)
        .find_map(|l| {
            l.strip_prefix("podq server listening on ")
                .map(str::to_owned)
        })
        .expect("the server's address");
    let port = url.rsplit(':').next().unwrap().to_owned();
    let process = common::Process {
        child,
        name: "public server".into(),
    };
    (process, format!("http://127.0.0.1:{port}/api/v1"))
}

#[tokio::test]
async fn beyond_loopback_reads_need_a_token_unless_open_reads() {
    let dir = common::shared_tempdir();
    let http = reqwest::Client::new();
    let (_server, api) = public_server(dir.path(), &[]);
    let status = |request: reqwest::RequestBuilder| async move {
        request.send().await.unwrap().status().as_u16()
    };
    assert_eq!(status(http.get(format!("{api}/status"))).await, 401);
    assert_eq!(
        status(http.get(format!("{api}/status")).bearer_auth(ADMIN)).await,
        200
    );
    let me: Value = http
        .get(format!("{api}/whoami"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(me["reads_need_token"], true, "{me}");
    assert_eq!(
        me["classes"],
        json!([]),
        "the catalog's classes are a reader's: {me}"
    );
    let admin: Value = http
        .get(format!("{api}/whoami"))
        .bearer_auth(ADMIN)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(admin["classes"][0]["name"], "urgent", "{admin}");
    let (_open, api) = public_server(dir.path(), &["--open-reads"]);
    assert_eq!(status(http.get(format!("{api}/status"))).await, 200);
    let submit = http
        .post(format!("{api}/jobs"))
        .json(&json!({"experiments": ["exp01a"]}));
    assert_eq!(status(submit).await, 401, "open reads open nothing else");
}
