//! SQL of the lease protocol: claiming a job for a pod, the fence every worker call passes,
//! recording that an attempt runs, and ending an attempt. Each function runs inside the
//! caller's write; the scheduler decides what to write.

use super::db::{self, Conn};
use super::job_state::{self, Change};
use podq_api::JobState;
use podq_api::{JobId, LeaseId};
use sqlx::AssertSqlSafe;

use super::events::{insert_event, Actor};
use super::pod_time::PodActivity;
use super::{now_ms, StoreError};

/// A queued job whose slice types hold `?1`: only the queue of that type is walked
/// (`job_accelerators_queue`, migration 0027), each job looked up by its primary key for its
/// backoff. Jobs of other types cost nothing.
pub(crate) const ANY_LEASABLE: &str = "SELECT 1 FROM job_accelerators ja \
     JOIN jobs q ON q.id = ja.job_id WHERE ja.accelerator = ?1 AND ja.queued = 1 \
     AND (q.not_before IS NULL OR q.not_before <= ?2) LIMIT 1";

/// Whether a job is leasable now for `accelerator` (the claim's own condition, read-only).
pub async fn any_leasable(db: &mut Conn, accelerator: &str) -> Result<bool, StoreError> {
    let found: Option<i32> = db::query_scalar(ANY_LEASABLE)
        .bind(accelerator)
        .bind(now_ms())
        .fetch_optional(db)
        .await?;
    Ok(found.is_some())
}

/// The id of the head of pod type `{a}`'s queue at `{now}` (SQL placeholders): the first
/// leasable job, in the queue's order (class, an evicted job at the head of its class,
/// priority, submission), whose slice types hold the type, and among equals one whose first
/// choice it is. One walk of the type's own queue (`job_accelerators_queue`, migration 0027:
/// the rows of the lists that hold the type, of jobs in the queue, in its order), each job
/// looked up by its primary key for its backoff: jobs of other types are never read, however
/// many. A list's later choices are not told apart.
pub(crate) fn queue_head(a: &str, now: &str) -> String {
    format!(
        "SELECT ja.job_id FROM job_accelerators ja JOIN jobs q ON q.id = ja.job_id \
         WHERE ja.accelerator = {a} AND ja.queued = 1 \
           AND (q.not_before IS NULL OR q.not_before <= {now}) \
         ORDER BY {} LIMIT 1",
        job_state::type_queue_order("ja.")
    )
}

/// The ids of the first `{limit}` jobs leasable at `{now}` (SQL placeholders), of every
/// slice type, in the queue's order: the leasable predicate and the order as
/// `job_state.rs` writes them.
pub(crate) fn leasable_ids(now: &str, limit: &str) -> String {
    format!(
        "SELECT q.id FROM jobs q WHERE {} ORDER BY {} LIMIT {limit}",
        job_state::leasable("q.", now),
        job_state::queue_order("q.")
    )
}

/// How many of the queue's leasable jobs the pools' demand is routed from: more than every
/// pool a server follows may hold at once but for the largest fleets, and a bound on what
/// each pool report reads however deep the queue.
pub const ROUTED_JOBS: i64 = 10_000;

/// The first [`ROUTED_JOBS`] jobs leasable now, in the queue's order, each with its slice
/// types most preferred first: what the pools' demand is routed from.
pub async fn leasable_lists(db: &mut Conn) -> Result<Vec<Vec<String>>, StoreError> {
    let rows: Vec<(JobId, String, i64)> = db::query_as(AssertSqlSafe(format!(
        "SELECT j.id, ja.accelerator, ja.preference FROM jobs j \
         JOIN job_accelerators ja ON ja.job_id = j.id \
         WHERE j.id IN ({}) ORDER BY {}",
        leasable_ids("?1", "?2"),
        job_state::queue_order("j.")
    )))
    .bind(now_ms())
    .bind(ROUTED_JOBS)
    .fetch_all(db)
    .await?;
    let mut lists: Vec<(JobId, Vec<(i64, String)>)> = Vec::new();
    for (id, accelerator, preference) in rows {
        match lists.last_mut() {
            Some((last, list)) if *last == id => list.push((preference, accelerator)),
            _ => lists.push((id, vec![(preference, accelerator)])),
        }
    }
    Ok(lists
        .into_iter()
        .map(|(_, mut list)| {
            list.sort();
            list.into_iter()
                .map(|(_, accelerator)| accelerator)
                .collect()
        })
        .collect())
}

