//! The cloud of a `driver: gcloud`, `api: compute` pool: each slice is a Compute Engine
//! managed instance group (MIG) of TPU VMs, made from the pool's instance template and
//! workload policy (docs/operations/compute-engine.md, "TPU slices on Compute Engine", cites the pages).
//!
//! - create: the workload policy and the instance template are made once per pool (named
//!   `POOL-policy-<hash>` and `POOL-template-<hash>` after what they are made of; the
//!   template carries `--labels=podq-pool=POOL`, so every VM does); then `instance-groups
//!   managed create SLICE --zone=Z ... --target-size-policy-mode=bulk
//!   --description="podq-pool=POOL podq-pool-id=ID"`. That insert is DONE before any VM exists
//!   (https://docs.cloud.google.com/compute/docs/reference/rest/beta/instanceGroupManagers/
//!   insert), so a stockout or a quota error is not the create's answer: it shows later in
//!   the group's `status.bulkInstanceOperation.lastProgressCheck` while bulk creation goes
//!   on trying by itself (https://docs.cloud.google.com/compute/docs/instance-groups/
//!   view-cancel-vm-bulk-creation-in-migs). So the create watches the group until its
//!   instances exist, or an error shows, and then deletes the group (cancelling the bulk
//!   creation) and answers with that error, read by `pod::gcloud::errors` as every gcloud
//!   answer is: the waterfall moves on instead of the group waiting in a zone that is out.
//! - list: one `instance-groups managed list` for every zone at once (zonal groups of all
//!   zones are listed by default,
//!   https://cloud.google.com/sdk/gcloud/reference/compute/instance-groups/managed/list).
//!   A MIG has no labels (the `InstanceGroupManager` resource has no such field), so the
//!   pool's mark is its description, read on what is listed: the pool's name and the
//!   identity of the pool that made it (a group of a pool of the same name elsewhere is
//!   listed too, and left alone).
//! - delete: `instance-groups managed delete SLICE --zone=Z --quiet`; `NOT_FOUND` is done.
//!   The template and the policy stay for the pool's next slice (neither costs anything).

use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use serde::Deserialize;

use super::classify::{classify_create_error, CloudError, CreateError, ErrorKind, Kind, Scope};
use super::cloud::{CloudSlice, SliceCloud, SliceSpec, SliceState, POOL_ID_LABEL, POOL_LABEL};
use super::config::{Pool, Provisioning};
use crate::pod::gcloud::{
    instance_rank, CallError, ComputeSettings, ComputeSliceSpec, EnsureError, ErrorItem,
    GroupStatus, Place, ProvisioningModel, Retry, Runner,
};
use crate::pod::state::{classify_compute, StateClass};

const CALL_TIMEOUT: Duration = Duration::from_secs(120);
const OPERATION_TIMEOUT: Duration = Duration::from_secs(900);
/// How long a group may stay without instances and without an error before the create
/// gives up on its zone: bulk creation waits for the whole slice's capacity.
const CREATE_TIMEOUT: Duration = Duration::from_secs(1800);

/// A pool's slices as Compute Engine groups.
pub struct ComputeCloud {
    pub runner: Runner,
    pub project: String,
    /// The worker config's `gcloud.compute` section, with the pool's provisioning model and
    /// label.
    pub settings: ComputeSettings,
    /// Between two looks at a group being created (`gcloud.poll_s`).
    pub poll: Duration,
}

/// The fields of a listed group the pool reads.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct ListedGroup {
    name: String,
    /// The zone's URL, `.../zones/Z` (a regional group has `region` instead).
    #[serde(default)]
    zone: Option<String>,
    #[serde(default)]
    description: Option<String>,
    #[serde(default)]
    creation_timestamp: Option<DateTime<chrono::FixedOffset>>,
    #[serde(default)]
    target_size: Option<u32>,
    #[serde(default)]
    status: GroupStatus,
}

impl ComputeCloud {
    /// The cloud of `pool`, if Compute Engine can make its slices: the settings are checked
    /// as a slice's worker checks them, in the pool's first zone.
    pub fn new(
        runner: Runner,
        project: Option<String>,
        mut settings: ComputeSettings,
        pool: &Pool,
        poll: Duration,
    ) -> anyhow::Result<ComputeCloud> {
        let Some(project) = project else {
            anyhow::bail!(
                "an api: compute pool needs a project (the pool's `project`, or gcloud.project \
                 in the worker config): its workload policy is named by its full path"
            );
        };
        settings.provisioning_model = model_of(pool.provisioning);
        settings
            .template_args
            .push(format!("--labels={POOL_LABEL}={}", pool.name));
        let cloud = ComputeCloud {
            runner,
            project,
            settings,
            poll,
        };
        let first_zone = pool.zones.first().map_or("", |z| z.zone.as_str());
        cloud.slice_spec(&pool.name, &pool.accelerator, first_zone)?;
        Ok(cloud)
    }

