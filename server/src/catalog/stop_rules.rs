//! When a run is lost in the researcher's sense and should give its pod back:
//! `stop_when:` rules in `suite.yaml`, a `group.yaml` or an experiment's row (the narrowest
//! wins, as for `checkpoint_interval`), and the suite's `divergence_guard:`. This module
//! parses them; `scheduler/lease/judge.rs` judges a run by them.
//!
//! ```yaml
//! stop_when:
//!   - eval/exact_accuracy below 0.02 at 25%     # a threshold at a point of the run
//!   - eval/loss not improved in 3 evaluations    # no improvement
//! divergence_guard:                              # suite.yaml only; these are the defaults
//!   watch: [train/loss, train/lm_loss]
//!   flag: train/diverged
//!   reports: 3
//! ```

use serde::Deserialize;

/// The metrics TinyRecursiveModels' trainer logs (TPU_FACTS.md: every 10 steps on process 0,
/// and at each evaluation), which a rule may name without a warning.
pub const TRAINER_METRICS: [&str; 13] = [
    "train/accuracy",
    "train/exact_accuracy",
    "train/q_halt_accuracy",
    "train/avg_steps",
    "train/count",
    "train/lm_loss",
    "train/q_halt_loss",
    "train/loss",
    "train/act_steps",
    "train/diverged",
    "eval/loss",
    "eval/accuracy",
    "eval/exact_accuracy",
];

/// One `stop_when` rule.
#[derive(Debug, Clone, PartialEq)]
pub struct StopRule {
    /// As written, for people: what a stopped job says fired.
    pub text: String,
    pub metric: String,
    pub test: Test,
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Test {
    /// `METRIC below|above VALUE at POINT`: judged once, on the first value reported at or
    /// after the point.
    Threshold { below: bool, value: f64, at: Point },
    /// `METRIC not improved in N evaluations`: the last N values are none better than the
    /// best before them ("better" is `podq_api::lower_is_better`).
    NoImprovement { evaluations: u32 },
}

/// Where in the run a threshold is judged.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Point {
    /// A share of the run's total steps (`at 25%`).
    Fraction(f64),
    /// A step (`at step 2000`).
    Step(i64),
}

impl Point {
    /// The step this point is, for a run of `total_steps`; None when the run's length is
    /// unknown and the point is a share of it.
    pub fn step(self, total_steps: Option<i64>) -> Option<i64> {
        match self {
            Point::Step(step) => Some(step),
            Point::Fraction(share) => total_steps.map(|t| (t as f64 * share).ceil() as i64),
        }
    }
}

const FORMS: &str = "`METRIC below|above VALUE at N%`, `METRIC below|above VALUE at step N` \
                     or `METRIC not improved in N evaluations`";

impl StopRule {
    pub fn parse(text: &str) -> Result<StopRule, String> {
        let words: Vec<&str> = text.split_whitespace().collect();
        let malformed = || format!("stop rule `{text}` is not one of {FORMS}");
        let (metric, rest) = words.split_first().ok_or_else(malformed)?;
        if !metric.contains('/') {
            return Err(format!(
                "stop rule `{text}`: `{metric}` is not a metric name (names have a slash, as in \
                 `eval/loss`); the forms are {FORMS}"
            ));
        }
        let test = match rest {
            [direction @ ("below" | "above"), value, "at", point @ ..] => {
                let value: f64 = value
                    .parse()
                    .ok()
                    .filter(|v: &f64| v.is_finite())
                    .ok_or_else(|| format!("stop rule `{text}`: `{value}` is not a number"))?;
                let at = match point {
                    [share] => parse_share(share).ok_or_else(|| {
                        format!("stop rule `{text}`: `{share}` is not a percentage from 0% to 100%")
                    })?,
                    ["step", step] => {
                        Point::Step(step.parse().ok().filter(|s| *s > 0).ok_or_else(|| {
                            format!("stop rule `{text}`: `{step}` is not a positive step")
                        })?)
                    }
                    _ => return Err(malformed()),
                };
                Test::Threshold {
                    below: *direction == "below",
                    value,
                    at,
                }
            }
            ["not", "improved", "in", n, "evaluations" | "evaluation"] => Test::NoImprovement {
                evaluations: n.parse().ok().filter(|n| *n > 0).ok_or_else(|| {
                    format!("stop rule `{text}`: `{n}` is not a positive number of evaluations")
                })?,
            },
            _ => return Err(malformed()),
        };
        Ok(StopRule {
            text: words.join(" "),
            metric: (*metric).to_owned(),
            test,
        })
    }
}

