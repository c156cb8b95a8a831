//! The lease's fence: every call a worker makes after its lease names it, and a lease that
//! is no longer its job's live one gets `LeaseLost`, checked in memory first and then in the
//! same transaction as the write.

use futures::future::BoxFuture;
use futures::FutureExt;
use podq_api::{JobId, LeaseId};

use crate::scheduler::{LiveLease, Result, Scheduler, SchedulerError};
use crate::store::leases::{self as sql};
use crate::store::Conn;

/// The job and attempt a lease holds, as its fence found them inside the write.
pub(in crate::scheduler) struct Fenced {
    pub job_id: JobId,
    pub attempt: i64,
}

impl Scheduler {
    /// The live lease `lease_id`, or `LeaseLost`: the cheap check in memory every worker
    /// call makes before it touches the store.
    pub(in crate::scheduler) fn live_lease(&self, lease_id: LeaseId) -> Result<LiveLease> {
        self.live
            .get(lease_id)
            .ok_or(SchedulerError::LeaseLost(lease_id))
    }

    /// A write on behalf of the worker holding `lease_id`, in one transaction with its
    /// fence: unless the lease is still its job's live one in the database, nothing is
    /// written and the caller gets `LeaseLost`.
    pub(in crate::scheduler) async fn write_fenced<T, F>(
        &self,
        lease_id: LeaseId,
        op: F,
    ) -> Result<T>
    where
        T: Send + 'static,
        F: for<'c> FnOnce(&'c mut Conn, Fenced) -> BoxFuture<'c, Result<T>> + Send + 'static,
    {
        self.store
            .write(move |conn| {
                async move {
                    let (job_id, attempt) = sql::fence(conn, lease_id)
                        .await?
                        .ok_or(SchedulerError::LeaseLost(lease_id))?;
                    op(conn, Fenced { job_id, attempt }).await
                }
                .boxed()
            })
            .await
    }
}
