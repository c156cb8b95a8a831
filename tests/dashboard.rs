//! The dashboard as a person uses it: a real `podq server` on port 0, a real worker on the
//! simulated pod running the sim trainer, and headless Chromium driven over the Chrome
//! DevTools Protocol (`tests/browser`). Each test opens pages, waits for what they show
//! (polling the DOM against a deadline, never a fixed sleep), clicks, and checks the result
//! in the page and in the API. Screenshots go to `target/test-artifacts/dashboard/`.
//!
//! Needs Chromium at `/usr/bin/chromium` (Debian: `apt-get install -y chromium`), or another
//! binary named by `PODQ_TEST_CHROMIUM`. Without it the tests fail: they never pass silently.

mod browser;
mod common;

use std::sync::Mutex;
use std::time::Duration;

use browser::{Browser, Page};
use chrono::{DateTime, Utc};
use common::rungs::{catalog_with_rungs, RungPod, RUNG_GROUP};
use common::{eventually, Server, ServerOptions};
use serde_json::{json, Value};

/// How long a page may take to show what the test waits for. Generous: the machine is
/// shared, and a wait ends as soon as its condition holds.
const SHOW: Duration = Duration::from_secs(60);
/// How long a job may take to reach a state on the simulated pod.
const RUN: Duration = Duration::from_secs(120);

/// Each test runs a server, a worker, trainers and a browser; one at a time keeps a 2-core
/// machine responsive enough for all of them.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

fn run(test: impl std::future::Future<Output = ()>) {
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    browser::chromium_path();
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
        .block_on(test);
}

fn js_str(s: &str) -> String {
    serde_json::to_string(s).unwrap()
}

/// The text of the element `selector` matches, or null while there is none.
fn text_of(selector: &str) -> String {
    format!(
        "((document.querySelector({sel}) || {{}}).textContent ?? null)",
        sel = js_str(selector)
    )
}

async fn put_grant(server: &Server, end: DateTime<Utc>) -> Value {
    let (status, grant) = server
        .send(
            reqwest::Method::PUT,
            "/grant",
            json!({"end": end.to_rfc3339(), "pod_hours": {"v4-64": 720}}).to_string(),
            &[("content-type", "application/json")],
        )
        .await;
    assert_eq!(status, 200, "{grant}");
    grant
}

async fn plan(server: &Server) -> Value {
    let (status, plan) = server.get("/plan").await;
    assert_eq!(status, 200, "{plan}");
    plan
}

fn fit(plan: &Value, order: &str, what: &str, total: usize) -> String {
    match plan[order][what].as_u64() {
        Some(n) => format!("{n} of {total}"),
        None => format!("– of {total}"),
    }
}

/// Waits until the page's `conn` indicator says the event stream is open.
async fn wait_live(page: &Page) {
    page.wait_for::<bool>(
        SHOW,
        "the page to be live on the event stream",
        "document.getElementById('conn').dataset.mode === 'live' && document.body.dataset.status === 'ok'",
    )
    .await;
}

#[test]
fn the_overview_shows_the_grant_and_applies_the_recommended_order() {
    run(async {
        let server = Server::start().await;
        let (status, answer) = server
            .post("/jobs", json!({"group": "exp07-precision"}))
            .await;
        assert_eq!(status, 201, "{answer}");
        let browser = Browser::launch().await;
        let page = browser.open(&format!("{}/", server.url)).await;

        // Without a grant, the card says so and claims nothing.
        let shown: String = page
            .wait_for(
                SHOW,
                "the plan card without a grant",
                &format!(
                    "document.getElementById('plan').dataset.loaded === 'true' && {}",
                    text_of("#plan-deadline")
                ),
            )
            .await;
        assert!(shown.contains("no grant set"), "{shown}");
        let runs = plan(&server).await["current"]["runs"]
            .as_array()
            .unwrap()
            .len();
        let cell: String = page.eval(&text_of("#plan-runs-current")).await;
        assert_eq!(cell, format!("– of {runs}"));

        // A 30-day grant, then a reload as the user would.
        let end = DateTime::from_timestamp(Utc::now().timestamp() + 30 * 86_400, 0).unwrap();
        put_grant(&server, end).await;
        page.reload().await;
        let deadline: String = page
            .wait_for(
                SHOW,
                "the plan card with the grant's deadline",
                "document.getElementById('plan').dataset.deadline || null",
            )
            .await;
        assert_eq!(
            DateTime::parse_from_rfc3339(&deadline).unwrap(),
            end,
            "the card's deadline"
        );
        let shown: String = page.eval(&text_of("#plan-deadline")).await;
        assert!(
            shown.contains("grant ends") && shown.contains(&end.format("%Y").to_string()),
            "{shown}"
        );
        assert!(shown.contains("left"), "{shown}");

        // The card shows what the API computes, under both orders.
        let api = plan(&server).await;
        let groups = api["groups"].as_array().unwrap().len();
        for (id, order, what, total) in [
            ("#plan-runs-current", "current", "runs_fit", runs),
            ("#plan-runs-recommended", "recommended", "runs_fit", runs),
            ("#plan-groups-current", "current", "groups_fit", groups),
            (
                "#plan-groups-recommended",
                "recommended",
                "groups_fit",
                groups,
            ),
        ] {
            let cell: String = page.eval(&text_of(id)).await;
            assert_eq!(cell, fit(&api, order, what, total), "{id}");
            assert!(
                !cell.starts_with('–'),
                "{id}: with a deadline the plan says what fits"
            );
        }
        // The timeline: one bar per run still to go under each order, and the deadline line.
        let bars: Vec<u64> = page
            .eval(
                "['today', 'recommended'].map((o) => \
                 document.querySelectorAll(`#plan-timeline rect.t-run[data-order=\"${o}\"]`).length)",
            )
            .await;
        let to_go = |order: &str| {
            api[order]["runs"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|r| r["state"] != "succeeded")
                .count() as u64
        };
        assert_eq!(bars, [to_go("current"), to_go("recommended")]);
        let line: String = page
            .eval("document.querySelector('#plan-timeline line.t-deadline').dataset.deadline")
            .await;
        assert_eq!(line, deadline);
        // Per-group completion, for every group of the catalog.
        let group_rows: Vec<Value> = page
            .eval(
                "[...document.querySelectorAll('#plan-groups tbody tr')].map((r) => ({\
                 name: r.dataset.group, done: r.querySelector('.plan-done').textContent, \
                 fits: [...r.querySelectorAll('td.plan-end')].map((c) => c.dataset.fits)}))",
            )
            .await;
        assert_eq!(group_rows.len(), groups);
        for (row, g) in group_rows.iter().zip(api["groups"].as_array().unwrap()) {
            assert_eq!(row["name"], g["name"]);
            assert_eq!(row["done"], format!("{}/{}", g["runs_done"], g["runs"]));
            assert_eq!(
                row["fits"],
                json!([
                    g["fits_current"]
                        .as_bool()
                        .map(|b| b.to_string())
                        .unwrap_or_default(),
                    g["fits_recommended"]
                        .as_bool()
                        .map(|b| b.to_string())
                        .unwrap_or_default()
                ])
            );
        }
        page.screenshot("overview-plan").await;

        // Apply the recommended order: one button (and its confirmation).
        assert_ne!(
            api["current"]["groups_fit"], api["recommended"]["groups_fit"],
            "the suite's recommended order completes more groups than today's: {}",
            api["recommended"]
        );
        wait_live(&page).await;
        page.click("#plan-apply").await;
        page.wait_for::<bool>(
            SHOW,
            "the confirmation",
            "!document.getElementById('plan-apply-confirm').hidden",
        )
        .await;
        page.click("#plan-apply-yes").await;
        let result: String = page
            .wait_for(
                SHOW,
                "the apply result",
                "document.getElementById('plan-apply-status').dataset.result || null",
            )
            .await;
        let status: String = page.eval(&text_of("#plan-apply-status")).await;
        assert_eq!(result, "applied", "{status}");
        let after = plan(&server).await;
        assert_eq!(
            after["current"]["groups_fit"],
            api["recommended"]["groups_fit"]
        );
        let cells: Vec<String> = page
            .eval(
                "['#plan-groups-current', '#plan-groups-recommended']\
                 .map((s) => document.querySelector(s).textContent)",
            )
            .await;
        assert_eq!(
            cells[0], cells[1],
            "today's order is now the recommended one"
        );
        assert_eq!(cells[0], fit(&after, "current", "groups_fit", groups));
        // The submitted experiments reach the jobs table through the event stream.
        let total = server.jobs().await.len();
        page.wait_for::<bool>(
            SHOW,
            "every job in the jobs table",
            &format!(
                "document.querySelectorAll('#jobs-table tbody tr[data-job-id]').length === {total}"
            ),
        )
        .await;
        page.screenshot("overview-applied").await;
        browser.close().await;
    });
}

