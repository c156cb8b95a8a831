//! The lead: which of the servers sharing one database writes. A SQLite store always leads;
//! servers sharing one PostgreSQL database elect one by a lock (`backend/postgres.rs`), and
//! the others stand by, answering reads, until they can take it.

use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio::sync::watch;

use super::backend::postgres::{prepare_to_lead, take_lead};
use super::backend::Reconnect;
use super::{now_ms, Conn, Store, StoreError};

/// Whether this server is the one that writes. A SQLite store is always active; servers
/// sharing one PostgreSQL database elect one by an advisory lock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    Active,
    Standby,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Active => "active",
            Role::Standby => "standby",
        }
    }
}

/// How often a standby tries to take the lead, and how often an idle active server checks
/// that it still holds it.
pub(super) const STANDBY_RETRY: Duration = Duration::from_secs(1);
/// How long the check may take before the connection counts as lost: an active server cut
/// off from its database must stop answering as the active one (heartbeats are answered
/// from memory) before PostgreSQL gives its lock to a standby.
const LEAD_CHECK_TIMEOUT: Duration = Duration::from_secs(2);
/// How long a confirmation of the lead (a commit, or the idle check) holds: past it, the
/// server answers as a standby until the writer confirms again. A write stuck on a silent
/// connection thus stops the server acting as the active one within seconds, while
/// PostgreSQL (with the keepalives docs/operations/deployments.md sets) takes about ten to give the lock
/// to another.
const LEAD_FRESHNESS_MS: i64 = 5_000;

impl Store {
    /// Active or standby, now and as it changes.
    pub fn role(&self) -> watch::Receiver<Role> {
        self.role.clone()
    }

    /// Whether this server may act as the active one now: its store leads, and the writer
    /// confirmed it within the last `LEAD_FRESHNESS_MS`.
    pub fn is_active(&self) -> bool {
        *self.role.borrow() == Role::Active
            && now_ms().saturating_sub(self.confirmed.load(Ordering::SeqCst)) <= LEAD_FRESHNESS_MS
    }
}

/// A new connection in place of one that broke or went silent (dropping the old one ends its
/// session, and with it any lock it held), within `LEAD_CHECK_TIMEOUT`.
async fn reconnect(conn: &mut Conn, connect: &Reconnect) -> bool {
    match tokio::time::timeout(LEAD_CHECK_TIMEOUT, connect()).await {
        Ok(Ok(new)) => {
            *conn = new;
            true
        }
        Ok(Err(e)) => {
            tracing::warn!(error = %e, "the writer cannot reach its database");
            false
        }
        Err(_) => {
            tracing::warn!("the writer's database did not answer a new connection");
            false
        }
    }
}

/// Whether the writer's PostgreSQL connection `conn` still holds the lead. One that answers
/// within `LEAD_CHECK_TIMEOUT` still holds its session's lock; one that broke or went silent
/// is replaced, and the new one must take the lock again, which fails if a standby took it
/// meanwhile or the old session still holds it.
pub(super) async fn check_or_retake(conn: &mut Conn, connect: &Reconnect) -> bool {
    let answered = tokio::time::timeout(LEAD_CHECK_TIMEOUT, conn.batch("SELECT 1")).await;
    if matches!(answered, Ok(Ok(()))) {
        return true;
    }
    if !reconnect(conn, connect).await {
        return false;
    }
    match tokio::time::timeout(LEAD_CHECK_TIMEOUT, take_lead(conn)).await {
        Ok(Ok(true)) => {
            tracing::warn!("the writer's connection broke; reconnected and kept the lead");
            true
        }
        _ => false,
    }
}

/// One try of a standby's writer connection `conn` to take the lead, and to prepare to
/// write if it did (true). A connection that broke is replaced first.
pub(super) async fn try_to_lead(conn: &mut Conn, connect: &Reconnect) -> bool {
    let alive = tokio::time::timeout(LEAD_CHECK_TIMEOUT, conn.batch("SELECT 1")).await;
    if !matches!(alive, Ok(Ok(()))) && !reconnect(conn, connect).await {
        return false;
    }
    let prepared = async {
        if !take_lead(conn).await? {
            return Ok(false);
        }
        prepare_to_lead(conn).await?;
        Ok::<_, StoreError>(true)
    };
    // Migrations may take a while; the lock and the connection are dropped if they fail or
    // never answer.
    match tokio::time::timeout(Duration::from_secs(300), prepared).await {
        Ok(Ok(true)) => return true,
        Ok(Ok(false)) => {}
        Ok(Err(e)) => {
            tracing::error!(error = %e, "cannot take the lead; letting it go");
            reconnect(conn, connect).await;
        }
        Err(_) => {
            tracing::error!("taking the lead did not finish; letting it go");
            reconnect(conn, connect).await;
        }
    }
    false
}
