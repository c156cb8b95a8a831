//! Leases: handing whole-pod jobs to workers, hearing from them, and taking jobs back from
//! workers that went silent.
//!
//! The database holds each job's live `lease_id` (the fence every worker call is checked
//! against) durably. Lease expiry lives only in memory: heartbeats are the most frequent call
//! and need no fsync. After a restart every live lease gets a fresh full TTL, so a worker
//! that is still alive keeps its job and a dead one is reaped one TTL later.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use futures::FutureExt;
use podq_api::{
    AttemptOutcome, CheckpointsBatch, FinishRequest, FinishResponse, HeartbeatRequest,
    HeartbeatResponse, JobState, Lease, LeasePhase, LeaseRequest, MetricsBatch, PodDescription,
};
use sqlx::sqlite::SqliteConnection;
use sqlx::{QueryBuilder, Sqlite};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use crate::http::error::ApiError;
use crate::scheduler::policy::{self, JobBudget};
use crate::store::jobs::insert_event;
use crate::store::{now_ms, Store, StoreError};
use crate::AppState;

#[derive(Debug, Clone)]
pub struct LiveLease {
    pub job_id: String,
    pub pod: String,
    pub attempt: i64,
    pub expires_at: Instant,
    pub cancel: bool,
    pub running: bool,
    /// Whether the database knows the attempt is running yet (see `persist_running`).
    pub running_recorded: bool,
    pub step: Option<i64>,
}

/// The leases workers hold right now, with their expiry.
pub struct LiveLeases {
    ttl: Duration,
    leases: Mutex<HashMap<Uuid, LiveLease>>,
    /// Woken when a job may have become leasable.
    pub queue_changed: Notify,
    /// What each pod last told us and when it was written, so an unchanged pod asking for
    /// work again does not cost a write every time.
    pods_recorded: Mutex<HashMap<String, (PodDescription, Instant)>>,
}

