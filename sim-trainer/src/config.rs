//! The resolved training config, validated like the real trainer's pydantic `PretrainConfig`
//! for the keys the simulation depends on.

use std::path::Path;

use serde::Deserialize;
use sha2::{Digest, Sha256};

use crate::fatal::Fatal;

/// Unknown keys are ignored, as pydantic does by default: the user's suite carries keys the
/// trainer never reads.
#[derive(Debug, Deserialize)]
pub struct TrainConfig {
    pub arch: serde_yaml::Mapping,
    pub global_batch_size: u64,
    pub epochs: u64,
    pub eval_interval: u64,
    pub data_paths: Vec<String>,
    pub lr: f64,
    #[serde(default)]
    pub checkpoint_every_eval: bool,
    #[serde(default)]
    pub checkpoint_path: Option<String>,
    #[serde(default)]
    pub load_checkpoint: Option<String>,
    /// Hyper-parameters the simulated curves follow (`curves.rs`); a value of the wrong type
    /// is as good as absent here (the catalog's checks judge it).
    #[serde(default, deserialize_with = "lenient")]
    pub lr_min_ratio: Option<f64>,
    #[serde(default, deserialize_with = "lenient")]
    pub beta2: Option<f64>,
    #[serde(default, deserialize_with = "lenient")]
    pub ema: Option<bool>,
    #[serde(default, deserialize_with = "lenient")]
    pub ema_rate: Option<f64>,
    /// The sim trainer's own settings, `sim:` (TRM's trainer ignores the key).
    #[serde(default)]
    pub sim: SimSettings,
}

/// `sim:` in a config: what the simulation draws, where the config's hyper-parameters would
/// not say it.
#[derive(Debug, Default, Deserialize)]
pub struct SimSettings {
    /// The run's final `eval/exact_accuracy`, within [0, 1]: its curves are scaled to it
    /// (`sim: {final_accuracy: 0.8}`). Default: drawn from the config (`curves.rs`).
    #[serde(default)]
    pub final_accuracy: Option<f64>,
}

/// A value of the type wanted, or None for any other.
fn lenient<'de, D, T>(deserializer: D) -> Result<Option<T>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: serde::de::DeserializeOwned,
{
    let value = serde_yaml::Value::deserialize(deserializer)?;
    Ok(serde_yaml::from_value(value).ok())
}

impl TrainConfig {
    pub fn parse(text: &str) -> Result<Self, String> {
        let config: Self = serde_yaml::from_str(text).map_err(|e| e.to_string())?;
        config.check()?;
        Ok(config)
    }

    // `u64::is_multiple_of` needs Rust 1.87; the workspace's rust-version is 1.85.
    #[allow(clippy::manual_is_multiple_of)]
    fn check(&self) -> Result<(), String> {
        if self.global_batch_size == 0 {
            return Err("global_batch_size must be positive".into());
        }
        if self.epochs == 0 {
            return Err("epochs must be positive".into());
        }
        if self.eval_interval == 0 {
            return Err("eval_interval must be positive".into());
        }
        // The real trainer asserts this before its first step.
        if self.epochs % self.eval_interval != 0 {
            return Err(format!(
                "eval_interval ({}) must divide epochs ({})",
                self.eval_interval, self.epochs
            ));
        }
        if self.data_paths.is_empty() {
            return Err("data_paths must name at least one dataset".into());
        }
        if !self.lr.is_finite() || self.lr <= 0.0 {
            return Err(format!("lr must be a positive number, got {}", self.lr));
        }
        if let Some(accuracy) = self.sim.final_accuracy {
            if !(0.0..=1.0).contains(&accuracy) {
                return Err(format!(
                    "sim.final_accuracy must lie within [0, 1], got {accuracy}"
                ));
            }
        }
        Ok(())
    }

    /// An architecture key as an integer, if present; the sim only uses these to shape its
    /// curves, so a missing key falls back to the baseline's value.
    pub fn arch_u64(&self, key: &str) -> Option<u64> {
        self.arch.get(key).and_then(serde_yaml::Value::as_u64)
    }
}

/// A config as read from disk, with the hash of its exact bytes.
#[derive(Debug)]
pub struct LoadedConfig {
    pub config: TrainConfig,
    pub sha256: String,
}

