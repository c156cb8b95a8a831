//! SQL about jobs and their attempts, and what a job's page gathers from the other files.

use super::db::{self, Builder, Conn};
use super::job_accelerators;
use super::job_state::{self, Change, TO};
use sqlx::AssertSqlSafe;
use std::collections::BTreeMap;

use podq_api as api;
use podq_api::{JobId, JobState, LeaseId};

use super::rows::{AttemptRow, JobRow, JOB_COLUMNS};

use super::{now_ms, StoreError};

pub async fn get_job(db: &mut Conn, id: JobId) -> Result<Option<JobRow>, StoreError> {
    let sql = format!("SELECT {JOB_COLUMNS} FROM job_view WHERE id = ?");
    Ok(db::query_as::<JobRow>(AssertSqlSafe(sql))
        .bind(id)
        .fetch_optional(db)
        .await?)
}

/// The newest job (highest `seq`) of an experiment: what an experiment name means where a
/// job id is expected. Reads the `jobs_experiment (experiment, seq)` index.
pub(crate) const NEWEST_JOB_OF_EXPERIMENT: &str =
    "SELECT id FROM jobs WHERE experiment = ? ORDER BY seq DESC LIMIT 1";

pub async fn newest_job_of_experiment(
    db: &mut Conn,
    experiment: &str,
) -> Result<Option<JobId>, StoreError> {
    Ok(db::query_scalar(NEWEST_JOB_OF_EXPERIMENT)
        .bind(experiment)
        .fetch_optional(db)
        .await?)
}

pub(crate) const GROUP_HAS_JOBS: &str = "SELECT 1 FROM jobs WHERE group_name = ? LIMIT 1";

/// Whether any job belongs to `group`: a group the catalog no longer has is still a name
/// to list jobs by. Reads the `jobs_group_seq` index.
pub async fn group_has_jobs(db: &mut Conn, group: &str) -> Result<bool, StoreError> {
    let found: Option<i32> = db::query_scalar(GROUP_HAS_JOBS)
        .bind(group)
        .fetch_optional(db)
        .await?;
    Ok(found.is_some())
}

#[derive(Debug, Default, Clone)]
pub struct JobFilter {
    pub state: Option<api::JobState>,
    pub group: Option<String>,
    pub experiment: Option<String>,
    pub limit: i64,
    /// Keyset: only jobs submitted after the job with this `seq`.
    pub after: Option<i64>,
    /// The old way to page, kept for clients that use it; it costs more the deeper it goes.
    pub offset: i64,
}

/// One page of jobs in submission order, and how many match in all. Every filter reads an
/// index on `jobs` that ends in `seq`, so a page costs the same however long the history;
/// the total comes from the maintained counts (or, for one experiment, its index).
pub async fn list_jobs(
    db: &mut Conn,
    filter: &JobFilter,
) -> Result<(Vec<JobRow>, i64), StoreError> {
    let rows = page_query("", filter)
        .build_query_as::<JobRow>()
        .fetch_all(db)
        .await?;
    let total: i64 = count_query("", filter)
        .build_query_scalar()
        .fetch_one(db)
        .await?;
    Ok((rows, total))
}

/// `prefix` lets a test ask SQLite for the query's plan.
fn page_query(prefix: &str, filter: &JobFilter) -> Builder {
    let mut query = Builder::new(format!(
        "{prefix}SELECT {JOB_COLUMNS} FROM job_view WHERE 1=1"
    ));
    push_filter(&mut query, filter);
    if let Some(after) = filter.after {
        query.push(" AND seq > ").push_bind(after);
    }
    query.push(" ORDER BY seq LIMIT ").push_bind(filter.limit);
    if filter.offset > 0 {
        query.push(" OFFSET ").push_bind(filter.offset);
    }
    query
}

fn count_query(prefix: &str, filter: &JobFilter) -> Builder {
    let mut count = if filter.experiment.is_some() {
        Builder::new(format!("{prefix}SELECT COUNT(*) FROM jobs WHERE 1=1"))
    } else {
        Builder::new(format!(
            "{prefix}SELECT CAST(COALESCE(SUM(n), 0) AS BIGINT) FROM job_counts WHERE 1=1"
        ))
    };
    push_filter(&mut count, filter);
    count
}

fn push_filter(q: &mut Builder, filter: &JobFilter) {
    if let Some(state) = filter.state {
        q.push(" AND state = ").push_bind(state.as_str());
    }
    if let Some(group) = &filter.group {
        q.push(" AND group_name = ").push_bind(group.clone());
    }
    if let Some(experiment) = &filter.experiment {
        q.push(" AND experiment = ").push_bind(experiment.clone());
    }
}

