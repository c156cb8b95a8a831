//! Priority classes: named bands of the queue, each naming the classes it may
//! evict from a pod, after Kueue's `WorkloadPriorityClass` with preemption and Slurm's QOS
//! with `PreemptMode=REQUEUE`. `priority_classes:` in `suite.yaml`, in queue order (the
//! first runs first):
//!
//! ```yaml
//! priority_classes:
//!   - name: urgent
//!     may_evict: [normal, sweep]
//!     allowed: [admin]          # roles or people who may put a job here
//!   - name: normal
//!     default: true
//!     may_evict: [sweep]
//!   - name: sweep
//!     min_runtime: 30m          # an attempt runs this long before it may be evicted
//!     max_evictions_per_day: 3  # per job
//!     evictable: true           # false: never evicted
//! ```
//!
//! A suite without the key gets exactly this set. `allowed:` names the roles (`submitter`,
//! `admin`) or people who may put a job in a class, at submit or on a change; an admin
//! always may. Without it, a class that may evict anything is for admins, except the
//! suite's default class, which every submitter uses; any other class is for everyone who
//! may submit.

use std::time::Duration;

use serde::Deserialize;

/// An attempt runs at least this long before it may be evicted, unless its class says.
pub const DEFAULT_MIN_RUNTIME: Duration = Duration::from_secs(30 * 60);
/// Evictions a job may suffer in 24 hours, unless its class says.
pub const DEFAULT_MAX_EVICTIONS_PER_DAY: u32 = 3;

#[derive(Debug, Clone, PartialEq)]
pub struct PriorityClass {
    pub name: String,
    /// Classes whose running jobs this class's queued jobs may evict.
    pub may_evict: Vec<String>,
    /// False: a running job of this class is never evicted.
    pub evictable: bool,
    pub min_runtime: Duration,
    pub max_evictions_per_day: u32,
    /// The roles and people who may put a job in it (an admin always may); None: everyone
    /// who may submit.
    pub allowed: Option<Vec<String>>,
}

