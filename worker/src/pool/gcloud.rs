//! The cloud of a `driver: gcloud` pool on the Cloud TPU API: slices are TPU VM nodes, made,
//! listed and deleted with the gcloud CLI, each labelled `podq-pool=NAME`.
//!
//! - create: `gcloud compute tpus tpu-vm create NAME --zone=Z --accelerator-type=A
//!   --version=V --labels=podq-pool=POOL,podq-pool-id=ID [--spot | --reserved]`, run to
//!   its end (not
//!   `--async`): a stockout or a quota error is the create's own answer, which
//!   `pod::gcloud::errors` reads. A node of that name that exists already
//!   (`ALREADY_EXISTS`, `Kind::AlreadyExists`) is the one asked for before a crash when its `podq-pool-id` is the
//!   pool's, and another owner's otherwise (`SliceCloud::check_owner`);
//! - list: `gcloud compute tpus tpu-vm list --zone=Z --filter=labels.podq-pool=POOL
//!   --format=json`, once per zone of the pool (the TPU API lists one location at a time);
//!   one zone that cannot be listed fails the whole look, so a slice is never taken for
//!   gone because its zone did not answer;
//! - delete: `gcloud compute tpus tpu-vm delete NAME --zone=Z --quiet`; `NOT_FOUND` is done.
//!
//! Every refusal, of a create, a list or a delete, is read by `pod::gcloud::errors`, the one
//! reading a pod's recovery acts on too.
//!
//! `api: compute` pools (a managed instance group per slice) are `compute.rs`'s.

use std::collections::BTreeMap;
use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use serde::Deserialize;

use super::classify::{CloudError, CreateError, Kind};
use super::cloud::{CloudSlice, SliceCloud, SliceSpec, SliceState, POOL_ID_LABEL, POOL_LABEL};
use super::config::Provisioning;
use crate::pod::gcloud::errors::Scope;
use crate::pod::gcloud::{Retry, Runner};

/// How long a create may run: a v4-64 takes minutes, a stockout answers in seconds.
const CREATE_TIMEOUT: Duration = Duration::from_secs(1800);
const DELETE_TIMEOUT: Duration = Duration::from_secs(900);
const LIST_TIMEOUT: Duration = Duration::from_secs(120);

/// A pool's nodes: made with `runner`'s gcloud in `project` (gcloud's configured one when
/// none), listed in `zones`.
pub struct GcloudCloud {
    pub runner: Runner,
    pub project: Option<String>,
    pub zones: Vec<String>,
    /// `--version` of every create (e.g. `tpu-ubuntu2204-base`).
    pub runtime_version: String,
    pub provisioning: Provisioning,
    /// Appended to every create (`gcloud.create.extra_args`).
    pub extra_args: Vec<String>,
}

/// The fields of a listed node the pool reads.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct ListedNode {
    /// `projects/P/locations/Z/nodes/NAME`.
    name: String,
    #[serde(default)]
    state: Option<String>,
    #[serde(default)]
    create_time: Option<DateTime<Utc>>,
    #[serde(default)]
    labels: BTreeMap<String, String>,
}

impl GcloudCloud {
    /// `self`, if the Cloud TPU API can make what it asks for.
    pub fn checked(self) -> anyhow::Result<GcloudCloud> {
        if self.provisioning == Provisioning::FlexStart {
            anyhow::bail!(
                "provisioning flex_start is a Compute Engine slice's (api: compute); the Cloud \
                 TPU API makes spot, standard or reservation_bound nodes"
            );
        }
        Ok(self)
    }

    fn place(&self, zone: &str) -> Vec<String> {
        let mut args = vec![format!("--zone={zone}")];
        if let Some(project) = &self.project {
            args.push(format!("--project={project}"));
        }
        args
    }

    /// The create call for `spec`.
    pub fn create_args(&self, spec: &SliceSpec) -> Vec<String> {
        let mut args: Vec<String> = ["compute", "tpus", "tpu-vm", "create", &spec.name]
            .iter()
            .map(|s| s.to_string())
            .collect();
        args.extend(self.place(&spec.zone));
        args.push(format!("--accelerator-type={}", spec.accelerator));
        args.push(format!("--version={}", self.runtime_version));
        args.push(format!(
            "--labels={POOL_LABEL}={},{POOL_ID_LABEL}={}",
            spec.pool, spec.owner
        ));
        match self.provisioning {
            Provisioning::Spot => args.push("--spot".into()),
            Provisioning::ReservationBound => args.push("--reserved".into()),
            Provisioning::Standard | Provisioning::FlexStart => {}
        }
        args.extend(self.extra_args.iter().cloned());
        args
    }
}

/// A node's state in the words a pool acts on (TPU API v2 `Node.State`).
fn slice_state(state: Option<&str>) -> SliceState {
    match state.unwrap_or("") {
        "READY" => SliceState::Ready,
        // Capacity taken back: a multi-host slice does not come back (TPU_FACTS.md).
        "PREEMPTED" | "TERMINATED" | "STOPPING" | "STOPPED" => SliceState::Preempted,
        "DELETING" => SliceState::Deleting,
        // CREATING, STARTING, RESTARTING, REPAIRING, REIMAGING, and states not known yet.
        _ => SliceState::Creating,
    }
}

