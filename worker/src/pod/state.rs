//! What a pod's state and health mean, for every driver, classified once: the Cloud TPU
//! API's values (the local driver reports the same words), and the summary the Compute
//! Engine driver makes of a slice's instances and accelerator topology.

use super::{PodApi, PodStatus};

/// What a node `state` means for the worker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StateClass {
    /// `READY`: usable once healthy.
    Ready,
    /// On its way somewhere by itself: wait and look again. Its hosts are not running.
    Changing,
    /// `STATE_UNSPECIFIED`, no value yet: look again rather than act on a glitch, and do
    /// not end a running attempt over it.
    Unsettled,
    /// The capacity is gone; only the worker's recovery brings it back.
    Lost,
    /// The service is restoring the capacity by itself, the whole slice at once (Compute
    /// Engine's repair of managed capacity, https://docs.cloud.google.com/tpu/docs/
    /// failure-recovery): its trainers went with it, and the worker waits rather than
    /// tearing it down.
    Repairing,
    /// A value this worker does not know: not ready, and nothing is done to the node.
    Unknown,
}

/// Every node state of the TPU v2 API (`podq_api::PodState`), and what it means.
pub fn classify_state(state: &str) -> StateClass {
    use podq_api::PodState as S;
    match S::from(state) {
        S::Ready => StateClass::Ready,
        // Transitions the service completes by itself.
        S::Creating
        | S::Starting
        | S::Restarting
        | S::Reimaging
        | S::Repairing
        | S::Stopping
        | S::Deleting
        | S::Hiding
        | S::Unhiding
        | S::Hidden => StateClass::Changing,
        S::StateUnspecified => StateClass::Unsettled,
        // Preempted, stopped, at end of life or maintenance, a failed repair (`UNKNOWN`), or
        // no node at all.
        S::Preempted | S::Terminated | S::Stopped | S::Unknown | S::NotFound => StateClass::Lost,
        S::Other(_) => StateClass::Unknown,
    }
}

/// What a node `health` means for the worker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HealthClass {
    Healthy,
    /// `TIMEOUT`, `UNHEALTHY_TENSORFLOW`, `HEALTH_UNSPECIFIED`: not fit to start a job on.
    Unhealthy,
    /// `UNHEALTHY_MAINTENANCE`: the node is being maintained and its hosts will go away.
    Maintenance,
    Unknown,
}

pub fn classify_health(health: &str) -> HealthClass {
    match health {
        "HEALTHY" => HealthClass::Healthy,
        "TIMEOUT" | "UNHEALTHY_TENSORFLOW" | "HEALTH_UNSPECIFIED" => HealthClass::Unhealthy,
        "UNHEALTHY_MAINTENANCE" => HealthClass::Maintenance,
        _ => HealthClass::Unknown,
    }
}

/// A human account of a state, for recovery progress and preflight messages.
pub fn describe_state(state: &str) -> &'static str {
    use podq_api::PodState as S;
    match S::from(state) {
        S::Ready => "ready",
        S::Creating => "being created",
        S::Starting => "starting",
        S::Restarting => "restarting",
        S::Reimaging => "being re-imaged",
        S::Repairing => "being repaired",
        S::Stopping => "stopping",
        S::Deleting => "being deleted",
        S::Hiding | S::Hidden | S::Unhiding => "hidden by the service",
        S::StateUnspecified => "in no state yet",
        S::Preempted => "preempted",
        S::Terminated => "terminated (maintenance or end of life)",
        S::Stopped => "stopped",
        S::Unknown => "broken (a repair failed)",
        S::NotFound => "gone (no such node)",
        S::Other(_) => "in a state podq does not know",
    }
}

/// What the Compute Engine driver's summary of a slice means. `state` is the instances'
/// state (`list-instances`' `instanceStatus`, the least advanced one, or `NOT_FOUND` when
/// the group is gone), `health` the accelerator topology's state
/// (`status.appliedAcceleratorTopologies[].state`). Ready is every instance `RUNNING` and
/// the topology `ACTIVE` (a reading of Compute v1 `ManagedInstance.InstanceStatus` and
/// `InstanceGroupManagerStatusAcceleratorTopology.State`, not a sentence of the docs).
pub fn classify_compute(state: &str, topology: &str) -> StateClass {
    match (state, topology) {
        ("RUNNING", "ACTIVE") => StateClass::Ready,
        // Compute Engine restarts a managed-capacity slice by itself, whole (the driver
        // reads a Spot slice's repair states as `UNREPAIRED`: Spot is never repaired).
        ("REPAIRING", _) | ("RUNNING", "REACTIVATING" | "INCOMPLETE") => StateClass::Repairing,
        ("RUNNING", "ACTIVATING" | "") => StateClass::Changing,
        ("RUNNING", "FAILED" | "DEACTIVATING") => StateClass::Lost,
        ("RUNNING", _) => StateClass::Unknown,
        ("PENDING" | "CREATING" | "PROVISIONING" | "STAGING", _) => StateClass::Changing,
        // The ACPI notice of a Spot preemption: the guest is shutting down and its trainers
        // are saving on their SIGTERM. Nothing is ended or deleted over it; the instances
        // read TERMINATED (or are gone) once it is over.
        ("STOPPING" | "PENDING_STOP", _) => StateClass::Unsettled,
        // Spot preemption (STOP leaves TERMINATED, DELETE leaves nothing), a flex-start slice
        // at its end, a group someone deleted.
        (
            "TERMINATED" | "STOPPED" | "SUSPENDING" | "SUSPENDED" | "DEPROVISIONING" | "MISSING"
            | "UNREPAIRED" | "NOT_FOUND",
            _,
        ) => StateClass::Lost,
        ("DESCRIBE_FAILED", _) => StateClass::Unsettled,
        _ => StateClass::Unknown,
    }
}

