//! Rates and time to go: the one place podq turns steps and estimates into hours.

/// Steps per second over an attempt, from its first reported step to its latest, when
/// measurable.
pub fn step_rate(
    first_step: Option<i64>,
    first_step_at_ms: Option<i64>,
    end_step: Option<i64>,
    now_ms: i64,
) -> Option<f64> {
    let (first, at, end) = (first_step?, first_step_at_ms?, end_step?);
    let elapsed_s = (now_ms - at) as f64 / 1000.0;
    (end > first && elapsed_s > 0.0).then(|| (end - first) as f64 / elapsed_s)
}

/// What is known about a run's progress.
#[derive(Debug, Clone, Copy, Default)]
pub struct Progress {
    /// The plan's estimate of the whole run, in pod-hours.
    pub est_hours: f64,
    pub step: Option<i64>,
    pub total_steps: Option<i64>,
    /// The running attempt's measured rate, if any.
    pub steps_per_s: Option<f64>,
}

/// Pod-hours still to go: at the measured rate when there is one, else the estimate less
/// the share of steps already done.
pub fn remaining_hours(p: Progress) -> f64 {
    if let (Some(rate), Some(step), Some(total)) = (p.steps_per_s, p.step, p.total_steps) {
        if rate > 0.0 {
            return (total - step).max(0) as f64 / rate / 3600.0;
        }
    }
    let fraction_left = match (p.step, p.total_steps) {
        (Some(step), Some(total)) if total > 0 => {
            (1.0 - step as f64 / total as f64).clamp(0.0, 1.0)
        }
        _ => 1.0,
    };
    p.est_hours * fraction_left
}

/// A run's measured step rate (over its latest attempt that reported steps, up to its end or
/// `now_ms`) and its pod-hours to go: the plan's figure for a run, and what a stop rule saves
/// when it ends one.
pub fn time_to_go(job: &crate::store::views::PlanJob, now_ms: i64) -> (Option<f64>, f64) {
    let rate = step_rate(
        job.first_step,
        job.first_step_at,
        job.end_step,
        job.ended_at.unwrap_or(now_ms),
    );
    let hours = remaining_hours(Progress {
        est_hours: job.est_hours,
        step: job.last_step,
        total_steps: job.total_steps,
        steps_per_s: rate,
    });
    (rate, hours)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_measured_rate_beats_the_estimate() {
        let p = Progress {
            est_hours: 40.0,
            step: Some(1_000),
            total_steps: Some(10_000),
            steps_per_s: Some(1.0),
        };
        assert!((remaining_hours(p) - 2.5).abs() < 1e-9);
        let unmeasured = Progress {
            steps_per_s: None,
            ..p
        };
        assert!((remaining_hours(unmeasured) - 36.0).abs() < 1e-9);
    }

    #[test]
    fn a_rate_needs_two_steps_and_time() {
        assert_eq!(step_rate(Some(10), Some(0), Some(10), 5_000), None);
        assert_eq!(step_rate(Some(10), Some(0), Some(20), 5_000), Some(2.0));
        assert_eq!(step_rate(None, Some(0), Some(20), 5_000), None);
    }
}
