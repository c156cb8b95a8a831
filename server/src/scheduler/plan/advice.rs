//! Checkpoint advice: the checkpoint interval that loses the least pod time to
//! saves and to work redone after preemptions, and what it would save against a run's
//! current interval. Pure: the caller brings the save cost, the pod's failure history and
//! the run's step time.
//!
//! The model is the classic one for checkpoint/restart under failures with a mean time
//! between failures M and a blocking save cost C:
//! - Young (1974), "A first order approximation to the optimum checkpoint interval": the
//!   interval τ ≈ sqrt(2·C·M);
//! - Daly (2006), "A higher order estimate of the optimum checkpoint interval for restart
//!   dumps" (Future Generation Computer Systems 22(3)): τ = sqrt(2CM)·[1 + ⅓·sqrt(C/2M) +
//!   (C/2M)/9] − C for C < 2M, else τ = M.
//!
//! The waste of an interval τ, per unit of useful time, to first order: C/τ spent saving,
//! plus (τ + C)/2 redone on average after each failure, i.e. (τ + C)/(2M).

use podq_api::trainer::config_checkpoint_interval;
use podq_api::CheckpointAdvice;

use crate::catalog::CheckpointInterval;

/// The failure rate podq assumes for a pod before it has history, unless the server is told
/// otherwise (`--prior-mtbf-h`): one preemption a day (the study's planning figure for
/// preemptible v4). It weighs as this many failures' worth of observation, so a
/// few real ones move the estimate.
pub const PRIOR_MTBF_S: f64 = 24.0 * 3600.0;
pub const PRIOR_WEIGHT_FAILURES: f64 = 1.0;

/// The save cost assumed for a run whose trainer has not reported a save's timing: a
/// TRM-sized model (~7 M parameters) saves in seconds.
pub const ASSUMED_SAVE_COST_S: f64 = 10.0;

/// The pod's mean time between failures: observed pod time over observed failures, with the
/// prior counted as `PRIOR_WEIGHT_FAILURES` failures over as many prior MTBFs (a
/// gamma-Poisson estimate: with no history it is the prior; with much it is the data).
pub fn mtbf_s(observed_pod_s: f64, failures: u64, prior_mtbf_s: f64) -> f64 {
    let time = observed_pod_s.max(0.0) + PRIOR_WEIGHT_FAILURES * prior_mtbf_s.max(1.0);
    let events = failures as f64 + PRIOR_WEIGHT_FAILURES;
    time / events
}

/// What podq knows of a run when it advises it.
pub struct RunFacts<'a> {
    pub config: &'a serde_json::Value,
    pub setting: CheckpointInterval,
    pub total_steps: Option<i64>,
    pub last_step: Option<i64>,
    pub est_hours: f64,
    /// Seconds per step of kept training, once the run has some.
    pub measured_step_s: Option<f64>,
    /// Its trainer's mean blocking save, once it reported one.
    pub reported_save_cost_s: Option<f64>,
    pub mtbf_s: f64,
}

/// The run's step time: measured once it trained, else its estimate over its steps.
pub fn step_s(facts: &RunFacts) -> Option<f64> {
    let total = facts.total_steps.filter(|t| *t > 0)? as f64;
    facts
        .measured_step_s
        .filter(|s| s.is_finite() && *s > 0.0)
        .or_else(|| Some(facts.est_hours * 3600.0 / total))
        .filter(|s| *s > 0.0)
}

/// The interval the run saves at, in steps, before any advice.
pub fn interval_steps_configured(facts: &RunFacts) -> Option<u64> {
    match facts.setting {
        CheckpointInterval::Steps(steps) => Some(steps),
        _ => config_checkpoint_interval(facts.config)
            .or(facts.total_steps.and_then(|t| u64::try_from(t).ok())),
    }
}

