//! Waking waiting workers without a thundering herd.
//!
//! A pod's lease call waits on its accelerator's `Notify`. Each job that becomes leasable
//! wakes one waiter of that accelerator (`notify_one`); a waiter that is dropped after being
//! woken passes the wake-up on to the next (tokio's documented `Notified` behaviour), so a
//! job is never left waiting for a worker that already went away. A job in backoff becomes
//! leasable without anyone calling: its end is kept here and the reaper's tick wakes one
//! waiter when it passes, so waiting workers need no polling of their own.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex};

use tokio::sync::Notify;

#[derive(Default)]
pub struct LeaseWaiters {
    /// Known slice types only (`podq_api::slice_type`): a lease call for another name is
    /// refused, so the map holds at most one entry per row of the types table.
    by_accelerator: Mutex<HashMap<String, Arc<Notify>>>,
    /// (ms since the epoch, accelerator) at which a backed-off job becomes leasable.
    backoff_ends: Mutex<BTreeSet<(i64, String)>>,
}

impl LeaseWaiters {
    /// What a lease call for `accelerator` waits on, or why it is no slice type podq knows
    /// (then nothing is kept).
    pub fn of(&self, accelerator: &str) -> Result<Arc<Notify>, podq_api::UnknownSliceType> {
        podq_api::slice_type(accelerator)?;
        let mut map = self
            .by_accelerator
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        Ok(Arc::clone(map.entry(accelerator.to_owned()).or_default()))
    }

    /// `jobs` jobs for `accelerator` became leasable: wake that many waiters, no more. A type
    /// no one has waited for has no entry and gets none: a later call checks the queue
    /// before it waits.
    pub fn leasable(&self, accelerator: &str, jobs: usize) {
        let notify = {
            let map = self
                .by_accelerator
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            match map.get(accelerator) {
                Some(notify) => Arc::clone(notify),
                None => return,
            }
        };
        for _ in 0..jobs {
            notify.notify_one();
        }
    }

    /// A job for `accelerator` becomes leasable at `at_ms`.
    pub fn leasable_at(&self, accelerator: &str, at_ms: i64) {
        self.backoff_ends
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert((at_ms, accelerator.to_owned()));
    }

    /// Wakes one waiter for each backoff that has ended by `now_ms`.
    pub fn wake_ended_backoffs(&self, now_ms: i64) {
        let due: Vec<String> = {
            let mut ends = self.backoff_ends.lock().unwrap_or_else(|e| e.into_inner());
            let later = ends.split_off(&(now_ms + 1, String::new()));
            std::mem::replace(&mut *ends, later)
                .into_iter()
                .map(|(_, accelerator)| accelerator)
                .collect()
        };
        for accelerator in due {
            self.leasable(&accelerator, 1);
        }
    }
}

impl crate::scheduler::Scheduler {
    /// Job `id` became leasable now, or at `at_ms` once its backoff ends: wakes one waiting
    /// pod of each slice type it may lease. The first to claim it wins; the others find
    /// nothing and wait again. The job's change is already written: a failed read here is
    /// logged, not answered, and waiting pods still find the job at their next call.
    pub(in crate::scheduler) async fn wake_for_job(&self, id: podq_api::JobId, at_ms: Option<i64>) {
        let read = async {
            crate::store::job_accelerators::of_job(&mut self.store.read().await?, id).await
        };
        let accelerators = match read.await {
            Ok(accelerators) => accelerators,
            Err(e) => {
                tracing::warn!(job = %id, error = %e, "cannot read the job's slice types to wake its pods");
                return;
            }
        };
        for accelerator in accelerators {
            match at_ms {
                Some(at) => self.waiters.leasable_at(&accelerator, at),
                None => self.waiters.leasable(&accelerator, 1),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    async fn woken(notify: &Notify) -> bool {
        tokio::time::timeout(Duration::from_millis(50), notify.notified())
            .await
            .is_ok()
    }

    #[tokio::test]
    async fn one_job_wakes_one_waiter_of_its_accelerator_only() {
        let waiters = LeaseWaiters::default();
        let v4 = waiters.of("v4-64").unwrap();
        let v5 = waiters.of("v5litepod-16").unwrap();
        let mut first = Box::pin(v4.notified());
        let mut second = Box::pin(v4.notified());
        let mut other = Box::pin(v5.notified());
        first.as_mut().enable();
        second.as_mut().enable();
        other.as_mut().enable();
        waiters.leasable("v4-64", 1);
        let ready = |n: &mut std::pin::Pin<Box<tokio::sync::futures::Notified<'_>>>| {
            futures::FutureExt::now_or_never(n.as_mut()).is_some()
        };
        assert!(ready(&mut first));
        assert!(!ready(&mut second), "a second waiter stays asleep");
        assert!(
            !ready(&mut other),
            "another accelerator's waiter stays asleep"
        );
    }

    #[tokio::test]
    async fn an_ended_backoff_wakes_one_waiter_once() {
        let waiters = LeaseWaiters::default();
        let v4 = waiters.of("v4-64").unwrap();
        waiters.leasable_at("v4-64", 1_000);
        waiters.wake_ended_backoffs(999);
        assert!(!woken(&v4).await, "not before its end");
        waiters.wake_ended_backoffs(1_000);
        assert!(woken(&v4).await);
        waiters.wake_ended_backoffs(2_000);
        assert!(!woken(&v4).await, "only once");
    }

    #[test]
    fn only_known_slice_types_are_kept() {
        let waiters = LeaseWaiters::default();
        for name in ["v9-999", "v4-064", "v4-+64", &"x".repeat(2_000)] {
            assert!(waiters.of(name).is_err(), "{name}");
            waiters.leasable(name, 1);
            waiters.leasable_at(name, 0);
        }
        waiters.wake_ended_backoffs(1);
        waiters.leasable("v6e-32", 1);
        assert!(waiters.by_accelerator.lock().unwrap().is_empty());
        waiters.of("v4-64").unwrap();
        assert_eq!(waiters.by_accelerator.lock().unwrap().len(), 1);
    }
}
