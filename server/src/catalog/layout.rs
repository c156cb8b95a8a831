//! podq's own catalog layout: `groups/<group>/<experiment>.yaml`, a `group.yaml` of docs
//! per group that must list every experiment file, and an optional `suite.yaml` fixing the
//! group order. Every disagreement between them is a finding, not a failure.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use podq_api::ExperimentDocs;
use serde::Deserialize;

use super::rungs::Rungs;
use super::source::{line_of, line_of_key};
use super::stop_rules::{parse_rules, DivergenceGuard, StopRule, TRAINER_METRICS};
use super::{error_at, yaml_stems, Candidate, Catalog, CatalogOptions, CheckpointInterval, Group};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct GroupFile {
    title: String,
    project_name: String,
    goal: String,
    varies: String,
    hypothesis: String,
    expected_result: String,
    metrics_to_watch: Vec<String>,
    baseline_row: String,
    planned_hours: f64,
    /// The slice type of the group's runs: `accelerators` as a list of one.
    #[serde(default)]
    accelerator: Option<String>,
    /// The slice types the group's runs may lease, most preferred first; the server's
    /// `--accelerator` when neither is given.
    #[serde(default)]
    accelerators: Option<Vec<String>>,
    /// `auto` or steps, for the group's runs; over the suite's.
    #[serde(default)]
    checkpoint_interval: Option<serde_yaml::Value>,
    /// Stop rules for the group's runs; over the suite's.
    #[serde(default)]
    stop_when: Option<serde_yaml::Value>,
    /// The group's rungs (catalog/rungs.rs), over the suite's; `none` lifts the suite's.
    #[serde(default)]
    rungs: Option<serde_yaml::Value>,
    experiments: serde_yaml::Mapping,
    #[serde(default)]
    #[allow(dead_code)]
    notes: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ExperimentRow {
    summary: String,
    est_hours: Option<f64>,
    /// This run's slice type, over the group's.
    #[serde(default)]
    accelerator: Option<String>,
    /// This run's slice types in order of preference, over the group's.
    #[serde(default)]
    accelerators: Option<Vec<String>>,
    /// This run's checkpoint interval, over the group's.
    #[serde(default)]
    checkpoint_interval: Option<serde_yaml::Value>,
    /// This run's stop rules, over the group's.
    #[serde(default)]
    stop_when: Option<serde_yaml::Value>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct SuiteFile {
    groups: Vec<String>,
    #[serde(default)]
    #[allow(dead_code)]
    description: Option<String>,
    /// `auto` or steps, for every run of the suite.
    #[serde(default)]
    checkpoint_interval: Option<serde_yaml::Value>,
    /// The priority classes (catalog/classes.rs); absent: the shipped set.
    #[serde(default)]
    priority_classes: Option<serde_yaml::Value>,
    /// Stop rules for every run of the suite.
    #[serde(default)]
    stop_when: Option<serde_yaml::Value>,
    /// The divergence guard's settings (catalog/stop_rules.rs); absent: the defaults.
    #[serde(default)]
    divergence_guard: Option<serde_yaml::Value>,
    /// Every group's rungs, unless its `group.yaml` says otherwise (catalog/rungs.rs).
    #[serde(default)]
    rungs: Option<serde_yaml::Value>,
    /// `[LOW, HIGH]`: the priorities a submitter may give (scheduler/submit.rs).
    #[serde(default)]
    priority_range: Option<(i64, i64)>,
}

impl Catalog {
    pub(super) fn discover_groups(&mut self, options: &CatalogOptions) -> Vec<Candidate> {
        let groups_dir = self.root.join("groups");
        let mut dirs: Vec<String> = std::fs::read_dir(&groups_dir)
            .into_iter()
            .flatten()
            .flatten()
            .filter(|e| e.path().is_dir())
            .filter_map(|e| e.file_name().to_str().map(str::to_owned))
            .collect();
        dirs.sort();
        let suite_path = self.root.join("suite.yaml");
        let mut suite_interval = CheckpointInterval::Config;
        let mut suite_rules = Vec::new();
        // The suite's rungs and its file's text, for a metric a group does not know.
        let mut suite_rungs: Option<(Rungs, String)> = None;
        if suite_path.is_file() {
            let text = std::fs::read_to_string(&suite_path).unwrap_or_default();
            match read_yaml::<SuiteFile>(&suite_path) {
                Ok(suite) => {
                    for missing in dirs.iter().filter(|d| !suite.groups.contains(d)) {
                        self.file_findings.push(error_at(
                            "unlisted_group",
                            format!(
                                "group directory groups/{missing}/ is not listed in suite.yaml"
                            ),
                            "suite.yaml",
                            line_of_key(&text, "groups"),
                        ));
                    }
                    for listed in suite.groups.iter().filter(|g| !dirs.contains(g)) {
                        self.file_findings.push(error_at(
                            "unknown_group",
                            format!(
                                "suite.yaml lists `{listed}`, but groups/{listed}/ does not exist"
                            ),
                            "suite.yaml",
                            line_of(&text, listed),
                        ));
                    }
                    suite_interval = self.interval_of(
                        suite.checkpoint_interval.as_ref(),
                        suite_interval,
                        "suite.yaml",
                        &text,
                        "checkpoint_interval",
                    );
                    suite_rules = self.rules_of(
                        suite.stop_when.as_ref(),
                        &suite_rules,
                        "suite.yaml",
                        &text,
                        "stop_when",
                        &[],
                    );
                    if let Some(value) = &suite.rungs {
                        suite_rungs = self
                            .rungs_of(value, "suite.yaml", &text, None)
                            .map(|rungs| (rungs, text.clone()));
                    }
                    if let Some(value) = &suite.divergence_guard {
                        match DivergenceGuard::parse(value) {
                            Ok(guard) => self.guard = guard,
                            Err(message) => self.file_findings.push(error_at(
                                "invalid_divergence_guard",
                                message,
                                "suite.yaml",
                                line_of_key(&text, "divergence_guard"),
                            )),
                        }
                    }
                    match suite.priority_range {
                        Some((low, high)) if low > high => self.file_findings.push(error_at(
                            "invalid_priority_range",
                            format!(
                                "priority_range [{low}, {high}]: the first must not exceed the \
                                 second"
                            ),
                            "suite.yaml",
                            line_of_key(&text, "priority_range"),
                        )),
                        range => self.priority_range = range,
                    }
                    if let Some(value) = &suite.priority_classes {
                        match super::classes::PriorityClasses::parse(value) {
                            Ok(classes) => self.classes = classes,
                            Err(message) => self.file_findings.push(error_at(
                                "invalid_priority_classes",
                                message,
                                "suite.yaml",
                                line_of_key(&text, "priority_classes"),
                            )),
                        }
                    }
                    dirs.retain(|d| suite.groups.contains(d));
                    dirs.sort_by_key(|d| suite.groups.iter().position(|g| g == d));
                }
                Err((message, line)) => {
                    self.file_findings
                        .push(error_at("invalid_suite", message, "suite.yaml", line))
                }
            }
        }
        let mut candidates = Vec::new();
        for dir in dirs {
            let group_rel = format!("groups/{dir}/group.yaml");
            let doc = match read_yaml::<GroupFile>(&self.root.join(&group_rel)) {
                Ok(doc) => doc,
                Err((message, line)) => {
                    self.file_findings.push(error_at(
                        "invalid_group_docs",
                        message,
                        &group_rel,
                        line,
                    ));
                    continue;
                }
            };
            let text = std::fs::read_to_string(self.root.join(&group_rel)).unwrap_or_default();
            let row_line = |name: &str| {
                line_of_key(&text, &format!("experiments.{name}"))
                    .or_else(|| line_of_key(&text, "experiments"))
            };
            let docs_of = |summary: String, name: &str| ExperimentDocs {
                title: doc.title.clone(),
                summary,
                goal: doc.goal.clone(),
                varies: doc.varies.clone(),
                hypothesis: doc.hypothesis.clone(),
                expected_result: doc.expected_result.clone(),
                metrics_to_watch: doc.metrics_to_watch.clone(),
                is_baseline_row: doc.baseline_row == name,
            };
            let group_accelerators = self.accelerators_of(
                doc.accelerator.clone(),
                doc.accelerators.clone(),
                std::slice::from_ref(&options.accelerator),
                &group_rel,
                &text,
                "",
            );
            let group_interval = self.interval_of(
                doc.checkpoint_interval.as_ref(),
                suite_interval,
                &group_rel,
                &text,
                "checkpoint_interval",
            );
            let group_rules = self.rules_of(
                doc.stop_when.as_ref(),
                &suite_rules,
                &group_rel,
                &text,
                "stop_when",
                &doc.metrics_to_watch,
            );
            let group_rungs = match &doc.rungs {
                // A bad value is an error; the group keeps the suite's meanwhile.
                Some(value) => {
                    match self.rungs_of(value, &group_rel, &text, Some(&doc.metrics_to_watch)) {
                        Some(rungs) => Some(rungs),
                        None if is_none(value) => None,
                        None => suite_rungs.as_ref().map(|(rungs, _)| rungs.clone()),
                    }
                }
                // The suite's, if its metric is one this group knows.
                None => match &suite_rungs {
                    Some((rungs, suite_text)) => {
                        let watched = &doc.metrics_to_watch;
                        self.known_rungs_metric(&rungs.metric, "suite.yaml", suite_text, watched)
                            .then(|| rungs.clone())
                    }
                    None => None,
                },
            };
            let mut names = Vec::new();
            for (key, row) in &doc.experiments {
                let Some(name) = key.as_str() else {
                    self.file_findings.push(error_at(
                        "invalid_group_docs",
                        format!("experiment key {key:?} is not a name"),
                        &group_rel,
                        line_of_key(&text, "experiments"),
                    ));
                    continue;
                };
                let row: ExperimentRow = match serde_yaml::from_value(row.clone()) {
                    Ok(row) => row,
                    Err(e) => {
                        self.file_findings.push(error_at(
                            "invalid_group_docs",
                            format!("experiments.{name}: {e}"),
                            &group_rel,
                            row_line(name),
                        ));
                        continue;
                    }
                };
                let file = PathBuf::from(format!("groups/{dir}/{name}.yaml"));
                if !self.root.join(&file).is_file() {
                    self.file_findings.push(error_at(
                        "missing_experiment_file",
                        format!(
                            "{group_rel} lists `{name}`, but {} does not exist",
                            file.display()
                        ),
                        &group_rel,
                        row_line(name),
                    ));
                    continue;
                }
                let accelerators = self.accelerators_of(
                    row.accelerator,
                    row.accelerators,
                    &group_accelerators,
                    &group_rel,
                    &text,
                    &format!("experiments.{name}."),
                );
                let checkpoint_interval = self.interval_of(
                    row.checkpoint_interval.as_ref(),
                    group_interval,
                    &group_rel,
                    &text,
                    &format!("experiments.{name}.checkpoint_interval"),
                );
                let stop_when = self.rules_of(
                    row.stop_when.as_ref(),
                    &group_rules,
                    &group_rel,
                    &text,
                    &format!("experiments.{name}.stop_when"),
                    &doc.metrics_to_watch,
                );
                names.push(name.to_owned());
                candidates.push(Candidate {
                    name: name.to_owned(),
                    group: dir.clone(),
                    file,
                    docs: docs_of(row.summary, name),
                    est_hours: row.est_hours.unwrap_or(options.default_est_hours),
                    accelerators,
                    checkpoint_interval,
                    stop_when,
                    project_name: Some(doc.project_name.clone()),
                    legacy: false,
                    listed: true,
                });
            }
            // A file the group does not list is not part of the catalog, but it is still
            // checked: whoever forgot to list it wants to hear about its own errors too.
            for stray in yaml_stems(&self.root.join("groups").join(&dir))
                .into_iter()
                .filter(|s| s != "group" && !names.contains(s))
            {
                let file = format!("groups/{dir}/{stray}.yaml");
                let mut finding = error_at(
                    "unlisted_experiment",
                    format!("`{stray}` is not listed under `experiments` in {group_rel}, so podq will not run it"),
                    &file,
                    None,
                );
                finding.experiment = Some(stray.clone());
                finding.fix = Some(format!(
                    "list `{stray}` under `experiments` in {group_rel} (with `summary` and `est_hours`), or delete the file"
                ));
                self.file_findings.push(finding);
                candidates.push(Candidate {
                    name: stray.clone(),
                    group: dir.clone(),
                    file: PathBuf::from(file),
                    docs: docs_of(String::new(), &stray),
                    est_hours: options.default_est_hours,
                    accelerators: group_accelerators.clone(),
                    checkpoint_interval: group_interval,
                    stop_when: group_rules.clone(),
                    project_name: Some(doc.project_name.clone()),
                    legacy: false,
                    listed: false,
                });
            }
            if !names.contains(&doc.baseline_row) {
                self.file_findings.push(error_at(
                    "invalid_group_docs",
                    format!(
                        "baseline_row `{}` is not an experiment of the group",
                        doc.baseline_row
                    ),
                    &group_rel,
                    line_of_key(&text, "baseline_row"),
                ));
            }
            self.groups.push(Group {
                name: dir,
                title: doc.title,
                experiments: names,
                baseline_row: Some(doc.baseline_row),
                planned_hours: doc.planned_hours,
                rungs: group_rungs,
            });
        }
        let mut seen = BTreeMap::new();
        for c in candidates.iter().filter(|c| c.listed) {
            if let Some(other) = seen.insert(c.name.clone(), c.group.clone()) {
                self.file_findings.push(error_at(
                    "duplicate_experiment_name",
                    format!(
                        "experiment `{}` exists in groups {other} and {}",
                        c.name, c.group
                    ),
                    &c.file.display().to_string(),
                    None,
                ));
            }
        }
        candidates
    }
}

/// Reads a YAML file into `T`; on failure, the message and the line it concerns.
fn read_yaml<T: serde::de::DeserializeOwned>(path: &Path) -> Result<T, (String, Option<u32>)> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| (format!("cannot read {}: {e}", path.display()), None))?;
    serde_yaml::from_str(&text).map_err(|e| {
        (
            format!("{}: {e}", path.display()),
            e.location().map(|l| l.line() as u32),
        )
    })
}

