//! The command line: Hydra's `--config-path/--config-name` plus `key=value` overrides, the way
//! the worker's command template invokes the real `pretrain_jax.py`.

use std::path::PathBuf;

use clap::Parser;

/// Stand-in for the user's JAX trainer: same command line, same multi-host behaviour, same
/// `PODQ` report lines and Orbax-shaped checkpoints, with simulated training.
#[derive(Debug, Parser)]
#[command(name = "podq-sim-trainer", version)]
pub struct Args {
    /// Directory holding the resolved config.
    #[arg(long = "config-path", value_name = "DIR")]
    pub config_path: PathBuf,

    /// Config name; `{DIR}/{NAME}.yaml` is read.
    #[arg(long = "config-name", value_name = "NAME")]
    pub config_name: String,

    /// Wall time, in seconds, that the whole run's total steps take.
    #[arg(long = "run-secs", env = "PODQ_SIM_RUN_SECS", default_value_t = 60.0)]
    pub run_secs: f64,

    /// Hydra-style overrides; `checkpoint_path` and `load_checkpoint` are honoured.
    #[arg(value_name = "KEY=VALUE")]
    pub overrides: Vec<String>,
}

impl Args {
    pub fn config_file(&self) -> PathBuf {
        let name = &self.config_name;
        if name.ends_with(".yaml") || name.ends_with(".yml") {
            self.config_path.join(name)
        } else {
            self.config_path.join(format!("{name}.yaml"))
        }
    }
}

/// The overrides the sim acts on. The outer `Option` says whether the key was given at all,
/// the inner one whether it was given a value or `null`: an explicit `load_checkpoint=null`
/// must win over `PODQ_RESUME_FROM`.
#[derive(Debug, Default, PartialEq)]
pub struct Overrides {
    pub checkpoint_path: Option<Option<String>>,
    pub load_checkpoint: Option<Option<String>>,
    pub ignored: Vec<String>,
}

impl Overrides {
    pub fn parse(args: &[String]) -> Result<Self, String> {
        let mut overrides = Self::default();
        for arg in args {
            let (key, value) = arg.split_once('=').ok_or_else(|| {
                format!("cannot parse override '{arg}': expected key=value (Hydra syntax)")
            })?;
            // Hydra's `+key=` (add) and `++key=` (force add) set the same key.
            match key.trim_start_matches('+') {
                "checkpoint_path" => overrides.checkpoint_path = Some(optional_value(value)),
                "load_checkpoint" => overrides.load_checkpoint = Some(optional_value(value)),
                _ => overrides.ignored.push(arg.clone()),
            }
        }
        Ok(overrides)
    }
}

/// Reads a value the way Hydra and the worker's templates spell "nothing": empty, `null`,
/// `None` or `~`, possibly quoted.
pub fn optional_value(raw: &str) -> Option<String> {
    let trimmed = raw.trim();
    let unquoted = ['\'', '"']
        .iter()
        .find_map(|q| {
            trimmed
                .strip_prefix(*q)
                .and_then(|rest| rest.strip_suffix(*q))
        })
        .unwrap_or(trimmed);
    match unquoted {
        "" | "null" | "None" | "~" => None,
        value => Some(value.to_owned()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(items: &[&str]) -> Vec<String> {
        items.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn overrides_pick_out_checkpoint_keys() {
        let parsed = Overrides::parse(&strings(&[
            "checkpoint_path=file:///ckpt",
            "load_checkpoint=null",
            "+lr=0.1",
        ]))
        .unwrap();
        assert_eq!(
            parsed,
            Overrides {
                checkpoint_path: Some(Some("file:///ckpt".into())),
                load_checkpoint: Some(None),
                ignored: strings(&["+lr=0.1"]),
            }
        );
    }

    #[test]
    fn override_without_equals_is_rejected() {
        assert!(Overrides::parse(&strings(&["checkpoint_path"])).is_err());
    }

    #[test]
    fn null_spellings_mean_nothing() {
        for raw in ["", "null", "None", "~", "'null'", "\"\"", "  "] {
            assert_eq!(optional_value(raw), None, "{raw:?}");
        }
        assert_eq!(optional_value("'/a b'"), Some("/a b".into()));
    }

    #[test]
    fn config_name_may_carry_its_extension() {
        let args = Args::parse_from(["t", "--config-path", "/c", "--config-name", "exp01a"]);
        assert_eq!(args.config_file(), PathBuf::from("/c/exp01a.yaml"));
        let args = Args::parse_from(["t", "--config-path", "/c", "--config-name", "x.yaml"]);
        assert_eq!(args.config_file(), PathBuf::from("/c/x.yaml"));
    }
}
