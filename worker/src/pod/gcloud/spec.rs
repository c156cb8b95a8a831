//! The spec a TPU node was created with, as `gcloud compute tpus tpu-vm describe
//! --format=json` shows it, kept in a file of the worker's state directory (a restarted
//! worker recreates the node it lost, not a default one), and turned back into the exact
//! `tpu-vm create` and `queued-resources create` calls that bring that node back.
//!
//! Flag names and value syntax are gcloud's own (google-cloud-sdk 578.0.0):
//! - `lib/googlecloudsdk/command_lib/compute/tpus/tpu_vm/flags.yaml`, used by
//!   `lib/surface/compute/tpus/tpu_vm/create.yaml`: `--accelerator-type` ->
//!   `node.acceleratorType`, `--version` -> `node.runtimeVersion`, `--preemptible`, `--spot`,
//!   `--reserved` -> `node.schedulingConfig.*`, `--network` / `--subnetwork` ->
//!   `node.networkConfig.network` / `.subnetwork` (passed through unchanged, so the full
//!   resource path a describe shows is accepted, Shared VPC included), `--internal-ips` ->
//!   `node.networkConfig.enableExternalIps` inverted, `--service-account` ->
//!   `node.serviceAccount.email`, `--scopes` (a list) -> `node.serviceAccount.scope`,
//!   `--labels` (a dict), `--metadata` (a dict, merged by `tpu_vm/util.py:MergeMetadata`),
//!   `--tags` (a list), `--data-disk=source=PATH,mode=read-write|read-only` (repeated; an
//!   arg_dict whose `mode` maps to `READ_WRITE` / `READ_ONLY`);
//! - `lib/surface/compute/tpus/queued_resources/create.yaml` (GA) with
//!   `command_lib/compute/tpus/queued_resources/flags.yaml` and `util.py:CreateNodeSpec`:
//!   `--node-id`, `--accelerator-type`, `--runtime-version`, `--spot`, `--reserved`,
//!   `--internal-ips`, `--network`, `--subnetwork`, `--service-account`, `--scopes`,
//!   `--metadata`, `--tags`, `--labels`, `--data-disk` into `tpu.nodeSpec[0].node`. GA has no
//!   flag for a preemptible (best-effort) queued node: spot is its successor.
//! - List and dict values containing a comma use gcloud's alternate delimiter `^D^`
//!   (`gcloud topic escaping`, `calliope/arg_parsers.py` `ArgList.__call__`); a dict item
//!   splits at its first `=`.
//!
//! Neither create command has a flag for `networkConfig.canIpForward`: a node that had it
//! comes back without, and the worker says so.
//!
//! `autocheckpointEnabled` (Cloud TPU Autocheckpoint, a preview: the trainer gets SIGTERM
//! before a maintenance event, https://cloud.google.com/tpu/docs/autocheckpoint) is set by
//! `--autocheckpoint-enabled`, which only the `alpha` track's create commands take: a node
//! that had it is recreated with `gcloud alpha ...`.
//!
//! The TPU API omits fields at their default value from its JSON (proto3): a node whose
//! `networkConfig` has no `enableExternalIps` has internal addresses only.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

/// The fields of a node that decide what it is; everything else a describe shows is state.
/// Saved as the API writes it: fields at their default value left out.
#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase", default)]
pub struct NodeSpec {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub accelerator_type: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub runtime_version: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub scheduling_config: Option<Scheduling>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub network_config: Option<Network>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub service_account: Option<ServiceAccount>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub metadata: BTreeMap<String, String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tags: Vec<String>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub data_disks: Vec<DataDisk>,
    #[serde(skip_serializing_if = "is_false")]
    pub autocheckpoint_enabled: bool,
}

fn is_false(b: &bool) -> bool {
    !*b
}

#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase", default)]
pub struct Scheduling {
    #[serde(skip_serializing_if = "is_false")]
    pub preemptible: bool,
    #[serde(skip_serializing_if = "is_false")]
    pub spot: bool,
    #[serde(skip_serializing_if = "is_false")]
    pub reserved: bool,
}

