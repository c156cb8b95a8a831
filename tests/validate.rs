//! `podq validate` as a user runs it: the real binary on the study's original configs and on
//! copies of the repository's suite broken on purpose; the grouped findings of
//! `POST /experiments/validate`; and cron errors through `POST /schedules`.

mod common;

use std::path::Path;

use common::{experiments_dir, original_configs, validate, Server, ServerOptions};
use reqwest::Method;
use serde_json::json;

/// A scratch copy of the repository's suite, to break on purpose.
fn suite_copy() -> tempfile::TempDir {
    fn copy(from: &Path, to: &Path) {
        std::fs::create_dir_all(to).unwrap();
        for entry in std::fs::read_dir(from).unwrap() {
            let entry = entry.unwrap();
            let target = to.join(entry.file_name());
            if entry.path().is_dir() {
                copy(&entry.path(), &target);
            } else {
                std::fs::copy(entry.path(), target).unwrap();
            }
        }
    }
    let dir = tempfile::tempdir().unwrap();
    copy(&experiments_dir(), dir.path());
    dir
}

fn append(root: &Path, rel: &str, text: &str) {
    let path = root.join(rel);
    let mut content = std::fs::read_to_string(&path).unwrap();
    content.push_str(text);
    std::fs::write(path, content).unwrap();
}

/// The finding lines of a report, which all start with their severity.
fn finding_lines(text: &str) -> Vec<&str> {
    text.lines()
        .filter(|l| l.starts_with("error: ") || l.starts_with("warning: "))
        .collect()
}

/// Checks what every report must be: each finding line names a `file:line`, and the closing
/// count is of the lines printed.
fn assert_well_formed(text: &str) {
    let lines = finding_lines(text);
    for line in &lines {
        let placed = line
            .split(".yaml:")
            .skip(1)
            .any(|rest| rest.starts_with(|c: char| c.is_ascii_digit()));
        assert!(placed, "a finding without file:line: {line}\n{text}");
    }
    let errors = lines.iter().filter(|l| l.starts_with("error: ")).count();
    let warnings = lines.len() - errors;
    let last = text.lines().last().unwrap_or_default();
    let counted = format!(
        "{errors} {}, {warnings} {}",
        if errors == 1 { "error" } else { "errors" },
        if warnings == 1 { "warning" } else { "warnings" }
    );
    assert!(
        last.starts_with(&counted),
        "the summary should say `{counted}`: {last}\n{text}"
    );
}

#[test]
fn the_users_configs_fit_on_a_screen_and_name_the_fix() {
    let dir = original_configs();
    let (ok, text) = validate(&dir);
    assert!(!ok, "the original layout has errors:\n{text}");
    let lines = text.lines().count();
    assert!(lines <= 15, "{lines} lines:\n{text}");
    assert_well_formed(&text);
    // The 67 identical `missing_arch` errors are one line, with the count and the fix.
    let arch: Vec<&str> = finding_lines(&text)
        .into_iter()
        .filter(|l| l.contains("[missing_arch]"))
        .collect();
    assert_eq!(arch.len(), 1, "{text}");
    assert!(
        arch[0].starts_with(
            "error: 67 experiments have no `arch` config group: rename `arch_config/` to `arch/` and the defaults key `arch_config` to `arch` (first: experiments/"
        ) && arch[0].contains("… 64 more)"),
        "{}",
        arch[0]
    );
    assert!(text.contains("\n1 error, "), "{text}");
    // Everything the reference notes say is wrong with the suite is still reported.
    for needle in [
        "exp01c, exp02a_03, exp02b_03, exp03b, exp04b_1000, exp05_d, exp06_c, exp07b, exp08d, exp09a, exp09b, exp10b have the same training config",
        "exp06_e, exp06_f have the same training config",
        "exp09c, exp09e have the same training config",
        "contrib01_baseline, contrib01_curriculum, contrib02_baseline, exp01c",
        "`use_tpu`, `num_workers`, `save_checkpoint_steps`",
        "`halt_exploration_final` (2)",
        "`curriculum_end_epoch` (2)",
        "exp10-position-encodings",
        "sudoku-extreme-1000-aug-1000",
    ] {
        assert!(text.contains(needle), "the report names `{needle}`:\n{text}");
    }
}

