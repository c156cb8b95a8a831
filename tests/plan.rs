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
