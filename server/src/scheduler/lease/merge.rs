//! Reports that arrive together are stored together.
//!
//! A thousand pods send a metrics batch and a log batch every two seconds each. Stored one
//! write each, every batch cost its own fence, upserts and updates: half a dozen statements,
//! each a round trip to the store's connection thread, and the one writer fell behind. Here
//! a report joins the reports of its kind waiting for the writer, and one write stores all
//! of them with the same half-dozen statements, whatever their number.
//!
//! The write takes whatever is waiting when the writer reaches it, so a quiet server stores
//! a report at once and a busy one stores more per write. Each report still gets its own
//! answer, after the commit that made it durable. If the merged write fails (a bad row, say),
//! each of its reports is written again on its own, so one bad report fails alone.
//!
//! A write is queued at once when none of its kind was queued in the last `GATHER`, and
//! otherwise `GATHER` after the previous one: a busy server stores reports in fewer, larger
//! writes. Taken as they came, a thousand pods' reports met a writer whose transactions
//! were short, so each write held one or two of them and every report still paid for the
//! statements, savepoints and thread hand-offs of a write of its own (benches/fleet.rs). A
//! quiet server stores a report at once.
//!
//! The writes are progress (`Changes::Progress`): views made from the state, such as
//! status, are not made again for each of them (`reads/read_cache.rs`).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::future::BoxFuture;
use futures::FutureExt;
use tokio::sync::oneshot;
// tokio's clock, which a test can advance.
use tokio::time::Instant;

use crate::scheduler::{Result, SchedulerError};
use crate::store::{Changes, Conn, FromCommitFailure, Store, StoreError};

/// Stores a slice of reports in the writer's transaction: one answer per report, in order,
/// or an error that undoes all of them.
pub(in crate::scheduler) type StoreMany<I, O> = Arc<
    dyn for<'c> Fn(&'c mut Conn, &'c [I]) -> BoxFuture<'c, Result<Vec<Result<O>>>> + Send + Sync,
>;

/// The reports of one kind waiting for the writer.
pub(in crate::scheduler) struct Merger<I, O> {
    waiting: Mutex<Waiting<I, O>>,
    store_many: StoreMany<I, O>,
}

struct Waiting<I, O> {
    reports: Vec<(I, oneshot::Sender<Result<O>>)>,
    /// A write that will take what is waiting is queued, or will be.
    queued: bool,
    pace: Pace,
}

/// The least time between two writes of one kind. Reports wait at most this long more;
/// the workers send one of each kind every 2 s (`--metrics-flush-s`).
const GATHER: Duration = Duration::from_millis(10);

/// When the writes of one kind are queued: at most one per `GATHER`.
#[derive(Default)]
struct Pace {
    last_queued: Option<Instant>,
}

impl Pace {
    /// How long a write due `now` waits before it is queued; its queueing is counted.
    fn delay(&mut self, now: Instant) -> Duration {
        let at = self
            .last_queued
            .map_or(now, |last| (last + GATHER).max(now));
        self.last_queued = Some(at);
        at - now
    }
}

type Taken<I, O> = (Vec<I>, Vec<oneshot::Sender<Result<O>>>);

impl<I: Send + Sync + 'static, O: Send + 'static> Merger<I, O> {
    pub fn new(store_many: StoreMany<I, O>) -> Arc<Self> {
        Arc::new(Merger {
            waiting: Mutex::new(Waiting {
                reports: Vec::new(),
                queued: false,
                pace: Pace::default(),
            }),
            store_many,
        })
    }

    /// Stores `report` with whatever else is waiting; answers once it is durable.
    pub async fn submit(self: &Arc<Self>, store: &Store, report: I) -> Result<O> {
        let (answer, answered) = oneshot::channel();
        let delay = {
            let mut waiting = self.waiting.lock().expect("merger lock");
            waiting.reports.push((report, answer));
            let queue = !std::mem::replace(&mut waiting.queued, true);
            queue.then(|| waiting.pace.delay(Instant::now()))
        };
        if let Some(delay) = delay {
            let merger = Arc::clone(self);
            let store = store.clone();
            // Its own task: a caller that goes away must not take the others' write with it.
            tokio::spawn(async move {
                if !delay.is_zero() {
                    tokio::time::sleep(delay).await;
                }
                merger.write(store).await;
            });
        }
        answered
            .await
            .map_err(|_| SchedulerError::Store(StoreError::WriterStopped))?
    }

