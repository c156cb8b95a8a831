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
}
