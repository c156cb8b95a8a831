//! The trainer processes of one attempt: one per host, each in its own process group,
//! watched on their own, stopped together.

use std::collections::VecDeque;
use std::process::ExitStatus;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;
use tokio::io::{AsyncBufReadExt, AsyncRead, BufReader};
use tokio::sync::mpsc;

use crate::events::{parse_line, TrainerEvent};
use crate::pod::{HostLaunch, PodDriver, StopSignal};

/// How a host's process ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HostExit {
    pub host: u32,
    pub code: Option<i32>,
    pub signal: Option<i32>,
}

impl HostExit {
    fn from_status(host: u32, status: ExitStatus) -> HostExit {
        use std::os::unix::process::ExitStatusExt;
        HostExit {
            host,
            code: status.code(),
            signal: status.signal(),
        }
    }

    pub fn success(&self) -> bool {
        self.code == Some(0)
    }

    pub fn describe(&self) -> String {
        match (self.code, self.signal) {
            (Some(code), _) => format!("host {} exited with code {code}", self.host),
            (None, Some(signal)) => {
                let name = Signal::try_from(signal)
                    .map_or_else(|_| signal.to_string(), |s| s.as_str().to_owned());
                format!("host {} was killed by {name}", self.host)
            }
            _ => format!("host {} ended", self.host),
        }
    }
}

/// The last lines the hosts printed, for the attempt's log tail.
#[derive(Clone, Default)]
pub struct LogTail {
    lines: Arc<Mutex<VecDeque<String>>>,
}

const LOG_TAIL_LINES: usize = 200;

impl LogTail {
    fn push(&self, line: String) {
        let mut lines = self.lines.lock().unwrap_or_else(|e| e.into_inner());
        if lines.len() == LOG_TAIL_LINES {
            lines.pop_front();
        }
        lines.push_back(line);
    }

    pub fn text(&self) -> String {
        let lines = self.lines.lock().unwrap_or_else(|e| e.into_inner());
        lines
            .iter()
            .map(String::as_str)
            .collect::<Vec<_>>()
            .join("\n")
    }
}

/// The running hosts of one attempt.
pub struct Hosts {
    /// The lease the trainers run under (their `PODQ_LEASE_ID`): remote stops find them by it.
    lease: String,
    /// Host index of each launch.
    indexes: Vec<u32>,
    pgids: Vec<Option<i32>>,
    exits: Vec<Option<HostExit>>,
    exit_rx: mpsc::UnboundedReceiver<HostExit>,
    pub log: LogTail,
}

impl Hosts {
    /// Starts every host. Host 0's report lines go to `events`; every line goes to the log
    /// tail. If a host cannot be started, the ones already started are stopped.
    pub async fn launch(
        driver: &dyn PodDriver,
        launches: &[HostLaunch],
        events: mpsc::UnboundedSender<TrainerEvent>,
        grace: Duration,
    ) -> anyhow::Result<Hosts> {
        let (exit_tx, exit_rx) = mpsc::unbounded_channel();
        let mut hosts = Hosts {
            lease: launches
                .first()
                .and_then(|l| l.env.get("PODQ_LEASE_ID").cloned())
                .unwrap_or_default(),
            indexes: launches.iter().map(|l| l.host).collect(),
            pgids: Vec::new(),
            exits: vec![None; launches.len()],
            exit_rx,
            log: LogTail::default(),
        };
        for launch in launches {
            let mut child = match driver.spawn(launch).await {
                Ok(child) => child,
                Err(e) => {
                    hosts.stop(driver, grace).await;
                    return Err(e);
                }
            };
            hosts.pgids.push(child.id().map(|pid| pid as i32));
            let host = launch.host;
            if let Some(stdout) = child.stdout.take() {
                let events = (host == 0).then(|| events.clone());
                tokio::spawn(read_lines(stdout, host, hosts.log.clone(), events));
            }
            if let Some(stderr) = child.stderr.take() {
                tokio::spawn(read_lines(stderr, host, hosts.log.clone(), None));
            }
            let exit_tx = exit_tx.clone();
            tokio::spawn(async move {
                let exit = match child.wait().await {
                    Ok(status) => HostExit::from_status(host, status),
                    Err(_) => HostExit {
                        host,
                        code: None,
                        signal: None,
                    },
                };
                let _ = exit_tx.send(exit);
            });
        }
        Ok(hosts)
    }

    /// The next host to end; `None` once every host has ended.
    pub async fn next_exit(&mut self) -> Option<HostExit> {
        if self.exits.iter().all(Option::is_some) {
            return None;
        }
        let exit = self.exit_rx.recv().await?;
        if let Some(slot) = self.exits.get_mut(exit.host as usize) {
            *slot = Some(exit);
        }
        Some(exit)
    }

    pub fn alive(&self) -> Vec<bool> {
        self.exits.iter().map(Option::is_none).collect()
    }

    pub fn exit_codes(&self) -> Vec<Option<i32>> {
        self.exits.iter().map(|e| e.and_then(|e| e.code)).collect()
    }

    /// SIGTERM to every host still running (JAX's preemption notice), then SIGKILL to what
    /// is left after `grace`. Every process group is killed at the end, so no child of a
    /// trainer survives its host's main process. A driver whose local children are only
    /// clients of remote trainers (`PodDriver::signal_hosts`) gets both signals delivered on
    /// the hosts themselves, to every host of the attempt (a client that already ended may
    /// have left its trainer running).
    pub async fn stop(&mut self, driver: &dyn PodDriver, grace: Duration) {
        let remote = driver
            .signal_hosts(&self.lease, &self.indexes, StopSignal::Term)
            .await;
        if !remote {
            self.signal_running(Signal::SIGTERM);
            // A hung (stopped) process only sees SIGTERM once continued.
            self.signal_running(Signal::SIGCONT);
        }
        let deadline = tokio::time::Instant::now() + grace;
        while self.exits.iter().any(Option::is_none) {
            match tokio::time::timeout_at(deadline, self.next_exit()).await {
                Ok(Some(_)) => {}
                Ok(None) | Err(_) => break,
            }
        }
        if remote {
            driver
                .signal_hosts(&self.lease, &self.indexes, StopSignal::Kill)
                .await;
        }
        for pgid in self.pgids.iter().flatten() {
            let _ = killpg(Pid::from_raw(*pgid), Signal::SIGKILL);
        }
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        while self.exits.iter().any(Option::is_none) {
            match tokio::time::timeout_at(deadline, self.next_exit()).await {
                Ok(Some(_)) => {}
                Ok(None) | Err(_) => break,
            }
        }
    }

    fn signal_running(&self, signal: Signal) {
        for (pgid, exit) in self.pgids.iter().zip(&self.exits) {
            if let (Some(pgid), None) = (pgid, exit) {
                let _ = killpg(Pid::from_raw(*pgid), signal);
            }
        }
    }
}

async fn read_lines(
    stream: impl AsyncRead + Unpin,
    host: u32,
    log: LogTail,
    events: Option<mpsc::UnboundedSender<TrainerEvent>>,
) {
    let mut lines = BufReader::new(stream).lines();
    while let Ok(Some(line)) = lines.next_line().await {
        if let Some(events) = &events {
            match parse_line(&line) {
                Some(Ok(event)) => {
                    let _ = events.send(event);
                    continue;
                }
                Some(Err(problem)) => tracing::warn!(host, "{problem}"),
                None => {}
            }
        }
        log.push(format!("[host {host}] {line}"));
    }
}
