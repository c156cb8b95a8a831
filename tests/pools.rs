//! Pools of slices made on demand, end to end: a real server, a real `podq pool`
//! process driving the local driver's scripted zones (worker/src/pool/sim.rs), its slices'
//! worker daemons and sim trainers. Killed with -9 where the test says so.

mod common;
mod fake_cloud;

use std::process::Command;
use std::time::{Duration, Instant};

use common::pools::{pin_identity, pool_yaml, PoolProcess};
use common::{eventually, Server, PODQ};
use fake_cloud::{FakeCloud, HOSTS, PROJECT};
use serde_json::{json, Value};

const RUN: Duration = Duration::from_secs(120);

async fn pools(server: &Server) -> Value {
    let (status, page) = server.get("/pools").await;
    assert_eq!(status, 200, "{page}");
    page
}

/// The pool's audit entries, oldest first.
async fn pool_events(server: &Server, pool: &str) -> Vec<Value> {
    let (status, page) = server
        .get(&format!("/audit?person=pool:{pool}&limit=1000"))
        .await;
    assert_eq!(status, 200, "{page}");
    let mut entries = page["entries"].as_array().cloned().unwrap_or_default();
    entries.reverse();
    entries
}

/// A server whose admin token is `admin`, and the header value that carries it.
/// The worker token of `server_with_admin`'s server: a server with any credential takes
/// worker calls only with a worker's token.
const POOL_TOKEN: &str = "pools-worker-token";

async fn server_with_admin(admin: &str) -> (Server, String) {
    let server = Server::start_with(common::ServerOptions {
        env: vec![
            ("PODQ_ADMIN_TOKEN".into(), admin.into()),
            ("PODQ_WORKER_TOKEN".into(), POOL_TOKEN.into()),
        ],
        ..common::ServerOptions::default()
    })
    .await;
    (server, format!("Bearer {admin}"))
}

/// A server whose leases outlive a pool's restart on a loaded machine. The daemons of a
/// pool's slices run in its process, so a killed pool's leases go silent until the
/// restarted one has listed the cloud, adopted its slices and started their daemons; under
/// the whole suite on 2 cores that once took longer than the other tests' 5 s lease
/// (2026-12-01), and the job's one attempt was declared lost. 30 s is still half the
/// server's default lease (`--lease-ttl-s`, 60 s).
async fn server_outliving_a_restart() -> Server {
    let mut options = common::ServerOptions::default();
    let ttl = 1 + options
        .args
        .iter()
        .position(|a| a == "--lease-ttl-s")
        .expect("the tests' lease TTL");
    options.args[ttl] = "30".into();
    Server::start_with(options).await
}

fn attempts(job: &Value) -> Vec<Value> {
    job["attempts"].as_array().cloned().unwrap_or_default()
}

#[tokio::test]
async fn the_waterfall_passes_a_stockout_and_a_quota_zone_then_gives_the_idle_slice_back() {
    let server = Server::start().await;
    let yaml = pool_yaml(
        "wf",
        2,
        "2s",
        &[
            "{zone: zone-a, sim: {fault: stockout}}",
            "{zone: zone-b, sim: {fault: quota}}",
            "{zone: zone-c, sim: {capacity: 1}}",
        ],
    );
    let pool = PoolProcess::start(&server, &yaml, 6);
    let submitted = Instant::now();
    let job = server.submit_one("exp07a", json!({})).await;
    let running = server.wait_state(&job, "running", RUN).await;
    let to_first_step = submitted.elapsed();
    let pod = attempts(&running)[0]["pod"].as_str().unwrap().to_owned();
    let done = server.wait_state(&job, "succeeded", RUN).await;
    // The slice outlived its idle_after while its lease ran: one attempt, never cut short.
    assert_eq!(attempts(&done).len(), 1, "{done}");
    // The time the slice took to make (the sim cloud's 1 s, then its worker's start) is
    // the pod's provisioning time.
    let (status, time) = server.get("/pod-time").await;
    assert_eq!(status, 200, "{time}");
    let provisioning = time["pods"][&pod]["provisioning_s"].as_f64().unwrap_or(0.0);
    assert!(provisioning >= 1.0, "{}", time["pods"][&pod]);
    let page = pools(&server).await;
    let view = &page["pools"][0];
    assert_eq!(view["name"], "wf");
    let zone_of = |zone: &str| {
        view["zones"]
            .as_array()
            .unwrap()
            .iter()
            .find(|z| z["zone"] == zone)
            .cloned()
            .unwrap()
    };
    assert_eq!(zone_of("zone-a")["state"], "stockout", "{view}");
    assert_eq!(zone_of("zone-b")["state"], "quota", "{view}");
    let metrics = server.metrics().await;
    assert!(
        metrics.contains("podq_pool_zone_info{pool=\"wf\",state=\"quota\",zone=\"zone-b\"} 1"),
        "{metrics}"
    );
    let events = pool_events(&server, "wf").await;
    let created = events
        .iter()
        .find(|e| e["action"] == "slice_created")
        .expect("a slice_created event");
    assert!(
        created["message"]
            .as_str()
            .unwrap()
            .starts_with(&format!("{pod} in zone-c")),
        "{created}"
    );
    let blocked: Vec<&str> = events
        .iter()
        .take_while(|e| e["action"] != "slice_created")
        .filter(|e| e["action"] == "zone_blocked")
        .map(|e| e["message"].as_str().unwrap())
        .collect();
    assert!(
        blocked.len() == 2
            && blocked[0].starts_with("zone-a: Stockout")
            && blocked[1].starts_with("zone-b: Quota"),
        "the waterfall, in order: {blocked:?}"
    );
    // Idle for its idle_after, the slice is given back: the cloud holds nothing.
    eventually(RUN, "the idle slice to be deleted", || async {
        (pool.cloud_slices().is_empty() && pools(&server).await["pools"][0]["slices"] == json!([]))
            .then_some(())
    })
    .await;
    // The slice's pod is retired with it: no longer a pod of the status, while the plan
    // counts the pool at its most.
    eventually(RUN, "the slice's pod to be retired", || async {
        let (_, status) = server.get("/status").await;
        (status["pods"] == json!([])).then_some(())
    })
    .await;
    let (_, plan) = server.get("/plan").await;
    assert_eq!(plan["with_pools"]["pods"], 2, "{}", plan["with_pools"]);
    eprintln!(
        "pool figures: demand to first step {:.1}s with a stockout and a quota zone in front",
        to_first_step.as_secs_f64()
    );
}

