//! A TPU slice on Compute Engine (v5p, v6e, TPU7x): a managed instance group (MIG) of TPU
//! VMs, made from an instance template and a workload policy that names the accelerator
//! topology. The Cloud TPU API "is no longer under active development", and TPU7x and later
//! are offered only through Compute Engine or GKE
//! (https://docs.cloud.google.com/tpu/docs/tpus-in-compute-engine).
//!
//! Only what differs from a Cloud TPU node is here; staging, preflight, the agents and the
//! log path are the node's (`super`):
//! - `settings`: the `gcloud.compute:` section and the three create calls;
//! - `look`: reading the slice with gcloud, and which instance is which host;
//! - `slice`: what `instance-groups managed describe`, `list-instances` and `instances
//!   describe` say, summed up as the pod's status, and which instance is which host;
//! - `recovery`: bringing a slice back as Compute Engine allows it.
//!
//! The facts and their sources are collected in docs/operations/compute-engine.md ("TPU slices on Compute
//! Engine").

mod look;
mod recovery;
mod settings;
mod slice;

pub(super) use look::ComputeSlice;
pub use settings::{ComputeSettings, ProvisioningModel};
pub(crate) use settings::{Place, SliceSpec};
pub(crate) use slice::{rank as instance_rank, ErrorItem, GroupStatus};
