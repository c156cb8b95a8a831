//! The grant and the plan on the real 67-experiment suite: what fits in a 30-day grant of
//! 720 pod-hours on one v4-64, under the suite's order and under the recommended one.
//!
//! The expected answers follow from the hours in `experiments/`: 54 distinct runs, 40 h each
//! except exp06_d and exp06_e/f (20 h); the baseline run is shared by 12 groups.
//! - Today's order (suite order, nothing submitted): exp01 (6 runs, 240 h), exp02a (5 more,
//!   200 h) and exp02b (4 more, 160 h) end by hour 600; two of exp03's runs fit in the 120 h
//!   left, the third would end exactly at 720 h and the grant's clock has moved on by then:
//!   3 groups, 17 runs.
//! - The most whole groups: the shared baseline (40 h) and the four groups that need 80 h more
//!   each (exp07; exp09, whose exp09c and exp09e are one run; contrib01; contrib02) take
//!   360 h. Two more groups fit in the 360 h left: exp06 (120 h more) with exp01 (200 h),
//!   exp02b, exp03, exp04b, exp08 or exp10 (160 h each), or two of those 160 h groups. Seven
//!   would need at least 360 + 120 + 160 + 160 = 800 h. Among the choices of six, the plan
//!   keeps the groups earliest in the suite (the user's own order): exp01 and exp06. Their
//!   18 runs end at 680 h, and no further run fits in the 40 h left: 18 runs.
//! - With rungs at 25% and 50% keeping 1/2 on the six sweep groups
//!   (`tests/fixtures/sweep-rungs.yaml`), each sweep's runs are played with the hours the
//!   rungs leave: exp08 and exp10 (5 runs) 120 h instead of 200, exp06 70 h more than the
//!   baseline instead of 120, exp09 30 instead of 80, contrib01 and contrib02 50 instead of 80.
//!   The baseline, exp07 and the six sweeps take 480 h (520 with the work redone after
//!   preemptions), and exp02b (160 h) fits in what is left: 8 groups.

mod common;

use chrono::{Duration, Utc};
use common::Server;
use serde_json::{json, Value};

async fn put_grant(server: &Server, body: Value) -> (u16, Value) {
    server
        .send(reqwest::Method::PUT, "/grant", body.to_string(), &[])
        .await
}

fn thirty_days() -> Value {
    json!({
        "end": (Utc::now() + Duration::days(30)).to_rfc3339(),
        "pod_hours": {"v4-64": 720.0},
    })
}

fn names(plan: &Value, order: &str, field: &str, yes: bool) -> Vec<String> {
    plan[order][field]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["fits_deadline"] == yes)
        .map(|r| r["experiment"].as_str().unwrap().to_owned())
        .collect()
}

fn groups_that_fit(plan: &Value, which: &str) -> Vec<String> {
    plan["groups"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|g| g[which] == true)
        .map(|g| g["name"].as_str().unwrap().to_owned())
        .collect()
}