#[tokio::test]
async fn a_zone_whose_slices_die_young_is_skipped() {
    let server = Server::start().await;
    let yaml = pool_yaml(
        "churn",
        1,
        "never",
        &["{zone: zone-a, sim: {preempt_young: 5}}", "zone-b"],
    );
    let pool = PoolProcess::start(&server, &yaml, 40);
    let job = server.submit_one("exp07a", json!({})).await;
    // The first slice is made in zone-a, preempted young; the job is requeued uncharged and
    // the next slice is made in zone-b, where it runs to the end.
    let done = server
        .wait_state(&job, "succeeded", Duration::from_secs(240))
        .await;
    let pods: Vec<String> = attempts(&done)
        .iter()
        .map(|a| a["pod"].as_str().unwrap().to_owned())
        .collect();
    assert!(pods.len() >= 2, "{done}");
    assert_eq!(attempts(&done)[0]["outcome"], "preempted", "{done}");
    let events = pool_events(&server, "churn").await;
    let made: Vec<&str> = events
        .iter()
        .filter(|e| e["action"] == "slice_created")
        .map(|e| e["message"].as_str().unwrap())
        .collect();
    assert!(made[0].contains(" in zone-a "), "{made:?}");
    assert!(made.last().unwrap().contains(" in zone-b "), "{made:?}");
    assert_eq!(
        made.iter().filter(|m| m.contains(" in zone-a ")).count(),
        1,
        "a zone whose slices die young is not tried again within the window: {made:?}"
    );
    let page = pools(&server).await;
    let zone_a = page["pools"][0]["zones"][0].clone();
    assert_eq!(
        (zone_a["zone"].as_str(), zone_a["state"].as_str()),
        (Some("zone-a"), Some("churn"))
    );
    drop(pool);
}

#[tokio::test]
async fn killed_mid_create_and_with_a_stray_slice_the_pool_leaks_and_doubles_nothing() {
    let server = Server::start().await;
    let yaml = pool_yaml("crash", 1, "never", &["zone-a"]);
    let mut pool = PoolProcess::start(&server, &yaml, 5);
    let job = server.submit_one("exp07a", json!({})).await;
    // Killed while its slice is being made (the sim cloud takes a second).
    eventually(RUN, "a slice being made", || async {
        (!pool.cloud_slices().is_empty()).then_some(())
    })
    .await;
    pool.crash_and_restart();
    // A slice with the pool's own identity that it never asked for (its record lost, say),
    // and one labelled with its name by another podq installation.
    let journal: serde_json::Value =
        serde_json::from_slice(&std::fs::read(pool.state.join("crash/journal.json")).unwrap())
            .unwrap();
    let owner = journal["owner"].as_str().expect("the pool's identity");
    for (name, owner) in [("crash-999", owner), ("crash-1000", "another-installation")] {
        let slice = json!({
            "name": name, "zone": "zone-a",
            "labels": {"podq-pool": "crash", "podq-pool-id": owner},
            "created_at": "2026-11-28T00:00:00Z", "ready_at": "2026-11-28T00:00:00Z"
        });
        std::fs::write(
            pool.state.join(format!("cloud/slices/{name}.json")),
            slice.to_string(),
        )
        .unwrap();
    }
    server.wait_state(&job, "succeeded", RUN).await;
    eventually(RUN, "the stray slice to be deleted", || async {
        let names: Vec<String> = pool
            .cloud_slices()
            .iter()
            .map(|s| s["name"].as_str().unwrap().to_owned())
            .collect();
        let mut expected = [pool.slice_name("crash", 1), "crash-1000".to_owned()];
        expected.sort();
        (names == expected).then_some(())
    })
    .await;
    let foreign = pool_events(&server, "crash")
        .await
        .into_iter()
        .filter(|e| e["action"] == "slice_foreign")
        .count();
    assert_eq!(
        foreign, 1,
        "the other installation's slice is reported once"
    );
    let done = server.job(&job).await;
    assert_eq!(
        attempts(&done)[0]["pod"],
        pool.slice_name("crash", 1),
        "{done}"
    );
    let made = pool_events(&server, "crash")
        .await
        .into_iter()
        .filter(|e| e["action"] == "slice_created")
        .count();
    assert!(made <= 1, "one request, one slice: {made} created");
    // Killed again while its slice runs nothing: still one slice, adopted; the other
    // installation's still there.
    pool.crash_and_restart();
    let second = server.submit_one("exp07b", json!({})).await;
    let done = server.wait_state(&second, "succeeded", RUN).await;
    assert_eq!(
        attempts(&done)[0]["pod"],
        pool.slice_name("crash", 1),
        "{done}"
    );
    assert_eq!(pool.cloud_slices().len(), 2);
}