/// The Young/Daly advice for a run; `None` without a step count to advise in.
pub fn for_run(facts: &RunFacts) -> Option<CheckpointAdvice> {
    let step_s = step_s(facts)?;
    let total = facts.total_steps? as f64;
    let remaining_steps = (total - facts.last_step.unwrap_or(0) as f64).max(0.0);
    let remaining_hours = remaining_steps * step_s / 3600.0;
    let (save_cost_s, source) = match facts.reported_save_cost_s {
        Some(c) if c.is_finite() && c >= 0.0 => (c, "trainer"),
        _ => (ASSUMED_SAVE_COST_S, "assumed"),
    };
    let auto = facts.setting.is_auto();
    let advised = advise(1, step_s, save_cost_s, facts.mtbf_s, 0.0).interval_steps_advised;
    let now = if auto {
        advised
    } else {
        interval_steps_configured(facts)?
    };
    let advice = advise(now, step_s, save_cost_s, facts.mtbf_s, remaining_hours);
    Some(CheckpointAdvice {
        interval_steps_now: advice.interval_steps_now,
        interval_steps_advised: advice.interval_steps_advised,
        save_cost_s,
        mtbf_s: facts.mtbf_s,
        pod_hours_saved: advice.pod_hours_saved,
        auto,
        save_cost_source: source.to_owned(),
    })
}

/// Hours of work expected to be redone after interruptions over `remaining_hours` of
/// training saving every `interval_s`: (τ + C)/(2M) per hour, the second term of
/// [`waste_fraction`] (the saves themselves are already in the run's step time).
pub fn expected_redo_hours(
    remaining_hours: f64,
    interval_s: f64,
    save_cost_s: f64,
    mtbf_s: f64,
) -> f64 {
    let (t, c, m) = (interval_s.max(1.0), save_cost_s.max(0.0), mtbf_s.max(1.0));
    remaining_hours.max(0.0) * (t + c) / (2.0 * m)
}

/// Hours a run spends on a pod restarting after interruptions over `remaining_hours` of
/// training: one restart per MTBF, each costing what the type's measured recoveries spent
/// on a pod (stopping, setup, start-up, restore; the wait for a pod holds none).
pub fn expected_restart_hours(remaining_hours: f64, restart_on_pod_s: f64, mtbf_s: f64) -> f64 {
    remaining_hours.max(0.0) * restart_on_pod_s.max(0.0) / mtbf_s.max(1.0)
}

/// Daly's optimum interval between the ends of saves, in seconds.
pub fn optimal_interval_s(save_cost_s: f64, mtbf_s: f64) -> f64 {
    let (c, m) = (save_cost_s.max(0.0), mtbf_s.max(1.0));
    if c >= 2.0 * m {
        return m;
    }
    let ratio = c / (2.0 * m);
    ((2.0 * c * m).sqrt() * (1.0 + ratio.sqrt() / 3.0 + ratio / 9.0) - c).max(c.max(1.0))
}

/// Pod time lost per unit of useful time with saves every `interval_s` (first order).
pub fn waste_fraction(interval_s: f64, save_cost_s: f64, mtbf_s: f64) -> f64 {
    let (t, c, m) = (interval_s.max(1.0), save_cost_s.max(0.0), mtbf_s.max(1.0));
    c / t + (t + c) / (2.0 * m)
}

/// What advising a run comes to.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Advice {
    pub interval_steps_now: u64,
    pub interval_steps_advised: u64,
    pub save_cost_s: f64,
    pub mtbf_s: f64,
    /// Over the run's remaining useful hours, at its current interval against the advised.
    pub pod_hours_saved: f64,
}

