//! Whether a run should give its pod back: the divergence guard and the catalog's
//! `stop_when` rules, judged on each metrics batch as it is stored, in its transaction. The
//! judgements are the pure functions here; the facts come from the store
//! (`store/stop_rules.rs`). A verdict asks the worker to stop with the full grace, so the
//! trainer saves; the retry policy then makes the job `stopped` (policy.rs).

use podq_api::{lower_is_better, JobId, MetricStep, MetricsBatch};

use crate::catalog::stop_rules::{DivergenceGuard, StopRule, Test};
use crate::catalog::Catalog;
use crate::store::db::Conn;
use crate::store::stop_rules as facts;
use crate::store::StoreError;

/// What fired, at which step, on which value.
#[derive(Debug, Clone, PartialEq)]
pub struct Verdict {
    pub rule: String,
    pub metric: String,
    pub step: i64,
    pub value: f64,
}

impl Verdict {
    /// What the job, the stop order and the event say.
    pub fn message(&self) -> String {
        format!(
            "stopped by rule `{}`: {} was {} at step {}",
            self.rule,
            self.metric,
            podq_api::nonfinite::marker(self.value)
                .map(str::to_owned)
                .unwrap_or_else(|| format!("{}", self.value)),
            self.step
        )
    }
}

/// What judging a batch found: a verdict, if the run must stop, and the guard's count when
/// the batch moved it, for the caller to keep with the job (one statement for every batch
/// of a merged write: `facts::set_diverged_reports`).
#[derive(Debug, Default)]
pub struct Judgement {
    pub verdict: Option<Verdict>,
    pub streak: Option<Streak>,
}

/// Judges the run of `job_id` on the batch just stored, `job` as its fence read it.
pub async fn judge(
    conn: &mut Conn,
    catalog: &Catalog,
    job_id: JobId,
    job: &facts::Judged,
    batch: &MetricsBatch,
) -> Result<Judgement, StoreError> {
    // A pending eviction or suspension does not stop the judging: a verdict replaces it.
    let ruled = job.stop_request.as_deref() == Some("ruled");
    if job.ignore_stop_rules != 0 || job.cancel_requested || ruled {
        return Ok(Judgement::default());
    }
    let (moved, verdict) = if catalog.guard.enabled {
        let counted = Streak {
            reports: job.diverged_reports,
            step: job.diverged_step,
        };
        let (streak, verdict) = guard(&catalog.guard, counted, &batch.points);
        ((streak != counted).then_some(streak), verdict)
    } else {
        (None, None)
    };
    let verdict = match verdict {
        Some(verdict) => Some(verdict),
        None => judge_rules(conn, catalog, job_id, job, batch).await?,
    };
    Ok(Judgement {
        verdict,
        streak: moved,
    })
}

/// The experiment's `stop_when` rules on the batch.
async fn judge_rules(
    conn: &mut Conn,
    catalog: &Catalog,
    job_id: JobId,
    job: &facts::Judged,
    batch: &MetricsBatch,
) -> Result<Option<Verdict>, StoreError> {
    let rules = catalog
        .experiment(&job.experiment)
        .map(|e| e.stop_when.as_slice())
        .unwrap_or_default();
    for rule in rules {
        let reported: Vec<i64> = batch
            .points
            .iter()
            .filter(|p| p.values.contains_key(&rule.metric))
            .map(|p| p.step)
            .collect();
        let Some(&newest) = reported.iter().max() else {
            continue;
        };
        let verdict = match rule.test {
            Test::Threshold { at, .. } => {
                let Some(point) = at.step(job.total_steps) else {
                    continue;
                };
                if newest < point {
                    continue;
                }
                // Judged once: on the first value at or after the point, when this batch
                // brought it.
                match facts::first_at_or_after(conn, job_id, &rule.metric, point).await? {
                    Some((step, value)) if reported.contains(&step) => {
                        threshold(rule, step, crate::store::metrics::read(value))
                    }
                    _ => None,
                }
            }
            Test::NoImprovement { evaluations } => {
                let recent =
                    facts::newest(conn, job_id, &rule.metric, i64::from(evaluations)).await?;
                let Some(&(oldest, _)) = recent.last() else {
                    continue;
                };
                if recent.len() < evaluations as usize || !reported.contains(&recent[0].0) {
                    continue;
                }
                let lower = lower_is_better(&rule.metric);
                let best = facts::best_before(conn, job_id, &rule.metric, oldest, lower).await?;
                let recent: Vec<(i64, f64)> = recent
                    .into_iter()
                    .map(|(step, v)| (step, crate::store::metrics::read(v)))
                    .collect();
                no_improvement(rule, &recent, best, lower)
            }
        };
        if verdict.is_some() {
            return Ok(verdict);
        }
    }
    Ok(None)
}

