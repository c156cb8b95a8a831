//! What the worker and JAX put in the environment of every host's trainer.

use std::path::PathBuf;
use std::time::Duration;

use crate::cli::optional_value;
use crate::fatal::Fatal;

const DEFAULT_LOCKFILE: &str = "/tmp/libtpu_lockfile";

/// JAX's multi-host identity (`jax.distributed.initialize`).
#[derive(Debug, Clone, PartialEq)]
pub struct JaxProcess {
    pub count: usize,
    pub index: usize,
    /// `host:port` of process 0; required when `count > 1`.
    pub coordinator: Option<String>,
}

impl JaxProcess {
    pub fn is_leader(&self) -> bool {
        self.index == 0
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Environment {
    pub job_id: Option<String>,
    pub attempt: Option<String>,
    pub lease_id: Option<String>,
    pub host_index: Option<String>,
    pub host_count: Option<String>,
    /// Outer `None`: not set; `Some(None)`: set to nothing (no resume).
    pub checkpoint_dir: Option<Option<String>>,
    pub resume_from: Option<Option<String>>,
    pub config_sha256: Option<String>,
    pub jax: JaxProcess,
    pub lockfile: PathBuf,
    pub fault: Option<String>,
    /// `PODQ_CHECKPOINT_INTERVAL_STEPS`: podq's advised save interval, replacing the
    /// config's checkpoint rule; set only under `checkpoint_interval: auto`.
    pub checkpoint_interval_steps: Option<u64>,
    /// `PODQ_SIM_SAVE_S`: how long each save blocks training; `None` keeps the default.
    pub save_time: Option<Duration>,
    /// Problems that are not worth failing for, to log once the log prefix is set.
    pub warnings: Vec<String>,
}

impl Environment {
    pub fn from_process_env() -> Result<Self, Fatal> {
        Self::from_lookup(|name| std::env::var(name).ok())
    }

    pub fn from_lookup(var: impl Fn(&str) -> Option<String>) -> Result<Self, Fatal> {
        let non_empty = |name: &str| var(name).filter(|v| !v.trim().is_empty());
        let count = parse_index(&var, "JAX_PROCESS_COUNT")?.unwrap_or(1);
        let index = parse_index(&var, "JAX_PROCESS_INDEX")?.unwrap_or(0);
        if count == 0 {
            return Err(Fatal::usage("JAX_PROCESS_COUNT must be at least 1"));
        }
        if index >= count {
            return Err(Fatal::usage(format!(
                "JAX_PROCESS_INDEX {index} is out of range for JAX_PROCESS_COUNT {count}"
            )));
        }
        let coordinator = non_empty("COORDINATOR_ADDRESS");
        if count > 1 && coordinator.is_none() {
            return Err(Fatal::usage(
                "COORDINATOR_ADDRESS (host:port of process 0) is required when JAX_PROCESS_COUNT > 1",
            ));
        }
        let mut warnings = Vec::new();
        let checkpoint_interval_steps = checkpoint_interval(&var).unwrap_or_else(|warning| {
            warnings.push(warning);
            None
        });
        Ok(Self {
            job_id: non_empty("PODQ_JOB_ID"),
            attempt: non_empty("PODQ_ATTEMPT"),
            lease_id: non_empty("PODQ_LEASE_ID"),
            host_index: non_empty("PODQ_HOST_INDEX"),
            host_count: non_empty("PODQ_HOST_COUNT"),
            checkpoint_dir: var("PODQ_CHECKPOINT_DIR").map(|v| optional_value(&v)),
            resume_from: var("PODQ_RESUME_FROM").map(|v| optional_value(&v)),
            config_sha256: non_empty("PODQ_CONFIG_SHA256"),
            jax: JaxProcess {
                count,
                index,
                coordinator,
            },
            lockfile: non_empty("PODQ_SIM_LOCKFILE")
                .map_or_else(|| PathBuf::from(DEFAULT_LOCKFILE), PathBuf::from),
            fault: non_empty("PODQ_SIM_FAULT"),
            checkpoint_interval_steps,
            save_time: parse_seconds(&var, "PODQ_SIM_SAVE_S")?,
            warnings,
        })
    }
}

/// The rule of the Python SDK's `checkpoint_interval(default)`: a bad value is ignored with
/// a warning (the `Err`), because a trainer must not stop saving over a bad environment.
fn checkpoint_interval(var: &impl Fn(&str) -> Option<String>) -> Result<Option<u64>, String> {
    const NAME: &str = "PODQ_CHECKPOINT_INTERVAL_STEPS";
    let Some(raw) = var(NAME).filter(|v| !v.trim().is_empty()) else {
        return Ok(None);
    };
    match raw.trim().parse::<u64>() {
        Ok(steps) if steps >= 1 => Ok(Some(steps)),
        _ => Err(format!(
            "{NAME}={raw:?} is not a whole number of steps of at least 1; \
             keeping the config's checkpoints"
        )),
    }
}

/// A simulation knob in seconds; a bad one is a usage error, as it is a test's mistake.
fn parse_seconds(
    var: &impl Fn(&str) -> Option<String>,
    name: &str,
) -> Result<Option<Duration>, Fatal> {
    match var(name).filter(|v| !v.trim().is_empty()) {
        None => Ok(None),
        Some(raw) => raw
            .trim()
            .parse::<f64>()
            .ok()
            .and_then(|secs| Duration::try_from_secs_f64(secs).ok())
            .map(Some)
            .ok_or_else(|| {
                Fatal::usage(format!(
                    "{name} must be a non-negative number of seconds, got '{raw}'"
                ))
            }),
    }
}

fn parse_index(var: &impl Fn(&str) -> Option<String>, name: &str) -> Result<Option<usize>, Fatal> {
    match var(name).filter(|v| !v.trim().is_empty()) {
        None => Ok(None),
        Some(raw) => raw.trim().parse().map(Some).map_err(|_| {
            Fatal::usage(format!(
                "{name} must be a non-negative integer, got '{raw}'"
            ))
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn env(pairs: &[(&str, &str)]) -> Result<Environment, Fatal> {
        let map: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Environment::from_lookup(|name| map.get(name).cloned())
    }

    #[test]
    fn defaults_to_a_single_process() {
        let e = env(&[]).unwrap();
        assert_eq!(
            e.jax,
            JaxProcess {
                count: 1,
                index: 0,
                coordinator: None
            }
        );
        assert_eq!(e.lockfile, PathBuf::from("/tmp/libtpu_lockfile"));
        assert_eq!(e.resume_from, None);
        assert_eq!(e.checkpoint_interval_steps, None);
        assert_eq!(e.save_time, None);
        assert!(e.warnings.is_empty());
    }

    #[test]
    fn multi_host_needs_a_coordinator() {
        assert!(env(&[("JAX_PROCESS_COUNT", "2"), ("JAX_PROCESS_INDEX", "1")]).is_err());
        let e = env(&[
            ("JAX_PROCESS_COUNT", "2"),
            ("JAX_PROCESS_INDEX", "1"),
            ("COORDINATOR_ADDRESS", "127.0.0.1:1234"),
        ])
        .unwrap();
        assert!(!e.jax.is_leader());
    }

    #[test]
    fn index_must_be_in_range() {
        let err = env(&[
            ("JAX_PROCESS_COUNT", "2"),
            ("JAX_PROCESS_INDEX", "2"),
            ("COORDINATOR_ADDRESS", "127.0.0.1:1234"),
        ])
        .unwrap_err();
        assert_eq!(err.code, 2);
        assert!(env(&[("JAX_PROCESS_INDEX", "x")]).is_err());
    }

    #[test]
    fn empty_resume_means_none_but_is_present() {
        let e = env(&[
            ("PODQ_RESUME_FROM", ""),
            ("PODQ_CHECKPOINT_DIR", "file:///c"),
        ])
        .unwrap();
        assert_eq!(e.resume_from, Some(None));
        assert_eq!(e.checkpoint_dir, Some(Some("file:///c".into())));
    }

    #[test]
    fn advised_checkpoint_interval_is_read() {
        for (raw, steps) in [("457", 457), (" 457\n", 457), ("1", 1)] {
            let e = env(&[("PODQ_CHECKPOINT_INTERVAL_STEPS", raw)]).unwrap();
            assert_eq!(e.checkpoint_interval_steps, Some(steps), "{raw:?}");
            assert!(e.warnings.is_empty(), "{raw:?}");
        }
        let e = env(&[("PODQ_CHECKPOINT_INTERVAL_STEPS", " ")]).unwrap();
        assert_eq!(e.checkpoint_interval_steps, None);
        assert!(e.warnings.is_empty());
    }

    #[test]
    fn a_bad_checkpoint_interval_warns_and_is_ignored() {
        for bad in ["0", "-3", "1.5", "auto"] {
            let e = env(&[("PODQ_CHECKPOINT_INTERVAL_STEPS", bad)]).unwrap();
            assert_eq!(e.checkpoint_interval_steps, None, "{bad}");
            assert_eq!(e.warnings.len(), 1, "{bad}");
            assert!(
                e.warnings[0].contains("PODQ_CHECKPOINT_INTERVAL_STEPS"),
                "{bad}: {}",
                e.warnings[0]
            );
        }
    }

    #[test]
    fn save_time_is_read_in_seconds() {
        let e = env(&[("PODQ_SIM_SAVE_S", "2.5")]).unwrap();
        assert_eq!(e.save_time, Some(Duration::from_millis(2500)));
        let e = env(&[("PODQ_SIM_SAVE_S", " 0 ")]).unwrap();
        assert_eq!(e.save_time, Some(Duration::ZERO));
        assert_eq!(env(&[("PODQ_SIM_SAVE_S", "")]).unwrap().save_time, None);
    }

    #[test]
    fn a_bad_save_time_is_a_usage_error() {
        for bad in ["-1", "fast", "NaN", "inf", "1e300"] {
            let err = env(&[("PODQ_SIM_SAVE_S", bad)]).unwrap_err();
            assert_eq!(err.code, crate::fatal::EXIT_USAGE, "{bad}");
            assert!(err.message.contains("PODQ_SIM_SAVE_S"), "{bad}");
        }
    }
}
