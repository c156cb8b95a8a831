//! The worker daemon's loop: keep the pod ready, ask for work, run it, repeat.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use podq_api::{
    HeartbeatRequest, LeasePhase, LeaseRequest, PodDescription, PodReport, Preflight, WorkerEvent,
    WorkerEventKind,
};
use tokio_util::sync::CancellationToken;

use crate::agent::hub::AgentHub;
use crate::attempt::{self, AttemptSettings, Context};
use crate::client::{CallError, ServerClient};
use crate::pod::PodDriver;
use crate::running::RunningAttempt;

#[derive(Clone)]
pub struct DaemonSettings {
    pub attempt: AttemptSettings,
    /// Where the hosts' agents reach this worker: the address to listen on (port 0: any
    /// free port, kept across restarts) and the URL they are given (default: the bound
    /// address).
    pub agent_listen: SocketAddr,
    pub agent_url: Option<String>,
    /// Where the worker writes down its running attempt.
    pub state_dir: PathBuf,
    /// Long-poll length of a lease request.
    pub lease_wait: Duration,
    /// Pause before checking again after a failed preflight.
    pub preflight_retry: Duration,
}

pub async fn run(
    client: ServerClient,
    driver: Arc<dyn PodDriver>,
    settings: DaemonSettings,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    // `podq worker` and `podq up` both start here: a template that quotes a placeholder
    // would undo the quoting of its value (docs/trainer.md, "The command").
    if let Some(name) = attempt::quoted_placeholder(&settings.attempt.trainer_command) {
        anyhow::bail!(
            "the trainer command writes {name} inside quotes: write every placeholder bare, \
             as in `--config-name {{experiment}}`; podq fills each one in as a single \
             shell-quoted word, and quotes around it would undo that (docs/trainer.md)"
        );
    }
    tracing::info!(
        pod = driver.name(),
        hosts = driver.hosts(),
        "worker started"
    );
    let running = RunningAttempt::new(&settings.state_dir, driver.name())?;
    let hub = bind_hub(&settings, &running).await?;
    running.set_agent_listen(hub.local_addr());
    let ctx = Context {
        client: &client,
        driver: driver.as_ref(),
        hub: &hub,
        settings: &settings.attempt,
        shutdown: &shutdown,
        running: &running,
    };
    if let Some(saved) = running.load() {
        let request = HeartbeatRequest {
            phase: LeasePhase::Running,
            step: None,
            hosts_alive: Vec::new(),
        };
        match client.heartbeat(saved.lease.lease_id, &request).await {
            Ok(_) => attempt::reattach(&ctx, saved).await,
            Err(CallError::Shutdown) => return Ok(()),
            Err(e) => {
                tracing::warn!(lease = %saved.lease.lease_id, error = %e, "the attempt left running is no longer live; its agents are told to stop");
                hub.abandon(
                    &saved.lease.lease_id.to_string(),
                    &saved.secret,
                    saved.hosts,
                );
                running.clear();
            }
        }
    }
    while !shutdown.is_cancelled() {
        let Some(preflight) = ready_pod(&client, driver.as_ref(), &settings, &shutdown).await?
        else {
            break;
        };
        let request = LeaseRequest {
            pod: describe(driver.as_ref(), "READY", "HEALTHY", Some(preflight), None),
            wait_s: Some(settings.lease_wait.as_secs()),
        };
        match client.lease(driver.name(), &request).await {
            Ok(Some(lease)) => {
                tracing::info!(job = %lease.job_id, experiment = %lease.experiment, attempt = lease.attempt, "leased");
                attempt::run(&ctx, lease).await;
            }
            Ok(None) => {}
            Err(CallError::Shutdown) => break,
            Err(e) => {
                tracing::error!(error = %e, "lease request refused");
                sleep_or_shutdown(Duration::from_secs(5), &shutdown).await;
            }
        }
    }
    tracing::info!(pod = driver.name(), "worker stopped");
    Ok(())
}

/// Listens for agents where the last run of this worker did, when the address is free
/// and the configured one leaves the port open: agents started then still call there.
async fn bind_hub(settings: &DaemonSettings, running: &RunningAttempt) -> anyhow::Result<AgentHub> {
    let wanted = settings.agent_listen;
    if wanted.port() == 0 {
        if let Some(last) = running
            .last_agent_listen()
            .filter(|l| l.ip() == wanted.ip())
        {
            match AgentHub::bind(last, settings.agent_url.clone()).await {
                Ok(hub) => return Ok(hub),
                Err(e) => {
                    tracing::warn!(error = %format!("{e:#}"), "cannot listen where the last run did")
                }
            }
        }
    }
    AgentHub::bind(wanted, settings.agent_url.clone()).await
}

