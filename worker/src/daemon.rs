//! The worker daemon's loop: keep the pod ready, ask for work, run it, repeat.

use std::sync::Arc;
use std::time::Duration;

use podq_api::{LeaseRequest, PodDescription, PodReport, Preflight, WorkerEvent};
use tokio_util::sync::CancellationToken;

use crate::attempt::{self, AttemptSettings};
use crate::client::{CallError, ServerClient};
use crate::pod::PodDriver;

pub struct DaemonSettings {
    pub attempt: AttemptSettings,
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
    tracing::info!(
        pod = driver.name(),
        hosts = driver.hosts(),
        "worker started"
    );
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
                attempt::run(
                    &client,
                    driver.as_ref(),
                    lease,
                    &settings.attempt,
                    &shutdown,
                )
                .await;
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
                Some(("recovering", waiting)),
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
            Some(("preflight_failed", message)),
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
        state: state.to_owned(),
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
    event: Option<(&str, String)>,
) {
    let report = PodReport {
        pod: describe(driver, state, health, preflight, recovery),
        event: event.map(|(kind, message)| WorkerEvent {
            kind: kind.to_owned(),
            message,
        }),
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