impl PodStatus {
    /// What the state means, in the vocabulary of the API that owns the pod.
    pub fn class(&self) -> StateClass {
        match self.api {
            PodApi::Tpu => classify_state(&self.state),
            PodApi::Compute => classify_compute(&self.state, &self.health),
        }
    }

    pub fn is_ready(&self) -> bool {
        match self.api {
            PodApi::Tpu => {
                self.class() == StateClass::Ready
                    && classify_health(&self.health) == HealthClass::Healthy
            }
            PodApi::Compute => self.class() == StateClass::Ready,
        }
    }

    /// The service is repairing the whole slice: an attempt on it is over (lost, not
    /// charged), and the worker waits for the slice to come back as it was.
    pub fn is_repairing(&self) -> bool {
        self.class() == StateClass::Repairing
    }

    /// The capacity ends by itself within `lead` of `now` (or has ended): a flex-start
    /// slice's max run duration.
    pub fn capacity_ends_within(
        &self,
        lead: std::time::Duration,
        now: chrono::DateTime<chrono::Utc>,
    ) -> Option<chrono::DateTime<chrono::Utc>> {
        let ends = self.capacity_ends?;
        let lead = chrono::TimeDelta::from_std(lead).unwrap_or(chrono::TimeDelta::MAX);
        (ends - now <= lead).then_some(ends)
    }

    /// The pod lost its capacity: every host is gone together. Besides the states that say
    /// so outright, a node being deleted, repaired, restarted or re-imaged has no trainer
    /// left on it either. A node under maintenance is not: Cloud TPU says most maintenance
    /// events end with the hosts as they were (https://cloud.google.com/tpu/docs/
    /// maintenance-events), so its trainers are left alone (`in_maintenance`).
    pub fn is_preempted(&self) -> bool {
        matches!(self.class(), StateClass::Lost | StateClass::Changing)
    }

    /// A maintenance event is under way: the hosts may pause, or restart.
    pub fn in_maintenance(&self) -> bool {
        (self.api == PodApi::Tpu && classify_health(&self.health) == HealthClass::Maintenance)
            || self
                .maintenance
                .as_ref()
                .is_some_and(|m| m.status == "ONGOING")
    }

    /// A maintenance window that opens within `lead` of `now` (or has opened).
    pub fn maintenance_ahead(
        &self,
        lead: std::time::Duration,
        now: chrono::DateTime<chrono::Utc>,
    ) -> Option<&super::Maintenance> {
        let m = self.maintenance.as_ref()?;
        if lead.is_zero() || m.status == "ONGOING" {
            return None;
        }
        let start = m.window_start?;
        let lead = chrono::TimeDelta::from_std(lead).unwrap_or(chrono::TimeDelta::MAX);
        (start - now <= lead).then_some(m)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(state: &str, health: &str) -> PodStatus {
        PodStatus {
            state: state.into(),
            health: health.into(),
            maintenance: None,
            ..Default::default()
        }
    }

    #[test]
    fn ready_and_preempted_mean_one_thing() {
        // (Every API value's class is checked in gcloud/node.rs.)
        assert!(status("READY", "HEALTHY").is_ready());
        assert!(!status("READY", "TIMEOUT").is_ready());
        assert!(status("PREEMPTED", "HEALTHY").is_preempted());
        let maintenance = status("READY", "UNHEALTHY_MAINTENANCE");
        assert!(!maintenance.is_preempted() && maintenance.in_maintenance());
        assert!(status("DELETING", "").is_preempted());
        // A glitch is neither: not ready to lease, and no reason to end a run.
        let unspecified = status("STATE_UNSPECIFIED", "HEALTHY");
        assert!(!unspecified.is_ready() && !unspecified.is_preempted());
        assert!(!status("SOMETHING_NEW", "HEALTHY").is_preempted());
    }

    fn slice(state: &str, topology: &str) -> PodStatus {
        PodStatus {
            api: PodApi::Compute,
            ..status(state, topology)
        }
    }

    #[test]
    fn a_compute_slice_is_ready_lost_or_repaired_as_compute_engine_says() {
        assert!(slice("RUNNING", "ACTIVE").is_ready());
        assert!(!slice("RUNNING", "ACTIVATING").is_ready());
        for lost in ["TERMINATED", "MISSING", "NOT_FOUND", "UNREPAIRED"] {
            assert!(slice(lost, "INCOMPLETE").is_preempted(), "{lost}");
        }
        assert!(slice("RUNNING", "FAILED").is_preempted());
        // A Spot notice under way: the trainers are saving; nothing is ended over it.
        let notice = slice("STOPPING", "INCOMPLETE");
        assert!(!notice.is_preempted() && !notice.is_repairing() && !notice.is_ready());
        assert!(slice("RUNNING", "ACTIVATING").is_preempted());
        assert!(!slice("RUNNING", "SOMETHING_NEW").is_preempted());
        for repair in [
            ("REPAIRING", "REACTIVATING"),
            ("RUNNING", "REACTIVATING"),
            ("RUNNING", "INCOMPLETE"),
        ] {
            let s = slice(repair.0, repair.1);
            assert!(
                s.is_repairing() && !s.is_preempted() && !s.is_ready(),
                "{repair:?}"
            );
        }
        // Instances that do not exist yet hold no trainer: an attempt on them is over.
        assert!(slice("PENDING", "").is_preempted());
        assert!(!slice("DESCRIBE_FAILED", "").is_preempted());
        // The TPU API's REPAIRING is a node on its way back, its hosts gone: preempted.
        assert!(status("REPAIRING", "").is_preempted());
        assert!(!status("REPAIRING", "").is_repairing());
    }
}
