//! `gcloud compute tpus tpu-vm describe --format=json` and `queued-resources describe`, and
//! what their `state` and `health` values mean for the worker (TPU_FACTS.md).

use std::collections::BTreeMap;

use serde::Deserialize;

/// The fields of a TPU node the worker reads.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", default)]
pub struct Node {
    pub name: String,
    pub accelerator_type: Option<String>,
    pub state: Option<String>,
    pub health: Option<String>,
    pub health_description: Option<String>,
    pub runtime_version: Option<String>,
    pub scheduling_config: Option<SchedulingConfig>,
    pub network_endpoints: Vec<NetworkEndpoint>,
    pub network_config: Option<NetworkConfig>,
    pub labels: BTreeMap<String, String>,
    pub symptoms: Vec<Symptom>,
    pub queued_resource: Option<String>,
}

#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", default)]
pub struct SchedulingConfig {
    pub preemptible: bool,
    pub spot: bool,
    pub reserved: bool,
}

#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", default)]
pub struct NetworkEndpoint {
    pub ip_address: Option<String>,
    pub port: Option<u16>,
}

#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", default)]
pub struct NetworkConfig {
    pub network: Option<String>,
    pub subnetwork: Option<String>,
}

#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", default)]
pub struct Symptom {
    pub symptom_type: Option<String>,
    pub details: Option<String>,
    pub worker_id: Option<String>,
}

impl Node {
    pub fn parse(json: &str) -> anyhow::Result<Node> {
        Ok(serde_json::from_str(json)?)
    }

    pub fn state(&self) -> &str {
        self.state.as_deref().unwrap_or("STATE_UNSPECIFIED")
    }

    pub fn health(&self) -> &str {
        self.health.as_deref().unwrap_or("HEALTH_UNSPECIFIED")
    }

    /// Host 0's internal address: where the JAX coordinator listens.
    pub fn coordinator_ip(&self) -> Option<&str> {
        self.network_endpoints.first()?.ip_address.as_deref()
    }

    /// A short account of the symptoms, for messages.
    pub fn symptoms_text(&self) -> Option<String> {
        let parts: Vec<String> = self
            .symptoms
            .iter()
            .map(|s| {
                let kind = s.symptom_type.as_deref().unwrap_or("SYMPTOM");
                match &s.worker_id {
                    Some(worker) => format!("{kind} on worker {worker}"),
                    None => kind.to_owned(),
                }
            })
            .collect();
        (!parts.is_empty()).then(|| parts.join(", "))
    }
}

/// What a node `state` means for the worker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StateClass {
    /// `READY`: usable once healthy.
    Ready,
    /// On its way somewhere by itself: wait and look again.
    Changing,
    /// The capacity is gone; only the worker's recovery brings it back.
    Lost,
    /// A value this worker does not know: not ready, and nothing is done to the node.
    Unknown,
}

/// Every node state of the TPU v2 API, and what it means.
pub fn classify_state(state: &str) -> StateClass {
    match state {
        "READY" => StateClass::Ready,
        // Transitions the service completes by itself.
        "CREATING" | "STARTING" | "RESTARTING" | "REIMAGING" | "REPAIRING" | "STOPPING"
        | "DELETING" | "HIDING" | "UNHIDING" | "HIDDEN" => StateClass::Changing,
        // No value yet: look again rather than delete a node on a glitch.
        "STATE_UNSPECIFIED" => StateClass::Changing,
        // Preempted, stopped, at end of life or maintenance, a failed repair (`UNKNOWN`), or
        // no node at all.
        "PREEMPTED" | "TERMINATED" | "STOPPED" | "UNKNOWN" | "NOT_FOUND" => StateClass::Lost,
        _ => StateClass::Unknown,
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
    match state {
        "READY" => "ready",
        "CREATING" => "being created",
        "STARTING" => "starting",
        "RESTARTING" => "restarting",
        "REIMAGING" => "being re-imaged",
        "REPAIRING" => "being repaired",
        "STOPPING" => "stopping",
        "DELETING" => "being deleted",
        "HIDING" | "HIDDEN" | "UNHIDING" => "hidden by the service",
        "STATE_UNSPECIFIED" => "in no state yet",
        "PREEMPTED" => "preempted",
        "TERMINATED" => "terminated (maintenance or end of life)",
        "STOPPED" => "stopped",
        "UNKNOWN" => "broken (a repair failed)",
        "NOT_FOUND" => "gone (no such node)",
        _ => "in a state podq does not know",
    }
}

/// The fields of a queued resource the worker reads.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", default)]
pub struct QueuedResource {
    pub name: String,
    pub state: Option<QueuedState>,
}

#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", default)]
pub struct QueuedState {
    pub state: Option<String>,
}

impl QueuedResource {
    pub fn parse(json: &str) -> anyhow::Result<QueuedResource> {
        Ok(serde_json::from_str(json)?)
    }

    pub fn state(&self) -> &str {
        self.state
            .as_ref()
            .and_then(|s| s.state.as_deref())
            .unwrap_or("STATE_UNSPECIFIED")
    }
}

/// What a queued resource's state asks of the worker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QueuedClass {
    /// `ACTIVE`: its node exists.
    Active,
    /// Queued or provisioning, or on its way out: wait.
    Waiting,
    /// `SUSPENDED` or `FAILED`: it will never be allocated again; delete and recreate.
    Dead,
    Unknown,
}

