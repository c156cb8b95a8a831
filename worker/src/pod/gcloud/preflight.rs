//! Preflight: whether every host can run the next attempt (the node's state, the code's
//! commit and JAX version agreeing across hosts, free disk, the datasets), and the setup
//! command that re-provisions hosts a recovery gave back blank.

use std::collections::BTreeMap;

use anyhow::bail;
use podq_api::{Preflight, PreflightFailure};

use super::runner::Retry;
use super::{classify_health, classify_state, node, remote, GcloudPod, HealthClass, StateClass};
use crate::pod::PodDriver;

impl GcloudPod {
    /// The checks behind `PodDriver::preflight`. A node that is not ready, or a setup that
    /// fails, ends it at once: nothing on the hosts can be checked then. Past that, every
    /// failure on every host is gathered, so one report names all there is to fix.
    pub(super) async fn run_preflight(&self) -> Preflight {
        let mut failures = Vec::new();
        let done = |failures: Vec<PreflightFailure>| Preflight {
            passed: failures.is_empty(),
            at: Some(chrono::Utc::now()),
            failures,
        };
        if let Some(slice) = self.compute() {
            let status = self.slice_status(slice).await;
            if !status.is_ready() {
                let message = format!(
                    "slice {} is {}/{} (every instance must be RUNNING and the topology ACTIVE)",
                    slice.spec.group, status.state, status.health
                );
                failures.push(failure(None, "tpu_state", message));
                return done(failures);
            }
            if slice.instance(slice.spec.size - 1).is_none() {
                let message = format!(
                    "slice {}: cannot tell which instance is which host (each needs \
                     TPU_WORKER_ID in its tpu-env metadata; see the worker's log)",
                    slice.spec.group
                );
                failures.push(failure(None, "tpu_state", message));
                return done(failures);
            }
        } else {
            match self.describe().await {
                Ok(Some(node)) => {
                    let ready = classify_state(node.state()) == StateClass::Ready
                        && classify_health(node.health()) == HealthClass::Healthy;
                    if !ready {
                        let mut message = format!(
                            "node {} is {}/{} ({})",
                            self.name,
                            node.state(),
                            node.health(),
                            node::describe_state(node.state())
                        );
                        if let Some(symptoms) = node.symptoms_text() {
                            message.push_str(&format!("; symptoms: {symptoms}"));
                        }
                        failures.push(failure(None, "tpu_state", message));
                        return done(failures);
                    }
                }
                Ok(None) => {
                    failures.push(failure(
                        None,
                        "tpu_state",
                        format!("node {} does not exist", self.name),
                    ));
                    return done(failures);
                }
                Err(e) => {
                    failures.push(failure(None, "tpu_state", format!("cannot describe: {e}")));
                    return done(failures);
                }
            }
        }
        if self.setup_needed() {
            let log = |what: String| tracing::info!(pod = %self.name, "{what}");
            if let Err(e) = self.setup(&log).await {
                failures.push(failure(None, "setup", format!("{e:#}")));
                return done(failures);
            }
        }
        // Trainers left by an earlier worker are orphans: nothing runs between attempts.
        for line in self.clean_hosts().await.unwrap_or_default() {
            tracing::info!(pod = %self.name, "preflight: {line}");
        }
        let code_dir = self.settings.code_dir.clone();
        let python_check = self.settings.python_check.clone();
        let local_datasets: Vec<String> = self
            .settings
            .dataset_paths
            .iter()
            .filter(|p| !p.starts_with("gs://"))
            .cloned()
            .collect();
        let script = match remote::preflight(&remote::PreflightScript {
            code_dir: &code_dir,
            python_check: &python_check,
            dataset_paths: &local_datasets,
        }) {
            Ok(script) => script,
            Err(e) => {
                failures.push(failure(None, "config", e.to_string()));
                return done(failures);
            }
        };
        let results = self.ssh_every_host(&script).await;
        let mut commits = BTreeMap::new();
        let mut versions = BTreeMap::new();
        for (host, result) in results {
            let output = match result {
                Ok(output) => output,
                Err(e) => {
                    failures.push(failure(Some(host), "ssh", format!("cannot reach: {e}")));
                    continue;
                }
            };
            for (check, message) in remote::failures(&output.stdout) {
                failures.push(failure(Some(host), &check, message));
            }
            if let Some(commit) = remote::info(&output.stdout, "commit") {
                commits.insert(host, commit.to_owned());
            }
            if let Some(version) = remote::info(&output.stdout, "jax") {
                versions.insert(host, version.to_owned());
            }
            match remote::info(&output.stdout, "disk_free_kb").and_then(|v| v.parse::<f64>().ok()) {
                Some(kb) => {
                    let gb = kb / (1024.0 * 1024.0);
                    if gb < self.settings.min_free_disk_gb {
                        failures.push(failure(
                            Some(host),
                            "disk_free",
                            format!(
                                "{gb:.1} GB free under {code_dir}, below the {} GB threshold",
                                self.settings.min_free_disk_gb
                            ),
                        ));
                    }
                }
                None => failures.push(failure(
                    Some(host),
                    "disk_free",
                    "cannot read the free disk space",
                )),
            }
        }
        for (values, check, what) in [
            (&commits, "code_commit", "commit"),
            (&versions, "jax_version", "JAX version"),
        ] {
            if let Some(expected) = majority(values) {
                for (host, value) in values {
                    if value != expected {
                        failures.push(failure(
                            Some(*host),
                            check,
                            format!("{what} {value} differs from {expected} on the other hosts"),
                        ));
                    }
                }
            }
        }
        for (path, error) in self.missing_gcs_paths(&self.settings.dataset_paths).await {
            failures.push(failure(
                None,
                "dataset",
                format!("{path} cannot be listed: {error}"),
            ));
        }
        done(failures)
    }

