//! Cron submissions: stored submissions that run whenever their cron expression fires, in
//! podq's cron dialect.

mod cron_dialect;
pub mod schedules;
