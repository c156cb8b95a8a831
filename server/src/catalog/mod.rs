//! The experiment catalog: loading a suite of Hydra-style configs, resolving them, checking
//! them against the trainer's schema, and finding what is wrong with them.
//!
//! Two layouts are read:
//! - podq's own (`groups/<group>/<experiment>.yaml` with a `group.yaml` of docs per group, an
//!   optional `suite.yaml` giving the group order, `arch/` as the architecture group);
//! - the user's original (`experiments/*.yaml`, grouped by the directory of their
//!   `checkpoint_path`), so `podq validate` can say what is wrong with it.

mod findings;
pub mod hydra;
pub mod schema;
pub mod source;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

use podq_api::{ExperimentDocs, ExperimentSummary, Finding, Severity};

use hydra::{ComposeError, Composer, Provenance};
use source::{line_of_key, SourceFiles};

/// Settings that shape how experiments resolve.
#[derive(Debug, Clone)]
pub struct CatalogOptions {
    /// Where checkpoints go: `<bucket>/checkpoints/<group>/<experiment>`.
    pub bucket: String,
    /// Devices of the target pod; the global batch must divide evenly among them.
    pub devices: u32,
    /// Hours an experiment is planned to take when its group does not say.
    pub default_est_hours: f64,
}

impl Default for CatalogOptions {
    fn default() -> Self {
        CatalogOptions {
            bucket: "gs://sculptor-tpu-experiments".into(),
            devices: 32,
            default_est_hours: 40.0,
        }
    }
}

/// One resolved experiment.
#[derive(Debug, Clone)]
pub struct Experiment {
    pub name: String,
    pub group: String,
    /// The resolved config, exactly what the trainer receives.
    pub config: Value,
    /// sha256 of the canonical JSON of `config` without the identity keys.
    /// sha256 of the canonical JSON of `config` without the identity keys.
    pub config_sha256: String,
    /// The same, also without the keys the trainer never reads.
    pub trainer_sha256: String,
    pub est_hours: f64,
    pub checkpoint_dir: String,
    pub docs: ExperimentDocs,
    pub findings: Vec<Finding>,
    pub source_file: String,
}

impl Experiment {
    pub fn summary(&self) -> ExperimentSummary {
        ExperimentSummary {
            name: self.name.clone(),
            group: self.group.clone(),
            config_sha256: self.config_sha256.clone(),
            est_hours: self.est_hours,
            checkpoint_dir: self.checkpoint_dir.clone(),
            docs: self.docs.clone(),
            findings: self.findings.clone(),
        }
    }
}

#[derive(Debug, Clone)]
pub struct Group {
    pub name: String,
    pub title: String,
    pub experiments: Vec<String>,
    pub baseline_row: Option<String>,
    pub planned_hours: f64,
}

/// A loaded catalog. Loading never fails as a whole: every problem is a finding, and
/// [`Catalog::errors`] says whether the catalog may be used.
#[derive(Debug, Clone, Default)]
pub struct Catalog {
    pub root: PathBuf,
    pub experiments: Vec<Experiment>,
    pub groups: Vec<Group>,
    /// Problems not tied to one experiment (unreadable files, group docs).
    pub file_findings: Vec<Finding>,
}

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
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct SuiteFile {
    groups: Vec<String>,
    #[serde(default)]
    #[allow(dead_code)]
    description: Option<String>,
}

/// What the loader knows about an experiment before composing it.
struct Candidate {
    name: String,
    group: String,
    file: PathBuf,
    docs: ExperimentDocs,
    est_hours: f64,
    project_name: Option<String>,
    legacy: bool,
}

impl Catalog {
    pub fn load(root: &Path, options: &CatalogOptions) -> Catalog {
        let mut catalog = Catalog {
            root: root.to_path_buf(),
            ..Catalog::default()
        };
        if !root.is_dir() {
            catalog.file_findings.push(error_finding(
                "missing_catalog",
                format!("experiments directory {} does not exist", root.display()),
                None,
            ));
            return catalog;
        }
        let candidates = if root.join("groups").is_dir() {
            catalog.discover_groups(options)
        } else if root.join("experiments").is_dir() {
            catalog.discover_legacy(options)
        } else {
            catalog.file_findings.push(error_finding(
                "missing_catalog",
                format!(
                    "{} has neither a groups/ nor an experiments/ directory",
                    root.display()
                ),
                None,
            ));
            Vec::new()
        };
        let mut files = SourceFiles::new(root);
        for candidate in candidates {
            let experiment = resolve(&mut files, candidate, options);
            catalog.experiments.push(experiment);
        }
        findings::cross_check(&mut catalog.experiments);
        catalog
    }

