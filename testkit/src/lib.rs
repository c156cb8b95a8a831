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

/// The `podq` a bench measures: the one cargo built for it (`built`, its
/// `CARGO_BIN_EXE_podq`), or `PODQ_BENCH_PROGRAM` when that is set. Pointing it at a build
/// of an earlier commit prints that commit's figures from this same bench and its same
/// clients, so a change's before and after come from one sitting on one machine.
pub fn program_under_test(built: &str) -> String {
    std::env::var("PODQ_BENCH_PROGRAM").unwrap_or_else(|_| built.to_owned())
}
