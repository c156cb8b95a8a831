//! Findings that need the whole catalog (duplicate runs, runs that differ only in keys the
//! trainer ignores, dataset paths that name the same data twice), and the grouping of
//! findings by root cause that `podq validate` and `POST /experiments/validate` report.

use std::collections::BTreeMap;

use podq_api::{Finding, FindingGroup, Place, Severity};
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
        fix: None,
    }
}

/// How many places a group names before "… N more".
const PLACES_SHOWN: usize = 3;

/// Groups findings by root cause: the same severity, code and fix, or, for findings without a
/// fix, the same message. Each group is reported once, with its count, its fix and its first
/// places. Errors come first; otherwise groups keep the order of their first finding.
pub fn summarize<'a>(findings: impl IntoIterator<Item = &'a Finding>) -> Vec<FindingGroup> {
    let mut groups: Vec<Vec<&Finding>> = Vec::new();
    let mut index: BTreeMap<(Severity, &str, bool, &str), usize> = BTreeMap::new();
    for f in findings {
        let cause = match &f.fix {
            Some(fix) => (f.severity, f.code.as_str(), true, fix.as_str()),
            None => (f.severity, f.code.as_str(), false, f.message.as_str()),
        };
        match index.get(&cause) {
            Some(&i) => groups[i].push(f),
            None => {
                index.insert(cause, groups.len());
                groups.push(vec![f]);
            }
        }
    }
    groups.sort_by_key(|members| std::cmp::Reverse(members[0].severity));
    groups.iter().map(|members| group_of(members)).collect()
}

fn group_of(members: &[&Finding]) -> FindingGroup {
    let first = members[0];
    let mut experiments: Vec<String> = Vec::new();
    let mut places: Vec<Place> = Vec::new();
    for f in members {
        if let Some(e) = &f.experiment {
            if !experiments.contains(e) {
                experiments.push(e.clone());
            }
        }
        if let Some(file) = &f.file {
            let place = Place {
                file: file.clone(),
                line: f.line,
            };
            if !places.contains(&place) {
                places.push(place);
            }
        }
    }
    let summary = headline(members, experiments.len());
    let mut text = format!(
        "{}: ",
        match first.severity {
            Severity::Error => "error",
            Severity::Warning => "warning",
        }
    );
    if places.len() == 1 {
        text.push_str(&place_text(&places[0]));
        text.push_str(": ");
    }
    text.push_str(&summary);
    if let Some(fix) = &first.fix {
        text.push_str(": ");
        text.push_str(fix);
    }
    if places.len() > 1 {
        let shown: Vec<String> = places.iter().take(PLACES_SHOWN).map(place_text).collect();
        if places.len() <= PLACES_SHOWN {
            text.push_str(&format!(" (at {})", shown.join(", ")));
        } else {
            text.push_str(&format!(
                " (first: {}, … {} more)",
                shown.join(", "),
                places.len() - PLACES_SHOWN
            ));
        }
    }
    text.push_str(&format!(" [{}]", first.code));
    places.truncate(PLACES_SHOWN);
    FindingGroup {
        severity: first.severity,
        code: first.code.clone(),
        summary,
        fix: first.fix.clone(),
        count: members.len(),
        experiments,
        places,
        text,
    }
}

fn place_text(place: &Place) -> String {
    match place.line {
        Some(line) => format!("{}:{line}", place.file),
        None => place.file.clone(),
    }
}

/// What a group is about, counted. A group of one keeps its message. A group whose code says
/// what its members share is counted in experiments ("67 experiments have no `arch` config
/// group"); any other keeps its message when all its members say the same (the message of a
/// duplicate set names the whole set).
fn headline(members: &[&Finding], experiments: usize) -> String {
    let first = members[0];
    if members.len() == 1 {
        return first.message.clone();
    }
    let n = experiments.max(1);
    let (who, have, sets) = if n == 1 {
        ("1 experiment".to_owned(), "has", "sets")
    } else {
        (format!("{n} experiments"), "have", "set")
    };
    let key = first.key.as_deref().unwrap_or("?");
    match first.code.as_str() {
        "missing_arch" => format!("{who} {have} no `arch` config group"),
        "unknown_key" => format!("{who} {sets} `{key}`, which is not a key the trainer reads"),
        "unread_keys" => format!(
            "{who} {sets} keys today's trainer does not read, kept in the config and its hash but changing nothing: {}",
            key_tally(members, n)
        ),
        _ if members.iter().all(|f| f.message == first.message) => first.message.clone(),
        _ => format!(
            "{} (and {} more like it)",
            first.message,
            members.len() - 1
        ),
    }
}