/// Jobs of an experiment that count against submitting it again: not terminal, succeeded,
/// or stopped by a rule (judged: `requeue --ignore-stop-rules` runs it on).
pub async fn live_or_succeeded_job_of_experiment(
    conn: &mut Conn,
    experiment: &str,
) -> Result<Option<JobRow>, StoreError> {
    let mut counted = job_state::unfinished();
    counted.extend([JobState::Succeeded, JobState::Stopped]);
    let sql = format!(
        "SELECT {JOB_COLUMNS} FROM job_view WHERE experiment = ? AND {} ORDER BY seq LIMIT 1",
        job_state::state_in("state", &counted)
    );
    Ok(db::query_as::<JobRow>(AssertSqlSafe(sql))
        .bind(experiment)
        .fetch_optional(conn)
        .await?)
}

/// The run (a job that is not itself linked) with this training config that a new job can
/// share: not terminal, or succeeded. Not a stopped run: the rules that stopped it were its
/// experiment's, not the config's.
pub async fn live_or_succeeded_run_of_config(
    conn: &mut Conn,
    config_sha256: &str,
) -> Result<Option<JobRow>, StoreError> {
    let mut shared = job_state::unfinished();
    shared.push(JobState::Succeeded);
    let sql = format!(
        "SELECT {JOB_COLUMNS} FROM job_view WHERE config_sha256 = ? AND same_as IS NULL \
         AND {} ORDER BY seq LIMIT 1",
        job_state::state_in("state", &shared)
    );
    Ok(db::query_as::<JobRow>(AssertSqlSafe(sql))
        .bind(config_sha256)
        .fetch_optional(conn)
        .await?)
}

pub struct NewJob<'a> {
    pub id: JobId,
    pub experiment: &'a str,
    pub group: &'a str,
    pub priority: i64,
    /// The slice types it may lease, most preferred first; never empty.
    pub accelerators: &'a [String],
    pub config_json: &'a str,
    pub config_sha256: &'a str,
    pub est_hours: f64,
    pub checkpoint_dir: &'a str,
    pub max_failures: i64,
    pub same_as: Option<JobId>,
    pub total_steps: Option<i64>,
    pub submitted_by: &'a str,
    pub priority_class: &'a str,
    pub class_rank: i64,
}

pub async fn insert_job(conn: &mut Conn, job: NewJob<'_>) -> Result<(), StoreError> {
    let now = now_ms();
    db::query(
        "INSERT INTO jobs (id, seq, experiment, group_name, state, priority, accelerator, \
         config_json, config_sha256, est_hours, checkpoint_dir, max_failures, same_as, \
         total_steps, submitted_at, updated_at, submitted_by, priority_class, class_rank) \
         VALUES (?1, (SELECT COALESCE(MAX(seq), 0) + 1 FROM jobs), ?2, ?3, \
           COALESCE((SELECT state FROM jobs WHERE id = ?11), ?17), \
           ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?13, ?14, ?15, ?16)",
    )
    .bind(job.id)
    .bind(job.experiment)
    .bind(job.group)
    .bind(job.priority)
    .bind(&job.accelerators[0])
    .bind(job.config_json)
    .bind(job.config_sha256)
    .bind(job.est_hours)
    .bind(job.checkpoint_dir)
    .bind(job.max_failures)
    .bind(job.same_as)
    .bind(job.total_steps)
    .bind(now)
    .bind(job.submitted_by)
    .bind(job.priority_class)
    .bind(job.class_rank)
    // A new job waits in the queue, unless it shares a run: then it is in that run's state.
    .bind(JobState::Queued.as_str())
    .execute(&mut *conn)
    .await?;
    job_accelerators::insert(conn, job.id, job.accelerators).await
}

pub async fn attempts(db: &mut Conn, job_id: JobId) -> Result<Vec<AttemptRow>, StoreError> {
    Ok(db::query_as::<AttemptRow>(
        "SELECT attempt, lease_id, pod, accelerator, resume_from, started_at, running_at, first_step_at, ended_at, outcome, \
         start_step, end_step, exit_codes_json, log_tail, message, cause \
         FROM attempts WHERE job_id = ? ORDER BY attempt",
    )
    .bind(job_id)
    .fetch_all(db)
    .await?)
}

