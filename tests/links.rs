//! A trainer's links: one W&B run per podq job. The link a trainer
//! reports reaches the job's JSON and `podq job`; the newest URL per name wins across
//! attempts, and the run id in it is the same after a preemption.

mod common;

use std::process::Command;
use std::time::Duration;

use common::{eventually, Server, StoreKind, PODQ};
use serde_json::{json, Value};

const RUN: Duration = Duration::from_secs(120);

fn links(job: &Value) -> Vec<(String, String)> {
    job["links"]
        .as_array()
        .unwrap_or_else(|| panic!("links in {job}"))
        .iter()
        .map(|l| {
            (
                l["name"].as_str().unwrap().to_owned(),
                l["url"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

fn podq_job(server: &Server, job: &str) -> String {
    let output = Command::new(PODQ)
        .args(["job", job])
        .env("PODQ_SERVER", &server.url)
        .env_remove("PODQ_ADMIN_TOKEN")
        .output()
        .expect("run podq");
    assert!(output.status.success(), "{output:?}");
    String::from_utf8_lossy(&output.stdout).into_owned()
}

on_both_stores!(links_are_kept_by_name_newest_first_and_bad_ones_refused);

/// The worker protocol's side, without a worker: what is kept, what is refused.
async fn links_are_kept_by_name_newest_first_and_bad_ones_refused(store: StoreKind) {
    let server = Server::start_on(store).await;
    let id = server.submit_one("exp07a", json!({})).await;
    assert_eq!(links(&server.job(&id).await), []);
    let (status, lease) = server
        .post(
            "/pods/p1/lease",
            json!({"accelerator": "v4-64", "hosts": 1, "state": "READY",
                   "health": "HEALTHY", "wait_s": 0}),
        )
        .await;
    assert_eq!(status, 200, "{lease}");
    let lease_id = lease["lease_id"].as_str().unwrap();
    let post = |links: Value| {
        let server = &server;
        async move {
            server
                .post(
                    &format!("/leases/{lease_id}/links"),
                    json!({ "links": links }),
                )
                .await
        }
    };
    let wandb = format!("https://wandb.ai/team/trm/runs/{id}");
    assert_eq!(post(json!([{"name": "wandb", "url": wandb}])).await.0, 204);
    for bad in [
        json!([{"name": "wandb", "url": "javascript:alert(1)"}]),
        json!([{"name": "<b>x</b>", "url": "https://e.com"}]),
        json!([{"name": "tb", "url": "https://e.com/"}, {"name": "wandb", "url": "https://e.com/a b"}]),
        json!([{"name": "wandb", "url": format!("https://e.com/{}", "x".repeat(2048))}]),
    ] {
        let (status, answer) = post(bad.clone()).await;
        assert_eq!(status, 400, "{bad}: {answer}");
        assert_eq!(answer["error"]["code"], "invalid_link", "{answer}");
    }
    assert_eq!(
        links(&server.job(&id).await),
        [("wandb".to_owned(), wandb.clone())],
        "a refused batch stores nothing of it"
    );
    // The newest URL of a name wins; names are listed in order.
    let newer = format!("{wandb}?v=2");
    assert_eq!(post(json!([{"name": "wandb", "url": newer}])).await.0, 204);
    assert_eq!(
        post(json!([{"name": "tensorboard", "url": "http://tb.local:6006/"}]))
            .await
            .0,
        204
    );
    let job = server.job(&id).await;
    assert_eq!(
        links(&job),
        [
            ("tensorboard".to_owned(), "http://tb.local:6006/".to_owned()),
            ("wandb".to_owned(), newer.clone()),
        ]
    );
    // Sixteen names at most.
    for n in 0..14 {
        let (status, answer) =
            post(json!([{"name": format!("t{n}"), "url": "https://e.com"}])).await;
        assert_eq!(status, 204, "{answer}");
    }
    let (status, answer) = post(json!([{"name": "t99", "url": "https://e.com"}])).await;
    assert_eq!(
        (status, answer["error"]["code"].clone()),
        (400, json!("too_many_links")),
        "{answer}"
    );
    // A name already kept may still change.
    assert_eq!(
        post(json!([{"name": "t0", "url": "https://e.com/2"}]))
            .await
            .0,
        204
    );

    let shown = podq_job(&server, &id);
    assert!(
        shown.contains(&format!("link        wandb {newer}")),
        "{shown}"
    );
    assert!(
        shown.contains("link        tensorboard http://tb.local:6006/"),
        "{shown}"
    );
    let (_, events) = server.get(&format!("/jobs/{id}/events")).await;
    assert!(
        events.to_string().contains(&format!("wandb: {newer}")),
        "a changed link is on the timeline: {events}"
    );

    // A lease that ended is fenced off like every worker call.
    let (status, _) = server
        .post(
            &format!("/leases/{lease_id}/finish"),
            json!({"outcome": "cancelled", "exit_codes": [null]}),
        )
        .await;
    assert_eq!(status, 200);
    let (status, answer) = post(json!([{"name": "wandb", "url": "https://e.com/late"}])).await;
    assert_eq!(status, 409, "{answer}");
    let kept = links(&server.job(&id).await);
    assert_eq!(kept.len(), 16, "kept after the attempt: {kept:?}");
    assert!(kept.contains(&("t0".to_owned(), "https://e.com/2".to_owned())));
}

/// Real server, worker and sim trainers: the link line of host 0 reaches the job, a bad one
/// is skipped without stopping the run, and after a preemption the resumed attempt reports
/// the same run id (`PODQ_JOB_ID`, what `podq_trainer.run_id()` returns).
#[tokio::test]
async fn a_trainers_link_reaches_the_job_and_keeps_its_run_id_across_a_preemption() {
    let server = Server::start().await;
    let id = server.submit_one("exp01a", json!({})).await;
    let worker = server.worker(
        "pod-l",
        2,
        &[
            "--trainer-env",
            "PODQ_SIM_RUN_SECS=12",
            "--trainer-env",
            "PODQ_SIM_LINK=wandb=https://wandb.ai/team/trm/runs/{job_id}?attempt={attempt} \
             evil=javascript:alert(1)",
        ],
    );
    let first = eventually(RUN, "the first attempt's link", || async {
        let job = server.job(&id).await;
        (!links(&job).is_empty()).then(|| links(&job))
    })
    .await;
    let run_url = format!("https://wandb.ai/team/trm/runs/{id}");
    assert_eq!(
        first,
        [("wandb".to_owned(), format!("{run_url}?attempt=1"))]
    );
    server.committed_at_least(&id, 1, RUN).await;
    worker.control("preempt");
    let job = server.wait_state(&id, "succeeded", RUN).await;
    let attempts = job["attempts"].as_array().unwrap();
    assert_eq!(attempts.len(), 2, "{job}");
    assert_eq!(attempts[0]["outcome"], "preempted", "{job}");
    assert_eq!(
        links(&job),
        [("wandb".to_owned(), format!("{run_url}?attempt=2"))],
        "the second attempt's link replaced the first's, with the same run id"
    );
    assert!(
        worker.log_text().contains("PODQ link line ignored"),
        "the bad link is logged by the worker"
    );
}