#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase", default)]
pub struct Network {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub network: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub subnetwork: Option<String>,
    #[serde(skip_serializing_if = "is_false")]
    pub enable_external_ips: bool,
    #[serde(skip_serializing_if = "is_false")]
    pub can_ip_forward: bool,
}

#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase", default)]
pub struct ServiceAccount {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub email: Option<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub scope: Vec<String>,
}

#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase", default)]
pub struct DataDisk {
    pub source_disk: String,
    /// `READ_WRITE`, `READ_ONLY` or `DISK_MODE_UNSPECIFIED` (the API's `AttachedDisk.mode`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mode: Option<String>,
}

impl NodeSpec {
    /// The spec part of a describe answer.
    pub fn parse(json: &str) -> anyhow::Result<NodeSpec> {
        Ok(serde_json::from_str(json)?)
    }

    /// Enough to create a node from.
    pub fn is_complete(&self) -> bool {
        self.accelerator_type.is_some() && self.runtime_version.is_some()
    }

    pub fn scheduling(&self) -> Scheduling {
        self.scheduling_config.clone().unwrap_or_default()
    }

    fn required(&self) -> anyhow::Result<(&str, &str)> {
        match (&self.accelerator_type, &self.runtime_version) {
            (Some(accelerator), Some(version)) => Ok((accelerator, version)),
            _ => bail!(
                "the node's accelerator type and runtime version are unknown (no describe \
                 showed them); set gcloud.create.accelerator_type and runtime_version"
            ),
        }
    }

    /// The flags of `gcloud compute tpus tpu-vm create NAME --zone=Z [--project=P]` that
    /// create this node again.
    pub fn create_flags(&self) -> anyhow::Result<Vec<String>> {
        let (accelerator, version) = self.required()?;
        let mut flags = vec![
            format!("--accelerator-type={accelerator}"),
            format!("--version={version}"),
        ];
        let scheduling = self.scheduling();
        if scheduling.preemptible {
            flags.push("--preemptible".into());
        }
        if scheduling.spot {
            flags.push("--spot".into());
        }
        if scheduling.reserved {
            flags.push("--reserved".into());
        }
        flags.extend(self.node_flags());
        Ok(flags)
    }

    /// The flags of `gcloud compute tpus queued-resources create QR --zone=Z [--project=P]`
    /// whose one node is this node, named `node_id`.
    pub fn queued_create_flags(&self, node_id: &str) -> anyhow::Result<Vec<String>> {
        let (accelerator, version) = self.required()?;
        let mut flags = vec![
            format!("--node-id={node_id}"),
            format!("--accelerator-type={accelerator}"),
            format!("--runtime-version={version}"),
        ];
        let scheduling = self.scheduling();
        if scheduling.spot || scheduling.preemptible {
            flags.push("--spot".into());
        }
        if scheduling.reserved {
            flags.push("--reserved".into());
        }
        flags.extend(self.node_flags());
        Ok(flags)
    }