    fn take(&self) -> Taken<I, O> {
        let mut waiting = self.waiting.lock().expect("merger lock");
        waiting.queued = false;
        std::mem::take(&mut waiting.reports).into_iter().unzip()
    }

    async fn write(self: Arc<Self>, store: Store) {
        let taken: Arc<Mutex<Option<Taken<I, O>>>> = Arc::default();
        let slot = Arc::clone(&taken);
        let merger = Arc::clone(&self);
        let written = store
            .write_as(Changes::Progress, move |conn| {
                async move {
                    let (reports, answers) = merger.take();
                    let stored = (merger.store_many)(conn, &reports).await;
                    *slot.lock().expect("merged slot") = Some((reports, answers));
                    stored
                }
                .boxed()
            })
            .await;
        let Some((reports, answers)) = taken.lock().expect("merged slot").take() else {
            // The writer answered without running the write (on standby, or its transaction
            // could not begin): what waits for this write is answered with that failure, and
            // the next report starts a write of its own.
            let (_, answers) = self.take();
            let failure = match &written {
                Err(e) => same_failure(e),
                Ok(_) => SchedulerError::Store(StoreError::WriterStopped),
            };
            for answer in answers {
                let _ = answer.send(Err(same_failure(&failure)));
            }
            return;
        };
        match written {
            Ok(stored) => {
                for (answer, result) in answers.into_iter().zip(stored) {
                    let _ = answer.send(result);
                }
            }
            Err(e) if is_commit_failure(&e) => {
                for answer in answers {
                    let _ = answer.send(Err(same_failure(&e)));
                }
            }
            Err(e) => {
                tracing::warn!(reports = reports.len(), error = %e, "a merged write failed: writing its reports one by one");
                self.write_each(store, reports, answers).await;
            }
        }
    }

    async fn write_each(
        &self,
        store: Store,
        reports: Vec<I>,
        answers: Vec<oneshot::Sender<Result<O>>>,
    ) {
        for (report, answer) in reports.into_iter().zip(answers) {
            let store_many = Arc::clone(&self.store_many);
            let result = store
                .write_as(Changes::Progress, move |conn| {
                    async move {
                        let mut stored = store_many(conn, std::slice::from_ref(&report)).await?;
                        stored.pop().expect("one answer per report")
                    }
                    .boxed()
                })
                .await;
            let _ = answer.send(result);
        }
    }
}

/// The writer could not commit, or this server no longer leads: true of every report in
/// the write, so none is written again here.
fn is_commit_failure(e: &SchedulerError) -> bool {
    matches!(
        e,
        SchedulerError::Store(
            StoreError::Standby
                | StoreError::WriterStopped
                | StoreError::Database(sqlx::Error::Protocol(_))
        )
    )
}

fn same_failure(e: &SchedulerError) -> SchedulerError {
    match e {
        SchedulerError::Store(StoreError::Standby) => SchedulerError::Store(StoreError::Standby),
        SchedulerError::Store(StoreError::WriterStopped) => {
            SchedulerError::Store(StoreError::WriterStopped)
        }
        other => SchedulerError::commit_failed(other.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_write_waits_only_when_one_of_its_kind_was_queued_in_the_last_gather() {
        let mut pace = Pace::default();
        let start = Instant::now();
        assert_eq!(pace.delay(start), Duration::ZERO, "a quiet server: at once");
        let soon = start + GATHER / 4;
        assert_eq!(
            pace.delay(soon),
            GATHER * 3 / 4,
            "one GATHER after the last"
        );
        assert_eq!(
            pace.delay(soon),
            GATHER * 7 / 4,
            "and the next one GATHER after that"
        );
        let later = start + GATHER * 10;
        assert_eq!(pace.delay(later), Duration::ZERO, "quiet again: at once");
    }
}
