//! Step arithmetic of the real trainer: how many steps a run has and where its evaluations and
//! checkpoints fall.

use crate::config::TrainConfig;

/// The trainer logs metrics, and the hosts synchronise, every this many steps.
const LOG_INTERVAL: u64 = 10;

pub use podq_api::trainer::total_groups;

#[derive(Debug, Clone, PartialEq)]
pub struct Schedule {
    pub total_steps: u64,
    /// Steps after which an evaluation runs, ascending; the last is `total_steps`.
    pub evals: Vec<u64>,
    checkpoint_every_eval: bool,
    /// podq's advised interval (`PODQ_CHECKPOINT_INTERVAL_STEPS`); when set it replaces
    /// `checkpoint_every_eval`, as `podq_trainer.checkpoint_interval(default)` does.
    checkpoint_interval: Option<u64>,
}

impl Schedule {
    pub fn new(
        epochs: u64,
        total_groups: u64,
        global_batch_size: u64,
        eval_interval: u64,
        checkpoint_every_eval: bool,
    ) -> Result<Self, String> {
        let total_steps = podq_api::trainer::total_steps(epochs, total_groups, global_batch_size)
            .ok_or_else(|| "total steps overflow".to_string())?;
        if total_steps == 0 {
            return Err(format!(
                "the run has no steps: {epochs} epochs of {total_groups} puzzles \
                 is less than one batch of {global_batch_size}"
            ));
        }
        let n_evals = u128::from(epochs / eval_interval);
        let total = u128::from(total_steps);
        // Evaluation i (1-based) at round(i * total / n), in integers so the boundaries do not
        // depend on float rounding.
        let mut evals: Vec<u64> = (1..=n_evals)
            .map(|i| ((2 * i * total + n_evals) / (2 * n_evals)) as u64)
            .filter(|&step| step > 0)
            .collect();
        evals.dedup();
        Ok(Self {
            total_steps,
            evals,
            checkpoint_every_eval,
            checkpoint_interval: None,
        })
    }

    pub fn from_config(config: &TrainConfig) -> Result<Self, String> {
        let data_path = &config.data_paths[0];
        let groups = total_groups(data_path).ok_or_else(|| {
            format!(
                "cannot tell the number of puzzles of dataset '{data_path}': the sim expects \
                 a name like sudoku-extreme-1k-aug-1000"
            )
        })?;
        Self::new(
            config.epochs,
            groups,
            config.global_batch_size,
            config.eval_interval,
            config.checkpoint_every_eval,
        )
    }

    /// Saves every `steps` steps instead of after evaluations; evaluations stay where they are.
    pub fn with_checkpoint_interval(mut self, steps: Option<u64>) -> Self {
        self.checkpoint_interval = steps.filter(|&n| n > 0);
        self
    }

    // `u64::is_multiple_of` needs Rust 1.87; the workspace's rust-version is 1.85.
    #[allow(clippy::manual_is_multiple_of)]
    pub fn is_log_point(step: u64) -> bool {
        step % LOG_INTERVAL == 0
    }

    pub fn is_eval(&self, step: u64) -> bool {
        self.evals.binary_search(&step).is_ok()
    }

    /// The real trainer saves after every evaluation when asked to, or every advised interval,
    /// and always after the last step.
    // `u64::is_multiple_of` needs Rust 1.87; the workspace's rust-version is 1.85.
    #[allow(clippy::manual_is_multiple_of)]
    pub fn is_checkpoint(&self, step: u64) -> bool {
        if step == self.total_steps {
            return true;
        }
        match self.checkpoint_interval {
            Some(every) => step % every == 0,
            None => self.checkpoint_every_eval && self.is_eval(step),
        }
    }

    pub fn checkpoint_steps(&self) -> Vec<u64> {
        match self.checkpoint_interval {
            Some(every) => {
                let mut steps: Vec<u64> =
                    (1..=self.total_steps / every).map(|i| i * every).collect();
                if steps.last() != Some(&self.total_steps) {
                    steps.push(self.total_steps);
                }
                steps
            }
            None => self
                .evals
                .iter()
                .copied()
                .filter(|&s| self.is_checkpoint(s))
                .collect(),
        }
    }

