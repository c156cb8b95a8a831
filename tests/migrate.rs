//! `podq migrate`: a study run on SQLite, copied into PostgreSQL, served from there as it was.

mod common;

use std::process::Command;
use std::time::Duration;

use common::postgres::PostgresDatabase;
use common::{Server, PODQ};
use serde_json::{json, Value};
use sqlx::Connection;

const RUN: Duration = Duration::from_secs(120);

fn migrate(from: &str, to: &str) -> (Option<i32>, String, String) {
    let output = Command::new(PODQ)
        .args(["migrate", "--from", from, "--to", to])
        .output()
        .unwrap();
    (
        output.status.code(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

/// What a user sees of the study: every job and the status table.
async fn view(server: &Server) -> (Value, Value) {
    let (_, jobs) = server.get("/jobs?limit=200").await;
    let (_, status) = server.get("/status").await;
    (jobs, status)
}

#[tokio::test]
async fn a_study_copied_from_sqlite_is_served_from_postgresql_as_it_was() {
    let mut sqlite = Server::start().await;
    let done = sqlite.submit_one("exp02a_05", json!({})).await;
    {
        let _worker = sqlite.worker(
            "pod-m",
            2,
            &[
                "--trainer-env",
                "PODQ_SIM_RUN_SECS=3",
                "--trainer-env",
                "PODQ_SIM_LINK=wandb=https://wandb.ai/t/p/runs/{job_id}",
            ],
        );
        sqlite.wait_state(&done, "succeeded", RUN).await;
    }
    // Queued after the worker is gone, so that no attempt is open (its time would grow
    // between the two views).
    let (status, answer) = sqlite
        .post("/jobs", json!({"group": "exp01-model-scaling"}))
        .await;
    assert_eq!(status, 201, "{answer}");
    let cancelled = answer["created"][0]["job_id"].as_str().unwrap().to_owned();
    let (status, answer) = sqlite
        .post(&format!("/jobs/{cancelled}/cancel"), json!({}))
        .await;
    assert_eq!(status, 200, "{answer}");
    let before = view(&sqlite).await;
    let detail_before = sqlite.job(&done).await;
    let every_point = format!("/jobs/{done}/metrics?max_points=100000");
    let (status, metrics_before) = sqlite.get(&every_point).await;
    assert_eq!(status, 200, "{metrics_before}");
    sqlite.crash();

    let database = PostgresDatabase::create().await;
    let from = format!("sqlite://{}", sqlite.db().display());
    let (code, stdout, stderr) = migrate(&from, &database.url);
    assert_eq!(code, Some(0), "{stdout}{stderr}");
    let copied = |table: &str| {
        let line = stdout
            .lines()
            .find(|l| l.trim_start().starts_with(&format!("{table} ")))
            .unwrap_or_else(|| panic!("{table} in {stdout}"));
        let numbers: Vec<i64> = line
            .split_whitespace()
            .skip(1)
            .map(|n| n.parse().unwrap())
            .collect();
        assert_eq!(numbers[0], numbers[1], "{line}");
        numbers[0]
    };
    for table in ["jobs", "attempts", "events", "log_chunks"] {
        assert!(copied(table) > 0, "{table} in {stdout}");
    }
    // A short run's points may all be in its series' tails, or all in chunks.
    assert!(
        copied("metric_chunks") + copied("metric_tail") > 0,
        "{stdout}"
    );

    let postgres = Server::start_on_url(&database.url).await;
    let after = view(&postgres).await;
    assert_eq!(before.0, after.0, "the jobs");
    for part in ["jobs", "queue_hours", "goodput"] {
        assert!(!before.1[part].is_null(), "{part} in {}", before.1);
        assert_eq!(before.1[part], after.1[part], "the status's {part}");
    }
    assert_eq!(after.1["jobs"]["cancelled"], 1, "{}", after.1);
    assert_eq!(after.1["jobs"]["succeeded"], 1, "{}", after.1);
    let detail_after = postgres.job(&done).await;
    // PostgreSQL keeps no tails: the copied ones were folded into chunks at its start, and
    // every point reads as it did.
    let (status, metrics_after) = postgres.get(&every_point).await;
    assert_eq!(status, 200, "{metrics_after}");
    assert_eq!(metrics_before, metrics_after, "the metrics");
    assert!(
        !metrics_before["series"][0]["points"]
            .as_array()
            .unwrap()
            .is_empty(),
        "{metrics_before}"
    );
    let mut direct = sqlx::PgConnection::connect(&database.url).await.unwrap();
    let tail: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM metric_tail")
        .fetch_one(&mut direct)
        .await
        .unwrap();
    assert_eq!(tail, 0, "tail rows left on PostgreSQL");
    direct.close().await.unwrap();
    assert_eq!(
        detail_before["links"][0]["name"], "wandb",
        "{detail_before}"
    );
    for part in ["attempts", "checkpoints", "goodput", "pod_time", "links"] {
        assert!(!detail_before[part].is_null(), "{part} in {detail_before}");
        assert_eq!(detail_before[part], detail_after[part], "{part}");
    }
    // New rows continue after the copied ones.
    let (status, answer) = postgres.post("/jobs", json!({"group": "exp08-ema"})).await;
    assert_eq!(status, 201, "{answer}");
    drop(postgres);

    // Into a database that already holds a study: refused, nothing written.
    let (code, stdout, stderr) = migrate(&from, &database.url);
    assert_eq!(code, Some(1), "{stdout}{stderr}");
    assert!(stderr.contains("already holds"), "{stderr}");
}
