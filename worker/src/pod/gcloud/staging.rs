//! Starting an attempt on the hosts: the resolved config and each host's launch file (its
//! trainer environment and the lease's secret, 0600) copied in one scp per host, the config
//! checked there, then each host's agent started, after installing this worker's `podq`
//! where the host's is missing or another build, and only if the host's glibc can run it.
//!
//! No secret is in a command line: gcloud logs every command's arguments at DEBUG into
//! files it keeps for 30 days (calliope/base.py, core/log.py), and `ps` shows them.

use std::collections::BTreeMap;
use std::path::PathBuf;

use anyhow::{bail, Context};

use super::runner::Retry;
use super::{remote, GcloudPod};
use crate::pod::{AgentStart, HostLaunch};

impl GcloudPod {
    /// `PodDriver::start_agents`.
    pub(super) async fn stage_and_start_agents(&self, start: &AgentStart) -> anyhow::Result<()> {
        if !remote::valid_lease(&start.lease) {
            bail!(
                "lease id `{}` cannot tag a process on the host",
                start.lease
            );
        }
        let config = &start.config;
        let file_name = &config.file_name;
        if file_name.is_empty() || file_name.contains('/') || file_name.starts_with('.') {
            bail!("`{file_name}` is not a plain file name");
        }
        let datasets = if self.settings.check_config_datasets {
            config_datasets(&config.contents)
        } else {
            Vec::new()
        };
        // The copies and the listing of gs:// datasets, all at once.
        let (copied, missing) =
            tokio::join!(self.copy_to_hosts(start), self.missing_gcs_paths(&datasets));
        let staged = copied?;
        if !missing.is_empty() {
            let text: Vec<String> = missing
                .into_iter()
                .map(|(path, e)| format!("{path} ({e})"))
                .collect();
            bail!("the config's dataset cannot be listed: {}", text.join("; "));
        }
        let local_datasets: Vec<String> = datasets
            .into_iter()
            .filter(|p| !p.starts_with("gs://"))
            .collect();
        let (binary, build_id) = self.agent_build().await?;
        // One ssh per host, all at once: place and check the config, start the agent.
        let outdated = self
            .stage_and_start(start, Some(&staged), &local_datasets, &build_id)
            .await?;
        if !outdated.is_empty() {
            // Reads and scans the whole binary: off the runtime's threads, which carry every
            // slice's heartbeats.
            let (path, hosts) = (binary.clone(), outdated.clone());
            tokio::task::spawn_blocking(move || check_glibc(&path, &hosts))
                .await
                .context("the glibc check of the agent binary panicked")??;
            let hosts: Vec<u32> = outdated.keys().copied().collect();
            self.install_agent(&binary, &hosts).await?;
            let still = self
                .stage_and_start(start, None, &local_datasets, &build_id)
                .await?;
            if !still.is_empty() {
                bail!(
                    "the agent on host(s) {:?} is still not build {build_id} after installing it",
                    still.keys().collect::<Vec<_>>()
                );
            }
        }
        Ok(())
    }

    /// The binary installed as the hosts' agent, and its build id.
    /// Hashed off the runtime's threads: the first hash of a binary reads all of it.
    async fn agent_build(&self) -> anyhow::Result<(PathBuf, String)> {
        let binary = match &self.settings.agent_binary {
            Some(path) => PathBuf::from(path),
            None => std::env::current_exe().context("cannot find this program's path")?,
        };
        let (cache, path) = (self.agent_build_id.clone(), binary.clone());
        let id = tokio::task::spawn_blocking(move || cache.of_file(&path))
            .await
            .context("hashing the agent binary panicked")?
            .with_context(|| format!("cannot read the agent binary {}", binary.display()))?;
        Ok((binary, id))
    }

    /// `tpu-vm scp LOCAL... NODE:REMOTE --worker=HOST`, or on Compute Engine
    /// `compute scp LOCAL... INSTANCE:REMOTE`.
    fn scp_args(&self, locals: &[&std::path::Path], remote: &str, host: u32) -> Vec<String> {
        let first = locals[0].display().to_string();
        let mut args = match self.compute() {
            Some(slice) => slice.spec.on(
                &["scp"],
                &first,
                super::compute::Place::Zone(&self.settings.zone),
                &[],
            ),
            None => self.args("tpu-vm", "scp", &first),
        };
        // scp's positional arguments are SRC... DEST: put the rest right after the first.
        let mut at = args
            .iter()
            .position(|a| *a == first)
            .map_or(args.len(), |i| i + 1);
        for local in &locals[1..] {
            args.insert(at, local.display().to_string());
            at += 1;
        }
        args.insert(at, format!("{}:{remote}", self.remote_target(host)));
        if self.compute().is_none() {
            args.push(format!("--worker={host}"));
        }
        args.extend(self.settings.scp_flags.iter().cloned());
        args
    }

