//! The webhook outbox as the deliverer sees it: the configured receivers recorded, each
//! receiver's next notice, and each delivery's result. Notices are queued by a trigger in the
//! transaction that writes their event (migration 0005); `webhooks.rs` sends them.

use futures::FutureExt;

use super::{Result, Scheduler};
use crate::store::webhooks::{self as outbox, Pending};

/// A receiver as the store records it: its URL, its format and the event kinds it takes.
pub type ReceiverRow = (String, String, Vec<String>);

impl Scheduler {
    /// Records the configured receivers (a receiver no longer configured stops getting
    /// notices); answers each one's id, in order.
    pub async fn sync_webhook_receivers(&self, receivers: Vec<ReceiverRow>) -> Result<Vec<i64>> {
        Ok(self
            .store
            .write(move |conn| async move { outbox::sync(conn, &receivers).await }.boxed())
            .await?)
    }

    /// The oldest notice the receiver has not yet had, due or not.
    pub async fn next_notice(&self, receiver: i64) -> Result<Option<Pending>> {
        Ok(outbox::head(&mut self.store.read().await?, receiver).await?)
    }

    /// The receiver acknowledged the delivery: it is never sent again.
    pub async fn notice_delivered(&self, delivery: i64) -> Result<()> {
        Ok(self
            .store
            .write(move |conn| async move { outbox::delivered(conn, delivery).await }.boxed())
            .await?)
    }

    /// The delivery failed with `error`: it is retried at `next_attempt_at` (ms since the
    /// epoch), and the receiver's later notices wait behind it.
    pub async fn notice_failed(
        &self,
        delivery: i64,
        next_attempt_at: i64,
        error: String,
    ) -> Result<()> {
        Ok(self
            .store
            .write(move |conn| {
                async move { outbox::failed(conn, delivery, next_attempt_at, &error).await }.boxed()
            })
            .await?)
    }
}