/// The guard's count of bad reports in a row, and the step of the last report it counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Streak {
    pub reports: i64,
    pub step: Option<i64>,
}

/// The guard over a batch: each report (a step with a watched metric or the flag) past the
/// last one counted that is bad adds one to the count, a good one resets it; at `reports` in
/// a row it fires. A report at or below the last counted step is not counted again, so a
/// batch the worker sends twice (its answer lost) counts once.
pub fn guard(
    guard: &DivergenceGuard,
    mut streak: Streak,
    points: &[MetricStep],
) -> (Streak, Option<Verdict>) {
    let mut ordered: Vec<&MetricStep> = points
        .iter()
        .filter(|p| streak.step.is_none_or(|counted| p.step > counted))
        .collect();
    ordered.sort_by_key(|p| p.step);
    for point in ordered {
        let watched = guard
            .watch
            .iter()
            .filter_map(|name| point.values.get_key_value(name));
        let flag = guard
            .flag
            .as_ref()
            .and_then(|name| point.values.get_key_value(name));
        let mut seen = false;
        let mut bad = None;
        for (name, value) in watched {
            seen = true;
            if !value.is_finite() && bad.is_none() {
                bad = Some((name, *value));
            }
        }
        if let Some((name, value)) = flag {
            seen = true;
            if *value != 0.0 && bad.is_none() {
                bad = Some((name, *value));
            }
        }
        if !seen {
            continue;
        }
        streak.step = Some(point.step);
        match bad {
            None => streak.reports = 0,
            Some((name, value)) => {
                streak.reports += 1;
                if streak.reports >= i64::from(guard.reports) {
                    return (
                        streak,
                        Some(Verdict {
                            rule: guard.describe(),
                            metric: name.clone(),
                            step: point.step,
                            value,
                        }),
                    );
                }
            }
        }
    }
    (streak, None)
}

/// A threshold rule on the first value at or after its point. A NaN crosses no threshold:
/// the guard is what catches a diverged run.
pub fn threshold(rule: &StopRule, step: i64, value: f64) -> Option<Verdict> {
    let Test::Threshold {
        below,
        value: limit,
        ..
    } = rule.test
    else {
        return None;
    };
    let crossed = if below { value < limit } else { value > limit };
    crossed.then(|| Verdict {
        rule: rule.text.clone(),
        metric: rule.metric.clone(),
        step,
        value,
    })
}

