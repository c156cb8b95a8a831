//! Pods as their workers last described them.

use super::db::{self, Conn};
use podq_api::{PodDescription, Preflight};

use super::pod_time::PodActivity;
use super::{now_ms, StoreError};

/// Writes the pod's description; answers the state and health it had before, if it was known.
pub async fn upsert(
    conn: &mut Conn,
    pod: &str,
    desc: &PodDescription,
) -> Result<Option<(String, String)>, StoreError> {
    let before: Option<(String, String)> =
        db::query_as("SELECT state, health FROM pods WHERE name = ?")
            .bind(pod)
            .fetch_optional(conn)
            .await?;
    let preflight = desc
        .preflight
        .as_ref()
        .map(serde_json::to_string)
        .transpose()
        .map_err(|e| StoreError::Corrupt(format!("preflight of pod {pod}: {e}")))?;
    db::query(
        "INSERT INTO pods (name, accelerator, hosts, state, health, preflight_json, recovery, last_seen_at) \
         VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (name) DO UPDATE SET \
         accelerator = excluded.accelerator, hosts = excluded.hosts, state = excluded.state, \
         health = excluded.health, preflight_json = COALESCE(excluded.preflight_json, pods.preflight_json), \
         recovery = excluded.recovery, last_seen_at = excluded.last_seen_at, retired_at = NULL",
    )
    .bind(pod)
    .bind(&desc.accelerator)
    .bind(i64::from(desc.hosts))
    .bind(desc.state.as_str())
    .bind(&desc.health)
    .bind(preflight)
    .bind(&desc.recovery)
    .bind(now_ms())
    .execute(conn)
    .await?;
    // READY, healthy enough to take work and with nothing to wait for, or not.
    let usable = desc.state.is_ready()
        && desc.recovery.is_none()
        && desc.preflight.as_ref().is_none_or(|p| p.passed);
    let activity = if usable {
        PodActivity::Ready
    } else {
        PodActivity::Recovering
    };
    if usable {
        // The first time it could take work: the end of its making (store/recoveries.rs).
        db::query("UPDATE pods SET ready_at = ? WHERE name = ? AND ready_at IS NULL")
            .bind(now_ms())
            .bind(pod)
            .execute(&mut *conn)
            .await?;
    }
    super::pod_time::pod_ledger(conn, pod, activity, now_ms()).await?;
    Ok(before)
}

#[derive(sqlx::FromRow)]
pub struct PodRow {
    pub name: String,
    pub accelerator: String,
    pub hosts: i64,
    pub state: String,
    pub health: String,
    pub preflight_json: Option<String>,
    pub recovery: Option<String>,
    pub last_seen_at: i64,
}

impl PodRow {
    pub fn preflight(&self) -> Result<Option<Preflight>, StoreError> {
        self.preflight_json
            .as_deref()
            .map(serde_json::from_str)
            .transpose()
            .map_err(|e| StoreError::Corrupt(format!("preflight of pod {}: {e}", self.name)))
    }
}

pub async fn list(db: &mut Conn) -> Result<Vec<PodRow>, StoreError> {
    Ok(db::query_as(
        "SELECT name, accelerator, hosts, state, health, preflight_json, recovery, last_seen_at \
         FROM pods ORDER BY name",
    )
    .fetch_all(db)
    .await?)
}

/// The pods not retired: those that serve now, or will again.
pub async fn serving(db: &mut Conn) -> Result<Vec<PodRow>, StoreError> {
    Ok(db::query_as(
        "SELECT name, accelerator, hosts, state, health, preflight_json, recovery, last_seen_at \
         FROM pods WHERE retired_at IS NULL ORDER BY name",
    )
    .fetch_all(db)
    .await?)
}

/// Whether the store knows pod `name` (live or retired).
pub async fn exists(conn: &mut Conn, name: &str) -> Result<bool, StoreError> {
    let found: Option<i32> = db::query_scalar("SELECT 1 FROM pods WHERE name = ?")
        .bind(name)
        .fetch_optional(conn)
        .await?;
    Ok(found.is_some())
}

/// A slice a pool reports it is making.
pub struct NewSlice<'a> {
    pub pod: &'a str,
    pub accelerator: &'a str,
    pub pool: &'a str,
    pub zone: &'a str,
    /// When the pool began making it.
    pub since: i64,
}

/// A slice a pool is making: a pod from `since` (the slice's creation), recovering until
/// its worker first calls, so the time it took to make is the pod's `provisioning` time, and
/// the part of a run's wait spent on it is its recovery's `creating_s`.
/// Nothing changes for a pod already known.
pub async fn being_made(conn: &mut Conn, slice: &NewSlice<'_>) -> Result<(), StoreError> {
    db::query(
        "INSERT INTO pods (name, accelerator, hosts, state, health, recovery, last_seen_at, \
         ledger_state, ledger_since, pool, pool_seen_at, zone, made_at) VALUES (?, ?, 0, \
         'CREATING', 'HEALTH_UNSPECIFIED', ?, ?, 'recovering', ?, ?, ?, ?, ?) \
         ON CONFLICT (name) DO NOTHING",
    )
    .bind(slice.pod)
    .bind(slice.accelerator)
    .bind(format!("being made by pool {}", slice.pool))
    .bind(slice.since)
    .bind(slice.since)
    .bind(slice.pool)
    .bind(now_ms())
    .bind(slice.zone)
    .bind(slice.since)
    .execute(conn)
    .await?;
    Ok(())
}

/// A slice a pool made, as the server saw it: from its first report to its retirement.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct PoolPod {
    pub pool: String,
    pub name: String,
    pub accelerator: String,
    pub pool_seen_at: i64,
    pub retired_at: Option<i64>,
    pub last_seen_at: i64,
}

/// The pools' slices alive at some time since `since` (ms).
pub async fn pool_pods(conn: &mut Conn, since: i64) -> Result<Vec<PoolPod>, StoreError> {
    Ok(db::query_as(
        "SELECT pool, name, accelerator, pool_seen_at, retired_at, last_seen_at FROM pods \
         WHERE pool IS NOT NULL AND pool_seen_at IS NOT NULL \
         AND (retired_at IS NULL OR retired_at >= ?)",
    )
    .bind(since)
    .fetch_all(conn)
    .await?)
}

/// Retires `pods`, given back by their pool: kept for the history that names them, their
/// pod time settled up to `at` (a slice idle until it went was idle until then, not since).
pub async fn retire(conn: &mut Conn, pods: &[String], at: i64) -> Result<(), StoreError> {
    for pod in pods {
        super::pod_time::pod_ledger(&mut *conn, pod, PodActivity::Retired, at).await?;
        db::query("UPDATE pods SET retired_at = ? WHERE name = ? AND retired_at IS NULL")
            .bind(at)
            .bind(pod)
            .execute(&mut *conn)
            .await?;
    }
    Ok(())
}

pub async fn count(db: &mut Conn) -> Result<i64, StoreError> {
    Ok(db::query_scalar("SELECT COUNT(*) FROM pods")
        .fetch_one(db)
        .await?)
}
