//! What Compute Engine says of a slice, read from three calls, and summed up as the pod's
//! status:
//! - `instance-groups managed describe`: the bulk creation's progress and its errors
//!   (`status.bulkInstanceOperation`), the instances per state
//!   (`status.currentInstanceStatuses`), the topology's state
//!   (`status.appliedAcceleratorTopologies`);
//! - `instance-groups managed list-instances`: which instances the group holds, and each
//!   one's `instanceStatus`;
//! - `instances describe`, per instance: its worker index (metadata `tpu-env`'s
//!   `TPU_WORKER_ID`), internal address, announced maintenance
//!   (`resourceStatus.upcomingMaintenance`) and max run duration.
//!
//! Sources: Compute v1 `InstanceGroupManagerStatus`, `ManagedInstance.InstanceStatus`,
//! `InstanceGroupManagerStatusAcceleratorTopology.State`, `UpcomingMaintenance`,
//! `Scheduling` (client library references), and https://docs.cloud.google.com/compute/
//! docs/instance-groups/view-cancel-vm-bulk-creation-in-migs.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde::Deserialize;

use crate::pod::gcloud::node::UpcomingMaintenance;
use crate::pod::{Maintenance, PodApi, PodStatus};

/// The fields of a MIG the worker reads.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", default)]
pub struct Group {
    pub id: Option<String>,
    pub target_size: Option<u32>,
    /// The template's URL: the last path segment is its name.
    pub instance_template: Option<String>,
    pub resource_policies: GroupPolicies,
    /// Instances per action under way: `creating`, `recreating`, `deleting`, ...
    pub current_actions: BTreeMap<String, u32>,
    pub status: GroupStatus,
}

#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", default)]
pub struct GroupPolicies {
    /// The workload policy's URL.
    pub workload_policy: Option<String>,
}

fn last_segment(url: Option<&str>) -> Option<String> {
    url.and_then(|u| u.rsplit('/').next())
        .filter(|name| !name.is_empty())
        .map(str::to_owned)
}

impl Group {
    pub fn template_name(&self) -> Option<String> {
        last_segment(self.instance_template.as_deref())
    }

    pub fn policy_name(&self) -> Option<String> {
        last_segment(self.resource_policies.workload_policy.as_deref())
    }
}

#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", default)]
pub struct GroupStatus {
    pub is_stable: bool,
    pub bulk_instance_operation: Option<BulkOperation>,
    pub current_instance_statuses: BTreeMap<String, u32>,
    pub applied_accelerator_topologies: Vec<Topology>,
}

#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", default)]
pub struct BulkOperation {
    pub in_progress: bool,
    pub last_progress_check: Option<ProgressCheck>,
}

#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", default)]
pub struct ProgressCheck {
    pub timestamp: Option<String>,
    pub error: Option<Errors>,
}

#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(default)]
pub struct Errors {
    pub errors: Vec<ErrorItem>,
}

#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(default)]
pub struct ErrorItem {
    pub code: String,
    pub message: String,
}

#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", default)]
pub struct Topology {
    pub accelerator_topology: Option<String>,
    pub state: Option<String>,
}

/// One entry of `list-instances`.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", default)]
pub struct ManagedInstance {
    pub name: String,
    /// Absent while the instance does not exist yet (bulk creation waits for the whole
    /// group's capacity); `PENDING` for flex-start waiting for capacity.
    pub instance_status: Option<String>,
    pub current_action: Option<String>,
}

/// The fields of `instances describe` the worker reads.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", default)]
pub struct Instance {
    pub name: String,
    pub id: Option<String>,
    pub status: Option<String>,
    pub network_interfaces: Vec<NetworkInterface>,
    pub metadata: Metadata,
    pub resource_status: Option<ResourceStatus>,
    pub scheduling: Option<Scheduling>,
    pub last_start_timestamp: Option<String>,
}

#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", default)]
pub struct NetworkInterface {
    #[serde(rename = "networkIP")]
    pub network_ip: Option<String>,
}

#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(default)]
pub struct Metadata {
    pub items: Vec<MetadataItem>,
}

#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(default)]
pub struct MetadataItem {
    pub key: String,
    pub value: String,
}

