//! `podq agent`: the process on each host that owns that host's trainer for one lease.
//!
//! It is started by one short call (an ssh command on a TPU VM, a plain spawn on the
//! simulated pod), detaches from it (`setsid`), and then:
//! - starts the trainer once per lease: a second agent for the same lease finds the first
//!   one's lock and leaves, and an agent that finds the lease's trainer already ended or
//!   still running never starts another, so no retry of any layer starts a second trainer;
//! - writes the trainer's stdout and stderr straight into a log file on the host's disk, so
//!   the trainer never writes into a pipe that a dropped connection could break;
//! - pushes that file to the worker by byte offset ([`wire`]), from wherever the worker's
//!   copy ends, and keeps the file as its buffer while the worker or the network is away;
//! - reports the exit once the trainer's whole process group has ended;
//! - delivers the worker's stop commands to the group (SIGTERM, then SIGKILL).
//!
//! The trainer does not depend on its agent: it runs under `podq agent-keeper` (see
//! [`keeper`]), which leads its process group and writes its exit status to
//! `trainer-exit.json`. An agent that dies (the OOM killer) leaves the trainer training; the
//! worker notices the silence and starts a new agent, which adopts the trainer only after
//! proving it belongs to the lease (a live member of its group carries
//! `PODQ_LEASE_ID=<lease>` in its environment: a pgid file alone survives a reboot and
//! pgids are reused), and reports the exit the keeper wrote. A trainer that is gone with no
//! exit written (its host rebooted) is reported as `vanished`, which the worker does not
//! charge to the run. A SIGTERM to the agent (a host shutting down) does not end it: it
//! stays to deliver the trainer's last lines and exit until the host goes.
//!
//! Files, in `<dir>/<lease>/`: `agent.lock`, `agent.pid`, `trainer.log`, `trainer.pgid`,
//! `trainer-exit.json` (the keeper's), `exit.json` (what was reported). The trainer's pgid
//! also goes to `--pgid-file`, the tag the pod drivers' cleanup reads.

pub mod hub;
pub mod keeper;
pub mod wire;

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context;
use clap::Args;
use nix::fcntl::{Flock, FlockArg};
use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;

use crate::procs::group_alive;
use wire::{AgentExit, StopCommand, SyncAnswer, SyncRequest, PROTOCOL, SYNC_PATH};

#[derive(Args, Debug, Clone)]
pub struct AgentArgs {
    /// The worker's agent endpoint, e.g. http://10.128.0.2:7433.
    #[arg(long)]
    pub worker_url: String,
    /// The lease whose trainer this agent owns.
    #[arg(long)]
    pub lease: String,
    /// This host's index in the pod.
    #[arg(long)]
    pub host: u32,
    /// Where the agent keeps the lease's files (log, exit status, lock).
    #[arg(long)]
    pub dir: PathBuf,
    /// A file holding the lease's secret, which every call to the worker carries.
    #[arg(long)]
    pub secret_file: PathBuf,
    /// Where to write the trainer's process group id (the pod driver's tag).
    #[arg(long)]
    pub pgid_file: Option<PathBuf>,
    /// Where to write this agent's own pid, so a cleanup can find it.
    #[arg(long)]
    pub pid_file: Option<PathBuf>,
    /// Milliseconds between pushes while there is nothing new.
    #[arg(long, default_value_t = 200)]
    pub poll_ms: u64,
    /// Seconds after the trainer ended, with the worker unreachable, before the agent gives
    /// up delivering the exit (the log and `exit.json` stay on disk).
    #[arg(long, default_value_t = 3600)]
    pub give_up_s: u64,
    /// The trainer command, run with `bash -c` in a process group of its own.
    #[arg(long)]
    pub command: String,
}

/// Largest chunk of log one push carries.
const CHUNK: u64 = 256 * 1024;

