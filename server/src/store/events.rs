//! SQL about events: what happened to a job or a pod, in the order it happened. Every other
//! file that changes state writes its event here, so this file imports none of them.

use super::db::{self, Conn};
use super::rows::EventRow;
use super::{now_ms, StoreError};
use podq_api::JobId;

/// Who made a change, as the audit trail records it beside the change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Actor {
    /// A person's name, `worker:POD`, `pool:NAME`, `schedule:ID` or `podq`.
    pub by: String,
    /// The address the request came from, when a request made the change.
    pub address: Option<String>,
    /// The request's id (its `X-Request-Id`), when a request made the change.
    pub request_id: Option<String>,
    /// Whose token the request carried: the person, or a worker token's own name (a
    /// worker's change is `by` its pod, and this says whose credential spoke for it).
    pub token_holder: Option<String>,
}

impl Actor {
    fn named(by: String) -> Actor {
        Actor {
            by,
            address: None,
            request_id: None,
            token_holder: None,
        }
    }

    /// podq itself: the reaper, a catalog reload, a start-up repair.
    pub fn podq() -> Actor {
        Actor::named("podq".to_owned())
    }

    /// The worker beside `pod`, reporting through its lease.
    pub fn worker(pod: &str) -> Actor {
        Actor::named(format!("worker:{pod}"))
    }

    /// A pool's process, reporting what it did (made or deleted a slice, blocked a zone),
    /// in the request `request` made.
    pub fn pool_request(pool: &str, request: &Actor) -> Actor {
        Actor {
            by: format!("pool:{pool}"),
            ..Actor::worker_request("", request)
        }
    }

    /// A cron schedule submitting on time.
    pub fn schedule(id: &str) -> Actor {
        Actor::named(format!("schedule:{id}"))
    }

    /// A request: `by` is the caller's name.
    pub fn request(by: &str, address: Option<String>, request_id: Option<String>) -> Actor {
        Actor {
            by: by.to_owned(),
            address,
            request_id,
            token_holder: Some(by.to_owned()),
        }
    }

    /// The worker beside `pod`, reporting in the request `request` made: the pod is who
    /// acts, the request's token holder, address and id say who spoke for it.
    pub fn worker_request(pod: &str, request: &Actor) -> Actor {
        Actor {
            by: format!("worker:{pod}"),
            address: request.address.clone(),
            request_id: request.request_id.clone(),
            token_holder: request.token_holder.clone(),
        }
    }

    /// The person's name when a person made the change (not a worker, schedule or podq).
    pub fn person(&self) -> Option<&str> {
        let by = self.by.as_str();
        let machine = ["worker:", "schedule:", "pool:"]
            .iter()
            .any(|prefix| by.starts_with(prefix));
        (by != "podq" && !machine).then_some(by)
    }
}

pub async fn insert_event(
    conn: &mut Conn,
    actor: &Actor,
    job_id: Option<JobId>,
    pod: Option<&str>,
    kind: &str,
    message: &str,
) -> Result<(), StoreError> {
    db::query(
        "INSERT INTO events (at, job_id, pod, kind, message, actor, address, request_id, \
         token_holder) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
    )
    .bind(now_ms())
    .bind(job_id)
    .bind(pod)
    .bind(kind)
    .bind(message)
    .bind(&actor.by)
    .bind(&actor.address)
    .bind(&actor.request_id)
    .bind(&actor.token_holder)
    .execute(conn)
    .await?;
    Ok(())
}

pub(crate) const JOB_EVENTS: &str = "SELECT id, at, job_id, pod, kind, message, actor FROM events \
     WHERE job_id = ? AND id > ? ORDER BY id LIMIT ?";

pub async fn job_events(
    db: &mut Conn,
    job_id: JobId,
    after_id: i64,
    limit: i64,
) -> Result<Vec<EventRow>, StoreError> {
    Ok(db::query_as::<EventRow>(JOB_EVENTS)
        .bind(job_id)
        .bind(after_id)
        .bind(limit)
        .fetch_all(db)
        .await?)
}

/// The id of the newest event, 0 when there is none.
pub async fn last_event_id(db: &mut Conn) -> Result<i64, StoreError> {
    Ok(db::query_scalar("SELECT COALESCE(MAX(id), 0) FROM events")
        .fetch_one(db)
        .await?)
}

pub async fn recent_events(
    db: &mut Conn,
    after_id: i64,
    limit: i64,
) -> Result<Vec<EventRow>, StoreError> {
    Ok(db::query_as::<EventRow>(
        "SELECT id, at, job_id, pod, kind, message, actor FROM events WHERE id > ? ORDER BY id LIMIT ?",
    )
    .bind(after_id)
    .bind(limit)
    .fetch_all(db)
    .await?)
}