/// The slice types a run's attempts ran on, each once, in the order first used.
pub async fn attempt_accelerators(db: &mut Conn, run: JobId) -> Result<Vec<String>, StoreError> {
    let all: Vec<String> = db::query_scalar(
        "SELECT accelerator FROM attempts WHERE job_id = ? AND accelerator IS NOT NULL \
         ORDER BY attempt",
    )
    .bind(run)
    .fetch_all(db)
    .await?;
    let mut used: Vec<String> = Vec::new();
    for accelerator in all {
        if !used.contains(&accelerator) {
            used.push(accelerator);
        }
    }
    Ok(used)
}

pub async fn latest_metrics(
    db: &mut Conn,
    job_id: JobId,
) -> Result<BTreeMap<String, api::MetricValue>, StoreError> {
    // Each series' newest chunk or tail row, the one that ends at the series' newest step.
    let rows: Vec<(String, Vec<u8>)> = db::query_as(
        "SELECT s.name, c.data FROM metric_series s \
         JOIN metric_chunks c ON c.series_id = s.id AND c.last_step = s.last_step \
         WHERE s.job_id = ?1 \
         UNION ALL SELECT s.name, t.data FROM metric_series s \
         JOIN metric_tail t ON t.job_seq = (SELECT seq FROM jobs WHERE id = ?1) \
           AND t.last_step = s.last_step AND t.series_id = s.id \
         WHERE s.job_id = ?1",
    )
    .bind(job_id)
    .fetch_all(db)
    .await?;
    let mut latest = BTreeMap::new();
    for (name, data) in rows {
        if let Some(&(step, value)) = super::chunks::decode_points(&data)?.last() {
            latest.insert(name, api::MetricValue { step, value });
        }
    }
    Ok(latest)
}

/// Job counts per (group, state), linked jobs in their run's state; maintained by triggers
/// in the transaction of every state change (migration 0003).
pub async fn counts_by_group_and_state(
    db: &mut Conn,
) -> Result<Vec<(String, String, i64)>, StoreError> {
    Ok(
        db::query_as("SELECT group_name, state, n FROM job_counts WHERE n > 0")
            .fetch_all(db)
            .await?,
    )
}

/// Job counts per state, from the maintained counts.
pub async fn counts_by_state(db: &mut Conn) -> Result<Vec<(api::JobState, i64)>, StoreError> {
    Ok(
        db::query_as("SELECT state, CAST(SUM(n) AS BIGINT) FROM job_counts GROUP BY state")
            .fetch_all(db)
            .await?,
    )
}

/// The job's live lease, if a pod holds it.
pub async fn live_lease(conn: &mut Conn, id: JobId) -> Result<Option<LeaseId>, StoreError> {
    Ok(db::query_scalar("SELECT lease_id FROM jobs WHERE id = ?")
        .bind(id)
        .fetch_optional(conn)
        .await?
        .flatten())
}

/// Marks the job cancelled and answers the lease its pod must be told to stop. A linked job
/// only cancels its link: the run goes on for the others.
pub async fn cancel(conn: &mut Conn, id: JobId, by: &str) -> Result<Option<LeaseId>, StoreError> {
    job_state::apply(
        conn,
        id,
        Change::Cancel,
        TO,
        "link_cancelled = CASE WHEN same_as IS NULL THEN 0 ELSE 1 END, \
         cancel_requested = CASE WHEN lease_id IS NULL THEN 0 ELSE 1 END, message = ?, \
         reserved_pod = NULL, reserved_until = NULL, updated_at = ?",
        |update| update.bind(format!("cancelled by {by}")).bind(now_ms()),
    )
    .await?;
    // The write leaves the lease as it was.
    live_lease(conn, id).await
}

/// Puts the job back in the queue with a fresh failure budget; a linked job shares its run
/// again, in the run's state.
pub async fn requeue(conn: &mut Conn, id: JobId) -> Result<(), StoreError> {
    // A linked job takes its run's state, which the mirror trigger keeps it in from then on.
    job_state::apply(
        conn,
        id,
        Change::Requeue,
        "COALESCE((SELECT r.state FROM jobs r WHERE r.id = jobs.same_as), ?)",
        "link_cancelled = 0, failures = 0, stalled_attempts = 0, not_before = NULL, \
         cancel_requested = 0, message = NULL, reserved_pod = NULL, reserved_until = NULL, \
         queue_head = 0, updated_at = ?",
        |update| update.bind(now_ms()),
    )
    .await
}

