//! What the worker and JAX put in the environment of every host's trainer.

use std::path::PathBuf;

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
        })
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
}
