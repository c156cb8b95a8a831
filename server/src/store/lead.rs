//! The lead: which of the servers sharing one database writes. A SQLite store always leads;
//! servers sharing one PostgreSQL database elect one by a lock (`backend/postgres.rs`), and
//! the others stand by, answering reads, until they can take it.

use std::sync::atomic::Ordering;
use std::time::Duration;

use futures::future::BoxFuture;
use tokio::sync::{mpsc, watch};

use super::backend::postgres::{prepare_to_lead, take_lead};
use super::writer::{WriteFailure, WriteOp, Writer};
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
/// PostgreSQL (with the keepalives docs/operations.md sets) takes about ten to give the lock
/// to another.
const LEAD_FRESHNESS_MS: i64 = 5_000;

/// How the writer reaches its database again after the connection broke (PostgreSQL only:
/// a SQLite file does not go away).
pub(super) type Reconnect =
    Box<dyn Fn() -> BoxFuture<'static, Result<Conn, sqlx::Error>> + Send + Sync>;

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

impl Writer {
    pub(super) fn confirm(&self) {
        if self.lead.is_some() {
            self.confirmed.store(now_ms(), Ordering::SeqCst);
        }
    }

    /// A new connection in place of one that broke or went silent (dropping the old one ends
    /// its session, and with it any lock it held), within `LEAD_CHECK_TIMEOUT`.
    async fn reconnect(&mut self, connect: &Reconnect) -> bool {
        match tokio::time::timeout(LEAD_CHECK_TIMEOUT, connect()).await {
            Ok(Ok(conn)) => {
                self.conn = conn;
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

    /// After a failed transaction, and every second while idle: whether this server still
    /// holds the lead. A SQLite store always does. A PostgreSQL connection that answers
    /// within `LEAD_CHECK_TIMEOUT` still holds its session's lock; one that broke or went
    /// silent is replaced, and the new one must take the lock again, which fails if a
    /// standby took it meanwhile or the old session still holds it.
    pub(super) async fn still_leads(&mut self) -> bool {
        let Some(connect) = self.lead.take() else {
            return true;
        };
        let leads = self.check_or_retake(&connect).await;
        self.lead = Some(connect);
        leads
    }

    async fn check_or_retake(&mut self, connect: &Reconnect) -> bool {
        let answered = tokio::time::timeout(LEAD_CHECK_TIMEOUT, self.conn.batch("SELECT 1")).await;
        if matches!(answered, Ok(Ok(()))) {
            return true;
        }
        if !self.reconnect(connect).await {
            return false;
        }
        match tokio::time::timeout(LEAD_CHECK_TIMEOUT, take_lead(&mut self.conn)).await {
            Ok(Ok(true)) => {
                tracing::warn!("the writer's connection broke; reconnected and kept the lead");
                true
            }
            _ => false,
        }
    }

    /// Refuses writes until this server takes the lead (true), or the store is dropped
    /// (false). Meanwhile the commit counter moves every second, so reads cached against it
    /// follow what the active server writes.
    pub(super) async fn stand_by(
        &mut self,
        rx: &mut mpsc::Receiver<WriteOp>,
        committed: &watch::Sender<u64>,
    ) -> bool {
        let Some(connect) = self.lead.take() else {
            return true;
        };
        let led = self.wait_for_lead(&connect, rx, committed).await;
        self.lead = Some(connect);
        led
    }

    async fn wait_for_lead(
        &mut self,
        connect: &Reconnect,
        rx: &mut mpsc::Receiver<WriteOp>,
        committed: &watch::Sender<u64>,
    ) -> bool {
        let mut tick = tokio::time::interval(STANDBY_RETRY);
        loop {
            tokio::select! {
                op = rx.recv() => match op {
                    Some(op) => (op.finish)(Err(WriteFailure::Standby)),
                    None => return false,
                },
                _ = tick.tick() => {
                    committed.send_modify(|n| *n = n.wrapping_add(1));
                    let alive = tokio::time::timeout(LEAD_CHECK_TIMEOUT, self.conn.batch("SELECT 1")).await;
                    if !matches!(alive, Ok(Ok(()))) && !self.reconnect(connect).await {
                        continue;
                    }
                    let prepared = async {
                        if !take_lead(&mut self.conn).await? {
                            return Ok(false);
                        }
                        prepare_to_lead(&mut self.conn).await?;
                        Ok::<_, StoreError>(true)
                    };
                    // Migrations may take a while; the lock and the connection are dropped
                    // if they fail or never answer.
                    match tokio::time::timeout(Duration::from_secs(300), prepared).await {
                        Ok(Ok(true)) => return true,
                        Ok(Ok(false)) => {}
                        Ok(Err(e)) => {
                            tracing::error!(error = %e, "cannot take the lead; letting it go");
                            self.reconnect(connect).await;
                        }
                        Err(_) => {
                            tracing::error!("taking the lead did not finish; letting it go");
                            self.reconnect(connect).await;
                        }
                    }
                }
            }
        }
    }
}