impl PriorityClass {
    /// Whether `caller` may put a job in this class.
    pub fn allows(&self, caller: &crate::team::Caller) -> bool {
        caller.role == crate::team::Role::Admin
            || self.allowed.as_ref().is_none_or(|allowed| {
                allowed
                    .iter()
                    .any(|who| *who == caller.role.as_str() || *who == caller.name)
            })
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct PriorityClasses {
    /// In queue order: a class's rank is its place here.
    classes: Vec<PriorityClass>,
    default: usize,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Entry {
    name: String,
    #[serde(default)]
    default: bool,
    #[serde(default)]
    may_evict: Vec<String>,
    #[serde(default = "yes")]
    evictable: bool,
    #[serde(default)]
    min_runtime: Option<String>,
    #[serde(default)]
    max_evictions_per_day: Option<u32>,
    #[serde(default)]
    allowed: Option<Vec<String>>,
}

fn yes() -> bool {
    true
}

impl Default for PriorityClasses {
    /// The shipped set: `urgent` (for admins) may evict `normal` and `sweep`, `normal` (the
    /// default) may evict `sweep`.
    fn default() -> Self {
        let class = |name: &str, may_evict: &[&str]| PriorityClass {
            name: name.to_owned(),
            may_evict: may_evict.iter().map(|s| s.to_string()).collect(),
            evictable: true,
            min_runtime: DEFAULT_MIN_RUNTIME,
            max_evictions_per_day: DEFAULT_MAX_EVICTIONS_PER_DAY,
            allowed: None,
        };
        PriorityClasses {
            classes: vec![
                PriorityClass {
                    allowed: Some(vec!["admin".to_owned()]),
                    ..class("urgent", &["normal", "sweep"])
                },
                class("normal", &["sweep"]),
                class("sweep", &[]),
            ],
            default: 1,
        }
    }
}

impl PriorityClasses {
    /// The classes of a `priority_classes:` value, or what is wrong with it.
    pub fn parse(value: &serde_yaml::Value) -> Result<PriorityClasses, String> {
        let entries: Vec<Entry> = serde_yaml::from_value(value.clone()).map_err(|e| {
            format!("priority_classes is a list of classes (name, default, may_evict, evictable, min_runtime, max_evictions_per_day, allowed): {e}")
        })?;
        if entries.is_empty() {
            return Err("priority_classes lists no class".to_owned());
        }
        let names: Vec<&str> = entries.iter().map(|e| e.name.as_str()).collect();
        let mut classes = Vec::new();
        for (i, entry) in entries.iter().enumerate() {
            if names[..i].contains(&entry.name.as_str()) {
                return Err(format!("priority class `{}` is listed twice", entry.name));
            }
            for victim in &entry.may_evict {
                let Some(rank) = names.iter().position(|n| n == victim) else {
                    return Err(format!(
                        "priority class `{}` may evict `{victim}`, which is not a class{}",
                        entry.name,
                        crate::names::phrase(&crate::names::did_you_mean(victim, names.clone()))
                    ));
                };
                // Only down the list: a class that evicts itself, or two that evict each
                // other, would trade a pod back and forth, each eviction paying a restore.
                if rank <= i {
                    return Err(format!(
                        "priority class `{}` may evict `{victim}`, which is not below it: a \
                         class may evict only classes listed after it",
                        entry.name
                    ));
                }
            }
            let min_runtime = match &entry.min_runtime {
                Some(text) => parse_duration(text)
                    .map_err(|e| format!("priority class `{}`: min_runtime {e}", entry.name))?,
                None => DEFAULT_MIN_RUNTIME,
            };
            classes.push(PriorityClass {
                name: entry.name.clone(),
                may_evict: entry.may_evict.clone(),
                evictable: entry.evictable,
                min_runtime,
                max_evictions_per_day: entry
                    .max_evictions_per_day
                    .unwrap_or(DEFAULT_MAX_EVICTIONS_PER_DAY),
                allowed: entry.allowed.clone(),
            });
        }
        let defaults: Vec<usize> = (0..entries.len()).filter(|&i| entries[i].default).collect();
        let default = match defaults.as_slice() {
            [] => names.iter().position(|n| *n == "normal").ok_or(
                "priority_classes: mark one class `default: true` (no class is named `normal`)",
            )?,
            [one] => *one,
            _ => {
                return Err(
                    "priority_classes: more than one class is marked `default: true`".into(),
                )
            }
        };
        for (i, class) in classes.iter_mut().enumerate() {
            if class.allowed.is_none() && i != default && !class.may_evict.is_empty() {
                class.allowed = Some(vec!["admin".to_owned()]);
            }
        }
        Ok(PriorityClasses { classes, default })
    }

    pub fn all(&self) -> &[PriorityClass] {
        &self.classes
    }

    pub fn default_class(&self) -> &PriorityClass {
        &self.classes[self.default]
    }

    /// A class and its rank (its place in the queue order) by name.
    pub fn get(&self, name: &str) -> Option<(i64, &PriorityClass)> {
        self.classes
            .iter()
            .position(|c| c.name == name)
            .map(|i| (i as i64, &self.classes[i]))
    }

    /// The class `name` names (the default when None), with its rank; an unknown name is
    /// an error naming the classes there are, with the closest.
    pub fn resolve(&self, name: Option<&str>) -> Result<(i64, &PriorityClass), String> {
        let name = name.unwrap_or(&self.classes[self.default].name);
        self.get(name).ok_or_else(|| {
            let names = self.classes.iter().map(|c| c.name.as_str());
            let suggestions = crate::names::did_you_mean(name, names.clone());
            format!(
                "no priority class `{name}`{}; the suite's classes are {}",
                crate::names::phrase(&suggestions),
                names.collect::<Vec<_>>().join(", ")
            )
        })
    }
}

/// `90s`, `30m`, `2h`, or a number of seconds.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let (number, unit) = match text.char_indices().find(|(_, c)| c.is_ascii_alphabetic()) {
        Some((i, _)) => text.split_at(i),
        None => (text, "s"),
    };
    let scale = match unit {
        "s" => 1.0,
        "m" => 60.0,
        "h" => 3600.0,
        "d" => 86_400.0,
        _ => {
            return Err(format!(
                "`{text}` is not a duration: write e.g. 90s, 30m or 2h"
            ))
        }
    };
    match number.trim().parse::<f64>() {
        Ok(n) if n.is_finite() && n >= 0.0 && n * scale <= 365.0 * 86_400.0 => {
            Ok(Duration::from_secs_f64(n * scale))
        }
        _ => Err(format!(
            "`{text}` is not a duration: write e.g. 90s, 30m or 2h"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(yaml: &str) -> Result<PriorityClasses, String> {
        PriorityClasses::parse(&serde_yaml::from_str(yaml).unwrap())
    }

    #[test]
    fn the_shipped_set_ranks_urgent_first_and_defaults_to_normal() {
        let classes = PriorityClasses::default();
        assert_eq!(classes.default_class().name, "normal");
        assert_eq!(classes.resolve(None).unwrap().0, 1);
        assert_eq!(
            classes.get("urgent").unwrap().1.may_evict,
            ["normal", "sweep"]
        );
        let err = classes.resolve(Some("urgnet")).unwrap_err();
        assert!(err.contains("did you mean `urgent`?"), "{err}");
    }

    #[test]
    fn a_class_that_may_evict_is_for_admins_unless_it_says_or_is_the_default() {
        use crate::team::{Caller, Role};
        let person = |name: &str, role| Caller {
            name: name.to_owned(),
            role,
            pods: None,
        };
        let classes = parse(
            "- name: top\n  may_evict: [mid, low]\n- name: lab\n  may_evict: [low]\n  allowed: [ada, viewer]\n- name: mid\n  default: true\n  may_evict: [low]\n- name: low\n",
        )
        .unwrap();
        let allows = |class: &str, caller: &Caller| classes.get(class).unwrap().1.allows(caller);
        let (sub, ada, admin) = (
            person("bob", Role::Submitter),
            person("ada", Role::Submitter),
            person("root", Role::Admin),
        );
        assert!(!allows("top", &sub) && allows("top", &admin));
        assert!(allows("lab", &ada) && !allows("lab", &sub) && allows("lab", &admin));
        assert!(allows("mid", &sub) && allows("low", &sub));
        let shipped = PriorityClasses::default();
        assert!(!shipped.get("urgent").unwrap().1.allows(&sub));
        assert!(shipped.get("normal").unwrap().1.allows(&sub));
    }

    #[test]
    fn a_suite_may_declare_its_own_classes() {
        let classes = parse(
            "- name: hot\n  may_evict: [cold]\n- name: cold\n  default: true\n  evictable: false\n  min_runtime: 2h\n  max_evictions_per_day: 1\n",
        )
        .unwrap();
        let (rank, cold) = classes.resolve(None).unwrap();
        assert_eq!(rank, 1);
        assert!(!cold.evictable);
        assert_eq!(cold.min_runtime, Duration::from_secs(7200));
        assert_eq!(cold.max_evictions_per_day, 1);
    }

    #[test]
    fn bad_classes_are_named() {
        for (yaml, said) in [
            ("- name: a\n  may_evict: [b]\n", "not a class"),
            ("- name: a\n- name: a\n", "listed twice"),
            ("- name: a\n", "mark one class"),
            ("- name: normal\n  min_runtime: soon\n", "not a duration"),
            ("[]", "no class"),
            (
                "- name: a\n  default: true\n- name: b\n  default: true\n",
                "more than one",
            ),
        ] {
            let err = parse(yaml).unwrap_err();
            assert!(err.contains(said), "{yaml}: {err}");
        }
    }

    #[test]
    fn durations_take_a_unit() {
        assert_eq!(parse_duration("90s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("30m"), Ok(Duration::from_secs(1800)));
        assert_eq!(parse_duration("1.5h"), Ok(Duration::from_secs(5400)));
        assert_eq!(parse_duration("0"), Ok(Duration::ZERO));
        assert!(parse_duration("-1m").is_err());
        assert!(parse_duration("5 parsecs").is_err());
    }
}