impl Catalog {
    /// A `checkpoint_interval` value, or `inherited` when absent; a bad one is an error at its
    /// line and falls back to `inherited`.
    /// The slice types `accelerator:` or `accelerators:` (under `prefix`) name, each one podq
    /// knows and named once; what is `inherited` when neither is given or a name is wrong.
    fn accelerators_of(
        &mut self,
        one: Option<String>,
        list: Option<Vec<String>>,
        inherited: &[String],
        group_rel: &str,
        text: &str,
        prefix: &str,
    ) -> Vec<String> {
        let (key, names) = match (one, list) {
            (None, None) => return inherited.to_vec(),
            (Some(_), Some(_)) => {
                let key = format!("{prefix}accelerators");
                self.file_findings.push(invalid_accelerator(
                    format!("`{prefix}accelerator` and `{key}` are both given: keep `{key}`"),
                    group_rel,
                    text,
                    &key,
                ));
                return inherited.to_vec();
            }
            (Some(one), None) => (format!("{prefix}accelerator"), vec![one]),
            (None, Some(list)) => (format!("{prefix}accelerators"), list),
        };
        let mut problems = Vec::new();
        if names.is_empty() {
            problems.push(format!("`{key}` is empty: name at least one slice type"));
        }
        for (i, name) in names.iter().enumerate() {
            if let Err(unknown) = podq_api::slice_type(name) {
                problems.push(format!("`{key}`: {unknown}"));
            } else if names[..i].contains(name) {
                problems.push(format!("`{key}` names `{name}` twice"));
            }
        }
        if problems.is_empty() {
            return names;
        }
        for problem in problems {
            self.file_findings
                .push(invalid_accelerator(problem, group_rel, text, &key));
        }
        inherited.to_vec()
    }

