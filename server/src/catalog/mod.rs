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

pub mod classes;
mod findings;
mod hash;
pub mod hydra;
mod layout;
mod legacy;
mod resolve;
pub mod rungs;
pub mod schema;
pub mod source;
pub mod stop_rules;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use podq_api::{ExperimentDocs, ExperimentSummary, Finding, FindingGroup, Severity};
use serde_json::Value;

pub use findings::summarize;
pub use hash::sha256_canonical;
pub use resolve::validate_document;
use resolve::{fill_lines, resolve};

use source::SourceFiles;

/// Settings that shape how experiments resolve.
#[derive(Debug, Clone)]
pub struct CatalogOptions {
    /// Where checkpoints go: `<bucket>/checkpoints/<group>/<experiment>`.
    pub bucket: String,
    /// The accelerator type an experiment runs on when its group does not say: a pod of this
    /// type leases it, and the global batch must divide evenly among its devices.
    pub accelerator: String,
    /// Hours an experiment is planned to take when its group does not say.
    pub default_est_hours: f64,
}

impl Default for CatalogOptions {
    fn default() -> Self {
        CatalogOptions {
            bucket: "gs://sculptor-tpu-experiments".into(),
            accelerator: "v4-64".into(),
            default_est_hours: 40.0,
        }
    }
}

/// When a run saves checkpoints: `checkpoint_interval` in `suite.yaml`, a
/// `group.yaml` or one experiment's row there, the narrowest winning.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CheckpointInterval {
    /// As its trainer config says (TRM: at each evaluation with `checkpoint_every_eval`).
    #[default]
    Config,
    /// At the interval podq advises (`auto`), given to each attempt's trainer.
    Auto,
    /// Every this many steps, given to each attempt's trainer.
    Steps(u64),
}

impl CheckpointInterval {
    /// `auto` or a positive number of steps.
    pub fn parse(value: &serde_yaml::Value) -> Result<CheckpointInterval, String> {
        match value {
            serde_yaml::Value::String(s) if s == "auto" => Ok(CheckpointInterval::Auto),
            serde_yaml::Value::Number(n) => match n.as_u64() {
                Some(steps) if steps > 0 => Ok(CheckpointInterval::Steps(steps)),
                _ => Err(format!(
                    "`checkpoint_interval: {n}` is not a positive number of steps"
                )),
            },
            other => Err(format!(
                "`checkpoint_interval` is `auto` or a positive number of steps, not {}",
                serde_yaml::to_string(other).unwrap_or_default().trim()
            )),
        }
    }

