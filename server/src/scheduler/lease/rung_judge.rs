//! Rungs across a group, carried out (docs/operations/scheduling.md, "Rungs"): a run's value at each
//! rung is recorded as the metrics batch that brings it is stored, in its transaction; the
//! pure decisions (`scheduler/rungs.rs`) are then taken for the run's whole group and carried
//! out in that same transaction, so a server killed mid-decision leaves no run both promoted
//! and pruned and loses no decision.
//!
//! A paused run is asked to stop with its full grace (the trainer saves) and ends `held`,
//! uncharged; a promotion puts it back in the queue, a prune ends it `stopped`, uncharged,
//! its checkpoints kept. A run still stopping when its siblings decide is settled once its
//! attempt ends (`settle_paused`).

use std::collections::BTreeMap;
use std::sync::Mutex;

use podq_api::{JobId, JobState, MetricsBatch};

use super::policy::StopRequest;
use crate::catalog::rungs::{Keep, Rungs};
use crate::catalog::Catalog;
use crate::scheduler::rungs::{decide, Decision, RunState, RungRun, Standing, Verdict};
use crate::store::db::Conn;
use crate::store::events::{insert_event, Actor};
use crate::store::stop_rules::{self as facts, Judged};
use crate::store::{jobs, rungs as store, StoreError};

/// The share the plan keeps past each rung of each `keep: auto` group: 1 (nothing pruned)
/// until the plan has chosen.
#[derive(Default)]
pub struct AutoKeeps(Mutex<BTreeMap<String, f64>>);

impl AutoKeeps {
    /// The share kept in `group`, whose rungs say `keep`.
    pub fn share(&self, group: &str, keep: Keep) -> f64 {
        match keep {
            Keep::Share(share) => share,
            Keep::Auto => self
                .0
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .get(group)
                .copied()
                .unwrap_or(1.0),
        }
    }

    /// The plan's choices, by group.
    pub fn set(&self, chosen: BTreeMap<String, f64>) {
        *self.0.lock().unwrap_or_else(|e| e.into_inner()) = chosen;
    }
}

/// Records the values at the rungs `job`'s batch brought, and decides its group if it did.
/// Answers the stop its worker is asked for when the run pauses at a rung.
pub async fn judge_batch(
    conn: &mut Conn,
    catalog: &Catalog,
    keeps: &AutoKeeps,
    job: JobId,
    judged: &Judged,
    batch: &MetricsBatch,
) -> Result<Option<String>, StoreError> {
    let ruled = judged.stop_request.as_deref() == Some(StopRequest::Ruled.as_str());
    if judged.ignore_stop_rules != 0 || judged.cancel_requested || ruled {
        return Ok(None);
    }
    let Some(rungs) = catalog
        .experiment(&judged.experiment)
        .and_then(|e| e.rungs.as_ref())
    else {
        return Ok(None);
    };
    let Some(total) = judged.total_steps.filter(|t| *t > 0) else {
        return Ok(None);
    };
    let Some(newest) = batch.points.iter().map(|p| p.step).max() else {
        return Ok(None);
    };
    let steps = rungs.steps(total);
    let reached = store::reached(conn, job).await?;
    let mut recorded = false;
    for (k, &step) in steps.iter().enumerate() {
        if reached.contains(&(k as i64)) {
            continue;
        }
        // Read from the store, not the batch: a value an earlier batch brought (before the
        // catalog gave the group rungs, say) counts as well.
        let value = if newest >= step {
            facts::first_at_or_after(conn, job, &rungs.metric, step)
                .await?
                .map(|(at, value)| (at, crate::store::metrics::read(value)))
        } else {
            None
        };
        // Past the next rung (or the end) with no value since this one: it never had one.
        let next = steps.get(k + 1).copied().unwrap_or(total);
        if value.is_none() && newest < next {
            break;
        }
        store::record_value(conn, job, k as i64, value).await?;
        recorded = true;
    }
    if !recorded {
        return Ok(None);
    }
    let Some(group) = store::group_of(conn, job).await? else {
        return Ok(None);
    };
    decide_group(conn, catalog, keeps, &group, Some(job)).await
}