    /// Copies the config and each host's launch file to the hosts of `start`, one scp per
    /// host, all at once; answers where they landed.
    async fn copy_to_hosts(&self, start: &AgentStart) -> anyhow::Result<Staged> {
        let token = uuid::Uuid::new_v4().simple().to_string();
        let dir = std::env::temp_dir();
        let config_name = format!("podq-stage-{token}-{}", start.config.file_name);
        let local_config = dir.join(&config_name);
        tokio::fs::write(&local_config, &start.config.contents)
            .await
            .with_context(|| format!("cannot write {}", local_config.display()))?;
        let mut launch_names = BTreeMap::new();
        let mut local_files = vec![local_config.clone()];
        for launch in &start.launches {
            let name = format!("podq-stage-{token}-launch-{}.sh", launch.host);
            let local = dir.join(&name);
            write_private(&local, &remote::launch_file(&launch.env, &start.secret)?)?;
            local_files.push(local);
            launch_names.insert(launch.host, format!("/tmp/{name}"));
        }
        let copies = start.launches.iter().map(|launch| {
            let local_launch = dir.join(format!("podq-stage-{token}-launch-{}.sh", launch.host));
            let args = self.scp_args(&[&local_config, &local_launch], "/tmp/", launch.host);
            async move {
                (
                    launch.host,
                    self.runner.call(&args, self.timing.ssh, Retry::Ssh).await,
                )
            }
        });
        let results = futures::future::join_all(copies).await;
        for file in &local_files {
            let _ = tokio::fs::remove_file(file).await;
        }
        let failed: Vec<String> = results
            .into_iter()
            .filter_map(|(host, r)| r.err().map(|e| format!("host {host}: {e}")))
            .collect();
        if !failed.is_empty() {
            bail!(
                "cannot copy {} to the hosts: {}",
                start.config.file_name,
                failed.join("; ")
            );
        }
        Ok(Staged {
            config: format!("/tmp/{config_name}"),
            launch: launch_names,
        })
    }

    /// One ssh call per host, all at once, each placing and checking the config (see
    /// `remote::stage`) and starting that host's agent. Answers the hosts whose agent
    /// binary is missing or another build (nothing was started there), with the glibc
    /// version each reported.
    async fn stage_and_start(
        &self,
        start: &AgentStart,
        copied: Option<&Staged>,
        datasets: &[String],
        build_id: &str,
    ) -> anyhow::Result<BTreeMap<u32, Option<String>>> {
        let by_host: BTreeMap<u32, &HostLaunch> =
            start.launches.iter().map(|l| (l.host, l)).collect();
        let hosts: Vec<u32> = by_host.keys().copied().collect();
        let stage = remote::stage(&remote::StageScript {
            tmp: copied.map(|c| c.config.as_str()),
            dir: &self.settings.config_dir,
            name: &start.config.file_name,
            sha256: &start.config.sha256,
            code_dir: &self.settings.code_dir,
            datasets,
        })?;
        let mut scripts = BTreeMap::new();
        for (&host, launch) in &by_host {
            let agent = remote::start_agent(&remote::AgentScript {
                agent_path: &self.settings.agent_path,
                agent_dir: &self.settings.agent_dir,
                build_id,
                worker_url: &start.worker_url,
                lease: &start.lease,
                host,
                launch_tmp: copied.and_then(|c| c.launch.get(&host)).map(String::as_str),
                command: &launch.command,
            })?;
            scripts.insert(host, format!("{stage}{agent}"));
        }
        let results = self
            .ssh_all(
                &self.runner,
                |host| scripts[&host].clone(),
                self.timing.ssh,
                Retry::Ssh,
                &hosts,
            )
            .await;
        let mut outdated = BTreeMap::new();
        let mut failed = Vec::new();
        for (host, result) in results {
            match result {
                Ok(output) => {
                    let failures = remote::failures(&output.stdout);
                    if failures.iter().any(|(check, _)| check == "agent_version") {
                        let glibc = remote::info(&output.stdout, "glibc").map(str::to_owned);
                        outdated.insert(host, glibc);
                    } else if let Some((check, message)) = failures.first() {
                        failed.push(format!("host {host}: {message} ({check})"));
                    }
                }
                Err(e) => failed.push(format!("host {host}: {e}")),
            }
        }
        if !failed.is_empty() {
            bail!("cannot start the agents: {}", failed.join("; "));
        }
        Ok(outdated)
    }

