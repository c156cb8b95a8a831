//! How a running attempt ends once the watch said stop: every host stopped, then the
//! outcome to report, from what was seen (the pod looked at again when a host ended on its
//! own).

use std::time::Duration;

use podq_api::{FinishRequest, Lease};

use super::exits::{HostExit, StopReport};
use super::follow::Seen;
use super::outcome::{self, Observed, Stop};
use super::supervise::Hosts;
use super::Context;
use crate::pod::{PodDriver, PodStatus};

/// How long a host shutting down may take before its node says why: Compute Engine gives a
/// preempted Spot or preemptible VM 30 s of ACPI soft off
/// (https://cloud.google.com/compute/docs/instances/spot#preemption-process), and describe
/// lags behind.
const SHUTDOWN_NOTICE: Duration = Duration::from_secs(45);

/// Stops every host (SIGTERM and the grace; SIGKILL at once when the pod was preempted)
/// and waits until the lines they printed have been passed on.
pub(super) async fn stop(ctx: &Context<'_>, hosts: &mut Hosts, stop: &Stop) -> StopReport {
    let stopped = hosts
        .stop(
            ctx.driver,
            ctx.settings.stop_grace,
            matches!(stop, Stop::Preempted(_) | Stop::Repairing(_)),
        )
        .await;
    hosts.drain_lines().await;
    stopped
}

/// How the attempt ended, as far as the worker saw it.
pub(super) struct Ended {
    pub stop: Stop,
    pub stopped: StopReport,
    /// Where the trainer was given to resume.
    pub start_step: Option<i64>,
    pub seen: Seen,
    pub stop_decided: tokio::time::Instant,
}

/// The finish to report: the outcome (`None`: none may be reported), with the evidence.
pub(super) async fn classify(
    ctx: &Context<'_>,
    lease: &Lease,
    hosts: &Hosts,
    ended: Ended,
) -> Option<FinishRequest> {
    let exits = hosts.exits();
    let pod = look_again(ctx.driver, &ended.stop, &exits).await;
    if let Stop::SilentRestart(what) = &ended.stop {
        let _ = ctx
            .client
            .event(
                lease.lease_id,
                podq_api::WorkerEventKind::SilentRestart,
                what.clone(),
            )
            .await;
    }
    let (outcome, message) = outcome::classify(&Observed {
        stop: &ended.stop,
        exits: &exits,
        pod: pod.as_ref(),
        stopped: &ended.stopped,
    })?;
    Some(FinishRequest {
        outcome,
        exit_codes: hosts.exit_codes(),
        start_step: ended.start_step,
        end_step: ended.seen.end_step,
        log_tail: Some(hosts.log.text()),
        message: Some(message),
        phases: Some(ended.seen.phases),
        stopping_s: Some(ended.stop_decided.elapsed().as_secs_f64()),
        knows_stopped: true,
    })
}

/// The finish of an attempt whose hosts could not be prepared or its agents started.
pub(super) fn launch_failed(lease: &Lease, message: String) -> Option<FinishRequest> {
    let stop = Stop::LaunchFailed(message);
    let (outcome, message) = outcome::classify(&Observed {
        stop: &stop,
        exits: &[],
        pod: None,
        stopped: &Default::default(),
    })?;
    Some(FinishRequest {
        outcome,
        exit_codes: Vec::new(),
        start_step: lease.resume_step,
        end_step: None,
        log_tail: None,
        message: Some(message),
        phases: None,
        stopping_s: None,
        knows_stopped: true,
    })
}

/// A host that ended on its own may be the first sign of a preemption: the pod, asked
/// (again, as its API can lag) before the trainer is blamed.
async fn look_again(
    driver: &dyn PodDriver,
    stop: &Stop,
    exits: &[Option<HostExit>],
) -> Option<PodStatus> {
    let ended_badly = match stop {
        Stop::HostEnded(_) => true,
        Stop::AllExited => exits.iter().flatten().any(|e| !e.success()),
        _ => false,
    };
    if ended_badly && outcome::terminated_from_outside(exits) {
        // The hosts are shutting down: a preemption's notice gives the guest about 30 s
        // before the node reads PREEMPTED, so wait that long before calling it anything else.
        Some(await_capacity_loss(driver, SHUTDOWN_NOTICE).await)
    } else if ended_badly {
        driver.confirm_status().await.ok()
    } else {
        None
    }
}

/// The pod's state once it shows its capacity lost, or after `within`.
async fn await_capacity_loss(driver: &dyn PodDriver, within: Duration) -> PodStatus {
    let deadline = tokio::time::Instant::now() + within;
    loop {
        let status = driver.status().await.unwrap_or_default();
        let gone = status.is_preempted() || status.is_repairing();
        if gone || tokio::time::Instant::now() >= deadline {
            return status;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}