    pub fn experiment(&self, name: &str) -> Option<&Experiment> {
        self.experiments.iter().find(|e| e.name == name)
    }

    pub fn group(&self, name: &str) -> Option<&Group> {
        self.groups.iter().find(|g| g.name == name)
    }

    /// Every finding, file-level first.
    pub fn findings(&self) -> impl Iterator<Item = &Finding> {
        self.file_findings
            .iter()
            .chain(self.experiments.iter().flat_map(|e| e.findings.iter()))
    }

    pub fn errors(&self) -> Vec<&Finding> {
        self.findings()
            .filter(|f| f.severity == Severity::Error)
            .collect()
    }

    /// Sets of experiments that share one training config, in catalog order.
    pub fn duplicate_sets(&self) -> Vec<Vec<String>> {
        let mut by_sha: BTreeMap<&str, Vec<String>> = BTreeMap::new();
        let mut order = Vec::new();
        for e in &self.experiments {
            let names = by_sha.entry(&e.config_sha256).or_default();
            if names.is_empty() {
                order.push(e.config_sha256.as_str());
            }
            names.push(e.name.clone());
        }
        order
            .into_iter()
            .filter_map(|sha| by_sha.remove(sha).filter(|names| names.len() > 1))
            .collect()
    }

    pub fn distinct_configs(&self) -> usize {
        let mut shas: Vec<&str> = self
            .experiments
            .iter()
            .map(|e| e.config_sha256.as_str())
            .collect();
        shas.sort();
        shas.dedup();
        shas.len()
    }

    fn discover_groups(&mut self, options: &CatalogOptions) -> Vec<Candidate> {
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
        if suite_path.is_file() {
            match read_yaml::<SuiteFile>(&suite_path) {
                Ok(suite) => {
                    for missing in dirs.iter().filter(|d| !suite.groups.contains(d)) {
                        self.file_findings.push(error_finding(
                            "unlisted_group",
                            format!(
                                "group directory groups/{missing}/ is not listed in suite.yaml"
                            ),
                            Some("suite.yaml".into()),
                        ));
                    }
                    for listed in suite.groups.iter().filter(|g| !dirs.contains(g)) {
                        self.file_findings.push(error_finding(
                            "unknown_group",
                            format!(
                                "suite.yaml lists `{listed}`, but groups/{listed}/ does not exist"
                            ),
                            Some("suite.yaml".into()),
                        ));
                    }
                    dirs.retain(|d| suite.groups.contains(d));
                    dirs.sort_by_key(|d| suite.groups.iter().position(|g| g == d));
                }
                Err(message) => self.file_findings.push(error_finding(
                    "invalid_suite",
                    message,
                    Some("suite.yaml".into()),
                )),
            }
        }
        let mut candidates = Vec::new();
        for dir in dirs {
            let group_rel = format!("groups/{dir}/group.yaml");
            let doc = match read_yaml::<GroupFile>(&self.root.join(&group_rel)) {
                Ok(doc) => doc,
                Err(message) => {
                    self.file_findings.push(error_finding(
                        "invalid_group_docs",
                        message,
                        Some(group_rel),
                    ));
                    continue;
                }
            };
            let mut names = Vec::new();
            for (key, row) in &doc.experiments {
                let Some(name) = key.as_str() else {
                    self.file_findings.push(error_finding(
                        "invalid_group_docs",
                        format!("experiment key {key:?} is not a name"),
                        Some(group_rel.clone()),
                    ));
                    continue;
                };
                let row: ExperimentRow = match serde_yaml::from_value(row.clone()) {
                    Ok(row) => row,
                    Err(e) => {
                        self.file_findings.push(error_finding(
                            "invalid_group_docs",
                            format!("experiments.{name}: {e}"),
                            Some(group_rel.clone()),
                        ));
                        continue;
                    }
                };
                let file = PathBuf::from(format!("groups/{dir}/{name}.yaml"));
                if !self.root.join(&file).is_file() {
                    self.file_findings.push(error_finding(
                        "missing_experiment_file",
                        format!(
                            "{group_rel} lists `{name}`, but {} does not exist",
                            file.display()
                        ),
                        Some(group_rel.clone()),
                    ));
                    continue;
                }
                names.push(name.to_owned());
                candidates.push(Candidate {
                    name: name.to_owned(),
                    group: dir.clone(),
                    file,
                    docs: ExperimentDocs {
                        title: doc.title.clone(),
                        summary: row.summary,
                        goal: doc.goal.clone(),
                        varies: doc.varies.clone(),
                        hypothesis: doc.hypothesis.clone(),
                        expected_result: doc.expected_result.clone(),
                        metrics_to_watch: doc.metrics_to_watch.clone(),
                        is_baseline_row: doc.baseline_row == name,
                    },
                    est_hours: row.est_hours.unwrap_or(options.default_est_hours),
                    project_name: Some(doc.project_name.clone()),
                    legacy: false,
                });
            }
            for stray in yaml_stems(&self.root.join("groups").join(&dir))
                .into_iter()
                .filter(|s| s != "group" && !names.contains(s))
            {
                self.file_findings.push(error_finding(
                    "unlisted_experiment",
                    format!("groups/{dir}/{stray}.yaml is not listed under `experiments` in {group_rel}"),
                    Some(group_rel.clone()),
                ));
            }
            if !names.contains(&doc.baseline_row) {
                self.file_findings.push(error_finding(
                    "invalid_group_docs",
                    format!(
                        "baseline_row `{}` is not an experiment of the group",
                        doc.baseline_row
                    ),
                    Some(group_rel.clone()),
                ));
            }
            self.groups.push(Group {
                name: dir,
                title: doc.title,
                experiments: names,
                baseline_row: Some(doc.baseline_row),
                planned_hours: doc.planned_hours,
            });
        }
        let mut seen = BTreeMap::new();
        for c in &candidates {
            if let Some(other) = seen.insert(c.name.clone(), c.group.clone()) {
                self.file_findings.push(error_finding(
                    "duplicate_experiment_name",
                    format!(
                        "experiment `{}` exists in groups {other} and {}",
                        c.name, c.group
                    ),
                    Some(c.file.display().to_string()),
                ));
            }
        }
        candidates
    }

