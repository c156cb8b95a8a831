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

/// What an error of the TPU API asks of the worker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorClass {
    /// No capacity now (a stockout, a reservation that is full, a `valid until` that
    /// expired) or a passing fault: the same request may succeed later. Back off, retry.
    Capacity,
    /// A quota the project does not have: asking again changes nothing until a person
    /// raises it (or frees what uses it).
    Quota,
    /// The request itself is wrong or not allowed (bad accelerator type or runtime
    /// version, a network that does not exist, no permission): it can never succeed.
    Invalid,
}

impl ErrorClass {
    /// Asking again cannot help: the worker stops and reports.
    pub fn holds(self) -> bool {
        !matches!(self, ErrorClass::Capacity)
    }

    pub fn describe(self) -> &'static str {
        match self {
            ErrorClass::Capacity => "no capacity",
            ErrorClass::Quota => "over quota",
            ErrorClass::Invalid => "the request is invalid or not allowed",
        }
    }
}

/// The `google.rpc.Code` names, by number.
const RPC_CODES: [&str; 17] = [
    "OK",
    "CANCELLED",
    "UNKNOWN",
    "INVALID_ARGUMENT",
    "DEADLINE_EXCEEDED",
    "NOT_FOUND",
    "ALREADY_EXISTS",
    "PERMISSION_DENIED",
    "RESOURCE_EXHAUSTED",
    "FAILED_PRECONDITION",
    "ABORTED",
    "OUT_OF_RANGE",
    "UNIMPLEMENTED",
    "INTERNAL",
    "UNAVAILABLE",
    "DATA_LOSS",
    "UNAUTHENTICATED",
];

/// The `google.rpc.Code` of an error as gcloud prints it: `{"code": 8, "message": ...}`
/// (a failed operation), `RESOURCE_EXHAUSTED: ...` (a refused request), or an HTTP status.
pub fn error_code(text: &str) -> Option<i64> {
    if let Some(at) = text.find("\"code\"") {
        let digits: String = text[at + 6..]
            .trim_start_matches(|c: char| c == ':' || c.is_whitespace())
            .chars()
            .take_while(char::is_ascii_digit)
            .collect();
        if let Ok(code) = digits.parse() {
            return Some(code);
        }
    }
    if let Some(code) = RPC_CODES.iter().position(|name| {
        text.match_indices(name).any(|(i, _)| {
            let before = text[..i].chars().next_back();
            let after = text[i + name.len()..].chars().next();
            !before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_')
                && !after.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_')
        })
    }) {
        if code > 0 {
            return Some(code as i64);
        }
    }
    for (http, code) in [
        ("400", 3),
        ("401", 16),
        ("403", 7),
        ("404", 5),
        ("409", 6),
        ("429", 8),
        ("500", 13),
        ("503", 14),
    ] {
        if text.contains(&format!("HttpError {http}")) || text.contains(&format!("Error {http}")) {
            return Some(code);
        }
    }
    None
}

/// What an API error means for the next create: the `google.rpc.Code` when known, and the
/// message, whose words tell a quota (`Quota limit '...' has been exceeded`, `Quota '...'
/// exhausted`) from a stockout (`There is no more capacity in the zone ...`), both
/// `RESOURCE_EXHAUSTED`.
pub fn classify_error(code: Option<i64>, message: &str) -> ErrorClass {
    let lower = message.to_ascii_lowercase();
    if lower.contains("quota") {
        return ErrorClass::Quota;
    }
    match code {
        // INVALID_ARGUMENT, NOT_FOUND (a network, disk or accelerator type), PERMISSION_DENIED,
        // FAILED_PRECONDITION, OUT_OF_RANGE, UNIMPLEMENTED, UNAUTHENTICATED.
        Some(3 | 5 | 7 | 9 | 11 | 12 | 16) => ErrorClass::Invalid,
        _ if lower.contains("bad request") || lower.contains("is not valid") => ErrorClass::Invalid,
        _ => ErrorClass::Capacity,
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
        assert_eq!(
            classify_error(error.code, error.message.as_deref().unwrap()),
            ErrorClass::Quota
        );
        assert!(QueuedResource::parse(r#"{"state": {"state": "FAILED"}}"#)
            .unwrap()
            .failure()
            .is_none());
    }

    #[test]
    fn errors_are_told_apart() {
        let stockout = "ERROR: (gcloud.compute.tpus.tpu-vm.create) {\"code\": 8, \"message\": \"There is no more capacity in the zone \\\"us-central2-b\\\"; you can try in another zone\"}";
        assert_eq!(error_code(stockout), Some(8));
        assert_eq!(
            classify_error(error_code(stockout), stockout),
            ErrorClass::Capacity
        );
        let quota = "ERROR: (gcloud.compute.tpus.queued-resources.create) RESOURCE_EXHAUSTED: \
                     Quota 'TPUV4sPreemptiblePodPerProjectPerRegionForTPUAPI' exhausted. Limit 0";
        assert_eq!(error_code(quota), Some(8));
        assert_eq!(classify_error(error_code(quota), quota), ErrorClass::Quota);
        let invalid = "ERROR: (gcloud.compute.tpus.tpu-vm.create) INVALID_ARGUMENT: \
                       Cloud TPU received a bad request. the accelerator v4-128 was not found";
        assert_eq!(error_code(invalid), Some(3));
        assert_eq!(classify_error(Some(3), invalid), ErrorClass::Invalid);
        assert_eq!(
            classify_error(Some(7), "Permission denied"),
            ErrorClass::Invalid
        );
        assert_eq!(
            classify_error(Some(4), "valid until expired"),
            ErrorClass::Capacity
        );
        assert_eq!(
            classify_error(None, "connection reset"),
            ErrorClass::Capacity
        );
        assert_eq!(error_code("HttpError 429 when requesting"), Some(8));
        assert_eq!(error_code("NOT_FOUNDX"), None);
        assert!(ErrorClass::Quota.holds() && !ErrorClass::Capacity.holds());
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
