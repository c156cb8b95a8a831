//! One attempt of one job on the pod: verify where to resume, stage the config on every host,
//! clean the hosts, launch, supervise, stop, classify, finish.

mod heartbeat;
mod launch;
mod lines;
pub mod log_tail;
pub mod outcome;
pub mod supervise;
pub mod watch;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use podq_api::{FinishRequest, Lease};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::agent::hub::AgentHub;
use crate::agent::new_secret;
use crate::checkpoints::CheckpointStore;
use crate::client::ServerClient;
use crate::phases::PhaseClock;
use crate::pod::{AgentStart, PodDriver};
use crate::report::{self, Report, ReporterSettings};
use crate::running::RunningAttempt;
use lines::{Progress, Routes};
use outcome::{Observed, Stop};
use supervise::Hosts;
use watch::{Agents, Fact, Limits, Watch};

#[derive(Debug, Clone)]
pub struct AttemptSettings {
    /// The trainer command, with `{config_dir}`, `{experiment}`, `{checkpoint_dir}`,
    /// `{resume_from}` (`null` when none), `{host_index}` and `{host_count}` filled in.
    pub trainer_command: String,
    /// Extra environment for every host's trainer.
    pub trainer_env: BTreeMap<String, String>,
    pub stop_grace: Duration,
    pub status_poll: Duration,
    /// No step progress for this long while running: the attempt is hung.
    pub hang_timeout: Duration,
    pub metrics_flush: Duration,
    pub metrics_max_points: usize,
    pub checkpoint_scan: Duration,
    /// On shutdown, leave the trainers to their agents (a restarted worker reattaches)
    /// instead of stopping them.
    pub detach_on_shutdown: bool,
    /// An agent that has not called for this long, while its trainer runs, is replaced.
    pub agent_silence: Duration,
    /// A run is stopped (SIGTERM, the full grace, uncharged) this long before a maintenance
    /// window the pod announced opens.
    pub maintenance_lead: Duration,
    /// A maintenance event under way for longer than this ends the attempt as preempted.
    pub maintenance_timeout: Duration,
}

/// What every attempt of this worker shares.
pub struct Context<'a> {
    pub client: &'a ServerClient,
    pub driver: &'a dyn PodDriver,
    pub hub: &'a AgentHub,
    pub settings: &'a AttemptSettings,
    pub shutdown: &'a CancellationToken,
    /// Where the running attempt is written down, so a restarted worker finds it.
    pub running: &'a RunningAttempt,
}

/// Live facts of the attempt shared with its heartbeat task.
#[derive(Default)]
struct Shared {
    running: AtomicBool,
    step: AtomicI64,
    has_step: AtomicBool,
    hosts_alive: Mutex<Vec<bool>>,
    /// Wakes the heartbeat at once when the attempt starts running.
    phase_changed: tokio::sync::Notify,
}

/// How long a host shutting down may take before its node says why: Compute Engine gives a
/// preempted Spot or preemptible VM 30 s of ACPI soft off
/// (https://cloud.google.com/compute/docs/instances/spot#preemption-process), and describe
/// lags behind.
const SHUTDOWN_NOTICE: Duration = Duration::from_secs(45);

