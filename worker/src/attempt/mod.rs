//! One attempt of one job on the pod: launch (or reattach), watch, stop, classify, finish.
//!
//! - `launch`: where to resume, clean and stage the hosts, start the agents;
//! - `follow` feeds the facts of the running attempt to `watch`, which decides when to stop;
//! - `end`: stop the hosts, then `outcome` classifies;
//! - `supervise` (the hosts and their agents), `lines` (where their lines go), `log_tail`,
//!   `heartbeat`.

mod end;
pub mod exits;
mod follow;
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
use crate::pod::{AgentStart, PodDriver};
use crate::report::{self, ReporterSettings};
use crate::running::RunningAttempt;
use end::Ended;
use follow::Follow;
pub use launch::{quoted_placeholder, PLACEHOLDERS};
use lines::Routes;
use outcome::Stop;
use supervise::Hosts;

#[derive(Debug, Clone)]
pub struct AttemptSettings {
    /// The trainer command, with `{config_dir}`, `{experiment}`, `{checkpoint_dir}`,
    /// `{resume_from}` (`null` when none), `{host_index}`, `{host_count}` and
    /// `{accelerator}` (the slice type of this attempt's pod) filled in, each shell-quoted.
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
    /// Give trainers the lease's compilation cache directory (`--no-compile-cache` turns it
    /// off).
    pub compile_cache: bool,
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
    /// Why the server asked for the pod back (eviction, suspension), set before the
    /// heartbeat fires the cancel token: the loop then stops with the full grace.
    stop_order: Mutex<Option<String>>,
}

impl Shared {
    /// The agents run: the heartbeat says so at once, with the live hosts.
    fn now_running(&self, alive: Vec<bool>) {
        self.running.store(true, Ordering::SeqCst);
        self.phase_changed.notify_one();
        self.set_hosts_alive(alive);
    }

    fn set_stop_order(&self, why: String) {
        *self.stop_order.lock().unwrap_or_else(|e| e.into_inner()) = Some(why);
    }

    fn stop_order(&self) -> Option<String> {
        self.stop_order
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    fn set_hosts_alive(&self, alive: Vec<bool>) {
        *self.hosts_alive.lock().unwrap_or_else(|e| e.into_inner()) = alive;
    }

    /// The last step the trainer reported, once it reported one.
    fn set_step(&self, step: Option<i64>) {
        if let Some(step) = step {
            self.step.store(step, Ordering::SeqCst);
            self.has_step.store(true, Ordering::SeqCst);
        }
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
    let store = open_store(ctx.client, lease).await;
    // Host 0's metric values go straight to the reporter; its progress comes to the loop.
    let (report_tx, report_rx) = mpsc::unbounded_channel();
    let (progress_tx, progress_rx) = mpsc::unbounded_channel();
    let routes = Routes::new(progress_tx, &report_tx);
    let stopping = routes.stopping.clone();
    let reattached = matches!(begin, Begin::Reattach(_));

    // Launch, or take over the agents of a restarted worker.
    let (mut hosts, resume_step, start) = match begin {
        Begin::Reattach(saved) => reattach_hosts(ctx, lease, *saved, routes),
        Begin::Launch(secret) => {
            match launch::launch(ctx, lease, store.as_ref(), &secret, routes).await {
                Ok(launched) => (launched.hosts, launched.resume_step, Some(launched.start)),
                Err(message) => return end::launch_failed(lease, message),
            }
        }
    };
    shared.now_running(hosts.alive());
    // A stop a rule ordered in a batch's answer stops the attempt as the heartbeat's does.
    let on_stop: report::OnStop = {
        let (shared, cancel) = (shared.clone(), cancel.clone());
        Box::new(move |why| {
            shared.set_stop_order(why);
            cancel.cancel();
        })
    };
    let reporter = spawn_reporter(ctx, lease, store, &hosts, report_rx, lease_lost, on_stop);

    // Watch until the attempt must stop.
    let mut follow = Follow::new(
        ctx,
        lease.lease_id,
        reattached,
        resume_step,
        progress_rx,
        report_tx,
    );
    let stop = follow
        .until_stop(ctx, &mut hosts, start.as_ref(), shared, cancel, lease_lost)
        .await;
    stopping.store(true, Ordering::SeqCst);
    let stop_decided = tokio::time::Instant::now();
    follow.stopped(stop_decided);
    if matches!(stop, Stop::Shutdown) && ctx.settings.detach_on_shutdown {
        hosts.detach();
        reporter.abort();
        return None;
    }

    // Stop every host; what they printed until then still counts.
    let stopped = end::stop(ctx, &mut hosts, &stop).await;
    let seen = follow.after_stop();
    let _ = reporter.await;

    // Classify.
    let ended = Ended {
        stop,
        stopped,
        start_step: resume_step,
        seen,
        stop_decided,
    };
    end::classify(ctx, lease, &hosts, ended).await
}

fn spawn_reporter(
    ctx: &Context<'_>,
    lease: &Lease,
    store: Option<CheckpointStore>,
    hosts: &Hosts,
    reports: mpsc::UnboundedReceiver<report::Report>,
    lease_lost: &CancellationToken,
    on_stop: report::OnStop,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(report::run(
        ctx.client.clone(),
        lease.lease_id,
        store,
        hosts.log.clone(),
        ReporterSettings {
            flush: ctx.settings.metrics_flush,
            max_points: ctx.settings.metrics_max_points,
            scan: ctx.settings.checkpoint_scan,
        },
        reports,
        report::Answers {
            lease_lost: lease_lost.clone(),
            on_stop,
        },
    ))
}

/// The checkpoint store of the lease; an event says when it cannot be opened.
async fn open_store(client: &ServerClient, lease: &Lease) -> Option<CheckpointStore> {
    match CheckpointStore::open(&lease.checkpoint_dir) {
        Ok(store) => Some(store),
        Err(e) => {
            let _ = client
                .event(
                    lease.lease_id,
                    podq_api::WorkerEventKind::CheckpointStore,
                    format!("cannot open {}: {e:#}", lease.checkpoint_dir),
                )
                .await;
            None
        }
    }
}

/// The hosts of an attempt a restarted worker takes over, where it resumed, and how its
/// agents were started (if that was kept).
fn reattach_hosts(
    ctx: &Context<'_>,
    lease: &Lease,
    saved: crate::running::Saved,
    routes: Routes,
) -> (Hosts, Option<i64>, Option<AgentStart>) {
    let routes = Routes {
        resume_step: saved.resume_step,
        ..routes
    };
    let hosts = Hosts::attach(
        ctx.hub,
        &lease.lease_id.to_string(),
        &saved.secret,
        saved.hosts,
        routes,
    );
    (hosts, saved.resume_step, saved.start)
}
