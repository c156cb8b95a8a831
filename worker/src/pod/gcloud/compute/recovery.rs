//! Bringing a Compute Engine slice back, as Compute Engine allows it
//! (https://docs.cloud.google.com/tpu/docs/failure-recovery):
//! - *Repair* (managed capacity: on-demand, flex-start, reservations): Compute Engine
//!   restarts the whole slice by itself, its instances `REPAIRING` and the topology
//!   `REACTIVATING` or `INCOMPLETE`. podq waits it out and deletes nothing.
//! - *Lost* (a Spot preemption leaves instances `TERMINATED`, a flex-start slice's end
//!   deletes them, a person deleted the group): "to restart a Spot VMs instance or MIG, you
//!   must delete and then recreate it" (https://docs.cloud.google.com/tpu/docs/
//!   spot-compute). podq deletes the group and creates it again; the workload policy and
//!   template stay unless the settings changed them, and then the old ones go after the
//!   group (a template in use cannot be deleted): group, template, policy.
//! - *Waiting for capacity*: bulk creation goes on trying by itself
//!   (https://docs.cloud.google.com/compute/docs/instance-groups/
//!   view-cancel-vm-bulk-creation-in-migs). A stockout is shown and looked at again with
//!   a pause that doubles; a quota the project lacks, or an error only a person can fix (a
//!   denial, billing disabled), is *held*: shown as needing a person, and nothing is
//!   deleted or created while it lasts. The errors are read by `errors`, as a pool reads
//!   them.

use std::sync::atomic::Ordering;

use super::settings::Place;
use super::ComputeSlice;
use crate::pod::gcloud::errors::{self, Response};
use crate::pod::gcloud::recovery::{Episode, Refused, Step};
use crate::pod::gcloud::runner::{CallError, EnsureError, Retry};
use crate::pod::gcloud::{GcloudPod, StateClass};

impl GcloudPod {
    /// One look at the slice, and what it asks for.
    pub(in crate::pod::gcloud) async fn slice_step(
        &self,
        slice: &ComputeSlice,
        episode: &mut Episode,
        progress: &(dyn Fn(String) + Send + Sync),
    ) -> Step {
        let group = &slice.spec.group;
        let seen = match self.look_at_slice(slice).await {
            Ok(seen) => seen,
            Err(e) => return Step::Wait(format!("cannot look at slice {group}: {e}")),
        };
        let status = seen.status(slice.repaired());
        let (state, topology) = (&status.state, &status.health);
        match status.class() {
            StateClass::Ready => Step::Ready,
            StateClass::Repairing => {
                // The hosts restart with their /tmp gone; instances with new ids (new disks)
                // get the setup command again (`ComputeSlice::incarnation`).
                Step::Wait(format!(
                    "Compute Engine is repairing slice {group} (instances {state}, topology \
                     {topology}): it restarts the whole slice by itself; waiting, deleting nothing"
                ))
            }
            StateClass::Changing => {
                self.disturbed(episode);
                let reported = seen.creation_errors();
                // Read as a pool reads them (`errors`): a quota, or what a person must fix
                // (a denial, billing disabled), holds; a stockout or a passing failure is
                // waited out.
                let held = reported.iter().find_map(|e| {
                    let read = errors::classify_item(&e.code, &e.message);
                    read.response().holds().then_some((e, read))
                });
                if let Some((error, read)) = held {
                    let why = if read.response() == Response::Quota {
                        format!(
                            "held: slice {group} cannot be created, the project is over quota \
                             ({}: {}). A person must raise the quota; Compute Engine goes on \
                             trying by itself, and podq deletes and creates nothing meanwhile",
                            error.code, error.message
                        )
                    } else {
                        format!(
                            "held: slice {group} cannot be created, {} ({}: {}). Compute \
                             Engine goes on trying by itself, and podq deletes and creates \
                             nothing meanwhile",
                            read.kind.describe(),
                            error.code,
                            error.message
                        )
                    };
                    self.hold(why.clone());
                    slice.quota_held.store(true, Ordering::SeqCst);
                    return Step::Held(why);
                }
                if !seen.instances.is_empty() {
                    episode.slice_created = false;
                }
                self.release_quota_hold(slice);
                if let Some(error) = reported.first() {
                    return Step::ActionFailed(format!(
                        "waiting for capacity for slice {group} ({}: {})",
                        error.code, error.message
                    ));
                }
                let counts = seen.instance_counts();
                let waiting = if state == "PENDING" {
                    "waiting for flex-start capacity"
                } else {
                    "being created"
                };
                Step::Wait(format!(
                    "slice {group} is {waiting}: instances {state} ({counts}), topology {}",
                    if topology.is_empty() {
                        "not applied yet"
                    } else {
                        topology
                    }
                ))
            }
            StateClass::Lost => {
                self.disturbed(episode);
                // The group went while held for quota (a person deleted it): start anew.
                if seen.group.is_none() {
                    self.release_quota_hold(slice);
                }
                if self.settings.pool_owned {
                    // Its pool deletes the group and makes another where capacity is: a
                    // worker that recreated it would make a second slice for one request.
                    return Step::Held(format!(
                        "slice {group} is {state}: its pool gives it back and makes another"
                    ));
                }
                if let Some(why) = self.held() {
                    return Step::Held(why);
                }
                // Just created, its instances not listed yet: not a loss.
                if episode.slice_created && seen.group.is_some() && seen.instances.is_empty() {
                    return Step::Wait(format!(
                        "slice {group} was just created: waiting for its instances to be listed"
                    ));
                }
                match self.recreate_slice(slice, &seen, state, progress).await {
                    Ok(()) => {
                        episode.slice_created = true;
                        Step::Acted
                    }
                    Err(Refused::Held(why)) => Step::Held(why),
                    Err(Refused::Failed(what)) => Step::ActionFailed(what),
                }
            }
            StateClass::Unsettled | StateClass::Unknown => Step::Wait(format!(
                "waiting for slice {group}: instances {state}, topology {topology}"
            )),
        }
    }

