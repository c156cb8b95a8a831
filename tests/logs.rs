//! Live logs: every host's lines reach the server while the attempt runs, are kept per
//! attempt and host up to a cap, survive a restart, and are read back by job, attempt,
//! host, time and pattern, or followed across attempts.

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::Duration;

use common::{eventually, Server, ServerOptions, PODQ};
use serde_json::{json, Value};

const RUN: Duration = Duration::from_secs(120);

async fn logs(server: &Server, query: &str) -> (u16, Value) {
    server.get(&format!("/jobs/exp07a/logs{query}")).await
}

fn hosts_of(page: &Value) -> Vec<u64> {
    let mut hosts: Vec<u64> = page["lines"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["host"].as_u64().unwrap())
        .collect();
    hosts.sort();
    hosts.dedup();
    hosts
}

#[tokio::test]
async fn every_hosts_lines_are_live_and_a_follower_keeps_going_across_attempts() {
    let server = Server::start().await;
    server.submit_one("exp07a", json!({})).await;
    // Started before the job runs: it waits, then prints host 2's lines of every attempt,
    // and stops by itself once the job has succeeded.
    let mut follower = Command::new(PODQ)
        .args(["logs", "exp07a", "--follow", "--host", "2"])
        .env("PODQ_SERVER", &server.url)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("start podq logs --follow");
    let stdout = follower.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel::<String>();
    let reader = std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });

    let worker = server.worker(
        "pod-l",
        4,
        &[
            "--trainer-env",
            "PODQ_SIM_RUN_SECS=14",
            "--trainer-env",
            "PODQ_SIM_LOG_LINES_PER_S=20",
        ],
    );
    // While the first attempt runs, every host's lines are there.
    let page = eventually(RUN, "lines from all four hosts while running", || async {
        let (code, page) = logs(&server, "").await;
        assert_eq!(code, 200, "{page}");
        (hosts_of(&page) == [0, 1, 2, 3]).then_some(page)
    })
    .await;
    assert_eq!(server.job_of("exp07a").await["state"], "running");
    assert!(page["lines"][0]["text"]
        .as_str()
        .unwrap()
        .contains("podq-sim-trainer"));
    // The follower has printed host 2's lines already, the attempt still running.
    let first = rx
        .recv_timeout(RUN)
        .expect("the follower prints while the job runs");
    assert!(first.starts_with("[attempt 1 host 2] "), "{first}");

    // Host 1's trainer dies: the attempt fails and the job runs again.
    worker.control("kill-host-1");
    let id = server.job_of("exp07a").await["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let job = server.wait_state(&id, "succeeded", RUN).await;
    assert!(job["attempt_count"].as_i64().unwrap() >= 2, "{job}");

    let status = tokio::task::spawn_blocking(move || follower.wait())
        .await
        .unwrap()
        .unwrap();
    assert!(status.success(), "the follower ends with the job: {status}");
    reader.join().unwrap();
    let followed: Vec<String> = std::iter::once(first).chain(rx.try_iter()).collect();
    assert!(
        followed.iter().all(|l| l.contains(" host 2] ")),
        "only host 2: {followed:?}"
    );
    for attempt in [1, 2] {
        assert!(
            followed
                .iter()
                .any(|l| l.starts_with(&format!("[attempt {attempt} host 2] "))),
            "attempt {attempt} followed: {:?}",
            &followed[followed.len().saturating_sub(5)..]
        );
    }

    // Filters: host, attempt, pattern, time, and the text form for curl.
    let (_, page) = logs(
        &server,
        "?host=3&attempt=2&grep=chatter%20line%20[0-9]*5%20",
    )
    .await;
    let lines = page["lines"].as_array().unwrap();
    assert!(!lines.is_empty(), "{page}");
    for line in lines {
        assert_eq!(
            (line["host"].as_u64(), line["attempt"].as_i64()),
            (Some(3), Some(2))
        );
        assert!(
            line["text"].as_str().unwrap().contains("5 printed_ms="),
            "{line}"
        );
    }
    let (_, future) = logs(&server, "?since=2099-01-01T00:00:00Z").await;
    assert_eq!(future["lines"], json!([]), "{future}");
    let text = server.text("/jobs/exp07a/logs?tail=true&limit=3").await;
    assert_eq!(text.lines().count(), 3, "{text}");
    assert!(text.lines().all(|l| l.starts_with("[attempt ")), "{text}");

    // Paging with the cursor reads every line once.
    let (_, all) = logs(&server, "?limit=10000").await;
    let total = all["lines"].as_array().unwrap().len();
    let mut after = 0;
    let mut paged = 0;
    loop {
        let (_, page) = logs(&server, &format!("?limit=97&after={after}")).await;
        paged += page["lines"].as_array().unwrap().len();
        after = page["next_after"].as_i64().unwrap();
        if page["more"] == false {
            break;
        }
    }
    assert_eq!(paged, total);

    // What the server kept survives its restart.
    let mut server = server;
    server.restart();
    let (_, again) = logs(&server, "?limit=10000").await;
    assert_eq!(again["lines"].as_array().unwrap().len(), total);
}