/// The pod's state once it shows its capacity lost, or after `within`.
async fn await_capacity_loss(driver: &dyn PodDriver, within: Duration) -> crate::pod::PodStatus {
    let deadline = tokio::time::Instant::now() + within;
    loop {
        let status = driver.status().await.unwrap_or_default();
        if status.is_preempted() || tokio::time::Instant::now() >= deadline {
            return status;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// Runs a newly leased attempt to its end.
pub async fn run(ctx: &Context<'_>, lease: Lease) {
    let secret = new_secret();
    drive(ctx, lease, Begin::Launch(secret)).await
}

/// Takes over an attempt whose agents are still running after a worker restart.
pub async fn reattach(ctx: &Context<'_>, saved: crate::running::Saved) {
    tracing::info!(lease = %saved.lease.lease_id, job = %saved.lease.job_id, "reattaching to the running attempt");
    let lease = saved.lease.clone();
    drive(ctx, lease, Begin::Reattach(Box::new(saved))).await
}

enum Begin {
    Launch(String),
    Reattach(Box<crate::running::Saved>),
}

async fn drive(ctx: &Context<'_>, lease: Lease, begin: Begin) {
    let client = ctx.client;
    let lease_id = lease.lease_id;
    let shared = Arc::new(Shared::default());
    let cancel = CancellationToken::new();
    let lease_lost = CancellationToken::new();
    let heartbeat = tokio::spawn(heartbeat::heartbeat_loop(
        client.clone(),
        lease.clone(),
        shared.clone(),
        cancel.clone(),
        lease_lost.clone(),
    ));
    let finish = attempt(ctx, &lease, begin, &shared, &cancel, &lease_lost).await;
    heartbeat.abort();
    match finish {
        Some(request) => {
            match client.finish(lease_id, &request).await {
                Ok(answer) => tracing::info!(
                    lease = %lease_id, outcome = %request.outcome, job_state = %answer.job_state, "attempt finished"
                ),
                Err(e) => tracing::warn!(lease = %lease_id, error = %e, "finish not accepted"),
            }
            ctx.running.clear();
        }
        None if ctx.shutdown.is_cancelled() && ctx.settings.detach_on_shutdown => {
            tracing::info!(lease = %lease_id, "worker stopping; the attempt goes on under its agents");
        }
        None => {
            tracing::warn!(lease = %lease_id, "attempt abandoned without a finish");
            ctx.running.clear();
        }
    }
}

async fn attempt(
    ctx: &Context<'_>,
    lease: &Lease,
    begin: Begin,
    shared: &Arc<Shared>,
    cancel: &CancellationToken,
    lease_lost: &CancellationToken,
) -> Option<FinishRequest> {
    let (client, driver, settings, shutdown) = (ctx.client, ctx.driver, ctx.settings, ctx.shutdown);
    let lease_id = lease.lease_id;
    let store = match CheckpointStore::open(&lease.checkpoint_dir) {
        Ok(store) => Some(store),
        Err(e) => {
            let _ = client
                .event(
                    lease_id,
                    "checkpoint_store",
                    format!("cannot open {}: {e:#}", lease.checkpoint_dir),
                )
                .await;
            None
        }
    };
    // Host 0's metric values go straight to the reporter; its progress comes to the loop.
    let (report_tx, report_rx) = mpsc::unbounded_channel();
    let (progress_tx, mut progress_rx) = mpsc::unbounded_channel();
    let routes = Routes::new(progress_tx, &report_tx);
    let stopping = routes.stopping.clone();
    let reattached = matches!(begin, Begin::Reattach(_));
    let (mut hosts, resume_step, start) = match begin {
        Begin::Reattach(saved) => (
            Hosts::attach(
                ctx.hub,
                &lease_id.to_string(),
                &saved.secret,
                saved.hosts,
                Routes {
                    resume_step: saved.resume_step,
                    ..routes
                },
            ),
            saved.resume_step,
            saved.start,
        ),
        Begin::Launch(secret) => {
            match launch::launch(ctx, lease, store.as_ref(), &secret, routes).await {
                Ok(launched) => (launched.hosts, launched.resume_step, Some(launched.start)),
                Err(message) => {
                    let stop = Stop::LaunchFailed(message);
                    let (outcome, message) = outcome::classify(&Observed {
                        stop: &stop,
                        exits: &[],
                        pod: None,
                        stopped: &Default::default(),
                    })?;
                    return Some(FinishRequest {
                        outcome,
                        exit_codes: Vec::new(),
                        start_step: lease.resume_step,
                        end_step: None,
                        log_tail: None,
                        message: Some(message),
                        phases: None,
                        stopping_s: None,
                    });
                }
            }
        }
    };
    shared.running.store(true, Ordering::SeqCst);
    shared.phase_changed.notify_one();
    *shared.hosts_alive.lock().unwrap_or_else(|e| e.into_inner()) = hosts.alive();

    let reporter = tokio::spawn(report::run(
        client.clone(),
        lease_id,
        store,
        hosts.log.clone(),
        ReporterSettings {
            flush: settings.metrics_flush,
            max_points: settings.metrics_max_points,
            scan: settings.checkpoint_scan,
        },
        report_rx,
        lease_lost.clone(),
    ));

    let now = || tokio::time::Instant::now().into_std();
    let limits = Limits {
        hang_timeout: settings.hang_timeout,
        maintenance_lead: settings.maintenance_lead,
        maintenance_timeout: settings.maintenance_timeout,
    };
    let mut watch = Watch::new(limits, reattached, resume_step, now());
    let mut phases = PhaseClock::default();
    let mut poll = tokio::time::interval(settings.status_poll);
    let stop = loop {
        let fact = tokio::select! {
            _ = shutdown.cancelled() => Fact::Shutdown,
            _ = lease_lost.cancelled() => Fact::LeaseLost,
            _ = cancel.cancelled() => Fact::Cancelled,
            exit = hosts.next_exit() => {
                let alive = hosts.alive();
                *shared.hosts_alive.lock().unwrap_or_else(|e| e.into_inner()) = alive.clone();
                Fact::Exit { exit, alive }
            }
            Some(progress) = progress_rx.recv() => match progress {
                Progress::Step(step) => Fact::Step(step),
                Progress::Checkpoint => {
                    let _ = report_tx.send(Report::CheckpointHint);
                    Fact::Checkpoint
                }
                Progress::Phase { phase, edge, received } => {
                    if phases.note(phase, edge, received) {
                        let _ = report_tx.send(Report::Phases(phases.totals()));
                    }
                    Fact::Phase
                }
            },
            _ = poll.tick() => {
                let pod = match driver.status().await {
                    Ok(status) => Some(status),
                    Err(e) => {
                        tracing::warn!(error = %format!("{e:#}"), "cannot read the pod's state");
                        None
                    }
                };
                let silent = hosts.silent(settings.agent_silence);
                let agents = Agents {
                    contacted: hosts.any_contacted(),
                    quiet: hosts.quiet(),
                    silent: !silent.is_empty(),
                };
                let seen = Fact::Poll { pod, utc: chrono::Utc::now(), agents };
                if let Some(stop) = watch.observe(seen, now()) {
                    break stop;
                }
                if !silent.is_empty() {
                    supervise_agents(ctx, lease_id, &hosts, start.as_ref(), &silent).await;
                    watch.observe(Fact::SilentAgentsTended, now());
                }
                continue;
            }
        };
        let stop = watch.observe(fact, now());
        // The heartbeat reports the last step.
        if let Some(step) = watch.last_step() {
            shared.step.store(step, Ordering::SeqCst);
            shared.has_step.store(true, Ordering::SeqCst);
        }
        if let Some(stop) = stop {
            break stop;
        }
    };
    stopping.store(true, Ordering::SeqCst);
    let stop_decided = tokio::time::Instant::now();
    phases.stopped(stop_decided);
    if matches!(stop, Stop::Shutdown) && settings.detach_on_shutdown {
        hosts.detach();
        reporter.abort();
        return None;
    }
    let stopped = hosts
        .stop(
            driver,
            settings.stop_grace,
            matches!(stop, Stop::Preempted(_)),
        )
        .await;
    hosts.drain_lines().await;
    // Lines already printed still count.
    while let Ok(progress) = progress_rx.try_recv() {
        match progress {
            Progress::Step(step) => watch.step_after_stop(step),
            // Timed when they arrived: the final save's end, a save on the shutdown notice
            // (which the clock leaves to the stopping).
            Progress::Phase {
                phase,
                edge,
                received,
            } => {
                phases.note(phase, edge, received);
            }
            Progress::Checkpoint => {}
        }
    }
    drop(report_tx);
    let _ = reporter.await;

    // A host that ended on its own may be the first sign of a preemption: ask the pod
    // (again, as its API can lag) before blaming the trainer.
    let exits = hosts.exits();
    let ended_badly = match &stop {
        Stop::HostEnded(_) => true,
        Stop::AllExited => exits.iter().flatten().any(|e| !e.success()),
        _ => false,
    };
    let pod = if ended_badly && outcome::terminated_from_outside(&exits) {
        // The hosts are shutting down: a preemption's notice gives the guest about 30 s
        // before the node reads PREEMPTED, so wait that long before calling it anything else.
        Some(await_capacity_loss(driver, SHUTDOWN_NOTICE).await)
    } else if ended_badly {
        driver.confirm_status().await.ok()
    } else {
        None
    };
    if let Stop::SilentRestart(what) = &stop {
        let _ = client.event(lease_id, "silent_restart", what.clone()).await;
    }
    let (outcome, message) = outcome::classify(&Observed {
        stop: &stop,
        exits: &exits,
        pod: pod.as_ref(),
        stopped: &stopped,
    })?;
    Some(FinishRequest {
        outcome,
        exit_codes: hosts.exit_codes(),
        start_step: resume_step,
        end_step: watch.last_step(),
        log_tail: Some(hosts.log.text()),
        message: Some(message),
        phases: Some(phases.totals()),
        stopping_s: Some(stop_decided.elapsed().as_secs_f64()),
    })
}

/// Starts a new agent on each host whose agent went silent while its trainer runs (the OOM
/// killer, a crash); the trainer itself is left alone. A host that cannot be reached is
/// tried again at the next poll.
async fn supervise_agents(
    ctx: &Context<'_>,
    lease_id: uuid::Uuid,
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
                        "agent_restarted",
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
