//! The `local` driver: a simulated pod of N hosts, each a directory of its own (separate
//! filesystems, as on the real pod) whose trainer runs as a local process group.
//!
//! Its failures are driven from outside by dropping a file into `<root>/control/`:
//! - `preempt`: the pod goes `PREEMPTED`; every host process is killed at once;
//! - `kill-host-N`: host N's process group gets SIGKILL;
//! - `hang-host-N`: host N's process group gets SIGSTOP (alive, making no progress);
//! - `fail-next-launch`: the next launch's trainer exits 1 at once on every host;
//! - `fail-preflight`: every preflight fails, as a TPU that will not initialise does (kept
//!   while the file is there);
//! - `hang-preflight`: every preflight waits while the file is there, as a setup stuck on a
//!   host does: the pod is READY and its worker never asks for work.
//!
//! Each host's trainer is owned by a `podq agent` process started for the lease, as on
//! the real pod; a preemption kills the agents too.
//!
//! The driver consumes each file when it acts on it.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Mutex;
use std::time::Duration;

use anyhow::{bail, Context};
use async_trait::async_trait;
use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;
use podq_api::{Preflight, PreflightFailure};
use sha2::{Digest, Sha256};
use tokio::process::Command;

use super::{AgentStart, PodDriver, PodStatus, StopSignal};

pub struct LocalPod {
    name: String,
    accelerator: String,
    hosts: u32,
    root: PathBuf,
    recovery_delay: Duration,
    state: Mutex<LocalState>,
    /// The `podq` binary whose `agent` runs on the hosts.
    agent_program: PathBuf,
}

#[derive(Default)]
struct LocalState {
    preempted: bool,
    fail_next_launch: bool,
}

/// The file that tags a host's trainer process group, so a later attempt can find and stop
/// a leftover one without matching processes by name.
const PGID_FILE: &str = "tmp/podq-trainer.pgid";
/// The host's agent's pid: a simulated preemption takes the agent down with its host.
const AGENT_PID_FILE: &str = "tmp/podq-agent.pid";
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
            agent_program: std::env::current_exe()
                .context("cannot find this program's path for the hosts' agents")?,
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

    /// Kills the host's agent, as a VM going down would.
    fn kill_agent(&self, host: u32) -> bool {
        let path = self.host_dir(host).join(AGENT_PID_FILE);
        let killed = std::fs::read_to_string(&path)
            .ok()
            .and_then(|t| t.trim().parse::<i32>().ok())
            // The pid may have been reused since that agent ended: only an agent is hit.
            .filter(|pid| {
                std::fs::read(format!("/proc/{pid}/cmdline"))
                    .is_ok_and(|cmdline| cmdline.split(|b| *b == 0).any(|arg| arg == b"agent"))
            })
            .is_some_and(|pid| nix::sys::signal::kill(Pid::from_raw(pid), Signal::SIGKILL).is_ok());
        let _ = std::fs::remove_file(path);
        killed
    }

    /// Writes the config into one host's config dir and answers the sha256 of what the
    /// host then holds.
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

    /// Every host's agent and trainer killed at once: the slice is being deleted.
    pub fn power_off(&self) {
        for host in 0..self.hosts {
            self.kill_agent(host);
            self.signal_host(host, Signal::SIGKILL);
        }
    }

    /// Acts on the control files present now.
    fn apply_controls(&self) {
        if self.take_control("preempt") {
            tracing::warn!(pod = %self.name, "simulated preemption: every host goes down");
            self.lock().preempted = true;
            for host in 0..self.hosts {
                self.kill_agent(host);
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

/// Writes a file only its owner can read.
fn write_private(path: &Path, text: &str) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)?;
    file.write_all(text.as_bytes())
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
            maintenance: None,
            ..Default::default()
        })
    }

    async fn preflight(&self) -> Preflight {
        while self.control_dir().join("hang-preflight").exists() {
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        let mut failures = Vec::new();
        if self.lock().preempted {
            failures.push(PreflightFailure {
                host: None,
                check: "tpu_state".into(),
                message: "the pod is PREEMPTED".into(),
            });
        }
        if self.control_dir().join("fail-preflight").exists() {
            failures.push(PreflightFailure {
                host: Some(0),
                check: "tpu_init".into(),
                message: "TPU initialisation failed: the libtpu lock is held by another \
                          process (simulated)"
                    .into(),
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

    async fn clean_hosts(&self) -> anyhow::Result<Vec<String>> {
        let mut cleaned = Vec::new();
        for host in 0..self.hosts {
            if self.kill_agent(host) {
                cleaned.push(format!("host {host}: killed a leftover agent"));
            }
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

    async fn start_agents(&self, start: &AgentStart) -> anyhow::Result<()> {
        let config = &start.config;
        for host in 0..self.hosts {
            let sha = self
                .stage_file(host, &config.file_name, &config.contents)
                .await
                .with_context(|| format!("cannot stage the config on host {host}"))?;
            if sha != config.sha256 {
                bail!(
                    "config staged on host {host} has sha256 {sha}, expected {}: hosts would train different configs",
                    config.sha256
                );
            }
        }
        let fail = std::mem::take(&mut self.lock().fail_next_launch);
        for launch in &start.launches {
            let dir = self.host_dir(launch.host);
            let command = if fail {
                "echo 'simulated launch failure: the TPU runtime did not start' >&2; exit 1"
                    .to_owned()
            } else {
                launch.command.clone()
            };
            let secret_file = dir.join(format!("tmp/podq-agent-{}.secret", start.lease));
            write_private(&secret_file, &start.secret)?;
            let agent_log =
                std::fs::File::create(dir.join(format!("tmp/podq-agent-{}.log", start.lease)))?;
            let mut cmd = Command::new(&self.agent_program);
            cmd.arg("agent")
                .arg("--worker-url")
                .arg(&start.worker_url)
                .arg("--lease")
                .arg(&start.lease)
                .arg("--host")
                .arg(launch.host.to_string())
                .arg("--dir")
                .arg(dir.join("podq-agent"))
                .arg("--secret-file")
                .arg(&secret_file)
                .arg("--pgid-file")
                .arg(dir.join(PGID_FILE))
                .arg("--pid-file")
                .arg(dir.join(AGENT_PID_FILE))
                .arg("--poll-ms")
                .arg("100")
                .arg("--command")
                .arg(&command)
                .current_dir(&dir)
                .envs(&launch.env)
                .env("PODQ_SIM_LOCKFILE", dir.join(LOCK_FILE))
                .stdin(Stdio::null())
                .stdout(agent_log.try_clone()?)
                .stderr(agent_log)
                // Its own group: nothing sent to the worker's group reaches it, as on a
                // real host. tokio reaps it when it ends.
                .process_group(0)
                .kill_on_drop(false);
            cmd.spawn().with_context(|| {
                format!(
                    "cannot start the agent ({}) on host {}",
                    self.agent_program.display(),
                    launch.host
                )
            })?;
        }
        Ok(())
    }

    async fn signal_hosts(&self, _lease: &str, hosts: &[u32], signal: StopSignal) -> bool {
        let signal = match signal {
            StopSignal::Term => Signal::SIGTERM,
            StopSignal::Kill => Signal::SIGKILL,
        };
        for host in hosts {
            self.signal_host(*host, Signal::SIGCONT);
            self.signal_host(*host, signal);
        }
        true
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