#[tokio::test]
async fn a_thirty_day_grant_on_the_real_suite() {
    let server = Server::start().await;

    // Before any grant, nothing claims to fit or not to fit.
    let (status, plan) = server.get("/plan").await;
    assert_eq!(status, 200, "{plan}");
    assert_eq!(plan["deadline"], Value::Null);
    assert_eq!(plan["current"]["runs_fit"], Value::Null);
    assert!(plan["current"]["runs"]
        .as_array()
        .unwrap()
        .iter()
        .all(|r| r["fits_deadline"].is_null()));
    let (_, status_json) = server.get("/status").await;
    assert_eq!(status_json["grant"], Value::Null);

    let (status, grant) = put_grant(&server, thirty_days()).await;
    assert_eq!(status, 200, "{grant}");
    assert_eq!(grant["source"], "api");

    let (status, plan) = server.get("/plan").await;
    assert_eq!(status, 200, "{plan}");
    assert_eq!(plan["current"]["runs"].as_array().unwrap().len(), 54);
    assert_eq!(
        plan["estimates"]["catalog"], 54,
        "nothing measured yet: {}",
        plan["estimates"]
    );
    // The plan counts the work each run is expected to redo after preemptions (one a day,
    // the prior, at each run's configured interval: every evaluation, ~4 hours).
    assert_eq!(plan["current"]["groups_fit"], 3, "{}", plan["groups"]);
    assert_eq!(plan["current"]["runs_fit"], 16);
    assert_eq!(
        groups_that_fit(&plan, "fits_current"),
        ["exp01-model-scaling", "exp02a-l-cycles", "exp02b-h-cycles"]
    );
    assert_eq!(plan["recommended"]["groups_fit"], 6, "{}", plan["groups"]);
    assert_eq!(plan["recommended"]["runs_fit"], 17);
    assert_eq!(
        groups_that_fit(&plan, "fits_recommended"),
        [
            "exp02b-h-cycles",
            "exp06-batch-size",
            "exp07-precision",
            "exp09-optimizer",
            "contrib01-curriculum",
            "contrib02-adaptive-halting"
        ]
    );
    let baseline = plan["recommended"]["runs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["experiment"] == "exp01c")
        .unwrap();
    assert_eq!(baseline["also_finishes"].as_array().unwrap().len(), 11);
    assert_eq!(baseline["fits_deadline"], true, "the shared baseline runs");
    // Its advice: every evaluation (813 steps, ~4 h) against Young/Daly's ~22 minutes.
    let advice = &baseline["checkpoint_advice"];
    assert_eq!(advice["interval_steps_now"], 813, "{advice}");
    assert_eq!(advice["interval_steps_advised"], 74, "{advice}");
    assert_eq!(advice["save_cost_source"], "assumed", "{advice}");

    // What fits with no preemptions, as planned, and at the advised intervals.
    let scenario = |name: &str| {
        plan["scenarios"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["name"] == name)
            .unwrap_or_else(|| panic!("scenario {name}: {}", plan["scenarios"]))
            .clone()
    };
    let (none, configured, advised) = (
        scenario("no_interruptions"),
        scenario("configured_intervals"),
        scenario("advised_intervals"),
    );
    assert_eq!(
        (none["runs_fit"].as_u64(), none["groups_fit"].as_u64()),
        (Some(18), Some(6))
    );
    assert_eq!(configured["runs_fit"], 17);
    assert_eq!(advised["runs_fit"], 18);
    let waste = |s: &Value| s["expected_waste_hours"].as_f64().unwrap();
    assert_eq!(waste(&none), 0.0);
    assert!((150.0..200.0).contains(&waste(&configured)), "{configured}");
    assert!((20.0..40.0).contains(&waste(&advised)), "{advised}");
    let saved = plan["pod_hours_saved_by_advice"].as_f64().unwrap();
    assert!((saved - (waste(&configured) - waste(&advised))).abs() < 1e-6);

    // A person reads the same as a table.
    let table = server.text("/plan").await;
    assert!(table.contains("whole groups"), "{table}");
    assert!(
        table.contains("3 of 14") && table.contains("6 of 14"),
        "{table}"
    );

    // Applying submits the suite in the recommended order; today's order becomes it.
    let (status, applied) = server.post("/plan/apply", json!({})).await;
    assert_eq!(status, 200, "{applied}");
    assert_eq!(applied["submitted"].as_array().unwrap().len(), 67);
    assert_eq!(applied["plan"]["current"]["groups_fit"], 6);
    assert_eq!(
        names(&applied["plan"], "current", "runs", true),
        names(&plan, "recommended", "runs", true)
    );
    let (_, status_json) = server.get("/status").await;
    assert_eq!(
        status_json["grant"]["groups_fit"], 6,
        "{}",
        status_json["grant"]
    );
    assert_eq!(status_json["jobs"]["queued"], 67);
    let status_table = server.text("/status").await;
    assert!(
        status_table.contains("17 of 54 runs, 6 of 14 groups fit"),
        "{status_table}"
    );

    // Applying again changes nothing.
    let (_, again) = server.post("/plan/apply", json!({})).await;
    assert_eq!(again["submitted"].as_array().unwrap().len(), 0, "{again}");
    assert_eq!(again["reprioritised"], 0);
}

#[tokio::test]
async fn a_bad_grant_or_deadline_is_refused_and_changes_nothing() {
    let server = Server::start().await;
    let (status, _) = put_grant(&server, thirty_days()).await;
    assert_eq!(status, 200);
    let (_, before) = server.get("/grant").await;
    let past = (Utc::now() - Duration::days(1)).to_rfc3339();
    let soon = (Utc::now() + Duration::days(2)).to_rfc3339();
    let later = (Utc::now() + Duration::days(5)).to_rfc3339();
    let cases = [
        // Well-formed but impossible now: 422.
        (json!({"end": past}), 422, "deadline_passed"),
        (json!({"start": later, "end": soon}), 422, "invalid_grant"),
        (
            json!({"end": soon, "pod_hours": {"v5p-128": 10.0}}),
            422,
            "unknown_accelerator",
        ),
        // What the document forbids: 400.
        (
            json!({"end": soon, "pod_hours": {"v4-64": -1.0}}),
            400,
            "invalid_grant",
        ),
        (json!({"end": "next tuesday"}), 400, "invalid_body"),
        (json!({"end": soon.replace('T', " ")}), 400, "invalid_body"),
        (json!({"end": soon, "budget": 3}), 400, "invalid_body"),
    ];
    for (body, expected, code) in cases {
        let (status, answer) = put_grant(&server, body.clone()).await;
        assert_eq!(status, expected, "{body} -> {answer}");
        assert_eq!(answer["error"]["code"], code, "{body} -> {answer}");
    }
    let (_, after) = server.get("/grant").await;
    assert_eq!(before, after, "a refused grant changes nothing");

    for (query, expected, code) in [
        ("?deadline=tomorrow", 400, "invalid_query"),
        (
            &*format!("?deadline={}", past.replace('+', "%2B")),
            422,
            "deadline_passed",
        ),
        ("?until=2030-01-01T00:00:00Z", 400, "invalid_query"),
    ] {
        let (status, answer) = server.get(&format!("/plan{query}")).await;
        assert_eq!(status, expected, "{query} -> {answer}");
        assert_eq!(answer["error"]["code"], code, "{query} -> {answer}");
    }
    // A deadline in the query is honoured, not ignored.
    let (status, plan) = server
        .get(&format!("/plan?deadline={}", soon.replace('+', "%2B")))
        .await;
    assert_eq!(status, 200, "{plan}");
    assert_eq!(
        plan["current"]["runs_fit"], 1,
        "48 h fit one 40 h run: {}",
        plan["deadline"]
    );
}

/// The six groups that ask "which one is best".
const SWEEPS: [&str; 6] = [
    "exp06-batch-size",
    "exp08-ema",
    "exp09-optimizer",
    "exp10-lr-schedule",
    "contrib01-curriculum",
    "contrib02-adaptive-halting",
];

/// A server on a copy of `experiments/` whose six sweep groups carry the rungs of
/// `tests/fixtures/sweep-rungs.yaml`, with `keep` as given.
async fn server_with_sweep_rungs(keep: &str) -> (Server, tempfile::TempDir) {
    let catalog = common::shared_tempdir();
    common::copy_dir(&common::experiments_dir(), catalog.path());
    let fixture =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/sweep-rungs.yaml");
    let rungs = std::fs::read_to_string(fixture)
        .unwrap()
        .replace("keep: 1/2", &format!("keep: {keep}"));
    for group in SWEEPS {
        let file = catalog.path().join("groups").join(group).join("group.yaml");
        let mut yaml = std::fs::read_to_string(&file).unwrap();
        yaml.push('\n');
        yaml.push_str(&rungs);
        std::fs::write(&file, yaml).unwrap();
    }
    let server = Server::start_with(common::ServerOptions {
        experiments: catalog.path().to_path_buf(),
        ..common::ServerOptions::default()
    })
    .await;
    (server, catalog)
}

fn group<'a>(plan: &'a Value, name: &str) -> &'a Value {
    plan["groups"]
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["name"] == name)
        .unwrap_or_else(|| panic!("group {name}: {}", plan["groups"]))
}