pub async fn run(args: AgentArgs) -> anyhow::Result<()> {
    if !valid_lease(&args.lease) {
        anyhow::bail!("`{}` is not a lease id", args.lease);
    }
    let dir = args.dir.join(&args.lease);
    std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let lock_file = File::create(dir.join("agent.lock"))?;
    // Held for the agent's whole life; the kernel drops it when the agent dies.
    let _lock = match Flock::lock(lock_file, FlockArg::LockExclusiveNonblock) {
        Ok(lock) => lock,
        Err(_) => {
            println!(
                "podq agent: lease {} already has an agent on this host",
                args.lease
            );
            return Ok(());
        }
    };
    let secret = std::fs::read_to_string(&args.secret_file)
        .with_context(|| format!("cannot read {}", args.secret_file.display()))?
        .trim()
        .to_owned();
    write_atomically(&dir.join("agent.pid"), std::process::id().to_string())?;
    if let Some(pid_file) = &args.pid_file {
        write_atomically(pid_file, std::process::id().to_string())?;
    }
    let log_path = dir.join("trainer.log");
    let exit_path = dir.join("exit.json");
    let trainer = Arc::new(Mutex::new(TrainerState::default()));
    start_or_adopt(&args, &dir, &log_path, &exit_path, trainer.clone())?;
    stay_through_shutdown();
    sync_loop(&args, &secret, &log_path, trainer).await;
    Ok(())
}

/// A host shutting down (a preemption's ACPI soft off) sends every process SIGTERM: the
/// trainer saves and exits, and its agent must still be there to deliver that. A handler,
/// not SIG_IGN, so nothing the agent starts inherits it.
fn stay_through_shutdown() {
    use tokio::signal::unix::{signal, SignalKind};
    for kind in [SignalKind::terminate(), SignalKind::hangup()] {
        if let Ok(mut stream) = signal(kind) {
            tokio::spawn(async move {
                while stream.recv().await.is_some() {
                    eprintln!(
                        "podq agent: {kind:?} received: staying until the trainer's exit is delivered"
                    );
                }
            });
        }
    }
}

#[derive(Default)]
struct TrainerState {
    pgid: Option<i32>,
    exit: Option<AgentExit>,
}

fn lock(state: &Mutex<TrainerState>) -> std::sync::MutexGuard<'_, TrainerState> {
    state.lock().unwrap_or_else(|e| e.into_inner())
}