/// Two podq installations in one project, with one pool file: each runs its own jobs on its
/// own slices, and neither starts a worker (and its preflight) on the other's.
#[tokio::test]
async fn two_installations_sharing_a_cloud_and_a_pool_name_each_run_their_own() {
    let cloud = tempfile::tempdir().unwrap();
    let shared = ["--sim-cloud", cloud.path().to_str().unwrap()];
    let yaml = pool_yaml("shared", 1, "never", &["zone-a"]);
    let (first, second) = (Server::start().await, Server::start().await);
    // Identities that share their name tag, so the second's first name is the first's slice:
    // the clash a create must catch (distinct tags never clash at all).
    pin_identity(&first, "shared", "abcdef01");
    pin_identity(&second, "shared", "abcdef02");
    let _a = PoolProcess::start_with(&first, &yaml, 8, &shared);
    let job_a = first.submit_one("exp07a", json!({})).await;
    first.wait_state(&job_a, "running", RUN).await;
    let _b = PoolProcess::start_with(&second, &yaml, 8, &shared);
    let job_b = second.submit_one("exp07a", json!({})).await;
    let done_b = second.wait_state(&job_b, "succeeded", RUN).await;
    let done_a = first.wait_state(&job_a, "succeeded", RUN).await;
    for (done, slice) in [(&done_a, "shared-abcdef-1"), (&done_b, "shared-abcdef-2")] {
        let tries = attempts(done);
        assert_eq!(tries.len(), 1, "no attempt ended by the other: {done}");
        assert_eq!(tries[0]["pod"], slice, "{done}");
        assert_eq!(done["failures"], 0, "nothing charged: {done}");
    }
    let foreign: Vec<Value> = pool_events(&second, "shared")
        .await
        .into_iter()
        .filter(|e| e["action"] == "slice_foreign")
        .collect();
    assert!(
        foreign.iter().any(|e| e["message"]
            .as_str()
            .unwrap()
            .contains("shared-abcdef-1 exists already and is not this pool's")),
        "{foreign:?}"
    );
    // Both slices are in the one cloud, each labelled with its own installation.
    let owners: Vec<String> = std::fs::read_dir(cloud.path().join("slices"))
        .unwrap()
        .flatten()
        .filter(|e| e.path().extension().is_some_and(|x| x == "json"))
        .map(|e| {
            let slice: Value = serde_json::from_slice(&std::fs::read(e.path()).unwrap()).unwrap();
            format!(
                "{} {}",
                slice["name"].as_str().unwrap(),
                slice["labels"]["podq-pool-id"].as_str().unwrap()
            )
        })
        .collect();
    let mut owners = owners;
    owners.sort();
    assert_eq!(
        owners,
        ["shared-abcdef-1 abcdef01", "shared-abcdef-2 abcdef02"]
    );
}

#[tokio::test]
async fn the_grant_caps_the_slices_a_pool_makes() {
    let (server, auth) = server_with_admin("pools-admin-token").await;
    let grant = |hours: f64| {
        json!({"end": (chrono::Utc::now() + chrono::Duration::days(30)).to_rfc3339(),
               "pod_hours": {"v4-64": hours}})
        .to_string()
    };
    let headers = [("authorization", auth.as_str())];
    let (status, answer) = server
        .send(reqwest::Method::PUT, "/grant", grant(0.0), &headers)
        .await;
    assert_eq!(status, 200, "{answer}");
    let pool = PoolProcess::start_with(
        &server,
        &pool_yaml("capped", 2, "never", &["zone-a"]),
        3,
        &["--token", POOL_TOKEN],
    );
    let (status, answer) = server
        .send(
            reqwest::Method::POST,
            "/jobs",
            json!({"experiments": ["exp07a"]}).to_string(),
            &headers,
        )
        .await;
    assert_eq!(status, 201, "{answer}");
    let job = answer["created"][0]["job_id"].as_str().unwrap().to_owned();
    // Demand is seen, and no slice is made while the grant has no pod-hours for it.
    eventually(RUN, "the pool to see the demand", || async {
        (pools(&server).await["pools"][0]["demand"] == 1).then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(pool.cloud_slices().is_empty(), "{:?}", pool.cloud_slices());
    assert_eq!(server.job(&job).await["state"], "queued");
    let (status, _) = server
        .send(reqwest::Method::PUT, "/grant", grant(100.0), &headers)
        .await;
    assert_eq!(status, 200);
    let raised = Instant::now();
    server.wait_state(&job, "running", RUN).await;
    eprintln!(
        "pool figures: demand to first step {:.1}s with no zone blocked in front",
        raised.elapsed().as_secs_f64()
    );
    server.wait_state(&job, "succeeded", RUN).await;
}

#[tokio::test]
async fn pools_of_one_accelerator_share_the_demand_and_the_grant() {
    let (server, auth) = server_with_admin("admin-token-for-shared-pools").await;
    let headers = [("authorization", auth.as_str())];
    let start = chrono::Utc::now() - chrono::Duration::hours(1);
    let grant = json!({
        "start": start.to_rfc3339(),
        "end": (chrono::Utc::now() + chrono::Duration::days(30)).to_rfc3339(),
        "pod_hours": {"v4-64": 10.0},
    });
    let (status, answer) = server
        .send(reqwest::Method::PUT, "/grant", grant.to_string(), &headers)
        .await;
    assert_eq!(status, 200, "{answer}");
    let (status, answer) = server
        .send(
            reqwest::Method::POST,
            "/jobs",
            json!({"experiments": ["exp07a", "exp07b"]}).to_string(),
            &headers,
        )
        .await;
    assert_eq!(status, 201, "{answer}");
    // The pools' tokens: one for any pool, one limited to pool a.
    let mut tokens = Vec::new();
    for person in [
        json!({"name": "pools", "role": "worker"}),
        json!({"name": "pool-a", "role": "worker", "pods": ["pool:a"]}),
    ] {
        let (status, added) = server
            .send(
                reqwest::Method::POST,
                "/users",
                person.to_string(),
                &headers,
            )
            .await;
        assert_eq!(status, 201, "{added}");
        tokens.push(format!("Bearer {}", added["token"].as_str().unwrap()));
    }
    let (any_pool, limited) = (tokens[0].clone(), tokens[1].clone());
    let report = |slices: Value, hours: f64| {
        json!({"accelerator": "v4-64", "max_slices": 2, "slices": slices, "zones": [],
               "slice_hours": hours})
        .to_string()
    };
    let post = |pool: &'static str, body: String| {
        let (server, token) = (&server, any_pool.clone());
        async move {
            let (status, answer) = server
                .send(
                    reqwest::Method::POST,
                    &format!("/pools/{pool}/report"),
                    body,
                    &[("authorization", token.as_str())],
                )
                .await;
            assert_eq!(status, 200, "{answer}");
            answer
        }
    };
    // Pool a is making one slice and has used 3 of the grant's hours.
    let making = json!([{"pod": "a-1", "zone": "z", "state": "creating",
                         "created_at": chrono::Utc::now().to_rfc3339(), "idle_since": null}]);
    let a = post("a", report(making, 3.0)).await;
    // Its own slice being made is its own to count: it hears the whole demand.
    assert_eq!(a["demand"], 2, "{a}");
    assert_eq!(a["grant_pod_hours"], 10.0, "{a}");
    // Pool b hears the demand a's slice will not serve, and the hours a has not used: what
    // the server saw of a's slice (a moment), not the 3 hours a says it used.
    let b = post("b", report(json!([]), 0.0)).await;
    assert_eq!(b["demand"], 1, "{b}");
    let left = b["grant_pod_hours"].as_f64().unwrap();
    assert!((9.99..10.0).contains(&left), "{b}");
    let told: chrono::DateTime<chrono::Utc> =
        serde_json::from_value(b["grant_start"].clone()).unwrap();
    assert_eq!(told.timestamp(), start.timestamp(), "{b}");
    // A worker token limited to `pool:a` reports for pool a and its slices, and for nothing
    // else: not pool b, not a slice named like another pool's.
    let as_limited = |pool: &'static str, body: String| {
        let (server, limited) = (&server, limited.clone());
        async move {
            server
                .send(
                    reqwest::Method::POST,
                    &format!("/pools/{pool}/report"),
                    body,
                    &[("authorization", limited.as_str())],
                )
                .await
        }
    };
    let slice = |pod: &str| {
        json!([{"pod": pod, "zone": "z", "state": "ready",
                "created_at": chrono::Utc::now().to_rfc3339(), "idle_since": null}])
    };
    let (status, answer) = as_limited("b", report(json!([]), 0.0)).await;
    assert_eq!(
        (status, answer["error"]["code"].clone()),
        (403, json!("pool_not_allowed")),
        "{answer}"
    );
    let (status, answer) = as_limited("a", report(slice("b-1"), 0.0)).await;
    assert_eq!(
        (status, answer["error"]["code"].clone()),
        (403, json!("pod_not_allowed")),
        "{answer}"
    );
    let (status, answer) = as_limited("a", report(slice("a-7"), 3.0)).await;
    assert_eq!(status, 200, "{answer}");
    // A slice named as the pool's journal names it (its identity's tag, then its number).
    let (status, answer) = as_limited("a", report(slice("a-3fa2b1-8"), 3.0)).await;
    assert_eq!(status, 200, "{answer}");

    // Pools of another accelerator take nothing from them.
    let other = json!({"accelerator": "v5p-8", "max_slices": 1, "slices": [], "zones": [],
                       "slice_hours": 9.0});
    post("c", other.to_string()).await;
    let b = post("b", report(json!([]), 0.0)).await;
    assert_eq!(b["demand"], 1, "{b}");
    let left = b["grant_pod_hours"].as_f64().unwrap();
    assert!((9.99..10.0).contains(&left), "{b}");
}

