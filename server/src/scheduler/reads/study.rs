//! A group's study: each experiment's varied parameters against what its run achieved.

use std::collections::BTreeMap;

use podq_api::{GroupStudy, JobId, RunState, StudyRow, StudyRung, StudyRungs};
use serde_json::Value;

use crate::catalog::rungs::{rung_step, Keep};
use crate::scheduler::{Result, Scheduler, SchedulerError};
use crate::store::{metrics, ms_to_datetime, rungs as rung_store, views};

/// Keys podq sets per experiment: they differ on every row and say nothing.
const IDENTITY_KEYS: [&str; 4] = [
    "run_name",
    "project_name",
    "checkpoint_path",
    "load_checkpoint",
];

impl Scheduler {
    pub async fn study(&self, group: &str) -> Result<GroupStudy> {
        let Some(group) = self.catalog.group(group) else {
            return Err(SchedulerError::UnknownGroup {
                name: group.to_owned(),
                known: self.catalog.groups.iter().map(|g| g.name.clone()).collect(),
            });
        };
        let experiments: Vec<_> = group
            .experiments
            .iter()
            .filter_map(|name| self.catalog.experiment(name))
            .collect();
        let docs = experiments
            .first()
            .map(|e| e.docs.clone())
            .unwrap_or_default();
        let baseline = group
            .baseline_row
            .as_deref()
            .and_then(|b| self.catalog.experiment(b));
        let mut base = BTreeMap::new();
        if let Some(b) = baseline {
            flatten("", &b.config, &mut base);
        }
        let watched = |name: &str| {
            name.starts_with("eval/") || docs.metrics_to_watch.iter().any(|m| m == name)
        };
        let mut db = self.store.read().await?;
        // The group's rungs: every value its runs were judged on and every standing decision,
        // read once for all its rows.
        let (rung_values, rung_decisions) = match &group.rungs {
            Some(_) => (
                rung_store::group_values(&mut db, &group.name).await?,
                rung_store::group_decisions(&mut db, &group.name).await?,
            ),
            None => (Vec::new(), Vec::new()),
        };
        let mut rows = Vec::with_capacity(experiments.len());
        for e in experiments {
            let mut config = BTreeMap::new();
            flatten("", &e.config, &mut config);
            let params = config
                .into_iter()
                .filter(|(k, v)| !IDENTITY_KEYS.contains(&k.as_str()) && base.get(k) != Some(v))
                .collect();
            let job = views::newest_job_of(&mut db, &e.name).await?;
            let run = match &job {
                Some(j) => match &j.same_as {
                    Some(run) => views::plan_job(&mut db, *run).await?,
                    None => Some(j.clone()),
                },
                None => None,
            };
            let (mut last, mut best) = (BTreeMap::new(), BTreeMap::new());
            if let Some(run) = &run {
                for (name, l, b) in metrics::final_and_best(&mut db, run.id, watched).await? {
                    last.insert(name.clone(), l);
                    best.insert(name, b);
                }
            }
            let counts = match &run {
                Some(run) => views::attempt_counts(&mut db, run.id).await?,
                None => (0, 0, None),
            };
            let rungs = match (&group.rungs, &run) {
                (Some(rungs), Some(run)) => run_at_rungs(
                    run.id,
                    &rungs.at,
                    run.total_steps,
                    &rung_values,
                    &rung_decisions,
                ),
                _ => Vec::new(),
            };
            rows.push(StudyRow {
                experiment: e.name.clone(),
                job_id: job.as_ref().map(|j| j.id),
                run_id: run.as_ref().map(|r| r.id),
                state: job.map_or(RunState::NotSubmitted, |j| j.state.into()),
                baseline: e.docs.is_baseline_row,
                params,
                last,
                best,
                attempts: counts.0,
                preemptions: counts.1,
                message: counts.2,
                rungs,
            });
        }
        Ok(GroupStudy {
            group: group.name.clone(),
            title: group.title.clone(),
            varies: docs.varies,
            baseline_row: group.baseline_row.clone(),
            metrics_to_watch: docs.metrics_to_watch,
            rows,
            rungs: group.rungs.as_ref().map(|rungs| StudyRungs {
                metric: rungs.metric.clone(),
                lower_is_better: rungs.lower_is_better,
                at: rungs.at.clone(),
                keep: self.auto_keeps.share(&group.name, rungs.keep),
                keep_auto: rungs.keep == Keep::Auto,
                description: rungs.describe(),
            }),
        })
    }
}