/// When each backed-off queued job becomes leasable, once for each slice type it may lease,
/// in ms since the epoch: a restarted server arms a wake-up for each.
pub async fn backoff_ends(db: &mut Conn) -> Result<Vec<(String, i64)>, StoreError> {
    Ok(db::query_as(AssertSqlSafe(format!(
        "SELECT ja.accelerator, j.not_before FROM jobs j \
         JOIN job_accelerators ja ON ja.job_id = j.id \
         WHERE {} AND j.not_before IS NOT NULL",
        job_state::in_queue("j.")
    )))
    .fetch_all(db)
    .await?)
}

/// A job claimed for a pod, as the lease needs it.
#[derive(sqlx::FromRow)]
pub struct Claimed {
    pub id: JobId,
    pub attempts: i64,
    pub experiment: String,
    pub group_name: String,
    pub config_json: String,
    pub config_sha256: String,
    pub checkpoint_dir: String,
    pub resume_from: Option<String>,
    pub resume_step: Option<i64>,
    /// Older committed checkpoints to fall back on if the newest does not load.
    #[sqlx(skip)]
    pub fallback_checkpoints: Vec<String>,
}

/// Claims the job an eviction reserved `pod` for, else the head of `accelerator`'s queue
/// ([`queue_head`]) for `pod`, starts its attempt and notes it on the timeline. Claims nothing while the pod
/// holds a live lease, whatever its job's state (a cancelled job's lease lives until its
/// worker ends the attempt): a pod runs one job at a time.
pub async fn claim(
    conn: &mut Conn,
    lease_id: LeaseId,
    pod: &str,
    accelerator: &str,
    worker: &Actor,
) -> Result<Option<Claimed>, StoreError> {
    let now = now_ms();
    // A new attempt starts the divergence guard's count anew: the last attempt's streak of
    // non-finite reports says nothing of a run resumed from a checkpoint before it.
    let write = job_state::write(Change::Lease);
    let claimed: Option<Claimed> = db::query_as(AssertSqlSafe(format!(
        "UPDATE jobs SET state = ?5, lease_id = ?1, lease_pod = ?2, \
         attempts = attempts + 1, cancel_requested = 0, not_before = NULL, updated_at = ?3, \
         reserved_pod = NULL, reserved_until = NULL, queue_head = 0, \
         diverged_reports = 0, diverged_step = NULL \
         WHERE id = COALESCE( \
           (SELECT r.id FROM jobs r JOIN job_accelerators ra ON ra.job_id = r.id \
             WHERE r.reserved_pod = ?2 AND r.reserved_until > ?3 AND {} \
             AND ra.accelerator = ?4 LIMIT 1), \
           ({})) \
         AND {} \
         AND NOT EXISTS (SELECT 1 FROM jobs WHERE lease_pod = ?2) \
         RETURNING id, attempts, experiment, group_name, config_json, config_sha256, \
           checkpoint_dir, resume_from, resume_step",
        job_state::in_queue("r."),
        queue_head("?4", "?3"),
        write.guard
    )))
    .bind(lease_id)
    .bind(pod)
    .bind(now)
    .bind(accelerator)
    .bind(write.to)
    .fetch_optional(conn)
    .await?;
    let Some(mut claimed) = claimed else {
        return Ok(None);
    };
    offer_resume_points(conn, &mut claimed).await?;
    db::query(
        "INSERT INTO attempts (job_id, attempt, lease_id, pod, accelerator, resume_from, \
         started_at, start_step) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
    )
    .bind(claimed.id)
    .bind(claimed.attempts)
    .bind(lease_id)
    .bind(pod)
    .bind(accelerator)
    .bind(&claimed.resume_from)
    .bind(now)
    .bind(claimed.resume_step)
    .execute(conn)
    .await?;
    super::pod_time::pod_ledger(conn, pod, PodActivity::Leased, now).await?;
    let from = claimed
        .resume_from
        .as_deref()
        .map(|r| format!(", resuming from {r}"))
        .unwrap_or_default();
    insert_event(
        conn,
        worker,
        Some(claimed.id),
        Some(pod),
        "leased",
        &format!(
            "attempt {} leased to pod {pod} ({accelerator}){from}",
            claimed.attempts
        ),
    )
    .await?;
    Ok(Some(claimed))
}