#[tokio::test]
async fn a_slice_that_fails_preflight_twice_is_replaced_in_another_zone() {
    let server = Server::start().await;
    let yaml = pool_yaml("qt", 1, "never", &["zone-a", "zone-b"]);
    // The pool's first slice will not initialise its TPU (the local driver's control file,
    // there before the slice is).
    pin_identity(&server, "qt", "a0a0a0a0");
    let state = server.dir.path().join("pools");
    let control = state.join("cloud/pods/qt-a0a0a0-1/control");
    std::fs::create_dir_all(&control).unwrap();
    std::fs::write(control.join("fail-preflight"), b"").unwrap();
    let pool = PoolProcess::start(&server, &yaml, 4);
    assert_eq!(pool.pod_control(&pool.slice_name("qt", 1)), control);
    let job = server.submit_one("exp07a", json!({})).await;
    let done = server.wait_state(&job, "succeeded", RUN).await;
    assert_eq!(attempts(&done)[0]["pod"], "qt-a0a0a0-2", "{done}");
    let events = pool_events(&server, "qt").await;
    let quarantined: Vec<&Value> = events
        .iter()
        .filter(|e| e["action"] == "slice_quarantined")
        .collect();
    assert_eq!(quarantined.len(), 1, "{events:?}");
    assert!(quarantined[0]["message"]
        .as_str()
        .unwrap()
        .starts_with("qt-a0a0a0-1 in zone-a"));
    assert_replaced(&events, &pool, "qt-a0a0a0-1", "qt-a0a0a0-2", "zone-b");
}

/// Slice `gone` is no more, and `replacement` was made in `zone`.
fn assert_replaced(
    events: &[Value],
    pool: &PoolProcess,
    gone: &str,
    replacement: &str,
    zone: &str,
) {
    let created = events
        .iter()
        .find(|e| {
            e["action"] == "slice_created"
                && e["message"].as_str().unwrap().starts_with(replacement)
        })
        .expect("a replacement");
    assert!(
        created["message"]
            .as_str()
            .unwrap()
            .contains(&format!(" in {zone} ")),
        "replaced in another zone: {created}"
    );
    assert!(
        pool.cloud_slices().iter().all(|s| s["name"] != gone),
        "{gone} is gone"
    );
}