fn parse_share(text: &str) -> Option<Point> {
    let percent: f64 = text.strip_suffix('%')?.parse().ok()?;
    (0.0..=100.0)
        .contains(&percent)
        .then_some(Point::Fraction(percent / 100.0))
}

/// A `stop_when:` value: one rule, a list of them, or `none` (an empty list) to lift the
/// wider level's rules. Every rule is parsed; the errors come back together.
pub fn parse_rules(value: &serde_yaml::Value) -> Result<Vec<StopRule>, Vec<String>> {
    let texts: Vec<String> = match value {
        serde_yaml::Value::String(s) if s.trim() == "none" => Vec::new(),
        serde_yaml::Value::String(s) => vec![s.clone()],
        serde_yaml::Value::Sequence(items) => items
            .iter()
            .map(|item| match item {
                serde_yaml::Value::String(s) => Ok(s.clone()),
                other => Err(format!(
                    "a stop rule is a string such as `eval/loss not improved in 3 evaluations`, \
                     not {}",
                    serde_yaml::to_string(other).unwrap_or_default().trim()
                )),
            })
            .collect::<Result<_, _>>()
            .map_err(|e| vec![e])?,
        serde_yaml::Value::Null => Vec::new(),
        other => {
            return Err(vec![format!(
                "`stop_when` is a rule, a list of rules or `none`, not {}",
                serde_yaml::to_string(other).unwrap_or_default().trim()
            )])
        }
    };
    let (rules, errors): (Vec<_>, Vec<_>) = texts
        .iter()
        .map(|t| StopRule::parse(t))
        .partition(Result::is_ok);
    if errors.is_empty() {
        Ok(rules.into_iter().map(Result::unwrap).collect())
    } else {
        Err(errors.into_iter().map(Result::unwrap_err).collect())
    }
}

/// Stops a run whose watched metrics are non-finite, or whose flag is set (non-zero), in
/// `reports` consecutive metric reports.
#[derive(Debug, Clone, PartialEq)]
pub struct DivergenceGuard {
    pub watch: Vec<String>,
    /// A metric the trainer sets non-zero once it knows it diverged (TRM's `train/diverged`).
    pub flag: Option<String>,
    pub reports: u32,
    /// False with `divergence_guard: off`.
    pub enabled: bool,
}

