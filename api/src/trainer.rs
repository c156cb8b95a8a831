//! The TRM trainer's step arithmetic, shared by the server (to show progress as a fraction
//! before any step is reported) and the sim trainer (to train that many steps).

/// Every Sudoku dataset in the suite has one example per puzzle group.
pub const MEAN_PUZZLE_EXAMPLES: u64 = 1;

const DATASET_PREFIX: &str = "sudoku-extreme-";

/// The number of puzzle groups of a dataset, read from its name the way the study names
/// them: `sudoku-extreme-1k-aug-1000` has 1000, `sudoku-extreme-250-aug-1000` has 250. The
/// real trainer reads it from the dataset's metadata, which podq does not have.
pub fn total_groups(data_path: &str) -> Option<u64> {
    let name = data_path.trim_end_matches('/').rsplit('/').next()?;
    let rest = name.strip_prefix(DATASET_PREFIX)?;
    let count = rest.split(['-', '_']).next()?;
    let (digits, scale) = match count.strip_suffix(['k', 'K']) {
        Some(digits) => (digits, 1000),
        None => (count, 1),
    };
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse::<u64>().ok()?.checked_mul(scale)
}

/// `epochs * total_groups * mean_puzzle_examples / global_batch_size`, as the trainer counts.
pub fn total_steps(epochs: u64, total_groups: u64, global_batch_size: u64) -> Option<u64> {
    let examples = u128::from(epochs) * u128::from(total_groups) * u128::from(MEAN_PUZZLE_EXAMPLES);
    u64::try_from(examples.checked_div(u128::from(global_batch_size))?).ok()
}

/// The steps of a resolved config, when its dataset is one the study names.
pub fn total_steps_of_config(config: &serde_json::Value) -> Option<u64> {
    let epochs = config.get("epochs")?.as_u64()?;
    let batch = config.get("global_batch_size")?.as_u64()?;
    let data_path = config.get("data_paths")?.as_array()?.first()?.as_str()?;
    total_steps(epochs, total_groups(data_path)?, batch)
}

/// The steps between two evaluations of a resolved config (`eval_interval` epochs).
pub fn steps_per_eval(config: &serde_json::Value) -> Option<u64> {
    let interval = config.get("eval_interval")?.as_u64()?;
    let batch = config.get("global_batch_size")?.as_u64()?;
    let data_path = config.get("data_paths")?.as_array()?.first()?.as_str()?;
    total_steps(interval, total_groups(data_path)?, batch).filter(|s| *s > 0)
}

/// Where a config has TRM save, in steps: every evaluation with `checkpoint_every_eval`,
/// otherwise only at the end (the whole run).
pub fn config_checkpoint_interval(config: &serde_json::Value) -> Option<u64> {
    let every_eval = config
        .get("checkpoint_every_eval")
        .and_then(serde_json::Value::as_bool)
        .unwrap_or(false);
    if every_eval {
        steps_per_eval(config)
    } else {
        total_steps_of_config(config)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sudoku_1k_baseline_has_8138_steps() {
        assert_eq!(
            total_groups("gs://b/data/sudoku-extreme-1k-aug-1000"),
            Some(1000)
        );
        assert_eq!(
            total_groups("gs://b/data/sudoku-extreme-250-aug-1000/"),
            Some(250)
        );
        assert_eq!(total_groups("gs://b/data/other"), None);
        assert_eq!(total_steps(50_000, 1000, 6144), Some(8138));
        assert_eq!(total_steps(1, 1, 0), None);
    }

    #[test]
    fn a_config_saves_at_each_evaluation_or_only_at_the_end() {
        let mut config = serde_json::json!({
            "epochs": 50_000, "eval_interval": 5_000, "global_batch_size": 6144,
            "data_paths": ["gs://b/data/sudoku-extreme-1k-aug-1000"],
            "checkpoint_every_eval": true,
        });
        assert_eq!(config_checkpoint_interval(&config), Some(813));
        config["checkpoint_every_eval"] = false.into();
        assert_eq!(config_checkpoint_interval(&config), Some(8138));
    }
}