/// Starts the lease's trainer, unless an earlier agent of this lease already did: then the
/// ended trainer's exit is reported, or the running one is adopted once it proves to be
/// the lease's, or a trainer that is gone without an exit is reported vanished.
fn start_or_adopt(
    args: &AgentArgs,
    dir: &Path,
    log_path: &Path,
    exit_path: &Path,
    trainer: Arc<Mutex<TrainerState>>,
) -> anyhow::Result<()> {
    if let Ok(text) = std::fs::read_to_string(exit_path) {
        let exit: AgentExit = serde_json::from_str(&text)
            .with_context(|| format!("{} is not an exit status", exit_path.display()))?;
        eprintln!("podq agent: the trainer of this lease already ended ({exit:?})");
        lock(&trainer).exit = Some(exit);
        return Ok(());
    }
    let pgid_path = dir.join("trainer.pgid");
    let kept_exit = dir.join(keeper::EXIT_FILE);
    if let Some(pgid) = std::fs::read_to_string(&pgid_path)
        .ok()
        .and_then(|t| t.trim().parse::<i32>().ok())
    {
        if keeper::group_carries_lease(pgid, &args.lease) {
            eprintln!(
                "podq agent: adopting the running trainer of this lease (process group {pgid}, \
                 PODQ_LEASE_ID={})",
                args.lease
            );
            lock(&trainer).pgid = Some(pgid);
            let exit_path = exit_path.to_owned();
            std::thread::spawn(move || {
                wait_for_group(pgid);
                let exit = keeper::read_exit(&kept_exit).unwrap_or(AgentExit::UNKNOWN);
                record_exit(&trainer, &exit_path, exit);
            });
            return Ok(());
        }
        // No process of the lease is left in that group: the trainer ended while no agent
        // watched (its keeper wrote the exit), or it went with its host.
        let exit = keeper::read_exit(&kept_exit).unwrap_or_else(|| {
            eprintln!(
                "podq agent: the trainer of this lease (process group {pgid}) is gone and left \
                 no exit status: its host restarted, or it was killed with its agent"
            );
            AgentExit::VANISHED
        });
        record_exit(&trainer, exit_path, exit);
        return Ok(());
    }
    let log = OpenOptions::new()
        .create(true)
        .append(true)
        .open(log_path)
        .with_context(|| format!("cannot open {}", log_path.display()))?;
    let program = std::env::current_exe().context("cannot find this program's path")?;
    let mut child = std::process::Command::new(program)
        .arg("agent-keeper")
        .arg("--exit-file")
        .arg(&kept_exit)
        .arg("--command")
        .arg(&args.command)
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log)
        // The trainer writes into a file now: keep Python from holding lines in a buffer.
        .env("PYTHONUNBUFFERED", "1")
        .process_group(0)
        .spawn()
        .context("cannot start the trainer")?;
    let pgid = child.id() as i32;
    write_atomically(&pgid_path, pgid.to_string())?;
    if let Some(tag) = &args.pgid_file {
        write_atomically(tag, pgid.to_string())?;
    }
    lock(&trainer).pgid = Some(pgid);
    let exit_path = exit_path.to_owned();
    std::thread::spawn(move || {
        use std::os::unix::process::ExitStatusExt;
        let status = child.wait();
        // What the shell started may outlive it (`cd x && python ...` does not exec).
        wait_for_group(pgid);
        // The keeper's record; without one, the keeper itself was killed (SIGKILL to the
        // group), which is the trainer's end too.
        let exit = keeper::read_exit(&kept_exit).unwrap_or(match status {
            Ok(status) => AgentExit {
                code: status.code(),
                signal: status.signal(),
                vanished: false,
            },
            Err(_) => AgentExit::UNKNOWN,
        });
        record_exit(&trainer, &exit_path, exit);
    });
    Ok(())
}