/// Sets where the claimed attempt resumes, and the older checkpoints it may fall back to,
/// from the job's committed checkpoints that are plainly step directories of its own
/// `checkpoint_dir` (`podq_api::orbax::resume_point_in`): a URI stored by an older release
/// that fails this is never offered, since a trainer's command names the resume point.
async fn offer_resume_points(conn: &mut Conn, claimed: &mut Claimed) -> Result<(), StoreError> {
    let Some(resume_step) = claimed.resume_step else {
        claimed.resume_from = None;
        return Ok(());
    };
    let older: Vec<(String, i64)> = db::query_as(
        "SELECT uri, step FROM checkpoints WHERE job_id = ? AND committed = 1 AND step < ? \
         ORDER BY step DESC LIMIT 16",
    )
    .bind(claimed.id)
    .bind(resume_step)
    .fetch_all(&mut *conn)
    .await?;
    let dir = claimed.checkpoint_dir.clone();
    let mut points = claimed
        .resume_from
        .take()
        .map(|uri| (uri, resume_step))
        .into_iter()
        .chain(older)
        .filter(|(uri, step)| {
            podq_api::orbax::resume_point_in(&dir, uri).is_ok_and(|found| found.step == *step)
        });
    let newest = points.next();
    claimed.fallback_checkpoints = points.take(3).map(|(uri, _)| uri).collect();
    claimed.resume_step = newest.as_ref().map(|(_, step)| *step);
    claimed.resume_from = newest.map(|(uri, _)| uri);
    Ok(())
}

/// The job and attempt of `lease_id` if it is still the job's live lease: every worker call
/// passes this check inside its write.
pub async fn fence(conn: &mut Conn, lease_id: LeaseId) -> Result<Option<(JobId, i64)>, StoreError> {
    Ok(
        db::query_as("SELECT id, attempts FROM jobs WHERE lease_id = ?")
            .bind(lease_id)
            .fetch_optional(conn)
            .await?,
    )
}

/// What the fence of a worker's report finds: the job and attempt its lease holds, and the
/// job as the judge of a metrics batch needs it.
#[derive(Debug, sqlx::FromRow)]
pub struct FencedReport {
    pub lease_id: LeaseId,
    pub job_id: JobId,
    pub job_seq: i64,
    pub attempt: i64,
    #[sqlx(flatten)]
    pub judged: super::stop_rules::Judged,
}

/// [`fence`] for many leases in one statement: those still their job's live lease, by id.
pub async fn fence_many(
    conn: &mut Conn,
    lease_ids: &[LeaseId],
) -> Result<std::collections::HashMap<LeaseId, FencedReport>, StoreError> {
    let mut query = db::Builder::new(
        "SELECT lease_id, id AS job_id, seq AS job_seq, attempts AS attempt, experiment, \
         total_steps, ignore_stop_rules, diverged_reports, diverged_step, stop_request, \
         (cancel_requested <> 0) AS cancel_requested FROM jobs WHERE lease_id IN ",
    );
    query.push_list(lease_ids.iter().map(LeaseId::to_string));
    let mut fenced = std::collections::HashMap::new();
    for row in query
        .build_query_as::<FencedReport>()
        .fetch_all(conn)
        .await?
    {
        fenced.insert(row.lease_id, row);
    }
    Ok(fenced)
}

/// Records that the attempt of `lease_id` runs on every host. False when the lease ended or
/// the job was already running.
pub async fn mark_running(
    conn: &mut Conn,
    lease_id: LeaseId,
    job_id: JobId,
    pod: &str,
    attempt: i64,
) -> Result<bool, StoreError> {
    let now = now_ms();
    let write = job_state::write(Change::Start);
    let changed = db::query(AssertSqlSafe(format!(
        "UPDATE jobs SET state = ?, updated_at = ? WHERE id = ? AND lease_id = ? AND {}",
        write.guard
    )))
    .bind(write.to)
    .bind(now)
    .bind(job_id)
    .bind(lease_id)
    .execute(conn)
    .await?;
    if changed == 0 {
        return Ok(false);
    }
    db::query("UPDATE attempts SET running_at = COALESCE(running_at, ?) WHERE lease_id = ?")
        .bind(now)
        .bind(lease_id)
        .execute(conn)
        .await?;
    insert_event(
        conn,
        &Actor::worker(pod),
        Some(job_id),
        Some(pod),
        "running",
        &format!("attempt {attempt}: trainer started on every host"),
    )
    .await?;
    Ok(true)
}