    /// Deletes what is left of the group and creates it again, with the workload policy
    /// and template it needs.
    async fn recreate_slice(
        &self,
        slice: &ComputeSlice,
        seen: &super::slice::Slice,
        state: &str,
        progress: &(dyn Fn(String) + Send + Sync),
    ) -> Result<(), Refused> {
        let spec = &slice.spec;
        let zone = Place::Zone(&self.settings.zone);
        if let Some(group) = &seen.group {
            progress(format!(
                "slice {} is {state}: Compute Engine does not bring it back, so its group is \
                 deleted and created again",
                spec.group
            ));
            let delete = spec.on(
                &["instance-groups", "managed", "delete"],
                &spec.group,
                zone,
                &["--quiet"],
            );
            self.delete(&delete, &format!("group {}", spec.group))
                .await?;
            // A template or policy of podq's that the settings no longer name goes after
            // the group that used it.
            for (words, old, place) in [
                (
                    ["instance-templates", "delete"].as_slice(),
                    group.template_name(),
                    Place::Global,
                ),
                (
                    ["resource-policies", "delete"].as_slice(),
                    group.policy_name(),
                    Place::Region,
                ),
            ] {
                if let Some(old) = old.filter(|old| spec.owns_stale(old)) {
                    progress(format!("deleting {old}, which the settings no longer name"));
                    self.delete(&spec.on(words, &old, place, &["--quiet"]), &old)
                        .await?;
                }
            }
        }
        self.ensure(
            spec.describe_policy(),
            spec.create_policy(),
            &format!("workload policy {}", spec.policy),
        )
        .await?;
        self.ensure(
            spec.describe_template(),
            spec.create_template(),
            &format!("instance template {}", spec.template),
        )
        .await?;
        progress(format!(
            "creating slice {}: {} × {}, topology {}, {}",
            spec.group,
            spec.size,
            spec.settings.machine_type,
            spec.settings.topology,
            spec.settings.provisioning_model.flag()
        ));
        self.runner
            .call(
                &spec.create_group(&self.settings.zone),
                self.timing.operation,
                Retry::Never,
            )
            .await
            .map(|_| ())
            .map_err(|e| self.refused(&format!("slice {}", spec.group), &e))
    }

    /// Ends a hold that was for the project's quota (a hold for a refused create stays).
    fn release_quota_hold(&self, slice: &ComputeSlice) {
        if slice.quota_held.swap(false, Ordering::SeqCst) {
            self.release_hold();
        }
    }

    async fn delete(&self, args: &[String], what: &str) -> Result<(), Refused> {
        match self
            .runner
            .call(args, self.timing.operation, Retry::Api)
            .await
        {
            Ok(_) | Err(CallError::NotFound(_)) => Ok(()),
            Err(e) => Err(Refused::Failed(format!("cannot delete {what}: {e}"))),
        }
    }

    /// Creates a resource the describe call does not find.
    async fn ensure(
        &self,
        describe: Vec<String>,
        create: Vec<String>,
        what: &str,
    ) -> Result<(), Refused> {
        self.runner
            .ensure(&describe, &create, self.timing.api, self.timing.operation)
            .await
            .map_err(|e| match e {
                EnsureError::Describe(e) => Refused::Failed(format!("cannot describe {what}: {e}")),
                EnsureError::Create(e) => self.refused(what, &e),
            })
    }
}
