//! A group's study: each experiment's varied parameters against what its run achieved.

use std::collections::BTreeMap;

use podq_api::{GroupStudy, RunState, StudyRow};
use serde_json::Value;

use crate::scheduler::{Result, Scheduler, SchedulerError};
use crate::store::{metrics, views};

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
            });
        }
        Ok(GroupStudy {
            group: group.name.clone(),
            title: group.title.clone(),
            varies: docs.varies,
            baseline_row: group.baseline_row.clone(),
            metrics_to_watch: docs.metrics_to_watch,
            rows,
        })
    }
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
