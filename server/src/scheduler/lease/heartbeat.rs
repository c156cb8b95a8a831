//! A lease's heartbeat: extended in memory, answered with whether to stop.

use std::time::Instant;

use podq_api::{HeartbeatRequest, HeartbeatResponse, LeaseId, LeasePhase};

use crate::scheduler::{Result, Scheduler, SchedulerError};
use crate::team::Acting;

impl Scheduler {
    /// Extends the lease; answers whether to stop. Memory only: see `live.rs`.
    pub fn heartbeat(
        &self,
        lease_id: LeaseId,
        req: HeartbeatRequest,
        acting: &Acting,
    ) -> Result<HeartbeatResponse> {
        self.held_lease(lease_id, acting)?;
        let (cancel, stop) = {
            let mut leases = self.live.lock();
            let entry = leases
                .get_mut(&lease_id)
                .ok_or(SchedulerError::LeaseLost(lease_id))?;
            entry.expires_at = Instant::now() + self.live.ttl;
            entry.running |= req.phase == LeasePhase::Running;
            if req.step.is_some() {
                entry.step = req.step;
            }
            (entry.cancel, entry.stop.clone())
        };
        Ok(HeartbeatResponse {
            lease_expires_at: chrono::Utc::now()
                + chrono::Duration::from_std(self.live.ttl).unwrap_or_default(),
            // A worker older than the `stop` order stops as for a cancel, and
            // its `cancelled` finish ends the requested stop all the same (policy.rs).
            cancel: cancel || stop.is_some(),
            stop: stop.map(|reason| podq_api::StopOrder { reason }),
        })
    }
}
