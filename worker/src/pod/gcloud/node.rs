//! `gcloud compute tpus tpu-vm describe --format=json` and `queued-resources describe`, and
//! what their `state` and `health` values mean for the worker (TPU_FACTS.md).

use std::collections::BTreeMap;

use serde::Deserialize;

/// The fields of a TPU node the worker reads.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", default)]
pub struct Node {
    pub name: String,
    /// The API's id of this incarnation of the node: a recreated node has a new one.
    pub id: Option<String>,
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
    pub upcoming_maintenance: Option<UpcomingMaintenance>,
}

/// TPU API v2 `UpcomingMaintenance`.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", default)]
pub struct UpcomingMaintenance {
    #[serde(rename = "type")]
    pub kind: Option<String>,
    pub maintenance_status: Option<String>,
    pub window_start_time: Option<String>,
    pub window_end_time: Option<String>,
}

impl UpcomingMaintenance {
    /// Compute Engine's `UpcomingMaintenance` of an instance has the same fields
    /// (https://cloud.google.com/tpu/docs/view-maintenance-notifications).
    pub fn to_maintenance(&self) -> crate::pod::Maintenance {
        let time = |t: &Option<String>| {
            t.as_deref()
                .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok())
                .map(|t| t.with_timezone(&chrono::Utc))
        };
        crate::pod::Maintenance {
            kind: self.kind.clone().unwrap_or_else(|| "UNKNOWN_TYPE".into()),
            status: self
                .maintenance_status
                .clone()
                .unwrap_or_else(|| "UNKNOWN".into()),
            window_start: time(&self.window_start_time),
            window_end: time(&self.window_end_time),
        }
    }
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

    /// The maintenance the node announces, if any.
    pub fn maintenance(&self) -> Option<crate::pod::Maintenance> {
        self.upcoming_maintenance
            .as_ref()
            .map(UpcomingMaintenance::to_maintenance)
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

pub use crate::pod::state::{
    classify_health, classify_state, describe_state, HealthClass, StateClass,
};

/// The fields of a queued resource the worker reads.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", default)]
pub struct QueuedResource {
    pub name: String,
    pub state: Option<QueuedState>,
}

/// `QueuedResourceState` (TPU API v2): the state, and for `FAILED` the error that put it
/// there (`failedData.error`, a `google.rpc.Status`; gcloud's
/// `generated_clients/apis/tpu/v2/tpu_v2_messages.py`, `FailedData`).
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", default)]
pub struct QueuedState {
    pub state: Option<String>,
    /// `USER` or `SERVICE`: who suspended it.
    pub state_initiator: Option<String>,
    pub failed_data: Option<FailedData>,
}

#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", default)]
pub struct FailedData {
    pub error: Option<RpcStatus>,
}

/// `google.rpc.Status`: a `google.rpc.Code` number and a message.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", default)]
pub struct RpcStatus {
    pub code: Option<i64>,
    pub message: Option<String>,
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

    /// Why a `FAILED` queued resource failed, when it says.
    pub fn failure(&self) -> Option<&RpcStatus> {
        self.state.as_ref()?.failed_data.as_ref()?.error.as_ref()
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
    fn a_failed_queued_resource_says_why() {
        let qr = QueuedResource::parse(
            r#"{"name": "projects/p/locations/z/queuedResources/qr",
                "state": {"state": "FAILED", "failedData": {"error": {"code": 8,
                  "message": "Quota limit 'TPUV4sPreemptiblePodPerProjectPerZoneForTPUAPI' has been exceeded."}}}}"#,
        )
        .unwrap();
        assert_eq!(qr.state(), "FAILED");
        let error = qr.failure().unwrap();
        assert_eq!(error.code, Some(8));
        assert!(error.message.as_deref().unwrap().starts_with("Quota limit"));
        assert!(QueuedResource::parse(r#"{"state": {"state": "FAILED"}}"#)
            .unwrap()
            .failure()
            .is_none());
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
