//! The `local` driver: a simulated pod of N hosts, each a directory of its own (separate
//! filesystems, as on the real pod) whose trainer runs as a local process group.
//!
//! Its failures are driven from outside by dropping a file into `<root>/control/`:
//! - `preempt`: the pod goes `PREEMPTED`; every host process is killed at once;
//! - `kill-host-N`: host N's process group gets SIGKILL;
//! - `hang-host-N`: host N's process group gets SIGSTOP (alive, making no progress);
//! - `fail-next-launch`: the next launch's trainer exits 1 at once on every host.
//!
//! The driver consumes each file when it acts on it.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Mutex;
use std::time::Duration;

use anyhow::Context;
use async_trait::async_trait;
use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;
use podq_api::{Preflight, PreflightFailure};
use sha2::{Digest, Sha256};
use tokio::process::{Child, Command};

use super::{HostLaunch, PodDriver, PodStatus};

pub struct LocalPod {
    name: String,
    accelerator: String,
    hosts: u32,
    root: PathBuf,
    recovery_delay: Duration,
    state: Mutex<LocalState>,
}

#[derive(Default)]
struct LocalState {
    preempted: bool,
    fail_next_launch: bool,
}

/// The file that tags a host's trainer process group, so a later attempt can find and stop
/// a leftover one without matching processes by name.
const PGID_FILE: &str = "tmp/podq-trainer.pgid";
const LOCK_FILE: &str = "tmp/libtpu_lockfile";

impl LocalPod {
    pub fn new(
        name: &str,
        accelerator: &str,
        hosts: u32,
        root: &Path,
        recovery_delay: Duration,
    ) -> anyhow::Result<Self> {
        for host in 0..hosts {
            let dir = root.join("hosts").join(format!("host-{host}"));
            std::fs::create_dir_all(dir.join("tmp"))
                .with_context(|| format!("cannot create {}", dir.display()))?;
        }
        std::fs::create_dir_all(root.join("control"))?;
        Ok(LocalPod {
            name: name.to_owned(),
            accelerator: accelerator.to_owned(),
            hosts,
            root: root.to_path_buf(),
            recovery_delay,
            state: Mutex::new(LocalState::default()),
        })
    }

    pub fn host_dir(&self, host: u32) -> PathBuf {
        self.root.join("hosts").join(format!("host-{host}"))
    }

    pub fn control_dir(&self) -> PathBuf {
        self.root.join("control")
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, LocalState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn take_control(&self, name: &str) -> bool {
        std::fs::remove_file(self.control_dir().join(name)).is_ok()
    }

    fn host_pgid(&self, host: u32) -> Option<i32> {
        std::fs::read_to_string(self.host_dir(host).join(PGID_FILE))
            .ok()?
            .trim()
            .parse()
            .ok()
    }

    fn signal_host(&self, host: u32, signal: Signal) -> bool {
        self.host_pgid(host)
            .is_some_and(|pgid| killpg(Pid::from_raw(pgid), signal).is_ok())
    }

    /// Acts on the control files present now.
    fn apply_controls(&self) {
        if self.take_control("preempt") {
            tracing::warn!(pod = %self.name, "simulated preemption: every host goes down");
            self.lock().preempted = true;
            for host in 0..self.hosts {
                self.signal_host(host, Signal::SIGKILL);
            }
        }
        if self.take_control("fail-next-launch") {
            self.lock().fail_next_launch = true;
        }
        for host in 0..self.hosts {
            if self.take_control(&format!("kill-host-{host}")) {
                tracing::warn!(pod = %self.name, host, "simulated host death: SIGKILL");
                self.signal_host(host, Signal::SIGKILL);
            }
            if self.take_control(&format!("hang-host-{host}")) {
                tracing::warn!(pod = %self.name, host, "simulated hang: SIGSTOP");
                self.signal_host(host, Signal::SIGSTOP);
            }
        }
    }
}

fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

#[async_trait]
impl PodDriver for LocalPod {
    fn name(&self) -> &str {
        &self.name
    }

    fn accelerator(&self) -> &str {
        &self.accelerator
    }

    fn hosts(&self) -> u32 {
        self.hosts
    }