#[test]
fn the_repositorys_suite_is_clean() {
    let (ok, text) = validate(&experiments_dir());
    assert!(ok, "{text}");
    assert!(
        text.contains("67 experiments in 14 groups, 54 distinct training configs"),
        "{text}"
    );
    assert!(text.contains("\n0 errors, "), "{text}");
    assert_well_formed(&text);
}

#[test]
fn a_misspelt_key_fails_and_names_the_key_it_meant() {
    let dir = suite_copy();
    let file = "groups/exp06-batch-size/exp06_a.yaml";
    let lines_before = std::fs::read_to_string(dir.path().join(file))
        .unwrap()
        .lines()
        .count();
    append(dir.path(), file, "global_batchsize: 4096\n");
    let (ok, text) = validate(dir.path());
    assert!(!ok, "a misspelt key must not pass:\n{text}");
    let errors: Vec<&str> = finding_lines(&text)
        .into_iter()
        .filter(|l| l.starts_with("error: "))
        .collect();
    assert_eq!(errors.len(), 1, "{text}");
    assert!(
        errors[0].starts_with(&format!(
            "error: {file}:{}: `global_batchsize`",
            lines_before + 1
        )),
        "{}",
        errors[0]
    );
    assert!(
        errors[0].contains("did you mean `global_batch_size`?"),
        "{}",
        errors[0]
    );
    assert_well_formed(&text);
}

#[test]
fn a_misspelt_rungs_metric_fails_and_names_the_metric_it_meant() {
    let dir = suite_copy();
    let file = "groups/exp10-lr-schedule/group.yaml";
    let rungs = "rungs:\n  metric: eval/exact_acuracy\n  at: [25%, 50%]\n  keep: 1/2\n";
    append(dir.path(), file, rungs);
    let line = std::fs::read_to_string(dir.path().join(file))
        .unwrap()
        .lines()
        .position(|l| l.contains("eval/exact_acuracy"))
        .unwrap()
        + 1;
    let (ok, text) = validate(dir.path());
    assert!(!ok, "a misspelt rungs metric must not pass:\n{text}");
    let errors: Vec<&str> = finding_lines(&text)
        .into_iter()
        .filter(|l| l.starts_with("error: "))
        .collect();
    assert_eq!(errors.len(), 1, "{text}");
    assert!(
        errors[0].starts_with(&format!("error: {file}:{line}: `rungs.metric`")),
        "{}",
        errors[0]
    );
    assert!(
        errors[0].contains("did you mean `eval/exact_accuracy`?"),
        "{}",
        errors[0]
    );
    assert!(
        errors[0].ends_with("[unknown_rungs_metric]"),
        "{}",
        errors[0]
    );
    assert_well_formed(&text);

    // Spelt right, the same rungs pass.
    let path = dir.path().join(file);
    let fixed = std::fs::read_to_string(&path)
        .unwrap()
        .replace("eval/exact_acuracy", "eval/exact_accuracy");
    std::fs::write(&path, fixed).unwrap();
    let (ok, text) = validate(dir.path());
    assert!(ok, "{text}");
}

#[test]
fn an_unlisted_file_is_reported_with_its_own_errors() {
    let dir = suite_copy();
    let stray = "groups/exp07-precision/exp07z.yaml";
    std::fs::write(
        dir.path().join(stray),
        "# @package _global_\n# exp07z: forgotten in group.yaml\ndefaults:\n  - /baseline\n  - _self_\nrun_name: exp07z\nlr: fast\n",
    )
    .unwrap();
    let (ok, text) = validate(dir.path());
    assert!(!ok, "{text}");
    assert!(
        text.contains(&format!(
            "error: {stray}:3: `exp07z` is not listed under `experiments` in groups/exp07-precision/group.yaml"
        )),
        "the file is unlisted:\n{text}"
    );
    assert!(
        text.contains(&format!("error: {stray}:7: `lr`: must be a number")),
        "and its own error is reported too:\n{text}"
    );
    assert!(
        text.contains("67 experiments in 14 groups"),
        "an unlisted file is not part of the catalog:\n{text}"
    );
    assert_well_formed(&text);
}

