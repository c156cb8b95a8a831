//! `rungs:` in `suite.yaml` (every group's default) or a `group.yaml` (the group's own, or
//! `rungs: none` to lift the suite's): where in its steps each run of a group is compared with
//! its siblings, and what share of them goes on past each rung. This module parses and checks
//! the value; `scheduler/rungs.rs` decides, purely, which runs are promoted, paused or pruned.
//!
//! ```yaml
//! rungs:
//!   metric: eval/exact_accuracy   # "better" as stop rules judge it (loss/error/perplexity: lower)
//!   at: [25%, 50%]                # each rung's place in the run's steps
//!   keep: 1/2                     # the share promoted past each rung (1/2, 0.5, 50%), or `auto`
//! ```

use super::stop_rules::TRAINER_METRICS;

/// A group's rungs, resolved.
#[derive(Debug, Clone, PartialEq)]
pub struct Rungs {
    /// The metric runs are ranked by.
    pub metric: String,
    /// Whether a lower value of `metric` is better (`podq_api::lower_is_better`, as stop
    /// rules judge it: loss, error, perplexity).
    pub lower_is_better: bool,
    /// Each rung's share of the run's total steps, strictly increasing within (0, 1).
    pub at: Vec<f64>,
    pub keep: Keep,
}

/// The share of a rung's runs promoted past it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Keep {
    /// A share within (0, 1).
    Share(f64),
    /// As much as the grant allows: the plan chooses the largest share for which the suite
    /// still finishes before the deadline.
    Auto,
}

impl Keep {
    /// The share, or None for `auto` (the plan's to choose).
    pub fn share(self) -> Option<f64> {
        match self {
            Keep::Share(share) => Some(share),
            Keep::Auto => None,
        }
    }
}

impl Rungs {
    /// The step each rung is judged at, for a run of `total_steps`.
    pub fn steps(&self, total_steps: i64) -> Vec<i64> {
        self.at
            .iter()
            .map(|&at| rung_step(at, total_steps))
            .collect()
    }

    /// "eval/exact_accuracy at 25%, 50%, keep 1/2": the rungs as people read them.
    pub fn describe(&self) -> String {
        let at: Vec<String> = self.at.iter().map(|a| percent(*a)).collect();
        let keep = match self.keep {
            Keep::Share(share) => percent(share),
            Keep::Auto => "auto".into(),
        };
        format!("{} at {}, keep {keep}", self.metric, at.join(", "))
    }
}

/// The step a rung at `at` (a share of the run) is judged at: the first step at or past that
/// share of `total_steps`, as a stop rule's `at N%` (`stop_rules::Point::step`), and at least 1.
pub fn rung_step(at: f64, total_steps: i64) -> i64 {
    ((total_steps as f64 * at).ceil() as i64).max(1)
}

fn percent(share: f64) -> String {
    let p = share * 100.0;
    if (p - p.round()).abs() < 1e-9 {
        format!("{}%", p.round() as i64)
    } else {
        format!("{}%", (p * 1000.0).round() / 1000.0)
    }
}

/// What is wrong with a `rungs:` value, and under which of its keys (for the line).
#[derive(Debug, Clone, PartialEq)]
pub struct Problem {
    /// `metric`, `at` or `keep`; None for the value as a whole.
    pub key: Option<&'static str>,
    pub message: String,
    pub fix: Option<String>,
}

impl Problem {
    fn at(key: Option<&'static str>, message: String) -> Problem {
        Problem {
            key,
            message,
            fix: None,
        }
    }
}

const KEYS: [&str; 3] = ["metric", "at", "keep"];

const FORM: &str = "write `rungs: {metric: eval/exact_accuracy, at: [25%, 50%], keep: 1/2}` \
                    (keep may be `auto`), or `rungs: none`";