/// Each sweep group's `keep_chosen`, in `SWEEPS` order.
fn keeps_chosen(plan: &Value) -> Vec<f64> {
    SWEEPS
        .iter()
        .map(|name| group(plan, name)["rungs"]["keep_chosen"].as_f64().unwrap())
        .collect()
}

#[tokio::test]
async fn rungs_on_the_six_sweeps_fit_more_whole_groups() {
    let (server, _catalog) = server_with_sweep_rungs("1/2").await;
    let (status, _) = put_grant(&server, thirty_days()).await;
    assert_eq!(status, 200);
    let (status, plan) = server.get("/plan").await;
    assert_eq!(status, 200, "{plan}");
    // Today's order reaches none of the sweeps: the same 3 groups.
    assert_eq!(plan["current"]["groups_fit"], 3, "{}", plan["groups"]);
    assert_eq!(plan["recommended"]["groups_fit"], 8, "{}", plan["groups"]);
    assert_eq!(plan["recommended"]["runs_fit"], 25);
    assert_eq!(
        groups_that_fit(&plan, "fits_recommended"),
        [
            "exp02b-h-cycles",
            "exp06-batch-size",
            "exp07-precision",
            "exp08-ema",
            "exp09-optimizer",
            "exp10-lr-schedule",
            "contrib01-curriculum",
            "contrib02-adaptive-halting"
        ]
    );
    // Each sweep shows its rungs: 5 runs of exp08 to 25%, 3 to 50%, 2 (the baseline and
    // one more) to the end.
    let exp08 = &group(&plan, "exp08-ema")["rungs"];
    assert_eq!(exp08["metric"], "eval/exact_accuracy");
    assert_eq!(exp08["at"], json!([0.25, 0.5]));
    assert_eq!(
        (exp08["keep"].as_f64(), exp08["keep_chosen"].as_f64()),
        (Some(0.5), Some(0.5))
    );
    assert_eq!(
        exp08["per_rung"],
        json!([
            {"at": 0.25, "runs": 5, "promoted": 3, "pruned": 2},
            {"at": 0.5, "runs": 3, "promoted": 2, "pruned": 1},
        ])
    );
    assert!(group(&plan, "exp07-precision")["rungs"].is_null());
    // 80 of exp08's 200 h, and the work they would have redone after preemptions.
    let saved = |g: &Value| g["rungs"]["hours_saved"].as_f64().unwrap();
    assert!(
        (80.0..90.0).contains(&saved(group(&plan, "exp08-ema"))),
        "{exp08}"
    );
    let by_groups: f64 = SWEEPS.iter().map(|name| saved(group(&plan, name))).sum();
    let total = plan["pod_hours_saved_by_rungs"].as_f64().unwrap();
    assert!(
        (total - by_groups).abs() < 1e-6,
        "{total} against {by_groups}"
    );
    assert!((320.0..360.0).contains(&total), "{total}");
    let none = plan["scenarios"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == "no_interruptions")
        .unwrap();
    assert_eq!(
        none["total_hours"], 1800.0,
        "2,120 h less the 320 h the rungs save"
    );
    assert_eq!(none["groups_fit"], 8);
    // A group with rungs fits when its promoted runs finish: every run of exp08 ends before
    // the deadline, the pruned ones at their rung.
    let exp08_runs: Vec<&Value> = plan["recommended"]["runs"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["group"] == "exp08-ema" || r["experiment"] == "exp01c")
        .collect();
    assert_eq!(exp08_runs.len(), 5);
    assert!(exp08_runs.iter().all(|r| r["fits_deadline"] == true));
    let table = server.text("/plan").await;
    assert!(table.contains("8 of 14"), "{table}");
}