#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", default)]
pub struct ResourceStatus {
    pub upcoming_maintenance: Option<UpcomingMaintenance>,
}

#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", default)]
pub struct Scheduling {
    pub max_run_duration: Option<Duration>,
    /// "the instance termination action will be performed at the termination time".
    pub termination_time: Option<String>,
}

/// A protobuf `Duration` as JSON carries it: seconds as a string.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(default)]
pub struct Duration {
    pub seconds: serde_json::Value,
}

fn time(text: Option<&str>) -> Option<DateTime<Utc>> {
    text.and_then(|t| DateTime::parse_from_rfc3339(t).ok())
        .map(|t| t.with_timezone(&Utc))
}

impl Instance {
    /// The instance's worker index, from metadata `tpu-env` (`TPU_WORKER_ID: '2'`), else
    /// `worker-id` (both field notes, unconfirmed by a doc).
    pub fn worker_id(&self) -> Option<u32> {
        let item = |key: &str| {
            self.metadata
                .items
                .iter()
                .find(|i| i.key == key)
                .map(|i| i.value.as_str())
        };
        let from_env = item("tpu-env").and_then(|env| {
            env.lines().find_map(|line| {
                let (key, value) = line.split_once(':')?;
                (key.trim() == "TPU_WORKER_ID")
                    .then(|| value.trim().trim_matches(['\'', '"']).parse().ok())
                    .flatten()
            })
        });
        from_env.or_else(|| item("worker-id").and_then(|v| v.trim().parse().ok()))
    }

    pub fn internal_ip(&self) -> Option<&str> {
        self.network_interfaces.first()?.network_ip.as_deref()
    }

    /// When the instance is deleted or stopped by itself: its termination time, else its
    /// last start plus its max run duration.
    pub fn capacity_ends(&self) -> Option<DateTime<Utc>> {
        let scheduling = self.scheduling.as_ref()?;
        if let Some(at) = time(scheduling.termination_time.as_deref()) {
            return Some(at);
        }
        let seconds = match &scheduling.max_run_duration.as_ref()?.seconds {
            serde_json::Value::String(s) => s.parse::<i64>().ok()?,
            serde_json::Value::Number(n) => n.as_i64()?,
            _ => return None,
        };
        Some(time(self.last_start_timestamp.as_deref())? + chrono::TimeDelta::seconds(seconds))
    }
}

/// One host of the slice: the instance that is worker `index`.
#[derive(Debug, Clone, PartialEq)]
pub struct Host {
    pub instance: String,
    pub ip: Option<String>,
}

/// The slice as the last look saw it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Slice {
    pub group: Option<Group>,
    pub instances: Vec<ManagedInstance>,
    /// The described instances (those that exist), in host order once every index is known.
    pub described: Vec<Instance>,
}

/// How far along an instance is, least first: the slice is as far as its least instance.
/// One instance being repaired makes the slice repairing (Compute Engine recovers a
/// multi-host slice whole, and its other instances may read anything meanwhile).
pub(crate) fn rank(status: &str) -> u8 {
    match status {
        "REPAIRING" => 0,
        "TERMINATED" | "STOPPED" | "SUSPENDING" | "SUSPENDED" | "DEPROVISIONING" => 1,
        "STOPPING" | "PENDING_STOP" => 2,
        "PENDING" => 3,
        "CREATING" => 4,
        "PROVISIONING" => 5,
        "STAGING" => 6,
        "RUNNING" => 7,
        _ => 8,
    }
}

impl Slice {
    /// The slice's state in Compute Engine's words (see `state::classify_compute`): the
    /// least advanced instance's, `MISSING` when the group holds fewer instances than its
    /// size and is not creating them, `NOT_FOUND` without a group.
    pub fn state(&self) -> String {
        let Some(group) = &self.group else {
            return "NOT_FOUND".into();
        };
        // Just after the create call no instance may be listed yet: the insert operation is
        // done before any VM exists (Compute v1 instanceGroupManagers.insert).
        let creating = group
            .status
            .bulk_instance_operation
            .as_ref()
            .is_some_and(|op| op.in_progress)
            || group
                .current_actions
                .get("creating")
                .is_some_and(|&n| n > 0);
        let size = group.target_size.unwrap_or(self.instances.len() as u32);
        if !creating && (self.instances.len() as u32) < size {
            return "MISSING".into();
        }
        if self.instances.is_empty() {
            return if creating { "CREATING" } else { "MISSING" }.into();
        }
        self.instances
            .iter()
            .map(|i| {
                i.instance_status
                    .clone()
                    .unwrap_or_else(|| "CREATING".into())
            })
            .min_by_key(|s| rank(s))
            .unwrap_or_else(|| "MISSING".into())
    }

