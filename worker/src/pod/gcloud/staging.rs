//! Starting an attempt on the hosts: the resolved config copied to every host and checked
//! there, then each host's agent started, after installing this worker's `podq` where the
//! host's is missing or another version.

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
        let (copied, missing) = tokio::join!(
            self.copy_to_hosts(file_name, &config.contents),
            self.missing_gcs_paths(&datasets)
        );
        let remote_tmp = copied?;
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
        // One ssh per host, all at once: place and check the config, start the agent.
        let mut outdated = self
            .stage_and_start(start, Some(&remote_tmp), &local_datasets)
            .await?;
        if !outdated.is_empty() {
            self.install_agent(&outdated).await?;
            outdated = self.stage_and_start(start, None, &local_datasets).await?;
            if !outdated.is_empty() {
                bail!(
                    "the agent on host(s) {outdated:?} is still not podq {} after installing it",
                    env!("CARGO_PKG_VERSION")
                );
            }
        }
        Ok(())
    }

    /// `tpu-vm scp LOCAL NODE:REMOTE --worker=HOST`.
    fn scp_args(&self, local: &std::path::Path, remote: &str, host: u32) -> Vec<String> {
        let mut args = self.args("tpu-vm", "scp", &local.display().to_string());
        // scp's positional arguments are SRC DEST: put the destination right after.
        args.insert(5, format!("{}:{remote}", self.remote_target()));
        args.push(format!("--worker={host}"));
        args.extend(self.settings.scp_flags.iter().cloned());
        args
    }

    /// Copies `contents` to every host at once; answers where it landed (the same path on
    /// every host).
    async fn copy_to_hosts(&self, file_name: &str, contents: &[u8]) -> anyhow::Result<String> {
        let token = uuid::Uuid::new_v4().simple().to_string();
        let local = std::env::temp_dir().join(format!("podq-stage-{token}-{file_name}"));
        tokio::fs::write(&local, contents)
            .await
            .with_context(|| format!("cannot write {}", local.display()))?;
        let remote_tmp = format!("/tmp/podq-stage-{token}.yaml");
        let copies = self.all_hosts().into_iter().map(|host| {
            let args = self.scp_args(&local, &remote_tmp, host);
            async move {
                (
                    host,
                    self.runner.call(&args, self.timing.ssh, Retry::Ssh).await,
                )
            }
        });
        let results = futures::future::join_all(copies).await;
        let _ = tokio::fs::remove_file(&local).await;
        let failed: Vec<String> = results
            .into_iter()
            .filter_map(|(host, r)| r.err().map(|e| format!("host {host}: {e}")))
            .collect();
        if !failed.is_empty() {
            bail!(
                "cannot copy {file_name} to the hosts: {}",
                failed.join("; ")
            );
        }
        Ok(remote_tmp)
    }

    /// One ssh call per host, all at once, each placing and checking the config (see
    /// `remote::stage`) and starting that host's agent. Answers the hosts whose agent
    /// binary is missing or of another version (nothing was started there).
    async fn stage_and_start(
        &self,
        start: &AgentStart,
        copied_to: Option<&str>,
        datasets: &[String],
    ) -> anyhow::Result<Vec<u32>> {
        let by_host: BTreeMap<u32, &HostLaunch> =
            start.launches.iter().map(|l| (l.host, l)).collect();
        let hosts: Vec<u32> = by_host.keys().copied().collect();
        let results = self
            .ssh_all(
                &self.runner,
                |host| {
                    let launch = by_host[&host];
                    let stage = remote::stage(&remote::StageScript {
                        tmp: copied_to,
                        dir: &self.settings.config_dir,
                        name: &start.config.file_name,
                        sha256: &start.config.sha256,
                        code_dir: &self.settings.code_dir,
                        datasets,
                    });
                    stage
                        + &remote::start_agent(&remote::AgentScript {
                            agent_path: &self.settings.agent_path,
                            agent_dir: &self.settings.agent_dir,
                            version: env!("CARGO_PKG_VERSION"),
                            worker_url: &start.worker_url,
                            lease: &start.lease,
                            secret: &start.secret,
                            host,
                            env: &launch.env,
                            command: &launch.command,
                        })
                },
                self.timing.ssh,
                Retry::Ssh,
                &hosts,
            )
            .await;
        let mut outdated = Vec::new();
        let mut failed = Vec::new();
        for (host, result) in results {
            match result {
                Ok(output) => {
                    let failures = remote::failures(&output.stdout);
                    if failures.iter().any(|(check, _)| check == "agent_version") {
                        outdated.push(host);
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

    /// Copies this worker's `podq` to `agent_path` on `hosts`.
    async fn install_agent(&self, hosts: &[u32]) -> anyhow::Result<()> {
        let binary = match &self.settings.agent_binary {
            Some(path) => PathBuf::from(path),
            None => std::env::current_exe().context("cannot find this program's path")?,
        };
        tracing::info!(pod = %self.name, ?hosts, binary = %binary.display(), "installing the agent");
        let token = uuid::Uuid::new_v4().simple().to_string();
        let remote_tmp = format!("/tmp/podq-agent-{token}");
        let copies = hosts.iter().map(|&host| {
            let args = self.scp_args(&binary, &remote_tmp, host);
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
        let script = remote::install_agent(&remote_tmp, &self.settings.agent_path);
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
