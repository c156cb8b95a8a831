//! The `gcloud.compute:` section of the worker's config file: the slice podq creates and
//! owns, and the three gcloud calls that create it. Sources are the pages cited in
//! docs/operations/compute-engine.md ("TPU slices on Compute Engine").

use anyhow::{bail, Context};
use serde::Deserialize;

/// How a slice's VMs are bought (Compute v1 `Scheduling.ProvisioningModel`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum ProvisioningModel {
    /// On-demand. Compute Engine repairs a failed slice by itself, whole
    /// (https://docs.cloud.google.com/tpu/docs/failure-recovery).
    #[default]
    Standard,
    /// Spot: preempted with 30 s of notice, never repaired; "to restart a Spot VMs instance
    /// or MIG, you must delete and then recreate it"
    /// (https://docs.cloud.google.com/tpu/docs/spot-compute).
    Spot,
    /// Flex-start: waits for capacity, then runs for at most `max_run_duration_s` (up to 7
    /// days), after which its VMs are deleted.
    FlexStart,
    /// Bound to a reservation (`reservation`); repaired like on-demand capacity.
    ReservationBound,
}

impl ProvisioningModel {
    /// The value gcloud takes, in capitals.
    pub fn flag(self) -> &'static str {
        match self {
            ProvisioningModel::Standard => "STANDARD",
            ProvisioningModel::Spot => "SPOT",
            ProvisioningModel::FlexStart => "FLEX_START",
            ProvisioningModel::ReservationBound => "RESERVATION_BOUND",
        }
    }
}

/// Flex-start's longest run (https://docs.cloud.google.com/compute/docs/instance-groups/
/// about-resize-requests-mig).
pub const MAX_FLEX_START_S: f64 = 7.0 * 86_400.0;

/// The `gcloud.compute:` section.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct ComputeSettings {
    /// e.g. `ct6e-standard-4t` (v6e, 4 chips a VM), `ct5p-hightpu-4t`, `tpu7x-standard-4t`.
    pub machine_type: String,
    /// The accelerator topology of the workload policy, e.g. `4x4` or `2x4x4`.
    pub topology: String,
    /// The TPU VM image. The family is a field note (unconfirmed); the project is
    /// documented (https://docs.cloud.google.com/tpu/docs/consume-reservation-compute).
    pub image_family: String,
    pub image_project: String,
    pub provisioning_model: ProvisioningModel,
    /// `projects/P/reservations/R`, for `reservation_bound`.
    pub reservation: Option<String>,
    /// Flex-start's max run duration, in seconds (at most 7 days).
    pub max_run_duration_s: Option<f64>,
    /// The workload policy's region (default: the zone's).
    pub region: Option<String>,
    /// Names of the three resources podq creates and owns. By default the group is named
    /// after the pod, and the template and policy `<pod>-template-<hash>` and
    /// `<pod>-policy-<hash>`, the hash of what they are made of: settings that change make
    /// new ones, and podq deletes its old ones after the group that used them.
    pub group: Option<String>,
    pub instance_template: Option<String>,
    pub workload_policy: Option<String>,
    /// Appended to `instance-templates create` (`--service-account=...`, `--network=...`,
    /// `--metadata=...`).
    pub template_args: Vec<String>,
    /// The gcloud release track of the calls (`beta`, `alpha`) for a gcloud whose GA
    /// commands lack the workload-policy flags.
    pub track: Option<String>,
}

impl Default for ComputeSettings {
    fn default() -> Self {
        ComputeSettings {
            machine_type: String::new(),
            topology: String::new(),
            // A field note, unconfirmed: one image for v5e, v5p and v6e.
            image_family: "ubuntu-accel-2204-amd64-tpu-v5e-v5p-v6e".into(),
            image_project: "ubuntu-os-accelerator-images".into(),
            provisioning_model: ProvisioningModel::Standard,
            reservation: None,
            max_run_duration_s: None,
            region: None,
            group: None,
            instance_template: None,
            workload_policy: None,
            template_args: Vec::new(),
            track: None,
        }
    }
}

/// The generation an accelerator type names: `v6e-16` is `v6e`, `tpu7x-128` is `tpu7x`.
fn generation(accelerator: &str) -> &str {
    accelerator.split('-').next().unwrap_or(accelerator)
}

/// The generation a machine type is made of, from its family prefix.
fn machine_generation(machine_type: &str) -> Option<&'static str> {
    [("ct5p-", "v5p"), ("ct6e-", "v6e"), ("tpu7x-", "tpu7x")]
        .into_iter()
        .find(|(prefix, _)| machine_type.starts_with(prefix))
        .map(|(_, generation)| generation)
}