    fn interval_of(
        &mut self,
        value: Option<&serde_yaml::Value>,
        inherited: CheckpointInterval,
        file: &str,
        text: &str,
        key: &str,
    ) -> CheckpointInterval {
        let Some(value) = value else {
            return inherited;
        };
        CheckpointInterval::parse(value).unwrap_or_else(|message| {
            let line = line_of_key(text, key);
            let mut finding = error_at("invalid_checkpoint_interval", message, file, line);
            finding.fix = Some("write `checkpoint_interval: auto` or a number of steps".into());
            self.file_findings.push(finding);
            inherited
        })
    }
}

impl Catalog {
    /// A `stop_when` value, or `inherited` when absent. A malformed rule is an error at its
    /// line and the level keeps `inherited`; a metric neither the trainer (TRM) nor the
    /// group's `metrics_to_watch` names is a warning with a did-you-mean, since a custom
    /// trainer may log it.
    fn rules_of(
        &mut self,
        value: Option<&serde_yaml::Value>,
        inherited: &[StopRule],
        file: &str,
        text: &str,
        key: &str,
        watched: &[String],
    ) -> Vec<StopRule> {
        let Some(value) = value else {
            return inherited.to_vec();
        };
        // A row written inline (`exp01a: {summary: ..., stop_when: ...}`) has no line of its
        // own for the key: the row's line is the rule's.
        let line = line_of_key(text, key).or_else(|| {
            key.rsplit_once('.')
                .and_then(|(row, _)| line_of_key(text, row))
        });
        match parse_rules(value) {
            Ok(rules) => {
                let known: Vec<&str> = TRAINER_METRICS
                    .into_iter()
                    .chain(watched.iter().map(String::as_str))
                    .collect();
                for rule in rules.iter().filter(|r| !known.contains(&r.metric.as_str())) {
                    let mut finding = error_at(
                        "unknown_stop_metric",
                        format!(
                            "stop rule `{}` watches `{}`, which the trainer is not known to \
                             report{}",
                            rule.text,
                            rule.metric,
                            crate::names::phrase(&crate::names::did_you_mean(
                                &rule.metric,
                                known.iter().copied()
                            ))
                        ),
                        file,
                        line,
                    );
                    finding.severity = podq_api::Severity::Warning;
                    finding.fix = Some(
                        "name a metric the trainer reports, or add it to the group's \
                         `metrics_to_watch`"
                            .into(),
                    );
                    self.file_findings.push(finding);
                }
                rules
            }
            Err(messages) => {
                for message in messages {
                    let mut finding = error_at("invalid_stop_rule", message, file, line);
                    finding.fix = Some(
                        "write `METRIC below|above VALUE at N%` or `METRIC not improved in N \
                         evaluations`"
                            .into(),
                    );
                    self.file_findings.push(finding);
                }
                inherited.to_vec()
            }
        }
    }
}