/// A no-improvement rule: `recent` (newest first, as many as the rule's evaluations) holds
/// nothing better than `best`, the best value before them. A NaN improves on nothing.
pub fn no_improvement(
    rule: &StopRule,
    recent: &[(i64, f64)],
    best: Option<f64>,
    lower_is_better: bool,
) -> Option<Verdict> {
    let best = best?;
    let (newest_step, newest_value) = *recent.first()?;
    let improves = |v: f64| {
        if lower_is_better {
            v < best
        } else {
            v > best
        }
    };
    (!recent.iter().any(|(_, v)| improves(*v))).then(|| Verdict {
        rule: rule.text.clone(),
        metric: rule.metric.clone(),
        step: newest_step,
        value: newest_value,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn step(step: i64, values: &[(&str, f64)]) -> MetricStep {
        MetricStep {
            step,
            values: values.iter().map(|(k, v)| ((*k).to_owned(), *v)).collect(),
        }
    }

    fn counted(reports: i64, step: i64) -> Streak {
        Streak {
            reports,
            step: Some(step),
        }
    }

    #[test]
    fn the_guard_fires_on_the_kth_bad_report_in_a_row() {
        let guard = DivergenceGuard::default();
        let nan = f64::NAN;
        let batch = [
            step(10, &[("train/loss", 1.0), ("train/diverged", 0.0)]),
            step(20, &[("train/loss", nan)]),
            step(25, &[("eval/loss", nan)]), // not a report the guard watches
            step(30, &[("train/lm_loss", f64::INFINITY)]),
        ];
        assert_eq!(
            super::guard(&guard, Streak::default(), &batch),
            (counted(2, 30), None)
        );
        // The same batch sent again (its answer lost) counts once.
        assert_eq!(
            super::guard(&guard, counted(2, 30), &batch),
            (counted(2, 30), None)
        );
        // The count carries over to the next batch.
        let (streak, verdict) = super::guard(
            &guard,
            counted(2, 30),
            &[step(40, &[("train/diverged", 1.0)])],
        );
        assert_eq!(streak, counted(3, 40));
        let verdict = verdict.unwrap();
        assert_eq!(
            (verdict.metric.as_str(), verdict.step),
            ("train/diverged", 40)
        );
        assert!(verdict
            .message()
            .contains("train/diverged was 1 at step 40"));
        // A good report in between resets it.
        let mixed = [
            step(10, &[("train/loss", nan)]),
            step(20, &[("train/loss", nan)]),
            step(30, &[("train/loss", 0.5)]),
            step(40, &[("train/loss", nan)]),
        ];
        assert_eq!(
            super::guard(&guard, Streak::default(), &mixed),
            (counted(1, 40), None)
        );
        // Reports are judged in step order whatever order the batch holds them in.
        let (_, verdict) = super::guard(
            &guard,
            Streak::default(),
            &[
                step(30, &[("train/loss", nan)]),
                step(10, &[("train/loss", nan)]),
                step(20, &[("train/loss", nan)]),
            ],
        );
        assert_eq!(verdict.map(|v| v.step), Some(30));
    }

    #[test]
    fn thresholds_fire_only_when_crossed() {
        let below = StopRule::parse("eval/exact_accuracy below 0.02 at 25%").unwrap();
        assert_eq!(threshold(&below, 2100, 0.01).map(|v| v.step), Some(2100));
        assert_eq!(threshold(&below, 2100, 0.30), None);
        assert_eq!(threshold(&below, 2100, f64::NAN), None);
        let above = StopRule::parse("train/loss above 5 at step 100").unwrap();
        assert!(threshold(&above, 100, 7.0).is_some());
        assert!(threshold(&above, 100, f64::INFINITY).is_some());
    }

    #[test]
    fn no_improvement_compares_the_last_evaluations_with_the_best_before_them() {
        let loss = StopRule::parse("eval/loss not improved in 3 evaluations").unwrap();
        let flat = [(500, 0.9), (400, 0.8), (300, 0.85)];
        let verdict = no_improvement(&loss, &flat, Some(0.7), true).unwrap();
        assert_eq!((verdict.step, verdict.value), (500, 0.9));
        assert!(no_improvement(
            &loss,
            &[(500, 0.6), (400, 0.8), (300, 0.9)],
            Some(0.7),
            true
        )
        .is_none());
        assert!(no_improvement(&loss, &[(500, f64::NAN)], Some(0.7), true).is_some());
        assert!(no_improvement(&loss, &flat, None, true).is_none());
        let accuracy =
            StopRule::parse("eval/exact_accuracy not improved in 2 evaluations").unwrap();
        assert!(no_improvement(&accuracy, &[(20, 0.4), (10, 0.5)], Some(0.45), false).is_none());
        assert!(no_improvement(&accuracy, &[(20, 0.4), (10, 0.41)], Some(0.45), false).is_some());
    }
}