    /// For the start-up log line: an interval's steps can be thousands.
    pub fn describe_checkpoints(&self) -> String {
        match self.checkpoint_interval {
            Some(every) => format!(
                "every {every} steps (PODQ_CHECKPOINT_INTERVAL_STEPS) and at {}",
                self.total_steps
            ),
            None => format!("{:?}", self.checkpoint_steps()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn baseline() -> Schedule {
        Schedule::new(50_000, 1000, 6144, 5000, true).unwrap()
    }

    #[test]
    fn sudoku_1k_baseline_has_8138_steps() {
        assert_eq!(baseline().total_steps, 8138);
    }

    #[test]
    fn ten_evals_the_last_at_the_end() {
        let schedule = baseline();
        assert_eq!(
            schedule.evals,
            vec![814, 1628, 2441, 3255, 4069, 4883, 5697, 6510, 7324, 8138]
        );
        assert_eq!(schedule.checkpoint_steps(), schedule.evals);
    }

    #[test]
    fn without_checkpoint_every_eval_only_the_end_is_saved() {
        let schedule = Schedule::new(50_000, 1000, 6144, 5000, false).unwrap();
        assert_eq!(schedule.checkpoint_steps(), vec![8138]);
        assert!(schedule.is_eval(814));
        assert!(!schedule.is_checkpoint(814));
    }

    #[test]
    fn an_advised_interval_replaces_saving_at_evals() {
        for every_eval in [true, false] {
            let schedule = Schedule::new(50_000, 1000, 6144, 5000, every_eval)
                .unwrap()
                .with_checkpoint_interval(Some(3000));
            assert_eq!(schedule.checkpoint_steps(), vec![3000, 6000, 8138]);
            assert!(schedule.is_checkpoint(6000) && schedule.is_checkpoint(8138));
            // Evaluations stay where they are, without a save.
            assert!(schedule.is_eval(814) && !schedule.is_checkpoint(814));
            assert!(!schedule.is_checkpoint(3001));
        }
    }

    #[test]
    fn an_interval_that_divides_the_run_saves_the_end_once() {
        let schedule = Schedule::new(10, 3, 4, 1, false)
            .unwrap()
            .with_checkpoint_interval(Some(7));
        assert_eq!(schedule.checkpoint_steps(), vec![7]);
        let every_step = Schedule::new(10, 3, 4, 1, false)
            .unwrap()
            .with_checkpoint_interval(Some(1));
        assert_eq!(every_step.checkpoint_steps(), (1..=7).collect::<Vec<_>>());
        let longer_than_the_run = Schedule::new(10, 3, 4, 1, true)
            .unwrap()
            .with_checkpoint_interval(Some(100));
        assert_eq!(longer_than_the_run.checkpoint_steps(), vec![7]);
    }

    #[test]
    fn no_interval_keeps_the_config_rule() {
        assert_eq!(baseline().with_checkpoint_interval(None), baseline());
    }

    #[test]
    fn other_suite_shapes() {
        assert_eq!(
            Schedule::new(50_000, 250, 6144, 5000, true)
                .unwrap()
                .total_steps,
            2034
        );
        assert_eq!(
            Schedule::new(50_000, 1000, 12288, 5000, true)
                .unwrap()
                .total_steps,
            4069
        );
        assert_eq!(
            Schedule::new(50_000, 5000, 6144, 5000, true)
                .unwrap()
                .total_steps,
            40690
        );
    }

    #[test]
    fn a_run_shorter_than_a_batch_is_refused() {
        assert!(Schedule::new(1, 100, 6144, 1, true).is_err());
    }

    #[test]
    fn more_evals_than_steps_collapse() {
        let schedule = Schedule::new(10, 3, 4, 1, true).unwrap();
        assert_eq!(schedule.total_steps, 7);
        assert_eq!(schedule.evals, vec![1, 2, 3, 4, 5, 6, 7]);
    }

    #[test]
    fn dataset_names_give_group_counts() {
        let cases = [
            ("gs://b/data/sudoku-extreme-1k-aug-1000", Some(1000)),
            ("gs://b/data/sudoku-extreme-250-aug-1000", Some(250)),
            ("gs://b/data/sudoku-extreme-5000-aug-1000/", Some(5000)),
            ("/data/sudoku-extreme-1000-aug-1000", Some(1000)),
            ("sudoku-extreme-100-aug-1000", Some(100)),
            ("data/sudoku-extreme-2K-aug-10", Some(2000)),
            ("data/maze-30x30-hard-1k", None),
            ("data/sudoku-extreme-aug-1000", None),
            ("data/sudoku-extreme-k-aug-1000", None),
        ];
        for (path, expected) in cases {
            assert_eq!(total_groups(path), expected, "{path}");
        }
    }
}
