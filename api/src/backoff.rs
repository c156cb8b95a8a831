//! Exponential backoff, the one doubling rule podq's retries follow: the scheduler's wait
//! before a failed job runs again, the worker's calls to the server and to gcloud, its pause
//! between recovery actions, and the webhook deliverer's retries. (A pool's stockout backoff
//! grows ×1.6 with jitter instead, as SkyPilot's does: `worker/src/pool/zones.rs`.)

use std::time::Duration;

/// `base * 2^doublings`, at most `cap`; never overflows.
pub fn exponential(base: Duration, doublings: u32, cap: Duration) -> Duration {
    base.saturating_mul(2u32.saturating_pow(doublings)).min(cap)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubles_up_to_the_cap_without_overflow() {
        let base = Duration::from_secs(30);
        let cap = Duration::from_secs(600);
        assert_eq!(exponential(base, 0, cap), base);
        assert_eq!(exponential(base, 2, cap), Duration::from_secs(120));
        assert_eq!(exponential(base, 5, cap), cap);
        assert_eq!(exponential(base, u32::MAX, cap), cap);
        assert_eq!(exponential(Duration::MAX, 1, Duration::MAX), Duration::MAX);
    }
}