/// The job a live lease belongs to and what its attempt achieved, as ending it needs.
#[derive(sqlx::FromRow)]
pub struct LeaseHolder {
    pub id: JobId,
    pub attempts: i64,
    pub failures: i64,
    pub max_failures: i64,
    pub stalled_attempts: i64,
    pub cancel_requested: bool,
    pub resume_step: Option<i64>,
    pub lease_pod: Option<String>,
    pub accelerator: String,
    pub start_step: Option<i64>,
    pub first_step: Option<i64>,
    pub end_step: Option<i64>,
    /// Whether this attempt committed a checkpoint.
    pub new_checkpoint: bool,
    /// What the server asked the worker to stop for ('evicted', 'suspended'), and the
    /// message the attempt ends with.
    pub stop_request: Option<String>,
    pub stop_message: Option<String>,
}

pub async fn holder(conn: &mut Conn, lease_id: LeaseId) -> Result<Option<LeaseHolder>, StoreError> {
    Ok(db::query_as(
        "SELECT j.id, j.attempts, j.failures, j.max_failures, j.stalled_attempts, \
         (j.cancel_requested <> 0) AS cancel_requested, j.resume_step, j.lease_pod, j.accelerator, \
         a.start_step, a.first_step, a.end_step, \
         EXISTS (SELECT 1 FROM checkpoints c WHERE c.job_id = j.id \
           AND c.attempt = j.attempts AND c.committed = 1) AS new_checkpoint, \
         j.stop_request, j.stop_message \
         FROM jobs j JOIN attempts a ON a.lease_id = j.lease_id WHERE j.lease_id = ?",
    )
    .bind(lease_id)
    .fetch_optional(conn)
    .await?)
}

/// How an attempt ended, as recorded on it.
pub struct AttemptEnd<'a> {
    pub outcome: &'a str,
    pub start_step: Option<i64>,
    pub end_step: Option<i64>,
    pub exit_codes_json: String,
    pub log_tail: &'a str,
    pub message: Option<&'a str>,
    pub phases: Option<podq_api::TrainerPhases>,
    pub stopping_s: Option<f64>,
    /// Why the server stopped it, beyond its outcome: 'evicted' or 'suspended'.
    pub cause: Option<&'a str>,
}

/// What the job becomes when its attempt ends.
pub struct JobAfter<'a> {
    /// As `lease/policy.rs` judged it.
    pub state: JobState,
    pub failures: i64,
    pub stalled_attempts: i64,
    pub preemption: bool,
    pub not_before: Option<i64>,
    pub verify_checkpoints: bool,
    pub message: Option<&'a str>,
    /// Evicted: back to the head of its class.
    pub queue_head: bool,
}

/// Ends the attempt of `lease_id`, settles its goodput and releases the job's lease.
pub async fn end_attempt(
    conn: &mut Conn,
    lease_id: LeaseId,
    job_id: JobId,
    end: &AttemptEnd<'_>,
    job: &JobAfter<'_>,
) -> Result<(), StoreError> {
    let now = now_ms();
    if let Some(phases) = &end.phases {
        super::pod_time::record_phases(conn, lease_id, phases).await?;
    }
    db::query(
        "UPDATE attempts SET ended_at = ?, running_at = COALESCE(running_at, first_step_at), \
         outcome = ?, start_step = COALESCE(?, start_step), \
         end_step = COALESCE(end_step, ?), exit_codes_json = ?, log_tail = ?, message = ?, \
         stopping_s = ?, cause = ? \
         WHERE lease_id = ?",
    )
    .bind(now)
    .bind(end.outcome)
    .bind(end.start_step)
    .bind(end.end_step)
    .bind(&end.exit_codes_json)
    .bind(end.log_tail)
    .bind(end.message)
    .bind(end.stopping_s)
    .bind(end.cause)
    .bind(lease_id)
    .execute(conn)
    .await?;
    super::goodput::settle_attempt(conn, lease_id).await?;
    super::pod_time::settle_attempt(conn, lease_id).await?;
    let pod: String = db::query_scalar("SELECT pod FROM attempts WHERE lease_id = ?")
        .bind(lease_id)
        .fetch_one(conn)
        .await?;
    super::pod_time::pod_ledger(conn, &pod, PodActivity::Between, now).await?;
    // Refused, the transaction rolls back: the attempt's end is not recorded either.
    job_state::apply(
        conn,
        job_id,
        Change::End(job.state),
        job_state::TO,
        "lease_id = NULL, lease_pod = NULL, cancel_requested = 0, stop_request = NULL, \
         stop_message = NULL, queue_head = ?, failures = ?, stalled_attempts = ?, \
         preemptions = preemptions + ?, not_before = ?, verify_checkpoints = ?, \
         message = COALESCE(?, message), updated_at = ?",
        |update| {
            update
                .bind(job.queue_head)
                .bind(job.failures)
                .bind(job.stalled_attempts)
                .bind(i64::from(job.preemption))
                .bind(job.not_before)
                .bind(job.verify_checkpoints)
                .bind(job.message)
                .bind(now)
        },
    )
    .await
}

