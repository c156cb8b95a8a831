//! SQL of eviction: the job at the head of each accelerator's queue, the running jobs it
//! might evict with what an eviction would cost them, and the write that asks for the pod.

use sqlx::AssertSqlSafe;

use super::db::{self, Conn};
use super::events::{insert_event, Actor};
use super::job_state;
use super::{now_ms, StoreError};
use podq_api::{JobId, LeaseId};

/// The slice types of the pods running jobs now.
pub async fn live_accelerators(db: &mut Conn) -> Result<Vec<String>, StoreError> {
    Ok(db::query_scalar(AssertSqlSafe(format!(
        "SELECT DISTINCT a.accelerator FROM jobs j JOIN attempts a ON a.lease_id = j.lease_id \
         WHERE {} AND j.same_as IS NULL ORDER BY a.accelerator",
        job_state::state_in("j.state", &job_state::on_pod())
    )))
    .fetch_all(db)
    .await?)
}

/// The job a freed pod of its accelerator would go to.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct QueueHead {
    pub id: JobId,
    pub experiment: String,
    pub priority_class: String,
    pub submitted_by: Option<String>,
    /// Set while an eviction it asked for is under way.
    pub reserved_pod: Option<String>,
    pub reserved_until: Option<i64>,
}

pub async fn queue_head(db: &mut Conn, accelerator: &str) -> Result<Option<QueueHead>, StoreError> {
    Ok(db::query_as(sqlx::AssertSqlSafe(format!(
        "SELECT id, experiment, priority_class, submitted_by, reserved_pod, reserved_until \
         FROM jobs WHERE id = ({})",
        super::leases::queue_head("?1", "?2")
    )))
    .bind(accelerator)
    .bind(now_ms())
    .fetch_optional(db)
    .await?)
}

/// A job running on a pod of `accelerator` that an eviction could stop, with what stopping it would lose.
#[derive(Debug, Clone, PartialEq, sqlx::FromRow)]
pub struct Running {
    pub id: JobId,
    pub experiment: String,
    pub priority_class: String,
    pub lease_id: LeaseId,
    pub pod: String,
    /// When its attempt was leased, and when its trainer started (ms since the epoch).
    pub started_at: i64,
    pub running_at: Option<i64>,
    /// When this attempt last committed a checkpoint.
    pub last_commit_at: Option<i64>,
    /// Attempts of this job evicted in the last 24 hours.
    pub evictions_today: i64,
}

pub async fn running(db: &mut Conn, accelerator: &str) -> Result<Vec<Running>, StoreError> {
    let day_ago = now_ms() - 24 * 3600 * 1000;
    Ok(db::query_as(AssertSqlSafe(format!(
        "SELECT j.id, j.experiment, j.priority_class, j.lease_id, j.lease_pod AS pod, \
         a.started_at, a.running_at, \
         (SELECT MAX(c.seen_at) FROM checkpoints c WHERE c.job_id = j.id \
           AND c.attempt = j.attempts AND c.committed = 1) AS last_commit_at, \
         (SELECT COUNT(*) FROM attempts e WHERE e.job_id = j.id AND e.cause = 'evicted' \
           AND e.ended_at >= ?) AS evictions_today \
         FROM jobs j JOIN attempts a ON a.lease_id = j.lease_id \
         WHERE {} AND j.same_as IS NULL AND a.accelerator = ? \
         AND j.stop_request IS NULL AND j.cancel_requested = 0",
        job_state::state_in("j.state", &job_state::on_pod())
    )))
    .bind(day_ago)
    .bind(accelerator)
    .fetch_all(db)
    .await?)
}

/// Asks for `victim`'s pod for `evictor`: the victim's worker is told to stop it, and the
/// pod is held for the evictor until `reserved_until`. Answers false (and writes nothing)
/// when either job moved on since they were read, its class changed included (a `PATCH`
/// between the choice and this write must not let a job evict one it no longer may).
pub async fn evict(
    conn: &mut Conn,
    evictor: &QueueHead,
    victim: &Running,
    why: &str,
    reserved_until: i64,
) -> Result<bool, StoreError> {
    let now = now_ms();
    let stopped = db::query(
        "UPDATE jobs SET stop_request = 'evicted', stop_message = ?, updated_at = ? \
         WHERE id = ? AND lease_id = ? AND stop_request IS NULL AND cancel_requested = 0 \
         AND priority_class = ?",
    )
    .bind(why)
    .bind(now)
    .bind(victim.id)
    .bind(victim.lease_id)
    .bind(&victim.priority_class)
    .execute(conn)
    .await?;
    if stopped == 0 {
        return Ok(false);
    }
    let reserved = db::query(AssertSqlSafe(format!(
        "UPDATE jobs SET reserved_pod = ?, reserved_until = ?, updated_at = ? \
         WHERE id = ? AND {} AND priority_class = ?",
        job_state::state_in("state", &job_state::waiting())
    )))
    .bind(&victim.pod)
    .bind(reserved_until)
    .bind(now)
    .bind(evictor.id)
    .bind(&evictor.priority_class)
    .execute(conn)
    .await?;
    if reserved == 0 {
        // The evictor was leased (or left the queue) since it was read: nothing to evict for.
        db::query(
            "UPDATE jobs SET stop_request = NULL, stop_message = NULL WHERE id = ? AND lease_id = ?",
        )
        .bind(victim.id)
        .bind(victim.lease_id)
        .execute(conn)
        .await?;
        return Ok(false);
    }
    let podq = Actor::podq();
    let pod = Some(victim.pod.as_str());
    insert_event(conn, &podq, Some(victim.id), pod, "evicting", why).await?;
    let message = format!(
        "pod {} is held for this job while job {} ({}) saves and stops",
        victim.pod, victim.id, victim.experiment
    );
    insert_event(conn, &podq, Some(evictor.id), pod, "evicting", &message).await?;
    Ok(true)
}