    /// The policy and template of `pool`'s slices in `zone` (its group named after the pool
    /// until the caller names it).
    fn slice_spec(
        &self,
        pool: &str,
        accelerator: &str,
        zone: &str,
    ) -> anyhow::Result<ComputeSliceSpec> {
        self.settings
            .slice(pool, accelerator, zone, Some(&self.project))
    }

    /// `instance-groups managed create` for `spec`, marked as `pool`'s.
    fn create_group_args(spec: &ComputeSliceSpec, zone: &str, mark: &str) -> Vec<String> {
        let mut args = spec.create_group(zone);
        args.push(format!("--description={mark}"));
        args
    }

    /// Makes the resource `describe` does not find with `create`; one made meanwhile by
    /// another call is as good. `Err` is gcloud's refusal, classified.
    async fn ensure(&self, describe: Vec<String>, create: Vec<String>) -> Result<(), CreateError> {
        match self
            .runner
            .ensure(&describe, &create, CALL_TIMEOUT, OPERATION_TIMEOUT)
            .await
        {
            Ok(()) => Ok(()),
            Err(EnsureError::Describe(e) | EnsureError::Create(e)) => Err(e.reading().into()),
        }
    }

    /// Looks at group `spec.group` until its instances exist (`Ok`), or creation reports
    /// an error or times out (`Err`, the group deleted).
    async fn watch(&self, spec: &ComputeSliceSpec, zone: &str) -> Result<(), CreateError> {
        let describe = spec.on(
            &["instance-groups", "managed", "describe"],
            &spec.group,
            Place::Zone(zone),
            &["--format=json"],
        );
        let deadline = tokio::time::Instant::now() + CREATE_TIMEOUT;
        let why = loop {
            match self.runner.call(&describe, CALL_TIMEOUT, Retry::Api).await {
                Ok(out) => {
                    let group: ListedGroup = serde_json::from_str(&out.stdout).map_err(|e| {
                        CreateError::transient(format!(
                            "instance-groups managed describe answered JSON podq cannot read: {e}"
                        ))
                    })?;
                    match creation(&group.status) {
                        Creation::Made => return Ok(()),
                        Creation::Refused(errors) => break classify_create_error(&errors),
                        Creation::Waiting => {}
                    }
                }
                Err(CallError::NotFound(_)) => {
                    return Err(CreateError::transient(format!(
                        "group {} vanished while it was being created",
                        spec.group
                    )))
                }
                Err(e) => {
                    tracing::warn!(group = %spec.group, error = %e, "cannot look at a group being created")
                }
            }
            if tokio::time::Instant::now() >= deadline {
                break CreateError::transient(format!(
                    "group {} had no instances after {} s of bulk creation",
                    spec.group,
                    CREATE_TIMEOUT.as_secs()
                ));
            }
            tokio::time::sleep(self.poll).await;
        };
        // Deleting the group cancels its bulk creation; a group left behind would be
        // listed and deleted as one the pool does not hold.
        if let Err(e) = self.delete(&spec.group, zone).await {
            tracing::warn!(group = %spec.group, error = %e, "cannot delete a group whose creation failed");
        }
        Err(why)
    }
}

/// The description that marks a group as `pool`'s, made by the pool of identity `owner`.
fn mark(pool: &str, owner: &str) -> String {
    format!("{POOL_LABEL}={pool} {POOL_ID_LABEL}={owner}")
}

/// The pool and the identity a group's description names (a group made before pools had
/// identities names only its pool).
fn read_mark(description: &str) -> (Option<&str>, Option<&str>) {
    let mut words = description.split_whitespace();
    let pool = words
        .next()
        .and_then(|w| w.strip_prefix(POOL_LABEL)?.strip_prefix('='));
    let owner = words
        .next()
        .and_then(|w| w.strip_prefix(POOL_ID_LABEL)?.strip_prefix('='));
    (pool, owner)
}