impl LiveLeases {
    pub async fn load(store: &Store, ttl: Duration) -> Result<LiveLeases, StoreError> {
        let rows: Vec<(String, String, String, i64, bool, String)> = sqlx::query_as(
            "SELECT lease_id, id, COALESCE(lease_pod, ''), attempts, cancel_requested, state \
             FROM jobs WHERE lease_id IS NOT NULL",
        )
        .fetch_all(store.reader())
        .await?;
        let now = Instant::now();
        let leases = rows
            .into_iter()
            .filter_map(|(lease, job_id, pod, attempt, cancel, state)| {
                Some((
                    Uuid::parse_str(&lease).ok()?,
                    LiveLease {
                        job_id,
                        pod,
                        attempt,
                        expires_at: now + ttl,
                        cancel,
                        running: state == "running",
                        running_recorded: state == "running",
                        step: None,
                    },
                ))
            })
            .collect();
        Ok(LiveLeases {
            ttl,
            leases: Mutex::new(leases),
            queue_changed: Notify::new(),
            pods_recorded: Mutex::new(HashMap::new()),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Uuid, LiveLease>> {
        self.leases.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn get(&self, lease: Uuid) -> Option<LiveLease> {
        self.lock().get(&lease).cloned()
    }

    pub fn all(&self) -> Vec<(Uuid, LiveLease)> {
        self.lock().iter().map(|(k, v)| (*k, v.clone())).collect()
    }

    fn insert(&self, lease: Uuid, live: LiveLease) {
        self.lock().insert(lease, live);
    }

    fn remove(&self, lease: Uuid) {
        self.lock().remove(&lease);
    }

    pub fn flag_cancel(&self, lease: Uuid) {
        if let Some(live) = self.lock().get_mut(&lease) {
            live.cancel = true;
        }
    }

    fn of_pod(&self, pod: &str) -> Vec<Uuid> {
        self.lock()
            .iter()
            .filter(|(_, l)| l.pod == pod)
            .map(|(id, _)| *id)
            .collect()
    }

    /// Whether the pod's record needs writing: it changed, or was written long enough ago
    /// that its "last seen" would go stale.
    fn pod_needs_record(&self, pod: &str, desc: &PodDescription) -> bool {
        let recorded = self.pods_recorded.lock().unwrap_or_else(|e| e.into_inner());
        recorded
            .get(pod)
            .is_none_or(|(last, at)| last != desc || at.elapsed() >= POD_RECORD_INTERVAL)
    }

    /// Notes that the pod's record now holds `desc`.
    pub fn pod_recorded(&self, pod: &str, desc: &PodDescription) {
        self.pods_recorded
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(pod.to_owned(), (desc.clone(), Instant::now()));
    }

    fn expired(&self, now: Instant) -> Vec<Uuid> {
        self.lock()
            .iter()
            .filter(|(_, l)| l.expires_at <= now)
            .map(|(id, _)| *id)
            .collect()
    }
}

const MAX_WAIT: Duration = Duration::from_secs(60);
/// How stale a pod's "last seen" may get while it keeps asking for work unchanged.
const POD_RECORD_INTERVAL: Duration = Duration::from_secs(5);
const DEFAULT_WAIT: Duration = Duration::from_secs(20);
const MAX_LOG_TAIL: usize = 16 * 1024;

/// `POST /pods/{name}/lease`: waits up to `wait_s` for a job and leases it to the pod.
pub async fn lease(
    state: &AppState,
    pod: &str,
    req: LeaseRequest,
) -> Result<Option<Lease>, ApiError> {
    let wait = req
        .wait_s
        .map(Duration::from_secs)
        .unwrap_or(DEFAULT_WAIT)
        .min(MAX_WAIT);
    let deadline = tokio::time::Instant::now() + wait;
    // A pod runs one job at a time: a pod asking for work while holding a lease has lost
    // track of it (its worker restarted). End that attempt so the job can run again.
    for stale in state.leases.of_pod(pod) {
        end_lease(
            state,
            stale,
            FinishRequest {
                outcome: AttemptOutcome::Lost,
                exit_codes: Vec::new(),
                start_step: None,
                end_step: None,
                log_tail: None,
                message: Some(
                    "the pod asked for a new lease while holding this one: its worker restarted"
                        .into(),
                ),
            },
        )
        .await
        .ok();
    }
    let ready = req.pod.preflight.as_ref().is_none_or(|p| p.passed);
    if !ready {
        record_pod(state, pod, &req).await?;
    }
    loop {
        let notified = state.leases.queue_changed.notified();
        // A read first: waiting pods that find nothing leasable take no write turn, so an
        // idle server with waiting workers does not write (but for a pod's last-seen time,
        // at most every POD_RECORD_INTERVAL).
        if ready && any_leasable(state, &req.pod.accelerator).await? {
            if let Some(lease) = try_lease(state, pod, &req).await? {
                return Ok(Some(lease));
            }
        } else if ready && state.leases.pod_needs_record(pod, &req.pod) {
            record_pod(state, pod, &req).await?;
        }
        let now = tokio::time::Instant::now();
        if now >= deadline {
            return Ok(None);
        }
        // Backoffs expire without anyone calling: look again at least every second.
        let nap = (deadline - now).min(Duration::from_secs(1));
        tokio::select! {
            _ = notified => {}
            _ = tokio::time::sleep(nap) => {}
        }
    }
}

/// Whether a job is leasable now for `accelerator` (the claim's own condition, read-only).
async fn any_leasable(state: &AppState, accelerator: &str) -> Result<bool, ApiError> {
    let found: Option<i64> = sqlx::query_scalar(
        "SELECT 1 FROM jobs WHERE state = 'queued' AND same_as IS NULL AND accelerator = ? \
         AND (not_before IS NULL OR not_before <= ?) LIMIT 1",
    )
    .bind(accelerator)
    .bind(now_ms())
    .fetch_optional(state.store.reader())
    .await
    .map_err(StoreError::from)?;
    Ok(found.is_some())
}

async fn record_pod(state: &AppState, pod: &str, req: &LeaseRequest) -> Result<(), ApiError> {
    let name = pod.to_owned();
    let desc = req.pod.clone();
    state
        .store
        .write(move |conn| async move { upsert_pod(conn, &name, &desc).await }.boxed())
        .await?;
    state.leases.pod_recorded(pod, &req.pod);
    Ok(())
}

pub async fn upsert_pod(
    conn: &mut SqliteConnection,
    pod: &str,
    desc: &podq_api::PodDescription,
) -> Result<(), ApiError> {
    let preflight = desc
        .preflight
        .as_ref()
        .map(|p| serde_json::to_string(p).unwrap_or_default());
    sqlx::query(
        "INSERT INTO pods (name, accelerator, hosts, state, health, preflight_json, recovery, last_seen_at) \
         VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (name) DO UPDATE SET \
         accelerator = excluded.accelerator, hosts = excluded.hosts, state = excluded.state, \
         health = excluded.health, preflight_json = COALESCE(excluded.preflight_json, pods.preflight_json), \
         recovery = excluded.recovery, last_seen_at = excluded.last_seen_at",
    )
    .bind(pod)
    .bind(&desc.accelerator)
    .bind(i64::from(desc.hosts))
    .bind(&desc.state)
    .bind(&desc.health)
    .bind(preflight)
    .bind(&desc.recovery)
    .bind(now_ms())
    .execute(&mut *conn)
    .await?;
    Ok(())
}

type LeasedRow = (
    String,
    i64,
    String,
    String,
    String,
    String,
    String,
    Option<String>,
    Option<i64>,
);

async fn try_lease(
    state: &AppState,
    pod: &str,
    req: &LeaseRequest,
) -> Result<Option<Lease>, ApiError> {
    let lease_id = Uuid::new_v4();
    let pod_name = pod.to_owned();
    let accelerator = req.pod.accelerator.clone();
    let config = state.config.clone();
    let description = state
        .leases
        .pod_needs_record(pod, &req.pod)
        .then(|| req.pod.clone());
    let recorded = description.clone();
    let granted = state
        .store
        .write(move |conn| {
            async move {
                if let Some(description) = &description {
                    upsert_pod(conn, &pod_name, description).await?;
                }
                let now = now_ms();
                let row: Option<LeasedRow> = sqlx::query_as(
                    "UPDATE jobs SET state = 'leased', lease_id = ?, lease_pod = ?, \
                     attempts = attempts + 1, cancel_requested = 0, not_before = NULL, updated_at = ? \
                     WHERE id = (SELECT id FROM jobs WHERE state = 'queued' AND same_as IS NULL \
                       AND accelerator = ? AND (not_before IS NULL OR not_before <= ?) \
                       ORDER BY priority DESC, seq LIMIT 1) \
                     AND NOT EXISTS (SELECT 1 FROM jobs WHERE lease_pod = ? \
                       AND state IN ('leased', 'running')) \
                     RETURNING id, attempts, experiment, group_name, config_json, config_sha256, \
                       checkpoint_dir, resume_from, resume_step",
                )
                .bind(lease_id.to_string())
                .bind(&pod_name)
                .bind(now)
                .bind(&accelerator)
                .bind(now)
                // A pod holds at most one live lease: overlapping lease calls for one pod
                // each end its old leases first, then only one of them may claim.
                .bind(&pod_name)
                .fetch_optional(&mut *conn)
                .await?;
                let Some((job_id, attempt, experiment, group, config_json, sha, dir, resume_from, resume_step)) =
                    row
                else {
                    return Ok::<_, ApiError>(None);
                };
                sqlx::query(
                    "INSERT INTO attempts (job_id, attempt, lease_id, pod, resume_from, started_at, start_step) \
                     VALUES (?, ?, ?, ?, ?, ?, ?)",
                )
                .bind(&job_id)
                .bind(attempt)
                .bind(lease_id.to_string())
                .bind(&pod_name)
                .bind(&resume_from)
                .bind(now)
                .bind(resume_step)
                .execute(&mut *conn)
                .await?;
                let fallback: Vec<String> = if resume_step.is_none() {
                    Vec::new()
                } else {
                    sqlx::query_scalar(
                    "SELECT uri FROM checkpoints WHERE job_id = ? AND committed = 1 AND step < ? \
                     ORDER BY step DESC LIMIT 3",
                )
                    .bind(&job_id)
                    .bind(resume_step.unwrap_or(0))
                    .fetch_all(&mut *conn)
                    .await?
                };
                let from = resume_from
                    .as_deref()
                    .map(|r| format!(", resuming from {r}"))
                    .unwrap_or_default();
                insert_event(
                    conn,
                    Some(&job_id),
                    Some(&pod_name),
                    "leased",
                    &format!("attempt {attempt} leased to pod {pod_name}{from}"),
                )
                .await?;
                Ok(Some(Lease {
                    lease_id,
                    job_id: Uuid::parse_str(&job_id).map_err(StoreError::from_uuid)?,
                    attempt,
                    experiment,
                    group,
                    config: serde_json::from_str(&config_json).unwrap_or_default(),
                    config_sha256: sha,
                    checkpoint_dir: dir,
                    resume_from,
                    resume_step,
                    fallback_checkpoints: fallback,
                    lease_ttl_s: config.lease_ttl.as_secs(),
                    heartbeat_s: config.heartbeat.as_secs().max(1),
                }))
            }
            .boxed()
        })
        .await?;
    if let Some(description) = recorded {
        state.leases.pod_recorded(pod, &description);
    }
    if let Some(lease) = &granted {
        state.leases.insert(
            lease.lease_id,
            LiveLease {
                job_id: lease.job_id.to_string(),
                pod: pod.to_owned(),
                attempt: lease.attempt,
                expires_at: Instant::now() + state.leases.ttl,
                cancel: false,
                running: false,
                running_recorded: false,
                step: lease.resume_step,
            },
        );
    }
    Ok(granted)
}

impl StoreError {
    fn from_uuid(e: uuid::Error) -> StoreError {
        StoreError::Corrupt(e.to_string())
    }
}

/// `POST /leases/{id}/heartbeat`: extends the lease; answers whether to stop.
pub async fn heartbeat(
    state: &AppState,
    lease_id: Uuid,
    req: HeartbeatRequest,
) -> Result<HeartbeatResponse, ApiError> {
    let expires_at = Instant::now() + state.leases.ttl;
    let cancel = {
        let mut leases = state.leases.lock();
        let entry = leases
            .get_mut(&lease_id)
            .ok_or_else(|| ApiError::lease_lost(lease_id))?;
        entry.expires_at = expires_at;
        entry.running |= req.phase == LeasePhase::Running;
        if req.step.is_some() {
            entry.step = req.step;
        }
        entry.cancel
    };
    Ok(HeartbeatResponse {
        lease_expires_at: chrono::Utc::now()
            + chrono::Duration::from_std(state.leases.ttl).unwrap_or_default(),
        cancel,
    })
}

/// Records in the database the attempts that started running since the last call, all in
/// one write. A heartbeat only notes the start in memory: heartbeats are the most frequent
/// call, and `running` showing up half a second later costs nothing.
async fn persist_running(state: &AppState) -> Result<(), ApiError> {
    let started: Vec<(Uuid, LiveLease)> = state
        .leases
        .all()
        .into_iter()
        .filter(|(_, l)| l.running && !l.running_recorded)
        .collect();
    if started.is_empty() {
        return Ok(());
    }
    let rows = started.clone();
    state
        .store
        .write(move |conn| {
            async move {
                let now = now_ms();
                for (lease_id, live) in &rows {
                    let lease = lease_id.to_string();
                    let changed = sqlx::query(
                        "UPDATE jobs SET state = 'running', updated_at = ? \
                         WHERE id = ? AND lease_id = ? AND state = 'leased'",
                    )
                    .bind(now)
                    .bind(&live.job_id)
                    .bind(&lease)
                    .execute(&mut *conn)
                    .await?
                    .rows_affected();
                    if changed == 0 {
                        continue;
                    }
                    sqlx::query("UPDATE attempts SET running_at = COALESCE(running_at, ?) WHERE lease_id = ?")
                        .bind(now)
                        .bind(&lease)
                        .execute(&mut *conn)
                        .await?;
                    insert_event(
                        conn,
                        Some(&live.job_id),
                        Some(&live.pod),
                        "running",
                        &format!("attempt {}: trainer started on every host", live.attempt),
                    )
                    .await?;
                }
                Ok::<_, ApiError>(())
            }
            .boxed()
        })
        .await?;
    let mut leases = state.leases.lock();
    for (lease_id, _) in started {
        if let Some(live) = leases.get_mut(&lease_id) {
            live.running_recorded = true;
        }
    }
    Ok(())
}

/// Checks, inside a write, that `lease_id` is still the job's live lease; returns the job id
/// and attempt number.
async fn fence(conn: &mut SqliteConnection, lease_id: Uuid) -> Result<(String, i64), ApiError> {
    let row: Option<(String, i64)> =
        sqlx::query_as("SELECT id, attempts FROM jobs WHERE lease_id = ?")
            .bind(lease_id.to_string())
            .fetch_optional(&mut *conn)
            .await?;
    row.ok_or_else(|| ApiError::lease_lost(lease_id))
}

/// `POST /leases/{id}/metrics`: stores a batch; a step reported again replaces its value.
pub async fn record_metrics(
    state: &AppState,
    lease_id: Uuid,
    batch: MetricsBatch,
) -> Result<usize, ApiError> {
    if state.leases.get(lease_id).is_none() {
        return Err(ApiError::lease_lost(lease_id));
    }
    let accepted: usize = batch.points.iter().map(|p| p.values.len()).sum();
    let max_step = batch.points.iter().map(|p| p.step).max();
    state
        .store
        .write(move |conn| {
            async move {
                let (job_id, attempt) = fence(conn, lease_id).await?;
                insert_metric_points(conn, &job_id, attempt, &batch).await?;
                Ok::<_, ApiError>(())
            }
            .boxed()
        })
        .await?;
    if let Some(step) = max_step {
        let mut leases = state.leases.lock();
        if let Some(live) = leases.get_mut(&lease_id) {
            live.step = Some(live.step.map_or(step, |s| s.max(step)));
        }
    }
    Ok(accepted)
}

/// Inserts points in as few statements as SQLite's variable limit allows.
pub async fn insert_metric_points(
    conn: &mut SqliteConnection,
    job_id: &str,
    attempt: i64,
    batch: &MetricsBatch,
) -> Result<(), StoreError> {
    if batch.points.is_empty() {
        return Ok(());
    }
    let mut names: Vec<&str> = batch
        .points
        .iter()
        .flat_map(|p| p.values.keys().map(String::as_str))
        .collect();
    names.sort_unstable();
    names.dedup();
    let mut series = HashMap::with_capacity(names.len());
    for name in names {
        let id: i64 = sqlx::query_scalar(
            "INSERT INTO metric_series (job_id, name) VALUES (?, ?) \
             ON CONFLICT (job_id, name) DO UPDATE SET name = excluded.name RETURNING id",
        )
        .bind(job_id)
        .bind(name)
        .fetch_one(&mut *conn)
        .await?;
        series.insert(name, id);
    }
    let rows: Vec<(i64, i64, f64)> = batch
        .points
        .iter()
        .flat_map(|p| {
            p.values
                .iter()
                .filter(|(_, v)| v.is_finite())
                .map(|(name, value)| (series[name.as_str()], p.step, *value))
        })
        .collect();
    // 4 variables a row; SQLite allows 32766 per statement.
    for chunk in rows.chunks(8000) {
        let mut insert = QueryBuilder::<Sqlite>::new(
            "INSERT INTO metric_points (series_id, step, value, attempt) ",
        );
        insert.push_values(chunk, |mut row, (series_id, step, value)| {
            row.push_bind(*series_id)
                .push_bind(*step)
                .push_bind(*value)
                .push_bind(attempt);
        });
        insert.push(
            " ON CONFLICT (series_id, step) DO UPDATE SET value = excluded.value, attempt = excluded.attempt",
        );
        insert.build().execute(&mut *conn).await?;
    }
    let max_step = batch.points.iter().map(|p| p.step).max();
    let min_step = batch.points.iter().map(|p| p.step).min();
    sqlx::query("UPDATE jobs SET last_step = MAX(COALESCE(last_step, 0), ?) WHERE id = ?")
        .bind(max_step)
        .bind(job_id)
        .execute(&mut *conn)
        .await?;
    sqlx::query(
        "UPDATE attempts SET first_step = COALESCE(first_step, ?), \
         first_step_at = COALESCE(first_step_at, ?), end_step = MAX(COALESCE(end_step, 0), ?) \
         WHERE job_id = ? AND attempt = ?",
    )
    .bind(min_step)
    .bind(now_ms())
    .bind(max_step)
    .bind(job_id)
    .bind(attempt)
    .execute(&mut *conn)
    .await?;
    Ok(())
}

/// `POST /leases/{id}/checkpoints`: records what the worker found in the checkpoint store.
/// The newest committed checkpoint becomes where the next attempt resumes.
pub async fn record_checkpoints(
    state: &AppState,
    lease_id: Uuid,
    batch: CheckpointsBatch,
) -> Result<(), ApiError> {
    if state.leases.get(lease_id).is_none() {
        return Err(ApiError::lease_lost(lease_id));
    }
    state
        .store
        .write(move |conn| {
            async move {
                let (job_id, attempt) = fence(conn, lease_id).await?;
                for cp in &batch.checkpoints {
                    let known: Option<bool> =
                        sqlx::query_scalar("SELECT committed FROM checkpoints WHERE job_id = ? AND step = ?")
                            .bind(&job_id)
                            .bind(cp.step)
                            .fetch_optional(&mut *conn)
                            .await?;
                    if known == Some(true) || known == Some(cp.committed) {
                        continue;
                    }
                    sqlx::query(
                        "INSERT INTO checkpoints (job_id, step, uri, committed, attempt, seen_at) \
                         VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (job_id, step) DO UPDATE SET \
                         uri = excluded.uri, committed = excluded.committed, attempt = excluded.attempt, \
                         seen_at = excluded.seen_at",
                    )
                    .bind(&job_id)
                    .bind(cp.step)
                    .bind(&cp.uri)
                    .bind(cp.committed)
                    .bind(attempt)
                    .bind(now_ms())
                    .execute(&mut *conn)
                    .await?;
                    if cp.committed {
                        sqlx::query(
                            "UPDATE jobs SET resume_from = ?, resume_step = ?, updated_at = ? \
                             WHERE id = ? AND COALESCE(resume_step, -1) < ?",
                        )
                        .bind(&cp.uri)
                        .bind(cp.step)
                        .bind(now_ms())
                        .bind(&job_id)
                        .bind(cp.step)
                        .execute(&mut *conn)
                        .await?;
                        insert_event(
                            conn,
                            Some(&job_id),
                            None,
                            "checkpoint",
                            &format!("committed checkpoint at step {}: {}", cp.step, cp.uri),
                        )
                        .await?;
                    }
                }
                Ok::<_, ApiError>(())
            }
            .boxed()
        })
        .await
}

/// `POST /leases/{id}/events`: things the worker saw, onto the job's timeline.
pub async fn record_worker_events(
    state: &AppState,
    lease_id: Uuid,
    events: podq_api::WorkerEvents,
) -> Result<(), ApiError> {
    state
        .store
        .write(move |conn| {
            async move {
                let (job_id, _) = fence(conn, lease_id).await?;
                let pod: Option<String> =
                    sqlx::query_scalar("SELECT lease_pod FROM jobs WHERE id = ?")
                        .bind(&job_id)
                        .fetch_one(&mut *conn)
                        .await?;
                for event in &events.events {
                    insert_event(
                        conn,
                        Some(&job_id),
                        pod.as_deref(),
                        &event.kind,
                        &event.message,
                    )
                    .await?;
                }
                Ok::<_, ApiError>(())
            }
            .boxed()
        })
        .await
}

/// `POST /leases/{id}/finish`: ends the attempt and applies the retry policy. Repeating a
/// finish that was already applied answers the same and changes nothing.
pub async fn finish(
    state: &AppState,
    lease_id: Uuid,
    req: FinishRequest,
) -> Result<FinishResponse, ApiError> {
    end_lease(state, lease_id, req).await
}

/// The job a live lease belongs to, as the finish needs it.
#[derive(sqlx::FromRow)]
struct LeaseHolder {
    id: String,
    attempts: i64,
    failures: i64,
    max_failures: i64,
    stalled_attempts: i64,
    cancel_requested: bool,
    resume_step: Option<i64>,
    lease_pod: Option<String>,
    start_step: Option<i64>,
    first_step: Option<i64>,
    end_step: Option<i64>,
    new_checkpoint: bool,
}

async fn end_lease(
    state: &AppState,
    lease_id: Uuid,
    req: FinishRequest,
) -> Result<FinishResponse, ApiError> {
    let config = state.config.clone();
    let jitter: f64 = rand::random();
    let answer = state
        .store
        .write(move |conn| {
            async move {
                let lease = lease_id.to_string();
                let row: Option<LeaseHolder> = sqlx::query_as(
                    "SELECT j.id, j.attempts, j.failures, j.max_failures, j.stalled_attempts, \
                     j.cancel_requested, j.resume_step, j.lease_pod, \
                     a.start_step, a.first_step, a.end_step, \
                     EXISTS (SELECT 1 FROM checkpoints c WHERE c.job_id = j.id \
                       AND c.attempt = j.attempts AND c.committed = 1) AS new_checkpoint \
                     FROM jobs j JOIN attempts a ON a.lease_id = j.lease_id WHERE j.lease_id = ?",
                )
                .bind(&lease)
                .fetch_optional(&mut *conn)
                .await?;
                let Some(LeaseHolder {
                    id: job_id,
                    attempts: attempt,
                    failures,
                    max_failures,
                    stalled_attempts: stalled,
                    cancel_requested,
                    resume_step,
                    lease_pod: pod,
                    start_step,
                    first_step,
                    end_step,
                    new_checkpoint,
                }) = row
                else {
                    return already_finished(conn, lease_id, req.outcome).await;
                };
                let end_step = end_step.or(req.end_step);
                let progressed = new_checkpoint
                    || match (end_step, first_step.or(start_step)) {
                        (Some(end), Some(start)) => end > start,
                        (Some(end), None) => end > resume_step.unwrap_or(0),
                        _ => false,
                    };
                let decision = policy::decide(
                    req.outcome,
                    JobBudget {
                        failures,
                        max_failures,
                        stalled_attempts: stalled,
                        cancel_requested,
                    },
                    progressed,
                    config.backoff_base,
                    config.backoff_cap,
                    jitter,
                );
                let now = now_ms();
                let not_before = decision
                    .backoff
                    .map(|b| now + i64::try_from(b.as_millis()).unwrap_or(i64::MAX / 2));
                let mut log_tail = req.log_tail.clone().unwrap_or_default();
                if log_tail.len() > MAX_LOG_TAIL {
                    let cut = log_tail.len() - MAX_LOG_TAIL;
                    let cut = (cut..log_tail.len()).find(|i| log_tail.is_char_boundary(*i)).unwrap_or(0);
                    log_tail = log_tail.split_off(cut);
                }
                sqlx::query(
                    "UPDATE attempts SET ended_at = ?, running_at = COALESCE(running_at, first_step_at), \
                     outcome = ?, start_step = COALESCE(?, start_step), \
                     end_step = COALESCE(end_step, ?), exit_codes_json = ?, log_tail = ?, message = ? \
                     WHERE lease_id = ?",
                )
                .bind(now)
                .bind(req.outcome.as_str())
                .bind(req.start_step)
                .bind(req.end_step)
                .bind(serde_json::to_string(&req.exit_codes).unwrap_or_default())
                .bind(&log_tail)
                .bind(&req.message)
                .bind(&lease)
                .execute(&mut *conn)
                .await?;
                sqlx::query(
                    "UPDATE jobs SET state = ?, lease_id = NULL, lease_pod = NULL, cancel_requested = 0, \
                     failures = ?, stalled_attempts = ?, preemptions = preemptions + ?, not_before = ?, \
                     verify_checkpoints = ?, message = COALESCE(?, message), updated_at = ? WHERE id = ?",
                )
                .bind(decision.state.as_str())
                .bind(decision.failures)
                .bind(decision.stalled_attempts)
                .bind(i64::from(decision.preemption))
                .bind(not_before)
                .bind(req.outcome == AttemptOutcome::Lost)
                .bind(&decision.message)
                .bind(now)
                .bind(&job_id)
                .execute(&mut *conn)
                .await?;
                let detail = req.message.as_deref().map(|m| format!(": {m}")).unwrap_or_default();
                let next = match (decision.state, decision.backoff) {
                    (JobState::Queued, Some(b)) => format!("; retry in {}s", b.as_secs()),
                    (JobState::Queued, None) => "; requeued".to_owned(),
                    (state, _) => format!("; job {state}"),
                };
                insert_event(
                    conn,
                    Some(&job_id),
                    pod.as_deref(),
                    req.outcome.as_str(),
                    &format!("attempt {attempt} {}{detail}{next}", req.outcome),
                )
                .await?;
                if let Some(message) = &decision.message {
                    if decision.state == JobState::Held || decision.state == JobState::Failed {
                        insert_event(conn, Some(&job_id), None, decision.state.as_str(), message).await?;
                    }
                }
                Ok::<_, ApiError>(FinishResponse {
                    job_state: decision.state,
                })
            }
            .boxed()
        })
        .await?;
    state.leases.remove(lease_id);
    state.leases.queue_changed.notify_waiters();
    Ok(answer)
}

/// A finish for a lease that is no longer live: the same finish repeated is answered as
/// before; anything else is a worker that lost its lease.
async fn already_finished(
    conn: &mut SqliteConnection,
    lease_id: Uuid,
    outcome: AttemptOutcome,
) -> Result<FinishResponse, ApiError> {
    let row: Option<(Option<String>, String)> = sqlx::query_as(
        "SELECT a.outcome, j.state FROM attempts a JOIN jobs j ON j.id = a.job_id WHERE a.lease_id = ?",
    )
    .bind(lease_id.to_string())
    .fetch_optional(&mut *conn)
    .await?;
    match row {
        Some((Some(recorded), job_state)) if recorded == outcome.as_str() => Ok(FinishResponse {
            job_state: job_state.parse().map_err(StoreError::Corrupt)?,
        }),
        _ => Err(ApiError::lease_lost(lease_id)),
    }
}

/// Ends the leases whose worker stopped heartbeating, as `lost`; runs until `shutdown`.
pub async fn run_reaper(state: AppState, shutdown: CancellationToken) {
    let mut tick = tokio::time::interval(Duration::from_millis(250));
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tick.tick() => {}
        }
        if let Err(e) = persist_running(&state).await {
            tracing::error!(error = %e.message, "could not record running attempts");
        }
        for lease in state.leases.expired(Instant::now()) {
            let request = FinishRequest {
                outcome: AttemptOutcome::Lost,
                exit_codes: Vec::new(),
                start_step: None,
                end_step: None,
                log_tail: None,
                message: Some(format!(
                    "no heartbeat for {}s: the worker is gone",
                    state.leases.ttl.as_secs()
                )),
            };
            match end_lease(&state, lease, request).await {
                Ok(_) => tracing::warn!(%lease, "reaped a lease whose worker stopped heartbeating"),
                Err(e) if e.code == "lease_lost" => state.leases.remove(lease),
                Err(e) => tracing::error!(%lease, error = %e.message, "could not reap a lease"),
            }
        }
    }
}