/// Waits until the pod is READY and its preflight passes, recovering it after a
/// preemption and telling the server what it waits for. `None` on shutdown.
async fn ready_pod(
    client: &ServerClient,
    driver: &dyn PodDriver,
    settings: &DaemonSettings,
    shutdown: &CancellationToken,
) -> anyhow::Result<Option<Preflight>> {
    loop {
        if shutdown.is_cancelled() {
            return Ok(None);
        }
        let status = driver.status().await?;
        if !status.is_ready() {
            let waiting = format!("pod is {}/{}: recovering", status.state, status.health);
            report(
                client,
                driver,
                &status.state,
                &status.health,
                None,
                Some(waiting.clone()),
                Some((WorkerEventKind::Recovering, waiting)),
            )
            .await;
            // Each step of the recovery reaches the server, so the pod shows what it waits for.
            let (progress_tx, mut progress_rx) = tokio::sync::mpsc::unbounded_channel::<String>();
            let progress = move |what: String| {
                tracing::info!("{what}");
                let _ = progress_tx.send(what);
            };
            let recovery = driver.recover(&progress);
            tokio::pin!(recovery);
            loop {
                tokio::select! {
                    _ = shutdown.cancelled() => return Ok(None),
                    Some(what) = progress_rx.recv() => {
                        report(client, driver, &status.state, &status.health, None, Some(what), None).await;
                    }
                    result = &mut recovery => {
                        if let Err(e) = result {
                            tracing::error!(error = %format!("{e:#}"), "recovery failed; trying again");
                            sleep_or_shutdown(settings.preflight_retry, shutdown).await;
                        }
                        break;
                    }
                }
            }
            continue;
        }
        // A run leased now would be stopped for the window, or the slice's end: lease
        // nothing until it passed.
        let now = chrono::Utc::now();
        let lead = settings.attempt.maintenance_lead;
        let waiting = if let Some(m) = status.maintenance_ahead(lead, now) {
            Some(format!(
                "a {} maintenance window opens at {} (ends {}): leasing nothing on this pod until it has passed",
                m.kind,
                m.window_start.map_or("an unknown time".into(), |t| t.to_rfc3339()),
                m.window_end.map_or("at an unknown time".into(), |t| t.to_rfc3339()),
            ))
        } else {
            status.capacity_ends_within(lead, now).map(|ends| {
                format!(
                    "the slice's capacity ends at {} (its max run duration): leasing nothing on \
                     it; it is created again once it is gone",
                    ends.to_rfc3339()
                )
            })
        };
        if let Some(waiting) = waiting {
            tracing::info!(pod = driver.name(), "{waiting}");
            report(
                client,
                driver,
                &status.state,
                &status.health,
                None,
                Some(waiting),
                None,
            )
            .await;
            sleep_or_shutdown(settings.preflight_retry, shutdown).await;
            continue;
        }
        let preflight = driver.preflight().await;
        if preflight.passed {
            return Ok(Some(preflight));
        }
        let failed: Vec<String> = preflight
            .failures
            .iter()
            .map(|f| match f.host {
                Some(host) => format!("host {host}: {} ({})", f.message, f.check),
                None => format!("{} ({})", f.message, f.check),
            })
            .collect();
        let message = format!("preflight failed: {}", failed.join("; "));
        tracing::warn!(pod = driver.name(), "{message}");
        report(
            client,
            driver,
            &status.state,
            &status.health,
            Some(preflight),
            None,
            Some((WorkerEventKind::PreflightFailed, message)),
        )
        .await;
        sleep_or_shutdown(settings.preflight_retry, shutdown).await;
    }
}

fn describe(
    driver: &dyn PodDriver,
    state: &str,
    health: &str,
    preflight: Option<Preflight>,
    recovery: Option<String>,
) -> PodDescription {
    PodDescription {
        accelerator: driver.accelerator().to_owned(),
        hosts: driver.hosts(),
        state: state.into(),
        health: health.to_owned(),
        preflight,
        recovery,
    }
}

async fn report(
    client: &ServerClient,
    driver: &dyn PodDriver,
    state: &str,
    health: &str,
    preflight: Option<Preflight>,
    recovery: Option<String>,
    event: Option<(WorkerEventKind, String)>,
) {
    let report = PodReport {
        pod: describe(driver, state, health, preflight, recovery),
        event: event.map(|(kind, message)| WorkerEvent::of(kind, message)),
    };
    if let Err(e) = client.report(driver.name(), &report).await {
        tracing::warn!(error = %e, "pod report not accepted");
    }
}

async fn sleep_or_shutdown(duration: Duration, shutdown: &CancellationToken) {
    tokio::select! {
        _ = shutdown.cancelled() => {}
        _ = tokio::time::sleep(duration) => {}
    }
}