    pub fn is_auto(self) -> bool {
        self == CheckpointInterval::Auto
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
    /// The slice type it prefers: the first of `accelerators`.
    pub accelerator: String,
    /// The slice types whose pods may lease it, most preferred first. Not part of its
    /// config hash: the run is the same run wherever it lands.
    pub accelerators: Vec<String>,
    pub checkpoint_interval: CheckpointInterval,
    /// The `stop_when` rules of its row, group or suite, the narrowest winning.
    pub stop_when: Vec<stop_rules::StopRule>,
    /// Its group's rungs (`rungs:` in its `group.yaml`, or the suite's), None without. Not
    /// part of its config hash: the run is the same run whether or not it is compared.
    pub rungs: Option<rungs::Rungs>,
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
            accelerator: self.accelerator.clone(),
            accelerators: self.accelerators.clone(),
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
    /// `rungs:` of its `group.yaml`, else the suite's; None without, or with `rungs: none`.
    pub rungs: Option<rungs::Rungs>,
}

/// A loaded catalog. Loading never fails as a whole: every problem is a finding, and
/// [`Catalog::errors`] says whether the catalog may be used.
#[derive(Debug, Clone, Default)]
pub struct Catalog {
    pub root: PathBuf,
    /// The bucket checkpoints go under (`CatalogOptions::bucket`): compiled programs are
    /// cached there too, per slice type (`compile_cache_dir`).
    pub bucket: String,
    pub experiments: Vec<Experiment>,
    pub groups: Vec<Group>,
    /// Problems not tied to one experiment (unreadable files, group docs).
    pub file_findings: Vec<Finding>,
    /// The suite's priority classes (`priority_classes:` in `suite.yaml`).
    pub classes: classes::PriorityClasses,
    /// The suite's `divergence_guard:` (defaults when absent).
    pub guard: stop_rules::DivergenceGuard,
    /// The suite's `priority_range: [LOW, HIGH]`: the priorities a submitter may give a
    /// job (an admin's may be any); none for the default, 0 to 100.
    pub priority_range: Option<(i64, i64)>,
}

/// What the loader knows about an experiment before composing it.
struct Candidate {
    name: String,
    group: String,
    file: PathBuf,
    docs: ExperimentDocs,
    est_hours: f64,
    /// Never empty.
    accelerators: Vec<String>,
    checkpoint_interval: CheckpointInterval,
    stop_when: Vec<stop_rules::StopRule>,
    project_name: Option<String>,
    legacy: bool,
    /// False for a file in a group directory that its `group.yaml` does not list: it is
    /// checked like any experiment so its own errors are reported, but it is not part of the
    /// catalog.
    listed: bool,
}

impl Catalog {
    /// Where the trainers of `slice_type` keep JAX's persistent compilation cache: one
    /// directory per slice type, since a program compiled for one topology is of no use on
    /// another, shared by every run and attempt on it.
    pub fn compile_cache_dir(&self, slice_type: &str) -> Option<String> {
        let bucket = self.bucket.trim_end_matches('/');
        (!bucket.is_empty()).then(|| format!("{bucket}/compile-cache/{slice_type}"))
    }

    pub fn load(root: &Path, options: &CatalogOptions) -> Catalog {
        let mut catalog = Catalog {
            root: root.to_path_buf(),
            bucket: options.bucket.clone(),
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
            let listed = candidate.listed;
            let experiment = resolve(&mut files, candidate, options);
            if listed {
                catalog.experiments.push(experiment);
            } else {
                // Its errors are reported; its warnings would only repeat the catalog's.
                catalog.file_findings.extend(
                    experiment
                        .findings
                        .into_iter()
                        .filter(|f| f.severity == Severity::Error),
                );
            }
        }
        for experiment in &mut catalog.experiments {
            experiment.rungs = catalog
                .groups
                .iter()
                .find(|g| g.name == experiment.group)
                .and_then(|g| g.rungs.clone());
        }
        findings::cross_check(&mut catalog.experiments);
        fill_lines(
            &files,
            catalog.file_findings.iter_mut().chain(
                catalog
                    .experiments
                    .iter_mut()
                    .flat_map(|e| e.findings.iter_mut()),
            ),
        );
        catalog
    }

