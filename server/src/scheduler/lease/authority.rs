//! Whether a worker's call may act for a pod, decided where the pod is known: after its
//! lease is looked up, whatever spelling of the lease id the request's path used. A token
//! limited to some pods (`podq users add --role worker --pods ...`) acts for those alone.

use podq_api::LeaseId;

use crate::scheduler::{LiveLease, Result, Scheduler, SchedulerError};
use crate::store::events::Actor;
use crate::team::Acting;

impl Scheduler {
    /// The live lease `lease_id`, when `acting` may act for its pod, and the audit's name
    /// for what the call changes: `LeaseLost` when it is not live, 403 when it is another
    /// pod's.
    pub(in crate::scheduler) fn held_lease(
        &self,
        lease_id: LeaseId,
        acting: &Acting,
    ) -> Result<(LiveLease, Actor)> {
        let live = self.live_lease(lease_id)?;
        let worker = worker_for(acting, &live.pod)?;
        Ok((live, worker))
    }
}

/// The audit's name for a change `acting` makes for `pod` (the pod, with whose token spoke
/// for it), or 403 when its token may not act for that pod.
pub(in crate::scheduler) fn worker_for(acting: &Acting, pod: &str) -> Result<Actor> {
    if !acting.caller.may_act_for_pod(pod) {
        return Err(SchedulerError::forbidden(
            "pod_not_allowed",
            format!(
                "the token of {} is limited to pods {}: it cannot act for pod {pod}",
                acting.caller.name,
                acting.caller.pods.as_deref().unwrap_or_default().join(", ")
            ),
        ));
    }
    Ok(Actor::worker_request(pod, &acting.actor))
}