impl Default for DivergenceGuard {
    fn default() -> Self {
        DivergenceGuard {
            watch: vec!["train/loss".into(), "train/lm_loss".into()],
            flag: Some("train/diverged".into()),
            reports: 3,
            enabled: true,
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct GuardFile {
    #[serde(default)]
    watch: Option<Vec<String>>,
    /// Absent: the default flag; `null`: no flag.
    #[serde(default, deserialize_with = "present")]
    flag: Option<Option<String>>,
    #[serde(default)]
    reports: Option<u32>,
}

/// A field that is present, even as `null` (serde reads a `null` as an absent `Option`).
fn present<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Option<String>>, D::Error> {
    Option::<String>::deserialize(d).map(Some)
}

impl DivergenceGuard {
    /// `off`, or a mapping of `watch`, `flag` and `reports` over the defaults.
    pub fn parse(value: &serde_yaml::Value) -> Result<DivergenceGuard, String> {
        let defaults = DivergenceGuard::default();
        match value {
            serde_yaml::Value::Bool(false) => Ok(DivergenceGuard {
                enabled: false,
                ..defaults
            }),
            serde_yaml::Value::String(s) if s == "off" => Ok(DivergenceGuard {
                enabled: false,
                ..defaults
            }),
            serde_yaml::Value::Mapping(_) => {
                let file: GuardFile = serde_yaml::from_value(value.clone())
                    .map_err(|e| format!("divergence_guard: {e}"))?;
                let guard = DivergenceGuard {
                    watch: file.watch.unwrap_or(defaults.watch),
                    flag: file.flag.unwrap_or(defaults.flag),
                    reports: file.reports.unwrap_or(defaults.reports),
                    enabled: true,
                };
                if guard.reports == 0 {
                    return Err("divergence_guard: `reports` must be 1 or more".into());
                }
                if guard.watch.is_empty() && guard.flag.is_none() {
                    return Err(
                        "divergence_guard watches nothing: name metrics in `watch` or a `flag`, \
                         or write `divergence_guard: off`"
                            .into(),
                    );
                }
                Ok(guard)
            }
            other => Err(format!(
                "`divergence_guard` is `off` or a mapping of watch, flag and reports, not {}",
                serde_yaml::to_string(other).unwrap_or_default().trim()
            )),
        }
    }

    /// What a stopped job says fired: "divergence guard: train/loss or train/lm_loss
    /// non-finite, or train/diverged set, for 3 reports in a row".
    pub fn describe(&self) -> String {
        let mut parts = Vec::new();
        if !self.watch.is_empty() {
            parts.push(format!("{} non-finite", self.watch.join(" or ")));
        }
        if let Some(flag) = &self.flag {
            parts.push(format!("{flag} set"));
        }
        format!(
            "divergence guard: {}, for {} reports in a row",
            parts.join(", or "),
            self.reports
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn yaml(text: &str) -> serde_yaml::Value {
        serde_yaml::from_str(text).unwrap()
    }

    #[test]
    fn the_two_forms_parse() {
        let rule = StopRule::parse("eval/exact_accuracy  below 0.02 at 25%").unwrap();
        assert_eq!(rule.text, "eval/exact_accuracy below 0.02 at 25%");
        assert_eq!(
            rule.test,
            Test::Threshold {
                below: true,
                value: 0.02,
                at: Point::Fraction(0.25)
            }
        );
        assert_eq!(Point::Fraction(0.25).step(Some(8138)), Some(2035));
        assert_eq!(Point::Fraction(0.25).step(None), None);
        let rule = StopRule::parse("train/loss above 10 at step 500").unwrap();
        assert!(matches!(
            rule.test,
            Test::Threshold {
                below: false,
                at: Point::Step(500),
                ..
            }
        ));
        let rule = StopRule::parse("eval/loss not improved in 3 evaluations").unwrap();
        assert_eq!(rule.test, Test::NoImprovement { evaluations: 3 });
    }

    #[test]
    fn malformed_rules_say_what_is_wrong() {
        for (bad, says) in [
            ("eval/loss below low at 25%", "is not a number"),
            ("eval/loss below 0.1 at 125%", "percentage"),
            ("eval/loss below 0.1 at step -3", "positive step"),
            ("eval/loss not improved in 0 evaluations", "positive number"),
            ("eval/loss stalls", "is not one of"),
            ("loss below 1 at 10%", "not a metric name"),
            ("", "is not one of"),
        ] {
            let error = StopRule::parse(bad).unwrap_err();
            assert!(error.contains(says), "{bad}: {error}");
        }
    }

    #[test]
    fn a_value_is_a_rule_a_list_or_none_and_every_error_is_kept() {
        assert_eq!(
            parse_rules(&yaml("eval/loss not improved in 3 evaluations"))
                .unwrap()
                .len(),
            1
        );
        assert_eq!(parse_rules(&yaml("none")).unwrap(), vec![]);
        assert_eq!(parse_rules(&yaml("[]")).unwrap(), vec![]);
        let errors = parse_rules(&yaml("[eval/loss wobbles, eval/x below y at 1%]")).unwrap_err();
        assert_eq!(errors.len(), 2);
        assert!(parse_rules(&yaml("3")).is_err());
        assert!(parse_rules(&yaml("[3]")).is_err());
    }

    #[test]
    fn the_guard_defaults_and_may_be_changed_or_turned_off() {
        assert!(DivergenceGuard::parse(&yaml("off"))
            .map(|g| !g.enabled)
            .unwrap());
        let guard = DivergenceGuard::parse(&yaml("{watch: [train/loss], reports: 5}")).unwrap();
        assert_eq!(guard.watch, vec!["train/loss".to_owned()]);
        assert_eq!(guard.flag.as_deref(), Some("train/diverged"));
        assert_eq!(guard.reports, 5);
        let no_flag = DivergenceGuard::parse(&yaml("{flag: null}")).unwrap();
        assert_eq!(no_flag.flag, None);
        assert!(DivergenceGuard::parse(&yaml("{reports: 0}")).is_err());
        assert!(DivergenceGuard::parse(&yaml("{watch: [], flag: null}")).is_err());
        assert!(DivergenceGuard::parse(&yaml("{wach: [a/b]}")).is_err());
        assert!(DivergenceGuard::parse(&yaml("sometimes")).is_err());
        assert_eq!(
            DivergenceGuard::default().describe(),
            "divergence guard: train/loss or train/lm_loss non-finite, or train/diverged set, \
             for 3 reports in a row"
        );
    }
}
