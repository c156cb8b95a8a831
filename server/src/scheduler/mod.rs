//! The scheduler core: submissions, leases, the retry policy and what people do to jobs.

pub mod control;
pub mod leases;
pub mod policy;
pub mod schedules;
pub mod submit;