pub(super) fn model_of(provisioning: Provisioning) -> ProvisioningModel {
    match provisioning {
        Provisioning::Spot => ProvisioningModel::Spot,
        Provisioning::Standard => ProvisioningModel::Standard,
        Provisioning::FlexStart => ProvisioningModel::FlexStart,
        Provisioning::ReservationBound => ProvisioningModel::ReservationBound,
    }
}

/// How far a group's bulk creation is.
#[derive(Debug, PartialEq)]
enum Creation {
    /// Its instances exist (or, for flex-start, wait for capacity as `PENDING` instances).
    Made,
    /// Still trying, and saying why it cannot: the errors as `CODE: message` lines.
    Refused(String),
    /// Still trying, no error yet.
    Waiting,
}

fn creation(status: &GroupStatus) -> Creation {
    let Some(op) = &status.bulk_instance_operation else {
        return Creation::Made;
    };
    let errors: Vec<&ErrorItem> = op
        .last_progress_check
        .iter()
        .flat_map(|check| check.error.iter())
        .flat_map(|e| e.errors.iter())
        .collect();
    if op.in_progress && !errors.is_empty() {
        let lines: Vec<String> = errors
            .iter()
            .map(|e| format!("{}: {}", e.code, e.message))
            .collect();
        return Creation::Refused(lines.join("\n"));
    }
    if !op.in_progress || !status.current_instance_statuses.is_empty() {
        Creation::Made
    } else {
        Creation::Waiting
    }
}

/// A listed group's state in the words a pool acts on. A group whose creation reports an
/// error is only listed so after the pool was killed while watching it: it is given back
/// as a lost slice (the pool deletes it and makes another), not waited on forever.
fn group_state(group: &ListedGroup, spot: bool) -> SliceState {
    let status = &group.status;
    match creation(status) {
        Creation::Refused(_) => return SliceState::Preempted,
        Creation::Waiting => return SliceState::Creating,
        Creation::Made => {}
    }
    let counted: u32 = status.current_instance_statuses.values().sum();
    let state = if counted < group.target_size.unwrap_or(counted) {
        "MISSING".to_owned()
    } else {
        status
            .current_instance_statuses
            .keys()
            .map(|s| s.to_uppercase())
            .min_by_key(|s| instance_rank(s))
            .unwrap_or_else(|| "MISSING".into())
    };
    let topology = status
        .applied_accelerator_topologies
        .first()
        .and_then(|t| t.state.clone())
        .unwrap_or_default();
    match classify_compute(&state, &topology) {
        StateClass::Ready => SliceState::Ready,
        StateClass::Lost => SliceState::Preempted,
        // Spot is never repaired: "to restart a Spot VMs instance or MIG, you must delete
        // and then recreate it" (https://docs.cloud.google.com/tpu/docs/spot-compute).
        StateClass::Repairing if spot => SliceState::Preempted,
        _ => SliceState::Creating,
    }
}

/// The groups of one listing that carry `pool`'s mark, in the pool's words.
fn parse_listing(json: &str, pool: &str, spot: bool) -> Result<Vec<CloudSlice>, CloudError> {
    let groups: Vec<ListedGroup> = serde_json::from_str(json).map_err(|e| {
        CloudError::new(
            Kind::Unknown,
            Scope::Zone,
            format!("instance-groups managed list answered JSON podq cannot read: {e}"),
        )
    })?;
    Ok(groups
        .into_iter()
        .filter_map(|g| {
            let (marked, owner) = read_mark(g.description.as_deref().unwrap_or_default());
            if marked != Some(pool) {
                return None;
            }
            let owner = owner.map(str::to_owned);
            let zone = g.zone.as_deref()?.rsplit('/').next()?.to_owned();
            Some(CloudSlice {
                owner,
                state: group_state(&g, spot),
                created_at: g
                    .creation_timestamp
                    .map_or_else(Utc::now, |t| t.with_timezone(&Utc)),
                name: g.name,
                zone,
            })
        })
        .collect())
}

#[async_trait]
impl SliceCloud for ComputeCloud {
    async fn create(&self, slice: &SliceSpec) -> Result<(), CreateError> {
        let mut spec = self
            .slice_spec(&slice.pool, &slice.accelerator, &slice.zone)
            .map_err(|e| CreateError::new(ErrorKind::Invalid, Scope::Pool, format!("{e:#}")))?;
        spec.group = slice.name.clone();
        self.ensure(spec.describe_policy(), spec.create_policy())
            .await?;
        self.ensure(spec.describe_template(), spec.create_template())
            .await?;
        let create =
            ComputeCloud::create_group_args(&spec, &slice.zone, &mark(&slice.pool, &slice.owner));
        match self
            .runner
            .call(&create, OPERATION_TIMEOUT, Retry::Never)
            .await
        {
            Ok(_) => {}
            // Asked for before a crash (the same request, watched again), or another owner's.
            Err(e) => match e.reading() {
                read if read.kind == Kind::AlreadyExists => self.check_owner(slice).await?,
                read => return Err(read.into()),
            },
        }
        self.watch(&spec, &slice.zone).await
    }

