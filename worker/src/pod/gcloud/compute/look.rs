//! Looking at a Compute Engine slice: the group, its instances and each instance, read
//! with gcloud, remembered for the calls that need a host's instance (ssh, scp, the
//! coordinator's address).

use std::sync::atomic::AtomicBool;
use std::sync::Mutex;

use super::settings::{Place, ProvisioningModel, SliceSpec};
use super::slice::{Group, Host, Instance, ManagedInstance, Slice};
use crate::pod::gcloud::runner::{CallError, Retry};
use crate::pod::gcloud::GcloudPod;
use crate::pod::{PodApi, PodStatus};

/// A compute pod's spec and what the last look saw.
pub(in crate::pod::gcloud) struct ComputeSlice {
    pub spec: SliceSpec,
    pub last: Mutex<Slice>,
    /// The instance of each host, by worker index, and the group they belong to: kept from
    /// the last look that knew them all, and dropped with their group.
    pub hosts: Mutex<(Option<String>, Vec<Host>)>,
    /// The hold podq keeps is for what the group's creation reports (the project's quota,
    /// or a denial a person fixes), not for a create call that was refused.
    pub quota_held: AtomicBool,
}

impl ComputeSlice {
    pub fn new(spec: SliceSpec) -> ComputeSlice {
        ComputeSlice {
            spec,
            last: Mutex::new(Slice::default()),
            hosts: Mutex::new((None, Vec::new())),
            quota_held: AtomicBool::new(false),
        }
    }

    /// The instance that is host `index`, as ssh and scp name it.
    pub fn instance(&self, index: u32) -> Option<Host> {
        let hosts = self.hosts.lock().unwrap_or_else(|e| e.into_inner());
        hosts.1.get(index as usize).cloned()
    }

    /// The group's id and its instances' ids: a recreated group, or instances Compute
    /// Engine replaced, have new disks to set up.
    pub fn incarnation(&self) -> Option<String> {
        let last = self.last.lock().unwrap_or_else(|e| e.into_inner());
        let group = last.group.as_ref()?.id.clone()?;
        let mut ids: Vec<&str> = last
            .described
            .iter()
            .filter_map(|i| i.id.as_deref())
            .collect();
        ids.sort_unstable();
        Some(format!("{group}:{}", ids.join(",")))
    }

    /// Whether Compute Engine repairs this slice by itself: managed capacity, not Spot.
    pub fn repaired(&self) -> bool {
        self.spec.settings.provisioning_model != ProvisioningModel::Spot
    }
}

fn parse<T: serde::de::DeserializeOwned>(what: &str, text: &str) -> Result<T, CallError> {
    serde_json::from_str(text).map_err(|e| CallError::Failed {
        code: Some(0),
        stderr: format!("{what} answered something podq cannot read: {e}"),
    })
}

impl GcloudPod {
    pub(in crate::pod::gcloud) fn compute(&self) -> Option<&ComputeSlice> {
        self.compute.as_ref()
    }

    /// The group, its instances and each existing instance, read now.
    pub(in crate::pod::gcloud) async fn look_at_slice(
        &self,
        slice: &ComputeSlice,
    ) -> Result<Slice, CallError> {
        let spec = &slice.spec;
        let zone = Place::Zone(&self.settings.zone);
        let group_words = ["instance-groups", "managed", "describe"];
        let describe = spec.on(&group_words, &spec.group, zone, &["--format=json"]);
        let group: Group = match self
            .runner
            .call(&describe, self.timing.api, Retry::Api)
            .await
        {
            Ok(out) => parse("instance-groups managed describe", &out.stdout)?,
            Err(CallError::NotFound(_)) => {
                let gone = Slice::default();
                *slice.last.lock().unwrap_or_else(|e| e.into_inner()) = gone.clone();
                return Ok(gone);
            }
            Err(e) => return Err(e),
        };
        let list_words = ["instance-groups", "managed", "list-instances"];
        let list = spec.on(&list_words, &spec.group, zone, &["--format=json"]);
        let instances: Vec<ManagedInstance> =
            match self.runner.call(&list, self.timing.api, Retry::Api).await {
                Ok(out) if out.stdout.trim().is_empty() => Vec::new(),
                Ok(out) => parse("list-instances", &out.stdout)?,
                Err(CallError::NotFound(_)) => Vec::new(),
                Err(e) => return Err(e),
            };
        // Only instances that exist can be described; one deleted between the two calls is
        // simply not there.
        let exists = |i: &&ManagedInstance| {
            i.instance_status
                .as_deref()
                .is_some_and(|s| !matches!(s, "PENDING" | "DEPROVISIONING"))
        };
        let describes = instances.iter().filter(exists).map(|managed| {
            let args = spec.on(
                &["instances", "describe"],
                &managed.name,
                zone,
                &["--format=json"],
            );
            async move {
                match self.runner.call(&args, self.timing.api, Retry::Api).await {
                    Ok(out) => parse::<Instance>("instances describe", &out.stdout).map(Some),
                    Err(CallError::NotFound(_)) => Ok(None),
                    Err(e) => Err(e),
                }
            }
        });
        let mut described = Vec::new();
        for instance in futures::future::join_all(describes).await {
            described.extend(instance?);
        }
        let seen = Slice {
            group: Some(group),
            instances,
            described,
        };
        self.remember(slice, &seen);
        Ok(seen)
    }

    /// Keeps the look, and the hosts when every instance runs and says which worker it is.
    /// Hosts of another group than the one seen now are forgotten.
    fn remember(&self, slice: &ComputeSlice, seen: &Slice) {
        let group = seen.group.as_ref().and_then(|g| g.id.clone());
        {
            let mut hosts = slice.hosts.lock().unwrap_or_else(|e| e.into_inner());
            if hosts.0 != group {
                *hosts = (group.clone(), Vec::new());
            }
        }
        if seen.state() == "RUNNING" {
            match seen.hosts() {
                Ok(hosts) if hosts.len() as u32 == slice.spec.size => {
                    *slice.hosts.lock().unwrap_or_else(|e| e.into_inner()) = (group, hosts);
                }
                Ok(hosts) => {
                    tracing::warn!(
                        pod = %self.name,
                        "{} instances answered for a slice of {} (a group made from other \
                         settings? delete it and podq creates it anew)",
                        hosts.len(),
                        slice.spec.size
                    );
                    slice
                        .hosts
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .1
                        .clear();
                }
                Err(why) => {
                    tracing::warn!(pod = %self.name, "{why}: which instance is which host is unknown");
                    slice
                        .hosts
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .1
                        .clear();
                }
            }
        }
        *slice.last.lock().unwrap_or_else(|e| e.into_inner()) = seen.clone();
    }

    /// The slice as a pod status; a look that failed is `DESCRIBE_FAILED`, not a loss.
    pub(in crate::pod::gcloud) async fn slice_status(&self, slice: &ComputeSlice) -> PodStatus {
        match self.look_at_slice(slice).await {
            Ok(seen) => seen.status(slice.repaired()),
            Err(e) => {
                tracing::warn!(pod = %self.name, error = %e, "cannot look at the slice");
                PodStatus {
                    api: PodApi::Compute,
                    state: "DESCRIBE_FAILED".into(),
                    ..Default::default()
                }
            }
        }
    }
}
