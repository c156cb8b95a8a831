//! Follows a running attempt until it must stop: waits for what comes next (the worker or
//! the server ending it, a host's exit, host 0's progress, the status poll), hands each fact
//! to the watch, and keeps what else the attempt needs of it: the heartbeat's step and live
//! hosts, the phase clock, new agents where one went silent. The decisions are the watch's.

use std::time::Instant;

use podq_api::{LeaseId, TrainerPhases};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::lines::Progress;
use super::outcome::Stop;
use super::supervise::Hosts;
use super::watch::{Agents, Fact, Limits, Watch};
use super::{Context, Shared};
use crate::phases::PhaseClock;
use crate::pod::AgentStart;
use crate::report::Report;

/// The instant a fact is seen, on the runtime's clock.
fn now() -> Instant {
    tokio::time::Instant::now().into_std()
}

/// A running attempt, as its loop follows it.
pub(super) struct Follow {
    lease_id: LeaseId,
    watch: Watch,
    phases: PhaseClock,
    progress: mpsc::UnboundedReceiver<Progress>,
    /// To the reporter: checkpoint hints and phase totals (metric values go there from the
    /// line reader).
    reports: mpsc::UnboundedSender<Report>,
}

/// What the loop saw of the attempt, once the hosts stopped.
pub(super) struct Seen {
    /// The highest step the trainer reported.
    pub end_step: Option<i64>,
    pub phases: TrainerPhases,
}

impl Follow {
    pub fn new(
        ctx: &Context<'_>,
        lease_id: LeaseId,
        reattached: bool,
        resume_step: Option<i64>,
        progress: mpsc::UnboundedReceiver<Progress>,
        reports: mpsc::UnboundedSender<Report>,
    ) -> Follow {
        let settings = ctx.settings;
        let limits = Limits {
            hang_timeout: settings.hang_timeout,
            maintenance_lead: settings.maintenance_lead,
            maintenance_timeout: settings.maintenance_timeout,
        };
        Follow {
            lease_id,
            watch: Watch::new(limits, reattached, resume_step, now()),
            phases: PhaseClock::default(),
            progress,
            reports,
        }
    }

    /// Runs until the watch says stop, and why.
    pub async fn until_stop(
        &mut self,
        ctx: &Context<'_>,
        hosts: &mut Hosts,
        start: Option<&AgentStart>,
        shared: &Shared,
        cancel: &CancellationToken,
        lease_lost: &CancellationToken,
    ) -> Stop {
        let mut poll = tokio::time::interval(ctx.settings.status_poll);
        loop {
            let fact = tokio::select! {
                _ = ctx.shutdown.cancelled() => Fact::Shutdown,
                _ = lease_lost.cancelled() => Fact::LeaseLost,
                _ = cancel.cancelled() => match shared.stop_order() {
                    Some(why) => Fact::StopOrdered(why),
                    None => Fact::Cancelled,
                },
                exit = hosts.next_exit() => {
                    let alive = hosts.alive();
                    shared.set_hosts_alive(alive.clone());
                    Fact::Exit { exit, alive }
                }
                Some(progress) = self.progress.recv() => self.progress(progress),
                _ = poll.tick() => {
                    let (seen, silent) = poll_facts(ctx, hosts).await;
                    if let Some(stop) = self.watch.observe(seen, now()) {
                        return stop;
                    }
                    if !silent.is_empty() {
                        tend_silent_agents(ctx, self.lease_id, hosts, start, &silent).await;
                        self.watch.observe(Fact::SilentAgentsTended, now());
                    }
                    continue;
                }
            };
            let stop = self.watch.observe(fact, now());
            // The heartbeat reports the last step.
            shared.set_step(self.watch.last_step());
            if let Some(stop) = stop {
                return stop;
            }
        }
    }

    /// The stop was decided at `at`: what starts after it is the stopping's time.
    pub fn stopped(&mut self, at: tokio::time::Instant) {
        self.phases.stopped(at);
    }

    /// Once the hosts stopped: takes in the progress lines printed before (they still
    /// count), and lets go of the reporter.
    pub fn after_stop(mut self) -> Seen {
        while let Ok(progress) = self.progress.try_recv() {
            match progress {
                Progress::Step(step) => self.watch.step_after_stop(step),
                // Timed when they arrived: the final save's end, a save on the shutdown
                // notice (which the clock leaves to the stopping).
                Progress::Phase {
                    phase,
                    edge,
                    received,
                } => {
                    self.phases.note(phase, edge, received);
                }
                Progress::Compiled(seconds) => {
                    self.phases.compiled(seconds);
                }
                Progress::Checkpoint => {}
            }
        }
        Seen {
            end_step: self.watch.last_step(),
            phases: self.phases.totals(),
        }
    }

    /// The fact a progress line is, after passing on what the reporter takes of it.
    fn progress(&mut self, progress: Progress) -> Fact {
        match progress {
            Progress::Step(step) => Fact::Step(step),
            Progress::Checkpoint => {
                let _ = self.reports.send(Report::CheckpointHint);
                Fact::Checkpoint
            }
            Progress::Phase {
                phase,
                edge,
                received,
            } => {
                if self.phases.note(phase, edge, received) {
                    let _ = self.reports.send(Report::Phases(self.phases.totals()));
                }
                Fact::Phase
            }
            Progress::Compiled(seconds) => {
                if self.phases.compiled(seconds) {
                    let _ = self.reports.send(Report::Phases(self.phases.totals()));
                }
                Fact::Phase
            }
        }
    }
}

/// A status poll: the pod's state, then the agents' calls; and the hosts whose agent went
/// silent.
async fn poll_facts(ctx: &Context<'_>, hosts: &Hosts) -> (Fact, Vec<u32>) {
    let pod = match ctx.driver.status().await {
        Ok(status) => Some(status),
        Err(e) => {
            tracing::warn!(error = %format!("{e:#}"), "cannot read the pod's state");
            None
        }
    };
    let silent = hosts.silent(ctx.settings.agent_silence);
    let agents = Agents {
        contacted: hosts.any_contacted(),
        quiet: hosts.quiet(),
        silent: !silent.is_empty(),
    };
    let utc = chrono::Utc::now();
    (Fact::Poll { pod, utc, agents }, silent)
}

/// Starts a new agent on each host whose agent went silent while its trainer runs (the OOM
/// killer, a crash); the trainer itself is left alone. A host that cannot be reached is
/// tried again at the next poll.
async fn tend_silent_agents(
    ctx: &Context<'_>,
    lease_id: LeaseId,
    hosts: &Hosts,
    start: Option<&AgentStart>,
    silent: &[u32],
) {
    let Some(start) = start else {
        tracing::warn!(lease = %lease_id, ?silent, "agents are silent, and this attempt's start was not kept: cannot start new ones");
        return;
    };
    for &host in silent {
        let why = format!(
            "host {host}'s agent has not called for {}s",
            ctx.settings.agent_silence.as_secs()
        );
        match hosts.restart_agent(ctx.driver, start, host).await {
            Ok(()) => {
                tracing::warn!(lease = %lease_id, host, "{why}: started a new one");
                let _ = ctx
                    .client
                    .event(
                        lease_id,
                        podq_api::WorkerEventKind::AgentRestarted,
                        format!("{why}; started a new agent, which adopts the running trainer"),
                    )
                    .await;
            }
            Err(e) => {
                tracing::warn!(lease = %lease_id, host, error = %format!("{e:#}"), "{why}; cannot start a new one yet")
            }
        }
    }
}