    async fn delete(&self, name: &str, zone: &str) -> Result<(), CloudError> {
        let mut args: Vec<String> = self.settings.track.iter().cloned().collect();
        args.extend(
            ["compute", "instance-groups", "managed", "delete", name]
                .iter()
                .map(|s| s.to_string()),
        );
        args.push(format!("--zone={zone}"));
        args.push(format!("--project={}", self.project));
        args.push("--quiet".into());
        match self.runner.call(&args, OPERATION_TIMEOUT, Retry::Api).await {
            Ok(_) => Ok(()),
            Err(e) => match e.reading() {
                read if read.kind == Kind::NotFound => Ok(()),
                read => Err(read),
            },
        }
    }

    async fn list(&self, pool: &str) -> Result<Vec<CloudSlice>, CloudError> {
        let mut args: Vec<String> = self.settings.track.iter().cloned().collect();
        args.extend(
            ["compute", "instance-groups", "managed", "list"]
                .iter()
                .map(|s| s.to_string()),
        );
        args.push(format!("--project={}", self.project));
        args.push("--format=json".into());
        let output = self
            .runner
            .call(&args, CALL_TIMEOUT, Retry::Api)
            .await
            .map_err(|e| e.reading().during("instance-groups managed list"))?;
        let spot = self.settings.provisioning_model == ProvisioningModel::Spot;
        let mut slices = parse_listing(&output.stdout, pool, spot)?;
        slices.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(slices)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn runner() -> Runner {
        Runner {
            program: "gcloud".into(),
            retries: 0,
            backoff: Duration::ZERO,
        }
    }

    fn v6e() -> ComputeSettings {
        ComputeSettings {
            machine_type: "ct6e-standard-4t".into(),
            topology: "4x4".into(),
            ..ComputeSettings::default()
        }
    }

    fn pool(accelerator: &str, project: Option<&str>) -> anyhow::Result<ComputeCloud> {
        let text = format!(
            "pools:\n  - name: trillium\n    accelerator: {accelerator}\n    max_slices: 2\n    \
             idle_after: 10m\n    provisioning: spot\n    driver: gcloud\n    api: compute\n    \
             zones: [us-east5-b]\n"
        );
        let file = super::super::config::PoolFile::parse(&text, "pools.yaml").unwrap();
        ComputeCloud::new(
            runner(),
            project.map(str::to_owned),
            v6e(),
            &file.pools[0],
            Duration::from_secs(1),
        )
    }

    #[test]
    fn a_slice_is_a_group_marked_as_the_pools_of_vms_labelled_as_its() {
        let cloud = pool("v6e-16", Some("proj")).unwrap();
        let mut spec = cloud
            .slice_spec("trillium", "v6e-16", "us-east5-b")
            .unwrap();
        spec.group = "trillium-4".into();
        let template = spec.create_template();
        assert!(template.contains(&"--labels=podq-pool=trillium".to_owned()));
        assert!(template.contains(&"--provisioning-model=SPOT".to_owned()));
        assert!(spec.template.starts_with("trillium-template-"));
        let create = ComputeCloud::create_group_args(&spec, "us-east5-b", &mark("trillium", "a1"));
        assert_eq!(
            create[..5],
            [
                "compute",
                "instance-groups",
                "managed",
                "create",
                "trillium-4"
            ]
        );
        assert!(create.contains(&"--description=podq-pool=trillium podq-pool-id=a1".to_owned()));
        assert!(create.contains(&"--size=4".to_owned()));
        // A v4 is not offered on Compute Engine; a pool without a project cannot name its
        // policy: both refused when the pool starts.
        let refused = |accelerator: &str, project: Option<&str>| {
            pool(accelerator, project)
                .err()
                .map(|e| e.to_string())
                .unwrap_or_default()
        };
        assert!(refused("v4-64", Some("proj")).contains("Cloud TPU API"));
        assert!(refused("v6e-16", None).contains("project"));
    }

    fn group(json: serde_json::Value) -> ListedGroup {
        serde_json::from_value(json).unwrap()
    }

    #[test]
    fn a_groups_creation_and_state_are_read_from_its_status() {
        let waiting = group(serde_json::json!({"name": "a", "targetSize": 4, "status": {
            "bulkInstanceOperation": {"inProgress": true, "lastProgressCheck": {}}}}));
        assert_eq!(creation(&waiting.status), Creation::Waiting);
        assert_eq!(group_state(&waiting, true), SliceState::Creating);
        let out = group(serde_json::json!({"name": "a", "targetSize": 4, "status": {
            "bulkInstanceOperation": {"inProgress": true, "lastProgressCheck": {"error": {
                "errors": [{"code": "ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS",
                            "message": "The zone 'projects/p/zones/z' does not have enough resources available to fulfill the request."}]}}}}}));
        let Creation::Refused(text) = creation(&out.status) else {
            panic!("an error while in progress is a refusal");
        };
        assert!(text.starts_with("ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS: The zone"));
        assert_eq!(
            super::super::classify::classify_create_error(&text).kind,
            super::super::classify::ErrorKind::Stockout
        );
        assert_eq!(group_state(&out, true), SliceState::Preempted);
        let up = |statuses: serde_json::Value, topology: &str| {
            group(serde_json::json!({"name": "a", "targetSize": 4, "status": {
                "bulkInstanceOperation": {"inProgress": false},
                "currentInstanceStatuses": statuses,
                "appliedAcceleratorTopologies": [{"acceleratorTopology": "4x4", "state": topology}]}}))
        };
        assert_eq!(
            group_state(&up(serde_json::json!({"running": 4}), "ACTIVE"), true),
            SliceState::Ready
        );
        assert_eq!(
            group_state(&up(serde_json::json!({"running": 4}), "ACTIVATING"), true),
            SliceState::Creating
        );
        assert_eq!(
            group_state(
                &up(
                    serde_json::json!({"running": 3, "staging": 1}),
                    "ACTIVATING"
                ),
                true
            ),
            SliceState::Creating
        );
        assert_eq!(
            group_state(
                &up(
                    serde_json::json!({"running": 2, "terminated": 2}),
                    "INCOMPLETE"
                ),
                true
            ),
            SliceState::Preempted
        );
        // Instances deleted (flex-start's end, termination action DELETE): fewer than its size.
        assert_eq!(
            group_state(&up(serde_json::json!({"running": 2}), "INCOMPLETE"), false),
            SliceState::Preempted
        );
        let repairing = up(
            serde_json::json!({"repairing": 1, "running": 3}),
            "REACTIVATING",
        );
        assert_eq!(group_state(&repairing, false), SliceState::Creating);
        assert_eq!(group_state(&repairing, true), SliceState::Preempted);
    }

    #[test]
    fn a_listing_keeps_the_pools_groups_only() {
        let json = r#"[
          {"name": "t-1", "zone": "https://www.googleapis.com/compute/v1/projects/p/zones/us-east5-b",
           "description": "podq-pool=t podq-pool-id=a1", "creationTimestamp": "2026-11-28T01:00:00.000-07:00",
           "targetSize": 4, "status": {"bulkInstanceOperation": {"inProgress": false},
           "currentInstanceStatuses": {"running": 4},
           "appliedAcceleratorTopologies": [{"state": "ACTIVE"}]}},
          {"name": "t-2", "zone": "https://www.googleapis.com/compute/v1/projects/p/zones/us-east5-a",
           "description": "podq-pool=t2", "targetSize": 4},
          {"name": "t-3", "zone": "https://www.googleapis.com/compute/v1/projects/p/zones/us-east5-a",
           "targetSize": 4},
          {"name": "t-4", "zone": "https://www.googleapis.com/compute/v1/projects/p/zones/us-east5-a",
           "description": "podq-pool=t", "targetSize": 4}
        ]"#;
        let slices = parse_listing(json, "t", true).unwrap();
        assert_eq!(slices.len(), 2, "{slices:?}");
        assert_eq!(slices[0].owner.as_deref(), Some("a1"));
        assert_eq!(
            (slices[1].name.as_str(), slices[1].owner.as_deref()),
            ("t-4", None)
        );
        assert_eq!(slices[0].name, "t-1");
        assert_eq!(slices[0].zone, "us-east5-b");
        assert_eq!(slices[0].state, SliceState::Ready);
        assert_eq!(
            slices[0].created_at.to_rfc3339(),
            "2026-11-28T08:00:00+00:00"
        );
        assert!(parse_listing("{", "t", true).is_err());
    }
}
