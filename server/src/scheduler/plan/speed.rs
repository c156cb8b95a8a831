//! How fast a run goes on each slice type it may run on, relative to another: what the plan
//! needs to play a run out on a generation it has not been measured on.
//!
//! A run's hours on type B per hour on type A is, in order of what is known:
//! 1. its own measured step rates on both types;
//! 2. its group's (the mean step rate of the group's attempts on each type: a group varies
//!    one thing, so its runs are alike in cost);
//! 3. the prior: the ratio of the two slice types' peak bf16 FLOPs (`podq_api::accelerators`).

use std::collections::HashMap;

use podq_api::JobId;

/// One attempt's measured step rate and where it ran.
#[derive(Debug, Clone)]
pub struct AttemptRate {
    pub run: JobId,
    pub group: String,
    pub accelerator: String,
    pub steps_per_s: f64,
}

/// Measured step rates by run and by group, on each slice type.
#[derive(Debug, Default)]
pub struct Speeds {
    by_run: HashMap<(JobId, String), Mean>,
    by_group: HashMap<(String, String), Mean>,
}

#[derive(Debug, Default, Clone, Copy)]
struct Mean {
    sum: f64,
    count: u32,
}

impl Mean {
    fn add(&mut self, value: f64) {
        self.sum += value;
        self.count += 1;
    }

    fn get(self) -> Option<f64> {
        (self.count > 0).then(|| self.sum / f64::from(self.count))
    }
}

impl Speeds {
    pub fn from_attempts(rates: impl IntoIterator<Item = AttemptRate>) -> Speeds {
        let mut speeds = Speeds::default();
        for r in rates {
            if !(r.steps_per_s.is_finite() && r.steps_per_s > 0.0) {
                continue;
            }
            speeds
                .by_run
                .entry((r.run, r.accelerator.clone()))
                .or_default()
                .add(r.steps_per_s);
            speeds
                .by_group
                .entry((r.group, r.accelerator))
                .or_default()
                .add(r.steps_per_s);
        }
        speeds
    }

    /// A run's hours on `to` per hour on `from`.
    pub fn factor(&self, run: Option<JobId>, group: &str, from: &str, to: &str) -> f64 {
        if from == to {
            return 1.0;
        }
        let of_run = |a: &str| {
            run.and_then(|run| self.by_run.get(&(run, a.to_owned())))
                .and_then(|m| m.get())
        };
        let of_group = |a: &str| {
            self.by_group
                .get(&(group.to_owned(), a.to_owned()))
                .and_then(|m| m.get())
        };
        if let (Some(a), Some(b)) = (of_run(from), of_run(to)) {
            return a / b;
        }
        if let (Some(a), Some(b)) = (of_group(from), of_group(to)) {
            return a / b;
        }
        prior(from, to)
    }
}

/// Hours on `to` per hour on `from` by the slice types' peak bf16 FLOPs; 1 for a type podq
/// does not know.
pub fn prior(from: &str, to: &str) -> f64 {
    let peak = |name: &str| {
        podq_api::slice_type(name)
            .ok()
            .map(|t| t.peak_bf16_tflops())
    };
    match (peak(from), peak(to)) {
        (Some(a), Some(b)) if a > 0.0 && b > 0.0 => a / b,
        _ => 1.0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rate(run: JobId, group: &str, accelerator: &str, steps_per_s: f64) -> AttemptRate {
        AttemptRate {
            run,
            group: group.into(),
            accelerator: accelerator.into(),
            steps_per_s,
        }
    }

    #[test]
    fn own_measures_beat_the_groups_which_beat_the_prior() {
        let (a, b, c) = (
            JobId::new_random(),
            JobId::new_random(),
            JobId::new_random(),
        );
        let speeds = Speeds::from_attempts([
            rate(a, "g", "v4-64", 1.0),
            rate(a, "g", "v6e-32", 2.0),
            rate(b, "g", "v4-64", 1.0),
            rate(b, "g", "v6e-32", 4.0),
            rate(b, "g", "v6e-32", f64::NAN),
        ]);
        // Its own: twice as fast on v6e, so half the hours.
        assert_eq!(speeds.factor(Some(a), "g", "v4-64", "v6e-32"), 0.5);
        // Never measured itself: its group's mean, 1 against 3 steps a second.
        let group = speeds.factor(Some(c), "g", "v4-64", "v6e-32");
        assert!((group - 1.0 / 3.0).abs() < 1e-9, "{group}");
        // Nothing measured: the peak-FLOPs prior.
        let prior = speeds.factor(Some(c), "other", "v4-64", "v6e-32");
        assert!((prior - 275.0 / 918.0).abs() < 1e-9, "{prior}");
        assert_eq!(speeds.factor(None, "g", "v6e-32", "v6e-32"), 1.0);
        assert_eq!(super::prior("v4-64", "gpu-8"), 1.0);
    }
}
