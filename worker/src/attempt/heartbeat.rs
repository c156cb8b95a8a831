//! The lease's heartbeat: the attempt's phase, step and live hosts every `heartbeat_s`, and
//! the server's answer (cancel, a stop order, or the lease is lost).

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use podq_api::{HeartbeatRequest, Lease, LeasePhase};
use tokio_util::sync::CancellationToken;

use super::Shared;
use crate::client::{CallError, ServerClient};

pub(super) async fn heartbeat_loop(
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
            Ok(answer) => {
                if let Some(order) = answer.stop {
                    shared.set_stop_order(order.reason);
                    cancel.cancel();
                } else if answer.cancel {
                    cancel.cancel();
                }
            }
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
