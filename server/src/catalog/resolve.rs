//! Resolving one experiment: composing its Hydra defaults, setting the identity keys podq
//! owns, checking it against the trainer's schema with each finding pointed at the file and
//! line that set the key, and hashing what defines its training.

use std::path::{Path, PathBuf};

use podq_api::{ExperimentDocs, Finding, Severity};
use serde_json::{Map, Value};

use super::hydra::{ComposeError, Composer, Provenance};
use super::source::{self, line_of_key, SourceFiles};
use super::{findings, schema, sha256_canonical, Candidate, CatalogOptions, Experiment};

pub(super) fn resolve(
    files: &mut SourceFiles,
    c: Candidate,
    options: &CatalogOptions,
) -> Experiment {
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