#[test]
fn a_group_study_overlays_growing_curves_and_marks_a_preemption() {
    run(async {
        let server = Server::start().await;
        let (status, answer) = server
            .post("/jobs", json!({"group": "exp07-precision"}))
            .await;
        assert_eq!(status, 201, "{answer}");
        // Two pods: two of the group's runs train at once.
        let slow = ["--trainer-env", "PODQ_SIM_RUN_SECS=90"];
        let pod_a = server.worker("pod-a", 2, &slow);
        let _pod_b = server.worker("pod-b", 2, &slow);
        let running: Vec<String> = eventually(RUN, "two runs training", || async {
            let ids: Vec<String> = server
                .jobs()
                .await
                .into_iter()
                .filter(|j| j["state"] == "running" && j["last_step"].as_i64().unwrap_or(0) > 0)
                .map(|j| j["id"].as_str().unwrap().to_owned())
                .collect();
            (ids.len() >= 2).then_some(ids)
        })
        .await;

        let browser = Browser::launch().await;
        let page = browser.open(&format!("{}/", server.url)).await;
        wait_live(&page).await;
        // Open the group from the groups table.
        page.wait_for::<bool>(
            SHOW,
            "the groups table",
            "!!document.querySelector('#groups-table tr[data-group=\"exp07-precision\"]')",
        )
        .await;
        page.click("#groups-table tr[data-group=\"exp07-precision\"] td.title")
            .await;
        page.wait_for::<bool>(
            SHOW,
            "the study view",
            "document.body.dataset.view === 'study' && document.getElementById('study-view').dataset.group === 'exp07-precision'",
        )
        .await;
        assert!(page.url().await.contains("#study=exp07-precision"));
        // A training metric, to watch points arrive.
        page.wait_for::<bool>(
            SHOW,
            "train/lm_loss among the metrics",
            "[...document.getElementById('study-metric').options].some((o) => o.value === 'train/lm_loss')",
        )
        .await;
        page.set_value("#study-metric", "train/lm_loss").await;
        let curves_js = "Object.fromEntries([...document.querySelectorAll('#study-chart g.curve')]\
             .map((g) => [g.dataset.jobId, Number(g.dataset.points)]))";
        let first: Value = page
            .wait_for(
                SHOW,
                "two curves with points",
                &format!(
                    "(() => {{ const c = {curves_js}; \
                     return document.getElementById('study-chart').dataset.metric === 'train/lm_loss' \
                     && Object.values(c).filter((n) => n > 1).length >= 2 ? c : null; }})()"
                ),
            )
            .await;
        // The curves grow while we watch, through the event stream alone.
        page.wait_for::<Value>(
            SHOW,
            "both running curves to grow",
            &format!(
                "(() => {{ const before = {first}; const c = {curves_js}; \
                     return {ids}.every((id) => c[id] > before[id]) ? c : null; }})()",
                ids = serde_json::to_string(&running[..2]).unwrap()
            ),
        )
        .await;
        let rows: Vec<Value> = page
            .eval(
                "[...document.querySelectorAll('#study-table tbody tr')].map((r) => ({\
                 experiment: r.dataset.experiment, baseline: r.dataset.baseline}))",
            )
            .await;
        let (_, study) = server.get("/groups/exp07-precision/study").await;
        assert_eq!(
            rows.len(),
            study["rows"].as_array().unwrap().len(),
            "{study}"
        );
        assert!(
            rows.iter()
                .any(|r| r["experiment"] == "exp07b" && r["baseline"] == "true"),
            "the baseline row is in the results table: {rows:?}"
        );
        let params: Vec<String> = page
            .eval("[...document.querySelectorAll('#study-table thead th[data-param]')].map((t) => t.dataset.param)")
            .await;
        assert!(
            params.iter().any(|p| p.ends_with("forward_dtype")),
            "the varied parameter is a column: {params:?}"
        );
        page.screenshot("study-growing").await;

        // Preempt the pod of one running job: a marker appears on its curve.
        let preempted_job = eventually(RUN, "the job on pod-a", || async {
            let (_, pods) = server.get("/pods").await;
            pods.as_array()?.iter().find(|p| p["name"] == "pod-a")?["current_job"]
                .as_str()
                .map(str::to_owned)
        })
        .await;
        server.committed_at_least(&preempted_job, 1, RUN).await;
        pod_a.control("preempt");
        let stop_step: i64 = page
            .wait_for(
                RUN,
                "a preemption marker on the preempted run's curve",
                &format!(
                    "(() => {{ const m = document.querySelector('#study-chart g.curve[data-job-id={id}] [data-marker=\"preempted\"]'); \
                     return m ? Number(m.dataset.step) : null; }})()",
                    id = js_str(&preempted_job)
                ),
            )
            .await;
        let job = server.job(&preempted_job).await;
        assert_eq!(job["attempts"][0]["outcome"], "preempted", "{job}");
        assert_eq!(
            job["attempts"][0]["end_step"], stop_step,
            "the marker sits where the attempt ended"
        );
        // The resumed attempt's start is marked too, at its resume step.
        let resume_step: i64 = page
            .wait_for(
                RUN,
                "a resume marker",
                &format!(
                    "(() => {{ const m = document.querySelector('#study-chart g.curve[data-job-id={id}] [data-marker=\"resume\"]'); \
                     return m ? Number(m.dataset.step) : null; }})()",
                    id = js_str(&preempted_job)
                ),
            )
            .await;
        let job = server.job(&preempted_job).await;
        let resumed_from = job["attempts"][1]["start_step"].as_i64();
        assert_eq!(resumed_from, Some(resume_step), "{job}");
        page.screenshot("study-preempted").await;

        // Pod-hours on the x axis, smoothing, a metric: all in the URL, kept by a reload.
        page.set_value("#study-x", "hours").await;
        page.set_value("#study-smooth", "0.6").await;
        page.wait_for::<bool>(
            SHOW,
            "the chart in pod-hours with the marker",
            &format!(
                "document.getElementById('study-chart').dataset.x === 'hours' && \
                 !!document.querySelector('#study-chart g.curve[data-job-id={id}] [data-marker=\"preempted\"]')",
                id = js_str(&preempted_job)
            ),
        )
        .await;
        let url = page.url().await;
        for part in [
            "study=exp07-precision",
            "metric=train%2Flm_loss",
            "x=hours",
            "smooth=0.6",
        ] {
            assert!(url.contains(part), "{part} in {url}");
        }
        page.reload().await;
        let restored: Value = page
            .wait_for(
                SHOW,
                "the same view after a reload",
                "(() => { const c = document.getElementById('study-chart'); \
                 return document.body.dataset.view === 'study' && c.querySelector('g.curve') ? \
                 {metric: c.dataset.metric, x: c.dataset.x, smooth: c.dataset.smooth, \
                 select: document.getElementById('study-metric').value, \
                 slider: document.getElementById('study-smooth').value} : null; })()",
            )
            .await;
        assert_eq!(
            restored,
            json!({"metric": "train/lm_loss", "x": "hours", "smooth": "0.6", "select": "train/lm_loss", "slider": "0.6"})
        );
        page.screenshot("study-pod-hours").await;

        // The job's own panel: each attempt shows its own resume point.
        page.click(&format!(
            "#study-legend a[data-open-job={}]",
            js_str(&preempted_job)
        ))
        .await;
        let resumes: Vec<Value> = page
            .wait_for(
                SHOW,
                "the attempts of the preempted job",
                &format!(
                    "document.getElementById('job-detail').dataset.jobId === {id} && \
                     document.querySelectorAll('#detail-attempts tbody tr[data-attempt]').length >= 2 && \
                     [...document.querySelectorAll('#detail-attempts tbody tr[data-attempt]')]\
                     .map((r) => [Number(r.dataset.attempt), r.querySelector('td.resume').dataset.resumeFrom])",
                    id = js_str(&preempted_job)
                ),
            )
            .await;
        let job = server.job(&preempted_job).await;
        for pair in &resumes {
            let n = pair[0].as_i64().unwrap();
            let attempt = job["attempts"]
                .as_array()
                .unwrap()
                .iter()
                .find(|a| a["attempt"] == n)
                .unwrap();
            assert_eq!(
                pair[1].as_str().unwrap(),
                attempt["resume_from"].as_str().unwrap_or(""),
                "attempt {n} shows its own resume point"
            );
        }
        assert!(
            resumes.iter().any(|p| p[0] == 1 && p[1] == ""),
            "attempt 1 started from scratch: {resumes:?}"
        );
        // Its pod time: a stacked bar for the run and each attempt, each segment as wide as
        // its share; the preempted attempt carries the pod's recovery.
        let bars: Value = page
            .wait_for(
                SHOW,
                "the pod-time bars of the run and its attempts",
                "(() => { const rows = [...document.querySelectorAll('#detail-pod-time .pt-row')]; \
                 if (rows.length < 3) return null; \
                 return Object.fromEntries(rows.map((r) => [r.dataset.podTime, \
                   Object.fromEntries([...r.querySelectorAll('.pt-seg')].map((s) => \
                     [s.dataset.cause, parseFloat(s.style.width)]))])); })()",
            )
            .await;
        let first = &bars["attempt 1"];
        assert!(first["productive"].as_f64().unwrap_or(0.0) > 0.0, "{bars}");
        assert!(
            first["provisioning"].as_f64().unwrap_or(0.0) > 0.0,
            "{bars}"
        );
        let widths: f64 = bars["run"]
            .as_object()
            .unwrap()
            .values()
            .map(|w| w.as_f64().unwrap())
            .sum();
        assert!(
            (widths - 100.0).abs() < 0.1,
            "the run's segments fill the bar: {bars}"
        );
        page.screenshot("job-pod-time").await;
        // The study's own bar is on the plan card.
        let grant: bool = page
            .eval("!!document.querySelector('#plan-pod-time .pt-row[data-pod-time=\"grant\"] .pt-seg[data-cause=\"productive\"]')")
            .await;
        assert!(grant, "the grant's pod time is on the plan card");
        // And the median recovery from the preemption, by phase.
        let recovery: Value = page
            .wait_for(
                SHOW,
                "the median recovery on the plan card",
                "(() => { const r = document.querySelector('#plan-recovery .recovery[data-recovery$=\"/preempted\"]'); \
                 return r ? {p50: parseFloat(r.dataset.p50S), text: r.textContent} : null; })()",
            )
            .await;
        let (_, recoveries) = server.get("/recoveries").await;
        let summary = recoveries["summary"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["cause"] == "preempted")
            .cloned()
            .unwrap();
        assert_eq!(recovery["p50"], summary["p50_s"], "{recovery}");
        let text = recovery["text"].as_str().unwrap();
        for phase in [
            "stopping", "waiting", "creating", "setup", "startup", "compile", "restore",
        ] {
            assert!(text.contains(phase), "{phase} in {text}");
        }
        // Back closes the panel and stays on the study.
        page.eval::<Value>("history.back()").await;
        page.wait_for::<bool>(
            SHOW,
            "the panel closed by back",
            "document.getElementById('job-detail').hidden && document.body.dataset.view === 'study'",
        )
        .await;
        browser.close().await;
    });
}

