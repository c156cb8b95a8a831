//! Two `podq server` processes on one PostgreSQL database: one active, one standby. The
//! active is killed with SIGKILL while a worker runs a job; the standby takes the lead,
//! re-derives the live leases and serves the worker, which carries on with the same lease.
//! A server whose database session ends stops acting as the active one, even with no
//! request of its own to tell it.

mod common;

use std::time::{Duration, Instant};

use common::postgres::PostgresDatabase;
use common::{eventually, Server};
use serde_json::{json, Value};

const RUN: Duration = Duration::from_secs(120);

async fn readyz(server: &Server) -> (u16, Value) {
    let response = server
        .client
        .get(format!("{}/readyz", server.url))
        .send()
        .await
        .expect("GET /readyz");
    let status = response.status().as_u16();
    let text = response.text().await.unwrap_or_default();
    (
        status,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    )
}

#[tokio::test]
async fn a_standby_takes_over_from_a_killed_active_and_the_running_job_carries_on() {
    let database = PostgresDatabase::create().await;
    let mut active = Server::start_on_url(&database.url).await;
    assert_eq!(readyz(&active).await.0, 200);
    let standby = Server::start_on_url(&database.url).await;
    let (status, answer) = readyz(&standby).await;
    assert_eq!(status, 503, "{answer}");
    assert_eq!(answer["error"]["code"], "standby", "{answer}");

    // What the active acknowledged.
    let running = active.submit_one("exp02a_05", json!({})).await;
    let (status, answer) = active
        .post("/jobs", json!({"group": "exp01-model-scaling"}))
        .await;
    assert_eq!(status, 201, "{answer}");
    let mut acknowledged: Vec<String> = answer["created"]
        .as_array()
        .unwrap()
        .iter()
        .chain(answer["linked"].as_array().unwrap())
        .map(|j| j["job_id"].as_str().unwrap().to_owned())
        .collect();
    acknowledged.push(running.clone());

    // The standby answers reads, and refuses writes and worker calls without changing
    // anything.
    let (status, jobs) = standby.get("/jobs?limit=200").await;
    assert_eq!(status, 200, "{jobs}");
    assert_eq!(jobs["total"], acknowledged.len(), "{jobs}");
    let (status, answer) = standby.post("/jobs", json!({"group": "exp08-ema"})).await;
    assert_eq!(status, 503, "{answer}");
    assert_eq!(answer["error"]["code"], "standby");
    let (status, answer) = standby
        .post(
            "/pods/elsewhere/lease",
            json!({"pod": {"accelerator": "v4-64", "hosts": 2, "state": "READY",
                           "health": "HEALTHY"}, "wait_s": 0}),
        )
        .await;
    assert_eq!(status, 503, "{answer}");
    assert_eq!(
        standby.get("/jobs?limit=200").await.1["total"],
        acknowledged.len()
    );

    // The job to run goes first.
    let (status, answer) = active
        .send(
            reqwest::Method::PATCH,
            &format!("/jobs/{running}"),
            json!({"priority": 100}).to_string(),
            &[("content-type", "application/json")],
        )
        .await;
    assert_eq!(status, 200, "{answer}");
    let servers = format!("{},{}", active.url, standby.url);
    let _worker = active.worker(
        "pod-f",
        2,
        &[
            "--server",
            &servers,
            "--trainer-env",
            "PODQ_SIM_RUN_SECS=25",
        ],
    );
    active.wait_state(&running, "running", RUN).await;
    let kept = active.committed_at_least(&running, 1, RUN).await;

    active.crash();
    let killed = Instant::now();
    eventually(
        Duration::from_secs(30),
        "the standby to take over",
        || async { (readyz(&standby).await.0 == 200).then_some(()) },
    )
    .await;
    let ready_after = killed.elapsed();
    // The worker's calls now land on the former standby: its progress moves there.
    let before = standby.job(&running).await["last_step"]
        .as_i64()
        .unwrap_or(0);
    eventually(
        Duration::from_secs(60),
        "the worker to report to the new active",
        || async {
            let step = standby.job(&running).await["last_step"]
                .as_i64()
                .unwrap_or(0);
            (step > before).then_some(())
        },
    )
    .await;
    let serving_after = killed.elapsed();
    println!(
        "switch: ready {:.1} s after the kill, the worker's calls answered {:.1} s after",
        ready_after.as_secs_f64(),
        serving_after.as_secs_f64()
    );

    let job = standby.wait_state(&running, "succeeded", RUN).await;
    let attempts = job["attempts"].as_array().unwrap();
    assert_eq!(attempts.len(), 1, "the same attempt carried on: {job}");
    assert!(job["last_step"].as_i64().unwrap() > kept, "{job}");

    // Nothing acknowledged was lost, nothing doubled.
    let (_, jobs) = standby.get("/jobs?limit=200").await;
    let ids: Vec<&str> = jobs["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j["id"].as_str().unwrap())
        .collect();
    for id in &acknowledged {
        assert_eq!(
            ids.iter().filter(|i| **i == id.as_str()).count(),
            1,
            "{id} in {ids:?}"
        );
    }
    assert_eq!(ids.len(), acknowledged.len());
    // The new active writes, and the CLI given both addresses finds it (the first is dead).
    let output = std::process::Command::new(common::PODQ)
        .args(["submit", "--group", "exp08-ema", "--server", &servers])
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let (_, jobs) = standby.get("/jobs?group=exp08-ema").await;
    assert!(jobs["total"].as_i64().unwrap() > 0, "{jobs}");
}

/// The active server's database session ends under it (as when PostgreSQL drops a silent
/// connection): whichever server takes the lock next leads, the other stands by, never both.
#[tokio::test]
async fn a_lost_session_leaves_exactly_one_active_server() {
    use sqlx::Connection;
    let database = PostgresDatabase::create().await;
    let first = Server::start_on_url(&database.url).await;
    assert_eq!(readyz(&first).await.0, 200);
    let second = Server::start_on_url(&database.url).await;
    assert_eq!(readyz(&second).await.0, 503);
    // Advisory locks are per database: only this test's servers' sessions are ended.
    let mut admin = sqlx::PgConnection::connect(&database.url).await.unwrap();
    for round in 0..3 {
        let ended: Vec<bool> = sqlx::query_scalar(
            "SELECT pg_terminate_backend(pid) FROM pg_locks \
             WHERE locktype = 'advisory' AND granted AND classid = 0 AND objid = 1886348401 \
             AND database = (SELECT oid FROM pg_database WHERE datname = current_database())",
        )
        .fetch_all(&mut admin)
        .await
        .unwrap();
        assert_eq!(ended, vec![true], "one session held the lead");
        let states = eventually(
            Duration::from_secs(20),
            "one server to lead again",
            || async {
                let states = (readyz(&first).await.0, readyz(&second).await.0);
                matches!(states, (200, 503) | (503, 200)).then_some(states)
            },
        )
        .await;
        let (active, standby) = if states.0 == 200 {
            (&first, &second)
        } else {
            (&second, &first)
        };
        let (status, answer) = active
            .post("/jobs", json!({"group": "exp08-ema", "force": true}))
            .await;
        assert_eq!(status, 201, "round {round}: {answer}");
        let (status, answer) = standby.post("/jobs", json!({"group": "exp08-ema"})).await;
        assert_eq!(status, 503, "round {round}: {answer}");
    }
}

/// Heartbeats are answered from memory, so a server cut off from its database learns it
/// only from its idle lead check or from its lead confirmation going stale. Once another
/// session holds the lead, the old active must refuse worker calls with no request of its
/// own reaching the database: this test sends it none that would.
#[tokio::test]
async fn a_server_that_lost_the_lead_refuses_worker_calls_without_being_asked_to_write() {
    use sqlx::Connection;
    let database = PostgresDatabase::create().await;
    let server = Server::start_on_url(&database.url).await;
    assert_eq!(readyz(&server).await.0, 200);
    // A lease nobody holds: the active answers from memory (409 `lease_lost`), a standby
    // refuses before looking (503 `standby`).
    let heartbeat = || async {
        server
            .post(
                &format!("/leases/{}/heartbeat", uuid::Uuid::new_v4()),
                json!({"phase": "running"}),
            )
            .await
    };
    let (status, answer) = heartbeat().await;
    assert_eq!(status, 409, "{answer}");
    assert_eq!(answer["error"]["code"], "lease_lost", "{answer}");

    // This session takes the lead as a standby would. The server tries to take it back as
    // soon as it notices, so its session is ended until this one wins.
    let mut rival = sqlx::PgConnection::connect(&database.url).await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let _: Vec<bool> = sqlx::query_scalar(
            "SELECT pg_terminate_backend(pid, 5000) FROM pg_locks \
             WHERE locktype = 'advisory' AND granted AND classid = 0 AND objid = 1886348401 \
             AND pid <> pg_backend_pid() \
             AND database = (SELECT oid FROM pg_database WHERE datname = current_database())",
        )
        .fetch_all(&mut rival)
        .await
        .unwrap();
        let held: bool = sqlx::query_scalar("SELECT pg_try_advisory_lock(1886348401)")
            .fetch_one(&mut rival)
            .await
            .unwrap();
        if held {
            break;
        }
        assert!(Instant::now() < deadline, "the rival never held the lead");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let answer = eventually(
        Duration::from_secs(20),
        "the server to refuse worker calls",
        || async {
            let (status, answer) = heartbeat().await;
            (status == 503).then_some(answer)
        },
    )
    .await;
    assert_eq!(answer["error"]["code"], "standby", "{answer}");
}
