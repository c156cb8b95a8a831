//! Views computed once per change, not once per read: status, the grant line and the plan
//! read every queued job (or the whole catalog), and a deep queue made every read pay for it
//! (benches/queue_depth.rs). A view is kept until the store commits a change of state, and at
//! most `MAX_AGE`, since parts of it (rates, ETAs) move with the clock.
//!
//! Reports' progress (metrics, log lines: `Changes::Progress`) moves a view's rates and
//! goodput, and a fleet commits some hundreds a second: a view made again after each made
//! every status read pay for a thousand running jobs (benches/fleet.rs). So after progress
//! alone a view is made again at the next read, as after any commit, unless progress comes
//! fast (`BUSY_PROGRESS` commits or more since it was made): then it is kept for
//! `PROGRESS_AGE`. A quiet server shows a job's first steps and rate at once; a busy one
//! shows them at most a second late. Steps themselves come from the live leases on every
//! read, except in an answer kept whole ([`ReadCache::answers`]).
//!
//! A whole answer merged with what lives only in memory (`/status` as JSON: the live leases'
//! steps, the pods' last contact) moves with every heartbeat, which commits nothing, so it is
//! kept only while the server is busy: made while progress was committed at
//! `BUSY_PROGRESS` a second or faster (judged over a second or more, changes of state not
//! counted), for `ANSWER_AGE` at most, and never across a change of state. A fleet's
//! readers then share one answer a few times a second instead of each merging and encoding
//! a thousand running jobs and pods (benches/fleet.rs); a quiet server answers every read
//! afresh.
//!
//! One make at a time: readers that find nothing fresh wait for the make in flight, and a
//! make that started after a reader arrived answers it too (it read every commit before the
//! reader came). Ten dashboards polling in step all missed together each second, and each
//! made its own status of a thousand jobs on two cores: `/status`'s p99 was ten makes long
//! (issue 67, benches/fleet.rs).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use tokio::sync::watch;
// tokio's clock, which a test can advance.
use tokio::time::Instant;

/// How long a view is served without a change of state: rates and ETAs age with the clock.
const MAX_AGE: Duration = Duration::from_secs(5);
/// How long a view is served after fast progress was committed, and nothing else.
const PROGRESS_AGE: Duration = Duration::from_secs(1);
/// Progress commits since a view was made that count as fast: more than its readers would
/// make it again for. A worker commits about one a second; a fleet, hundreds. For an answer
/// kept whole, the same number a second.
const BUSY_PROGRESS: u64 = 16;
/// How long an answer kept whole is served while the server is busy.
const ANSWER_AGE: Duration = Duration::from_millis(500);

/// The commit counters a view was made at: (state changes, every commit).
type MadeAt = (u64, u64);

/// What may be served again, and for how long.
#[derive(Clone, Copy)]
enum Keep {
    /// A view made from the store alone: until a commit, or fast progress's age.
    Views,
    /// An answer that also merged memory no commit moves: only while busy.
    Answers,
}

struct Kept<T> {
    made_at: MadeAt,
    /// Which make it was: readers that arrived before it started may share it.
    number: u64,
    made: Instant,
    busy: Busy,
    value: T,
}

/// Whether progress is committed fast, judged over a second or more (`Keep::Answers`).
#[derive(Clone, Copy)]
struct Busy {
    /// The commit counters and the time the rate is measured from.
    since: (MadeAt, Instant),
    fast: bool,
}

impl Busy {
    fn start(counters: MadeAt) -> Busy {
        Busy {
            since: (counters, Instant::now()),
            fast: false,
        }
    }

    /// The judgement at `counters`: made again once its window is a second long. Changes of
    /// state do not count: a burst of submissions is no fleet reporting.
    fn at(self, counters: MadeAt) -> Busy {
        let window = self.since.1.elapsed();
        if window < PROGRESS_AGE {
            return self;
        }
        let (state, all) = self.since.0;
        let progress = counters
            .1
            .wrapping_sub(all)
            .saturating_sub(counters.0.wrapping_sub(state));
        Busy {
            fast: progress as f64 >= BUSY_PROGRESS as f64 * window.as_secs_f64(),
            ..Busy::start(counters)
        }
    }
}

pub struct ReadCache<T> {
    state_commits: watch::Receiver<u64>,
    commits: watch::Receiver<u64>,
    keep: Keep,
    slot: Mutex<Option<Kept<T>>>,
    /// Held while a value is made, so that readers who arrive together make it once.
    making: tokio::sync::Mutex<()>,
    /// How many makes have started.
    makes_started: AtomicU64,
}