    /// Every finding grouped by root cause, errors first: what `podq validate` prints.
    pub fn summary(&self) -> Vec<FindingGroup> {
        summarize(self.findings())
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

fn error_at(code: &str, message: String, file: &str, line: Option<u32>) -> Finding {
    Finding {
        line,
        ..error_finding(code, message, Some(file.to_owned()))
    }
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
        fix: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        copy(
            &Path::new(env!("CARGO_MANIFEST_DIR")).join("../experiments"),
            dir.path(),
        );
        dir
    }

    fn append(root: &Path, rel: &str, text: &str) {
        let path = root.join(rel);
        let mut content = std::fs::read_to_string(&path).unwrap();
        content.push_str(text);
        std::fs::write(path, content).unwrap();
    }

    fn errors(catalog: &Catalog) -> Vec<&Finding> {
        catalog.errors()
    }

    const EXP07A: &str = "groups/exp07-precision/exp07a.yaml";

    #[test]
    fn the_suite_is_clean_and_every_finding_has_a_line() {
        let dir = suite_copy();
        let catalog = Catalog::load(dir.path(), &CatalogOptions::default());
        assert!(errors(&catalog).is_empty(), "{:#?}", errors(&catalog));
        assert_eq!(catalog.experiments.len(), 67);
        for f in catalog.findings() {
            assert!(f.file.is_some() && f.line.is_some(), "{f:?}");
        }
        let summary = catalog.summary();
        let unread: Vec<_> = summary.iter().filter(|g| g.code == "unread_keys").collect();
        assert_eq!(
            unread.len(),
            1,
            "one line for every unread key: {summary:#?}"
        );
        assert!(unread[0].summary.starts_with("67 experiments set keys"));
    }

    #[test]
    fn a_near_miss_of_a_schema_key_is_an_error_that_names_the_key() {
        let dir = suite_copy();
        append(dir.path(), EXP07A, "global_batchsize: 4096\n");
        let catalog = Catalog::load(dir.path(), &CatalogOptions::default());
        let found = errors(&catalog);
        assert_eq!(found.len(), 1, "{found:#?}");
        let f = found[0];
        assert_eq!(f.code, "unknown_key");
        assert_eq!(f.file.as_deref(), Some(EXP07A));
        assert_eq!(f.line, Some(8));
        assert_eq!(f.fix.as_deref(), Some("did you mean `global_batch_size`?"));
        assert!(f.message.contains("stays 6144"), "{}", f.message);
        // Architecture keys too, and in the file that sets them.
        append(dir.path(), "arch/dtype_float32.yaml", "hiden_size: 384\n");
        let catalog = Catalog::load(dir.path(), &CatalogOptions::default());
        let arch = catalog
            .errors()
            .into_iter()
            .find(|f| f.key.as_deref() == Some("arch.hiden_size"))
            .expect("arch near miss");
        assert_eq!(arch.file.as_deref(), Some("arch/dtype_float32.yaml"));
        assert_eq!(
            arch.fix.as_deref(),
            Some("did you mean `arch.hidden_size`?")
        );
    }

    #[test]
    fn a_bad_override_is_reported_at_the_experiments_own_line() {
        let dir = suite_copy();
        let path = dir.path().join(EXP07A);
        let text = std::fs::read_to_string(&path).unwrap();
        std::fs::write(&path, text.replace("dtype_float32", "dtype_flaot32")).unwrap();
        let catalog = Catalog::load(dir.path(), &CatalogOptions::default());
        let found = errors(&catalog);
        assert_eq!(found.len(), 1, "{found:#?}");
        let f = found[0];
        assert_eq!(f.code, "unknown_option");
        assert_eq!((f.file.as_deref(), f.line), (Some(EXP07A), Some(5)));
        assert_eq!(f.fix.as_deref(), Some("did you mean `dtype_float32`?"));
    }

    #[test]
    fn an_unlisted_file_is_reported_with_its_own_errors() {
        let dir = suite_copy();
        let stray = "groups/exp07-precision/exp07z.yaml";
        std::fs::write(
            dir.path().join(stray),
            "# @package _global_\ndefaults:\n  - /baseline\n  - _self_\nrun_name: stray\nlr: fast\n",
        )
        .unwrap();
        let catalog = Catalog::load(dir.path(), &CatalogOptions::default());
        assert_eq!(
            catalog.experiments.len(),
            67,
            "a stray is not in the catalog"
        );
        let found: Vec<(&str, Option<&str>, Option<u32>)> = errors(&catalog)
            .iter()
            .map(|f| (f.code.as_str(), f.file.as_deref(), f.line))
            .collect();
        assert_eq!(
            found,
            [
                ("unlisted_experiment", Some(stray), Some(2)),
                ("invalid_value", Some(stray), Some(6)),
            ]
        );
    }

    const EXP02A: &str = "groups/exp02a-l-cycles/group.yaml";

    #[test]
    fn a_checkpoint_interval_comes_from_the_suite_the_group_or_the_row() {
        let dir = suite_copy();
        append(dir.path(), "suite.yaml", "checkpoint_interval: auto\n");
        append(dir.path(), EXP02A, "checkpoint_interval: 500\n");
        let catalog = Catalog::load(dir.path(), &CatalogOptions::default());
        assert!(errors(&catalog).is_empty(), "{:#?}", errors(&catalog));
        let interval = |name: &str| catalog.experiment(name).unwrap().checkpoint_interval;
        assert_eq!(interval("exp01a"), CheckpointInterval::Auto);
        assert_eq!(interval("exp02a_01"), CheckpointInterval::Steps(500));

        let dir = suite_copy();
        append(dir.path(), EXP02A, "checkpoint_interval: often\n");
        let catalog = Catalog::load(dir.path(), &CatalogOptions::default());
        let found = errors(&catalog);
        assert_eq!(found.len(), 1, "{found:#?}");
        assert_eq!(found[0].code, "invalid_checkpoint_interval");
        assert_eq!(found[0].file.as_deref(), Some(EXP02A));
        assert!(found[0].line.is_some(), "{:?}", found[0]);
        assert_eq!(
            catalog.experiment("exp02a_01").unwrap().checkpoint_interval,
            CheckpointInterval::Config,
            "a bad value falls back to what is inherited"
        );
    }

    #[test]
    fn a_group_names_its_accelerator_and_the_batch_divides_among_its_devices() {
        let dir = suite_copy();
        append(dir.path(), EXP02A, "accelerator: v4-32\n");
        let catalog = Catalog::load(dir.path(), &CatalogOptions::default());
        assert!(errors(&catalog).is_empty(), "{:?}", errors(&catalog));
        let accelerator = |name: &str| catalog.experiment(name).unwrap().accelerator.clone();
        assert_eq!(accelerator("exp02a_01"), "v4-32");
        assert_eq!(accelerator("exp01a"), "v4-64", "the server's default");

        // The suite's global batch of 6144 does not divide among a v5p-8192's 4096
        // devices, the list's second choice.
        let dir = suite_copy();
        append(dir.path(), EXP02A, "accelerators: [v4-64, v5p-8192]\n");
        let catalog = Catalog::load(dir.path(), &CatalogOptions::default());
        assert!(
            errors(&catalog)
                .iter()
                .any(|f| f.message.contains("4096 devices of a v5p-8192")),
            "{:?}",
            errors(&catalog)
        );
    }

    const SUITE_RUNGS: &str =
        "rungs:\n  metric: eval/exact_accuracy\n  at: [25%, 50%]\n  keep: 1/2\n";

    /// The 1-based line of the first line of `rel` that contains `needle`.
    fn line_in(root: &Path, rel: &str, needle: &str) -> u32 {
        let text = std::fs::read_to_string(root.join(rel)).unwrap();
        text.lines().position(|l| l.contains(needle)).unwrap() as u32 + 1
    }

    #[test]
    fn the_suite_sets_the_priorities_a_submitter_may_give() {
        let dir = suite_copy();
        let shipped = Catalog::load(dir.path(), &CatalogOptions::default());
        assert_eq!(shipped.priority_range, None, "the default, 0 to 100");
        append(dir.path(), "suite.yaml", "priority_range: [0, 10]\n");
        let catalog = Catalog::load(dir.path(), &CatalogOptions::default());
        assert!(errors(&catalog).is_empty(), "{:#?}", errors(&catalog));
        assert_eq!(catalog.priority_range, Some((0, 10)));
        let dir = suite_copy();
        append(dir.path(), "suite.yaml", "priority_range: [10, 0]\n");
        let catalog = Catalog::load(dir.path(), &CatalogOptions::default());
        let found = errors(&catalog);
        assert!(
            found.iter().any(|f| f.code == "invalid_priority_range"),
            "{found:#?}"
        );
    }

    #[test]
    fn rungs_come_from_the_suite_or_the_group_and_none_lifts_them() {
        let dir = suite_copy();
        append(dir.path(), "suite.yaml", SUITE_RUNGS);
        append(dir.path(), EXP02A, "rungs: none\n");
        append(
            dir.path(),
            "groups/exp10-lr-schedule/group.yaml",
            "rungs: {metric: eval/loss, at: 30%, keep: auto}\n",
        );
        let catalog = Catalog::load(dir.path(), &CatalogOptions::default());
        assert!(errors(&catalog).is_empty(), "{:#?}", errors(&catalog));
        let suite = rungs::Rungs {
            metric: "eval/exact_accuracy".into(),
            lower_is_better: false,
            at: vec![0.25, 0.5],
            keep: rungs::Keep::Share(0.5),
        };
        let rungs_of = |name: &str| catalog.experiment(name).unwrap().rungs.clone();
        assert_eq!(rungs_of("exp01a"), Some(suite.clone()));
        assert_eq!(
            catalog.group("exp01-model-scaling").unwrap().rungs,
            Some(suite)
        );
        assert_eq!(
            rungs_of("exp02a_01"),
            None,
            "`rungs: none` lifts the suite's"
        );
        assert_eq!(catalog.group("exp02a-l-cycles").unwrap().rungs, None);
        let own = rungs_of("exp10a").expect("the group's own rungs");
        assert_eq!(
            (own.metric.as_str(), own.lower_is_better, own.at, own.keep),
            ("eval/loss", true, vec![0.3], rungs::Keep::Auto)
        );

        // Without `rungs:` anywhere a group has none, and rungs change no run's identity.
        let plain = Catalog::load(suite_copy().path(), &CatalogOptions::default());
        assert!(plain.groups.iter().all(|g| g.rungs.is_none()));
        assert!(plain.experiments.iter().all(|e| e.rungs.is_none()));
        for e in &plain.experiments {
            let with = catalog.experiment(&e.name).unwrap();
            assert_eq!(
                (&with.config_sha256, &with.trainer_sha256),
                (&e.config_sha256, &e.trainer_sha256),
                "rungs are not part of {}'s hash",
                e.name
            );
        }
    }

    #[test]
    fn a_misspelt_rungs_metric_is_an_error_that_names_the_metric() {
        let dir = suite_copy();
        append(
            dir.path(),
            EXP02A,
            "rungs:\n  metric: eval/exact_acuracy\n  at: [25%]\n  keep: 1/2\n",
        );
        let catalog = Catalog::load(dir.path(), &CatalogOptions::default());
        let found = errors(&catalog);
        assert_eq!(found.len(), 1, "{found:#?}");
        let f = found[0];
        assert_eq!(f.code, "unknown_rungs_metric");
        assert_eq!(f.file.as_deref(), Some(EXP02A));
        assert_eq!(
            f.line,
            Some(line_in(dir.path(), EXP02A, "eval/exact_acuracy"))
        );
        assert_eq!(
            f.fix.as_deref(),
            Some("did you mean `eval/exact_accuracy`?")
        );
        assert!(f.message.contains("`eval/exact_acuracy`"), "{}", f.message);

        // A metric the group watches is known; one of the suite is checked against each
        // group that inherits it, and reported once.
        let dir = suite_copy();
        append(
            dir.path(),
            "suite.yaml",
            &SUITE_RUNGS.replace("eval/exact_accuracy", "eval/exact_acuracy"),
        );
        let catalog = Catalog::load(dir.path(), &CatalogOptions::default());
        let found = errors(&catalog);
        assert_eq!(found.len(), 1, "{found:#?}");
        assert_eq!(found[0].file.as_deref(), Some("suite.yaml"));
        assert_eq!(
            found[0].line,
            Some(line_in(dir.path(), "suite.yaml", "eval/exact_acuracy"))
        );
        assert!(catalog.groups.iter().all(|g| g.rungs.is_none()));

        // A metric is checked even when another key is wrong: one run says all.
        let dir = suite_copy();
        append(
            dir.path(),
            EXP02A,
            "rungs: {metric: eval/exact_acuracy, at: 25%, keep: 2}\n",
        );
        let catalog = Catalog::load(dir.path(), &CatalogOptions::default());
        let codes: Vec<&str> = errors(&catalog).iter().map(|f| f.code.as_str()).collect();
        assert_eq!(codes, ["invalid_rungs", "unknown_rungs_metric"]);
    }

    #[test]
    fn bad_rungs_are_errors_at_the_line_of_their_key() {
        let dir = suite_copy();
        append(dir.path(), "suite.yaml", SUITE_RUNGS);
        append(
            dir.path(),
            EXP02A,
            "rungs:\n  metric: eval/exact_accuracy\n  at: [50%, 25%]\n  keep: 1\n",
        );
        let catalog = Catalog::load(dir.path(), &CatalogOptions::default());
        let found: Vec<(&str, Option<&str>, Option<u32>)> = errors(&catalog)
            .iter()
            .map(|f| (f.code.as_str(), f.key.as_deref(), f.line))
            .collect();
        assert_eq!(
            found,
            [
                (
                    "invalid_rungs",
                    Some("rungs.at"),
                    Some(line_in(dir.path(), EXP02A, "at: [50%, 25%]"))
                ),
                (
                    "invalid_rungs",
                    Some("rungs.keep"),
                    Some(line_in(dir.path(), EXP02A, "  keep: 1"))
                ),
            ]
        );
        assert!(catalog
            .errors()
            .iter()
            .all(|f| f.file.as_deref() == Some(EXP02A)));
        assert_eq!(
            catalog.experiment("exp02a_01").unwrap().rungs,
            catalog.experiment("exp01a").unwrap().rungs,
            "a bad value keeps the suite's"
        );
    }

    #[test]
    fn an_accelerator_that_is_not_a_type_is_an_error_at_its_line() {
        let dir = suite_copy();
        append(dir.path(), EXP02A, "accelerator: big pod\n");
        let catalog = Catalog::load(dir.path(), &CatalogOptions::default());
        let finding = errors(&catalog)
            .into_iter()
            .find(|f| f.code == "invalid_accelerator")
            .expect("an invalid_accelerator finding");
        assert_eq!(finding.file.as_deref(), Some(EXP02A));
        assert!(finding.line.is_some(), "{finding:?}");
        assert!(finding.message.contains("big pod"), "{finding:?}");
    }

    #[test]
    fn a_group_lists_slice_types_in_order_and_a_near_miss_is_named() {
        let dir = suite_copy();
        append(dir.path(), EXP02A, "accelerators: [v4-64, v6e-32]\n");
        let catalog = Catalog::load(dir.path(), &CatalogOptions::default());
        assert!(errors(&catalog).is_empty(), "{:?}", errors(&catalog));
        let exp = catalog.experiment("exp02a_01").unwrap();
        assert_eq!(exp.accelerators, ["v4-64", "v6e-32"]);
        assert_eq!(exp.accelerator, "v4-64");
        let single = Catalog::load(suite_copy().path(), &CatalogOptions::default());
        assert_eq!(
            single.experiment("exp02a_01").unwrap().config_sha256,
            exp.config_sha256,
            "the list is not part of the run's identity"
        );

        let dir = suite_copy();
        append(dir.path(), EXP02A, "accelerators: [v4-64, v6e-23]\n");
        let catalog = Catalog::load(dir.path(), &CatalogOptions::default());
        let finding = errors(&catalog)
            .into_iter()
            .find(|f| f.code == "invalid_accelerator")
            .expect("an invalid_accelerator finding");
        assert!(finding.message.contains("`v6e-23`"), "{finding:?}");
        assert!(
            finding.message.contains("did you mean `v6e-32`"),
            "{finding:?}"
        );
        assert!(finding.line.is_some(), "{finding:?}");

        let dir = suite_copy();
        append(
            dir.path(),
            EXP02A,
            "accelerator: v4-64\naccelerators: [v6e-32]\n",
        );
        let catalog = Catalog::load(dir.path(), &CatalogOptions::default());
        assert!(
            errors(&catalog)
                .iter()
                .any(|f| f.message.contains("both given")),
            "{:?}",
            errors(&catalog)
        );
    }
}
