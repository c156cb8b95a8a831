//! Pools (issue 40): a pool makes Cloud TPU slices on demand for one accelerator type, up to
//! `max_slices`, trying an ordered list of zones and moving down it when a zone is out of
//! capacity or quota, and deletes a slice that has had no lease for `idle_after`. Each slice
//! it makes runs the same worker loop, agents and recovery as a pod made by hand. These
//! modules are its pure core: the pool file (`config`), what a failed create means
//! (`classify`), and which zone to try next (`zones`); the process that drives a pool reads
//! the clock and calls the cloud, and asks them.

pub mod classify;
pub mod config;
pub mod zones;