    /// Copies `binary` to `agent_path` on `hosts`.
    async fn install_agent(&self, binary: &std::path::Path, hosts: &[u32]) -> anyhow::Result<()> {
        tracing::info!(pod = %self.name, ?hosts, binary = %binary.display(), "installing the agent");
        let token = uuid::Uuid::new_v4().simple().to_string();
        let remote_tmp = format!("/tmp/podq-agent-{token}");
        let copies = hosts.iter().map(|&host| {
            let args = self.scp_args(&[binary], &remote_tmp, host);
            async move {
                (
                    host,
                    self.runner.call(&args, self.timing.ssh, Retry::Ssh).await,
                )
            }
        });
        let mut failed = Vec::new();
        for (host, result) in futures::future::join_all(copies).await {
            if let Err(e) = result {
                failed.push(format!("host {host}: {e}"));
            }
        }
        if !failed.is_empty() {
            bail!("cannot copy the agent: {}", failed.join("; "));
        }
        let script = remote::install_agent(&remote_tmp, &self.settings.agent_path)?;
        let results = self
            .ssh_all(
                &self.runner,
                |_| script.clone(),
                self.timing.ssh,
                Retry::Ssh,
                hosts,
            )
            .await;
        for (host, result) in results {
            if let Err(e) = result {
                failed.push(format!("host {host}: {e}"));
            }
        }
        if !failed.is_empty() {
            bail!("cannot install the agent: {}", failed.join("; "));
        }
        Ok(())
    }
}

/// Where a launch's files landed on the hosts.
struct Staged {
    /// The config, at the same path on every host.
    config: String,
    /// Each host's launch file.
    launch: BTreeMap<u32, String>,
}

/// A new file only its owner can read.
fn write_private(path: &std::path::Path, text: &str) -> anyhow::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let _ = std::fs::remove_file(path);
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .with_context(|| format!("cannot create {}", path.display()))?;
    file.write_all(text.as_bytes())?;
    Ok(())
}

/// The TPU VM image's glibc, `tpu-ubuntu2204-base`'s (Ubuntu 22.04), when a host does not say.
const TPU_VM_GLIBC: (u32, u32) = (2, 35);

/// Refuses to install an agent binary that needs a newer glibc than a host has: it would
/// fail to start there on every launch. `hosts` maps each host to the glibc it reported.
fn check_glibc(
    binary: &std::path::Path,
    hosts: &BTreeMap<u32, Option<String>>,
) -> anyhow::Result<()> {
    let bytes = std::fs::read(binary)
        .with_context(|| format!("cannot read the agent binary {}", binary.display()))?;
    let Some(needed) = crate::build_id::required_glibc(&bytes) else {
        return Ok(());
    };
    let short: Vec<String> = hosts
        .iter()
        .filter_map(|(host, glibc)| {
            let have = glibc
                .as_deref()
                .and_then(crate::build_id::parse_glibc)
                .unwrap_or(TPU_VM_GLIBC);
            (have < needed).then(|| format!("host {host} has {}.{}", have.0, have.1))
        })
        .collect();
    if short.is_empty() {
        return Ok(());
    }
    bail!(
        "the agent binary {} needs glibc {}.{} and {}: build a portable agent (a musl build, \
         `cargo build --release --target x86_64-unknown-linux-musl`, or one linked against \
         glibc 2.35, `cargo zigbuild --release --target x86_64-unknown-linux-gnu.2.35`) and \
         set gcloud.agent_binary to it (docs/operations/worker.md)",
        binary.display(),
        needed.0,
        needed.1,
        short.join(", ")
    )
}

/// `data_paths` and `data_paths_test` of a resolved config.
fn config_datasets(yaml: &[u8]) -> Vec<String> {
    let Ok(config) = serde_yaml::from_slice::<serde_yaml::Value>(yaml) else {
        return Vec::new();
    };
    let mut paths = Vec::new();
    for key in ["data_paths", "data_paths_test"] {
        match config.get(key) {
            Some(serde_yaml::Value::String(path)) => paths.push(path.clone()),
            Some(serde_yaml::Value::Sequence(list)) => paths.extend(
                list.iter()
                    .filter_map(|v| v.as_str().map(str::to_owned))
                    .filter(|p| !p.is_empty()),
            ),
            _ => {}
        }
    }
    paths
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_config_names_its_datasets() {
        let yaml = b"data_paths:\n  - data/sudoku\n  - gs://b/d\ndata_paths_test: []\nlr: 1\n";
        assert_eq!(config_datasets(yaml), vec!["data/sudoku", "gs://b/d"]);
        assert_eq!(config_datasets(b"data_paths: one\n"), vec!["one"]);
        assert!(config_datasets(b"lr: 1\n").is_empty());
    }
}