impl Catalog {
    /// A `rungs:` value: its rungs, or None for `none` or a bad value, which is an error at
    /// the line of the key it is about. With `watched` (a group's `metrics_to_watch`) the
    /// metric is checked too; the suite's is checked for each group that inherits it.
    fn rungs_of(
        &mut self,
        value: &serde_yaml::Value,
        file: &str,
        text: &str,
        watched: Option<&[String]>,
    ) -> Option<Rungs> {
        match super::rungs::parse(value) {
            Ok(Some(rungs)) => match watched {
                Some(watched) => self
                    .known_rungs_metric(&rungs.metric, file, text, watched)
                    .then_some(rungs),
                None => Some(rungs),
            },
            Ok(None) => None,
            Err(problems) => {
                for problem in problems {
                    self.push_rungs_problem("invalid_rungs", problem, file, text);
                }
                // Its metric is checked too, so one run of `podq validate` says all.
                let metric = value.get("metric").and_then(serde_yaml::Value::as_str);
                if let (Some(watched), Some(metric)) = (watched, metric) {
                    self.known_rungs_metric(metric.trim(), file, text, watched);
                }
                None
            }
        }
    }

    /// Whether the rungs' metric is one the trainer reports or the group watches; if not, an
    /// error at the metric's line (once, for a suite's rungs several groups inherit).
    fn known_rungs_metric(
        &mut self,
        metric: &str,
        file: &str,
        text: &str,
        watched: &[String],
    ) -> bool {
        match super::rungs::check_metric(metric, watched) {
            Ok(()) => true,
            Err(problem) => {
                self.push_rungs_problem("unknown_rungs_metric", problem, file, text);
                false
            }
        }
    }