    /// What the create calls cannot carry over, for the log.
    pub fn not_carried(&self, queued: bool) -> Vec<&'static str> {
        let mut lost = Vec::new();
        if self
            .network_config
            .as_ref()
            .is_some_and(|n| n.can_ip_forward)
        {
            lost.push("networkConfig.canIpForward (no gcloud create flag sets it)");
        }
        let scheduling = self.scheduling();
        if queued && scheduling.preemptible && !scheduling.spot {
            lost.push(
                "schedulingConfig.preemptible (GA queued resources have no preemptible tier; \
                 asking for spot)",
            );
        }
        lost
    }

    /// The gcloud release track the create calls need: `alpha` for autocheckpoint.
    pub fn release_track(&self) -> Option<&'static str> {
        self.autocheckpoint_enabled.then_some("alpha")
    }

    /// The flags both create commands share, in the order of gcloud's reference.
    fn node_flags(&self) -> Vec<String> {
        let mut flags = Vec::new();
        if self.autocheckpoint_enabled {
            flags.push("--autocheckpoint-enabled".into());
        }
        if let Some(network) = &self.network_config {
            if let Some(n) = &network.network {
                flags.push(format!("--network={n}"));
            }
            if let Some(s) = &network.subnetwork {
                flags.push(format!("--subnetwork={s}"));
            }
            if !network.enable_external_ips {
                flags.push("--internal-ips".into());
            }
        }
        if let Some(account) = &self.service_account {
            if let Some(email) = &account.email {
                flags.push(format!("--service-account={email}"));
            }
            if !account.scope.is_empty() {
                flags.push(format!("--scopes={}", gcloud_list(&account.scope)));
            }
        }
        if !self.metadata.is_empty() {
            flags.push(format!("--metadata={}", gcloud_dict(&self.metadata)));
        }
        if !self.tags.is_empty() {
            flags.push(format!("--tags={}", gcloud_list(&self.tags)));
        }
        if !self.labels.is_empty() {
            flags.push(format!("--labels={}", gcloud_dict(&self.labels)));
        }
        for disk in &self.data_disks {
            let mut value = format!("source={}", disk.source_disk);
            match disk.mode.as_deref() {
                Some("READ_ONLY") => value.push_str(",mode=read-only"),
                Some("READ_WRITE") => value.push_str(",mode=read-write"),
                _ => {}
            }
            flags.push(format!("--data-disk={value}"));
        }
        flags
    }
}

/// A gcloud list flag value (`ArgList`): the items joined with `,`, or with another
/// delimiter announced as `^D^` when an item holds a comma (or the value would start with
/// `^`, which announces a delimiter itself).
pub fn gcloud_list(items: &[String]) -> String {
    let clash = |d: &str| items.iter().any(|item| item.contains(d));
    let starts_with_caret = items.first().is_some_and(|i| i.starts_with('^'));
    if !clash(",") && !starts_with_caret {
        return items.join(",");
    }
    let delimiter = [";", ":", "|", "~", "#", "@", "!", "%", "&", "+", "*"]
        .into_iter()
        .map(str::to_owned)
        .chain((2..).map(|n| "@".repeat(n)))
        .find(|d| !clash(d))
        .expect("some run of @ is longer than every item");
    format!("^{delimiter}^{}", items.join(&delimiter))
}

/// A gcloud dict flag value (`ArgDict`): `KEY=VALUE` items as `gcloud_list` joins them.
pub fn gcloud_dict(map: &BTreeMap<String, String>) -> String {
    let items: Vec<String> = map.iter().map(|(k, v)| format!("{k}={v}")).collect();
    gcloud_list(&items)
}

/// The spec as kept on disk, with where and when it was seen.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct SavedSpec {
    pub node: String,
    pub zone: String,
    pub project: Option<String>,
    pub captured_at: DateTime<Utc>,
    /// The node's state when the spec was read (`READY` unless the worker never saw it
    /// ready).
    pub captured_state: String,
    pub spec: NodeSpec,
}

/// The worker's state directory when none is configured: `$XDG_STATE_HOME/podq`, else
/// `~/.local/state/podq`, else `./podq-data/state`.
pub fn default_state_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("XDG_STATE_HOME").filter(|d| !d.is_empty()) {
        return PathBuf::from(dir).join("podq");
    }
    match std::env::var_os("HOME").filter(|h| !h.is_empty()) {
        Some(home) => PathBuf::from(home).join(".local/state/podq"),
        None => PathBuf::from("podq-data/state"),
    }
}

/// The file that holds the spec of `node` in `zone`.
pub fn spec_path(state_dir: &Path, zone: &str, node: &str) -> PathBuf {
    let clean = |s: &str| -> String {
        s.chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                    c
                } else {
                    '_'
                }
            })
            .collect()
    };
    state_dir.join(format!(
        "gcloud-{}-{}.node-spec.json",
        clean(zone),
        clean(node)
    ))
}

pub fn load(path: &Path) -> anyhow::Result<Option<SavedSpec>> {
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e).with_context(|| format!("cannot read {}", path.display())),
    };
    let saved = serde_json::from_str(&text)
        .with_context(|| format!("{} is not a saved node spec", path.display()))?;
    Ok(Some(saved))
}

