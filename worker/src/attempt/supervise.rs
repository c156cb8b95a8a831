//! The trainers of one attempt, one per host, each owned by that host's agent: watched
//! on their own, stopped together.

use std::time::Duration;

use tokio::sync::mpsc;

use super::lines::{self, Routes};
use super::log_tail::LogTail;
use crate::agent::hub::{AgentHub, HostEnded};
use crate::agent::wire::StopCommand;
use crate::pod::{AgentStart, PodDriver, StopSignal};

use super::exits::{HostExit, StopReport};

/// The hosts of one attempt, each one's trainer owned by the `podq agent` on that host.
pub struct Hosts {
    /// The lease the trainers run under (their `PODQ_LEASE_ID`).
    lease: String,
    exits: Vec<Option<HostExit>>,
    exit_rx: mpsc::UnboundedReceiver<HostEnded>,
    hub: AgentHub,
    /// Passes the agents' lines on (`lines::read`).
    reader: Option<tokio::task::JoinHandle<()>>,
    pub log: LogTail,
}

impl Hosts {
    /// Starts the lease's agent on every host. Host 0's report lines go by `routes`; every
    /// line goes to the log tail.
    pub async fn launch(
        driver: &dyn PodDriver,
        hub: &AgentHub,
        start: &AgentStart,
        routes: Routes,
    ) -> anyhow::Result<Hosts> {
        let hosts = Hosts::attach(
            hub,
            &start.lease,
            &start.secret,
            start.launches.len() as u32,
            routes,
        );
        if let Err(e) = driver.start_agents(start).await {
            hub.finish(&start.lease);
            return Err(e);
        }
        Ok(hosts)
    }

    /// Supervises agents that are already running (after a worker restart): they push
    /// their whole log again, from the start.
    pub fn attach(hub: &AgentHub, lease: &str, secret: &str, hosts: u32, routes: Routes) -> Hosts {
        let streams = hub.register(lease, secret, hosts);
        let log = LogTail::default();
        let reader = tokio::spawn(lines::read(streams.lines, log.clone(), routes));
        Hosts {
            lease: lease.to_owned(),
            exits: vec![None; hosts as usize],
            exit_rx: streams.exits,
            hub: hub.clone(),
            reader: Some(reader),
            log,
        }
    }

    /// The next host to end; `None` once every host has ended.
    pub async fn next_exit(&mut self) -> Option<HostExit> {
        if self.exits.iter().all(Option::is_some) {
            return None;
        }
        let ended = self.exit_rx.recv().await?;
        let exit = HostExit {
            host: ended.host,
            code: ended.exit.code,
            signal: ended.exit.signal,
            vanished: ended.exit.vanished,
        };
        if let Some(slot) = self.exits.get_mut(exit.host as usize) {
            *slot = Some(exit);
        }
        Some(exit)
    }

    /// Hosts whose trainer runs on and whose agent has not called for `silence`.
    pub fn silent(&self, silence: Duration) -> Vec<u32> {
        self.hub.silent(&self.lease, silence)
    }

    /// For each host whose trainer has not ended, how long since any of its agents called.
    pub fn quiet(&self) -> Vec<(u32, Duration)> {
        self.hub.quiet(&self.lease)
    }

    /// Starts a new agent on `host` for a silent one. The agent adopts the running trainer
    /// (or reports its exit) and starts nothing: a second agent of a lease finds the first
    /// one's lock, and an agent that finds the lease's trainer never starts another.
    pub async fn restart_agent(
        &self,
        driver: &dyn PodDriver,
        start: &AgentStart,
        host: u32,
    ) -> anyhow::Result<()> {
        self.hub.agent_restarted(&self.lease, host);
        let only = AgentStart {
            launches: start
                .launches
                .iter()
                .filter(|l| l.host == host)
                .cloned()
                .collect(),
            ..start.clone()
        };
        driver.start_agents(&only).await
    }

    /// Whether any host's agent has called the worker for this attempt.
    pub fn any_contacted(&self) -> bool {
        self.hub.contacted(&self.lease).into_iter().any(|c| c)
    }

    pub fn alive(&self) -> Vec<bool> {
        self.exits.iter().map(Option::is_none).collect()
    }

    /// Each host's end so far.
    pub fn exits(&self) -> Vec<Option<HostExit>> {
        self.exits.clone()
    }

    pub fn exit_codes(&self) -> Vec<Option<i32>> {
        self.exits.iter().map(|e| e.and_then(|e| e.code)).collect()
    }

    fn running(&self) -> Vec<u32> {
        (0..self.exits.len() as u32)
            .filter(|h| self.exits[*h as usize].is_none())
            .collect()
    }

    async fn wait_all(&mut self, within: Duration) {
        let deadline = tokio::time::Instant::now() + within;
        while self.exits.iter().any(Option::is_none) {
            match tokio::time::timeout_at(deadline, self.next_exit()).await {
                Ok(Some(_)) => {}
                Ok(None) | Err(_) => break,
            }
        }
    }

    /// SIGTERM to every host still running (JAX's preemption notice) through its agent,
    /// then SIGKILL to what is left after `grace`. A host whose agent does not answer
    /// either (it went down with its VM, or died) gets the driver's last-resort kill.
    /// With `pod_gone` the hosts went down with the pod: nothing is waited for.
    pub async fn stop(
        &mut self,
        driver: &dyn PodDriver,
        grace: Duration,
        pod_gone: bool,
    ) -> StopReport {
        let mut report = StopReport::default();
        if !pod_gone {
            self.hub.command(&self.lease, StopCommand::Term);
            self.wait_all(grace).await;
        }
        let left = self.running();
        if left.is_empty() {
            self.hub.finish(&self.lease);
            return report;
        }
        report.killed = left.clone();
        self.hub.command(&self.lease, StopCommand::Kill);
        if !pod_gone {
            // An agent pushes every few hundred milliseconds.
            self.wait_all(AGENT_ANSWER).await;
        }
        let silent = self.running();
        if !silent.is_empty() {
            driver
                .signal_hosts(&self.lease, &silent, StopSignal::Kill)
                .await;
            if !pod_gone {
                self.wait_all(AGENT_ANSWER).await;
            }
            // Neither its agent nor the driver's kill answered: the host itself is gone
            // (restarted or down), which is how a reboot looks when another host's crash,
            // caused by it, was seen first.
            for host in self.running() {
                tracing::warn!(lease = %self.lease, host, "no agent answered; the host counts as gone");
                self.exits[host as usize] = Some(HostExit {
                    host,
                    code: None,
                    signal: None,
                    vanished: true,
                });
            }
        }
        self.hub.finish(&self.lease);
        report
    }

    /// Waits until every line the agents delivered has been passed on: a host's exit
    /// arrives after its last lines, but they go through the reader task. Call after
    /// `stop`, which ends the stream.
    pub async fn drain_lines(&mut self) {
        if let Some(reader) = self.reader.take() {
            if tokio::time::timeout(AGENT_ANSWER, reader).await.is_err() {
                tracing::warn!(lease = %self.lease, "the agents' lines were not all passed on");
            }
        }
    }

    /// Leaves the trainers running (the worker is going away and will reattach).
    pub fn detach(&self) {
        tracing::info!(lease = %self.lease, "leaving the trainers to their agents");
    }
}

/// How long agents get to act on a command and say so.
const AGENT_ANSWER: Duration = Duration::from_secs(5);
