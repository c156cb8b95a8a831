//! Results out: a group's or the suite's results as one table, made of the study's
//! rows (`study.rs`: the same experiments, runs, varied keys and metric values), and a run's
//! metric series read whole, page by page, for a download.

use std::collections::{BTreeMap, BTreeSet};

use podq_api::{GroupStudy, JobId, JsonNumber, ResultRow, Results};
use tokio::sync::mpsc;

use super::study::flatten;
use crate::names;
use crate::scheduler::{Result, Scheduler, SchedulerError};
use crate::store::{jobs, metric_export, pod_time};

/// What `metrics.csv` and `metrics.ndjson` take: the series (`None`: all) and a step range.
#[derive(Debug, Clone, Default)]
pub struct MetricsExportQuery {
    pub metrics: Option<Vec<String>>,
    pub from_step: Option<i64>,
    pub to_step: Option<i64>,
}

/// One page of an export: points of one series, by step.
#[derive(Debug)]
pub struct ExportPage {
    pub name: String,
    pub points: Vec<(i64, f64)>,
}

/// A download under way: the job's experiment (for the file's name) and its pages, by name
/// then step, as a task reads them. The task reads a page only when the previous one has
/// been taken (the channel holds one), each on a connection borrowed for that query alone,
/// so a slow client holds neither a connection nor more than two pages of memory, and one
/// that goes away stops the task.
pub struct MetricsExport {
    pub experiment: String,
    pub pages: mpsc::Receiver<Result<ExportPage>>,
}

impl Scheduler {
    /// The results of `group`, or of every group of the catalog (in catalog order).
    pub async fn results(&self, group: Option<&str>) -> Result<Results> {
        let groups: Vec<String> = match group {
            Some(g) => vec![g.to_owned()],
            None => self.catalog.groups.iter().map(|g| g.name.clone()).collect(),
        };
        let mut studies: Vec<GroupStudy> = Vec::with_capacity(groups.len());
        for g in &groups {
            studies.push(self.study(g).await?);
        }
        // The varied keys are the study's (its table's columns), for the suite every group's.
        let params: BTreeSet<String> = studies
            .iter()
            .flat_map(|s| s.rows.iter().flat_map(|r| r.params.keys().cloned()))
            .collect();
        let mut metrics = BTreeSet::new();
        let mut rows = Vec::new();
        let mut db = self.store.read().await?;
        for study in studies {
            for row in study.rows {
                let mut config = BTreeMap::new();
                if let Some(e) = self.catalog.experiment(&row.experiment) {
                    flatten("", &e.config, &mut config);
                }
                let eval = |m: &BTreeMap<String, podq_api::MetricValue>| {
                    m.iter()
                        .filter(|(name, _)| name.starts_with("eval/"))
                        .map(|(name, v)| (name.clone(), JsonNumber(v.value)))
                        .collect::<BTreeMap<_, _>>()
                };
                let (last, best) = (eval(&row.last), eval(&row.best));
                metrics.extend(last.keys().cloned());
                let (mut steps, mut pod_hours, mut accelerators) = (None, None, None);
                if let Some(run) = row.run_id {
                    let used = jobs::attempt_accelerators(&mut db, run).await?;
                    accelerators = (!used.is_empty()).then(|| used.join(" "));
                    steps = jobs::get_job(&mut db, run).await?.and_then(|j| j.last_step);
                    let seconds: f64 = pod_time::of_run(&mut db, run)
                        .await?
                        .values()
                        .map(|t| t.total_s)
                        .sum();
                    pod_hours = Some(seconds / 3600.0);
                }
                // The last rung decided, and its decision.
                let decided = row.rungs.iter().rev().find(|r| r.verdict.is_some());
                rows.push(ResultRow {
                    group: study.group.clone(),
                    params: params
                        .iter()
                        .filter_map(|k| config.get(k).map(|v| (k.clone(), v.clone())))
                        .collect(),
                    last,
                    best,
                    steps,
                    pod_hours,
                    attempts: row.job_id.map(|_| row.attempts),
                    accelerators,
                    rung: decided.map(|r| r.rung),
                    rung_decision: decided.and_then(|r| r.verdict.clone()),
                    job_id: row.job_id,
                    state: row.state,
                    experiment: row.experiment,
                });
            }
        }
        Ok(Results {
            group: group.map(str::to_owned),
            params: params.into_iter().collect(),
            metrics: metrics.into_iter().collect(),
            rows,
        })
    }

    /// A run's series (those `query` names, or all) within its step range, by name then
    /// step, read page by page by a task of its own: see [`MetricsExport`]. A job, metric
    /// or range that is wrong is refused here, before anything is sent.
    pub async fn metrics_export(
        &self,
        id: JobId,
        query: MetricsExportQuery,
    ) -> Result<MetricsExport> {
        let from = query.from_step.unwrap_or(i64::MIN);
        let to = query.to_step.unwrap_or(i64::MAX);
        if from > to {
            return Err(SchedulerError::unprocessable(
                "invalid_range",
                format!("from_step ({from}) is after to_step ({to})"),
            ));
        }
        let (experiment, mut series) = {
            let mut db = self.store.read().await?;
            let job = jobs::get_job(&mut db, id)
                .await?
                .ok_or_else(|| SchedulerError::UnknownJob(id))?;
            let series = metric_export::series_of(&mut db, job.run_id).await?;
            (job.experiment, series)
        };
        if let Some(wanted) = &query.metrics {
            let known: Vec<&str> = series.iter().map(|(_, n)| n.as_str()).collect();
            if let Some(unknown) = wanted.iter().find(|w| !known.contains(&w.as_str())) {
                let suggestions = names::did_you_mean(unknown, known.iter().copied());
                return Err(SchedulerError::missing(
                    "unknown_metric",
                    format!(
                        "job {id} has no series `{unknown}`{}",
                        names::phrase(&suggestions)
                    ),
                )
                .with_details(serde_json::json!({
                    "metric": unknown,
                    "did_you_mean": suggestions,
                    "metrics": known,
                })));
            }
            series.retain(|(_, name)| wanted.contains(name));
        }
        let (tx, pages) = mpsc::channel(1);
        let store = self.store.clone();
        tokio::spawn(async move {
            for (series_id, name) in series {
                let mut start = from;
                loop {
                    let page = async {
                        let mut db = store.read().await?;
                        metric_export::page(&mut db, series_id, start, to, metric_export::PAGE_ROWS)
                            .await
                    };
                    let points: Vec<(i64, f64)> = match page.await {
                        Ok(points) => points,
                        Err(e) => {
                            let _ = tx.send(Err(SchedulerError::from(e))).await;
                            return;
                        }
                    };
                    let last = points.last().map(|(step, _)| *step);
                    let full = points.len() as i64 == metric_export::PAGE_ROWS;
                    if !points.is_empty() {
                        let page = ExportPage {
                            name: name.clone(),
                            points,
                        };
                        if tx.send(Ok(page)).await.is_err() {
                            return; // the client went away
                        }
                    }
                    match last {
                        Some(step) if full && step < to => start = step + 1,
                        _ => break,
                    }
                }
            }
        });
        Ok(MetricsExport { experiment, pages })
    }
}
