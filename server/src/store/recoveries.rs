//! A record per interruption, derived on read from the interrupted attempt, the attempt that
//! resumed the run and the pods they ran on: nothing is written for it, so no crash can lose
//! or half-write one, and a record is whole once the resumed attempt reached its first step.
//!
//! ```text
//! notice ── stopping ── A ends ── waiting (creating ⊂) ── B leased ── setup ── launch
//!        ── startup (compile ⊂) + restore ── B's first step
//! ```

use std::collections::{BTreeMap, HashMap};

use podq_api::{JobId, Recovery, RecoveryPhases, RecoverySummary, TrainerPhases};

use super::db::{self, Conn};
use super::pod_time_model::{split, AttemptClock};
use super::time::ms_to_datetime;
use super::StoreError;

/// What ended an attempt for a reason outside the run, and was recovered from: a preemption,
/// lost hosts, an eviction, a person's suspension. (A rung's pause or a stop rule is a
/// decision about the run, and a failure is the run's own.)
const INTERRUPTED: &str =
    "(a.outcome IN ('preempted', 'lost') OR a.cause IN ('evicted', 'suspended'))";

/// The summary reads at most this many of the newest records, so its cost stays bounded.
pub const SUMMARY_WINDOW: i64 = 10_000;

#[derive(Debug, Clone, sqlx::FromRow)]
pub struct RecoveryRow {
    pub job_id: JobId,
    pub attempt: i64,
    pub pod: String,
    pub accelerator: String,
    pub outcome: Option<String>,
    pub cause: Option<String>,
    pub started_at: i64,
    pub ended_at: i64,
    pub stopping_s: Option<f64>,
    pub end_step: Option<i64>,
    /// The interrupted attempt's pod time, with the recovery of its pod charged to it.
    pub pod_time_json: Option<String>,
    pub zone: Option<String>,
    pub resumed_on: String,
    pub resumed_leased_at: i64,
    pub resumed_running_at: Option<i64>,
    pub resumed_first_step_at: i64,
    pub resumed_start_step: Option<i64>,
    pub resumed_phases_json: Option<String>,
    /// When a pool began making the pod the run resumed on, and when it could first work.
    pub resumed_pod_made_at: Option<i64>,
    pub resumed_pod_ready_at: Option<i64>,
}

const RECORDS: &str = "SELECT a.job_id, a.attempt, a.pod, \
     COALESCE(a.accelerator, j.accelerator) AS accelerator, a.outcome, a.cause, a.started_at, \
     a.ended_at, a.stopping_s, a.end_step, a.pod_time_json, pa.zone, \
     b.pod AS resumed_on, b.started_at AS resumed_leased_at, \
     b.running_at AS resumed_running_at, b.first_step_at AS resumed_first_step_at, \
     b.start_step AS resumed_start_step, b.trainer_phases_json AS resumed_phases_json, \
     pb.made_at AS resumed_pod_made_at, pb.ready_at AS resumed_pod_ready_at \
     FROM attempts a \
     JOIN attempts b ON b.job_id = a.job_id AND b.attempt = a.attempt + 1 \
     JOIN jobs j ON j.id = a.job_id \
     LEFT JOIN pods pa ON pa.name = a.pod \
     LEFT JOIN pods pb ON pb.name = b.pod";

/// The newest records (of one job, if given), newest first.
pub async fn list(
    conn: &mut Conn,
    job: Option<JobId>,
    limit: i64,
) -> Result<Vec<Recovery>, StoreError> {
    let job_filter = if job.is_some() {
        "AND a.job_id = ?"
    } else {
        ""
    };
    let sql = format!(
        "{RECORDS} WHERE {INTERRUPTED} AND a.ended_at IS NOT NULL \
         AND b.first_step_at IS NOT NULL {job_filter} ORDER BY a.ended_at DESC LIMIT ?"
    );
    let mut query = db::query_as::<RecoveryRow>(sqlx::AssertSqlSafe(sql));
    if let Some(job) = job {
        query = query.bind(job);
    }
    let rows = query.bind(limit).fetch_all(conn).await?;
    rows.iter().map(record).collect()
}

/// What the recoveries from outside interruptions (preempted, lost) of one slice type took,
/// at the median: the whole, and the wait for a pod a ready spare would have saved.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TypeRecovery {
    pub count: usize,
    pub total_s: f64,
    pub waiting_s: f64,
    /// The part spent on a pod: the whole less the wait for one.
    pub on_pod_s: f64,
}

/// [`TypeRecovery`] per slice type, over `records` (the newest [`SUMMARY_WINDOW`]).
pub fn medians_by_type(records: &[Recovery]) -> HashMap<String, TypeRecovery> {
    type Samples = (Vec<f64>, Vec<f64>, Vec<f64>);
    let mut by_type: HashMap<String, Samples> = HashMap::new();
    for r in records {
        if matches!(r.cause.as_str(), "preempted" | "lost") {
            let (totals, waits, on_pod) = by_type.entry(r.accelerator.clone()).or_default();
            totals.push(r.total_s);
            waits.push(r.phases.waiting_s);
            on_pod.push(r.total_s - r.phases.waiting_s);
        }
    }
    by_type
        .into_iter()
        .map(|(accelerator, (mut totals, mut waits, mut on_pod))| {
            let median = TypeRecovery {
                count: totals.len(),
                total_s: percentile(&mut totals, 0.5),
                waiting_s: percentile(&mut waits, 0.5),
                on_pod_s: percentile(&mut on_pod, 0.5),
            };
            (accelerator, median)
        })
        .collect()
}

