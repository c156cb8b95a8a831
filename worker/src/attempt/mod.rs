//! One attempt of one job on the pod: verify where to resume, stage the config on every host,
//! clean the hosts, launch, supervise, stop, classify, finish.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use podq_api::{AttemptOutcome, FinishRequest, HeartbeatRequest, Lease, LeasePhase};
use sha2::{Digest, Sha256};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::agent::hub::AgentHub;
use crate::agent::new_secret;
use crate::checkpoints::CheckpointStore;
use crate::client::{CallError, ServerClient};
use crate::events::TrainerEvent;
use crate::pod::{AgentStart, HostLaunch, PodDriver, StagedConfig};
use crate::report::{self, Report, ReporterSettings};
use crate::running::RunningAttempt;
use crate::supervise::Hosts;

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

/// Why the supervision loop ended.
enum Stop {
    AllExited,
    HostEnded(String),
    Preempted(String),
    Hung(String),
    Cancelled,
    LeaseLost,
    Shutdown,
    SilentRestart(String),
    /// After a worker restart, no agent of the attempt ever called: the worker died
    /// before they started, or the hosts went away with them.
    AgentsGone(String),
}

/// How long a reattached worker waits for the first call of the attempt's agents.
const REATTACH_GRACE: Duration = Duration::from_secs(30);

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
    let heartbeat = tokio::spawn(heartbeat_loop(
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
    let fail = |message: String| FinishRequest {
        outcome: AttemptOutcome::Failed,
        exit_codes: Vec::new(),
        start_step: lease.resume_step,
        end_step: None,
        log_tail: None,
        message: Some(message),
    };
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
    let (events_tx, mut events_rx) = mpsc::unbounded_channel();
    let reattached = matches!(begin, Begin::Reattach(_));
    let (mut hosts, resume_step) = match begin {
        Begin::Reattach(saved) => (
            Hosts::attach(
                ctx.hub,
                &lease_id.to_string(),
                &saved.secret,
                saved.hosts,
                events_tx,
            ),
            saved.resume_step,
        ),
        Begin::Launch(secret) => {
            match launch(ctx, lease, store.as_ref(), &secret, events_tx).await {
                Ok(launched) => launched,
                Err(message) => return Some(fail(message)),
            }
        }
    };
    shared.running.store(true, Ordering::SeqCst);
    shared.phase_changed.notify_one();
    *shared.hosts_alive.lock().unwrap_or_else(|e| e.into_inner()) = hosts.alive();

    let (report_tx, report_rx) = mpsc::unbounded_channel();
    let reporter = tokio::spawn(report::run(
        client.clone(),
        lease_id,
        store,
        ReporterSettings {
            flush: settings.metrics_flush,
            max_points: settings.metrics_max_points,
            scan: settings.checkpoint_scan,
        },
        report_rx,
        lease_lost.clone(),
    ));

    let mut first_step: Option<i64> = None;
    let mut last_step: Option<i64> = None;
    let mut last_progress = tokio::time::Instant::now();
    let mut poll = tokio::time::interval(settings.status_poll);
    let stop = loop {
        tokio::select! {
            _ = shutdown.cancelled() => break Stop::Shutdown,
            _ = lease_lost.cancelled() => break Stop::LeaseLost,
            _ = cancel.cancelled() => break Stop::Cancelled,
            exit = hosts.next_exit() => {
                *shared.hosts_alive.lock().unwrap_or_else(|e| e.into_inner()) = hosts.alive();
                match exit {
                    None => break Stop::AllExited,
                    Some(exit) if exit.success() => {
                        if hosts.alive().iter().all(|alive| !alive) {
                            break Stop::AllExited;
                        }
                    }
                    Some(exit) => break Stop::HostEnded(exit.describe()),
                }
            }
            event = events_rx.recv() => match event {
                Some(TrainerEvent::Metrics { step, values }) => {
                    if first_step.is_none() {
                        first_step = Some(step);
                        if let Some(resume) = resume_step.filter(|r| step < *r) {
                            break Stop::SilentRestart(format!(
                                "the trainer was given checkpoint step {resume} but reported step {step} first: \
                                 it could not load the checkpoint and started over"
                            ));
                        }
                    }
                    if last_step.is_none_or(|last| step > last) {
                        last_step = Some(step);
                        last_progress = tokio::time::Instant::now();
                        shared.step.store(step, Ordering::SeqCst);
                        shared.has_step.store(true, Ordering::SeqCst);
                    }
                    let _ = report_tx.send(Report::Metrics { step, values });
                }
                Some(TrainerEvent::Checkpoint { .. }) => {
                    last_progress = tokio::time::Instant::now();
                    let _ = report_tx.send(Report::CheckpointHint);
                }
                None => {}
            },
            _ = poll.tick() => {
                match driver.status().await {
                    Ok(status) if status.is_preempted() => {
                        break Stop::Preempted(format!("pod state {}/{}", status.state, status.health));
                    }
                    Ok(_) => {}
                    Err(e) => tracing::warn!(error = %format!("{e:#}"), "cannot read the pod's state"),
                }
                if reattached
                    && last_progress.elapsed() >= REATTACH_GRACE
                    && !hosts.any_contacted()
                {
                    break Stop::AgentsGone(format!(
                        "no agent called within {}s of the worker's restart",
                        REATTACH_GRACE.as_secs()
                    ));
                }
                if last_progress.elapsed() >= settings.hang_timeout {
                    break Stop::Hung(format!(
                        "no step progress for {}s (last step {})",
                        settings.hang_timeout.as_secs(),
                        last_step.map_or("none".into(), |s| s.to_string())
                    ));
                }
            }
        }
    };
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
    while let Ok(event) = events_rx.try_recv() {
        if let TrainerEvent::Metrics { step, values } = event {
            last_step = Some(last_step.map_or(step, |l| l.max(step)));
            let _ = report_tx.send(Report::Metrics { step, values });
        }
    }
    drop(report_tx);
    let _ = reporter.await;

    // A host that died may be the first sign of a preemption: ask the pod before blaming
    // the trainer.
    let stop = match stop {
        Stop::HostEnded(what) => match driver.confirm_status().await {
            Ok(status) if status.is_preempted() => Stop::Preempted(format!(
                "{what}; pod state {}/{}",
                status.state, status.health
            )),
            _ => Stop::HostEnded(what),
        },
        other => other,
    };
    let exit_codes = hosts.exit_codes();
    let (outcome, message) = match stop {
        Stop::LeaseLost | Stop::Shutdown => return None,
        Stop::AllExited if exit_codes.iter().all(|c| *c == Some(0)) => {
            (AttemptOutcome::Succeeded, "every host exited 0".to_owned())
        }
        Stop::AllExited => (AttemptOutcome::Failed, "hosts ended with errors".to_owned()),
        Stop::HostEnded(what) => (
            AttemptOutcome::Failed,
            format!("{what} on a healthy pod; stopped the others"),
        ),
        Stop::Preempted(what) => (AttemptOutcome::Preempted, what),
        // Like a lost lease: the attempt's fate is unknown, so no failure is charged.
        Stop::AgentsGone(what) => (AttemptOutcome::Lost, what),
        Stop::Hung(what) => (
            AttemptOutcome::Hung,
            format!("{what}; stopped every host: {}", stopped.describe()),
        ),
        Stop::Cancelled => (
            AttemptOutcome::Cancelled,
            format!("cancelled; stopped every host: {}", stopped.describe()),
        ),
        Stop::SilentRestart(what) => {
            let _ = client.event(lease_id, "silent_restart", what.clone()).await;
            (AttemptOutcome::Failed, what)
        }
    };
    Some(FinishRequest {
        outcome,
        exit_codes,
        start_step: resume_step,
        end_step: last_step,
        log_tail: Some(hosts.log.text()),
        message: Some(message),
    })
}

/// Prepares the hosts and starts the lease's agents: verify where to resume, clean up
/// after earlier attempts, stage the config on every host and start the agents (one step
/// of the driver's, so a TPU host costs one copy and one ssh). The
/// attempt is written down once its agents run, so a restarted worker reattaches.
async fn launch(
    ctx: &Context<'_>,
    lease: &Lease,
    store: Option<&CheckpointStore>,
    secret: &str,
    events: mpsc::UnboundedSender<TrainerEvent>,
) -> Result<(Hosts, Option<i64>), String> {
    let (client, driver, settings) = (ctx.client, ctx.driver, ctx.settings);
    let lease_id = lease.lease_id;
    let (resume_from, resume_step) = choose_resume(client, lease, store).await;

    let cleaned = driver
        .clean_hosts()
        .await
        .unwrap_or_else(|e| vec![format!("cleanup failed: {e:#}")]);
    if !cleaned.is_empty() {
        // One event per attempt, not one per host and file: the timeline stays readable.
        let _ = client
            .event(lease_id, "host_cleanup", cleaned.join("; "))
            .await;
    }

    let mut config = lease.config.clone();
    if let Some(map) = config.as_object_mut() {
        map.insert(
            "checkpoint_path".into(),
            lease.checkpoint_dir.clone().into(),
        );
        map.insert("load_checkpoint".into(), resume_from.clone().into());
    }
    let yaml = serde_yaml::to_string(&config)
        .map_err(|e| format!("cannot write the config as YAML: {e}"))?;
    let config = StagedConfig {
        file_name: format!("{}.yaml", lease.experiment),
        sha256: hex::encode(Sha256::digest(yaml.as_bytes())),
        contents: yaml.into_bytes(),
    };
    let coordinator = driver
        .coordinator_address()
        .await
        .map_err(|e| format!("no coordinator address: {e:#}"))?;
    let launches: Vec<HostLaunch> = (0..driver.hosts())
        .map(|host| HostLaunch {
            host,
            command: fill_template(
                &settings.trainer_command,
                driver,
                host,
                lease,
                resume_from.as_deref(),
            ),
            env: trainer_env(
                settings,
                driver,
                host,
                lease,
                resume_from.as_deref(),
                &config.sha256,
                &coordinator,
            ),
        })
        .collect();
    let start = AgentStart {
        config,
        lease: lease_id.to_string(),
        secret: secret.to_owned(),
        worker_url: ctx.hub.url().to_owned(),
        launches,
    };
    // Written before the agents start: a worker killed in between reattaches to agents
    // that may exist, and learns from silence if they do not.
    ctx.running.save(&crate::running::Saved {
        lease: lease.clone(),
        secret: secret.to_owned(),
        hosts: driver.hosts(),
        resume_step,
    });
    let hosts = Hosts::launch(driver, ctx.hub, &start, events)
        .await
        .map_err(|e| format!("launch failed: {e:#}"))?;
    Ok((hosts, resume_step))
}

/// The checkpoint to resume from: the lease's, if the store confirms it is committed and
/// complete, else the newest older one that is; an event says when it fell back.
async fn choose_resume(
    client: &ServerClient,
    lease: &Lease,
    store: Option<&CheckpointStore>,
) -> (Option<String>, Option<i64>) {
    let Some(wanted) = lease.resume_from.clone() else {
        return (None, None);
    };
    let Some(store) = store else {
        return (Some(wanted), lease.resume_step);
    };
    let candidates =
        std::iter::once(wanted.clone()).chain(lease.fallback_checkpoints.iter().cloned());
    for candidate in candidates {
        if store.verify(&candidate).await.unwrap_or(false) {
            if candidate != wanted {
                let _ = client
                    .event(
                        lease.lease_id,
                        "resume_fallback",
                        format!(
                            "{wanted} is missing or incomplete; resuming from {candidate} instead"
                        ),
                    )
                    .await;
            }
            let step = candidate
                .rsplit('/')
                .next()
                .and_then(podq_api::orbax::parse_step_dir)
                .map(|(step, _)| step);
            return (Some(candidate), step);
        }
    }
    let _ = client
        .event(
            lease.lease_id,
            "resume_fallback",
            format!(
                "no committed checkpoint could be verified (wanted {wanted}); starting from step 0"
            ),
        )
        .await;
    (None, None)
}

fn fill_template(
    template: &str,
    driver: &dyn PodDriver,
    host: u32,
    lease: &Lease,
    resume: Option<&str>,
) -> String {
    template
        .replace(
            "{config_dir}",
            &driver.config_dir(host).display().to_string(),
        )
        .replace("{experiment}", &lease.experiment)
        .replace("{checkpoint_dir}", &lease.checkpoint_dir)
        .replace("{resume_from}", resume.unwrap_or("null"))
        .replace("{host_index}", &host.to_string())
        .replace("{host_count}", &driver.hosts().to_string())
}

fn trainer_env(
    settings: &AttemptSettings,
    driver: &dyn PodDriver,
    host: u32,
    lease: &Lease,
    resume: Option<&str>,
    file_sha: &str,
    coordinator: &str,
) -> BTreeMap<String, String> {
    let mut env = settings.trainer_env.clone();
    let hosts = driver.hosts().to_string();
    for (key, value) in [
        ("PODQ_JOB_ID", lease.job_id.to_string()),
        ("PODQ_ATTEMPT", lease.attempt.to_string()),
        ("PODQ_LEASE_ID", lease.lease_id.to_string()),
        ("PODQ_HOST_INDEX", host.to_string()),
        ("PODQ_HOST_COUNT", hosts.clone()),
        ("PODQ_CHECKPOINT_DIR", lease.checkpoint_dir.clone()),
        ("PODQ_RESUME_FROM", resume.unwrap_or_default().to_owned()),
        ("PODQ_CONFIG_SHA256", file_sha.to_owned()),
        ("JAX_PROCESS_COUNT", hosts.clone()),
        ("JAX_PROCESS_INDEX", host.to_string()),
        ("COORDINATOR_ADDRESS", coordinator.to_owned()),
    ] {
        env.insert(key.to_owned(), value);
    }
    env
}

async fn heartbeat_loop(
    client: ServerClient,
    lease: Lease,
    shared: Arc<Shared>,
    cancel: CancellationToken,
    lease_lost: CancellationToken,
) {
    let mut tick = tokio::time::interval(Duration::from_secs(lease.heartbeat_s.max(1)));
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = shared.phase_changed.notified() => {}
        }
        let request = HeartbeatRequest {
            phase: if shared.running.load(Ordering::SeqCst) {
                LeasePhase::Running
            } else {
                LeasePhase::Preparing
            },
            step: shared
                .has_step
                .load(Ordering::SeqCst)
                .then(|| shared.step.load(Ordering::SeqCst)),
            hosts_alive: shared
                .hosts_alive
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .clone(),
        };
        match client.heartbeat(lease.lease_id, &request).await {
            Ok(answer) if answer.cancel => cancel.cancel(),
            Ok(_) => {}
            Err(CallError::LeaseLost(message)) => {
                tracing::warn!(lease = %lease.lease_id, "{message}");
                lease_lost.cancel();
                return;
            }
            Err(CallError::Shutdown) => return,
            Err(e) => tracing::warn!(lease = %lease.lease_id, error = %e, "heartbeat refused"),
        }
    }
}