/// `run` at each rung it reached (a value recorded, or a decision taken), first rung first:
/// its value there and the standing decision. A run without a value at a rung sits at the
/// rung's step in its run (`at` of `total_steps`), when that is known.
fn run_at_rungs(
    run: JobId,
    at: &[f64],
    total_steps: Option<i64>,
    values: &[rung_store::RungValue],
    decisions: &[rung_store::RungDecision],
) -> Vec<StudyRung> {
    let mut reached: BTreeMap<i64, StudyRung> = BTreeMap::new();
    let blank = |rung: i64| StudyRung {
        rung: rung + 1,
        step: None,
        value: None,
        verdict: None,
        rank: None,
        of: None,
        decided_at: None,
        decided_by: None,
    };
    for v in values.iter().filter(|v| v.job_id == run) {
        let at = reached.entry(v.rung).or_insert_with(|| blank(v.rung));
        at.step = v.step;
        at.value = v.value;
    }
    for d in decisions.iter().filter(|d| d.job_id == run) {
        let at = reached.entry(d.rung).or_insert_with(|| blank(d.rung));
        at.verdict = Some(d.verdict.clone());
        at.rank = d.rank;
        at.of = d.of_runs;
        at.value = at.value.or(d.value);
        at.decided_at = Some(ms_to_datetime(d.decided_at));
        at.decided_by = Some(d.decided_by.clone());
    }
    for (rung, judged) in &mut reached {
        if judged.step.is_none() {
            let share = usize::try_from(*rung).ok().and_then(|k| at.get(k));
            judged.step = share
                .zip(total_steps.filter(|t| *t > 0))
                .map(|(share, total)| rung_step(*share, total));
        }
    }
    reached.into_values().collect()
}

/// `{"arch": {"hidden_size": 256}}` as `arch.hidden_size = 256`; lists stay whole.
pub(super) fn flatten(prefix: &str, value: &Value, out: &mut BTreeMap<String, Value>) {
    match value {
        Value::Object(map) => {
            for (k, v) in map {
                let key = if prefix.is_empty() {
                    k.clone()
                } else {
                    format!("{prefix}.{k}")
                };
                flatten(&key, v, out);
            }
        }
        other => {
            out.insert(prefix.to_owned(), other.clone());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_at_its_rungs_has_its_values_and_standing_decisions_first_rung_first() {
        let (run, other) = (JobId::new_random(), JobId::new_random());
        let value = |job, rung, step: Option<i64>, value| rung_store::RungValue {
            job_id: job,
            rung,
            step,
            value,
        };
        let values = [
            value(run, 1, None, None),
            value(run, 0, Some(251), Some(0.3)),
            value(other, 0, Some(250), Some(0.9)),
        ];
        let decision =
            |job, rung, verdict: &str, standing: Option<(i64, i64)>| rung_store::RungDecision {
                job_id: job,
                rung,
                verdict: verdict.to_owned(),
                rank: standing.map(|s| s.0),
                of_runs: standing.map(|s| s.1),
                value: None,
                decided_at: 1_700_000_000_000,
                decided_by: "podq".to_owned(),
            };
        let decisions = [
            decision(other, 0, "promoted", Some((1, 2))),
            decision(run, 1, "no_value", None),
            decision(run, 0, "promoted", Some((2, 2))),
        ];
        let at = run_at_rungs(run, &[0.25, 0.5], Some(1000), &values, &decisions);
        assert_eq!(at.len(), 2);
        assert_eq!(
            (
                at[0].rung,
                at[0].step,
                at[0].value,
                at[0].verdict.as_deref()
            ),
            (1, Some(251), Some(0.3), Some("promoted"))
        );
        assert_eq!((at[0].rank, at[0].of), (Some(2), Some(2)));
        // No value at rung 2: it sits at the rung's step in its run.
        assert_eq!(
            (
                at[1].rung,
                at[1].step,
                at[1].value,
                at[1].verdict.as_deref()
            ),
            (2, Some(500), None, Some("no_value"))
        );
        assert_eq!(at[1].decided_by.as_deref(), Some("podq"));
        assert!(run_at_rungs(
            JobId::new_random(),
            &[0.25],
            Some(1000),
            &values,
            &decisions
        )
        .is_empty());
    }
}