#[tokio::test]
async fn a_slice_whose_worker_never_calls_is_replaced_after_the_boot_deadline() {
    let server = Server::start().await;
    let yaml = pool_yaml("bd", 1, "never", &["zone-a", "zone-b"]);
    // The first slice's setup hangs (the local driver's control file, there before the slice
    // is): READY, and its worker never asks for work.
    pin_identity(&server, "bd", "b0b0b0b0");
    let control = server
        .dir
        .path()
        .join("pools/cloud/pods/bd-b0b0b0-1/control");
    std::fs::create_dir_all(&control).unwrap();
    std::fs::write(control.join("hang-preflight"), b"").unwrap();
    let pool = PoolProcess::start_with(&server, &yaml, 4, &["--boot-deadline-s", "4"]);
    let job = server.submit_one("exp07a", json!({})).await;
    let done = server.wait_state(&job, "succeeded", RUN).await;
    assert_eq!(attempts(&done)[0]["pod"], "bd-b0b0b0-2", "{done}");
    let events = pool_events(&server, "bd").await;
    let silent = events
        .iter()
        .find(|e| e["action"] == "slice_deleted")
        .expect("the silent slice deleted");
    assert!(
        silent["message"]
            .as_str()
            .unwrap()
            .starts_with("bd-b0b0b0-1 in zone-a was READY for 4s and its worker never called"),
        "{silent}"
    );
    // It counts against its zone as a slice lost young: the replacement went elsewhere.
    assert_replaced(&events, &pool, "bd-b0b0b0-1", "bd-b0b0b0-2", "zone-b");
}

#[tokio::test]
async fn a_permission_error_pauses_the_pool_without_a_retry_storm() {
    let server = Server::start().await;
    let yaml = pool_yaml(
        "denied",
        1,
        "never",
        &["{zone: zone-a, sim: {fault: denied}}", "zone-b"],
    );
    let pool = PoolProcess::start(&server, &yaml, 3);
    server.submit_one("exp07a", json!({})).await;
    let paused = eventually(RUN, "the pool to pause", || async {
        let page = pools(&server).await;
        let view = page["pools"][0].clone();
        view["paused"].is_string().then_some(view)
    })
    .await;
    assert!(
        paused["paused"]
            .as_str()
            .unwrap()
            .contains("PERMISSION_DENIED"),
        "{paused}"
    );
    // Many ticks later: still one try, no slice in zone-b either (every zone would answer
    // the same; a person must grant the role).
    tokio::time::sleep(Duration::from_secs(3)).await;
    let events = pool_events(&server, "denied").await;
    let tries = events
        .iter()
        .filter(|e| e["action"] == "pool_paused" || e["action"] == "zone_blocked")
        .count();
    assert_eq!(tries, 1, "{events:?}");
    assert!(pool.cloud_slices().is_empty());
    assert!(pools(&server).await["pools"][0]["zones"]
        .as_array()
        .unwrap()
        .iter()
        .all(|z| z["state"] == "paused"));
}

#[test]
fn a_bad_pool_file_is_refused_at_start_with_its_line() {
    let dir = common::shared_tempdir();
    let cases = [
        (
            "pools:\n  - name: p\n    accelerator: v4-64\n    max_slices: 1\n    idle_after: 1m\n    zones: [zone-a]\n    colour: blue\n",
            ":7:",
        ),
        (
            "pools:\n  - name: p\n    accelerator: v4-64\n    max_slices: 1\n    idle_after: 1m\n    zones: []\n",
            ":6:",
        ),
        (
            "pools:\n  - name: p\n    accelerator: v4-64\n    max_slices: 0\n    idle_after: 1m\n    zones: [zone-a]\n",
            ":4:",
        ),
        (
            "pools:\n  - name: p\n    accelerator: v4-64\n    max_slices: 1\n    idle_after: 1m\n    zones: [zone-a]\n  - name: p\n    accelerator: v4-64\n    max_slices: 1\n    idle_after: 1m\n    zones: [zone-a]\n",
            ":7:",
        ),
    ];
    for (yaml, line) in cases {
        let file = dir.path().join("pools.yaml");
        std::fs::write(&file, yaml).unwrap();
        let data = dir.path().to_str().unwrap();
        let commands: [&[&str]; 2] = [
            &["pool", "--pool-state", data, "--pools"],
            &[
                "up",
                "--data-dir",
                data,
                "--listen",
                "127.0.0.1:0",
                "--pool",
            ],
        ];
        for command in commands {
            let output = Command::new(PODQ)
                .args(command)
                .arg(&file)
                .output()
                .unwrap();
            let stderr = String::from_utf8_lossy(&output.stderr);
            assert!(!output.status.success(), "{command:?} accepted {yaml}");
            assert!(
                stderr.contains(&format!("pools.yaml{line}")),
                "{command:?}: {stderr}"
            );
        }
    }
}