/// A `rungs:` value: a mapping of `metric`, `at` and `keep`, or `none` (Ok(None)) for no
/// rungs. Every problem is found; they come back together. The metric's name is checked
/// apart ([`check_metric`]), against what the group watches.
pub fn parse(value: &serde_yaml::Value) -> Result<Option<Rungs>, Vec<Problem>> {
    use serde_yaml::Value;
    let map = match value {
        Value::Null => return Ok(None),
        Value::String(s) if s.trim() == "none" => return Ok(None),
        Value::Mapping(map) => map,
        other => {
            return Err(vec![Problem {
                fix: Some(FORM.into()),
                ..Problem::at(
                    None,
                    format!(
                        "`rungs` is a mapping of metric, at and keep, or `none`, not {}",
                        show(other)
                    ),
                )
            }])
        }
    };
    let mut problems = Vec::new();
    for key in map.keys() {
        let name = key.as_str().unwrap_or_default();
        if !KEYS.contains(&name) {
            let guess = crate::names::closest(name, KEYS);
            problems.push(Problem {
                fix: guess.map(|g| crate::names::meant(&format!("rungs.{g}"))),
                ..Problem::at(
                    None,
                    format!(
                        "`rungs.{}` is not a key of rungs (metric, at, keep)",
                        if name.is_empty() {
                            show(key)
                        } else {
                            name.into()
                        }
                    ),
                )
            });
        }
    }
    let get = |key: &str| map.get(Value::String(key.into()));
    let missing = |key: &str, what: &str| Problem {
        fix: Some(FORM.into()),
        ..Problem::at(None, format!("`rungs` needs `{key}`: {what}"))
    };
    let metric = match get("metric") {
        None => {
            problems.push(missing("metric", "the metric runs are ranked by"));
            None
        }
        Some(Value::String(s)) if !s.trim().is_empty() => Some(s.trim().to_owned()),
        Some(other) => {
            problems.push(Problem::at(
                Some("metric"),
                format!(
                    "`rungs.metric` is a metric's name such as `eval/exact_accuracy`, not {}",
                    show(other)
                ),
            ));
            None
        }
    };
    let at = match get("at") {
        None => {
            problems.push(missing(
                "at",
                "each rung's place in the run's steps, as `[25%, 50%]`",
            ));
            None
        }
        Some(value) => match parse_at(value) {
            Ok(at) => Some(at),
            Err(message) => {
                problems.push(Problem::at(Some("at"), message));
                None
            }
        },
    };
    let keep = match get("keep") {
        None => {
            problems.push(missing(
                "keep",
                "the share promoted past each rung, or `auto`",
            ));
            None
        }
        Some(value) => match parse_keep(value) {
            Ok(keep) => Some(keep),
            Err(message) => {
                problems.push(Problem::at(Some("keep"), message));
                None
            }
        },
    };
    match (metric, at, keep) {
        (Some(metric), Some(at), Some(keep)) if problems.is_empty() => Ok(Some(Rungs {
            lower_is_better: podq_api::lower_is_better(&metric),
            metric,
            at,
            keep,
        })),
        _ => Err(problems),
    }
}

/// `rungs.metric` must be one the trainer (TRM) reports or the group watches: a rung judged on
/// a metric that never reports judges nothing. A near miss is named, as the fix.
pub fn check_metric(metric: &str, watched: &[String]) -> Result<(), Problem> {
    let known: Vec<&str> = TRAINER_METRICS
        .into_iter()
        .chain(watched.iter().map(String::as_str))
        .collect();
    if known.contains(&metric) {
        return Ok(());
    }
    let guesses = crate::names::did_you_mean(metric, known.iter().copied());
    Err(Problem {
        key: Some("metric"),
        // The near miss is the fix, which `podq validate` prints after the message.
        message: format!(
            "`rungs.metric` is `{metric}`, which the trainer is not known to report and the \
             group does not watch (`metrics_to_watch`)"
        ),
        fix: Some(crate::names::question(&guesses).unwrap_or_else(|| {
            "name a metric the trainer reports, or add it to the group's `metrics_to_watch`".into()
        })),
    })
}

