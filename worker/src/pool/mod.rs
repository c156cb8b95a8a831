//! Pools: a pool makes Cloud TPU slices on demand for one accelerator type, up to
//! `max_slices`, trying an ordered list of zones and moving down it when a zone is out of
//! capacity or quota, and deletes a slice that has had no lease for `idle_after`. Each slice
//! it makes runs the same worker loop, agents and recovery as a pod made by hand. These
//! modules are its pure core: the pool file (`config`), what a failed create means
//! (`classify`), which zone to try next (`zones`), a tick's decisions (`decide`), a slice's
//! life as a table (`slice_life`) and the project-wide create rate (`rate`). Around them: the
//! cloud as a pool sees it (`cloud`; the local driver's scripted `sim`, `gcloud`'s Cloud TPU
//! VM nodes and `compute`'s Compute Engine groups), the journal of what it asked for
//! (`journal`), and the process that drives it (`run`), which reads the clock, calls the
//! cloud and the server, and asks the core. Each create runs on a task of its own, so no tick
//! waits on the cloud making a slice.

pub mod classify;
pub mod cli;
pub mod cloud;
pub mod compute;
pub mod config;
pub mod decide;
pub mod gcloud;
pub mod journal;
pub mod rate;
pub mod run;
pub mod sim;
pub mod slice_life;
pub mod zones;
