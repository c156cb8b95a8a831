//! Where the pod time went and the checkpoint interval that would waste the least of it:
//! the reads behind `GET /pod-time`, the job detail's split and advice, and the interval an
//! attempt under `checkpoint_interval: auto` is given.

use futures::FutureExt;
use podq_api::JobId;
use podq_api::{CheckpointAdvice, Goodput, PodTimeReport};

use super::advice::{self, RunFacts};
use crate::catalog::CheckpointInterval;
use crate::scheduler::{Result, Scheduler};
use crate::store::jobs::{self, AdviceInputs};
use crate::store::{goodput, pod_time, stop_rules, JobRow, StoreError};

impl Scheduler {
    /// The run's checkpoint setting, as the catalog says now: a change to `suite.yaml`
    /// reaches the run's next attempt.
    pub(in crate::scheduler) fn interval_setting(&self, experiment: &str) -> CheckpointInterval {
        self.catalog
            .experiment(experiment)
            .map_or(CheckpointInterval::Config, |e| e.checkpoint_interval)
    }

    /// Young/Daly advice for a run that has not ended.
    pub(in crate::scheduler) fn advice(
        &self,
        job: &JobRow,
        goodput: &Goodput,
        inputs: &AdviceInputs,
    ) -> Option<CheckpointAdvice> {
        let state = job.state;
        if state.is_terminal() {
            return None;
        }
        let config = self
            .catalog
            .experiment(&job.experiment)
            .map(|e| e.config.clone())?;
        let (observed_s, interruptions) = inputs.history;
        advice::for_run(&RunFacts {
            config: &config,
            setting: self.interval_setting(&job.experiment),
            total_steps: job.total_steps,
            last_step: job.last_step,
            est_hours: job.est_hours,
            measured_step_s: (goodput.kept_steps > 0)
                .then(|| goodput.kept_s / goodput.kept_steps as f64),
            reported_save_cost_s: inputs.reported_save_cost_s,
            mtbf_s: advice::mtbf_s(
                observed_s,
                interruptions,
                self.config.prior_mtbf.as_secs_f64(),
            ),
        })
    }

    /// The interval to give a new attempt of `job_id`: the advised one under `auto`, the
    /// set one under a number of steps, none when the trainer keeps its own.
    pub(in crate::scheduler) async fn interval_for_attempt(
        &self,
        job_id: JobId,
        experiment: &str,
    ) -> Result<Option<u64>> {
        match self.interval_setting(experiment) {
            CheckpointInterval::Config => Ok(None),
            CheckpointInterval::Steps(steps) => Ok(Some(steps)),
            CheckpointInterval::Auto => {
                let id = job_id.to_owned();
                let mut conn = self.store.read().await?;
                let Some(job) = jobs::get_job(&mut conn, id).await? else {
                    return Ok(None);
                };
                let run = goodput::of_run(&mut conn, id).await?;
                let inputs = jobs::advice_inputs(&mut conn, id, &job.accelerator).await?;
                Ok(self
                    .advice(&job, &run, &inputs)
                    .map(|a| a.interval_steps_advised))
            }
        }
    }

    /// Pod time for the grant, each pod and each group, up to now: one read transaction, so
    /// an attempt settling meanwhile is counted once.
    pub async fn pod_time(&self) -> Result<PodTimeReport> {
        let (totals, (saved, stopped), (saved_by_rungs, pruned)) = self
            .store
            .read_snapshot(|conn| {
                async move {
                    let totals = pod_time::totals(conn).await?;
                    let stopping = stop_rules::saved_by_stopping(conn).await?;
                    let rungs = crate::store::rungs::saved_hours(conn).await?;
                    Ok::<_, StoreError>((totals, stopping, rungs))
                }
                .boxed()
            })
            .await?;
        Ok(PodTimeReport {
            grant: totals.all,
            pods: totals.pods,
            groups: totals.groups,
            saved_by_stopping: podq_api::SavedByStopping {
                pod_hours: saved,
                runs: stopped,
            },
            saved_by_rungs: podq_api::SavedByStopping {
                pod_hours: saved_by_rungs,
                runs: pruned,
            },
        })
    }
}