/// The nodes of one zone's listing that carry `pool`'s label.
fn parse_listing(json: &str, zone: &str, pool: &str) -> Result<Vec<CloudSlice>, CloudError> {
    let nodes: Vec<ListedNode> = serde_json::from_str(json).map_err(|e| {
        CloudError::new(
            Kind::Unknown,
            Scope::Zone,
            format!("tpu-vm list in {zone} answered JSON podq cannot read: {e}"),
        )
    })?;
    Ok(nodes
        .into_iter()
        .filter(|node| node.labels.get(POOL_LABEL).map(String::as_str) == Some(pool))
        .map(|node| CloudSlice {
            name: node
                .name
                .rsplit('/')
                .next()
                .unwrap_or(&node.name)
                .to_owned(),
            zone: zone.to_owned(),
            state: slice_state(node.state.as_deref()),
            created_at: node.create_time.unwrap_or_else(Utc::now),
            owner: node.labels.get(POOL_ID_LABEL).cloned(),
        })
        .collect())
}

#[async_trait]
impl SliceCloud for GcloudCloud {
    async fn create(&self, spec: &SliceSpec) -> Result<(), CreateError> {
        match self
            .runner
            .call(&self.create_args(spec), CREATE_TIMEOUT, Retry::Never)
            .await
        {
            Ok(_) => Ok(()),
            Err(e) => match e.reading() {
                read if read.kind == Kind::AlreadyExists => self.check_owner(spec).await,
                read => Err(read.into()),
            },
        }
    }

    async fn delete(&self, name: &str, zone: &str) -> Result<(), CloudError> {
        let mut args: Vec<String> = ["compute", "tpus", "tpu-vm", "delete", name]
            .iter()
            .map(|s| s.to_string())
            .collect();
        args.extend(self.place(zone));
        args.push("--quiet".into());
        match self.runner.call(&args, DELETE_TIMEOUT, Retry::Api).await {
            Ok(_) => Ok(()),
            Err(e) => match e.reading() {
                read if read.kind == Kind::NotFound => Ok(()),
                read => Err(read),
            },
        }
    }

    async fn list(&self, pool: &str) -> Result<Vec<CloudSlice>, CloudError> {
        let mut slices = Vec::new();
        for zone in &self.zones {
            let mut args: Vec<String> = ["compute", "tpus", "tpu-vm", "list"]
                .iter()
                .map(|s| s.to_string())
                .collect();
            args.extend(self.place(zone));
            args.push(format!("--filter=labels.{POOL_LABEL}={pool}"));
            args.push("--format=json".into());
            let output = self
                .runner
                .call(&args, LIST_TIMEOUT, Retry::Api)
                .await
                .map_err(|e| e.reading().during(&format!("tpu-vm list in {zone}")))?;
            slices.extend(parse_listing(&output.stdout, zone, pool)?);
        }
        slices.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(slices)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cloud(provisioning: Provisioning) -> GcloudCloud {
        GcloudCloud {
            runner: Runner {
                program: "gcloud".into(),
                retries: 0,
                backoff: Duration::ZERO,
            },
            project: Some("proj".into()),
            zones: vec!["us-central2-b".into()],
            runtime_version: "tpu-ubuntu2204-base".into(),
            provisioning,
            extra_args: vec!["--internal-ips".into()],
        }
    }

    #[test]
    fn a_create_asks_for_the_labelled_node_the_pool_wants() {
        let spec = SliceSpec {
            name: "v4-spot-3".into(),
            zone: "us-central2-b".into(),
            pool: "v4-spot".into(),
            owner: "a1".into(),
            accelerator: "v4-64".into(),
        };
        assert_eq!(
            cloud(Provisioning::Spot).create_args(&spec).join(" "),
            "compute tpus tpu-vm create v4-spot-3 --zone=us-central2-b --project=proj \
             --accelerator-type=v4-64 --version=tpu-ubuntu2204-base \
             --labels=podq-pool=v4-spot,podq-pool-id=a1 --spot --internal-ips"
        );
        let reserved = cloud(Provisioning::ReservationBound).create_args(&spec);
        assert!(reserved.contains(&"--reserved".to_owned()), "{reserved:?}");
        assert!(!cloud(Provisioning::Standard)
            .create_args(&spec)
            .iter()
            .any(|a| a == "--spot" || a == "--reserved"));
        assert!(cloud(Provisioning::FlexStart).checked().is_err());
        assert!(cloud(Provisioning::Spot).checked().is_ok());
    }

    #[test]
    fn a_listing_keeps_the_pools_nodes_in_the_pools_words() {
        let json = r#"[
          {"name": "projects/p/locations/z/nodes/a-1", "state": "READY",
           "createTime": "2026-11-28T06:00:00Z",
           "labels": {"podq-pool": "a", "podq-pool-id": "a1"}},
          {"name": "projects/p/locations/z/nodes/a-2", "state": "CREATING",
           "labels": {"podq-pool": "a"}},
          {"name": "projects/p/locations/z/nodes/a-3", "state": "PREEMPTED",
           "createTime": "2026-11-28T06:00:00Z", "labels": {"podq-pool": "a"}},
          {"name": "projects/p/locations/z/nodes/b-1", "state": "READY",
           "labels": {"podq-pool": "b"}},
          {"name": "projects/p/locations/z/nodes/stable-1", "state": "READY"}
        ]"#;
        let slices = parse_listing(json, "z", "a").unwrap();
        let seen: Vec<(&str, SliceState)> =
            slices.iter().map(|s| (s.name.as_str(), s.state)).collect();
        assert_eq!(
            seen,
            vec![
                ("a-1", SliceState::Ready),
                ("a-2", SliceState::Creating),
                ("a-3", SliceState::Preempted),
            ]
        );
        assert_eq!(slices[0].owner.as_deref(), Some("a1"));
        assert_eq!(slices[1].owner, None);
        assert_eq!(
            slices[0].created_at.to_rfc3339(),
            "2026-11-28T06:00:00+00:00"
        );
        assert!(parse_listing("not json", "z", "a").is_err());
        assert_eq!(slice_state(Some("DELETING")), SliceState::Deleting);
        assert_eq!(slice_state(Some("REPAIRING")), SliceState::Creating);
    }
}