/// `[25%, 50%]`, one share alone, or shares written as fractions (`0.25`): strictly
/// increasing, each within (0%, 100%).
fn parse_at(value: &serde_yaml::Value) -> Result<Vec<f64>, String> {
    let items: Vec<&serde_yaml::Value> = match value {
        serde_yaml::Value::Sequence(items) => items.iter().collect(),
        one => vec![one],
    };
    if items.is_empty() {
        return Err("`rungs.at` is empty: give each rung's place, as `[25%, 50%]`".into());
    }
    let mut at = Vec::with_capacity(items.len());
    for item in items {
        let share = share_of(item)
            .filter(|s| *s > 0.0 && *s < 1.0)
            .ok_or_else(|| {
                format!(
                    "`rungs.at`: {} is not a place within the run: write a percentage between 0% \
                 and 100%, both excluded, as `25%`",
                    show(item)
                )
            })?;
        if let Some(&before) = at.last() {
            if share <= before {
                return Err(format!(
                    "`rungs.at` must increase: {} comes after {}",
                    percent(share),
                    percent(before)
                ));
            }
        }
        at.push(share);
    }
    Ok(at)
}

/// `auto`, or a share within (0, 1): `1/2`, `0.5` or `50%`.
fn parse_keep(value: &serde_yaml::Value) -> Result<Keep, String> {
    if value.as_str().map(str::trim) == Some("auto") {
        return Ok(Keep::Auto);
    }
    match share_of(value) {
        Some(share) if share > 0.0 && share < 1.0 => Ok(Keep::Share(share)),
        Some(_) => Err(format!(
            "`rungs.keep` is {}: the share kept must lie between 0 and 1, both excluded (as \
             `1/2`, `0.5` or `50%`), or be `auto`",
            show(value)
        )),
        None => Err(format!(
            "`rungs.keep` is {}, not a share (as `1/2`, `0.5` or `50%`) nor `auto`",
            show(value)
        )),
    }
}

/// A share written `50%`, `1/2` or `0.5`; None when it is none of these.
fn share_of(value: &serde_yaml::Value) -> Option<f64> {
    let share = match value {
        serde_yaml::Value::Number(n) => n.as_f64()?,
        serde_yaml::Value::String(s) => {
            let s = s.trim();
            if let Some(p) = s.strip_suffix('%') {
                p.trim().parse::<f64>().ok()? / 100.0
            } else if let Some((a, b)) = s.split_once('/') {
                let (a, b): (f64, f64) = (a.trim().parse().ok()?, b.trim().parse().ok()?);
                if b == 0.0 {
                    return None;
                }
                a / b
            } else {
                s.parse().ok()?
            }
        }
        _ => return None,
    };
    share.is_finite().then_some(share)
}