#[tokio::test]
async fn keep_auto_on_the_six_sweeps_prunes_only_as_far_as_the_grant_needs() {
    let (server, _catalog) = server_with_sweep_rungs("auto").await;
    // With no grant, nothing is pruned.
    let (_, plan) = server.get("/plan").await;
    assert_eq!(keeps_chosen(&plan), [1.0; 6]);
    assert_eq!(plan["pod_hours_saved_by_rungs"], 0.0);

    // The 720-hour grant: as many whole groups as the most pruning completes (8), each
    // sweep keeping the most that still allows it, the earliest in the suite first.
    let (status, _) = put_grant(&server, thirty_days()).await;
    assert_eq!(status, 200);
    let (status, plan) = server.get("/plan").await;
    assert_eq!(status, 200, "{plan}");
    assert_eq!(plan["recommended"]["groups_fit"], 8, "{}", plan["groups"]);
    assert_eq!(plan["recommended"]["runs_fit"], 25);
    // exp06 1; exp08 3/5 (5, 3, 2 runs); exp09 1/2; exp10 2/5 (5, 2, 1); contrib 1/2.
    assert_eq!(keeps_chosen(&plan), [1.0, 0.6, 0.5, 0.4, 0.5, 0.5]);
    assert!(group(&plan, "exp10-lr-schedule")["rungs"]["keep"].is_null());

    // A grant that holds the whole suite: nothing is pruned.
    let (status, _) = put_grant(
        &server,
        json!({"end": (Utc::now() + Duration::days(365)).to_rfc3339()}),
    )
    .await;
    assert_eq!(status, 200);
    let (_, plan) = server.get("/plan").await;
    assert_eq!(plan["recommended"]["groups_fit"], 14);
    assert_eq!(keeps_chosen(&plan), [1.0; 6]);
    assert_eq!(plan["pod_hours_saved_by_rungs"], 0.0);
}
