//! The read side: jobs and what hangs off them, status and pods, a group's study and its
//! results, trainer logs and their followers, the live feed of events and progress, and the
//! views cached between commits. The HTTP layer reads through here and imports nothing of `store/`.

pub mod audit;
mod follow;
mod job_reads;
mod live_events;
pub mod logs;
pub(super) mod read_cache;
pub mod recoveries;
mod results;
pub(super) mod status;
mod study;

pub use job_reads::{state_allows, JobsQuery};
pub use live_events::{LiveFeed, LiveItem};
pub use results::{ExportPage, MetricsExport, MetricsExportQuery};