/// One row's record: its phases, each clamped so they follow each other and sum to the
/// whole.
pub fn record(row: &RecoveryRow) -> Result<Recovery, StoreError> {
    let secs = |ms: i64| ms.max(0) as f64 / 1000.0;
    let stopping_ms = ((row.stopping_s.unwrap_or(0.0).max(0.0) * 1000.0) as i64)
        .min(row.ended_at - row.started_at)
        .max(0);
    let noticed_at = row.ended_at - stopping_ms;
    let leased_at = row.resumed_leased_at.max(row.ended_at);
    let resumed_phases: TrainerPhases = parse(row.resumed_phases_json.as_deref())?;
    // The resumed attempt's start, split as its pod time splits it (one rule for both).
    let resumed = split(
        &AttemptClock {
            started_at: leased_at,
            running_at: row.resumed_running_at,
            first_step_at: Some(row.resumed_first_step_at),
            phases: resumed_phases,
            ..AttemptClock::default()
        },
        None,
        row.resumed_first_step_at.max(leased_at),
    );
    let waiting_s = secs(leased_at - row.ended_at);
    let creating_s = if row.resumed_on == row.pod {
        // The same pod, recreated or recovered in place: its recovery after the attempt.
        let interrupted: podq_api::PodTime = parse(row.pod_time_json.as_deref())?;
        interrupted.provisioning_s.min(waiting_s)
    } else {
        let made = row.resumed_pod_made_at.unwrap_or(leased_at);
        let ready = row.resumed_pod_ready_at.unwrap_or(leased_at);
        secs(ready.min(leased_at) - made.max(row.ended_at))
    };
    let phases = RecoveryPhases {
        stopping_s: secs(stopping_ms),
        waiting_s,
        creating_s,
        setup_s: resumed.setup_s,
        startup_s: resumed.startup_s,
        compile_s: resumed.compile_s,
        restore_s: resumed.restore_s,
    };
    Ok(Recovery {
        job_id: row.job_id,
        attempt: row.attempt,
        cause: row
            .cause
            .clone()
            .or_else(|| row.outcome.clone())
            .unwrap_or_default(),
        pod: row.pod.clone(),
        accelerator: row.accelerator.clone(),
        zone: row.zone.clone(),
        resumed_on: row.resumed_on.clone(),
        noticed_at: ms_to_datetime(noticed_at),
        resumed_at: ms_to_datetime(row.resumed_first_step_at),
        total_s: phases.total_s(),
        lost_steps: row
            .end_step
            .zip(row.resumed_start_step)
            .map(|(end, start)| (end - start).max(0)),
        phases,
    })
}

fn parse<T: serde::de::DeserializeOwned + Default>(json: Option<&str>) -> Result<T, StoreError> {
    json.map(|j| {
        serde_json::from_str(j).map_err(|e| StoreError::Corrupt(format!("an attempt's JSON: {e}")))
    })
    .transpose()
    .map(Option::unwrap_or_default)
}

/// p50 and p95 of the whole recovery, and each phase's median, per slice type, zone and
/// cause.
pub fn summarize(records: &[Recovery]) -> Vec<RecoverySummary> {
    let mut groups: BTreeMap<(String, Option<String>, String), Vec<&Recovery>> = BTreeMap::new();
    for r in records {
        groups
            .entry((r.accelerator.clone(), r.zone.clone(), r.cause.clone()))
            .or_default()
            .push(r);
    }
    groups
        .into_iter()
        .map(|((accelerator, zone, cause), rs)| {
            let of = |f: fn(&Recovery) -> f64, q: f64| {
                let mut values: Vec<f64> = rs.iter().map(|r| f(r)).collect();
                percentile(&mut values, q)
            };
            RecoverySummary {
                count: rs.len() as u64,
                p50_s: of(|r| r.total_s, 0.5),
                p95_s: of(|r| r.total_s, 0.95),
                phases_p50: RecoveryPhases {
                    stopping_s: of(|r| r.phases.stopping_s, 0.5),
                    waiting_s: of(|r| r.phases.waiting_s, 0.5),
                    creating_s: of(|r| r.phases.creating_s, 0.5),
                    setup_s: of(|r| r.phases.setup_s, 0.5),
                    startup_s: of(|r| r.phases.startup_s, 0.5),
                    compile_s: of(|r| r.phases.compile_s, 0.5),
                    restore_s: of(|r| r.phases.restore_s, 0.5),
                },
                accelerator,
                zone,
                cause,
            }
        })
        .collect()
}

