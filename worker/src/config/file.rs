//! The worker's YAML config file (`podq worker --config worker.yaml`). Every field is
//! optional; command-line flags and environment variables win over it, and it wins over
//! the built-in defaults. See `deploy/stable-1.worker.yaml` for a documented example.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::Context;
use serde::Deserialize;

use crate::pod::gcloud::GcloudSettings;

use super::Driver;

/// Config files are written by people: anything larger is a mistake.
const MAX_CONFIG_BYTES: u64 = 1024 * 1024;

#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct WorkerFile {
    /// The podq server's URL.
    pub server: Option<String>,
    /// The worker token, inline. Prefer `token_file`.
    pub token: Option<String>,
    /// A file holding the worker token (relative paths are from the config file).
    pub token_file: Option<PathBuf>,
    /// The CA certificate(s) (PEM) that signed an `https://` server's certificate
    /// (relative paths are from the config file).
    pub ca: Option<PathBuf>,
    /// The pod's name: the TPU node.
    pub pod: Option<String>,
    pub driver: Option<Driver>,
    pub accelerator: Option<String>,
    /// Hosts of the pod; the gcloud driver takes the count from the node's endpoints.
    pub hosts: Option<u32>,
    pub trainer_command: Option<String>,
    pub trainer_env: BTreeMap<String, String>,
    pub stop_grace_s: Option<f64>,
    pub status_poll_s: Option<f64>,
    pub hang_timeout_s: Option<f64>,
    pub agent_silence_s: Option<f64>,
    pub maintenance_lead_s: Option<f64>,
    pub maintenance_timeout_s: Option<f64>,
    pub metrics_flush_s: Option<f64>,
    pub checkpoint_scan_s: Option<f64>,
    pub lease_wait_s: Option<u64>,
    pub preflight_retry_s: Option<f64>,
    pub agent_listen: Option<std::net::SocketAddr>,
    pub agent_url: Option<String>,
    pub state_dir: Option<PathBuf>,
    /// Settings of the gcloud driver.
    pub gcloud: Option<GcloudSettings>,
    /// Settings of the local (simulated) driver.
    pub local: LocalFile,
}

#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct LocalFile {
    pub pod_root: Option<PathBuf>,
    pub recovery_delay_s: Option<f64>,
}

impl WorkerFile {
    pub fn load(path: &Path) -> anyhow::Result<WorkerFile> {
        let size = std::fs::metadata(path)
            .with_context(|| format!("cannot read the worker config {}", path.display()))?
            .len();
        if size > MAX_CONFIG_BYTES {
            anyhow::bail!(
                "the worker config {} is {size} bytes; more than {MAX_CONFIG_BYTES} is not a config",
                path.display()
            );
        }
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read the worker config {}", path.display()))?;
        let mut file: WorkerFile = if text.trim().is_empty() {
            WorkerFile::default()
        } else {
            serde_yaml::from_str(&text)
                .with_context(|| format!("the worker config {} is invalid", path.display()))?
        };
        let base = path.parent().unwrap_or(Path::new("."));
        let relative_to_file = |p: &mut Option<PathBuf>| {
            if let Some(path) = p.as_mut() {
                if path.is_relative() {
                    *path = base.join(&*path);
                }
            }
        };
        relative_to_file(&mut file.token_file);
        relative_to_file(&mut file.ca);
        relative_to_file(&mut file.local.pod_root);
        Ok(file)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_documented_example_loads() {
        let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/stable-1.worker.yaml");
        let file = WorkerFile::load(&example).unwrap();
        assert_eq!(file.pod.as_deref(), Some("stable-1"));
        assert_eq!(file.driver, Some(Driver::Gcloud));
        let gcloud = file.gcloud.unwrap();
        assert_eq!(gcloud.zone, "us-central2-b");
        assert!(file.trainer_command.unwrap().contains("{config_dir}"));
        assert!(file.token_file.unwrap().is_absolute());
    }

    #[test]
    fn the_documented_compute_engine_example_loads_and_makes_a_four_host_slice() {
        use crate::pod::gcloud::{Api, GcloudPod, ProvisioningModel};
        use crate::pod::PodDriver;
        let example =
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/trillium-1.worker.yaml");
        let file = WorkerFile::load(&example).unwrap();
        let gcloud = file.gcloud.unwrap();
        assert_eq!(gcloud.api, Api::Compute);
        assert_eq!(gcloud.compute.provisioning_model, ProvisioningModel::Spot);
        let pod = GcloudPod::new("trillium-1", "v6e-16", 8, gcloud).unwrap();
        assert_eq!(pod.hosts(), 4);
    }

    #[test]
    fn a_typo_is_an_error() {
        let dir = std::env::temp_dir().join(format!("podq-cfg-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("w.yaml");
        std::fs::write(&path, "servr: http://x\n").unwrap();
        let err = WorkerFile::load(&path).unwrap_err();
        assert!(format!("{err:#}").contains("servr"), "{err:#}");
        std::fs::write(&path, "token_file: tok\nlocal:\n  pod_root: pod\n").unwrap();
        let file = WorkerFile::load(&path).unwrap();
        assert_eq!(file.token_file, Some(dir.join("tok")));
        assert_eq!(file.local.pod_root, Some(dir.join("pod")));
        std::fs::remove_dir_all(dir).unwrap();
    }
}