/// Chips a VM of `machine_type` holds: the number before its final `t` (`-4t`, `-8t`).
fn chips_per_vm(machine_type: &str) -> Option<u32> {
    machine_type
        .rsplit('-')
        .next()?
        .strip_suffix('t')?
        .parse()
        .ok()
        .filter(|&n| n > 0)
}

/// Chips a topology spans: `4x4` is 16, `2x4x4` is 32.
fn chips_of(topology: &str) -> Option<u32> {
    topology.split('x').try_fold(1u32, |chips, side| {
        side.parse::<u32>()
            .ok()
            .filter(|&n| n > 0)
            .and_then(|n| chips.checked_mul(n))
    })
}

/// What a compute pod is, checked once at start.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct SliceSpec {
    pub group: String,
    pub template: String,
    pub policy: String,
    pub region: String,
    pub project: String,
    /// VMs in the slice: the topology's chips over a VM's.
    pub size: u32,
    pub settings: ComputeSettings,
    /// The name prefixes of the templates and policies podq made (none for names the
    /// settings give).
    pub owned_prefixes: Vec<String>,
}

/// The first 8 hex digits of the sha256 of `parts`.
fn short_hash(parts: &[String]) -> String {
    use sha2::Digest;
    let digest = sha2::Sha256::digest(parts.join("\n").as_bytes());
    hex::encode(digest)[..8].to_owned()
}

impl ComputeSettings {
    /// The slice of pod `pod` (accelerator type `accelerator`) in `zone`, or why these
    /// settings cannot make one.
    pub(crate) fn slice(
        &self,
        pod: &str,
        accelerator: &str,
        zone: &str,
        project: Option<&str>,
    ) -> anyhow::Result<SliceSpec> {
        let generation = generation(accelerator);
        // https://docs.cloud.google.com/tpu/docs/tpus-and-migs: MIG TPU slices cover v5p,
        // v6e and TPU7x; the others (a v4 such as stable-1, a v5e) stay on the TPU API.
        if !["v5p", "v6e", "tpu7x"].contains(&generation) {
            bail!(
                "{accelerator} is not offered as a Compute Engine slice (only v5p, v6e and \
                 TPU7x are, https://docs.cloud.google.com/tpu/docs/tpus-and-migs): keep this \
                 pod on the Cloud TPU API (gcloud.api: tpu)"
            );
        }
        let Some(machine) = machine_generation(&self.machine_type) else {
            bail!(
                "gcloud.compute.machine_type `{}` is not a TPU machine type podq knows \
                 (ct5p-*, ct6e-*, tpu7x-*)",
                self.machine_type
            );
        };
        if machine != generation {
            bail!(
                "gcloud.compute.machine_type `{}` is a {machine} machine, but the pod's \
                 accelerator is {accelerator}",
                self.machine_type
            );
        }
        let per_vm = chips_per_vm(&self.machine_type).with_context(|| {
            format!(
                "cannot tell the chips of machine type `{}` (it should end in -4t, -8t, ...)",
                self.machine_type
            )
        })?;
        let chips = chips_of(&self.topology).with_context(|| {
            format!(
                "gcloud.compute.topology `{}` is not a topology such as 4x4 or 2x4x4",
                self.topology
            )
        })?;
        if chips % per_vm != 0 {
            bail!(
                "topology {} has {chips} chips, not a whole number of {per_vm}-chip VMs",
                self.topology
            );
        }
        let Some(project) = project else {
            bail!(
                "a Compute Engine slice needs gcloud.project: the workload policy is named by \
                 its full path, projects/P/regions/R/resourcePolicies/NAME"
            );
        };
        match self.provisioning_model {
            ProvisioningModel::FlexStart => match self.max_run_duration_s {
                Some(s) if s > 0.0 && s <= MAX_FLEX_START_S => {}
                _ => bail!(
                    "a flex-start slice needs gcloud.compute.max_run_duration_s, more than 0 and \
                     at most 7 days ({MAX_FLEX_START_S} s)"
                ),
            },
            ProvisioningModel::ReservationBound if self.reservation.is_none() => bail!(
                "a reservation-bound slice needs gcloud.compute.reservation \
                 (projects/P/reservations/R)"
            ),
            _ => {}
        }
        let region = match &self.region {
            Some(region) => region.clone(),
            None => zone
                .rsplit_once('-')
                .map(|(region, _)| region.to_owned())
                .with_context(|| format!("cannot tell the region of zone `{zone}`"))?,
        };
        let mut spec = SliceSpec {
            group: self.group.clone().unwrap_or_else(|| pod.to_owned()),
            template: self.instance_template.clone().unwrap_or_default(),
            policy: self.workload_policy.clone().unwrap_or_default(),
            region,
            project: project.to_owned(),
            size: chips / per_vm,
            settings: self.clone(),
            owned_prefixes: Vec::new(),
        };
        if self.instance_template.is_none() {
            let prefix = format!("{pod}-template-");
            spec.template = format!("{prefix}{}", short_hash(&spec.create_template()));
            spec.owned_prefixes.push(prefix);
        }
        if self.workload_policy.is_none() {
            let prefix = format!("{pod}-policy-");
            spec.policy = format!("{prefix}{}", short_hash(&spec.create_policy()));
            spec.owned_prefixes.push(prefix);
        }
        Ok(spec)
    }
}

