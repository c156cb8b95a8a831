//! The group-commit writer: one task that owns the writer connection and runs every state
//! change.
//!
//! The writer takes all closures that are waiting, runs each inside its own SAVEPOINT (so one
//! failing closure does not undo the others), commits once, and only then answers each
//! caller. An answer therefore always means "durable", while many concurrent requests share
//! one fsync: that is what lets the lease cycle reach thousands per second. One writer also
//! keeps the writes serial on both stores (sequence numbers, claims and read-modify-write
//! totals rely on it). How durable a commit is, and how many writes one transaction takes,
//! each backend sets (`backend/`).

use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex};

use futures::future::BoxFuture;
use futures::FutureExt;
use tokio::sync::{mpsc, oneshot, watch};

use super::backend::wal::WalLog;
use super::backend::{dialect, Reconnect};
use super::lead::{self, Role, STANDBY_RETRY};
use super::{now_ms, Conn, Store, StoreError};

type RunOp = Box<dyn for<'c> FnOnce(&'c mut Conn) -> BoxFuture<'c, bool> + Send>;

/// One queued write: `run` does the work and says whether it succeeded; `finish` is called
/// exactly once, after the transaction's fate is known (or without `run`, if the transaction
/// could not start), and answers the caller.
pub(super) struct WriteOp {
    run: RunOp,
    finish: Finisher,
    changes: Changes,
}

/// What a write changes, for the views made from the state (see [`Commits`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Changes {
    /// Anything: views are made again after its commit.
    State,
    /// Reports' progress: metrics, log lines, and the step marks and counts that go with
    /// them. A merged metrics write may also record a stop rule's verdict and the trainer's
    /// phases; no cached view reads those, and any view is at most `PROGRESS_AGE` behind a
    /// progress commit (`scheduler/reads/read_cache.rs`). A view that comes to read them
    /// needs such a write to count as `State`.
    Progress,
}

/// What the writer tells readers after each commit.
pub(super) struct Commits {
    /// Moves after every committed transaction: log followers and live streams wait on it.
    pub any: watch::Sender<u64>,
    /// Moves after a transaction that changed more than reports' progress. Views made from
    /// many rows (status, the plan) are kept until it moves; a thousand pods reporting
    /// every two seconds made them be made again on every read (benches/fleet.rs).
    pub state: watch::Sender<u64>,
}

impl Commits {
    fn committed(&self, state: bool) {
        self.any.send_modify(|n| *n = n.wrapping_add(1));
        if state {
            self.state.send_modify(|n| *n = n.wrapping_add(1));
        }
    }
}

/// Why a write was not committed.
#[derive(Clone, Debug)]
enum WriteFailure {
    Commit(String),
    Standby,
}

type Finisher = Box<dyn FnOnce(Result<(), WriteFailure>) + Send>;

/// What the writer reports about itself, for `/metrics`.
#[derive(Clone)]
pub struct WriterInstruments {
    /// Writes waiting when the writer last took a batch.
    pub queue: prometheus_client::metrics::gauge::Gauge,
    /// Writes per committed transaction.
    pub batch: prometheus_client::metrics::histogram::Histogram,
    /// Seconds from each transaction's begin to its durable commit.
    pub transaction: prometheus_client::metrics::histogram::Histogram,
    /// Seconds the writer spent starting SQLite's log over (`backend/wal.rs`).
    pub wal_restart: prometheus_client::metrics::histogram::Histogram,
}

impl Default for WriterInstruments {
    fn default() -> Self {
        WriterInstruments {
            queue: Default::default(),
            batch: prometheus_client::metrics::histogram::Histogram::new(
                prometheus_client::metrics::histogram::exponential_buckets(1.0, 2.0, 10),
            ),
            // 1 ms to about 4 s, as both.
            transaction: prometheus_client::metrics::histogram::Histogram::new(
                prometheus_client::metrics::histogram::exponential_buckets(0.001, 2.0, 13),
            ),
            wal_restart: prometheus_client::metrics::histogram::Histogram::new(
                prometheus_client::metrics::histogram::exponential_buckets(0.001, 2.0, 13),
            ),
        }
    }
}

/// What a failed write tells its caller: its own error, or that the commit failed.
pub trait FromCommitFailure {
    fn commit_failed(message: String) -> Self;
}