/// Takes the decisions `group`'s runs now allow and carries them out. Answers the stop
/// `current`'s worker is asked for when `current` (on its pod) pauses.
pub async fn decide_group(
    conn: &mut Conn,
    catalog: &Catalog,
    keeps: &AutoKeeps,
    group: &str,
    current: Option<JobId>,
) -> Result<Option<String>, StoreError> {
    let Some(rungs) = catalog.group(group).and_then(|g| g.rungs.as_ref()) else {
        return Ok(None);
    };
    let baseline = catalog.group(group).and_then(|g| g.baseline_row.clone());
    let jobs = store::group_jobs(conn, group).await?;
    let values = store::group_values(conn, group).await?;
    let earlier = store::group_decisions(conn, group).await?;
    let members: std::collections::BTreeSet<JobId> = jobs.iter().map(|j| j.id).collect();
    let runs: Vec<RungRun<JobId>> = jobs
        .iter()
        .map(|job| {
            let mut mine: Vec<&store::RungValue> =
                values.iter().filter(|v| v.job_id == job.id).collect();
            mine.sort_by_key(|v| v.rung);
            RungRun {
                id: job.id,
                baseline: baseline.as_deref() == Some(job.experiment.as_str()),
                link: job.same_as.unwrap_or(job.id),
                // A run whose rungs were lifted, or whose training is another group's (linked
                // to a job outside this one), holds none of this group's rungs open: it is
                // judged here at none.
                state: if job.ignore_stop_rules != 0
                    || job.same_as.is_some_and(|run| !members.contains(&run))
                {
                    RunState::Ended
                } else {
                    run_state(job.state)
                },
                values: mine
                    .iter()
                    .map(|v| v.step.map(|_| nan_if_none(v.value)))
                    .collect(),
            }
        })
        .collect();
    let earlier: Vec<Decision<JobId>> = earlier.iter().filter_map(from_row).collect();
    let keep = keeps.share(group, rungs.keep);
    let mut stop = None;
    for decision in decide(rungs, keep, &runs, &earlier) {
        let job = decision.run;
        let state = jobs.iter().find(|j| j.id == job).map(|j| j.state);
        let asked = carry_out(conn, rungs, &decision, state, current == Some(job)).await?;
        stop = stop.or(asked);
    }
    Ok(stop)
}

/// Records `decision` with its event, and changes its run as it says. Answers the stop
/// asked of the run on the pod the batch came from.
async fn carry_out(
    conn: &mut Conn,
    rungs: &Rungs,
    decision: &Decision<JobId>,
    state: Option<JobState>,
    current: bool,
) -> Result<Option<String>, StoreError> {
    let job = decision.run;
    let reason = decision.reason(&rungs.metric);
    let (verdict, kind, standing) = match decision.verdict {
        Verdict::Promote(at) => ("promoted", "rung_promoted", Some(at)),
        Verdict::Pause(at) => ("paused", "rung_paused", Some(at)),
        Verdict::Prune(at) => ("pruned", "rung_pruned", Some(at)),
        Verdict::NoValue => ("no_value", "rung_unjudged", None),
    };
    store::record_decision(
        conn,
        &store::Decided {
            job,
            rung: decision.rung as i64,
            verdict,
            standing: standing.map(|s: Standing| (s.rank as i64, s.of as i64, s.value)),
            by: "podq",
        },
    )
    .await?;
    insert_event(conn, &Actor::podq(), Some(job), None, kind, &reason).await?;
    let live = matches!(state, Some(JobState::Leased | JobState::Running));
    match decision.verdict {
        Verdict::Pause(_) if live => {
            let asked =
                jobs::request_stop(conn, job, StopRequest::Paused.as_str(), &reason).await?;
            return Ok((current && asked).then_some(reason));
        }
        Verdict::Pause(_) if state == Some(JobState::Queued) => {
            jobs::hold(conn, job, &reason).await?;
        }
        // Judged last, when the rung closed: it ends as a stop rule's run does, with its
        // grace. Another run still on its pod is one stopping at its pause, settled when
        // its attempt ends.
        Verdict::Prune(_) if live && current => {
            jobs::request_stop(conn, job, StopRequest::Ruled.as_str(), &reason).await?;
            return Ok(Some(reason));
        }
        // A run still stopping is settled when its attempt ends (`settle_paused`).
        Verdict::Promote(_) | Verdict::Prune(_) if state == Some(JobState::Held) => {
            settle_paused(conn, &rungs.metric, job).await?;
        }
        _ => {}
    }
    Ok(None)
}

