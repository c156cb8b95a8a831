//! The experiment catalog: loading a suite of Hydra-style configs, resolving them, checking
//! them against the trainer's schema, and finding what is wrong with them.
//!
//! Two layouts are read:
//! - podq's own (`groups/<group>/<experiment>.yaml` with a `group.yaml` of docs per group, an
//!   optional `suite.yaml` giving the group order, `arch/` as the architecture group);
//! - the user's original (`experiments/*.yaml`, grouped by the directory of their
//!   `checkpoint_path`), so `podq validate` can say what is wrong with it.
//!
//! `layout` reads podq's layout and `legacy` the user's; both hand `resolve` candidates to
//! compose, check and hash (`hash`), and `findings` then checks them against each other.

mod findings;
mod hash;
pub mod hydra;
mod layout;
mod legacy;
mod resolve;
pub mod schema;
pub mod source;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use podq_api::{ExperimentDocs, ExperimentSummary, Finding, Severity};
use serde_json::Value;

pub use hash::sha256_canonical;
use resolve::resolve;
pub use resolve::validate_document;
use source::SourceFiles;

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