/// Advice for a run saving every `interval_steps_now` steps of `step_s` seconds, with
/// `remaining_hours` of useful training left.
pub fn advise(
    interval_steps_now: u64,
    step_s: f64,
    save_cost_s: f64,
    mtbf_s: f64,
    remaining_hours: f64,
) -> Advice {
    let step_s = step_s.max(1e-6);
    let advised_s = optimal_interval_s(save_cost_s, mtbf_s);
    let interval_steps_advised = ((advised_s / step_s).round() as u64).max(1);
    let now_s = interval_steps_now.max(1) as f64 * step_s;
    let advised_s = interval_steps_advised as f64 * step_s;
    let saved = remaining_hours.max(0.0)
        * (waste_fraction(now_s, save_cost_s, mtbf_s)
            - waste_fraction(advised_s, save_cost_s, mtbf_s));
    Advice {
        interval_steps_now,
        interval_steps_advised,
        save_cost_s,
        mtbf_s,
        pod_hours_saved: saved.max(0.0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn restarts_cost_their_measured_time_once_per_mtbf() {
        // 100 h to go, an interruption every 10 h, 6 minutes on a pod each: an hour.
        assert!((expected_restart_hours(100.0, 360.0, 36_000.0) - 1.0).abs() < 1e-9);
        assert_eq!(expected_restart_hours(0.0, 360.0, 36_000.0), 0.0);
        assert_eq!(expected_restart_hours(100.0, -5.0, 36_000.0), 0.0);
    }

    #[test]
    fn youngs_figure_for_the_study_a_ten_second_save_and_a_preemption_a_day() {
        // sqrt(2 · 10 s · 86,400 s) = 1,315 s, about 22 minutes; Daly's
        // correction is a few seconds at C/M this small.
        let tau = optimal_interval_s(10.0, 86_400.0);
        assert!((1_300.0..1_330.0).contains(&tau), "{tau}");
        // Saving every ~4 hours (the suite's eval interval) wastes far more.
        let every_4h = waste_fraction(4.0 * 3600.0, 10.0, 86_400.0);
        let optimal = waste_fraction(tau, 10.0, 86_400.0);
        assert!(every_4h > 5.0 * optimal, "{every_4h} vs {optimal}");
    }

    #[test]
    fn the_optimum_is_the_least_waste_around_it() {
        let (c, m) = (30.0, 20_000.0);
        let tau = optimal_interval_s(c, m);
        let at = waste_fraction(tau, c, m);
        for factor in [0.5, 0.8, 1.25, 2.0] {
            assert!(waste_fraction(tau * factor, c, m) >= at - 1e-6, "{factor}");
        }
        // A save as costly as the failures are rare: save once per MTBF.
        assert_eq!(optimal_interval_s(50_000.0, 20_000.0), 20_000.0);
    }

    #[test]
    fn the_mtbf_starts_at_the_prior_and_follows_the_history() {
        assert_eq!(mtbf_s(0.0, 0, PRIOR_MTBF_S), PRIOR_MTBF_S);
        // Ten days of pod time and 20 preemptions: close to half a day.
        let m = mtbf_s(10.0 * 86_400.0, 20, PRIOR_MTBF_S);
        assert!((0.5 * 86_400.0..0.6 * 86_400.0).contains(&m), "{m}");
    }

    #[test]
    fn advice_for_the_suites_runs_saves_tens_of_pod_hours_over_the_grant() {
        // 40-hour runs of 5000-epoch evals (~4 h apart), 10 s saves, one preemption a day,
        // 720 pod-hours of grant: the "roughly 50 pod-hours" the study's plan expected.
        let step_s = 40.0 * 3600.0 / 50_000.0;
        let now_steps = (4.0 * 3600.0 / step_s) as u64;
        let advice = advise(now_steps, step_s, 10.0, 86_400.0, 720.0);
        assert!(advice.interval_steps_advised < now_steps / 5, "{advice:?}");
        assert!((30.0..80.0).contains(&advice.pod_hours_saved), "{advice:?}");
        // Already at the optimum: nothing to save.
        let at = advise(advice.interval_steps_advised, step_s, 10.0, 86_400.0, 720.0);
        assert!(at.pod_hours_saved < 0.01, "{at:?}");
    }

    fn baseline() -> serde_json::Value {
        serde_json::json!({
            "epochs": 50_000, "eval_interval": 5_000, "global_batch_size": 6144,
            "data_paths": ["gs://b/data/sudoku-extreme-1k-aug-1000"],
            "checkpoint_every_eval": true,
        })
    }

    #[test]
    fn a_run_is_advised_from_its_config_its_estimate_and_the_pod() {
        let config = baseline();
        let facts = RunFacts {
            config: &config,
            setting: CheckpointInterval::Config,
            total_steps: Some(8138),
            last_step: None,
            est_hours: 40.0,
            measured_step_s: None,
            reported_save_cost_s: None,
            mtbf_s: PRIOR_MTBF_S,
        };
        let advice = for_run(&facts).unwrap();
        // Every eval: 813 steps of 17.7 s, four hours; advised ~22 minutes.
        assert_eq!(advice.interval_steps_now, 813);
        assert!(
            (70..80).contains(&advice.interval_steps_advised),
            "{advice:?}"
        );
        assert_eq!(advice.save_cost_source, "assumed");
        assert!(advice.pod_hours_saved > 2.0, "{advice:?}");
        // Under `auto` the run already follows the advice: nothing left to save.
        let auto = for_run(&RunFacts {
            setting: CheckpointInterval::Auto,
            reported_save_cost_s: Some(2.0),
            ..facts
        })
        .unwrap();
        assert_eq!(auto.interval_steps_now, auto.interval_steps_advised);
        assert_eq!(auto.pod_hours_saved, 0.0);
        assert_eq!(auto.save_cost_source, "trainer");
    }
}