/// A held run paused at a rung, once its rung's decision came: promoted, it goes back to
/// the queue; pruned, it ends `stopped`, with its rank and value by `metric`. Answers its
/// new state, if it changed.
pub async fn settle_paused(
    conn: &mut Conn,
    metric: &str,
    job: JobId,
) -> Result<Option<JobState>, StoreError> {
    let decisions = store::of_job(conn, job).await?;
    let Some(last) = decisions.last() else {
        return Ok(None);
    };
    match last.verdict.as_str() {
        "promoted" => {
            jobs::resume(conn, job).await?;
            Ok(Some(JobState::Queued))
        }
        "pruned" => {
            let value = last
                .value
                .map_or_else(|| "NaN".to_owned(), |v| v.to_string());
            let why = format!(
                "pruned at rung {}: rank {} of {} by {metric} ({value}); checkpoints kept, \
                 `podq requeue --ignore-stop-rules` runs it on",
                last.rung + 1,
                last.rank.unwrap_or_default(),
                last.of_runs.unwrap_or_default()
            );
            jobs::prune(conn, job, &why).await?;
            Ok(Some(JobState::Stopped))
        }
        _ => Ok(None),
    }
}

/// A person resumed `job` (`podq resume`): if it waited at a rung, it is promoted there by
/// them, and no later decision of its siblings prunes it at that rung.
pub async fn promoted_by_hand(conn: &mut Conn, job: JobId, by: &str) -> Result<(), StoreError> {
    let Some(rung) = store::paused_at(conn, job).await? else {
        return Ok(());
    };
    let standing = store::of_job(conn, job)
        .await?
        .into_iter()
        .find(|d| d.rung == rung);
    store::record_decision(
        conn,
        &store::Decided {
            job,
            rung,
            verdict: "promoted",
            standing: standing.and_then(|d| Some((d.rank?, d.of_runs?, d.value?))),
            by,
        },
    )
    .await?;
    let message = format!("promoted at rung {} by {by}", rung + 1);
    insert_event(
        conn,
        &Actor::podq(),
        Some(job),
        None,
        "rung_promoted",
        &message,
    )
    .await
}

fn run_state(state: JobState) -> RunState {
    match state {
        JobState::Cancelled => RunState::Cancelled,
        JobState::Succeeded | JobState::Failed | JobState::Stopped => RunState::Ended,
        JobState::Queued | JobState::Leased | JobState::Running | JobState::Held => RunState::Live,
    }
}

fn nan_if_none(value: Option<f64>) -> f64 {
    value.unwrap_or(f64::NAN)
}

/// A stored decision, as the pure decisions take the earlier ones.
fn from_row(row: &store::RungDecision) -> Option<Decision<JobId>> {
    let standing = || {
        Some(Standing {
            rank: usize::try_from(row.rank?).ok()?,
            of: usize::try_from(row.of_runs?).ok()?,
            value: row.value.unwrap_or(f64::NAN),
        })
    };
    let verdict = match row.verdict.as_str() {
        "promoted" => Verdict::Promote(standing().unwrap_or(Standing {
            rank: 1,
            of: 1,
            value: f64::NAN,
        })),
        "paused" => Verdict::Pause(standing()?),
        "pruned" => Verdict::Prune(standing()?),
        "no_value" => Verdict::NoValue,
        _ => return None,
    };
    Some(Decision {
        run: row.job_id,
        rung: usize::try_from(row.rung).ok()?,
        verdict,
    })
}