/// The nearest-rank percentile `q` of `values` (0 when there are none).
pub fn percentile(values: &mut [f64], q: f64) -> f64 {
    if values.is_empty() {
        return 0.0;
    }
    values.sort_by(f64::total_cmp);
    let rank = (q * values.len() as f64).ceil() as usize;
    values[rank.clamp(1, values.len()) - 1]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row() -> RecoveryRow {
        RecoveryRow {
            job_id: JobId::new_random(),
            attempt: 1,
            pod: "p-1".into(),
            accelerator: "v4-64".into(),
            outcome: Some("preempted".into()),
            cause: None,
            started_at: 0,
            ended_at: 100_000,
            stopping_s: Some(4.0),
            end_step: Some(900),
            pod_time_json: None,
            zone: Some("us-central2-b".into()),
            resumed_on: "p-2".into(),
            resumed_leased_at: 130_000,
            resumed_running_at: Some(140_000),
            resumed_first_step_at: 200_000,
            resumed_start_step: Some(800),
            resumed_phases_json: Some(
                r#"{"compile_s":30.0,"restore_s":12.0,"save_s":0.0,"saves":0}"#.into(),
            ),
            resumed_pod_made_at: Some(90_000),
            resumed_pod_ready_at: Some(125_000),
        }
    }

    #[test]
    fn the_phases_follow_each_other_and_sum_to_the_whole() {
        let r = record(&row()).unwrap();
        let p = r.phases;
        assert_eq!(p.stopping_s, 4.0);
        assert_eq!(p.waiting_s, 30.0);
        // Made from before the attempt ended until it was ready: only the wait counts.
        assert_eq!(p.creating_s, 25.0);
        assert_eq!(p.setup_s, 10.0);
        assert_eq!(p.restore_s, 12.0);
        assert_eq!(p.startup_s, 48.0);
        assert_eq!(p.compile_s, 30.0);
        assert_eq!(r.total_s, 104.0);
        assert_eq!(
            (r.resumed_at - r.noticed_at).num_milliseconds() as f64 / 1000.0,
            r.total_s
        );
        assert_eq!(r.lost_steps, Some(100));
        assert_eq!(r.cause, "preempted");
    }

    #[test]
    fn on_the_same_pod_the_wait_for_its_recreation_is_creating() {
        let mut same = row();
        same.resumed_on = same.pod.clone();
        same.pod_time_json = Some(
            serde_json::to_string(&podq_api::PodTime {
                provisioning_s: 22.0,
                ..Default::default()
            })
            .unwrap(),
        );
        assert_eq!(record(&same).unwrap().phases.creating_s, 22.0);
        same.pod_time_json = Some(
            serde_json::to_string(&podq_api::PodTime {
                provisioning_s: 500.0,
                ..Default::default()
            })
            .unwrap(),
        );
        assert_eq!(record(&same).unwrap().phases.creating_s, 30.0);
    }

    #[test]
    fn an_idle_pod_makes_no_creating_and_odd_clocks_stay_in_order() {
        let mut idle = row();
        idle.resumed_pod_made_at = None;
        idle.resumed_pod_ready_at = None;
        assert_eq!(record(&idle).unwrap().phases.creating_s, 0.0);
        // A stop longer than the attempt, a lease stamped before the end, a trainer that
        // reports more restore than its start-up took: nothing negative, the sum holds.
        let mut odd = row();
        odd.stopping_s = Some(1e9);
        odd.resumed_leased_at = 90_000;
        odd.resumed_phases_json =
            Some(r#"{"compile_s":1e9,"restore_s":1e9,"save_s":0.0,"saves":0}"#.into());
        let r = record(&odd).unwrap();
        let p = r.phases;
        for (name, v) in p.named() {
            assert!(v >= 0.0, "{name} = {v}");
        }
        assert_eq!(p.stopping_s, 100.0);
        assert_eq!(p.waiting_s, 0.0);
        assert!((p.total_s() - r.total_s).abs() < 1e-9);
        assert!(p.compile_s <= p.startup_s);
    }

    #[test]
    fn a_person_or_an_eviction_names_the_cause() {
        let mut evicted = row();
        evicted.cause = Some("evicted".into());
        assert_eq!(record(&evicted).unwrap().cause, "evicted");
    }

    #[test]
    fn the_summary_is_per_type_zone_and_cause_with_nearest_rank_percentiles() {
        let mut records = Vec::new();
        for (i, zone) in ["a", "a", "a", "a", "b"].iter().enumerate() {
            let mut r = row();
            r.zone = Some((*zone).into());
            r.resumed_first_step_at = 200_000 + 10_000 * i as i64;
            records.push(record(&r).unwrap());
        }
        let summary = summarize(&records);
        assert_eq!(summary.len(), 2);
        let a = &summary[0];
        assert_eq!((a.zone.as_deref(), a.count), (Some("a"), 4));
        assert_eq!(a.p50_s, 114.0);
        assert_eq!(a.p95_s, 134.0);
        assert_eq!(a.phases_p50.waiting_s, 30.0);
        assert_eq!(summary[1].count, 1);
        assert_eq!(percentile(&mut [], 0.5), 0.0);
        assert_eq!(percentile(&mut [3.0, 1.0, 2.0], 0.5), 2.0);
    }
}