impl FromCommitFailure for StoreError {
    fn commit_failed(message: String) -> Self {
        StoreError::Database(sqlx::Error::Protocol(message))
    }
}

/// The writer task's state.
pub(super) struct Writer {
    pub(super) conn: Conn,
    /// How to reach the database again and take the lead (PostgreSQL only: a SQLite file
    /// has one writer by construction).
    pub(super) lead: Option<Reconnect>,
    pub(super) max_group_commit: usize,
    /// When the writer last confirmed it holds the lead (see `lead.rs`).
    pub(super) confirmed: Arc<AtomicI64>,
    /// SQLite's log, which the writer starts over when it grew past its bound
    /// (`backend/wal.rs`).
    pub(super) wal: Option<WalLog>,
}

impl Writer {
    fn confirm(&self) {
        if self.lead.is_some() {
            self.confirmed.store(now_ms(), Ordering::SeqCst);
        }
    }

    /// After a failed transaction, and every second while idle: whether this server still
    /// holds the lead. A SQLite store always does; on PostgreSQL see
    /// [`lead::check_or_retake`].
    async fn still_leads(&mut self) -> bool {
        let Some(connect) = self.lead.take() else {
            return true;
        };
        let leads = lead::check_or_retake(&mut self.conn, &connect).await;
        self.lead = Some(connect);
        leads
    }

    /// Refuses writes until this server takes the lead (true), or the store is dropped
    /// (false). Meanwhile both commit counters move every second, so reads cached against
    /// them follow what the active server writes.
    async fn stand_by(&mut self, rx: &mut mpsc::Receiver<WriteOp>, committed: &Commits) -> bool {
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
        committed: &Commits,
    ) -> bool {
        let mut tick = tokio::time::interval(STANDBY_RETRY);
        loop {
            tokio::select! {
                op = rx.recv() => match op {
                    Some(op) => (op.finish)(Err(WriteFailure::Standby)),
                    None => return false,
                },
                _ = tick.tick() => {
                    committed.committed(true);
                    if lead::try_to_lead(&mut self.conn, connect).await {
                        return true;
                    }
                }
            }
        }
    }
}

impl Store {
    /// Runs `op` on the writer connection inside its own savepoint and answers once the
    /// transaction it joined is durably committed. An `Err` from `op` rolls back only its
    /// own changes.
    pub async fn write<T, E, F>(&self, op: F) -> Result<T, E>
    where
        T: Send + 'static,
        E: From<StoreError> + FromCommitFailure + Send + 'static,
        F: for<'c> FnOnce(&'c mut Conn) -> BoxFuture<'c, Result<T, E>> + Send + 'static,
    {
        self.write_as(Changes::State, op).await
    }

    /// [`Store::write`], saying what `op` changes.
    pub async fn write_as<T, E, F>(&self, changes: Changes, op: F) -> Result<T, E>
    where
        T: Send + 'static,
        E: From<StoreError> + FromCommitFailure + Send + 'static,
        F: for<'c> FnOnce(&'c mut Conn) -> BoxFuture<'c, Result<T, E>> + Send + 'static,
    {
        let (answer_tx, answer_rx) = oneshot::channel::<Result<T, E>>();
        let slot = Arc::new(Mutex::new(None::<Result<T, E>>));
        let run_slot = Arc::clone(&slot);
        let job = WriteOp {
            run: Box::new(move |conn| {
                async move {
                    let result = AssertUnwindSafe(op(conn))
                        .catch_unwind()
                        .await
                        .unwrap_or_else(|_| Err(E::from(StoreError::WritePanicked)));
                    let ok = result.is_ok();
                    *run_slot.lock().expect("write slot") = Some(result);
                    ok
                }
                .boxed()
            }),
            finish: Box::new(move |commit| {
                let result = slot.lock().expect("write slot").take();
                let answer = match (commit, result) {
                    (Err(WriteFailure::Standby), _) => Err(E::from(StoreError::Standby)),
                    (_, Some(Err(e))) => Err(e),
                    (Ok(()), Some(Ok(value))) => Ok(value),
                    (Err(WriteFailure::Commit(message)), _) => Err(E::commit_failed(message)),
                    (Ok(()), None) => Err(E::from(StoreError::WriterStopped)),
                };
                let _ = answer_tx.send(answer);
            }),
            changes,
        };
        self.writer
            .send(job)
            .await
            .map_err(|_| E::from(StoreError::WriterStopped))?;
        answer_rx
            .await
            .unwrap_or_else(|_| Err(E::from(StoreError::WriterStopped)))
    }
}

