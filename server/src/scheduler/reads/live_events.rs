//! The live feed behind `GET /events/stream`: each timeline event as it is committed, and
//! jobs' progress as their metrics arrive. It wakes on the store's commit counter, then reads
//! what is new, so it costs nothing while nothing happens.

use std::collections::VecDeque;
use std::sync::Arc;

use podq_api::Event;
use tokio::sync::{broadcast, watch};
use tokio_util::sync::CancellationToken;

use crate::scheduler::{Progress, Result, Scheduler};

/// Events read per wake-up at most; the rest follow at once.
const BATCH: i64 = 500;

/// One item of the live feed.
pub enum LiveItem {
    /// A row of the event timeline; its id is the cursor a client resumes after.
    Event(Event),
    /// A job reached a step.
    Progress(Progress),
}

/// A follower of the live feed from a cursor on.
pub struct LiveFeed {
    /// Ends the feed when the server shuts down; graceful shutdown waits for every answer.
    shutdown: CancellationToken,
    scheduler: Arc<Scheduler>,
    commits: watch::Receiver<u64>,
    progress: broadcast::Receiver<Progress>,
    cursor: i64,
    pending: VecDeque<LiveItem>,
}

impl Scheduler {
    /// The live feed after the event id `after`, or from now when `None`.
    pub async fn live_feed(
        self: &Arc<Self>,
        after: Option<i64>,
        shutdown: CancellationToken,
    ) -> Result<LiveFeed> {
        let cursor = match after {
            Some(after) => after,
            None => self.last_event_id().await?,
        };
        Ok(LiveFeed {
            shutdown,
            scheduler: Arc::clone(self),
            commits: self.commits(),
            progress: self.progress(),
            cursor,
            pending: VecDeque::new(),
        })
    }
}

impl LiveFeed {
    /// The next item; None ends the feed (the server is shutting down).
    pub async fn next(&mut self) -> Option<LiveItem> {
        loop {
            if let Some(item) = self.pending.pop_front() {
                return Some(item);
            }
            // Whatever was committed before this point is read below; what commits after
            // marks the receiver changed.
            self.commits.borrow_and_update();
            if self.read_new().await {
                continue;
            }
            tokio::select! {
                _ = self.shutdown.cancelled() => return None,
                changed = self.commits.changed() => changed.ok()?,
                progress = self.progress.recv() => match progress {
                    Ok(p) => self.pending.push_back(LiveItem::Progress(p)),
                    Err(broadcast::error::RecvError::Lagged(_)) => {}
                    Err(broadcast::error::RecvError::Closed) => return None,
                },
            }
        }
    }

    /// Queues the events committed after the cursor; true if there were any.
    async fn read_new(&mut self) -> bool {
        let events = match self.scheduler.events_after(self.cursor, BATCH).await {
            Ok(events) => events,
            Err(e) => {
                tracing::warn!(error = %e, "the event stream could not read events");
                return false;
            }
        };
        let found = !events.is_empty();
        for event in events {
            self.cursor = event.id;
            self.pending.push_back(LiveItem::Event(event));
        }
        found
    }
}