impl SliceSpec {
    /// A template or policy podq made that these settings no longer name.
    pub fn owns_stale(&self, name: &str) -> bool {
        name != self.template
            && name != self.policy
            && self
                .owned_prefixes
                .iter()
                .any(|p| name.starts_with(p.as_str()))
    }

    /// `[track] compute <words...>`.
    fn command(&self, words: &[&str]) -> Vec<String> {
        let mut args: Vec<String> = self.settings.track.iter().cloned().collect();
        args.push("compute".into());
        args.extend(words.iter().map(|w| (*w).to_owned()));
        args
    }

    /// `gcloud compute resource-policies create workload-policy` (https://docs.cloud.google.
    /// com/sdk/gcloud/reference/compute/resource-policies/create/workload-policy).
    pub fn create_policy(&self) -> Vec<String> {
        let mut args = self.command(&["resource-policies", "create", "workload-policy"]);
        args.extend([
            self.policy.clone(),
            format!("--region={}", self.region),
            format!("--project={}", self.project),
            "--type=HIGH_THROUGHPUT".into(),
            format!("--accelerator-topology={}", self.settings.topology),
        ]);
        args
    }

    /// `resource-policies describe` of the slice's workload policy.
    pub fn describe_policy(&self) -> Vec<String> {
        self.on(
            &["resource-policies", "describe"],
            &self.policy,
            Place::Region,
            &["--format=json"],
        )
    }

    /// `instance-templates describe` of the slice's template.
    pub fn describe_template(&self) -> Vec<String> {
        self.on(
            &["instance-templates", "describe"],
            &self.template,
            Place::Global,
            &["--format=json"],
        )
    }

    /// `gcloud compute instance-templates create`: Spot with `STOP`
    /// (https://docs.cloud.google.com/tpu/docs/spot-compute), flex-start with `DELETE` and
    /// its max run duration (https://docs.cloud.google.com/compute/docs/instance-groups/
    /// bulk-create-instances-in-mig), a reservation by name
    /// (https://docs.cloud.google.com/tpu/docs/consume-reservation-compute).
    pub fn create_template(&self) -> Vec<String> {
        let s = &self.settings;
        let mut args = self.command(&["instance-templates", "create"]);
        args.extend([
            self.template.clone(),
            format!("--project={}", self.project),
            format!("--machine-type={}", s.machine_type),
            "--maintenance-policy=TERMINATE".into(),
            format!("--provisioning-model={}", s.provisioning_model.flag()),
            format!("--image-family={}", s.image_family),
            format!("--image-project={}", s.image_project),
        ]);
        match s.provisioning_model {
            ProvisioningModel::Spot => args.push("--instance-termination-action=STOP".into()),
            ProvisioningModel::FlexStart => {
                args.push("--instance-termination-action=DELETE".into());
                let seconds = s.max_run_duration_s.unwrap_or(MAX_FLEX_START_S).round() as u64;
                args.push(format!("--max-run-duration={seconds}s"));
            }
            ProvisioningModel::ReservationBound => {
                args.push("--reservation-affinity=specific".into());
                if let Some(reservation) = &s.reservation {
                    args.push(format!("--reservation={reservation}"));
                }
            }
            ProvisioningModel::Standard => {}
        }
        args.extend(s.template_args.iter().cloned());
        args
    }