impl<T: Clone> ReadCache<T> {
    /// A cache over the store's counters: `state_commits` (changes of state) and `commits`
    /// (every commit, progress included).
    pub fn new(state_commits: watch::Receiver<u64>, commits: watch::Receiver<u64>) -> Self {
        ReadCache {
            state_commits,
            commits,
            keep: Keep::Views,
            slot: Mutex::new(None),
            making: tokio::sync::Mutex::new(()),
            makes_started: AtomicU64::new(0),
        }
    }

    /// A cache over `store`'s commits.
    pub fn over(store: &crate::store::Store) -> Self {
        ReadCache::new(store.state_commits(), store.commits())
    }

    /// A cache over `store`'s changes of state alone, for a view that reports' progress
    /// never changes (the pod rows): kept until a change of state, or `MAX_AGE`.
    pub fn over_state(store: &crate::store::Store) -> Self {
        ReadCache::new(store.state_commits(), store.state_commits())
    }

    /// A cache of whole answers over `store`'s commits, kept only while it is busy (see the
    /// module's doc).
    pub fn answers(store: &crate::store::Store) -> Self {
        ReadCache {
            keep: Keep::Answers,
            ..ReadCache::over(store)
        }
    }

    /// The kept value if no change of state was committed since it was made and it is fresh
    /// enough; otherwise `make`'s, kept for the next read. The counters are read before
    /// `make` runs, so a commit during `make` makes the next read compute again. Readers that
    /// find nothing fresh wait for the make in flight; one that started after a reader
    /// arrived answers it as well as a fresh one.
    pub async fn get_or<E, F, Fut>(&self, make: F) -> Result<T, E>
    where
        F: FnOnce() -> Fut,
        Fut: std::future::Future<Output = Result<T, E>>,
    {
        let started_before_arrival = self.makes_started.load(Ordering::Acquire);
        if let Some(value) = self.kept(None) {
            return Ok(value);
        }
        let _making = self.making.lock().await;
        if let Some(value) = self.kept(Some(started_before_arrival)) {
            return Ok(value);
        }
        let now_at = self.counters();
        let busy = self
            .lock()
            .as_ref()
            .map_or(Busy::start(now_at), |kept| kept.busy.at(now_at));
        let number = self.makes_started.fetch_add(1, Ordering::AcqRel) + 1;
        let value = make().await?;
        *self.lock() = Some(Kept {
            made_at: now_at,
            number,
            made: Instant::now(),
            busy,
            value: value.clone(),
        });
        Ok(value)
    }

    /// The commit counters now: (changes of state, every commit).
    fn counters(&self) -> MadeAt {
        (*self.state_commits.borrow(), *self.commits.borrow())
    }

    /// The kept value, if it may answer a read: fresh by the rules of its `keep`, or made
    /// by a make that started after the read arrived, when the read saw
    /// `started_before_arrival` makes started.
    fn kept(&self, started_before_arrival: Option<u64>) -> Option<T> {
        let now_at = self.counters();
        let slot = self.lock();
        let kept = slot.as_ref()?;
        if started_before_arrival.is_some_and(|seen| kept.number > seen) {
            return Some(kept.value.clone());
        }
        let age = kept.made.elapsed();
        let progress = now_at.1.wrapping_sub(kept.made_at.1);
        let fresh = match self.keep {
            Keep::Views => {
                age < MAX_AGE
                    && (progress == 0 || (progress >= BUSY_PROGRESS && age < PROGRESS_AGE))
            }
            Keep::Answers => kept.busy.fast && age < ANSWER_AGE,
        };
        (kept.made_at.0 == now_at.0 && fresh).then(|| kept.value.clone())
    }