/// Each key once, the most widely set first, with how many experiments set it when not all
/// `n` do: "`use_tpu`, `num_workers`, `use_curriculum_recursion` (2)".
fn key_tally(members: &[&Finding], n: usize) -> String {
    let mut tally: Vec<(&str, Vec<&str>)> = Vec::new();
    for f in members {
        let key = f.key.as_deref().unwrap_or("?");
        let who = f.experiment.as_deref().unwrap_or("");
        match tally.iter_mut().find(|(k, _)| *k == key) {
            Some((_, whom)) if !whom.contains(&who) => whom.push(who),
            Some(_) => {}
            None => tally.push((key, vec![who])),
        }
    }
    tally.sort_by_key(|(_, whom)| std::cmp::Reverse(whom.len()));
    tally
        .iter()
        .map(|(key, whom)| {
            if whom.len() >= n {
                format!("`{key}`")
            } else {
                format!("`{key}` ({})", whom.len())
            }
        })
        .collect::<Vec<_>>()
        .join(", ")
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

    fn finding(code: &str, experiment: &str, line: u32, fix: Option<&str>) -> Finding {
        Finding {
            severity: Severity::Error,
            code: code.into(),
            message: format!("{experiment} has no arch"),
            file: Some(format!("experiments/{experiment}.yaml")),
            line: Some(line),
            key: Some("arch".into()),
            experiment: Some(experiment.into()),
            fix: fix.map(str::to_owned),
        }
    }

    #[test]
    fn one_root_cause_is_one_group_with_its_count_fix_and_first_places() {
        let fix = "rename `arch_config/` to `arch/` and the defaults key `arch_config` to `arch`";
        let mut findings: Vec<Finding> = (0..67)
            .map(|i| finding("missing_arch", &format!("exp{i:02}"), 2, Some(fix)))
            .collect();
        findings.push(Finding {
            severity: Severity::Warning,
            ..finding("dataset_alias", "exp04", 7, None)
        });
        let groups = summarize(&findings);
        assert_eq!(groups.len(), 2, "{groups:#?}");
        let arch = &groups[0];
        assert_eq!(arch.count, 67);
        assert_eq!(arch.experiments.len(), 67);
        assert_eq!(arch.places.len(), 3);
        assert_eq!(
            arch.text,
            format!(
                "error: 67 experiments have no `arch` config group: {fix} (first: experiments/exp00.yaml:2, experiments/exp01.yaml:2, experiments/exp02.yaml:2, … 64 more) [missing_arch]"
            )
        );
        assert_eq!(
            groups[1].text,
            "warning: experiments/exp04.yaml:7: exp04 has no arch [dataset_alias]"
        );
    }

    #[test]
    fn findings_without_a_fix_group_only_when_they_say_the_same() {
        let same = [
            finding("duplicate_config", "a", 1, None),
            Finding {
                message: "a has no arch".into(),
                ..finding("duplicate_config", "b", 1, None)
            },
            finding("invalid_value", "c", 4, None),
            finding("invalid_value", "d", 4, None),
        ];
        let groups = summarize(&same);
        assert_eq!(
            groups.iter().map(|g| g.count).collect::<Vec<_>>(),
            [2, 1, 1]
        );
        assert!(groups[0].text.ends_with(
            "a has no arch (at experiments/a.yaml:1, experiments/b.yaml:1) [duplicate_config]"
        ));
    }

    #[test]
    fn errors_come_first() {
        let findings = [
            Finding {
                severity: Severity::Warning,
                ..finding("unread_keys", "a", 3, Some("none"))
            },
            finding("unknown_key", "a", 4, Some("did you mean `lr`?")),
        ];
        let groups = summarize(&findings);
        assert_eq!(groups[0].severity, Severity::Error);
        assert_eq!(groups[1].severity, Severity::Warning);
    }

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
