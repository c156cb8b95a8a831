//! Plausible TRM training curves. Every value is a pure function of (config, step): a resumed
//! run re-reports exactly what the first attempt reported for the same step, which is what
//! the server's replace-on-re-report rule expects.
//!
//! Each run's curves are one monotone shape per metric, scaled to the run's final
//! `eval/exact_accuracy`: `sim.final_accuracy` in its config, else drawn from its
//! hyper-parameters (model size, data, learning rate and its decay, EMA, beta2) with a little
//! jitter of its own. The evaluation metrics carry no noise, and the training metrics' noise
//! is the same for every run at a step, so a group's runs rank the same way at every step
//! (at a rung as at the end): a sweep pruned on the simulated pod keeps the run that ends
//! best.

use crate::config::TrainConfig;

/// Where the baseline (hidden 512, 1000 puzzles) ends on evaluation, from the paper.
const BASELINE_EXACT_ACCURACY: f64 = 0.87;
const BASELINE_HIDDEN: f64 = 512.0;
const BASELINE_GROUPS: f64 = 1000.0;
const BASELINE_LR: f64 = 1e-4;
const BASELINE_BATCH: f64 = 6144.0;
const BASELINE_EMA_RATE: f64 = 0.999;
const BASELINE_BETA2: f64 = 0.95;
const DEFAULT_HALT_MAX_STEPS: f64 = 16.0;
/// Evaluation trails training by this much.
const EVAL_OVER_TRAIN: f64 = 0.98;

#[derive(Debug, Clone)]
pub struct Curves {
    seed: u64,
    total_steps: u64,
    /// The final `eval/exact_accuracy`.
    final_exact: f64,
    halt_max_steps: f64,
    batch: f64,
}

impl Curves {
    /// `config_sha256` seeds the jitter of a drawn final accuracy, so that two experiments
    /// never draw identical curves.
    pub fn new(
        config_sha256: &str,
        config: &TrainConfig,
        total_groups: u64,
        total_steps: u64,
    ) -> Self {
        let seed = u64::from_str_radix(config_sha256.get(..16).unwrap_or("0"), 16).unwrap_or(0);
        let final_exact = config
            .sim
            .final_accuracy
            .unwrap_or_else(|| drawn_final(seed, config, total_groups));
        Self {
            seed,
            total_steps: total_steps.max(1),
            final_exact,
            halt_max_steps: config
                .arch_u64("halt_max_steps")
                .map_or(DEFAULT_HALT_MAX_STEPS, |v| v as f64),
            batch: config.global_batch_size as f64,
        }
    }

    /// The final `eval/exact_accuracy`: what the last evaluation reports.
    pub fn final_exact_accuracy(&self) -> f64 {
        self.final_exact
    }

    /// Training's final exact accuracy: a little above evaluation's.
    fn train_final(&self) -> f64 {
        (self.final_exact / EVAL_OVER_TRAIN).min(1.0)
    }

    /// The training metrics the real trainer logs every 10 steps.
    pub fn train(&self, step: u64) -> Vec<(&'static str, f64)> {
        let p = self.progress(step);
        // The same for every run at a step: it moves a group's runs together.
        let shared = |salt| unit_noise(0, step, salt);
        // A run's own, on metrics that do not say how good it is.
        let own = |salt| unit_noise(self.seed, step, salt);
        let learned = 1.0 - (-5.0 * p).exp();
        let solved = solved_fraction(p);
        let train_final = self.train_final();

        let exact = (train_final * solved * (1.0 + 0.015 * shared(1))).clamp(0.0, 1.0);
        let token_final = 0.6 + 0.4 * train_final;
        let accuracy = (0.45 + (token_final - 0.45) * learned + 0.004 * shared(2)).clamp(0.0, 1.0);
        let lm_floor = 0.15 + 0.6 * (1.0 - train_final);
        let lm_loss = (lm_floor + 1.9 * (-4.0 * p).exp()) * (1.0 + 0.02 * shared(3));
        let q_halt_loss = (0.05 + 0.65 * (-4.0 * p).exp()) * (1.0 + 0.03 * shared(4));
        let q_halt_accuracy = (0.5 + 0.47 * learned + 0.005 * own(5)).clamp(0.0, 1.0);
        // The model learns to halt early once it solves puzzles.
        let avg_steps = self.halt_max_steps * (1.0 - 0.6 * solved) * (1.0 + 0.01 * own(6));
        let act_steps = self.halt_max_steps * (1.0 - 0.45 * solved) * (1.0 + 0.01 * own(7));

        [
            ("train/accuracy", accuracy),
            ("train/exact_accuracy", exact),
            ("train/q_halt_accuracy", q_halt_accuracy),
            ("train/avg_steps", avg_steps),
            ("train/count", self.batch),
            ("train/lm_loss", lm_loss),
            ("train/q_halt_loss", q_halt_loss),
            ("train/loss", lm_loss + 0.5 * q_halt_loss),
            ("train/act_steps", act_steps),
            ("train/diverged", 0.0),
        ]
        .into_iter()
        .map(|(name, value)| (name, round6(value)))
        .collect()
    }