#[test]
fn the_study_marks_each_runs_rung_and_the_panel_says_its_decision() {
    run(async {
        let dir = tempfile::tempdir().unwrap();
        let options = ServerOptions {
            experiments: catalog_with_rungs(
                dir.path(),
                "{metric: eval/exact_accuracy, at: [25%], keep: 1/2}",
            ),
            ..ServerOptions::default()
        };
        let server = Server::start_with(options).await;
        let (status, answer) = server.post("/jobs", json!({"group": RUNG_GROUP})).await;
        assert_eq!(status, 201, "{answer}");
        let ids: std::collections::BTreeMap<String, String> = answer["created"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| {
                (
                    c["experiment"].as_str().unwrap().to_owned(),
                    c["job_id"].as_str().unwrap().to_owned(),
                )
            })
            .collect();
        // The baseline row goes on; the first other run judged ranks below it and waits.
        let mut judged = Vec::new();
        let first = loop {
            let experiment = curve_pod(&server)
                .play_one(
                    0.25,
                    &mut judged,
                    |e| if e == "exp10b" { 0.95 } else { 0.8 },
                )
                .await
                .expect("a run to lease");
            if experiment != "exp10b" {
                break experiment;
            }
        };

        let browser = Browser::launch().await;
        let page = browser
            .open(&format!("{}/#study={RUNG_GROUP}", server.url))
            .await;
        wait_live(&page).await;
        let marker = |id: &str, verdict: &str| {
            format!(
                "(() => {{ const m = document.querySelector('#study-chart g.curve[data-job-id={id}] \
                 [data-marker=\"rung\"][data-verdict={verdict}]'); \
                 return m ? {{step: Number(m.dataset.step), rung: Number(m.dataset.rung), \
                 title: m.querySelector('title').textContent}} : null; }})()",
                id = js_str(id),
                verdict = js_str(verdict)
            )
        };
        let waiting: Value = page
            .wait_for(
                SHOW,
                "the waiting run's rung mark",
                &marker(&ids[&first], "paused"),
            )
            .await;
        assert_eq!(waiting["rung"], 1, "{waiting}");
        assert!(
            waiting["title"]
                .as_str()
                .unwrap()
                .contains("waiting for its siblings"),
            "{waiting}"
        );
        page.wait_for::<bool>(
            SHOW,
            "the rungs table",
            "!document.getElementById('study-rungs').hidden && \
             document.getElementById('study-rungs-desc').textContent.startsWith('eval/exact_accuracy at 25%, keep 50%')",
        )
        .await;

        // The others are judged below it: it is promoted, and the two worst are pruned, which
        // the page shows live.
        let others: Vec<String> = ["exp10a", "exp10c", "exp10d", "exp10e"]
            .into_iter()
            .filter(|e| *e != first)
            .map(str::to_owned)
            .collect();
        let values: std::collections::BTreeMap<String, f64> = others
            .iter()
            .cloned()
            .zip([0.5, 0.3, 0.1])
            .chain([(first.clone(), 0.8), ("exp10b".to_owned(), 0.95)])
            .collect();
        while curve_pod(&server)
            .play_one(0.25, &mut judged, |e| values[e])
            .await
            .is_some()
        {}
        let pruned = &others[1];
        let mark: Value = page
            .wait_for(
                SHOW,
                "the pruned run's rung mark",
                &marker(&ids[pruned], "pruned"),
            )
            .await;
        let job = server.job(&ids[pruned]).await;
        assert_eq!(job["state"], "stopped", "{job}");
        let total = job["total_steps"].as_i64().unwrap();
        assert_eq!(
            mark["step"],
            (total as f64 * 0.25).ceil() as i64,
            "the mark sits at the rung's step: {mark}"
        );
        let title = mark["title"].as_str().unwrap();
        assert!(
            title.contains("rung 1 (25%)")
                && title.contains("eval/exact_accuracy = 0.3")
                && title.contains("rank 4 of 5")
                && title.ends_with("pruned"),
            "{title}"
        );
        page.wait_for::<Value>(
            SHOW,
            "the promoted run's rung mark",
            &marker(&ids[&first], "promoted"),
        )
        .await;
        let cell: Value = page
            .wait_for(
                SHOW,
                "the pruned run's cell in the rungs table",
                &format!(
                    "(() => {{ const td = document.querySelector('#study-rungs-table tbody tr[data-experiment={exp}] td[data-rung=\"1\"]'); \
                     return td && td.dataset.verdict === 'pruned' ? {{text: td.textContent}} : null; }})()",
                    exp = js_str(pruned)
                ),
            )
            .await;
        assert_eq!(cell["text"], "0.3 4/5 pruned", "{cell}");
        let legend: String = page
            .eval(&format!(
                "document.querySelector('#study-legend li[data-experiment={exp}] [data-rung-verdict]').textContent",
                exp = js_str(pruned)
            ))
            .await;
        assert_eq!(legend, "pruned at rung 1");
        page.screenshot("study-rungs").await;

        // The job's panel, opened from the rungs table, says its decision.
        page.click(&format!(
            "#study-rungs-table tbody tr[data-experiment={}] a[data-open-job]",
            js_str(pruned)
        ))
        .await;
        let said: String = page
            .wait_for(
                SHOW,
                "the panel's rung decision",
                "document.querySelector('#detail-facts dd.rungs [data-verdict=\"pruned\"]')?.textContent ?? null",
            )
            .await;
        assert_eq!(said, "rung 1: pruned, rank 4 of 5 (0.3)");
        page.screenshot("job-pruned-at-rung").await;
        browser.close().await;
    });
}

