//! SIGTERM is JAX's preemption notice: stop at once, wherever the run is (mid-step, inside a
//! hung barrier, mid-checkpoint), release the TPU lock, and exit 128 + signal.
//!
//! The signals are blocked in every thread and taken synchronously by one thread with
//! `sigwait`, so the stop needs no async-signal-safe trickery and works even while the main
//! thread is blocked forever on a dead peer.

use std::path::PathBuf;

use nix::sys::signal::{SigSet, Signal};

use crate::report::log;

pub struct Termination {
    signals: SigSet,
}

/// Must run before any other thread exists, so every thread inherits the mask.
pub fn block_termination() -> nix::Result<Termination> {
    let signals: SigSet = [Signal::SIGTERM, Signal::SIGINT].into_iter().collect();
    signals.thread_block()?;
    Ok(Termination { signals })
}

impl Termination {
    /// Starts handling the blocked signals; one that arrived earlier is handled now. The lock
    /// file is passed only once this process owns it, so a run refused for a foreign lock file
    /// never deletes it.
    pub fn handle(self, lockfile: PathBuf) {
        std::thread::Builder::new()
            .name("termination".into())
            .spawn(move || {
                let signal = match self.signals.wait() {
                    Ok(signal) => signal,
                    Err(e) => {
                        log!("cannot wait for signals ({e}); SIGTERM will not be handled");
                        return;
                    }
                };
                log!("received {signal}: stopping now (preemption notice)");
                let _ = std::fs::remove_file(&lockfile);
                std::process::exit(128 + signal as i32);
            })
            .expect("spawning the signal thread");
    }
}