/// Writes the spec whole or not at all (a temporary file renamed over the old one).
pub fn save(path: &Path, saved: &SavedSpec) -> anyhow::Result<()> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)
            .with_context(|| format!("cannot create the state directory {}", dir.display()))?;
    }
    let tmp = path.with_extension(format!("tmp-{}", std::process::id()));
    let text = serde_json::to_string_pretty(saved)?;
    std::fs::write(&tmp, text).with_context(|| format!("cannot write {}", tmp.display()))?;
    std::fs::rename(&tmp, path).with_context(|| format!("cannot write {}", path.display()))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A v4-64 as `gcloud compute tpus tpu-vm describe --format=json` shows it (API v2),
    /// with every part of its spec set.
    const DESCRIBE: &str = r##"{
      "acceleratorConfig": {"topology": "2x4x4", "type": "V4"},
      "acceleratorType": "v4-64",
      "apiVersion": "V2",
      "cidrBlock": "10.130.0.0/20",
      "createTime": "2025-03-02T10:11:12.123456789Z",
      "dataDisks": [
        {"mode": "READ_ONLY", "sourceDisk": "projects/trm-grant/zones/us-central2-b/disks/sudoku-data"},
        {"sourceDisk": "projects/trm-grant/zones/us-central2-b/disks/scratch"}
      ],
      "health": "HEALTHY",
      "id": "4519012345678901234",
      "labels": {"study": "trm-scaling", "team": "trm"},
      "metadata": {
        "ssh-keys": "podq:ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIB podq",
        "startup-script": "#!/bin/bash\necho ok, started > /tmp/boot\n"
      },
      "name": "projects/trm-grant/locations/us-central2-b/nodes/stable-1",
      "networkConfig": {
        "network": "projects/trm-grant/global/networks/tpu-net",
        "subnetwork": "projects/host-project/regions/us-central2/subnetworks/tpu-sub"
      },
      "networkEndpoints": [
        {"ipAddress": "10.130.0.2", "port": 8470},
        {"ipAddress": "10.130.0.3", "port": 8470}
      ],
      "runtimeVersion": "tpu-ubuntu2204-base",
      "schedulingConfig": {"preemptible": true, "reserved": true},
      "serviceAccount": {
        "email": "trainer@trm-grant.iam.gserviceaccount.com",
        "scope": ["https://www.googleapis.com/auth/cloud-platform",
                  "https://www.googleapis.com/auth/devstorage.read_write"]
      },
      "shieldedInstanceConfig": {},
      "state": "READY",
      "tags": ["tpu", "allow-ssh"]
    }"##;

    #[test]
    fn autocheckpoint_is_carried_through_a_recreate_on_the_alpha_track() {
        let mut node: serde_json::Value = serde_json::from_str(DESCRIBE).unwrap();
        assert_eq!(NodeSpec::parse(DESCRIBE).unwrap().release_track(), None);
        node["autocheckpointEnabled"] = serde_json::json!(true);
        let spec = NodeSpec::parse(&node.to_string()).unwrap();
        assert_eq!(spec.release_track(), Some("alpha"));
        assert!(spec
            .create_flags()
            .unwrap()
            .contains(&"--autocheckpoint-enabled".to_owned()));
        assert!(spec
            .queued_create_flags("stable-1")
            .unwrap()
            .contains(&"--autocheckpoint-enabled".to_owned()));
        // It survives the spec file a restarted worker reads.
        let saved = serde_json::to_string(&spec).unwrap();
        assert!(saved.contains("\"autocheckpointEnabled\":true"), "{saved}");
    }

    #[test]
    fn a_describe_becomes_the_create_call_that_brings_the_node_back() {
        let spec = NodeSpec::parse(DESCRIBE).unwrap();
        assert!(spec.is_complete());
        assert_eq!(
            spec.create_flags().unwrap(),
            [
                "--accelerator-type=v4-64",
                "--version=tpu-ubuntu2204-base",
                "--preemptible",
                "--reserved",
                "--network=projects/trm-grant/global/networks/tpu-net",
                "--subnetwork=projects/host-project/regions/us-central2/subnetworks/tpu-sub",
                "--internal-ips",
                "--service-account=trainer@trm-grant.iam.gserviceaccount.com",
                "--scopes=https://www.googleapis.com/auth/cloud-platform,\
                 https://www.googleapis.com/auth/devstorage.read_write",
                "--metadata=^;^ssh-keys=podq:ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIB podq;\
                 startup-script=#!/bin/bash\necho ok, started > /tmp/boot\n",
                "--tags=tpu,allow-ssh",
                "--labels=study=trm-scaling,team=trm",
                "--data-disk=source=projects/trm-grant/zones/us-central2-b/disks/sudoku-data,\
                 mode=read-only",
                "--data-disk=source=projects/trm-grant/zones/us-central2-b/disks/scratch",
            ]
        );
        assert_eq!(
            spec.queued_create_flags("stable-1").unwrap()[..5],
            [
                "--node-id=stable-1",
                "--accelerator-type=v4-64",
                "--runtime-version=tpu-ubuntu2204-base",
                "--spot",
                "--reserved",
            ]
        );
        assert_eq!(
            spec.queued_create_flags("stable-1").unwrap()[5..],
            spec.create_flags().unwrap()[4..]
        );
        assert_eq!(spec.not_carried(false), Vec::<&str>::new());
        assert_eq!(spec.not_carried(true).len(), 1);
    }

    #[test]
    fn external_addresses_spot_and_defaults_are_kept() {
        let spec = NodeSpec::parse(
            r#"{"acceleratorType": "v4-8", "runtimeVersion": "v2",
                "schedulingConfig": {"spot": true},
                "networkConfig": {"network": "default", "enableExternalIps": true,
                                  "canIpForward": true}}"#,
        )
        .unwrap();
        assert_eq!(
            spec.create_flags().unwrap(),
            [
                "--accelerator-type=v4-8",
                "--version=v2",
                "--spot",
                "--network=default"
            ]
        );
        assert_eq!(spec.not_carried(false).len(), 1);
        // On demand, no network config seen: nothing is invented.
        let bare =
            NodeSpec::parse(r#"{"acceleratorType": "v4-8", "runtimeVersion": "v2"}"#).unwrap();
        assert_eq!(
            bare.create_flags().unwrap(),
            ["--accelerator-type=v4-8", "--version=v2"]
        );
        assert!(NodeSpec::parse(r#"{"state": "PREEMPTED"}"#)
            .unwrap()
            .create_flags()
            .is_err());
    }

    #[test]
    fn list_values_with_commas_get_another_delimiter() {
        let items = |list: &[&str]| list.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(gcloud_list(&items(&["a", "b"])), "a,b");
        assert_eq!(gcloud_list(&items(&["a,b", "c"])), "^;^a,b;c");
        assert_eq!(gcloud_list(&items(&["a,b;", "c"])), "^:^a,b;:c");
        assert_eq!(gcloud_list(&items(&["^x^", "c"])), "^;^^x^;c");
        let every = items(&[",;:|~#@!%&+*"]);
        assert_eq!(gcloud_list(&every), "^@@^,;:|~#@!%&+*");
    }

    #[test]
    fn a_saved_spec_survives_a_restart() {
        let dir = std::env::temp_dir().join(format!("podq-spec-{}", uuid::Uuid::new_v4()));
        let path = spec_path(&dir, "us-central2-b", "stable-1");
        assert!(path.ends_with("gcloud-us-central2-b-stable-1.node-spec.json"));
        assert_eq!(load(&path).unwrap(), None);
        let saved = SavedSpec {
            node: "stable-1".into(),
            zone: "us-central2-b".into(),
            project: Some("trm-grant".into()),
            captured_at: Utc::now(),
            captured_state: "READY".into(),
            spec: NodeSpec::parse(DESCRIBE).unwrap(),
        };
        save(&path, &saved).unwrap();
        assert_eq!(load(&path).unwrap(), Some(saved));
        std::fs::write(&path, "{").unwrap();
        assert!(load(&path).is_err());
        std::fs::remove_dir_all(dir).unwrap();
    }
}