    /// Runs the setup command on every host; `Ok` once it exited 0 everywhere.
    pub(super) async fn setup(
        &self,
        progress: &(dyn Fn(String) + Send + Sync),
    ) -> anyhow::Result<()> {
        let Some(command) = self.settings.setup_command.clone() else {
            self.setup_state.done(self.node_id().as_deref());
            return Ok(());
        };
        let hosts = self.hosts();
        progress(format!("running the setup command on {hosts} hosts"));
        let results = self
            .ssh_all(
                &self.runner,
                |host| remote::setup(host, hosts, &command),
                self.timing.setup,
                Retry::Ssh,
                &self.all_hosts(),
            )
            .await;
        let mut failed = Vec::new();
        for (host, result) in results {
            match result {
                Ok(output) => tracing::debug!(
                    pod = %self.name,
                    host,
                    stdout = %output.stdout.trim(),
                    stderr = %output.stderr.trim(),
                    "setup done"
                ),
                Err(e) => failed.push(format!("host {host}: {e}")),
            }
        }
        if !failed.is_empty() {
            bail!("setup failed: {}", failed.join("; "));
        }
        self.setup_state.done(self.node_id().as_deref());
        progress(format!("setup done on {hosts} hosts"));
        Ok(())
    }

    /// Whether every gs:// path exists (`gcloud storage ls`); the missing ones otherwise.
    pub(super) async fn missing_gcs_paths(&self, paths: &[String]) -> Vec<(String, String)> {
        let mut missing = Vec::new();
        for path in paths.iter().filter(|p| p.starts_with("gs://")) {
            let args = vec!["storage".into(), "ls".into(), path.clone()];
            if let Err(e) = self.runner.call(&args, self.timing.api, Retry::Api).await {
                missing.push((path.clone(), e.to_string()));
            }
        }
        missing
    }
}

/// The value most hosts report, ties going to the lowest host.
fn majority(values: &BTreeMap<u32, String>) -> Option<&str> {
    let mut counts: Vec<(&str, usize, u32)> = Vec::new();
    for (host, value) in values {
        match counts.iter_mut().find(|(v, _, _)| *v == value.as_str()) {
            Some(entry) => entry.1 += 1,
            None => counts.push((value.as_str(), 1, *host)),
        }
    }
    counts
        .into_iter()
        .max_by(|a, b| a.1.cmp(&b.1).then(b.2.cmp(&a.2)))
        .map(|(v, _, _)| v)
}

fn failure(host: Option<u32>, check: &str, message: impl Into<String>) -> PreflightFailure {
    PreflightFailure {
        host,
        check: check.to_owned(),
        message: message.into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_odd_host_out_is_found() {
        let values = BTreeMap::from([
            (0, "a".to_owned()),
            (1, "a".to_owned()),
            (2, "b".to_owned()),
        ]);
        assert_eq!(majority(&values), Some("a"));
        let tie = BTreeMap::from([(0, "x".to_owned()), (1, "y".to_owned())]);
        assert_eq!(majority(&tie), Some("x"));
    }
}