#[test]
fn a_gcloud_pool_that_cannot_work_is_refused_at_start_saying_why() {
    let dir = common::shared_tempdir();
    let pools = dir.path().join("pools.yaml");
    std::fs::write(
        &pools,
        "pools:\n  - name: g\n    accelerator: v4-64\n    max_slices: 2\n    idle_after: 10m\n    \
         driver: gcloud\n    zones: [us-central2-b]\n",
    )
    .unwrap();
    // (the worker config, what the refusal says)
    let cases = [
        (
            "agent_listen: 10.9.9.9:7433\ngcloud:\n  create:\n    runtime_version: v\n",
            "port 0",
        ),
        (
            "agent_listen: 10.9.9.9:0\nagent_url: http://10.9.9.9:7433\ngcloud:\n  create:\n    \
             runtime_version: v\n",
            "leave agent_url unset",
        ),
        ("agent_listen: 10.9.9.9:0\n", "runtime_version"),
    ];
    // `podq pool` on the pool file with this worker config: whether it ran, and its stderr.
    let run_pool = |config: &str| {
        let file = dir.path().join("worker.yaml");
        std::fs::write(&file, format!("server: http://127.0.0.1:9\n{config}")).unwrap();
        let output = Command::new(PODQ)
            .args(["pool", "--pool-state"])
            .arg(dir.path())
            .arg("--pools")
            .arg(&pools)
            .arg("--config")
            .arg(&file)
            .output()
            .unwrap();
        (
            output.status.success(),
            String::from_utf8_lossy(&output.stderr).into_owned(),
        )
    };
    for (config, why) in cases {
        let (ran, stderr) = run_pool(config);
        assert!(!ran, "accepted {config}");
        assert!(stderr.contains(why), "{config}: {stderr}");
    }
    // A Compute Engine pool is checked as its slices' workers would check it.
    let compute = [
        (
            "v4-64",
            "gcloud:\n  project: p\n  compute:\n    machine_type: ct6e-standard-4t\n    \
             topology: 4x4\n",
            "Cloud TPU API",
        ),
        ("v6e-16", "gcloud:\n  project: p\n", "machine_type"),
        (
            "v6e-16",
            "gcloud:\n  compute:\n    machine_type: ct6e-standard-4t\n    topology: 4x4\n",
            "project",
        ),
    ];
    for (accelerator, config, why) in compute {
        std::fs::write(
            &pools,
            format!(
                "pools:\n  - name: c\n    accelerator: {accelerator}\n    max_slices: 1\n    \
                 idle_after: 10m\n    driver: gcloud\n    api: compute\n    zones: [us-east5-b]\n"
            ),
        )
        .unwrap();
        let (ran, stderr) = run_pool(&format!("agent_listen: 10.9.9.9:0\n{config}"));
        assert!(!ran, "accepted {accelerator} with {config}");
        assert!(
            stderr.contains(why),
            "{accelerator} with {config}: {stderr}"
        );
    }
    // `podq up` runs simulated slices only, and says where a gcloud pool runs.
    let output = Command::new(PODQ)
        .args(["up", "--listen", "127.0.0.1:0", "--data-dir"])
        .arg(dir.path())
        .arg("--pool")
        .arg(&pools)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        !output.status.success() && stderr.contains("podq pool --pools"),
        "{stderr}"
    );
}