/// Reads `path`, refuses it when its sha256 differs from `expected_sha256` (the worker's
/// proof that every host trains the same config), and validates it.
pub fn load(path: &Path, expected_sha256: Option<&str>) -> Result<LoadedConfig, Fatal> {
    let bytes = std::fs::read(path)
        .map_err(|e| Fatal::usage(format!("cannot read config {}: {e}", path.display())))?;
    let sha256 = hex::encode(Sha256::digest(&bytes));
    if let Some(expected) = expected_sha256 {
        if !expected.trim().eq_ignore_ascii_case(&sha256) {
            return Err(Fatal::usage(format!(
                "config {} has sha256 {sha256}, but PODQ_CONFIG_SHA256 is {expected}: \
                 this host's config file differs from the one submitted",
                path.display()
            )));
        }
    }
    let text = String::from_utf8(bytes)
        .map_err(|_| Fatal::usage(format!("config {} is not UTF-8", path.display())))?;
    let config = TrainConfig::parse(&text)
        .map_err(|e| Fatal::usage(format!("invalid config {}: {e}", path.display())))?;
    Ok(LoadedConfig { config, sha256 })
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub const BASELINE: &str = "\
arch:
  name: recursive_reasoning.trm@TinyRecursiveReasoningModel_ACTV1
  hidden_size: 512
  halt_max_steps: 16
data_paths:
- gs://sculptor-tpu-experiments/data/sudoku-extreme-1k-aug-1000
global_batch_size: 6144
epochs: 50000
eval_interval: 5000
checkpoint_every_eval: true
lr: 1e-4
use_tpu: true
";

    #[test]
    fn baseline_parses() {
        let config = TrainConfig::parse(BASELINE).unwrap();
        assert_eq!(config.global_batch_size, 6144);
        assert_eq!(config.lr, 1e-4);
        assert!(config.checkpoint_every_eval);
        assert_eq!(config.arch_u64("hidden_size"), Some(512));
    }

    #[test]
    fn integer_lr_is_accepted() {
        let text = BASELINE.replace("lr: 1e-4", "lr: 1");
        assert_eq!(TrainConfig::parse(&text).unwrap().lr, 1.0);
    }

    #[test]
    fn missing_required_key_is_named() {
        for key in ["arch", "global_batch_size", "epochs", "eval_interval", "lr"] {
            let text: String = BASELINE
                .lines()
                .filter(|l| !l.starts_with(&format!("{key}:")))
                .map(|l| format!("{l}\n"))
                .collect();
            let err = TrainConfig::parse(&text).unwrap_err();
            assert!(err.contains(key), "error for missing {key}: {err}");
        }
    }

    #[test]
    fn mistyped_keys_are_rejected() {
        let cases = [
            ("global_batch_size: 6144", "global_batch_size: lots"),
            ("epochs: 50000", "epochs: -3"),
            ("arch:\n", "arch: 5\nold_arch:\n"),
            ("lr: 1e-4", "lr: fast"),
        ];
        for (from, to) in cases {
            let text = BASELINE.replace(from, to);
            assert!(TrainConfig::parse(&text).is_err(), "accepted {to:?}");
        }
    }

    #[test]
    fn hydra_arch_config_key_is_not_arch() {
        // The user's suite as written puts the architecture under `arch_config`.
        let text = BASELINE.replace("arch:", "arch_config:");
        let err = TrainConfig::parse(&text).unwrap_err();
        assert!(err.contains("missing field `arch`"), "{err}");
    }

    #[test]
    fn sim_final_accuracy_is_read_and_checked() {
        assert_eq!(
            TrainConfig::parse(BASELINE).unwrap().sim.final_accuracy,
            None
        );
        let text = format!("{BASELINE}sim:\n  final_accuracy: 0.8\n");
        assert_eq!(
            TrainConfig::parse(&text).unwrap().sim.final_accuracy,
            Some(0.8)
        );
        for bad in ["1.5", "-0.1", "high"] {
            let text = format!("{BASELINE}sim: {{final_accuracy: {bad}}}\n");
            assert!(TrainConfig::parse(&text).is_err(), "accepted {bad}");
        }
        // Hyper-parameters of another type are not the sim's to refuse.
        let text = format!("{BASELINE}ema: maybe\nbeta2: 0.99\n");
        let config = TrainConfig::parse(&text).unwrap();
        assert_eq!((config.ema, config.beta2), (None, Some(0.99)));
    }

    #[test]
    fn eval_interval_must_divide_epochs() {
        let text = BASELINE.replace("eval_interval: 5000", "eval_interval: 3000");
        assert!(TrainConfig::parse(&text).is_err());
    }

    #[test]
    fn sha_mismatch_is_refused() {
        let dir = std::env::temp_dir().join(format!("podq-sim-config-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("c.yaml");
        std::fs::write(&path, BASELINE).unwrap();
        let loaded = load(&path, None).unwrap();
        assert_eq!(loaded.sha256.len(), 64);
        assert!(load(&path, Some(&loaded.sha256.to_uppercase())).is_ok());
        let err = load(&path, Some(&"0".repeat(64))).unwrap_err();
        assert_eq!(err.code, crate::fatal::EXIT_USAGE);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
