//! Views computed once per change, not once per read: status, the grant line and the plan
//! read every queued job (or the whole catalog), and a deep queue made every read pay for it
//! (status p99 went ×28 from 1,000 to 40,000 queued jobs). A view is kept until the store
//! commits again, and at most `MAX_AGE`, since parts of it (rates, ETAs) move with the clock.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use tokio::sync::watch;

/// How long a view is served without a commit: rates and ETAs age with the clock.
const MAX_AGE: Duration = Duration::from_secs(5);

pub struct ReadCache<T> {
    commits: watch::Receiver<u64>,
    slot: Mutex<Option<(u64, Instant, T)>>,
}

impl<T: Clone> ReadCache<T> {
    pub fn new(commits: watch::Receiver<u64>) -> Self {
        ReadCache {
            commits,
            slot: Mutex::new(None),
        }
    }

    /// The kept view if nothing was committed since it was made and it is fresh enough;
    /// otherwise `make`'s, kept for the next read. The counter is read before `make` runs,
    /// so a commit during `make` makes the next read compute again.
    pub async fn get_or<E, F, Fut>(&self, make: F) -> Result<T, E>
    where
        F: FnOnce() -> Fut,
        Fut: std::future::Future<Output = Result<T, E>>,
    {
        let commit = *self.commits.borrow();
        if let Some((at_commit, made, value)) = &*self.lock() {
            if *at_commit == commit && made.elapsed() < MAX_AGE {
                return Ok(value.clone());
            }
        }
        let value = make().await?;
        *self.lock() = Some((commit, Instant::now(), value.clone()));
        Ok(value)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<(u64, Instant, T)>> {
        self.slot.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_view_is_made_again_after_a_commit_only() {
        let (commit, commits) = watch::channel(0u64);
        let cache = ReadCache::new(commits);
        let made = std::sync::atomic::AtomicU32::new(0);
        let make =
            || async { Ok::<_, ()>(made.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1) };
        assert_eq!(cache.get_or(make).await, Ok(1));
        assert_eq!(cache.get_or(make).await, Ok(1), "no commit: the kept view");
        commit.send_modify(|n| *n += 1);
        assert_eq!(cache.get_or(make).await, Ok(2), "a commit: made again");
        assert_eq!(cache.get_or(make).await, Ok(2));
    }
}