#[test]
fn a_run_the_divergence_guard_stopped_shows_where_and_why() {
    run(async {
        let server = Server::start().await;
        let id = server.submit_one("exp01a", json!({})).await;
        let _worker = server.worker(
            "pod-g",
            2,
            &[
                "--trainer-env",
                "PODQ_SIM_RUN_SECS=20",
                "--trainer-env",
                "PODQ_SIM_FAULT=diverge-at-step=800",
            ],
        );
        server.wait_state(&id, "stopped", RUN).await;

        let browser = Browser::launch().await;
        let page = browser.open(&format!("{}/#job={id}", server.url)).await;
        wait_live(&page).await;
        let why: String = page
            .wait_for(
                SHOW,
                "the panel of the stopped job with its rule",
                "document.getElementById('job-detail').dataset.state === 'stopped' && \
                 [...document.querySelectorAll('#detail-facts dt')] \
                   .find((dt) => dt.textContent === 'Stopped by')?.nextElementSibling.textContent",
            )
            .await;
        assert!(
            why.contains("divergence guard") && why.contains("at step 820") && why.contains("NaN"),
            "{why}"
        );
        // The loss curve ends where the run diverged and marks the non-finite reports.
        let marks: u64 = page
            .wait_for(
                SHOW,
                "the non-finite marks on the loss chart",
                "document.querySelectorAll('#detail-charts svg[data-metric=\"train/lm_loss\"] .c-nonfinite').length || null",
            )
            .await;
        assert!(marks >= 3, "{marks} marks");
        let label: String = page
            .eval("document.querySelector('#detail-charts svg[data-metric=\"train/lm_loss\"]').getAttribute('aria-label')")
            .await;
        assert!(label.contains("non-finite from step 800"), "{label}");
        // Counted as stopped, and a person may run it on.
        let stopped: u64 = page
            .wait_for(
                SHOW,
                "the stopped count",
                "Number(document.querySelector('#state-counts [data-state=\"stopped\"]')?.dataset.count) || null",
            )
            .await;
        assert_eq!(stopped, 1);
        let requeue: String = page
            .eval("(({hidden, textContent}) => hidden ? '' : textContent)(document.getElementById('detail-requeue'))")
            .await;
        assert_eq!(requeue, "Run on without its rules");
        page.screenshot("job-stopped").await;
        // Its rules would judge it the same way again: the button lifts them.
        page.click("#detail-requeue").await;
        eventually(RUN, "the job requeued with its rules lifted", || async {
            let job = server.job(&id).await;
            (job["ignore_stop_rules"] == true && job["state"] != "stopped").then_some(())
        })
        .await;
        browser.close().await;
    });
}