/// The plan's expected waste over the runs still to go, at their checkpoint intervals and at
/// the advised ones.
#[derive(Debug, Default)]
pub(in crate::scheduler) struct ExpectedWaste {
    pub configured: f64,
    pub advised: f64,
    /// Per run, what its hours change by at the advised interval.
    pub advised_change: Vec<f64>,
}

impl Scheduler {
    /// Adds to each run still to go the work it is expected to redo after interruptions
    /// (Young/Daly to first order: (τ + C)/2 per interruption, one per MTBF of its pod type)
    /// and the restarts themselves at what its type's recoveries measured on a pod
    /// (`store/recoveries.rs`; none before any was measured), and notes its checkpoint
    /// advice.
    pub(in crate::scheduler) async fn expect_waste(
        &self,
        runs: &mut [super::planner::Run],
    ) -> Result<ExpectedWaste> {
        use super::planner::Phase;
        // Before the connection below is taken: the records may need one of their own.
        let restarts = crate::store::recoveries::medians_by_type(&self.recent_recoveries().await?);
        let mut db = self.store.read().await?;
        let prior = self.config.prior_mtbf.as_secs_f64();
        let mut mtbf_of: std::collections::HashMap<String, f64> = Default::default();
        let mut waste = ExpectedWaste {
            advised_change: vec![0.0; runs.len()],
            ..ExpectedWaste::default()
        };
        for (i, run) in runs.iter_mut().enumerate() {
            if !matches!(run.phase, Phase::OnPod | Phase::Waiting) {
                continue;
            }
            let Some(experiment) = self.catalog.experiment(&run.experiment) else {
                continue;
            };
            let Some(total) = podq_api::trainer::total_steps_of_config(&experiment.config)
                .and_then(|t| i64::try_from(t).ok())
                .filter(|t| *t > 0)
            else {
                continue;
            };
            let mtbf_s = match mtbf_of.get(&run.accelerator) {
                Some(m) => *m,
                None => {
                    let (observed, n) =
                        pod_time::interruption_history(&mut db, &run.accelerator).await?;
                    let m = advice::mtbf_s(observed, n, prior);
                    mtbf_of.insert(run.accelerator.clone(), m);
                    m
                }
            };
            let reported_save_cost_s = match run.job_id {
                Some(id) => pod_time::reported_save_cost(&mut db, id).await?,
                None => None,
            };
            let estimate_step_s = experiment.est_hours * 3600.0 / total as f64;
            let remaining_steps = (run.remaining_hours * 3600.0 / estimate_step_s).round() as i64;
            let facts = RunFacts {
                config: &experiment.config,
                setting: experiment.checkpoint_interval,
                total_steps: Some(total),
                last_step: Some((total - remaining_steps).max(0)),
                est_hours: experiment.est_hours,
                measured_step_s: None,
                reported_save_cost_s,
                mtbf_s,
            };
            let Some(advice) = advice::for_run(&facts) else {
                continue;
            };
            let (c, m) = (advice.save_cost_s, advice.mtbf_s);
            let hours = run.remaining_hours;
            let now_s = advice.interval_steps_now as f64 * estimate_step_s;
            let advised_s = advice.interval_steps_advised as f64 * estimate_step_s;
            let restart = restarts.get(&run.accelerator).map_or(0.0, |r| {
                advice::expected_restart_hours(hours, r.on_pod_s, m)
            });
            let redo_now = advice::expected_redo_hours(hours, now_s, c, m) + restart;
            // At the advised interval the run also saves more (or less) often.
            let at_advised = advice::expected_redo_hours(hours, advised_s, c, m)
                + restart
                + hours * (c / advised_s.max(1.0) - c / now_s.max(1.0));
            run.expected_waste_hours = redo_now;
            run.remaining_hours += redo_now;
            run.checkpoint_advice = Some(advice);
            waste.configured += redo_now;
            waste.advised += at_advised;
            waste.advised_change[i] = at_advised - redo_now;
        }
        Ok(waste)
    }
}
