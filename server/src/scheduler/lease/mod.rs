//! Leasing: handing whole-pod jobs to workers, hearing from them under the lease's fence,
//! ending leases whose worker went silent, waking waiting workers, and the retry policy that
//! turns an attempt's outcome into the job's next state.

pub(super) mod authority;
mod evict;
mod fence;
mod finish;
mod heartbeat;
pub mod judge;
mod leasing;
mod links;
pub mod live;
mod log_lines;
mod merge;
pub mod policy;
pub(super) mod progress;
mod reaper;
pub(super) mod reports;
pub mod rung_judge;
pub(super) mod wake;
pub use reaper::Reaped;
