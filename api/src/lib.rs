//! Wire types shared by the podq server, the worker daemon and the CLI.
//!
//! Every HTTP request and response body is defined here, once, so the three parts cannot drift
//! apart. This crate does no I/O.

pub mod accelerators;
pub mod backoff;
pub mod catalog;
pub mod error;
pub mod ids;
pub mod jobs;
pub mod links;
pub mod logs;
pub mod metrics;
pub mod nonfinite;
pub mod orbax;
pub mod plan;
pub mod pod_time;
pub mod pods;
pub mod pools;
pub mod recoveries;
pub mod results;
pub mod schedules;
pub mod status;
pub mod study;
pub mod team;
pub mod time;
pub mod trainer;
pub mod webhooks;
pub mod worker;

pub use accelerators::{slice_type, SliceShape, SliceType, UnknownSliceType};
pub use catalog::*;
pub use error::*;
pub use ids::{JobId, LeaseId};
pub use jobs::*;
pub use links::*;
pub use logs::*;
pub use metrics::*;
pub use plan::*;
pub use pod_time::*;
pub use pods::*;
pub use pools::*;
pub use recoveries::*;
pub use results::*;
pub use schedules::*;
pub use status::*;
pub use study::*;
pub use team::*;
pub use webhooks::*;
pub use worker::*;

/// The prefix of every API route.
pub const API_PREFIX: &str = "/api/v1";