/// For a lease that is no longer live: the outcome its attempt recorded, its job's state and
/// the pod it was held by.
pub async fn ended_attempt(
    conn: &mut Conn,
    lease_id: LeaseId,
) -> Result<Option<EndedAttempt>, StoreError> {
    Ok(db::query_as(
        "SELECT a.outcome, j.state AS job_state, a.pod FROM attempts a \
         JOIN jobs j ON j.id = a.job_id WHERE a.lease_id = ?",
    )
    .bind(lease_id)
    .fetch_optional(conn)
    .await?)
}

/// An attempt as its lease's repeated finish finds it.
#[derive(sqlx::FromRow)]
pub struct EndedAttempt {
    pub outcome: Option<String>,
    pub job_state: JobState,
    pub pod: String,
}

/// The leases the database holds live, for the in-memory table after a restart.
#[derive(sqlx::FromRow)]
pub struct LiveRow {
    pub lease_id: LeaseId,
    pub id: JobId,
    pub pod: String,
    pub attempts: i64,
    pub cancel_requested: bool,
    pub state: JobState,
    pub stop_message: Option<String>,
}

pub async fn live(db: &mut Conn) -> Result<Vec<LiveRow>, StoreError> {
    Ok(db::query_as(
        "SELECT lease_id, id, COALESCE(lease_pod, '') AS pod, attempts, \
         (cancel_requested <> 0) AS cancel_requested, state, stop_message \
         FROM jobs WHERE lease_id IS NOT NULL",
    )
    .fetch_all(db)
    .await?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::test_support::scratch_store;

    /// The head of a type's queue walks that type's queue in its order and nothing else:
    /// never the queue of every type, never a sort.
    #[tokio::test]
    async fn the_head_of_a_types_queue_walks_an_index() {
        let (store, _dir) = scratch_store().await;
        let plan: Vec<(i64, i64, i64, String)> = db::query_as(AssertSqlSafe(format!(
            "EXPLAIN QUERY PLAN {}",
            queue_head("?1", "?2")
        )))
        .bind("v4-64")
        .bind(0_i64)
        .fetch_all(&mut store.read().await.unwrap())
        .await
        .unwrap();
        let details: Vec<&str> = plan.iter().map(|(.., d)| d.as_str()).collect();
        assert!(
            details
                .iter()
                .any(|d| d
                    .starts_with("SEARCH ja USING INDEX job_accelerators_queue (accelerator=?)")),
            "the type's own queue is walked: {details:?}"
        );
        for detail in &details {
            assert!(
                !detail.starts_with("SCAN "),
                "a scan of a table: {details:?}"
            );
            assert!(
                !detail.contains("TEMP B-TREE"),
                "the rows come in the queue's order, unsorted: {details:?}"
            );
            assert!(
                !detail.contains("jobs_queue_order") && !detail.contains("jobs_leasable"),
                "the queue of every type is not walked: {details:?}"
            );
        }
    }
}

#[cfg(test)]
mod each_types_queue {
    use futures::FutureExt;
    use podq_api::LeaseId;

    use super::*;
    use crate::store::events::Actor;
    use crate::store::jobs;
    use crate::store::test_support::{scratch_store, submit_waiting};
    use crate::store::{leases, Store};

    /// The head of `accelerator`'s queue, and that every row of a queued job carries its
    /// job's place in the queue and no other row is in one.
    async fn head(store: &Store, accelerator: &str) -> Option<JobId> {
        let mut conn = store.read().await.unwrap();
        let stale: i64 = db::query_scalar(AssertSqlSafe(format!(
            "SELECT COUNT(*) FROM job_accelerators ja JOIN jobs j ON j.id = ja.job_id \
             WHERE ja.queued <> CASE WHEN {} THEN 1 ELSE 0 END \
             OR (ja.queued = 1 AND (ja.class_rank <> j.class_rank \
               OR ja.queue_head <> j.queue_head OR ja.priority <> j.priority \
               OR ja.seq <> j.seq OR ja.later_choice <> \
               CASE WHEN ja.preference > 0 THEN 1 ELSE 0 END))",
            job_state::in_queue("j.")
        )))
        .fetch_one(&mut conn)
        .await
        .unwrap();
        assert_eq!(stale, 0, "rows out of step with their jobs");
        db::query_scalar(sqlx::AssertSqlSafe(leases::queue_head("?1", "?2")))
            .bind(accelerator)
            .bind(now_ms())
            .fetch_optional(&mut conn)
            .await
            .unwrap()
    }

    async fn change<F>(store: &Store, f: F)
    where
        F: for<'c> FnOnce(&'c mut Conn) -> futures::future::BoxFuture<'c, Result<(), StoreError>>
            + Send
            + 'static,
    {
        store.write(f).await.unwrap();
    }

    /// Each type's queue follows its jobs through every change of their place: priority,
    /// class, a hold, a cancel and a requeue, a claim; in the queue's order, a job's first
    /// choice before its later ones among equals.
    #[tokio::test]
    async fn each_types_queue_follows_its_jobs() {
        let (store, _dir) = scratch_store().await;
        let a = submit_waiting(&store, &["v4-64"], 0, 1).await;
        let b = submit_waiting(&store, &["v6e-32", "v4-64"], 0, 1).await;
        let c = submit_waiting(&store, &["v4-64", "v6e-32"], 5, 1).await;
        assert_eq!(head(&store, "v4-64").await, Some(c), "priority first");
        assert_eq!(head(&store, "v6e-32").await, Some(c));
        assert_eq!(head(&store, "v5litepod-16").await, None);

        change(&store, move |conn| jobs::set_priority(conn, c, 0).boxed()).await;
        assert_eq!(head(&store, "v4-64").await, Some(a));
        assert_eq!(
            head(&store, "v6e-32").await,
            Some(b),
            "b's first choice before c's second, though c came later"
        );
        change(&store, move |conn| jobs::hold(conn, a, "held").boxed()).await;
        assert_eq!(
            head(&store, "v4-64").await,
            Some(c),
            "c's first choice before b's second"
        );
        change(&store, move |conn| jobs::resume(conn, a).boxed()).await;
        assert_eq!(head(&store, "v4-64").await, Some(a));
        change(&store, move |conn| {
            jobs::set_class(conn, b, "urgent", 0).boxed()
        })
        .await;
        assert_eq!(head(&store, "v4-64").await, Some(b), "a higher class first");
        change(&store, move |conn| {
            async move {
                jobs::rerank_classes(conn, &[("urgent".to_owned(), 2)], 1).await?;
                Ok(())
            }
            .boxed()
        })
        .await;
        assert_eq!(
            head(&store, "v4-64").await,
            Some(a),
            "b's class ranks last now"
        );

        let claimed = store
            .write(move |conn| {
                async move {
                    leases::claim(
                        conn,
                        LeaseId::new_random(),
                        "pod-1",
                        "v4-64",
                        &Actor::worker("pod-1"),
                    )
                    .await
                }
                .boxed()
            })
            .await
            .unwrap()
            .map(|claimed| claimed.id);
        assert_eq!(claimed, Some(a));
        assert_eq!(head(&store, "v4-64").await, Some(c), "a left the queue");
        change(&store, move |conn| {
            async move { jobs::cancel(conn, c, "ada").await.map(drop) }.boxed()
        })
        .await;
        assert_eq!(head(&store, "v4-64").await, Some(b));
        assert_eq!(head(&store, "v6e-32").await, Some(b));
        change(&store, move |conn| jobs::requeue(conn, c).boxed()).await;
        assert_eq!(head(&store, "v4-64").await, Some(c), "back in its place");
    }
}