    fn push_rungs_problem(
        &mut self,
        code: &str,
        problem: super::rungs::Problem,
        file: &str,
        text: &str,
    ) {
        // A mapping written inline (`rungs: {metric: ...}`) has no line of its own for the key.
        let line = problem
            .key
            .and_then(|key| line_of_key(text, &format!("rungs.{key}")))
            .or_else(|| line_of_key(text, "rungs"));
        let mut finding = error_at(code, problem.message, file, line);
        finding.key = Some(match problem.key {
            Some(key) => format!("rungs.{key}"),
            None => "rungs".into(),
        });
        finding.fix = problem.fix;
        let repeated = self.file_findings.iter().any(|f| {
            f.code == finding.code
                && f.file == finding.file
                && f.line == finding.line
                && f.message == finding.message
        });
        if !repeated {
            self.file_findings.push(finding);
        }
    }
}

/// `rungs: none` (or an empty `rungs:`), which lifts the suite's rungs.
fn is_none(value: &serde_yaml::Value) -> bool {
    matches!(super::rungs::parse(value), Ok(None))
}

fn invalid_accelerator(
    message: String,
    group_rel: &str,
    text: &str,
    key: &str,
) -> podq_api::Finding {
    let mut finding = error_at(
        "invalid_accelerator",
        message,
        group_rel,
        line_of_key(text, key),
    );
    finding.fix = Some(
        "name Cloud TPU slice types podq knows, most preferred first, such as \
         `accelerators: [v4-64, v6e-32]`"
            .into(),
    );
    finding
}
