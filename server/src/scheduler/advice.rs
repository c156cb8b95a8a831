//! Checkpoint advice (issue 19): the checkpoint interval that loses the least pod time to
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

/// The failure rate podq assumes for a pod before it has history: one preemption a day
/// (the study's planning figure for preemptible v4, issue 19). It weighs as this many
/// failures' worth of observation, so a few real ones move the estimate.
pub const PRIOR_MTBF_S: f64 = 24.0 * 3600.0;
pub const PRIOR_WEIGHT_FAILURES: f64 = 1.0;

/// The pod's mean time between failures: observed pod time over observed failures, with the
/// prior counted as `PRIOR_WEIGHT_FAILURES` failures over as many prior MTBFs (a
/// gamma-Poisson estimate: with no history it is the prior; with much it is the data).
pub fn mtbf_s(observed_pod_s: f64, failures: u64) -> f64 {
    let time = observed_pod_s.max(0.0) + PRIOR_WEIGHT_FAILURES * PRIOR_MTBF_S;
    let events = failures as f64 + PRIOR_WEIGHT_FAILURES;
    time / events
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
    fn youngs_figure_for_the_study_a_ten_second_save_and_a_preemption_a_day() {
        // sqrt(2 · 10 s · 86,400 s) = 1,315 s, about 22 minutes (issue 19); Daly's
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
        assert_eq!(mtbf_s(0.0, 0), PRIOR_MTBF_S);
        // Ten days of pod time and 20 preemptions: close to half a day.
        let m = mtbf_s(10.0 * 86_400.0, 20);
        assert!((0.5 * 86_400.0..0.6 * 86_400.0).contains(&m), "{m}");
    }

    #[test]
    fn advice_for_the_suites_runs_saves_tens_of_pod_hours_over_the_grant() {
        // 40-hour runs of 5000-epoch evals (~4 h apart), 10 s saves, one preemption a day,
        // 720 pod-hours of grant: the "roughly 50 pod-hours".
        let step_s = 40.0 * 3600.0 / 50_000.0;
        let now_steps = (4.0 * 3600.0 / step_s) as u64;
        let advice = advise(now_steps, step_s, 10.0, 86_400.0, 720.0);
        assert!(advice.interval_steps_advised < now_steps / 5, "{advice:?}");
        assert!((30.0..80.0).contains(&advice.pod_hours_saved), "{advice:?}");
        // Already at the optimum: nothing to save.
        let at = advise(advice.interval_steps_advised, step_s, 10.0, 86_400.0, 720.0);
        assert!(at.pod_hours_saved < 0.01, "{at:?}");
    }
}