    fn discover_legacy(&mut self, options: &CatalogOptions) -> Vec<Candidate> {
        let mut candidates = Vec::new();
        for name in yaml_stems(&self.root.join("experiments")) {
            let file = PathBuf::from(format!("experiments/{name}.yaml"));
            // The group of a legacy experiment is the directory its checkpoints go to.
            let raw = std::fs::read_to_string(self.root.join(&file)).unwrap_or_default();
            let raw = source::parse_yaml_mapping(&raw).unwrap_or_default();
            let project_name = raw
                .get("project_name")
                .and_then(Value::as_str)
                .map(str::to_owned);
            let group = raw
                .get("checkpoint_path")
                .and_then(Value::as_str)
                .and_then(group_of_checkpoint_path)
                .or_else(|| project_name.clone())
                .unwrap_or_else(|| "ungrouped".into());
            candidates.push(Candidate {
                name,
                group,
                file,
                docs: ExperimentDocs::default(),
                est_hours: options.default_est_hours,
                project_name,
                legacy: true,
            });
        }
        let mut groups: Vec<Group> = Vec::new();
        for c in &candidates {
            match groups.iter_mut().find(|g| g.name == c.group) {
                Some(group) => group.experiments.push(c.name.clone()),
                None => groups.push(Group {
                    name: c.group.clone(),
                    title: c.project_name.clone().unwrap_or_else(|| c.group.clone()),
                    experiments: vec![c.name.clone()],
                    baseline_row: None,
                    planned_hours: 0.0,
                }),
            }
        }
        for group in &mut groups {
            group.planned_hours = group.experiments.len() as f64 * options.default_est_hours;
        }
        self.groups = groups;
        candidates
    }
}

/// `gs://bucket/checkpoints/<group>/<experiment>` -> `<group>`.
fn group_of_checkpoint_path(path: &str) -> Option<String> {
    let parts: Vec<&str> = path.trim_end_matches('/').split('/').collect();
    let at = parts.iter().rposition(|p| *p == "checkpoints")?;
    parts
        .get(at + 1)
        .filter(|_| parts.len() > at + 2)
        .map(|s| (*s).to_owned())
}

fn yaml_stems(dir: &Path) -> Vec<String> {
    let mut stems: Vec<String> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let path = e.path();
            (path.is_file() && path.extension()? == "yaml")
                .then(|| path.file_stem()?.to_str().map(str::to_owned))
                .flatten()
        })
        .collect();
    stems.sort();
    stems
}