#[test]
fn cancelling_a_running_job_from_the_page_stops_it() {
    run(async {
        let server = Server::start().await;
        let id = server.submit_one("exp01a", json!({})).await;
        let worker = server.worker("pod-c", 2, &["--trainer-env", "PODQ_SIM_RUN_SECS=300"]);
        server.wait_state(&id, "running", RUN).await;

        let browser = Browser::launch().await;
        let page = browser.open(&format!("{}/", server.url)).await;
        wait_live(&page).await;
        let row = format!("#jobs-table tbody tr[data-job-id={}]", js_str(&id));
        page.wait_for::<bool>(
            SHOW,
            "the running job's row",
            &format!(
                "document.querySelector({})?.dataset.state === 'running'",
                js_str(&row)
            ),
        )
        .await;
        page.click(&format!("{row} td.exp")).await;
        page.wait_for::<bool>(
            SHOW,
            "the job's panel with a cancel button",
            "document.getElementById('job-detail').dataset.state === 'running' && !document.getElementById('detail-cancel').hidden",
        )
        .await;
        page.click("#detail-cancel").await;
        page.click("#detail-cancel-yes").await;
        page.wait_for::<bool>(
            RUN,
            "the page to show the job cancelled",
            &format!(
                "document.getElementById('job-detail').dataset.state === 'cancelled' && \
                 document.querySelector({})?.dataset.state === 'cancelled'",
                js_str(&row)
            ),
        )
        .await;
        // The API agrees, and the attempt was stopped on the pod.
        let job = eventually(RUN, "the attempt to end cancelled", || async {
            let job = server.job(&id).await;
            (job["attempts"][0]["outcome"] == "cancelled").then_some(job)
        })
        .await;
        assert_eq!(job["state"], "cancelled");
        eventually(RUN, "no trainer left on the pod", || async {
            worker.trainer_pids().is_empty().then_some(())
        })
        .await;
        let cancelled: u64 = page
            .wait_for(
                SHOW,
                "the cancelled count",
                "Number(document.querySelector('#state-counts [data-state=\"cancelled\"]').dataset.count) || null",
            )
            .await;
        assert_eq!(cancelled, 1);
        page.screenshot("cancelled").await;
        browser.close().await;
    });
}

#[test]
fn a_failed_attempt_shows_its_reason_in_the_jobs_table() {
    run(async {
        let server = Server::start().await;
        let id = server.submit_one("exp01b", json!({})).await;
        let worker = server.worker("pod-f", 2, &["--trainer-env", "PODQ_SIM_RUN_SECS=300"]);
        server.wait_state(&id, "running", RUN).await;
        let browser = Browser::launch().await;
        let page = browser.open(&format!("{}/", server.url)).await;
        wait_live(&page).await;
        worker.control("kill-host-1");
        let row = format!("#jobs-table tbody tr[data-job-id={}]", js_str(&id));
        let message: String = page
            .wait_for(
                RUN,
                "the failure's reason in the job's row",
                &format!(
                    "(() => {{ const m = document.querySelector({}); \
                     return m && /attempt 1 failed/.test(m.textContent) ? m.textContent : null; }})()",
                    js_str(&format!("{row} td.msg [data-message]"))
                ),
            )
            .await;
        let job = server.job(&id).await;
        let api_message = job["message"].as_str().unwrap_or_default().to_owned();
        assert!(
            api_message.starts_with("attempt 1 failed"),
            "the API's message: {job}"
        );
        assert!(
            message.contains("host 1"),
            "the row names the host: {message}"
        );
        page.eval::<Value>(&format!(
            "document.querySelector({}).scrollIntoView({{block: 'center'}})",
            js_str(&row)
        ))
        .await;
        page.screenshot("failure-reason").await;
        browser.close().await;
    });
}