    /// The group's instances per state, for messages: `4 provisioning`.
    pub fn instance_counts(&self) -> String {
        let counts: Vec<String> = self
            .group
            .iter()
            .flat_map(|g| &g.status.current_instance_statuses)
            .map(|(state, n)| format!("{n} {state}"))
            .collect();
        if counts.is_empty() {
            "no instance yet".into()
        } else {
            counts.join(", ")
        }
    }

    /// The accelerator topology's state (`""` before the group applied one).
    pub fn topology(&self) -> String {
        self.group
            .as_ref()
            .and_then(|g| g.status.applied_accelerator_topologies.first())
            .and_then(|t| t.state.clone())
            .unwrap_or_default()
    }

    /// Why the bulk creation is not done: the last progress check's errors
    /// (`ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS`, `QUOTA_EXCEEDED`, ...).
    pub fn creation_errors(&self) -> Vec<ErrorItem> {
        self.group
            .as_ref()
            .and_then(|g| g.status.bulk_instance_operation.as_ref())
            .filter(|op| op.in_progress)
            .and_then(|op| op.last_progress_check.as_ref())
            .and_then(|check| check.error.as_ref())
            .map(|e| e.errors.clone())
            .unwrap_or_default()
    }

    /// The hosts in worker order, when every instance's index is known and they are
    /// exactly 0..n; else why not.
    pub fn hosts(&self) -> Result<Vec<Host>, String> {
        let mut by_index = BTreeMap::new();
        for instance in &self.described {
            let Some(index) = instance.worker_id() else {
                return Err(format!(
                    "instance {} has no TPU_WORKER_ID in its tpu-env metadata",
                    instance.name
                ));
            };
            if let Some(other) = by_index.insert(
                index,
                Host {
                    instance: instance.name.clone(),
                    ip: instance.internal_ip().map(str::to_owned),
                },
            ) {
                return Err(format!(
                    "instances {} and {} both say they are worker {index}",
                    other.instance, instance.name
                ));
            }
        }
        if !by_index.keys().copied().eq(0..by_index.len() as u32) {
            return Err(format!(
                "the instances' worker ids are {:?}, not 0 to {}",
                by_index.keys().collect::<Vec<_>>(),
                by_index.len().saturating_sub(1)
            ));
        }
        Ok(by_index.into_values().collect())
    }

    /// The earliest maintenance any instance announces: starting it on one instance puts
    /// every instance of the slice into maintenance
    /// (https://cloud.google.com/tpu/docs/manually-start-maintenance).
    pub fn maintenance(&self) -> Option<Maintenance> {
        self.described
            .iter()
            .filter_map(|i| i.resource_status.as_ref()?.upcoming_maintenance.as_ref())
            .map(UpcomingMaintenance::to_maintenance)
            .min_by_key(|m| (m.status != "ONGOING", m.window_start))
    }

