//! `podq agent-keeper`: the leader of a trainer's process group, so the trainer's exit
//! status outlives its agent.
//!
//! A process's exit status goes to its parent only. If the agent were the trainer's parent,
//! an agent killed by the OOM killer would take the status with it, and the new agent could
//! only say "ended somehow". The keeper is the trainer's parent instead: it starts the
//! command, waits, writes the status to `trainer-exit.json` and exits. It blocks SIGTERM,
//! SIGINT and SIGHUP, so a stop sent to the group reaches the trainer and not the keeper; the
//! trainer starts with them unblocked (std would pass the mask on) and at their defaults
//! (the keeper never ignores them). SIGKILL ends the keeper too, and then the agent, its parent, knows.

use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};

use anyhow::Context;
use clap::Args;
use nix::sys::signal::{SigSet, Signal};

use super::wire::AgentExit;

/// Where the keeper writes the trainer's exit, in the lease's directory.
pub const EXIT_FILE: &str = "trainer-exit.json";

#[derive(Args, Debug, Clone)]
pub struct KeeperArgs {
    /// Where to write the trainer's exit status.
    #[arg(long)]
    pub exit_file: PathBuf,
    /// The trainer command, run with `bash -c`.
    #[arg(long)]
    pub command: String,
}

pub fn run(args: KeeperArgs) -> anyhow::Result<()> {
    let stops: SigSet = [Signal::SIGTERM, Signal::SIGINT, Signal::SIGHUP]
        .into_iter()
        .collect();
    stops
        .thread_block()
        .context("cannot block the stop signals")?;
    let mut trainer = std::process::Command::new("bash");
    trainer.arg("-c").arg(&args.command);
    // std leaves the parent's mask in the child: unblock, or the trainer never sees the
    // preemption notice (a sigwait-based trainer still would, a JAX one would not).
    // SAFETY: only sigprocmask, which is async-signal-safe, runs between fork and exec.
    unsafe {
        trainer.pre_exec(|| {
            nix::sys::signal::sigprocmask(
                nix::sys::signal::SigmaskHow::SIG_SETMASK,
                Some(&SigSet::empty()),
                None,
            )
            .map_err(std::io::Error::from)
        });
    }
    let status = trainer.status().context("cannot start the trainer")?;
    let exit = AgentExit {
        code: status.code(),
        signal: status.signal(),
        vanished: false,
    };
    let tmp = args.exit_file.with_extension("partial");
    std::fs::write(&tmp, serde_json::to_string(&exit)?)
        .and_then(|_| std::fs::rename(&tmp, &args.exit_file))
        .with_context(|| format!("cannot write {}", args.exit_file.display()))?;
    Ok(())
}

/// The exit a keeper wrote, if it did.
pub fn read_exit(path: &Path) -> Option<AgentExit> {
    serde_json::from_str(&std::fs::read_to_string(path).ok()?).ok()
}

/// Whether a live process of group `pgid` carries `PODQ_LEASE_ID=<lease>` in its
/// environment: the proof that the group is this lease's trainer, and not a pgid reused
/// after a reboot or by another user.
pub fn group_carries_lease(pgid: i32, lease: &str) -> bool {
    let tag = format!("PODQ_LEASE_ID={lease}");
    crate::procs::group_members(pgid).into_iter().any(|pid| {
        std::fs::read(format!("/proc/{pid}/environ"))
            .map(|environ| environ.split(|b| *b == 0).any(|var| var == tag.as_bytes()))
            .unwrap_or(false)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::process::CommandExt;

    #[test]
    fn the_trainer_sees_the_signals_its_keeper_blocks() {
        let dir = std::env::temp_dir().join(format!("podq-keeper-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).unwrap();
        let exit_file = dir.join(EXIT_FILE);
        let out = dir.join("mask");
        // Run in a thread of its own: the keeper blocks signals in the calling thread.
        let args = KeeperArgs {
            exit_file: exit_file.clone(),
            command: format!("grep SigBlk /proc/self/status > '{}'", out.display()),
        };
        std::thread::spawn(move || run(args))
            .join()
            .unwrap()
            .unwrap();
        let mask = std::fs::read_to_string(&out).unwrap();
        assert_eq!(mask.trim(), "SigBlk:\t0000000000000000", "{mask}");
        assert_eq!(read_exit(&exit_file).unwrap().code, Some(0));
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn a_group_proves_its_lease_by_its_environment() {
        let mut tagged = std::process::Command::new("sleep")
            .arg("30")
            .env("PODQ_LEASE_ID", "lease-a")
            .process_group(0)
            .spawn()
            .unwrap();
        let pgid = tagged.id() as i32;
        // Until its exec, the child's environment is still the test's: wait for `sleep`.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while std::fs::read_to_string(format!("/proc/{pgid}/comm"))
            .is_ok_and(|comm| comm.trim() != "sleep")
        {
            assert!(std::time::Instant::now() < deadline, "sleep never started");
            std::thread::yield_now();
        }
        assert!(group_carries_lease(pgid, "lease-a"));
        assert!(!group_carries_lease(pgid, "lease-b"));
        tagged.kill().unwrap();
        tagged.wait().unwrap();
        assert!(
            !group_carries_lease(pgid, "lease-a"),
            "a dead group proves nothing"
        );
    }
}