pub fn classify_queued(state: &str) -> QueuedClass {
    match state {
        "ACTIVE" => QueuedClass::Active,
        "CREATING"
        | "ACCEPTED"
        | "PROVISIONING"
        | "WAITING_FOR_RESOURCES"
        | "SUSPENDING"
        | "DELETING"
        | "STATE_UNSPECIFIED" => QueuedClass::Waiting,
        "SUSPENDED" | "FAILED" => QueuedClass::Dead,
        _ => QueuedClass::Unknown,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DESCRIBE: &str = r#"{
      "acceleratorType": "v4-64",
      "apiVersion": "V2",
      "createTime": "2025-01-01T00:00:00Z",
      "health": "HEALTHY",
      "name": "projects/p/locations/us-central2-b/nodes/stable-1",
      "networkConfig": {"network": "projects/p/global/networks/default",
                        "subnetwork": "projects/p/regions/us-central2/subnetworks/default",
                        "enableExternalIps": true},
      "networkEndpoints": [
        {"accessConfig": {"externalIp": "34.1.1.1"}, "ipAddress": "10.130.0.2", "port": 8470},
        {"accessConfig": {"externalIp": "34.1.1.2"}, "ipAddress": "10.130.0.3", "port": 8470}
      ],
      "runtimeVersion": "tpu-ubuntu2204-base",
      "schedulingConfig": {"preemptible": true},
      "serviceAccount": {"email": "default", "scope": ["https://www.googleapis.com/auth/cloud-platform"]},
      "state": "READY",
      "symptoms": [{"symptomType": "LOW_MEMORY", "workerId": "3", "createTime": "2025-01-01T00:00:00Z"}]
    }"#;

    #[test]
    fn a_describe_is_read() {
        let node = Node::parse(DESCRIBE).unwrap();
        assert_eq!(node.state(), "READY");
        assert_eq!(node.health(), "HEALTHY");
        assert_eq!(node.network_endpoints.len(), 2);
        assert_eq!(node.coordinator_ip(), Some("10.130.0.2"));
        assert_eq!(node.accelerator_type.as_deref(), Some("v4-64"));
        assert!(node.scheduling_config.as_ref().unwrap().preemptible);
        assert_eq!(
            node.symptoms_text().as_deref(),
            Some("LOW_MEMORY on worker 3")
        );
    }

    #[test]
    fn a_node_without_health_or_state_is_unspecified() {
        let node = Node::parse(r#"{"name": "n"}"#).unwrap();
        assert_eq!(node.state(), "STATE_UNSPECIFIED");
        assert_eq!(node.health(), "HEALTH_UNSPECIFIED");
        assert_eq!(classify_health(node.health()), HealthClass::Unhealthy);
    }

    #[test]
    fn every_documented_value_is_mapped() {
        for state in [
            "STATE_UNSPECIFIED",
            "CREATING",
            "READY",
            "RESTARTING",
            "REIMAGING",
            "DELETING",
            "REPAIRING",
            "STOPPED",
            "STOPPING",
            "STARTING",
            "PREEMPTED",
            "TERMINATED",
            "HIDING",
            "HIDDEN",
            "UNHIDING",
            "UNKNOWN",
        ] {
            assert_ne!(classify_state(state), StateClass::Unknown, "{state}");
            assert_ne!(describe_state(state), describe_state("SOMETHING_NEW"));
        }
        assert_eq!(classify_state("SOMETHING_NEW"), StateClass::Unknown);
        for health in [
            "HEALTH_UNSPECIFIED",
            "HEALTHY",
            "TIMEOUT",
            "UNHEALTHY_TENSORFLOW",
            "UNHEALTHY_MAINTENANCE",
        ] {
            assert_ne!(classify_health(health), HealthClass::Unknown, "{health}");
        }
        for state in [
            "CREATING",
            "ACCEPTED",
            "PROVISIONING",
            "FAILED",
            "DELETING",
            "ACTIVE",
            "SUSPENDING",
            "SUSPENDED",
            "WAITING_FOR_RESOURCES",
        ] {
            assert_ne!(classify_queued(state), QueuedClass::Unknown, "{state}");
        }
        assert_eq!(classify_queued("SUSPENDED"), QueuedClass::Dead);
        assert_eq!(classify_queued("FAILED"), QueuedClass::Dead);
    }

    #[test]
    fn a_queued_resource_is_read() {
        let qr = QueuedResource::parse(
            r#"{"name": "projects/p/locations/z/queuedResources/qr", "state": {"state": "WAITING_FOR_RESOURCES", "stateInitiator": "USER"}}"#,
        )
        .unwrap();
        assert_eq!(qr.state(), "WAITING_FOR_RESOURCES");
    }
}