#[tokio::test]
async fn bad_log_queries_say_what_exists_and_change_nothing() {
    let server = Server::start().await;
    let id = server.submit_one("exp07a", json!({})).await;
    let (code, body) = logs(&server, "?attempt=3").await;
    assert_eq!(
        (code, body["error"]["code"].as_str()),
        (404, Some("unknown_attempt")),
        "{body}"
    );
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("none has started"),
        "{body}"
    );
    let (status, lease) = server
        .post(
            "/pods/p1/lease",
            json!({"accelerator": "v4-64", "hosts": 2, "state": "READY",
                   "health": "HEALTHY", "wait_s": 0}),
        )
        .await;
    assert_eq!(status, 200, "{lease}");
    let lease_id = lease["lease_id"].as_str().unwrap();
    for (query, code, error) in [
        ("?attempt=2", 404, "unknown_attempt"),
        ("?host=2", 404, "unknown_host"),
        ("?host=one", 400, "invalid_query"),
        ("?grep=(", 422, "invalid_grep"),
        ("?since=yesterday", 422, "invalid_since"),
        ("?since=2026-11-24%2008:00:00Z", 422, "invalid_since"),
        ("?limit=0", 400, "invalid_query"),
        ("?color=red", 400, "invalid_query"),
    ] {
        let (got, body) = logs(&server, query).await;
        assert_eq!(
            (got, body["error"]["code"].as_str()),
            (code, Some(error)),
            "{query}: {body}"
        );
    }
    let (_, body) = logs(&server, "?host=2").await;
    assert_eq!(body["error"]["details"]["hosts"], 2, "{body}");
    let (_, body) = logs(&server, "?attempt=2").await;
    assert_eq!(body["error"]["details"]["attempts"], json!([1]), "{body}");
    let (code, body) = server.get("/jobs/exp99z/logs").await;
    assert_eq!(code, 404, "{body}");

    // A worker's batch sent twice (an agent pushes its log again after a worker restart)
    // is stored once.
    let batch = json!({"lines": [
        {"host": 0, "offset": 0, "at": "2026-11-24T08:00:00Z", "text": "step 1"},
        {"host": 1, "offset": 0, "at": "2026-11-24T08:00:00Z", "text": "step 1 on host 1"},
        {"host": 0, "offset": 7, "at": "2026-11-24T08:00:01Z", "text": "step 2"},
    ]});
    let (code, ack) = server
        .post(&format!("/leases/{lease_id}/logs"), batch.clone())
        .await;
    assert_eq!((code, ack["accepted"].as_u64()), (200, Some(3)), "{ack}");
    let (code, ack) = server
        .post(&format!("/leases/{lease_id}/logs"), batch)
        .await;
    assert_eq!((code, ack["accepted"].as_u64()), (200, Some(0)), "{ack}");
    let (_, page) = logs(&server, "").await;
    let texts: Vec<&str> = page["lines"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["text"].as_str().unwrap())
        .collect();
    assert_eq!(texts, ["step 1", "step 1 on host 1", "step 2"]);

    // A lease that is over is fenced off like any worker call.
    let (code, _) = server
        .post(
            &format!("/leases/{lease_id}/finish"),
            json!({"outcome": "succeeded", "exit_codes": [0, 0], "start_step": 0, "end_step": 2}),
        )
        .await;
    assert_eq!(code, 200);
    let late =
        json!({"lines": [{"host": 0, "offset": 14, "at": "2026-11-24T08:00:02Z", "text": "late"}]});
    let (code, body) = server.post(&format!("/leases/{lease_id}/logs"), late).await;
    assert_eq!(
        (code, body["error"]["code"].as_str()),
        (409, Some("lease_lost")),
        "{body}"
    );
    assert_eq!(server.job(&id).await["state"], "succeeded");
}

#[tokio::test]
async fn each_host_keeps_its_newest_lines_up_to_the_cap_and_says_what_it_dropped() {
    let server = Server::start_with(ServerOptions {
        args: [
            ServerOptions::default().args,
            vec!["--log-lines-per-host".into(), "100".into()],
        ]
        .concat(),
        ..ServerOptions::default()
    })
    .await;
    server.submit_one("exp07a", json!({})).await;
    let (_, lease) = server
        .post(
            "/pods/p1/lease",
            json!({"accelerator": "v4-64", "hosts": 2, "state": "READY",
                   "health": "HEALTHY", "wait_s": 0}),
        )
        .await;
    let lease_id = lease["lease_id"].as_str().unwrap().to_owned();
    let batch = |host: u32, from: u64, n: u64| {
        json!({"lines": (from..from + n).map(|i| json!({
            "host": host, "offset": i * 10, "at": "2026-11-24T08:00:00Z", "text": format!("line {i}"),
        })).collect::<Vec<_>>()})
    };
    // Host 0 prints 250 lines in three batches; host 1 prints 40.
    for (from, n) in [(0, 120), (120, 100), (220, 30)] {
        let (code, _) = server
            .post(&format!("/leases/{lease_id}/logs"), batch(0, from, n))
            .await;
        assert_eq!(code, 200);
    }
    server
        .post(&format!("/leases/{lease_id}/logs"), batch(1, 0, 40))
        .await;
    // The oldest host-0 lines, sent again, are not stored again.
    let (_, ack) = server
        .post(&format!("/leases/{lease_id}/logs"), batch(0, 0, 50))
        .await;
    assert_eq!(ack["accepted"], 0, "{ack}");

    let (_, page) = logs(&server, "?host=0&limit=10000").await;
    let texts: Vec<&str> = page["lines"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["text"].as_str().unwrap())
        .collect();
    assert_eq!(texts.len(), 100);
    assert_eq!((texts[0], texts[99]), ("line 150", "line 249"));
    assert_eq!(
        page["dropped"],
        json!([{"attempt": 1, "host": 0, "lines": 150}])
    );
    assert_eq!(page["kept_per_host"], 100);
    let (_, host1) = logs(&server, "?host=1").await;
    assert_eq!(host1["lines"].as_array().unwrap().len(), 40);
    assert_eq!(host1["dropped"], json!([]));
    let text = server.text("/jobs/exp07a/logs?host=0").await;
    assert!(
        text.starts_with("[attempt 1 host 0] ... 150 older lines dropped"),
        "{}",
        &text[..200.min(text.len())]
    );
}