/// Moves a job to another priority class; `rank` is the class's place in the queue order.
pub async fn set_class(
    conn: &mut Conn,
    id: JobId,
    class: &str,
    rank: i64,
) -> Result<(), StoreError> {
    db::query("UPDATE jobs SET priority_class = ?, class_rank = ?, updated_at = ? WHERE id = ?")
        .bind(class)
        .bind(rank)
        .bind(now_ms())
        .bind(id)
        .execute(conn)
        .await?;
    Ok(())
}

/// Gives every job not yet finished the rank its class has in the suite now (`ranks`: each
/// class's name and rank; a class the suite no longer has ranks as `default_rank`). Writes
/// only the rows whose rank changed.
pub async fn rerank_classes(
    conn: &mut Conn,
    ranks: &[(String, i64)],
    default_rank: i64,
) -> Result<u64, StoreError> {
    // The CASE appears twice; its values are bound once per appearance.
    let push_case = |update: &mut Builder| {
        update.push("CASE priority_class");
        for (class, value) in ranks {
            update
                .push(" WHEN ")
                .push_bind(class.clone())
                .push(" THEN ")
                .push_bind(*value);
        }
        update.push(" ELSE ").push_bind(default_rank).push(" END");
    };
    let mut update = Builder::new("UPDATE jobs SET class_rank = ");
    push_case(&mut update);
    update.push(&format!(
        " WHERE {} AND class_rank <> ",
        job_state::state_in("state", &job_state::unfinished())
    ));
    push_case(&mut update);
    Ok(update.build().execute(conn).await?)
}

/// Asks the job's worker to stop as `request` says. A rule's stop is never replaced; a
/// rung's pause (`paused`) replaces no stop at all (a person's suspension, an eviction).
/// Answers whether it was asked.
pub async fn request_stop(
    conn: &mut Conn,
    id: JobId,
    request: &str,
    why: &str,
) -> Result<bool, StoreError> {
    let replaces = if request == "paused" {
        "stop_request IS NULL"
    } else {
        "(stop_request IS NULL OR stop_request <> 'ruled')"
    };
    let changed = db::query(AssertSqlSafe(format!(
        "UPDATE jobs SET stop_request = ?, stop_message = ?, updated_at = ? \
         WHERE id = ? AND {replaces}"
    )))
    .bind(request)
    .bind(why)
    .bind(now_ms())
    .bind(id)
    .execute(conn)
    .await?;
    Ok(changed > 0)
}

/// Holds a queued job (a person's pause): no pod leases it until it is resumed.
pub async fn hold(conn: &mut Conn, id: JobId, why: &str) -> Result<(), StoreError> {
    job_state::apply(
        conn,
        id,
        Change::Hold,
        TO,
        "message = ?, reserved_pod = NULL, reserved_until = NULL, updated_at = ?",
        |update| update.bind(why).bind(now_ms()),
    )
    .await
}

/// Puts a suspended job back in the queue as it was: its failure budget is untouched.
pub async fn resume(conn: &mut Conn, id: JobId) -> Result<(), StoreError> {
    job_state::apply(
        conn,
        id,
        Change::Resume,
        TO,
        "message = NULL, not_before = NULL, reserved_pod = NULL, reserved_until = NULL, \
         updated_at = ?",
        |update| update.bind(now_ms()),
    )
    .await
}

/// Ends a run paused at its rung: `stopped`, uncharged, with `why` (the rung, its rank and
/// value). Its checkpoints stay; `requeue --ignore-stop-rules` runs it on.
pub async fn prune(conn: &mut Conn, id: JobId, why: &str) -> Result<(), StoreError> {
    job_state::apply(
        conn,
        id,
        Change::Prune,
        TO,
        "message = ?, stop_request = NULL, stop_message = NULL, reserved_pod = NULL, \
         reserved_until = NULL, updated_at = ?",
        |update| update.bind(why).bind(now_ms()),
    )
    .await
}

pub async fn set_priority(conn: &mut Conn, id: JobId, priority: i64) -> Result<(), StoreError> {
    db::query("UPDATE jobs SET priority = ?, updated_at = ? WHERE id = ?")
        .bind(priority)
        .bind(now_ms())
        .bind(id)
        .execute(conn)
        .await?;
    Ok(())
}