pub(super) async fn run_writer(
    mut writer: Writer,
    mut rx: mpsc::Receiver<WriteOp>,
    committed: Commits,
    role: watch::Sender<Role>,
    instruments: WriterInstruments,
) {
    let mut batch = Vec::with_capacity(writer.max_group_commit);
    let mut lead_check = tokio::time::interval(STANDBY_RETRY);
    lead_check.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        if *role.borrow() == Role::Standby {
            if !writer.stand_by(&mut rx, &committed).await {
                break;
            }
            tracing::info!("took the lead: this server is now the active one");
            writer.confirm();
            role.send_replace(Role::Active);
        }
        tokio::select! {
            taken = rx.recv_many(&mut batch, writer.max_group_commit) => if taken == 0 {
                break;
            },
            _ = lead_check.tick(), if writer.lead.is_some() => {
                if writer.still_leads().await {
                    writer.confirm();
                } else {
                    tracing::error!("lost the database connection and with it the lead: standing by");
                    role.send_replace(Role::Standby);
                }
                continue;
            }
        }
        instruments.queue.set(rx.len() as i64);
        instruments.batch.observe(batch.len() as f64);
        let changes_state = batch.iter().any(|op| op.changes == Changes::State);
        let began = std::time::Instant::now();
        let (finishers, commit) = run_batch(&mut writer.conn, batch.drain(..)).await;
        instruments
            .transaction
            .observe(began.elapsed().as_secs_f64());
        match &commit {
            Ok(()) => {
                writer.confirm();
                committed.committed(changes_state);
            }
            Err(failure) => {
                tracing::error!(error = ?failure, "write transaction failed");
                if !writer.still_leads().await {
                    tracing::error!(
                        "lost the database connection and with it the lead: standing by"
                    );
                    role.send_replace(Role::Standby);
                }
            }
        }
        for finish in finishers {
            finish(commit.clone());
        }
        if let Some(wal) = writer.wal.as_mut() {
            if wal.due() {
                match wal.restart(&mut writer.conn).await {
                    Ok(restarted) => {
                        instruments
                            .wal_restart
                            .observe(restarted.took.as_secs_f64());
                        tracing::info!(
                            took = ?restarted.took,
                            started_over = restarted.started_over,
                            "the store's log grew past its bound: restarted it"
                        );
                    }
                    Err(e) => tracing::warn!(error = %e, "could not restart the store's log"),
                }
            }
        }
    }
    let _ = writer.conn.close().await;
}

/// Runs one group of writes in a single transaction and says whether it committed.
async fn run_batch(
    conn: &mut Conn,
    ops: impl Iterator<Item = WriteOp>,
) -> (Vec<Finisher>, Result<(), WriteFailure>) {
    let mut finishers = Vec::new();
    let mut pending = Vec::new();
    for op in ops {
        finishers.push(op.finish);
        pending.push(op.run);
    }
    // Statements are paired into one round trip where possible: on SQLite that hand-off to
    // the connection's thread, not the fsync, is what a write costs most.
    let begin = dialect(conn.backend()).begin_write;
    if let Err(e) = conn.batch(begin).await {
        let _ = conn.batch("ROLLBACK").await;
        return (
            finishers,
            Err(WriteFailure::Commit(format!(
                "could not begin a write transaction: {e}"
            ))),
        );
    }
    let count = pending.len();
    for (index, run) in pending.into_iter().enumerate() {
        let ok = run(conn).await;
        let last = index + 1 == count;
        let end = match (ok, last) {
            (true, false) => "RELEASE op; SAVEPOINT op",
            (false, false) => "ROLLBACK TO op; RELEASE op; SAVEPOINT op",
            (true, true) => "RELEASE op; COMMIT",
            (false, true) => "ROLLBACK TO op; RELEASE op; COMMIT",
        };
        if let Err(e) = conn.batch(end).await {
            let _ = conn.batch("ROLLBACK").await;
            return (
                finishers,
                Err(WriteFailure::Commit(format!(
                    "write transaction failed: {e}"
                ))),
            );
        }
    }
    (finishers, Ok(()))
}