    /// The slice as a pod status. `repaired`: Compute Engine repairs this slice by itself
    /// (managed capacity); a Spot slice is never repaired, so its repair states read
    /// `UNREPAIRED`, a loss (https://docs.cloud.google.com/tpu/docs/failure-recovery).
    pub fn status(&self, repaired: bool) -> PodStatus {
        let (mut state, topology) = (self.state(), self.topology());
        if !repaired
            && crate::pod::state::classify_compute(&state, &topology)
                == crate::pod::state::StateClass::Repairing
        {
            state = "UNREPAIRED".into();
        }
        PodStatus {
            api: PodApi::Compute,
            state,
            health: topology,
            maintenance: self.maintenance(),
            capacity_ends: self
                .described
                .iter()
                .filter_map(Instance::capacity_ends)
                .min(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GROUP_WAITING: &str = r#"{
      "name": "trillium-1", "id": "1234", "targetSize": 4,
      "instanceTemplate": "https://www.googleapis.com/compute/v1/projects/p/global/instanceTemplates/trillium-1-template",
      "status": {"isStable": false,
        "bulkInstanceOperation": {"inProgress": true, "lastProgressCheck": {
          "timestamp": "2026-11-26T12:00:00Z",
          "error": {"errors": [{"code": "ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS",
                                 "message": "no v6e capacity in us-east5-b"}]}}},
        "appliedAcceleratorTopologies": [{"acceleratorTopology": "4x4", "state": "ACTIVATING"}]}
    }"#;

    fn instance(name: &str, worker: u32, status: &str) -> Instance {
        serde_json::from_value(serde_json::json!({
            "name": name, "status": status,
            "networkInterfaces": [{"networkIP": format!("10.0.0.{}", worker + 2)}],
            "metadata": {"items": [{"key": "tpu-env",
                "value": format!("ACCELERATOR_TYPE: 'v6e-16'\nTPU_WORKER_ID: '{worker}'\n")}]},
            "scheduling": {"maxRunDuration": {"seconds": "3600"}},
            "lastStartTimestamp": "2026-11-26T12:00:00.000-00:00"
        }))
        .unwrap()
    }

    #[test]
    fn a_group_waiting_for_capacity_says_why() {
        let slice = Slice {
            group: Some(serde_json::from_str(GROUP_WAITING).unwrap()),
            instances: serde_json::from_str(
                r#"[{"name": "trillium-1-ab12", "currentAction": "CREATING"},
                    {"name": "trillium-1-cd34", "currentAction": "CREATING"}]"#,
            )
            .unwrap(),
            described: Vec::new(),
        };
        assert_eq!(slice.state(), "CREATING");
        assert_eq!(slice.topology(), "ACTIVATING");
        assert_eq!(
            slice.creation_errors()[0].code,
            "ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS"
        );
        assert!(!slice.status(true).is_ready());
    }

    #[test]
    fn hosts_are_ordered_by_their_worker_id_not_their_names() {
        let slice = Slice {
            group: None,
            instances: Vec::new(),
            described: vec![
                instance("s-aaaa", 2, "RUNNING"),
                instance("s-bbbb", 0, "RUNNING"),
                instance("s-cccc", 1, "RUNNING"),
            ],
        };
        let hosts = slice.hosts().unwrap();
        assert_eq!(hosts[0].instance, "s-bbbb");
        assert_eq!(hosts[0].ip.as_deref(), Some("10.0.0.2"));
        assert_eq!(hosts[2].instance, "s-aaaa");
        let twice = Slice {
            described: vec![instance("a", 0, "RUNNING"), instance("b", 0, "RUNNING")],
            ..Slice::default()
        };
        assert!(twice.hosts().unwrap_err().contains("both say"));
        // A flex-start VM's end: its start plus its max run duration.
        assert_eq!(
            slice.described[0].capacity_ends().unwrap().to_rfc3339(),
            "2026-11-26T13:00:00+00:00"
        );
    }

    #[test]
    fn a_spot_slice_that_lost_instances_is_lost() {
        let group: Group = serde_json::from_str(r#"{"targetSize": 4, "status": {}}"#).unwrap();
        let listed = |statuses: &[&str]| -> Vec<ManagedInstance> {
            statuses
                .iter()
                .map(|s| ManagedInstance {
                    name: "i".into(),
                    instance_status: Some((*s).into()),
                    current_action: None,
                })
                .collect()
        };
        let slice = |statuses: &[&str]| Slice {
            group: Some(group.clone()),
            instances: listed(statuses),
            described: Vec::new(),
        };
        assert_eq!(
            slice(&["RUNNING", "TERMINATED", "RUNNING", "RUNNING"]).state(),
            "TERMINATED"
        );
        assert_eq!(slice(&["RUNNING", "RUNNING"]).state(), "MISSING");
        assert_eq!(
            slice(&["RUNNING", "REPAIRING", "RUNNING", "RUNNING"]).state(),
            "REPAIRING"
        );
        assert_eq!(slice(&["RUNNING"; 4]).state(), "RUNNING");
        assert_eq!(Slice::default().state(), "NOT_FOUND");
    }
}