#[test]
fn a_running_jobs_log_follows_live_per_host_with_search() {
    run(async {
        let server = Server::start().await;
        let id = server.submit_one("exp01a", json!({})).await;
        let _worker = server.worker(
            "pod-g",
            2,
            &[
                "--trainer-env",
                "PODQ_SIM_RUN_SECS=300",
                "--trainer-env",
                "PODQ_SIM_LOG_LINES_PER_S=5",
            ],
        );
        server.wait_state(&id, "running", RUN).await;

        let browser = Browser::launch().await;
        let page = browser.open(&format!("{}/#job={id}", server.url)).await;
        wait_live(&page).await;
        let count = "document.querySelectorAll('#detail-log .log-line').length";
        let first: u64 = page
            .wait_for(
                SHOW,
                "log lines in the job's panel",
                &format!("{count} || null"),
            )
            .await;
        // It follows: more lines arrive without a reload, from both hosts.
        page.wait_for::<bool>(
            RUN,
            "more lines from both hosts",
            &format!(
                "{count} > {first} + 4 && \
                 document.querySelector('#detail-log .log-line[data-host=\"0\"]') !== null && \
                 document.querySelector('#detail-log .log-line[data-host=\"1\"]') !== null"
            ),
        )
        .await;
        // One host, then a search: every line shown is host 1's and matches.
        page.set_value("#log-host", "1").await;
        page.wait_for::<bool>(
            RUN,
            "host 1's lines only",
            "(() => { const l = [...document.querySelectorAll('#detail-log .log-line')]; \
             return l.length > 0 && l.every((e) => e.dataset.host === '1'); })()",
        )
        .await;
        page.set_value("#log-grep", "chatter line [0-9]*7 ").await;
        page.wait_for::<bool>(
            RUN,
            "only matching lines",
            "(() => { const l = [...document.querySelectorAll('#detail-log .log-line')]; \
             return l.length > 0 && l.every((e) => e.dataset.host === '1' && /chatter line [0-9]*7 /.test(e.textContent)); })()",
        )
        .await;
        // A bad pattern says why in the panel, and shows nothing.
        page.set_value("#log-grep", "(").await;
        page.wait_for::<bool>(
            SHOW,
            "the pattern's error",
            "document.getElementById('log-status').textContent.includes('grep') && \
             document.querySelectorAll('#detail-log .log-line').length === 0",
        )
        .await;
        let _: Value = page
            .eval("document.getElementById('detail-log').scrollIntoView() ?? null")
            .await;
        page.screenshot("log-view").await;
        browser.close().await;
    });
}

/// Submits `experiment` as the person whose token is `token`, returning the new job's id.
async fn submit_as(server: &Server, token: &str, experiment: &str) -> String {
    let (status, answer) = server
        .send(
            reqwest::Method::POST,
            "/jobs",
            json!({"experiments": [experiment]}).to_string(),
            &[
                ("content-type", "application/json"),
                ("authorization", &format!("Bearer {token}")),
            ],
        )
        .await;
    assert_eq!(status, 201, "{answer}");
    answer["created"][0]["job_id"].as_str().unwrap().to_owned()
}

/// Adds a person through the API as the admin, returning their token.
async fn add_user(server: &Server, admin: &str, name: &str, role: &str) -> String {
    let (status, added) = server
        .send(
            reqwest::Method::POST,
            "/users",
            json!({"name": name, "role": role}).to_string(),
            &[
                ("content-type", "application/json"),
                ("authorization", &format!("Bearer {admin}")),
            ],
        )
        .await;
    assert_eq!(status, 201, "{added}");
    assert_eq!(added["user"]["role"], role, "{added}");
    added["token"].as_str().unwrap().to_owned()
}

#[test]
fn a_submitter_sees_who_they_are_and_what_only_others_may_do() {
    run(async {
        let admin = "dashboard-test-admin-token";
        let server = Server::start_with(ServerOptions {
            env: vec![("PODQ_ADMIN_TOKEN".into(), admin.into())],
            ..ServerOptions::default()
        })
        .await;
        let bob = add_user(&server, admin, "bob", "submitter").await;
        let alice = add_user(&server, admin, "alice", "submitter").await;
        let theirs = submit_as(&server, &alice, "exp01a").await;
        let mine = submit_as(&server, &bob, "exp01b").await;

        let browser = Browser::launch().await;
        let page = browser.open(&format!("{}/", server.url)).await;
        wait_live(&page).await;
        // On loopback reads need no token: the page reads, and says who it reads as.
        let who: Vec<String> = page
            .wait_for(
                SHOW,
                "the top bar naming the anonymous reader",
                "!document.getElementById('who').hidden && \
                 [document.getElementById('who-name').textContent, document.getElementById('who-role').textContent]",
            )
            .await;
        assert_eq!(who, ["anonymous", "viewer"]);

        // Bob gives his token, as a person would: the top bar's button, the form.
        page.click("#who-change").await;
        page.wait_for::<bool>(
            SHOW,
            "the token form",
            "!document.getElementById('token-form').hidden",
        )
        .await;
        // A token the server does not know is refused, forgotten, and asked for again.
        page.set_value("#token-input", "podq_not-a-token-of-anyone")
            .await;
        page.click("#token-form button[type=submit]").await;
        let why: String = page
            .wait_for(
                SHOW,
                "the form asking again, with the server's reason",
                "!document.getElementById('token-form').hidden && \
                 /not one this server knows/.test(document.getElementById('token-why').textContent) && \
                 document.getElementById('token-why').textContent",
            )
            .await;
        let kept: Value = page
            .eval(&format!(
                "[sessionStorage.getItem('podq-token'), {}]",
                text_of("#who-name")
            ))
            .await;
        assert_eq!(kept, json!([null, "anonymous"]), "{why}");
        page.set_value("#token-input", &bob).await;
        page.click("#token-form button[type=submit]").await;
        let who: Value = page
            .wait_for(
                SHOW,
                "the top bar naming bob",
                &format!(
                    "{} === 'bob' && [{}, {}, document.getElementById('token-form').hidden]",
                    text_of("#who-name"),
                    text_of("#who-name"),
                    text_of("#who-role")
                ),
            )
            .await;
        assert_eq!(
            who,
            json!(["bob", "submitter", true]),
            "the form closed once used"
        );

        // Applying the plan is an admin's: the button is disabled, and says so.
        let apply: Value = page
            .wait_for(
                SHOW,
                "the plan's apply button disabled for a submitter",
                "(() => { const b = document.getElementById('plan-apply'); \
                 const why = document.getElementById('plan-apply-why'); \
                 return document.getElementById('plan').dataset.loaded === 'true' && b.disabled && !why.hidden \
                 ? {title: b.title, why: why.textContent} : null; })()",
            )
            .await;
        assert_eq!(apply["why"], "admins only", "{apply}");
        let title = apply["title"].as_str().unwrap();
        assert!(
            title.starts_with("admins only") && title.contains("you are bob (submitter)"),
            "the button's tooltip says why and who: {title}"
        );
        page.screenshot("submitter-overview").await;

        // Alice's job: bob may read it, not cancel it.
        let row = |id: &str| format!("#jobs-table tbody tr[data-job-id={}] td.exp", js_str(id));
        page.click(&row(&theirs)).await;
        let panel: Value = page
            .wait_for(
                SHOW,
                "alice's job's panel with its cancel button disabled",
                &format!(
                    "(() => {{ const c = document.getElementById('detail-cancel'); \
                     const why = document.getElementById('detail-why'); \
                     return document.getElementById('job-detail').dataset.jobId === {id} && \
                     document.getElementById('detail-by').textContent && !c.hidden && c.disabled && !why.hidden \
                     ? {{title: c.title, why: why.textContent, by: document.getElementById('detail-by').textContent, \
                        facts: document.getElementById('detail-facts').innerText}} : null; }})()",
                    id = js_str(&theirs)
                ),
            )
            .await;
        assert_eq!(
            panel["why"], "only alice or an admin may cancel or suspend this job",
            "{panel}"
        );
        assert!(
            panel["title"]
                .as_str()
                .unwrap()
                .ends_with("you are bob (submitter)"),
            "{panel}"
        );
        assert!(
            panel["by"]
                .as_str()
                .unwrap()
                .starts_with("submitted by alice, "),
            "{panel}"
        );
        let facts = panel["facts"].as_str().unwrap();
        assert!(
            facts.contains("Submitted by\nalice") && facts.contains("Class\nnormal"),
            "the facts name the submitter and the class: {facts}"
        );
        page.screenshot("submitter-others-job").await;

        // His own job: he cancels it from the page, and the panel says he did.
        page.click("#detail-close").await;
        page.click(&row(&mine)).await;
        page.wait_for::<bool>(
            SHOW,
            "bob's job's panel with its cancel button enabled",
            &format!(
                "document.getElementById('job-detail').dataset.jobId === {id} && \
                 document.getElementById('job-detail').dataset.state === 'queued' && \
                 !document.getElementById('detail-cancel').hidden && \
                 !document.getElementById('detail-cancel').disabled && \
                 document.getElementById('detail-why').hidden",
                id = js_str(&mine)
            ),
        )
        .await;
        page.click("#detail-cancel").await;
        page.click("#detail-cancel-yes").await;
        let by: String = page
            .wait_for(
                SHOW,
                "the panel saying bob cancelled the job",
                "document.getElementById('job-detail').dataset.state === 'cancelled' && \
                 /^cancelled by bob, /.test(document.getElementById('detail-by').textContent) && \
                 document.getElementById('detail-by').textContent",
            )
            .await;
        assert!(by.ends_with(" ago") || by.ends_with("just now"), "{by}");
        let (status, events) = server.get(&format!("/jobs/{mine}/events")).await;
        assert_eq!(status, 200, "{events}");
        let events = events.as_array().or(events["events"].as_array()).unwrap();
        assert!(
            events
                .iter()
                .any(|e| e["kind"] == "cancelled" && e["by"] == "bob"),
            "the API records bob's cancel: {events:?}"
        );
        let timeline: bool = page
            .eval("!!document.querySelector('#detail-events li[data-kind=\"cancelled\"] .ev-by[data-by=\"bob\"]')")
            .await;
        assert!(timeline, "the timeline names who cancelled");
        page.screenshot("submitter-cancelled").await;

        // The token stays with the tab: a reload is still bob.
        page.reload().await;
        page.wait_for::<bool>(
            SHOW,
            "bob still named after a reload",
            &format!("{} === 'bob'", text_of("#who-name")),
        )
        .await;
        browser.close().await;
    });
}