/// A job with its run's attempts, checkpoints, latest metric values and goodput.
pub struct DetailRows {
    pub job: JobRow,
    pub accelerators: Vec<String>,
    pub attempts: Vec<AttemptRow>,
    pub checkpoints: Vec<super::rows::CheckpointRow>,
    pub latest_metrics: BTreeMap<String, api::MetricValue>,
    pub goodput: api::Goodput,
    /// Each attempt's pod time, by attempt number.
    pub pod_time: BTreeMap<i64, api::PodTime>,
    pub advice: AdviceInputs,
    pub links: Vec<api::JobLink>,
    pub rungs: Vec<super::rungs::RungDecision>,
}

/// What the checkpoint advice needs of a run beyond the job row.
pub struct AdviceInputs {
    pub reported_save_cost_s: Option<f64>,
    /// Pod time in attempts on the run's pod type, and how many were interrupted.
    pub history: (f64, u64),
}

/// The advice inputs of `run` on `accelerator`.
pub async fn advice_inputs(
    conn: &mut Conn,
    run: JobId,
    accelerator: &str,
) -> Result<AdviceInputs, StoreError> {
    Ok(AdviceInputs {
        reported_save_cost_s: super::pod_time::reported_save_cost(&mut *conn, run).await?,
        history: super::pod_time::interruption_history(&mut *conn, accelerator).await?,
    })
}

/// Everything a job's detail shows. Run it in one read snapshot (`Store::read_snapshot`) so
/// the parts are of one moment (an attempt ending between two reads would otherwise show in
/// one and not the other).
pub async fn detail(tx: &mut Conn, id: JobId) -> Result<Option<DetailRows>, StoreError> {
    let Some(job) = get_job(tx, id).await? else {
        return Ok(None);
    };
    let run = job.run_id;
    let attempts = attempts(tx, run).await?;
    let checkpoints = super::checkpoints::of_job(tx, run).await?;
    let latest_metrics = latest_metrics(tx, run).await?;
    let goodput = super::goodput::of_run(tx, run).await?;
    let pod_time = super::pod_time::of_run(tx, run).await?;
    let advice = advice_inputs(tx, run, &job.accelerator).await?;
    let links = super::links::of_job(tx, run).await?;
    let accelerators = job_accelerators::of_job(tx, id).await?;
    let rungs = super::rungs::of_job(tx, run).await?;
    Ok(Some(DetailRows {
        rungs,
        job,
        accelerators,
        attempts,
        checkpoints,
        latest_metrics,
        goodput,
        pod_time,
        advice,
        links,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::test_support::{assert_uses_indexes, scratch_store};

    #[tokio::test]
    async fn name_lookups_read_an_index() {
        let (store, _dir) = scratch_store().await;
        for (what, sql, ordered) in [
            (
                "newest job of an experiment",
                NEWEST_JOB_OF_EXPERIMENT,
                true,
            ),
            ("whether a group has jobs", GROUP_HAS_JOBS, false),
        ] {
            let plan: Vec<(i64, i64, i64, String)> =
                db::query_as(AssertSqlSafe(format!("EXPLAIN QUERY PLAN {sql}")))
                    .bind("x")
                    .fetch_all(&mut store.read().await.unwrap())
                    .await
                    .unwrap();
            assert_uses_indexes(what, &plan, ordered);
        }
    }

    #[tokio::test]
    async fn every_jobs_page_and_count_reads_an_index() {
        let (store, _dir) = scratch_store().await;
        let states = [None, Some(api::JobState::Running)];
        let groups = [None, Some("exp07-precision".to_owned())];
        let experiments = [None, Some("exp07a".to_owned())];
        for state in states {
            for group in &groups {
                for experiment in &experiments {
                    for after in [None, Some(5_000)] {
                        let filter = JobFilter {
                            state,
                            group: group.clone(),
                            experiment: experiment.clone(),
                            limit: 100,
                            after,
                            offset: 0,
                        };
                        let what = format!("{filter:?}");
                        let plan: Vec<(i64, i64, i64, String)> =
                            page_query("EXPLAIN QUERY PLAN ", &filter)
                                .build_query_as()
                                .fetch_all(&mut store.read().await.unwrap())
                                .await
                                .unwrap();
                        assert_uses_indexes(&what, &plan, true);
                        let plan: Vec<(i64, i64, i64, String)> =
                            count_query("EXPLAIN QUERY PLAN ", &filter)
                                .build_query_as()
                                .fetch_all(&mut store.read().await.unwrap())
                                .await
                                .unwrap();
                        assert_uses_indexes(&format!("count {what}"), &plan, false);
                    }
                }
            }
        }
    }
}