    /// `look` at the value kept last, fresh or not; None before any was made. Never makes
    /// one: for a figure the most recent view chose (the plan's `keep: auto` shares).
    pub fn peek<R>(&self, look: impl FnOnce(&T) -> R) -> Option<R> {
        self.lock().as_ref().map(|kept| look(&kept.value))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<Kept<T>>> {
        self.slot.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_view_is_made_again_after_a_commit_only() {
        let (commit, commits) = watch::channel(0u64);
        let cache = ReadCache::new(commits.clone(), commits);
        let made = std::sync::atomic::AtomicU32::new(0);
        let make =
            || async { Ok::<_, ()>(made.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1) };
        assert_eq!(cache.get_or(make).await, Ok(1));
        assert_eq!(cache.get_or(make).await, Ok(1), "no commit: the kept view");
        commit.send_modify(|n| *n += 1);
        assert_eq!(cache.get_or(make).await, Ok(2), "a commit: made again");
        assert_eq!(cache.get_or(make).await, Ok(2));
    }

    #[tokio::test(start_paused = true)]
    async fn fast_progress_keeps_a_view_for_its_age_only() {
        let (state, state_commits) = watch::channel(0u64);
        let (any, commits) = watch::channel(0u64);
        let cache = ReadCache::new(state_commits, commits);
        let made = std::sync::atomic::AtomicU32::new(0);
        let make =
            || async { Ok::<_, ()>(made.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1) };
        assert_eq!(cache.get_or(make).await, Ok(1));
        any.send_modify(|n| *n += 1);
        assert_eq!(
            cache.get_or(make).await,
            Ok(2),
            "slow progress: made again at once"
        );
        any.send_modify(|n| *n += BUSY_PROGRESS);
        assert_eq!(
            cache.get_or(make).await,
            Ok(2),
            "fast progress: kept while young"
        );
        tokio::time::advance(PROGRESS_AGE).await;
        assert_eq!(
            cache.get_or(make).await,
            Ok(3),
            "fast progress, then its age: made again"
        );
        tokio::time::advance(PROGRESS_AGE).await;
        assert_eq!(cache.get_or(make).await, Ok(3), "no commit since: kept");
        any.send_modify(|n| *n += BUSY_PROGRESS);
        state.send_modify(|n| *n += 1);
        assert_eq!(
            cache.get_or(make).await,
            Ok(4),
            "a change of state: made again at once"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn an_answer_is_kept_only_while_progress_is_committed_fast() {
        let (state, state_commits) = watch::channel(0u64);
        let (any, commits) = watch::channel(0u64);
        let cache = ReadCache {
            keep: Keep::Answers,
            ..ReadCache::new(state_commits, commits)
        };
        let made = std::sync::atomic::AtomicU32::new(0);
        let make =
            || async { Ok::<_, ()>(made.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1) };
        assert_eq!(cache.get_or(make).await, Ok(1));
        assert_eq!(
            cache.get_or(make).await,
            Ok(2),
            "quiet, no commit since: made again all the same (a heartbeat commits nothing)"
        );
        // A worker's pace: a commit or two a second.
        tokio::time::advance(Duration::from_secs(1)).await;
        any.send_modify(|n| *n += 2);
        assert_eq!(cache.get_or(make).await, Ok(3), "slow commits: quiet");
        assert_eq!(cache.get_or(make).await, Ok(4));
        // A burst of changes of state (submissions) is no fleet.
        tokio::time::advance(Duration::from_secs(1)).await;
        state.send_modify(|n| *n += 3 * BUSY_PROGRESS);
        any.send_modify(|n| *n += 3 * BUSY_PROGRESS);
        assert_eq!(
            cache.get_or(make).await,
            Ok(5),
            "changes of state: made again"
        );
        assert_eq!(cache.get_or(make).await, Ok(6), "and not busy");
        // A fleet's: many a second.
        tokio::time::advance(Duration::from_secs(1)).await;
        any.send_modify(|n| *n += 3 * BUSY_PROGRESS);
        assert_eq!(cache.get_or(make).await, Ok(7), "made once more, now busy");
        any.send_modify(|n| *n += BUSY_PROGRESS);
        assert_eq!(cache.get_or(make).await, Ok(7), "busy: kept while young");
        tokio::time::advance(ANSWER_AGE).await;
        assert_eq!(
            cache.get_or(make).await,
            Ok(8),
            "busy, then its age: made again"
        );
        assert_eq!(cache.get_or(make).await, Ok(8));
        state.send_modify(|n| *n += 1);
        assert_eq!(
            cache.get_or(make).await,
            Ok(9),
            "a change of state: made again at once, busy or not"
        );
        // The fleet stops: judged again once a second has passed.
        tokio::time::advance(Duration::from_secs(1)).await;
        assert_eq!(cache.get_or(make).await, Ok(10));
        assert_eq!(
            cache.get_or(make).await,
            Ok(11),
            "quiet again: made every read"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn readers_that_arrive_together_share_one_make() {
        let (_state, state_commits) = watch::channel(0u64);
        let (_any, commits) = watch::channel(0u64);
        // A quiet server's whole answers: each read alone makes its own.
        let cache = ReadCache {
            keep: Keep::Answers,
            ..ReadCache::new(state_commits, commits)
        };
        let made = std::sync::atomic::AtomicU32::new(0);
        let make = || async {
            let n = made.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1;
            tokio::time::sleep(Duration::from_millis(20)).await;
            Ok::<_, ()>(n)
        };
        let answers = futures::future::join_all((0..10).map(|_| cache.get_or(make))).await;
        // The first reader's make started before the others arrived, so they wait for one
        // more, made after they came, and share it: two makes, not ten.
        assert_eq!(made.load(std::sync::atomic::Ordering::SeqCst), 2);
        assert_eq!(answers[0], Ok(1));
        assert!(answers[1..].iter().all(|a| *a == Ok(2)), "{answers:?}");
        assert_eq!(
            cache.get_or(make).await,
            Ok(3),
            "a reader after the makes: quiet, so made afresh"
        );
    }
}
