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
        accelerator: c.accelerators[0].clone(),
        accelerators: c.accelerators.clone(),
        checkpoint_interval: c.checkpoint_interval,
        stop_when: c.stop_when,
        // `Catalog::load` gives it its group's.
        rungs: None,
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

    // Where the architecture went when it is not under `arch`: a defaults entry of another
    // name (the user's `arch_config: ...`). That key is the missing `arch`, not an extra key.
    let misplaced = misplaced_arch_group(&config);
    for issue in schema::validate(&mut config, &c.accelerators) {
        let (mut file, mut line) = locate(files, &provenance, &issue.key, &source_file);
        let mut message = issue.message;
        let mut fix = None;
        if issue.code == "missing_arch" {
            match &misplaced {
                Some(misplaced) => {
                    message = format!(
                        "{message}; the architecture is under `{misplaced}` instead (defaults entry `{misplaced}: ...`)"
                    );
                    file = source_file.clone();
                    line = files
                        .text_of(&source_file)
                        .and_then(|text| source::line_of(text, &format!("{misplaced}:")));
                    fix = Some(if files.is_dir(Path::new(misplaced)) {
                        format!(
                            "rename `{misplaced}/` to `arch/` and the defaults key `{misplaced}` to `arch`"
                        )
                    } else {
                        format!("rename the defaults key `{misplaced}` to `arch`")
                    });
                }
                None => {
                    fix = Some(
                        "select an architecture in the defaults list: `- arch: NAME` loads `arch/NAME.yaml`"
                            .into(),
                    )
                }
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
            fix,
        });
    }
    let unread = schema::unread_keys(&config);
    // In the order they are written, so a report names the first place first.
    let mut unread_at: Vec<(&String, String, Option<u32>)> = unread
        .iter()
        .filter(|k| misplaced.as_ref() != Some(*k))
        .map(|key| {
            let (file, line) = locate(files, &provenance, key, &source_file);
            (key, file, line)
        })
        .collect();
    unread_at.sort_by(|a, b| (&a.1, a.2).cmp(&(&b.1, b.2)));
    for (key, file, line) in unread_at {
        let finding = match schema::near_miss(key) {
            // A misspelt key is not an extra key: the value meant for the trainer never
            // reaches it, and the run silently trains with another one.
            Some(meant) => {
                let consequence = match value_at(&config, &meant) {
                    Some(value) => {
                        let (from, _) = locate(files, &provenance, &meant, &source_file);
                        format!(", so `{meant}` stays {value} (from {from})")
                    }
                    None => format!(", and `{meant}` is not set"),
                };
                Finding {
                    severity: Severity::Error,
                    code: "unknown_key".into(),
                    message: format!("`{key}` is not a key the trainer reads{consequence}"),
                    file: Some(file),
                    line,
                    key: Some(key.clone()),
                    experiment: Some(c.name.clone()),
                    fix: Some(crate::names::meant(&meant)),
                }
            }
            None => Finding {
                severity: Severity::Warning,
                code: "unread_keys".into(),
                message: format!(
                    "`{key}` is not read by today's trainer: it is kept in the config (and its hash) but changes nothing"
                ),
                file: Some(file),
                line,
                key: Some(key.clone()),
                experiment: Some(c.name.clone()),
                fix: Some(UNREAD_FIX.into()),
            },
        };
        experiment.findings.push(finding);
    }
    for (code, key, message) in file_findings {
        let (file, line) = locate(files, &provenance, key, &source_file);
        experiment.findings.push(Finding {
            severity: Severity::Warning,
            code: code.into(),
            fix: (code == "identity_key_ignored").then(|| format!("remove `{key}` from {file}")),
            message,
            file: Some(file),
            line,
            key: Some(key.to_string()),
            experiment: Some(c.name.clone()),
        });
    }

    let mut training = training_part(&config);
    experiment.config_sha256 = sha256_canonical(&Value::Object(training.clone()));
    // A misplaced architecture group is the architecture the run is meant to train with, not
    // an extra key: runs that differ in it are different runs.
    for key in unread.iter().filter(|k| misplaced.as_ref() != Some(*k)) {
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

/// What an unread key needs: nothing, unless it was meant for the trainer. One text for every
/// such key, so they are reported together.
const UNREAD_FIX: &str =
    "none needed unless one was meant for the trainer (its keys are listed in docs/catalog.md)";

/// The value at a dotted key path, as it would be written in YAML.
fn value_at(config: &Map<String, Value>, dotted: &str) -> Option<String> {
    let mut parts = dotted.split('.');
    let mut value = config.get(parts.next()?)?;
    for part in parts {
        value = value.get(part)?;
    }
    Some(match value {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    })
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
        fix: e.fix,
    }
}

/// Points every finding about a file at a line: one about a key has the key's line already;
/// one about the whole file (a duplicate config, a missing required key) gets the line where
/// the file's content starts.
pub(super) fn fill_lines<'a>(
    files: &SourceFiles,
    findings: impl IntoIterator<Item = &'a mut Finding>,
) {
    for finding in findings {
        if let (Some(file), None) = (&finding.file, finding.line) {
            let at_key = finding
                .key
                .as_deref()
                .and_then(|key| files.line_of_key(file, key));
            finding.line = Some(at_key.unwrap_or_else(|| files.whole_file_line(file)));
        }
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
                fix: None,
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
        accelerators: vec![options.accelerator.clone()],
        checkpoint_interval: super::CheckpointInterval::Config,
        stop_when: Vec::new(),
        project_name: None,
        legacy: false,
        listed: true,
    };
    let mut experiment = resolve(&mut files, candidate, options);
    fill_lines(&files, &mut experiment.findings);
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
