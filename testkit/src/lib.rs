//! What podq's tests and benches share to run the real thing: `podq server` started as its
//! own process the one way they all start it (`server`), and what `/proc` says of a process
//! while it runs (`proc_stats`). A crate of its own, so that every test binary and bench
//! uses it without including files by path.

pub mod proc_stats;
pub mod server;

pub use server::{RunningServer, ServerLaunch};