#[tokio::test]
async fn creates_run_in_flight_while_the_pool_keeps_its_rhythm_and_stops_on_sigterm() {
    // Creates that take 20 s, as the Cloud TPU API's operation does (minutes in truth), in a
    // zone with room for 4; 4 jobs queued; a 2 s tick.
    let cloud = FakeCloud::fleet(json!({"us-central2-b": {"capacity": 4}}), HOSTS);
    let mut fleet = cloud.state()["fleet"].clone();
    fleet["create_s"] = json!(20);
    cloud.set_state("fleet", fleet);
    let server = Server::start().await;
    let config = cloud.worker_config(
        &server.url,
        json!({"create": {"runtime_version": "tpu-ubuntu2204-base"}}),
        json!({}),
    );
    let yaml = format!(
        "pools:\n  - name: fl\n    accelerator: v4-64\n    max_slices: 4\n    idle_after: 1m\n    \
         provisioning: spot\n    driver: gcloud\n    project: {PROJECT}\n    zones:\n      \
         - us-central2-b\n"
    );
    let (status, answer) = server
        .post(
            "/jobs",
            json!({"experiments": ["exp07a", "exp07c", "exp08a", "exp08b"]}),
        )
        .await;
    assert_eq!(status, 201, "{answer}");
    let mut pool = PoolProcess::gcloud_ticking(&server, &yaml, &config, cloud.gcloud_env(), "2");
    let started = Instant::now();
    let (mut most_in_flight, mut oldest_report) = (0, Duration::ZERO);
    // Watched until every create has been in flight a while, well inside the first 20 s.
    while started.elapsed() < Duration::from_secs(14) {
        let page = pools(&server).await;
        if let Some(view) = page["pools"].as_array().and_then(|p| p.first()) {
            let creating = view["slices"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|s| s["state"] == "creating")
                .count();
            most_in_flight = most_in_flight.max(creating);
            let reported: chrono::DateTime<chrono::Utc> =
                serde_json::from_value(view["reported_at"].clone()).unwrap();
            let age = (chrono::Utc::now() - reported).to_std().unwrap_or_default();
            oldest_report = oldest_report.max(age);
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(
        most_in_flight >= 3,
        "at most {most_in_flight} creates in flight at once"
    );
    assert!(
        oldest_report <= Duration::from_secs(8),
        "the report went {oldest_report:?} stale while creates ran"
    );
    let nodes = cloud.fleet_nodes();
    assert!(
        nodes.values().all(|(_, n)| n["state"] == "CREATING"),
        "the SIGTERM comes while the creates run: {nodes:?}"
    );
    let exited = pool.terminate(Duration::from_secs(15));
    assert!(
        exited.is_some(),
        "SIGTERM during creates did not end the pool within 15 s"
    );
    eprintln!(
        "pool figures: {most_in_flight} creates in flight at once, report at most {:.1} s old, \
         exit {:.1} s after SIGTERM",
        oldest_report.as_secs_f64(),
        exited.unwrap().as_secs_f64()
    );
    // The journal holds each create it asked for: restarted, the pool adopts what the cloud
    // made and asks for nothing twice.
    pool.crash_and_restart();
    eventually(RUN, "the four slices to be adopted", || async {
        let page = pools(&server).await;
        let slices = page["pools"].as_array()?.first()?["slices"]
            .as_array()?
            .len();
        (slices == 4).then_some(())
    })
    .await;
    assert_eq!(cloud.fleet_nodes().len(), 4, "no slice made twice");
}

#[tokio::test]
async fn a_gcloud_pool_waterfalls_to_a_labelled_node_survives_a_kill_and_leaks_nothing() {
    // Zones of the fake gcloud whose nodes' hosts are machines of their own.
    let cloud = FakeCloud::fleet(
        json!({
            "us-central2-a": {"fault": "stockout"},
            "us-central2-b": {"fault": "quota"},
            "us-central2-c": {"capacity": 2},
        }),
        HOSTS,
    );
    let server = server_outliving_a_restart().await;
    let config = cloud.worker_config(
        &server.url,
        json!({"create": {"runtime_version": "tpu-ubuntu2204-base"}}),
        json!({"trainer_env": {"PODQ_SIM_RUN_SECS": "10"}}),
    );
    let yaml = format!(
        "pools:\n  - name: gc\n    accelerator: v4-64\n    max_slices: 2\n    idle_after: 3s\n    \
         provisioning: spot\n    driver: gcloud\n    project: {PROJECT}\n    zones:\n      \
         - us-central2-a\n      - us-central2-b\n      - us-central2-c\n"
    );
    let mut pool = PoolProcess::gcloud(&server, &yaml, &config, cloud.gcloud_env());
    let submitted = Instant::now();
    let job = server.submit_one("exp07a", json!({})).await;
    let running = server.wait_state(&job, "running", RUN).await;
    let to_first_step = submitted.elapsed();
    let pod = attempts(&running)[0]["pod"].as_str().unwrap().to_owned();
    // One node, made where there was capacity, labelled as the pool's and bought as spot.
    let nodes = cloud.fleet_nodes();
    assert_eq!(nodes.len(), 1, "{nodes:?}");
    let (zone, node) = &nodes[&pod];
    assert_eq!(zone, "us-central2-c");
    assert_eq!(node["labels"]["podq-pool"], "gc", "{node}");
    assert!(node["labels"]["podq-pool-id"].is_string(), "{node}");
    assert_eq!(node["schedulingConfig"]["spot"], true, "{node}");
    assert_eq!(node["acceleratorType"], "v4-64", "{node}");

    // Blocked as the error said.
    let page = pools(&server).await;
    let zones = page["pools"][0]["zones"].as_array().unwrap().clone();
    let state_of = |zone: &str| zones.iter().find(|z| z["zone"] == zone).unwrap()["state"].clone();
    assert_eq!(state_of("us-central2-a"), "stockout", "{zones:?}");
    assert_eq!(state_of("us-central2-b"), "quota", "{zones:?}");

    // Killed while its slice trains, and a node with the pool's identity that it never asked
    // for appears (its record lost, say): the restarted pool adopts its own, deletes the
    // stray, and the trainer runs on to the end of its one attempt.
    pool.crash_and_restart();
    let journal: Value =
        serde_json::from_slice(&std::fs::read(pool.state.join("gc/journal.json")).unwrap())
            .unwrap();
    let owner = journal["owner"].as_str().expect("the pool's identity");
    let stray = Command::new(format!("{}/gcloud", fake_cloud::FAKE_DIR))
        .args(["compute", "tpus", "tpu-vm", "create", "gc-99"])
        .args([
            "--zone=us-central2-c",
            &format!("--project={PROJECT}"),
            "--accelerator-type=v4-64",
            "--version=tpu-ubuntu2204-base",
            &format!("--labels=podq-pool=gc,podq-pool-id={owner}"),
        ])
        .envs(cloud.gcloud_env())
        .output()
        .unwrap();
    assert!(stray.status.success(), "{stray:?}");
    let done = server.wait_state(&job, "succeeded", RUN).await;
    assert_eq!(attempts(&done).len(), 1, "{done}");
    // The quota block (5 min) outlived the restart: the zone book is kept on disk.
    let page = pools(&server).await;
    let zones = page["pools"][0]["zones"].as_array().unwrap().clone();
    let b = zones.iter().find(|z| z["zone"] == "us-central2-b").unwrap();
    assert_eq!(b["state"], "quota", "{zones:?}");
    eventually(RUN, "the stray and the idle node to be deleted", || async {
        cloud.fleet_nodes().is_empty().then_some(())
    })
    .await;

    let calls = cloud.calls();
    let verb = |call: &Vec<String>| call.get(3).cloned().unwrap_or_default();
    let named = |call: &Vec<String>, name: &str| call.get(4).is_some_and(|n| n == name);
    let zone_of = |call: &Vec<String>| {
        call.iter()
            .find_map(|a| a.strip_prefix("--zone="))
            .unwrap_or_else(|| panic!("a call without a zone: {call:?}"))
            .to_owned()
    };
    let creates: Vec<String> = calls
        .iter()
        .filter(|c| verb(c) == "create" && !named(c, "gc-99"))
        .map(zone_of)
        .collect();
    assert_eq!(
        creates,
        ["us-central2-a", "us-central2-b", "us-central2-c"],
        "the waterfall, and no second create for one request"
    );
    let deletes: Vec<&String> = calls
        .iter()
        .filter(|c| verb(c) == "delete")
        .filter_map(|c| c.get(4))
        .collect();
    assert_eq!(
        deletes,
        [&"gc-99".to_owned(), &pod],
        "the stray, then the idle node"
    );
    let lists = calls.iter().filter(|c| verb(c) == "list").count();
    eprintln!(
        "pool figures (gcloud, TPU API): demand to first step {:.1}s with a stockout and a \
         quota zone in front; calls to make and give back the slice: {} creates (2 refused), \
         1 delete; {lists} lists over the {:.0}s run (one per zone per tick)",
        to_first_step.as_secs_f64(),
        creates.len(),
        submitted.elapsed().as_secs_f64(),
    );
}

#[tokio::test]
async fn a_compute_pool_gives_up_a_zone_out_of_capacity_and_gives_its_group_back() {
    // Zones of the fake gcloud whose Compute Engine groups' VMs are machines of their own.
    // As on Compute Engine, a group's insert succeeds at once in a zone that is out: the
    // stockout shows in its bulk creation's progress check.
    let cloud = FakeCloud::fleet(
        json!({
            "us-east5-a": {"fault": "stockout"},
            "us-east5-b": {"capacity": 1},
        }),
        HOSTS,
    );
    let catalog = fake_cloud::catalog_with_accelerator("exp01-model-scaling", "v6e-16");
    let server = Server::start_with(common::ServerOptions {
        experiments: catalog.path().to_owned(),
        ..common::ServerOptions::default()
    })
    .await;
    let config = cloud.worker_config(
        &server.url,
        json!({
            "api": "compute",
            "compute": {"machine_type": "ct6e-standard-4t", "topology": "4x4"},
        }),
        json!({"accelerator": "v6e-16", "trainer_env": {"PODQ_SIM_RUN_SECS": "10"}}),
    );
    let yaml = format!(
        "pools:\n  - name: tr\n    accelerator: v6e-16\n    max_slices: 1\n    idle_after: 3s\n    \
         provisioning: spot\n    driver: gcloud\n    api: compute\n    project: {PROJECT}\n    \
         zones: [us-east5-a, us-east5-b]\n"
    );
    let pool = PoolProcess::gcloud(&server, &yaml, &config, cloud.gcloud_env());
    let submitted = Instant::now();
    let job = server.submit_one("exp01a", json!({})).await;
    let running = server.wait_state(&job, "running", RUN).await;
    let to_first_step = submitted.elapsed();
    let pod = attempts(&running)[0]["pod"].as_str().unwrap().to_owned();

    // One group, in the zone with room, marked as the pool's, of Spot VMs labelled as its.
    let groups = cloud.fleet_groups();
    assert_eq!(groups.keys().collect::<Vec<_>>(), [&pod], "{groups:?}");
    let (zone, group, instances) = &groups[&pod];
    assert_eq!(zone, "us-east5-b");
    let description = group["description"].as_str().unwrap_or_default();
    assert!(
        description.starts_with("podq-pool=tr podq-pool-id="),
        "the group is marked with its pool and the pool's identity: {group}"
    );
    assert_eq!(group["targetSize"], 4, "{group}");
    assert_eq!(instances.len(), 4, "{instances:?}");
    for instance in instances {
        assert_eq!(instance["labels"]["podq-pool"], "tr", "{instance}");
        assert_eq!(
            instance["scheduling"]["provisioningModel"], "SPOT",
            "{instance}"
        );
    }
    let page = pools(&server).await;
    let zones = page["pools"][0]["zones"].as_array().unwrap().clone();
    let a = zones.iter().find(|z| z["zone"] == "us-east5-a").unwrap();
    // Given up for its stockout, as the audit says: its state shows `stockout` only until
    // its backoff (about a minute) runs out, which a loaded machine reaches before this look.
    let events = pool_events(&server, "tr").await;
    assert!(
        events.iter().any(|e| {
            let message = e["message"].as_str().unwrap_or("");
            e["action"] == "zone_blocked"
                && message.starts_with("us-east5-a: Stockout")
                && message.contains("ZONE_RESOURCE_POOL_EXHAUSTED")
        }),
        "{events:?}"
    );
    assert!(
        ["stockout", "ready"].contains(&a["state"].as_str().unwrap_or("")),
        "{zones:?}"
    );
    assert!(
        a["last_error"]
            .as_str()
            .unwrap()
            .contains("ZONE_RESOURCE_POOL_EXHAUSTED"),
        "{a}"
    );
    // The group that waited in vain was reported while it was being made: its pod goes with
    // it, not left a pod being made for good.
    eventually(RUN, "the failed group's pod to be retired", || async {
        let (_, status) = server.get("/status").await;
        let pods = status["pods"].as_array()?;
        (!pods.iter().any(|p| p["name"] == pool.slice_name("tr", 1))).then_some(())
    })
    .await;

    let done = server.wait_state(&job, "succeeded", RUN).await;
    assert_eq!(attempts(&done).len(), 1, "{done}");
    eventually(RUN, "the idle group to be deleted", || async {
        cloud.fleet_groups().is_empty().then_some(())
    })
    .await;

    let calls = cloud.calls();
    let mig = |verb: &str| -> Vec<(String, String)> {
        calls
            .iter()
            .filter(|c| c[..3] == ["compute", "instance-groups", "managed"] && c[3] == verb)
            .map(|c| {
                let zone = c.iter().find_map(|a| a.strip_prefix("--zone=")).unwrap();
                (c[4].clone(), zone.to_owned())
            })
            .collect()
    };
    let creates = mig("create");
    let zones_tried: Vec<&str> = creates.iter().map(|(_, z)| z.as_str()).collect();
    assert_eq!(
        zones_tried,
        ["us-east5-a", "us-east5-b"],
        "the waterfall, and no second create for one request"
    );
    assert_eq!(
        mig("delete"),
        [creates[0].clone(), (pod.clone(), "us-east5-b".to_owned())],
        "the group that waited for capacity in vain, then the idle one"
    );
    let made = |what: &[&str]| {
        calls
            .iter()
            .filter(|c| c.len() > what.len() + 1 && c[1..=what.len()] == *what)
            .count()
    };
    assert_eq!(
        made(&["resource-policies", "create"]),
        1,
        "one workload policy for the region"
    );
    assert_eq!(made(&["instance-templates", "create"]), 1, "one template");
    let lists = calls
        .iter()
        .filter(|c| c.len() > 3 && c[..4] == ["compute", "instance-groups", "managed", "list"])
        .count();
    let describes = calls
        .iter()
        .filter(|c| c.len() > 3 && c[..4] == ["compute", "instance-groups", "managed", "describe"])
        .count();
    eprintln!(
        "pool figures (gcloud, Compute Engine): demand to first step {:.1}s with a stockout \
         zone in front; 2 group creates (1 cancelled by its delete), 1 template and 1 policy, \
         2 deletes; {lists} lists (one per tick for every zone) and {describes} group describes \
         (the pool's watch and the slice's worker) over the {:.0}s run",
        to_first_step.as_secs_f64(),
        submitted.elapsed().as_secs_f64(),
    );
}
