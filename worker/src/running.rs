//! The attempt this worker is running, written down on the worker's disk so that a
//! restarted worker (a crash, an upgrade, `systemctl restart`) reattaches to the agents
//! still running on the hosts instead of launching the job again.

use std::net::SocketAddr;
use std::path::PathBuf;

use podq_api::Lease;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Saved {
    pub lease: Lease,
    /// The lease's secret, which the agents present.
    pub secret: String,
    pub hosts: u32,
    /// The step the attempt was launched to resume from (for the silent-restart check).
    pub resume_step: Option<i64>,
    /// What the agents were started with, to start a new one where one goes silent
    /// (absent in files written before podq kept it). Holds the lease's secret: the file is
    /// written 0600.
    #[serde(default)]
    pub start: Option<crate::pod::AgentStart>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
struct OnDisk {
    /// Where the agents were told to reach the worker: a restarted worker listens there
    /// again.
    agent_listen: SocketAddr,
    attempt: Option<Saved>,
}

/// `<state dir>/<pod>.running.json`.
pub struct RunningAttempt {
    path: PathBuf,
    agent_listen: std::sync::Mutex<Option<SocketAddr>>,
}

impl RunningAttempt {
    pub fn new(state_dir: &std::path::Path, pod: &str) -> anyhow::Result<RunningAttempt> {
        std::fs::create_dir_all(state_dir).map_err(|e| {
            anyhow::anyhow!("cannot create the state dir {}: {e}", state_dir.display())
        })?;
        Ok(RunningAttempt {
            path: state_dir.join(format!("{pod}.running.json")),
            agent_listen: std::sync::Mutex::new(None),
        })
    }

    fn read(&self) -> Option<OnDisk> {
        let text = std::fs::read_to_string(&self.path).ok()?;
        match serde_json::from_str(&text) {
            Ok(on_disk) => Some(on_disk),
            Err(e) => {
                tracing::error!(path = %self.path.display(), error = %e, "unreadable running-attempt file; ignoring it");
                None
            }
        }
    }

    /// The agent address of the last run, if any.
    pub fn last_agent_listen(&self) -> Option<SocketAddr> {
        self.read().map(|d| d.agent_listen)
    }

    /// The attempt a previous run of this worker left running.
    pub fn load(&self) -> Option<Saved> {
        self.read()?.attempt
    }

    /// Records where the agents reach this worker.
    pub fn set_agent_listen(&self, listen: SocketAddr) {
        *self.agent_listen.lock().unwrap_or_else(|e| e.into_inner()) = Some(listen);
        let attempt = self.load();
        self.write(attempt);
    }

    pub fn save(&self, attempt: &Saved) {
        self.write(Some(attempt.clone()));
    }

    pub fn clear(&self) {
        self.write(None);
    }

    fn write(&self, attempt: Option<Saved>) {
        let Some(agent_listen) = *self.agent_listen.lock().unwrap_or_else(|e| e.into_inner())
        else {
            return;
        };
        let on_disk = OnDisk {
            agent_listen,
            attempt,
        };
        let tmp = self.path.with_extension("partial");
        let written = serde_json::to_vec_pretty(&on_disk)
            .map_err(std::io::Error::other)
            .and_then(|bytes| write_private(&tmp, &bytes))
            .and_then(|_| std::fs::rename(&tmp, &self.path));
        if let Err(e) = written {
            tracing::error!(path = %self.path.display(), error = %e, "cannot write the running-attempt file: a restart would not reattach");
        }
    }
}

/// Writes `bytes` to a new file only its owner can read: it holds the lease's secret.
fn write_private(path: &std::path::Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let _ = std::fs::remove_file(path);
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)?;
    file.write_all(bytes)?;
    file.sync_all()
}