    async fn status(&self) -> anyhow::Result<PodStatus> {
        self.apply_controls();
        let preempted = self.lock().preempted;
        Ok(PodStatus {
            state: if preempted { "PREEMPTED" } else { "READY" }.into(),
            health: "HEALTHY".into(),
        })
    }

    async fn preflight(&self) -> Preflight {
        let mut failures = Vec::new();
        if self.lock().preempted {
            failures.push(PreflightFailure {
                host: None,
                check: "tpu_state".into(),
                message: "the pod is PREEMPTED".into(),
            });
        }
        for host in 0..self.hosts {
            let probe = self.host_dir(host).join("tmp/.podq-preflight");
            if let Err(e) = std::fs::write(&probe, b"ok").and_then(|_| std::fs::remove_file(&probe))
            {
                failures.push(PreflightFailure {
                    host: Some(host),
                    check: "disk_writable".into(),
                    message: format!("cannot write to the host's disk: {e}"),
                });
            }
        }
        Preflight {
            passed: failures.is_empty(),
            at: Some(chrono::Utc::now()),
            failures,
        }
    }

    fn config_dir(&self, host: u32) -> PathBuf {
        self.host_dir(host).join("podq/configs")
    }

    async fn stage_file(
        &self,
        host: u32,
        file_name: &str,
        contents: &[u8],
    ) -> anyhow::Result<String> {
        let dir = self.config_dir(host);
        tokio::fs::create_dir_all(&dir).await?;
        let path = dir.join(file_name);
        let partial = dir.join(format!(".{file_name}.partial"));
        tokio::fs::write(&partial, contents).await?;
        tokio::fs::rename(&partial, &path).await?;
        Ok(sha256_hex(&tokio::fs::read(&path).await?))
    }

    async fn clean_hosts(&self) -> anyhow::Result<Vec<String>> {
        let mut cleaned = Vec::new();
        for host in 0..self.hosts {
            if let Some(pgid) = self.host_pgid(host) {
                let group = Pid::from_raw(pgid);
                if killpg(group, None).is_ok() {
                    let _ = killpg(group, Signal::SIGCONT);
                    let _ = killpg(group, Signal::SIGKILL);
                    cleaned.push(format!(
                        "host {host}: killed leftover trainer process group {pgid}"
                    ));
                }
                let _ = std::fs::remove_file(self.host_dir(host).join(PGID_FILE));
            }
            let lock = self.host_dir(host).join(LOCK_FILE);
            if lock.exists() {
                std::fs::remove_file(&lock)
                    .with_context(|| format!("cannot remove {}", lock.display()))?;
                cleaned.push(format!("host {host}: removed stale {LOCK_FILE}"));
            }
        }
        Ok(cleaned)
    }

    async fn coordinator_address(&self) -> anyhow::Result<String> {
        let probe = std::net::TcpListener::bind("127.0.0.1:0")?;
        Ok(probe.local_addr()?.to_string())
    }

    async fn spawn(&self, launch: &HostLaunch) -> anyhow::Result<Child> {
        let dir = self.host_dir(launch.host);
        let fail = {
            let mut state = self.lock();
            // Every host of this launch fails; the flag clears once the last host started.
            let fail = state.fail_next_launch;
            if fail && launch.host + 1 == self.hosts {
                state.fail_next_launch = false;
            }
            fail
        };
        let command = if fail {
            "echo 'simulated launch failure: the TPU runtime did not start' >&2; exit 1".to_owned()
        } else {
            launch.command.clone()
        };
        let mut cmd = Command::new("sh");
        cmd.arg("-c")
            .arg(&command)
            .current_dir(&dir)
            .envs(&launch.env)
            .env("PODQ_SIM_LOCKFILE", dir.join(LOCK_FILE))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0);
        let child = cmd
            .spawn()
            .with_context(|| format!("cannot start the trainer on host {}", launch.host))?;
        if let Some(pid) = child.id() {
            std::fs::write(dir.join(PGID_FILE), pid.to_string())?;
        }
        Ok(child)
    }

    async fn recover(&self, progress: &(dyn Fn(String) + Send + Sync)) -> anyhow::Result<()> {
        progress(format!(
            "waiting for the simulated node to come back READY ({}s)",
            self.recovery_delay.as_secs_f64()
        ));
        tokio::time::sleep(self.recovery_delay).await;
        self.lock().preempted = false;
        Ok(())
    }
}
