//! What podq's tests and benches share to run the real thing: `podq server` started as its
//! own process the one way they all start it (`server`), what `/proc` says of a process
//! while it runs (`proc_stats`), and the benches' clients, raw baselines and arithmetic
//! (`harness`, `postgres`). A crate of its own, so that every test binary and bench uses it
//! as a dependency rather than including files by path.

pub mod harness;
pub mod postgres;
pub mod proc_stats;
pub mod server;

pub use server::{RunningServer, ServerLaunch};

/// The repository's root.
pub fn repo() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("testkit lives in the repository")
        .to_owned()
}
