//! The `podq` client commands as a person runs them: real `podq` processes against a real
//! server process, reading what they print and how they exit.

mod common;

use std::collections::BTreeMap;
use std::process::Command;

use common::rungs::{catalog_with_rungs, RungPod, RUNG_GROUP};
use common::{Server, ServerOptions, PODQ};
use serde_json::{json, Value};

/// What one `podq` run printed, and how it ended.
struct Run {
    code: i32,
    stdout: String,
    stderr: String,
}

impl Run {
    fn ok(self) -> String {
        assert_eq!(
            self.code, 0,
            "podq failed:\nstdout: {}\nstderr: {}",
            self.stdout, self.stderr
        );
        self.stdout
    }
}

/// Runs `podq args...` against `server`, with no token or server from the environment.
fn podq(server: &Server, args: &[&str]) -> Run {
    let output = Command::new(PODQ)
        .args(args)
        .env("PODQ_SERVER", &server.url)
        .env_remove("PODQ_ADMIN_TOKEN")
        .env("RUST_BACKTRACE", "0")
        .output()
        .expect("run podq");
    Run {
        code: output.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}

/// Whether `text` holds something shaped like a uuid.
fn has_uuid(text: &str) -> bool {
    text.split(|c: char| !(c.is_ascii_hexdigit() || c == '-'))
        .any(|word| word.len() == 36 && word.matches('-').count() == 4)
}

/// The ids `podq submit` printed, by experiment (`  + <id> <experiment>`).
fn submitted_ids(out: &str) -> Vec<(String, String)> {
    out.lines()
        .filter_map(|line| line.strip_prefix("  + "))
        .map(|rest| {
            let (id, experiment) = rest.split_once(' ').expect("id and experiment");
            (experiment.to_owned(), id.to_owned())
        })
        .collect()
}

#[tokio::test]
async fn jobs_are_listed_shown_and_changed_by_name_and_by_id() {
    let server = Server::start().await;
    let out = podq(&server, &["submit", "--group", "exp07-precision"]).ok();
    assert!(out.starts_with("created 3 jobs"), "{out}");
    let ids = submitted_ids(&out);
    assert_eq!(ids.len(), 3, "{out}");
    let exp07b = &ids.iter().find(|(e, _)| e == "exp07b").unwrap().1;

    let table = podq(&server, &["jobs"]).ok();
    let header = table.lines().next().unwrap();
    for column in ["ID", "EXPERIMENT", "GROUP", "STATE", "STEP", "ATTEMPTS"] {
        assert!(header.contains(column), "{table}");
    }
    assert_eq!(table.lines().count(), 4, "a header and three jobs: {table}");
    assert!(
        table.contains(exp07b.as_str()) && table.contains("queued"),
        "{table}"
    );

    // Filters, JSON, and a page smaller than the list.
    let listed: Value = serde_json::from_str(
        &podq(
            &server,
            &[
                "jobs",
                "--group",
                "exp07-precision",
                "--state",
                "queued",
                "--json",
            ],
        )
        .ok(),
    )
    .unwrap();
    assert_eq!(listed.as_array().unwrap().len(), 3, "{listed}");
    let one = podq(&server, &["jobs", "--experiment", "exp07b"]).ok();
    assert_eq!(one.lines().count(), 2, "{one}");
    let page = podq(&server, &["jobs", "--limit", "2"]).ok();
    assert!(page.contains("2 of 3 jobs"), "{page}");
    let all = podq(&server, &["jobs", "--all"]).ok();
    assert_eq!(all.lines().count(), 4, "{all}");

    // One job, by experiment and by id: the same job.
    let by_name = podq(&server, &["job", "exp07b"]).ok();
    assert!(by_name.contains(exp07b.as_str()), "{by_name}");
    assert!(by_name.contains("exp07b (exp07-precision)"), "{by_name}");
    assert!(
        by_name.contains("submitted with priority 0"),
        "the last events: {by_name}"
    );
    let by_id = podq(&server, &["job", exp07b]).ok();
    assert_eq!(by_name, by_id);

    // Priority (negative too), cancel and requeue, by name and by id.
    let out = podq(&server, &["priority", "exp07b", "5"]).ok();
    assert!(
        out.contains("exp07b") && out.contains("priority 5"),
        "{out}"
    );
    let out = podq(&server, &["priority", exp07b, "-2"]).ok();
    assert!(out.contains("priority -2"), "{out}");
    assert_eq!(server.job(exp07b).await["priority"], -2);

    let out = podq(&server, &["cancel", "exp07b"]).ok();
    assert!(out.contains("exp07b") && out.contains("cancelled"), "{out}");
    assert_eq!(server.job(exp07b).await["state"], "cancelled");
    let out = podq(&server, &["requeue", exp07b]).ok();
    assert!(out.contains("requeued, now queued"), "{out}");
    assert_eq!(server.job(exp07b).await["state"], "queued");

    // A state that forbids the change: the server's reason, one line, exit 1.
    let refused = podq(&server, &["requeue", "exp07b"]);
    assert_eq!(refused.code, 1, "{}", refused.stderr);
    assert!(
        refused.stderr.starts_with("podq: job ") && refused.stderr.contains("queued"),
        "{}",
        refused.stderr
    );
    assert!(
        !refused.stderr.contains('{'),
        "no raw JSON: {}",
        refused.stderr
    );
}

#[tokio::test]
async fn logs_and_job_detail_show_an_attempts_outcome_and_log_tail() {
    let server = Server::start().await;
    let id = server.submit_one("exp07a", json!({})).await;

    let early = podq(&server, &["logs", "exp07a"]);
    assert_eq!(early.code, 1);
    assert!(
        early.stderr.contains("no attempt has started yet"),
        "{}",
        early.stderr
    );

    // One attempt through the worker protocol: leased, then failed with its log tail.
    let (status, lease) = server
        .post(
            "/pods/p1/lease",
            json!({"accelerator": "v4-64", "hosts": 1, "state": "READY",
                   "health": "HEALTHY", "wait_s": 0}),
        )
        .await;
    assert_eq!(status, 200, "{lease}");
    assert_eq!(lease["job_id"], id.as_str());
    let lease_id = lease["lease_id"].as_str().unwrap();
    let (status, finished) = server
        .post(
            &format!("/leases/{lease_id}/finish"),
            json!({"outcome": "failed", "exit_codes": [3], "start_step": 0, "end_step": 40,
                   "log_tail": "step 40 loss 1.5\nTraceback: out of memory\n",
                   "message": "host 0 exited with 3"}),
        )
        .await;
    assert_eq!(status, 200, "{finished}");

    let run = podq(&server, &["logs", "exp07a"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(run.stdout, "step 40 loss 1.5\nTraceback: out of memory\n");
    assert!(
        run.stderr.contains("attempt 1") && run.stderr.contains("failed"),
        "the header names the attempt: {}",
        run.stderr
    );
    assert_eq!(
        podq(&server, &["logs", &id, "--attempt", "1"]).ok(),
        run.stdout
    );
    let missing = podq(&server, &["logs", "exp07a", "--attempt", "4"]);
    assert_eq!(missing.code, 1);
    assert!(
        missing.stderr.contains("no attempt 4"),
        "{}",
        missing.stderr
    );

    let detail = podq(&server, &["job", "exp07a"]).ok();
    let attempt_row = detail
        .lines()
        .find(|l| l.starts_with("1 ") && l.contains("p1"))
        .unwrap_or_else(|| panic!("an attempt row: {detail}"));
    assert!(
        attempt_row.contains("failed") && attempt_row.contains("host 0 exited with 3"),
        "{detail}"
    );
    assert!(detail.contains("failures 1 of 3"), "{detail}");
}

#[tokio::test]
async fn plan_and_grant_from_the_cli() {
    let server = Server::start().await;
    let none = podq(&server, &["grant"]).ok();
    assert!(none.starts_with("no grant set"), "{none}");

    let end = (chrono::Utc::now() + chrono::Duration::days(30))
        .format("%Y-%m-%d")
        .to_string();
    let set = podq(
        &server,
        &["grant", "set", "--end", &end, "--pod-hours", "v4-64=720"],
    )
    .ok();
    assert!(set.contains(&format!("to {end} 00:00 UTC")), "{set}");
    assert!(set.contains("v4-64: 720 pod-hours"), "{set}");
    let shown: Value = serde_json::from_str(&podq(&server, &["grant", "--json"]).ok()).unwrap();
    assert_eq!(shown["pod_hours"]["v4-64"], 720.0);
    assert_eq!(shown["source"], "api");

    // The server's table, the same as curl gets, and JSON on request.
    let table = podq(&server, &["plan"]).ok();
    assert!(table.starts_with("podq plan at"), "{table}");
    assert!(table.contains(&format!("grant ends {end}")), "{table}");
    assert!(
        table.contains("TODAY'S ORDER") && table.contains("RECOMMENDED"),
        "{table}"
    );
    let plan: Value = serde_json::from_str(&podq(&server, &["plan", "--json"]).ok()).unwrap();
    assert!(
        plan["deadline"].as_str().unwrap().starts_with(&end),
        "{plan}"
    );
    let later = podq(&server, &["plan", "--deadline", "2099-01-01"]).ok();
    assert!(later.contains("deadline 2099-01-01 00:00 UTC"), "{later}");

    let bad = podq(&server, &["grant", "set", "--end", "2020-01-01"]);
    assert_eq!(bad.code, 1, "{}", bad.stderr);
    assert!(bad.stderr.starts_with("podq: "), "{}", bad.stderr);
    assert!(!bad.stderr.contains("\"error\""), "{}", bad.stderr);

    // Applying submits the catalog in the recommended order.
    let applied = podq(&server, &["plan", "apply"]).ok();
    assert!(
        applied.starts_with("applied the recommended order: submitted 67 experiments"),
        "{applied}"
    );
    assert!(applied.contains(&format!("before {end}")), "{applied}");
    assert_eq!(server.jobs().await.len(), 67);
}

#[tokio::test]
async fn a_typo_is_one_line_with_the_suggestion_and_exit_1() {
    let server = Server::start().await;
    let cases: [(&[&str], &str); 5] = [
        (
            &["submit", "--group", "exp01-model-scalling"],
            "podq: no group `exp01-model-scalling`; did you mean `exp01-model-scaling`?\n",
        ),
        (
            &["submit", "--experiment", "exp01aa"],
            "podq: no experiment `exp01aa`; did you mean `exp01a`?\n",
        ),
        (
            &["jobs", "--state", "runing"],
            "podq: no job state `runing`; did you mean `running`?\n",
        ),
        (
            &["jobs", "--group", "exp07-precison"],
            "podq: no group `exp07-precison`; did you mean `exp07-precision`?\n",
        ),
        (
            &["job", "exp07z"],
            "podq: no job or experiment `exp07z`; did you mean `exp07a`, `exp07b` or `exp07c`?\n",
        ),
    ];
    for (args, want) in cases {
        let run = podq(&server, args);
        assert_eq!(run.code, 1, "{args:?}: {}", run.stderr);
        assert_eq!(run.stderr, want, "{args:?}");
        assert_eq!(run.stdout, "", "{args:?}");
    }
    // Nothing close: the valid names follow the line instead.
    let run = podq(&server, &["submit", "--group", "nope"]);
    assert_eq!(run.code, 1);
    let lines: Vec<&str> = run.stderr.lines().collect();
    assert_eq!(lines[0], "podq: no group `nope`", "{}", run.stderr);
    assert!(
        lines[1].starts_with("  groups: exp01-model-scaling, "),
        "{}",
        run.stderr
    );
    assert!(server.jobs().await.is_empty(), "nothing was submitted");
}

#[tokio::test]
async fn a_dry_run_prints_no_ids_and_submits_nothing() {
    let server = Server::start().await;
    let out = podq(
        &server,
        &["submit", "--group", "exp06-batch-size", "--dry-run"],
    )
    .ok();
    assert!(
        out.starts_with("would create 5 jobs, would link 1"),
        "{out}"
    );
    assert!(out.contains("  + exp06_a\n"), "{out}");
    assert!(out.contains("  = exp06_f (shares the run of "), "{out}");
    assert!(!has_uuid(&out), "a dry run invents no ids: {out}");
    assert!(server.jobs().await.is_empty());

    // The real submission names the ids it made.
    let out = podq(&server, &["submit", "--group", "exp06-batch-size"]).ok();
    assert!(has_uuid(&out), "{out}");
}

/// The line of `table` whose first column is `experiment`.
fn row_of<'t>(table: &'t str, experiment: &str) -> &'t str {
    table
        .lines()
        .find(|l| l.split_whitespace().next() == Some(experiment))
        .unwrap_or_else(|| panic!("no row for {experiment}:\n{table}"))
}

#[tokio::test]
async fn podq_study_prints_each_runs_value_rank_and_decision_at_each_rung() {
    let dir = tempfile::tempdir().unwrap();
    let options = ServerOptions {
        experiments: catalog_with_rungs(
            dir.path(),
            "{metric: eval/exact_accuracy, at: [25%], keep: 1/2}",
        ),
        ..ServerOptions::default()
    };
    let server = Server::start_with(options).await;
    podq(&server, &["submit", "--group", RUNG_GROUP]).ok();
    // The baseline row (exp10b, the best here) is judged and trains on; the first other
    // run judged ranks below it and waits.
    let mut judged = Vec::new();
    let first = loop {
        let experiment = RungPod::new(&server, "pod-r")
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
    let table = podq(&server, &["study", RUNG_GROUP]).ok();
    assert!(
        table.contains("rungs       eval/exact_accuracy at 25%, keep 50%"),
        "{table}"
    );
    let header = table
        .lines()
        .find(|l| l.starts_with("EXPERIMENT"))
        .unwrap_or_else(|| panic!("a header: {table}"));
    assert!(
        header.contains("STATE") && header.contains("RUNG 1 (25%)"),
        "{table}"
    );
    let row = row_of(&table, &first);
    assert!(
        row.contains("held") && row.contains("0.8 2/2 waiting"),
        "{row}"
    );
    assert!(
        row_of(&table, "exp10b").contains("0.95 1/1 promoted"),
        "{table}"
    );

    // The others are judged below it: it is promoted, and the two worst are pruned.
    let others: Vec<String> = ["exp10a", "exp10c", "exp10d", "exp10e"]
        .into_iter()
        .filter(|e| *e != first)
        .map(str::to_owned)
        .collect();
    let values: BTreeMap<String, f64> = others
        .iter()
        .cloned()
        .zip([0.5, 0.3, 0.1])
        .chain([(first.clone(), 0.8), ("exp10b".to_owned(), 0.95)])
        .collect();
    while RungPod::new(&server, "pod-r")
        .play_one(0.25, &mut judged, |e| values[e])
        .await
        .is_some()
    {}
    let table = podq(&server, &["study", RUNG_GROUP]).ok();
    let row = row_of(&table, &first);
    // Promoted once four were judged, second of them.
    assert!(
        row.contains("succeeded") && row.contains("0.8 2/4 promoted"),
        "{table}"
    );
    assert!(
        row_of(&table, &others[0]).contains("0.5 3/5 promoted"),
        "{table}"
    );
    assert!(
        row_of(&table, &others[1]).contains("0.3 4/5 pruned"),
        "{table}"
    );
    let worst = row_of(&table, &others[2]);
    assert!(
        worst.contains("stopped") && worst.contains("0.1 5/5 pruned"),
        "{table}"
    );
    // Its detail says the decision too.
    let job = podq(&server, &["job", &others[2]]).ok();
    assert!(
        job.lines()
            .any(|l| l.starts_with("rung") && l.contains("1: pruned, rank 5 of 5, value 0.1")),
        "{job}"
    );
    // --json is the server's study.
    let json: Value = serde_json::from_str(&podq(&server, &["study", RUNG_GROUP, "--json"]).ok())
        .expect("the study as JSON");
    assert_eq!(json["rungs"]["metric"], "eval/exact_accuracy", "{json}");
    // A group without rungs says so, and has no rung column.
    let plain = podq(&server, &["study", "exp07-precision"]).ok();
    assert!(
        plain.contains("rungs       none") && !plain.contains("RUNG 1"),
        "{plain}"
    );
    let typo = podq(&server, &["study", "exp10-lr-schedul"]);
    assert_eq!(typo.code, 1, "{}", typo.stderr);
    assert!(typo.stderr.contains(RUNG_GROUP), "{}", typo.stderr);
}

/// The flag lines of a `--help` text that have no description: a flag line followed by
/// another flag line or the end, with nothing after the flag on its own line.
fn undocumented(help: &str) -> Vec<String> {
    let lines: Vec<&str> = help.lines().collect();
    let is_flag = |l: &str| {
        let t = l.trim_start();
        (t.starts_with('-') || t.starts_with('<') || t.starts_with('['))
            && l.starts_with("  ")
            && !l.starts_with("          ")
    };
    let mut missing = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        if !is_flag(line) {
            continue;
        }
        // `--flag <VALUE>  Help on the same line`: two spaces after the spec.
        let spec_end = line.trim_start();
        if spec_end.contains("  ") {
            continue;
        }
        let next = lines.get(i + 1).copied().unwrap_or_default();
        if next.starts_with("          ") && !next.trim().is_empty() {
            continue;
        }
        missing.push(line.trim().to_owned());
    }
    missing
}

#[test]
fn every_flag_has_help_and_up_shows_its_own_defaults() {
    // The check itself finds a flag without help, in either layout clap uses.
    assert_eq!(
        undocumented("Options:\n      --priority <P>\n      --dry-run  Say so\n  <JOB>\n"),
        ["--priority <P>", "<JOB>"]
    );
    assert!(undocumented("      --priority <P>\n          Higher first\n").is_empty());
    let help = |args: &[&str]| {
        let output = Command::new(PODQ).args(args).output().expect("podq --help");
        assert!(output.status.success(), "{args:?}");
        String::from_utf8(output.stdout).unwrap()
    };
    for command in [
        vec!["submit"],
        vec!["status"],
        vec!["jobs"],
        vec!["job"],
        vec!["logs"],
        vec!["study"],
        vec!["cancel"],
        vec!["requeue"],
        vec!["priority"],
        vec!["plan"],
        vec!["plan", "apply"],
        vec!["grant"],
        vec!["grant", "set"],
        vec!["validate"],
        vec!["server"],
        vec!["up"],
    ] {
        for flag in ["--help", "-h"] {
            let mut args = command.clone();
            args.push(flag);
            let text = help(&args);
            assert_eq!(
                undocumented(&text),
                Vec::<String>::new(),
                "podq {} {flag}:\n{text}",
                command.join(" ")
            );
        }
    }

    // `up` runs with its own lease and backoff times, and says so.
    let up = help(&["up", "--help"]);
    let default_of = |flag: &str| -> String {
        let at = up
            .find(&format!("      {flag} "))
            .unwrap_or_else(|| panic!("{flag} in {up}"));
        let rest = &up[at..];
        let end = rest[6..].find("\n      -").map_or(rest.len(), |e| e + 6);
        let text = &rest[..end];
        let start = text
            .find("[default: ")
            .unwrap_or_else(|| panic!("a default for {flag}: {text}"));
        text[start + 10..].split(']').next().unwrap().to_owned()
    };
    assert_eq!(default_of("--lease-ttl-s"), "15");
    assert_eq!(default_of("--heartbeat-s"), "1");
    assert_eq!(default_of("--backoff-s"), "5");
    assert_eq!(default_of("--backoff-cap-s"), "60");
    assert_eq!(default_of("--db"), "<data-dir>/podq.db");
    assert!(
        !up.contains("sculptor-tpu-experiments"),
        "up never uses GCS: {up}"
    );
    let server = help(&["server", "--help"]);
    assert!(server.contains("[default: 60]") && server.contains("[default: 1800]"));
}