#[test]
fn the_capacity_card_shows_pools_of_two_generations_and_each_attempts_slice() {
    run(async {
        let server = Server::start().await;
        // A v4 pool whose one open zone holds one slice, and a v6e pool: exp07 lists both.
        let yaml = common::pools::pool_yaml(
            "dash",
            2,
            "never",
            &[
                "{zone: zone-a, sim: {fault: stockout}}",
                "{zone: zone-b, sim: {capacity: 1}}",
            ],
        ) + "  - name: dash-v6e\n    accelerator: v6e-32\n    max_slices: 1\n    \
               idle_after: never\n    provisioning: spot\n    driver: local\n    zones:\n      \
               - {zone: zone-d, sim: {capacity: 1}}\n";
        let _pool = common::pools::PoolProcess::start(&server, &yaml, 120);
        let first = server.submit_one("exp07a", json!({})).await;
        let second = server.submit_one("exp07c", json!({})).await;
        server.wait_state(&first, "running", RUN).await;
        server.wait_state(&second, "running", RUN).await;
        let browser = Browser::launch().await;
        let page = browser.open(&format!("{}/", server.url)).await;
        wait_live(&page).await;
        let pool = "#capacity [data-pool=\"dash\"]";
        let v6e = "#capacity [data-pool=\"dash-v6e\"]";
        let shown: String = page
            .wait_for(
                SHOW,
                "the v4 pool's blocked zone and its ready slice, and the v6e pool's",
                &format!(
                    "(() => {{ const card = document.getElementById('capacity'); \
                     const zone = document.querySelector({zone}); \
                     const slice = document.querySelector({slice}); \
                     const other = document.querySelector({other}); \
                     return !card.hidden && zone && slice && other ? card.textContent : null; }})()",
                    zone = js_str(&format!(
                        "{pool} [data-zone=\"zone-a\"][data-zone-state=\"stockout\"]"
                    )),
                    slice = js_str(&format!("{pool} [data-slice-state=\"ready\"]")),
                    other = js_str(&format!("{v6e} [data-slice-state=\"ready\"]")),
                ),
            )
            .await;
        assert!(shown.contains("zone-b"), "{shown}");
        assert!(shown.contains("v4-64 · 1 of 2 slices"), "{shown}");
        assert!(shown.contains("v6e-32 · 1 of 1 slices"), "{shown}");
        let demand: Value = page
            .eval(
                "[...document.querySelectorAll('#capacity [data-passed-on]')]\
                 .map((e) => [e.dataset.demand, e.dataset.passedOn])",
            )
            .await;
        assert_eq!(demand.as_array().map(Vec::len), Some(2), "{demand}");
        page.eval::<Value>("document.getElementById('capacity').scrollIntoView({block: 'center'})")
            .await;
        page.screenshot("capacity").await;

        // Each attempt's panel row says the slice type it ran on.
        let (_, job) = server.get(&format!("/jobs/{second}")).await;
        let expected = job["attempts"][0]["accelerator"]
            .as_str()
            .unwrap()
            .to_owned();
        page.click(&format!(
            "#jobs-table tbody tr[data-job-id={}] td.exp",
            js_str(&second)
        ))
        .await;
        let slice: String = page
            .wait_for(
                SHOW,
                "the attempt's slice type in the job's panel",
                &format!(
                    "(() => {{ const td = document.querySelector('#detail-attempts td[data-accelerator]'); \
                     return document.getElementById('job-detail').dataset.jobId === {id} && td \
                     ? td.dataset.accelerator : null; }})()",
                    id = js_str(&second)
                ),
            )
            .await;
        assert_eq!(slice, expected, "{job}");
        let (_, first_job) = server.get(&format!("/jobs/{first}")).await;
        let mut types = vec![
            first_job["attempts"][0]["accelerator"]
                .as_str()
                .unwrap()
                .to_owned(),
            expected,
        ];
        types.sort();
        assert_eq!(types, ["v4-64", "v6e-32"], "one on each generation");
        browser.close().await;
    });
}

