//! The podq worker: the daemon that runs beside a pod, takes leases and supervises the
//! trainer on every host. It meets the server only over HTTP.

pub mod agent;
pub mod attempt;
pub mod build_id;
pub mod checkpoints;
pub mod client;
pub mod config;
pub mod daemon;
pub mod events;
pub mod phases;
pub mod pod;
pub mod pool;
pub mod procs;
pub mod report;
pub mod running;
pub mod shell;
pub mod trust;