fn read_yaml<T: serde::de::DeserializeOwned>(path: &Path) -> Result<T, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    serde_yaml::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))
}

fn error_finding(code: &str, message: String, file: Option<String>) -> Finding {
    Finding {
        severity: Severity::Error,
        code: code.into(),
        message,
        file,
        line: None,
        key: None,
        experiment: None,
    }
}

fn resolve(files: &mut SourceFiles, c: Candidate, options: &CatalogOptions) -> Experiment {
    let checkpoint_dir = format!(
        "{}/checkpoints/{}/{}",
        options.bucket.trim_end_matches('/'),
        c.group,
        c.name
    );
    let source_file = c.file.display().to_string();
    let mut experiment = Experiment {
        name: c.name.clone(),
        group: c.group.clone(),
        config: Value::Null,
        config_sha256: String::new(),
        trainer_sha256: String::new(),
        est_hours: c.est_hours,
        checkpoint_dir: checkpoint_dir.clone(),
        docs: c.docs,
        findings: Vec::new(),
        source_file: source_file.clone(),
    };
    let composed = match Composer::new(files).compose(&c.file) {
        Ok(composed) => composed,
        Err(e) => {
            experiment.findings.push(compose_finding(e, &c.name));
            experiment.config_sha256 = format!("unresolved:{}", c.name);
            return experiment;
        }
    };
    let mut config = composed.config;
    let provenance = composed.provenance;
    let mut file_findings = Vec::new();
    if c.legacy {
        if let Some(path) = config.get("checkpoint_path").and_then(Value::as_str) {
            if let Some(message) = findings::legacy_checkpoint_path_problem(
                path,
                &c.name,
                &c.group,
                c.project_name.as_deref(),
            ) {
                file_findings.push(("checkpoint_path_outside_group", "checkpoint_path", message));
            }
        }
    } else {
        for key in schema::IDENTITY_KEYS.iter().filter(|k| **k != "run_name") {
            if config.contains_key(*key) && provenance.contains_key(*key) {
                file_findings.push((
                    "identity_key_ignored",
                    key,
                    format!("`{key}` is set by podq (from the group and the bucket); the file's value is ignored"),
                ));
            }
        }
    }
    // The identity of the run, which podq owns: where its checkpoints go and what it is called.
    if !c.legacy {
        config.insert("checkpoint_path".into(), Value::String(checkpoint_dir));
        if let Some(project) = &c.project_name {
            config.insert("project_name".into(), Value::String(project.clone()));
        }
        config.insert("load_checkpoint".into(), Value::Null);
    } else if let Some(path) = config.get("checkpoint_path").and_then(Value::as_str) {
        experiment.checkpoint_dir = path.to_owned();
    }
    if !config.contains_key("run_name") || config["run_name"].is_null() {
        config.insert("run_name".into(), Value::String(c.name.clone()));
    }

    for issue in schema::validate(&mut config, options.devices) {
        let (mut file, mut line) = locate(files, &provenance, &issue.key, &source_file);
        let mut message = issue.message;
        if issue.code == "missing_arch" {
            // Point at where the architecture went instead: a defaults entry of another name.
            if let Some(misplaced) = misplaced_arch_group(&config) {
                message = format!(
                    "{message}; the architecture is under `{misplaced}` instead (defaults entry `{misplaced}: ...`)"
                );
                file = source_file.clone();
                line = files
                    .text_of(&source_file)
                    .and_then(|text| source::line_of(text, &format!("{misplaced}:")));
            }
        }
        experiment.findings.push(Finding {
            severity: issue.severity,
            code: issue.code.into(),
            message,
            file: Some(file),
            line,
            key: Some(issue.key),
            experiment: Some(c.name.clone()),
        });
    }
    let unread = schema::unread_keys(&config);
    if !unread.is_empty() {
        let (file, line) = locate(files, &provenance, &unread[0], &source_file);
        experiment.findings.push(Finding {
            severity: Severity::Warning,
            code: "unread_keys".into(),
            message: format!(
                "keys the trainer does not read (kept in the config, but they change nothing in today's trainer): {}",
                unread.join(", ")
            ),
            file: Some(file),
            line,
            key: Some(unread[0].clone()),
            experiment: Some(c.name.clone()),
        });
    }
    for (code, key, message) in file_findings {
        let (file, line) = locate(files, &provenance, key, &source_file);
        experiment.findings.push(Finding {
            severity: Severity::Warning,
            code: code.into(),
            message,
            file: Some(file),
            line,
            key: Some(key.to_string()),
            experiment: Some(c.name.clone()),
        });
    }

    let mut training = training_part(&config);
    experiment.config_sha256 = sha256_canonical(&Value::Object(training.clone()));
    for key in &unread {
        match key.split_once('.') {
            Some(("arch", inner)) => {
                if let Some(Value::Object(arch)) = training.get_mut("arch") {
                    arch.remove(inner);
                }
            }
            _ => {
                training.remove(key);
            }
        }
    }
    experiment.trainer_sha256 = sha256_canonical(&Value::Object(training));
    experiment.config = Value::Object(config);
    experiment
}