    /// The held-out metrics of an evaluation: a little worse than training, and smooth. Each
    /// is monotone in the step and in the final accuracy; the last evaluation reports the
    /// final accuracy itself.
    pub fn eval(&self, step: u64) -> Vec<(&'static str, f64)> {
        let p = self.progress(step);
        let exact = (self.final_exact * solved_fraction(p)).clamp(0.0, 1.0);
        let train_final = self.train_final();
        let token_final = 0.6 + 0.4 * train_final;
        let learned = 1.0 - (-5.0 * p).exp();
        let accuracy = (0.45 + (token_final - 0.46) * learned).clamp(0.0, 1.0);
        let lm_floor = 0.15 + 0.6 * (1.0 - train_final);
        let loss = (lm_floor + 1.9 * (-4.0 * p).exp()) * 1.08;
        [
            ("eval/loss", loss),
            ("eval/accuracy", accuracy),
            ("eval/exact_accuracy", exact),
        ]
        .into_iter()
        .map(|(name, value)| (name, round6(value)))
        .collect()
    }

    fn progress(&self, step: u64) -> f64 {
        (step as f64 / self.total_steps as f64).clamp(0.0, 1.0)
    }
}

/// A run's final `eval/exact_accuracy` from its config: the baseline's, moved by capacity and
/// data (diminishing returns), by a learning rate away from the baseline's (scaled by the
/// square root of the batch, as exp06 scales it) either way, a little gain from decaying it
/// (`lr_min_ratio` below 1), EMA off or at another rate, beta2 away from 0.95, and a jitter
/// of ±0.005 seeded by the config's hash. Nothing beats ~0.93.
fn drawn_final(seed: u64, config: &TrainConfig, total_groups: u64) -> f64 {
    let hidden = config.arch_u64("hidden_size").unwrap_or(512) as f64;
    let capacity = (0.035 * (hidden.max(1.0) / BASELINE_HIDDEN).log2()).clamp(-0.2, 0.03);
    let data = (0.05 * (total_groups.max(1) as f64 / BASELINE_GROUPS).log10()).clamp(-0.2, 0.03);
    let lr_scaled = BASELINE_LR * (config.global_batch_size.max(1) as f64 / BASELINE_BATCH).sqrt();
    let lr = -0.03 * (config.lr / lr_scaled).log10().powi(2);
    let decay = 0.01 * (1.0 - config.lr_min_ratio.unwrap_or(1.0).clamp(0.0, 1.0));
    let ema = match (config.ema, config.ema_rate) {
        (Some(false), _) => -0.015,
        (_, Some(rate)) if rate > 0.0 && rate < 1.0 => {
            -0.01 * ((1.0 - rate) / (1.0 - BASELINE_EMA_RATE)).log10().powi(2)
        }
        _ => 0.0,
    };
    let beta2 = match config.beta2 {
        Some(b) if b > 0.0 && b < 1.0 => {
            -0.01 * ((1.0 - b) / (1.0 - BASELINE_BETA2)).log10().powi(2)
        }
        _ => 0.0,
    };
    let hyper = (lr + decay + ema + beta2).clamp(-0.3, 0.02);
    let jitter = 0.005 * unit_noise(seed, 0, 0);
    (BASELINE_EXACT_ACCURACY + capacity + data + hyper + jitter).clamp(0.3, 0.93)
}

/// Fraction of the final exact accuracy reached at progress `p`: exact accuracy on Sudoku stays
/// near zero for a while, then climbs. A logistic rescaled to run from 0 at p=0 to 1 at p=1.
fn solved_fraction(p: f64) -> f64 {
    let logistic = |x: f64| 1.0 / (1.0 + (-(x - 0.4) / 0.09).exp());
    (logistic(p) - logistic(0.0)) / (logistic(1.0) - logistic(0.0))
}

/// Deterministic noise in [-1, 1] for (seed, step, salt): splitmix64's finaliser, which is
/// enough to decorrelate neighbouring steps.
fn unit_noise(seed: u64, step: u64, salt: u64) -> f64 {
    let mut z =
        seed ^ step.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ salt.wrapping_mul(0xD1B5_4A32_D192_ED03);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^= z >> 31;
    (z >> 11) as f64 / (1u64 << 53) as f64 * 2.0 - 1.0
}

