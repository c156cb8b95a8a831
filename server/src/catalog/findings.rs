//! Findings that need the whole catalog: duplicate runs, runs that differ only in keys the
//! trainer ignores, and dataset paths that name the same data twice.

use std::collections::BTreeMap;

use podq_api::{Finding, Severity};
use serde_json::Value;

use super::Experiment;

pub fn cross_check(experiments: &mut [Experiment]) {
    let resolved: Vec<usize> = (0..experiments.len())
        .filter(|&i| experiments[i].config.is_object())
        .collect();

    let mut by_sha: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut by_trainer_sha: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for &i in &resolved {
        let e = &experiments[i];
        by_sha
            .entry(e.config_sha256.clone())
            .or_default()
            .push(e.name.clone());
        by_trainer_sha
            .entry(e.trainer_sha256.clone())
            .or_default()
            .push(e.name.clone());
    }
    let dataset_spellings = dataset_spellings(experiments);

    for &i in &resolved {
        let e = &experiments[i];
        let mut new = Vec::new();
        // Messages name the whole set, the same text for every member, so a report can show
        // the set once.
        let twins = &by_sha[&e.config_sha256];
        if twins.len() > 1 {
            new.push(warning(
                e,
                "duplicate_config",
                None,
                format!(
                    "{} have the same training config: one run serves them all; podq runs it once and links the others to it",
                    twins.join(", ")
                ),
            ));
        }
        let trained_alike = &by_trainer_sha[&e.trainer_sha256];
        if trained_alike.len() > twins.len() {
            new.push(warning(
                e,
                "same_trained_run",
                None,
                format!(
                    "{} differ only in keys the trainer does not read: today's trainer trains the same run for all of them",
                    trained_alike.join(", ")
                ),
            ));
        }
        for path in data_paths(&e.config) {
            let canonical = canonical_dataset(&path);
            if let Some(spellings) = dataset_spellings.get(&canonical) {
                if spellings.len() > 1 {
                    let (usual, _) = spellings
                        .iter()
                        .max_by_key(|(_, count)| *count)
                        .expect("non-empty");
                    if *usual != path {
                        new.push(warning(
                            e,
                            "dataset_alias",
                            Some("data_paths"),
                            format!(
                                "reads `{path}`, which names the same data as `{usual}` used by the other experiments: check which one exists"
                            ),
                        ));
                    }
                }
            }
        }
        experiments[i].findings.extend(new);
    }
}

fn warning(e: &Experiment, code: &str, key: Option<&str>, message: String) -> Finding {
    Finding {
        severity: Severity::Warning,
        code: code.into(),
        message,
        file: Some(e.source_file.clone()),
        line: None,
        key: key.map(str::to_owned),
        experiment: Some(e.name.clone()),
    }
}

fn data_paths(config: &Value) -> Vec<String> {
    config
        .get("data_paths")
        .and_then(Value::as_array)
        .map(|paths| {
            paths
                .iter()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default()
}

/// For each dataset (by canonical name), its spellings and how many experiments use each.
fn dataset_spellings(experiments: &[Experiment]) -> BTreeMap<String, BTreeMap<String, usize>> {
    let mut spellings: BTreeMap<String, BTreeMap<String, usize>> = BTreeMap::new();
    for e in experiments {
        for path in data_paths(&e.config) {
            *spellings
                .entry(canonical_dataset(&path))
                .or_default()
                .entry(path)
                .or_default() += 1;
        }
    }
    spellings
}

/// Spells numbers in a dataset path one way: `1k` and `1000` are the same count.
fn canonical_dataset(path: &str) -> String {
    path.split(['-', '_', '/'])
        .map(|word| match word.strip_suffix('k').map(str::parse::<u64>) {
            Some(Ok(thousands)) => (thousands * 1000).to_string(),
            _ => word.to_owned(),
        })
        .collect::<Vec<_>>()
        .join("-")
}

/// A legacy `checkpoint_path` must be `<bucket>/checkpoints/<group>/<experiment>` with a group
/// directory that names the experiment's project.
pub fn legacy_checkpoint_path_problem(
    path: &str,
    experiment: &str,
    group: &str,
    project: Option<&str>,
) -> Option<String> {
    if !path
        .trim_end_matches('/')
        .ends_with(&format!("/{experiment}"))
    {
        return Some(format!(
            "checkpoint_path `{path}` does not end in the experiment's name `{experiment}`: its checkpoints could mix with another run's"
        ));
    }
    let project = project?;
    let project_words = words(project.trim_start_matches("TRM-"));
    let group_words = words(group);
    let same_series = project_words.first() == group_words.first();
    let shares_topic = project_words.iter().skip(1).any(|w| {
        group_words
            .iter()
            .skip(1)
            .any(|g| g.starts_with(w.as_str()) || w.starts_with(g.as_str()))
    });
    (!same_series || !shares_topic).then(|| {
        format!(
            "checkpoint_path puts this run under `{group}`, which does not match its project `{project}`: the checkpoints land outside the experiment's group"
        )
    })
}

/// Lower-case words of `TRM-Exp10-LRSchedule` or `exp10-position-encodings`.
fn words(name: &str) -> Vec<String> {
    let mut words = Vec::new();
    for part in name.split(['-', '_']) {
        let mut current = String::new();
        let chars: Vec<char> = part.chars().collect();
        for (i, &c) in chars.iter().enumerate() {
            let next_is_lower = chars.get(i + 1).is_some_and(|n| n.is_lowercase());
            let boundary = c.is_uppercase()
                && !current.is_empty()
                && (current.chars().last().is_some_and(char::is_lowercase) || next_is_lower);
            if boundary {
                words.push(std::mem::take(&mut current).to_lowercase());
            }
            current.push(c);
        }
        if !current.is_empty() {
            words.push(current.to_lowercase());
        }
    }
    words
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_project_and_directory_names_into_words() {
        assert_eq!(words("Exp10-LRSchedule"), ["exp10", "lr", "schedule"]);
        assert_eq!(
            words("exp10-position-encodings"),
            ["exp10", "position", "encodings"]
        );
        assert_eq!(
            words("Exp02a-LCyclesScaling"),
            ["exp02a", "l", "cycles", "scaling"]
        );
    }

    #[test]
    fn flags_a_checkpoint_directory_of_another_topic() {
        let path = "gs://b/checkpoints/exp10-position-encodings/exp10a";
        assert!(legacy_checkpoint_path_problem(
            path,
            "exp10a",
            "exp10-position-encodings",
            Some("TRM-Exp10-LRSchedule")
        )
        .is_some());
        let path = "gs://b/checkpoints/exp03-layer-vs-recursion/exp03a";
        assert!(legacy_checkpoint_path_problem(
            path,
            "exp03a",
            "exp03-layer-vs-recursion",
            Some("TRM-Exp03-DepthVsRecursion")
        )
        .is_none());
        let path = "gs://b/checkpoints/contrib02-adaptive-halting/contrib02_adaptive";
        assert!(legacy_checkpoint_path_problem(
            path,
            "contrib02_adaptive",
            "contrib02-adaptive-halting",
            Some("TRM-Contrib02-AdaptiveHalt")
        )
        .is_none());
    }

    #[test]
    fn one_thousand_is_one_k() {
        assert_eq!(
            canonical_dataset("gs://b/data/sudoku-extreme-1k-aug-1000"),
            canonical_dataset("gs://b/data/sudoku-extreme-1000-aug-1000")
        );
        assert_ne!(
            canonical_dataset("gs://b/data/sudoku-extreme-1k-aug-100"),
            canonical_dataset("gs://b/data/sudoku-extreme-1k-aug-1000")
        );
    }
}
