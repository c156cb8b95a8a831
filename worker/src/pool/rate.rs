//! The project-wide limit on slice creates: a token bucket every pool of the process draws
//! from. Google Cloud's TPU and Compute APIs limit mutating requests per project and minute
//! (https://cloud.google.com/tpu/docs/quota, https://cloud.google.com/compute/api-quota);
//! Iris caps its creates at 60 a minute, under the roughly 91 GCP allows
//! (https://github.com/marin-community/marin/blob/main/lib/iris/src/iris/cluster/autoscaler/runtime.py).

use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

/// Creates a minute that podq allows itself by default, as Iris does.
pub const DEFAULT_CREATES_PER_MINUTE: u32 = 60;

#[derive(Debug)]
pub struct CreateRate {
    per_minute: u32,
    bucket: Mutex<Bucket>,
}

#[derive(Debug)]
struct Bucket {
    tokens: f64,
    at: Instant,
}

impl CreateRate {
    /// Up to `per_minute` creates a minute, a whole minute's worth at once to begin with.
    pub fn per_minute(per_minute: u32) -> CreateRate {
        CreateRate {
            per_minute,
            bucket: Mutex::new(Bucket {
                tokens: f64::from(per_minute),
                at: Instant::now(),
            }),
        }
    }

    /// Takes one create's token, if one is left at `now`.
    pub fn try_take_at(&self, now: Instant) -> bool {
        let mut bucket = self.bucket.lock().unwrap_or_else(|e| e.into_inner());
        let refill = now.saturating_duration_since(bucket.at).as_secs_f64() / 60.0
            * f64::from(self.per_minute);
        bucket.tokens = (bucket.tokens + refill).min(f64::from(self.per_minute));
        bucket.at = now;
        if bucket.tokens >= 1.0 {
            bucket.tokens -= 1.0;
            true
        } else {
            false
        }
    }

    pub fn try_take(&self) -> bool {
        self.try_take_at(Instant::now())
    }

    /// How long until the next token, for the log.
    pub fn wait_for_next(&self) -> Duration {
        let bucket = self.bucket.lock().unwrap_or_else(|e| e.into_inner());
        let missing = (1.0 - bucket.tokens).max(0.0);
        Duration::from_secs_f64(missing * 60.0 / f64::from(self.per_minute.max(1)))
    }
}

impl Default for CreateRate {
    fn default() -> Self {
        CreateRate::per_minute(DEFAULT_CREATES_PER_MINUTE)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_minutes_worth_then_one_a_second_at_sixty() {
        let rate = CreateRate::per_minute(60);
        let start = Instant::now();
        let taken = (0..100).filter(|_| rate.try_take_at(start)).count();
        assert_eq!(taken, 60, "a full bucket holds a minute's worth");
        assert!(!rate.try_take_at(start + Duration::from_millis(500)));
        assert!(rate.try_take_at(start + Duration::from_millis(1_000)));
        assert!(!rate.try_take_at(start + Duration::from_millis(1_100)));
        // Idle for an hour: still no more than a minute's worth.
        let later = start + Duration::from_secs(3600);
        let taken = (0..100).filter(|_| rate.try_take_at(later)).count();
        assert_eq!(taken, 60);
    }
}