fn wait_for_group(pgid: i32) {
    while group_alive(pgid) {
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn record_exit(trainer: &Mutex<TrainerState>, exit_path: &Path, exit: AgentExit) {
    if let Ok(json) = serde_json::to_string(&exit) {
        if let Err(e) = write_atomically(exit_path, json) {
            eprintln!("podq agent: cannot write {}: {e}", exit_path.display());
        }
    }
    lock(trainer).exit = Some(exit);
}

fn write_atomically(path: &Path, text: String) -> std::io::Result<()> {
    let tmp = path.with_extension("partial");
    std::fs::write(&tmp, text)?;
    std::fs::rename(tmp, path)
}

/// Pushes the log and the exit to the worker until it has both, applying its stop commands.
async fn sync_loop(
    args: &AgentArgs,
    secret: &str,
    log_path: &Path,
    trainer: Arc<Mutex<TrainerState>>,
) {
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()
        .expect("an HTTP client");
    let url = format!("{}{SYNC_PATH}", args.worker_url.trim_end_matches('/'));
    let poll = Duration::from_millis(args.poll_ms.max(10));
    let mut acked: u64 = 0;
    let mut applied: Option<StopCommand> = None;
    let mut last_contact = Instant::now();
    let mut complained = false;
    loop {
        let exit = lock(&trainer).exit;
        let (end, data) = read_chunk(log_path, acked, exit.is_some());
        let file_done = exit.is_some() && end == file_len(log_path);
        let request = SyncRequest {
            protocol: PROTOCOL,
            lease: args.lease.clone(),
            host: args.host,
            offset: acked,
            end,
            data,
            exit: if file_done { exit } else { None },
        };
        let sent = client
            .post(&url)
            .bearer_auth(secret)
            .json(&request)
            .send()
            .await;
        let mut more = false;
        match sent {
            Ok(response) if response.status().is_success() => {
                last_contact = Instant::now();
                complained = false;
                match response.json::<SyncAnswer>().await {
                    Ok(answer) => {
                        more = answer.ack > acked && !file_done;
                        acked = answer.ack;
                        if answer.done {
                            return;
                        }
                        if let Some(stop) = answer.stop {
                            if applied != Some(stop) {
                                applied = Some(stop);
                                deliver(&trainer, stop);
                            }
                        }
                    }
                    Err(e) => eprintln!("podq agent: unreadable answer: {e}"),
                }
            }
            Ok(response) => {
                if !complained {
                    let status = response.status();
                    let body = response.text().await.unwrap_or_default();
                    eprintln!("podq agent: the worker refused a push ({status}): {body}");
                    complained = true;
                }
            }
            Err(e) => {
                if !complained {
                    eprintln!("podq agent: cannot reach the worker at {url}: {e}");
                    complained = true;
                }
            }
        }
        if exit.is_some() && last_contact.elapsed() >= Duration::from_secs(args.give_up_s) {
            eprintln!(
                "podq agent: the worker has been away too long; leaving the exit in exit.json"
            );
            return;
        }
        if !more {
            tokio::time::sleep(poll).await;
        }
    }
}

/// The bytes of the log from `from`, cut after the last whole line (or to the end of the
/// file once the trainer is gone, so a last line without a newline is still delivered),
/// and the offset where they end.
fn read_chunk(path: &Path, from: u64, ended: bool) -> (u64, String) {
    let Ok(mut file) = File::open(path) else {
        return (from, String::new());
    };
    let len = file.metadata().map(|m| m.len()).unwrap_or(0);
    if from >= len || file.seek(SeekFrom::Start(from)).is_err() {
        return (from, String::new());
    }
    let mut bytes = Vec::new();
    if file.take(CHUNK).read_to_end(&mut bytes).is_err() {
        return (from, String::new());
    }
    let at_end = from + bytes.len() as u64 == len;
    let whole = if ended && at_end {
        bytes.len()
    } else {
        bytes
            .iter()
            .rposition(|b| *b == b'\n')
            .map_or(0, |at| at + 1)
    };
    bytes.truncate(whole);
    (
        from + whole as u64,
        String::from_utf8_lossy(&bytes).into_owned(),
    )
}

fn file_len(path: &Path) -> u64 {
    std::fs::metadata(path).map(|m| m.len()).unwrap_or(0)
}

fn deliver(trainer: &Mutex<TrainerState>, stop: StopCommand) {
    let Some(pgid) = lock(trainer).pgid else {
        return;
    };
    let group = Pid::from_raw(pgid);
    match stop {
        StopCommand::Term => {
            eprintln!("podq agent: SIGTERM to the trainer's process group {pgid}");
            let _ = killpg(group, Signal::SIGTERM);
            // A stopped (hung) process only sees SIGTERM once continued.
            let _ = killpg(group, Signal::SIGCONT);
        }
        StopCommand::Kill => {
            eprintln!("podq agent: SIGKILL to the trainer's process group {pgid}");
            let _ = killpg(group, Signal::SIGCONT);
            let _ = killpg(group, Signal::SIGKILL);
        }
    }
}

/// Whether `lease` can be used in a file name and a shell pattern as is.
pub fn valid_lease(lease: &str) -> bool {
    !lease.is_empty()
        && lease.len() <= 64
        && lease
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

/// A fresh per-lease secret: 32 random bytes as hex.
pub fn new_secret() -> String {
    let bytes: [u8; 32] = rand::random();
    hex::encode(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_end_at_whole_lines_until_the_trainer_is_gone() {
        let dir = std::env::temp_dir().join(format!("podq-agent-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).unwrap();
        let log = dir.join("trainer.log");
        std::fs::write(&log, "one\ntwo\npart").unwrap();
        assert_eq!(read_chunk(&log, 0, false), (8, "one\ntwo\n".into()));
        assert_eq!(read_chunk(&log, 4, false), (8, "two\n".into()));
        assert_eq!(read_chunk(&log, 8, false), (8, String::new()));
        assert_eq!(read_chunk(&log, 8, true), (12, "part".into()));
        assert_eq!(read_chunk(&log, 12, true), (12, String::new()));
        std::fs::remove_dir_all(dir).unwrap();
    }
}