    /// `gcloud compute instance-groups managed create`, in bulk mode (the whole size at
    /// once, https://docs.cloud.google.com/compute/docs/instance-groups/about-bulk-mode)
    /// and `do-nothing` on a failed VM: podq, not the MIG, decides what a lost slice needs
    /// (flex-start requires it; a Spot slice is recreated whole).
    pub fn create_group(&self, zone: &str) -> Vec<String> {
        let mut args = self.command(&["instance-groups", "managed", "create"]);
        args.extend([
            self.group.clone(),
            format!("--zone={zone}"),
            format!("--project={}", self.project),
            format!("--template={}", self.template),
            format!("--size={}", self.size),
            format!(
                "--workload-policy=projects/{}/regions/{}/resourcePolicies/{}",
                self.project, self.region, self.policy
            ),
            "--target-size-policy-mode=bulk".into(),
            "--default-action-on-vm-failure=do-nothing".into(),
        ]);
        args
    }

    /// `compute <group...> <verb> NAME --zone=Z|--region=R|(global) --project=P [extra]`.
    pub fn on(&self, words: &[&str], name: &str, place: Place, extra: &[&str]) -> Vec<String> {
        let mut args = self.command(words);
        args.push(name.to_owned());
        match place {
            Place::Zone(zone) => args.push(format!("--zone={zone}")),
            Place::Region => args.push(format!("--region={}", self.region)),
            Place::Global => {}
        }
        args.push(format!("--project={}", self.project));
        args.extend(extra.iter().map(|e| (*e).to_owned()));
        args
    }
}

/// Where a resource lives: the MIG and its instances in a zone, the workload policy in a
/// region, the template globally.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Place<'a> {
    Zone(&'a str),
    Region,
    Global,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v6e() -> ComputeSettings {
        ComputeSettings {
            machine_type: "ct6e-standard-4t".into(),
            topology: "4x4".into(),
            provisioning_model: ProvisioningModel::Spot,
            ..ComputeSettings::default()
        }
    }

    #[test]
    fn a_slice_is_sized_from_its_topology_and_only_for_the_generations_compute_engine_offers() {
        let slice = v6e()
            .slice("trillium-1", "v6e-16", "us-east5-b", Some("p"))
            .unwrap();
        assert_eq!(slice.size, 4);
        assert_eq!(slice.region, "us-east5");
        assert_eq!(slice.group, "trillium-1");
        assert!(slice.template.starts_with("trillium-1-template-"));
        // Other settings make another template; the old one is podq's to delete.
        let other = ComputeSettings {
            provisioning_model: ProvisioningModel::Standard,
            ..v6e()
        }
        .slice("trillium-1", "v6e-16", "us-east5-b", Some("p"))
        .unwrap();
        assert_ne!(other.template, slice.template);
        assert!(other.owns_stale(&slice.template) && !other.owns_stale(&other.template));
        assert!(!other.owns_stale("someone-elses-template"));
        let err = v6e()
            .slice("stable-1", "v4-64", "us-central2-b", Some("p"))
            .unwrap_err();
        assert!(err.to_string().contains("Cloud TPU API"), "{err}");
        let err = v6e()
            .slice("x", "v5p-32", "us-east5-b", Some("p"))
            .unwrap_err();
        assert!(err.to_string().contains("v6e machine"), "{err}");
        assert!(v6e().slice("x", "v6e-16", "us-east5-b", None).is_err());
        let v5p = ComputeSettings {
            machine_type: "ct5p-hightpu-4t".into(),
            topology: "2x4x4".into(),
            ..ComputeSettings::default()
        };
        assert_eq!(
            v5p.slice("x", "v5p-64", "z-a-b", Some("p")).unwrap().size,
            8
        );
        let flex = ComputeSettings {
            provisioning_model: ProvisioningModel::FlexStart,
            ..v6e()
        };
        assert!(flex.slice("x", "v6e-16", "us-east5-b", Some("p")).is_err());
    }

    #[test]
    fn the_three_create_calls_are_the_documented_ones() {
        let slice = v6e()
            .slice("trillium-1", "v6e-16", "us-east5-b", Some("p"))
            .unwrap();
        assert_eq!(
            slice.create_group("us-east5-b"),
            [
                "compute",
                "instance-groups",
                "managed",
                "create",
                "trillium-1",
                "--zone=us-east5-b",
                "--project=p",
                &format!("--template={}", slice.template),
                "--size=4",
                &format!(
                    "--workload-policy=projects/p/regions/us-east5/resourcePolicies/{}",
                    slice.policy
                ),
                "--target-size-policy-mode=bulk",
                "--default-action-on-vm-failure=do-nothing",
            ]
        );
        let template = slice.create_template();
        assert!(template.contains(&"--provisioning-model=SPOT".to_owned()));
        assert!(template.contains(&"--instance-termination-action=STOP".to_owned()));
        assert_eq!(
            slice.create_policy()[..4],
            ["compute", "resource-policies", "create", "workload-policy"]
        );
    }
}