#[test]
fn a_bad_override_is_reported_at_the_experiments_own_line() {
    let dir = suite_copy();
    let file = "groups/exp01-model-scaling/exp01a.yaml";
    let path = dir.path().join(file);
    let text = std::fs::read_to_string(&path).unwrap();
    let line = text
        .lines()
        .position(|l| l.contains("override /arch: hidden256_heads4"))
        .expect("exp01a overrides the architecture")
        + 1;
    std::fs::write(&path, text.replace("hidden256_heads4", "hidden256_heads5")).unwrap();
    let (ok, report) = validate(dir.path());
    assert!(!ok, "{report}");
    assert!(
        report.contains(&format!(
            "error: {file}:{line}: override `arch: hidden256_heads5`: config group `arch` has no option `hidden256_heads5`: did you mean `hidden256_heads4`?"
        )),
        "{report}"
    );
    assert!(!report.contains("baseline.yaml:10"), "{report}");
    assert_well_formed(&report);
}

#[tokio::test]
async fn the_validate_endpoint_carries_the_grouped_summary() {
    let server = Server::start().await;
    let doc = "defaults:\n  - /baseline\n  - _self_\nrun_name: mine\nglobal_batchsize: 4096\n";
    let (status, answer) = server
        .send(Method::POST, "/experiments/validate", doc.into(), &[])
        .await;
    assert_eq!(status, 422, "{answer}");
    let details = &answer["error"]["details"];
    let typo = details["findings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["code"] == "unknown_key")
        .unwrap_or_else(|| panic!("per-file findings are kept: {answer}"));
    assert_eq!(typo["line"], 5, "{typo}");
    assert_eq!(typo["fix"], "did you mean `global_batch_size`?", "{typo}");
    let summary = details["summary"].as_array().unwrap();
    assert_eq!(summary[0]["code"], "unknown_key", "errors first: {answer}");
    assert_eq!(summary[0]["count"], 1);
    assert!(
        summary[0]["text"].as_str().unwrap().starts_with(
            "error: <request>.yaml:5: `global_batchsize` is not a key the trainer reads"
        ),
        "{answer}"
    );
    // The baseline's three extra keys are one group, not three findings to read.
    let unread: Vec<_> = summary
        .iter()
        .filter(|g| g["code"] == "unread_keys")
        .collect();
    assert_eq!(unread.len(), 1, "{answer}");
    assert_eq!(unread[0]["count"], 3, "{answer}");

    let fine = "defaults:\n  - /baseline\n  - _self_\nrun_name: mine\n";
    let (status, answer) = server
        .send(Method::POST, "/experiments/validate", fine.into(), &[])
        .await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["summary"][0]["code"], "unread_keys", "{answer}");
}

#[tokio::test]
async fn cron_errors_speak_of_the_five_fields_written() {
    let options = ServerOptions {
        env: vec![("PODQ_ADMIN_TOKEN".into(), "admin-secret".into())],
        ..ServerOptions::default()
    };
    let server = Server::start_with(options).await;
    let schedule = |cron: &str| {
        let body = json!({"cron": cron, "submit": {"group": "exp07-precision"}}).to_string();
        let server = &server;
        async move {
            server
                .send(
                    Method::POST,
                    "/schedules",
                    body,
                    &[("authorization", "Bearer admin-secret")],
                )
                .await
        }
    };
    let fields = "(fields: minute hour day-of-month month day-of-week)";
    for (cron, message) in [
        (
            "0 25 * * *",
            format!("hour 25 is out of range 0-23 in `0 25 * * *` {fields}"),
        ),
        (
            "0 3 * *",
            "`0 3 * *` has 4 fields; cron needs 5: minute hour day-of-month month day-of-week (or @daily, @hourly, @weekly, @monthly, @yearly)".to_owned(),
        ),
        (
            "0 3 * * 8",
            format!("day-of-week 8 is out of range 0-7 (0 and 7 are Sunday) in `0 3 * * 8` {fields}"),
        ),
    ] {
        let (status, answer) = schedule(cron).await;
        assert_eq!(status, 422, "{cron}: {answer}");
        assert_eq!(answer["error"]["code"], "invalid_cron", "{answer}");
        assert_eq!(answer["error"]["message"], message.as_str(), "{answer}");
    }
    for cron in ["@daily", "0 3 * * 1-5", "30 2 1 * *"] {
        let (status, answer) = schedule(cron).await;
        assert_eq!(status, 201, "{cron}: {answer}");
        assert!(answer["next_run_at"].is_string(), "{answer}");
    }
}