#[test]
fn a_person_signs_in_suspends_resumes_moves_their_job_and_submits_a_group() {
    run(async {
        let admin = "dashboard-test-admin-token";
        let worker_token = "dashboard-test-worker-token";
        let server = Server::start_with(ServerOptions {
            env: vec![
                ("PODQ_ADMIN_TOKEN".into(), admin.into()),
                ("PODQ_WORKER_TOKEN".into(), worker_token.into()),
            ],
            ..ServerOptions::default()
        })
        .await;
        let carol = add_user(&server, admin, "carol", "submitter").await;
        let mine = submit_as(&server, &carol, "exp01a").await;
        let _worker = server.worker(
            "pod-s",
            2,
            &[
                "--token",
                worker_token,
                "--trainer-env",
                "PODQ_SIM_RUN_SECS=60",
            ],
        );
        server.wait_state(&mine, "running", SHOW).await;

        let browser = Browser::launch().await;
        let page = browser.open(&format!("{}/", server.url)).await;
        wait_live(&page).await;
        // Carol signs in with her token: the top bar's button, the form.
        page.click("#who-change").await;
        page.wait_for::<bool>(
            SHOW,
            "the token form",
            "!document.getElementById('token-form').hidden",
        )
        .await;
        page.set_value("#token-input", &carol).await;
        page.click("#token-form button[type=submit]").await;
        page.wait_for::<bool>(
            SHOW,
            "the top bar naming carol",
            &format!("{} === 'carol'", text_of("#who-name")),
        )
        .await;

        let row = format!("#jobs-table tbody tr[data-job-id={}] td.exp", js_str(&mine));
        page.click(&row).await;
        // Her running job: Suspend offered, and the class list offers what she may use.
        let offered: Value = page
            .wait_for(
                SHOW,
                "her running job's panel offering suspend and a change of class",
                &format!(
                    "(() => {{ const s = document.getElementById('detail-suspend'); \
                     const f = document.getElementById('detail-change'); \
                     const d = document.getElementById('job-detail'); \
                     if (d.dataset.jobId !== {id} || d.dataset.state !== 'running' || s.hidden \
                         || s.disabled || f.hidden) return null; \
                     return [...document.querySelectorAll('#detail-class option')] \
                       .map((o) => [o.value, o.disabled]); }})()",
                    id = js_str(&mine)
                ),
            )
            .await;
        assert_eq!(
            offered,
            json!([["urgent", true], ["normal", false], ["sweep", false]]),
            "urgent may evict: an admin's class, disabled for a submitter"
        );
        page.screenshot("actions-running").await;

        page.click("#detail-suspend").await;
        let said: String = page
            .wait_for(
                SHOW,
                "the panel showing the job held, with Resume offered",
                "(() => { const d = document.getElementById('job-detail'); \
                 const r = document.getElementById('detail-resume'); \
                 return d.dataset.state === 'held' && !r.hidden && !r.disabled \
                   && document.getElementById('detail-suspend').hidden \
                   ? document.getElementById('detail-action-status').textContent : null; })()",
            )
            .await;
        assert!(said.starts_with("Suspend"), "{said}");
        assert_eq!(server.job(&mine).await["state"], "held");
        page.screenshot("actions-suspended").await;

        // Moved to the sweep class while held, then resumed: it runs again, as sweep.
        page.set_value("#detail-class", "sweep").await;
        page.click("#detail-change-apply").await;
        page.wait_for::<bool>(
            SHOW,
            "the change said done",
            "/^Now class sweep/.test(document.getElementById('detail-action-status').textContent)",
        )
        .await;
        page.click("#detail-resume").await;
        page.wait_for::<bool>(
            SHOW,
            "the panel showing the job queued or running again",
            "['queued', 'leased', 'running'].includes(document.getElementById('job-detail').dataset.state) \
             && !document.getElementById('detail-suspend').hidden",
        )
        .await;
        page.wait_for::<bool>(
            SHOW,
            "the job running again",
            "document.getElementById('job-detail').dataset.state === 'running'",
        )
        .await;
        page.screenshot("actions-resumed").await;
        let job = server.job(&mine).await;
        assert_eq!(job["priority_class"], "sweep", "{job}");
        let (_, events) = server.get(&format!("/jobs/{mine}/events")).await;
        let events = events
            .as_array()
            .or(events["events"].as_array())
            .unwrap()
            .clone();
        for kind in ["suspended", "class", "resumed"] {
            assert!(
                events
                    .iter()
                    .any(|e| e["kind"] == kind && e["by"] == "carol"),
                "the API records carol's {kind}: {events:?}"
            );
        }

        // She submits a group: the preview says what it would create and where the plan
        // puts it, before anything is sent.
        page.click("#detail-close").await;
        let urgent: bool = page
            .wait_for(
                SHOW,
                "the submit form's classes",
                "(() => { const o = document.querySelector('#submit-class option[value=urgent]'); \
                 return o ? o.disabled : null; })()",
            )
            .await;
        assert!(urgent, "urgent is not hers to submit to");
        page.set_value("#submit-group", "exp07-precision").await;
        let before = server.jobs().await.len();
        page.click("#submit-preview").await;
        let preview: String = page
            .wait_for(
                SHOW,
                "the preview",
                "(() => { const t = document.getElementById('submit-preview-text').textContent; \
                 return /would create/.test(t) && !document.getElementById('submit-send').hidden \
                 ? t : null; })()",
            )
            .await;
        assert!(
            preview.starts_with(
                "exp07-precision: would create 3, link 0, skip 0; the plan has its last run end"
            ),
            "{preview}"
        );
        assert_eq!(
            server.jobs().await.len(),
            before,
            "a preview stores nothing"
        );
        page.screenshot("actions-submit-preview").await;
        page.click("#submit-send").await;
        let said: String = page
            .wait_for(
                SHOW,
                "the submission said done",
                "(() => { const t = document.getElementById('submit-preview-text').textContent; \
                 return /^Submitted/.test(t) ? t : null; })()",
            )
            .await;
        assert_eq!(
            said,
            "Submitted exp07-precision: 3 created, 0 linked, 0 skipped."
        );
        let hers = server
            .jobs()
            .await
            .into_iter()
            .filter(|j| j["group"] == "exp07-precision" && j["submitted_by"] == "carol")
            .count();
        assert_eq!(hers, 3);
        browser.close().await;
    });
}

/// A pod played through the worker API whose runs each draw a curve to their rung.
fn curve_pod(server: &Server) -> RungPod<'_> {
    RungPod {
        curve: true,
        ..RungPod::new(server, "pod-r")
    }
}