fn round6(value: f64) -> f64 {
    (value * 1e6).round() / 1e6
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::tests::BASELINE;

    const SHA_A: &str = "3f1a9c0e5b7d2468ace0fdb97531eca86420bdf13579ace02468bdf13579ace0";
    const SHA_B: &str = "a0b1c2d3e4f5061728394a5b6c7d8e9fa0b1c2d3e4f5061728394a5b6c7d8e9f";

    fn curves(sha: &str, hidden: u64) -> Curves {
        let text = BASELINE.replace("hidden_size: 512", &format!("hidden_size: {hidden}"));
        let config = TrainConfig::parse(&text).unwrap();
        Curves::new(sha, &config, 1000, 8138)
    }

    fn value(values: &[(&str, f64)], name: &str) -> f64 {
        values.iter().find(|(n, _)| *n == name).unwrap().1
    }

    #[test]
    fn values_are_a_pure_function_of_config_and_step() {
        let first = curves(SHA_A, 512);
        let resumed = curves(SHA_A, 512);
        for step in [0, 10, 4880, 8138] {
            assert_eq!(first.train(step), resumed.train(step));
            assert_eq!(first.eval(step), resumed.eval(step));
        }
    }

    #[test]
    fn different_configs_draw_different_curves() {
        assert_ne!(
            curves(SHA_A, 512).train(1200),
            curves(SHA_B, 512).train(1200)
        );
    }

    #[test]
    fn all_ten_trm_metrics_are_reported_and_finite() {
        let values = curves(SHA_A, 512).train(1200);
        assert_eq!(values.len(), 10);
        assert!(values
            .iter()
            .all(|(n, v)| n.starts_with("train/") && v.is_finite()));
        let eval = curves(SHA_A, 512).eval(814);
        let names: Vec<_> = eval.iter().map(|(n, _)| *n).collect();
        assert_eq!(names, ["eval/loss", "eval/accuracy", "eval/exact_accuracy"]);
    }

    #[test]
    fn training_improves_towards_the_paper_figure() {
        let c = curves(SHA_A, 512);
        let (start, end) = (c.train(10), c.train(8130));
        assert!(value(&end, "train/lm_loss") < value(&start, "train/lm_loss") / 3.0);
        assert!(value(&end, "train/loss") < value(&start, "train/loss"));
        assert!(value(&start, "train/exact_accuracy") < 0.05);
        let exact = value(&c.train(8138), "train/exact_accuracy");
        assert!(
            (0.83..0.91).contains(&exact),
            "final exact accuracy {exact}"
        );
        assert!(value(&end, "train/accuracy") > value(&start, "train/accuracy"));
    }

    #[test]
    fn smaller_models_end_a_bit_worse() {
        let small = curves(SHA_A, 256).final_exact_accuracy();
        let base = curves(SHA_A, 512).final_exact_accuracy();
        assert!(small < base && base - small < 0.1, "{small} vs {base}");
    }

    /// A config of the baseline's with `changes` made (each `(from, to)` as text).
    fn config_with(changes: &[(&str, &str)]) -> TrainConfig {
        let mut text = BASELINE.to_owned();
        for (from, to) in changes {
            assert!(text.contains(from), "{from}");
            text = text.replace(from, to);
        }
        TrainConfig::parse(&text).unwrap()
    }

    /// The runs' indices, best first by `metric` at `step`.
    fn ranking(runs: &[Curves], step: u64, metric: &str) -> Vec<usize> {
        let lower_is_better = metric.ends_with("loss");
        let values: Vec<f64> = runs
            .iter()
            .map(|c| {
                let mut all = c.train(step);
                all.extend(c.eval(step));
                value(&all, metric)
            })
            .collect();
        let mut order: Vec<usize> = (0..runs.len()).collect();
        order.sort_by(|&a, &b| {
            let by = values[a].total_cmp(&values[b]);
            if lower_is_better {
                by
            } else {
                by.reverse()
            }
        });
        order
    }

    #[test]
    fn a_groups_runs_rank_the_same_at_a_rung_as_at_the_end() {
        // exp10-lr-schedule's five rows, and two model sizes, each its own config hash.
        let configs = [
            config_with(&[("lr: 1e-4", "lr: 3.0e-05")]),
            config_with(&[("lr: 1e-4", "lr: 1e-4\nlr_min_ratio: 1.0")]),
            config_with(&[("lr: 1e-4", "lr: 3.0e-04")]),
            config_with(&[("lr: 1e-4", "lr: 1e-4\nlr_min_ratio: 0.1")]),
            config_with(&[("lr: 1e-4", "lr: 1e-4\nlr_min_ratio: 0.01")]),
            config_with(&[("hidden_size: 512", "hidden_size: 256")]),
            config_with(&[("lr: 1e-4", "lr: 1e-4\nema: false")]),
        ];
        let total = 8138;
        let runs: Vec<Curves> = configs
            .iter()
            .enumerate()
            .map(|(i, config)| {
                let sha = format!(
                    "{:016x}{}",
                    (i as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15),
                    &SHA_A[16..]
                );
                Curves::new(&sha, config, 1000, total)
            })
            .collect();
        let finals: Vec<f64> = runs.iter().map(Curves::final_exact_accuracy).collect();
        for (i, a) in finals.iter().enumerate() {
            for b in &finals[i + 1..] {
                assert!((a - b).abs() > 1e-4, "runs end apart: {finals:?}");
            }
        }
        for metric in [
            "eval/exact_accuracy",
            "eval/accuracy",
            "eval/loss",
            "train/exact_accuracy",
            "train/accuracy",
            "train/lm_loss",
            "train/loss",
        ] {
            let at_end = ranking(&runs, total, metric);
            for rung in [0.125, 0.25, 0.5] {
                let step = (total as f64 * rung).ceil() as u64;
                assert_eq!(ranking(&runs, step, metric), at_end, "{metric} at {rung}");
            }
        }
        let best_first: Vec<f64> = ranking(&runs, total, "eval/exact_accuracy")
            .into_iter()
            .map(|i| finals[i])
            .collect();
        assert!(best_first.windows(2).all(|w| w[0] > w[1]), "{best_first:?}");
    }

    #[test]
    fn hyper_parameters_move_the_final_accuracy() {
        let at = |changes: &[(&str, &str)]| {
            Curves::new(SHA_A, &config_with(changes), 1000, 8138).final_exact_accuracy()
        };
        let base = at(&[]);
        // A learning rate off the baseline's either way ends lower; a decay a little higher.
        assert!(at(&[("lr: 1e-4", "lr: 3.0e-05")]) < base);
        assert!(at(&[("lr: 1e-4", "lr: 3.0e-04")]) < base);
        let decayed = at(&[("lr: 1e-4", "lr: 1e-4\nlr_min_ratio: 0.1")]);
        assert!(
            decayed > base && decayed - base < 0.02,
            "{decayed} vs {base}"
        );
        // The square-root rule: batch 1536 at lr 5e-5 is the baseline's rate.
        let scaled = at(&[
            ("global_batch_size: 6144", "global_batch_size: 1536"),
            ("lr: 1e-4", "lr: 5.0e-05"),
        ]);
        assert!((scaled - base).abs() < 1e-9);
        assert!(at(&[("lr: 1e-4", "lr: 1e-4\nema: false")]) < base);
        assert!(at(&[("lr: 1e-4", "lr: 1e-4\nbeta2: 0.999")]) < base);
    }

    #[test]
    fn the_config_may_set_the_final_accuracy() {
        let total = 8138;
        let set = |accuracy: f64| {
            let config = config_with(&[(
                "lr: 1e-4",
                &format!("lr: 1e-4\nsim:\n  final_accuracy: {accuracy}"),
            )]);
            Curves::new(SHA_A, &config, 1000, total)
        };
        let (low, high) = (set(0.6), set(0.65));
        assert_eq!(value(&low.eval(total), "eval/exact_accuracy"), 0.6);
        assert_eq!(value(&high.eval(total), "eval/exact_accuracy"), 0.65);
        // A monotone shape: better at every evaluation, loss lower, and the lower run stays
        // lower from its first evaluation on.
        let evals: Vec<u64> = (1..=10).map(|i| i * total / 10).collect();
        for pair in evals.windows(2) {
            let (before, after) = (low.eval(pair[0]), low.eval(pair[1]));
            assert!(value(&after, "eval/exact_accuracy") > value(&before, "eval/exact_accuracy"));
            assert!(value(&after, "eval/loss") < value(&before, "eval/loss"));
        }
        for step in evals {
            let (l, h) = (low.eval(step), high.eval(step));
            assert!(value(&l, "eval/exact_accuracy") < value(&h, "eval/exact_accuracy"));
            assert!(value(&l, "eval/loss") > value(&h, "eval/loss"));
        }
    }

    #[test]
    fn noise_stays_in_range() {
        for step in 0..2000 {
            let n = unit_noise(42, step, 3);
            assert!((-1.0..=1.0).contains(&n));
        }
    }
}