fn show(value: &serde_yaml::Value) -> String {
    match value {
        serde_yaml::Value::String(s) => format!("`{s}`"),
        other => format!(
            "`{}`",
            serde_yaml::to_string(other).unwrap_or_default().trim()
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn yaml(text: &str) -> serde_yaml::Value {
        serde_yaml::from_str(text).unwrap()
    }

    fn parsed(text: &str) -> Rungs {
        parse(&yaml(text)).unwrap().unwrap()
    }

    fn problems(text: &str) -> Vec<Problem> {
        parse(&yaml(text)).unwrap_err()
    }

    #[test]
    fn the_issues_example_parses_and_keep_has_three_spellings() {
        let rungs = parsed("{metric: eval/exact_accuracy, at: [25%, 50%], keep: 1/2}");
        assert_eq!(rungs.metric, "eval/exact_accuracy");
        assert!(!rungs.lower_is_better);
        assert_eq!(rungs.at, [0.25, 0.5]);
        assert_eq!(rungs.keep, Keep::Share(0.5));
        assert_eq!(
            rungs.describe(),
            "eval/exact_accuracy at 25%, 50%, keep 50%"
        );
        for keep in ["0.5", "50%", "1/2", "' 1 / 2 '"] {
            let rungs = parsed(&format!("{{metric: eval/loss, at: 25%, keep: {keep}}}"));
            assert_eq!(rungs.keep, Keep::Share(0.5), "{keep}");
            assert!(rungs.lower_is_better, "a loss is better lower");
            assert_eq!(rungs.at, [0.25], "one place alone is a list of one");
        }
        let rungs = parsed("{metric: eval/loss, at: [0.125, 25%], keep: auto}");
        assert_eq!(rungs.keep, Keep::Auto);
        assert_eq!(rungs.at, [0.125, 0.25], "a fraction is a share too");
        assert_eq!(rungs.describe(), "eval/loss at 12.5%, 25%, keep auto");
    }

    #[test]
    fn none_lifts_and_steps_follow_the_stop_rules_point() {
        assert_eq!(parse(&yaml("none")).unwrap(), None);
        assert_eq!(parse(&yaml("null")).unwrap(), None);
        let rungs = parsed("{metric: eval/loss, at: [25%, 50%], keep: 1/4}");
        assert_eq!(rungs.steps(8138), [2035, 4069]);
        assert_eq!(
            rung_step(0.25, 8138),
            super::super::stop_rules::Point::Fraction(0.25)
                .step(Some(8138))
                .unwrap()
        );
        assert_eq!(rung_step(0.01, 10), 1);
    }

    #[test]
    fn at_must_increase_within_the_run() {
        for (at, says) in [
            ("[50%, 25%]", "must increase: 25% comes after 50%"),
            ("[25%, 25%]", "must increase"),
            ("[0%, 50%]", "`0%` is not a place within the run"),
            ("[25%, 100%]", "`100%` is not a place"),
            ("[25%, 120%]", "`120%` is not a place"),
            ("[25, 50]", "`25` is not a place"),
            ("[early]", "`early` is not a place"),
            ("[]", "is empty"),
        ] {
            let found = problems(&format!("{{metric: eval/loss, at: {at}, keep: 1/2}}"));
            assert_eq!(found.len(), 1, "{at}: {found:?}");
            assert_eq!(found[0].key, Some("at"), "{at}");
            assert!(
                found[0].message.contains(says),
                "{at}: {}",
                found[0].message
            );
        }
    }

    #[test]
    fn keep_must_lie_strictly_between_nothing_and_everything() {
        for keep in [
            "0", "1", "100%", "0%", "3/2", "1/0", "-0.5", "half", "[1, 2]",
        ] {
            let found = problems(&format!("{{metric: eval/loss, at: 25%, keep: {keep}}}"));
            assert_eq!(found.len(), 1, "{keep}: {found:?}");
            assert_eq!(found[0].key, Some("keep"), "{keep}");
            assert!(found[0].message.contains("rungs.keep"), "{found:?}");
        }
    }

    #[test]
    fn every_problem_comes_back_and_a_misspelt_key_is_named() {
        let found = problems("{metirc: eval/loss, at: [60%, 30%], keep: 2}");
        let messages: Vec<&str> = found.iter().map(|p| p.message.as_str()).collect();
        assert_eq!(found.len(), 4, "{messages:#?}");
        assert!(found
            .iter()
            .any(|p| p.fix.as_deref() == Some("did you mean `rungs.metric`?")));
        assert!(messages.iter().any(|m| m.contains("needs `metric`")));
        assert!(parse(&yaml("3")).is_err());
        assert!(parse(&yaml("[eval/loss]")).is_err());
    }

    #[test]
    fn an_unknown_metric_names_the_nearest_known_one() {
        let watched = vec!["eval/custom_score".to_owned()];
        assert!(check_metric("eval/exact_accuracy", &[]).is_ok());
        assert!(check_metric("eval/custom_score", &watched).is_ok());
        let problem = check_metric("eval/exact_acuracy", &watched).unwrap_err();
        assert_eq!(problem.key, Some("metric"));
        assert_eq!(
            problem.fix.as_deref(),
            Some("did you mean `eval/exact_accuracy`?")
        );
        assert!(
            problem
                .message
                .contains("`eval/exact_acuracy`, which the trainer is not known"),
            "{}",
            problem.message
        );
        let problem = check_metric("eval/custom_scor", &watched).unwrap_err();
        assert_eq!(
            problem.fix.as_deref(),
            Some("did you mean `eval/custom_score`?")
        );
        let far = check_metric("eval/bleu", &[]).unwrap_err();
        assert!(far.fix.unwrap().contains("metrics_to_watch"));
    }
}