/// A top-level mapping that holds architecture keys under another name than `arch`.
fn misplaced_arch_group(config: &Map<String, Value>) -> Option<String> {
    config
        .iter()
        .find(|(key, value)| {
            *key != "arch"
                && value
                    .as_object()
                    .is_some_and(|m| m.contains_key("hidden_size") || m.contains_key("H_cycles"))
        })
        .map(|(key, _)| key.clone())
}

/// Where a key of the resolved config was written: the file that set it last and its line.
fn locate(
    files: &SourceFiles,
    provenance: &Provenance,
    key: &str,
    fallback_file: &str,
) -> (String, Option<u32>) {
    let origin = provenance.get(key).or_else(|| {
        provenance
            .iter()
            .find(|(k, _)| k.starts_with(&format!("{key}.")))
            .map(|(_, v)| v)
    });
    match origin {
        Some((file, local_key)) => {
            let line = files.text_of(file).and_then(|t| line_of_key(t, local_key));
            (file.clone(), line)
        }
        None => (fallback_file.to_owned(), None),
    }
}

fn compose_finding(e: ComposeError, experiment: &str) -> Finding {
    Finding {
        severity: Severity::Error,
        code: e.code.into(),
        message: e.message,
        file: Some(e.file),
        line: e.line,
        key: e.key,
        experiment: Some(experiment.into()),
    }
}

/// Resolves one YAML document against a catalog root without storing anything: what
/// `POST /experiments/validate` answers. The document may use the root's defaults.
pub fn validate_document(
    root: &Path,
    text: &str,
    options: &CatalogOptions,
) -> (Option<Experiment>, Vec<Finding>) {
    if let Err(e) = source::parse_yaml_mapping(text) {
        return (
            None,
            vec![Finding {
                severity: Severity::Error,
                code: e.code.into(),
                message: e.message,
                file: Some("<request>".into()),
                line: e.line,
                key: None,
                experiment: None,
            }],
        );
    }
    let request_file = PathBuf::from(REQUEST_FILE);
    let mut files = SourceFiles::new(root);
    files.add_virtual(&request_file, text);
    let candidate = Candidate {
        name: "request".into(),
        group: "request".into(),
        file: request_file,
        docs: ExperimentDocs::default(),
        est_hours: options.default_est_hours,
        project_name: None,
        legacy: false,
    };
    let mut experiment = resolve(&mut files, candidate, options);
    for finding in &mut experiment.findings {
        finding.experiment = None;
    }
    let findings = experiment.findings.clone();
    (Some(experiment), findings)
}

/// Drops the keys that name a run, leaving what defines its training.
fn training_part(config: &Map<String, Value>) -> Map<String, Value> {
    let mut training = config.clone();
    for key in schema::IDENTITY_KEYS {
        training.remove(*key);
    }
    training
}

/// The name a validated request document goes by in findings; it stands at the catalog root
/// so its defaults resolve as an experiment's would.
const REQUEST_FILE: &str = "<request>.yaml";

/// sha256 of the canonical JSON (keys sorted at every level, no spaces).
pub fn sha256_canonical(value: &Value) -> String {
    let mut out = String::new();
    write_canonical(value, &mut out);
    hex::encode(Sha256::digest(out.as_bytes()))
}

fn write_canonical(value: &Value, out: &mut String) {
    match value {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            out.push('{');
            for (i, key) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String(key.clone()).to_string());
                out.push(':');
                write_canonical(&map[key], out);
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_canonical(item, out);
            }
            out.push(']');
        }
        other => out.push_str(&other.to_string()),
    }
}
