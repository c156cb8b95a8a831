//! Bringing a node that lost its capacity back, per capacity kind, then re-provisioning it.
//!
//! - preemptible / on-demand: `tpu-vm start`; if the node will not start, or is broken
//!   (`UNKNOWN`) or gone, delete it and create it again with the same spec;
//! - spot: delete and create again (a spot node cannot be restarted);
//! - queued: a `SUSPENDED` or `FAILED` queued resource is deleted (with its node) and
//!   created again, then waited for through `WAITING_FOR_RESOURCES`, `PROVISIONING`, ...
//!
//! Between actions the node (or queued resource) is described every `poll_s` until it is
//! `READY` and `HEALTHY`; each distinct thing waited for is reported through `progress`.
//! Then the setup command runs on every host. Preflight follows in the daemon.

use std::time::Duration;

use anyhow::{bail, Context};
use tokio::time::Instant;

use super::node::{self, classify_queued, QueuedClass, QueuedResource};
use super::runner::{CallError, Retry};
use super::{classify_health, classify_state, Capacity, GcloudPod, HealthClass, StateClass};

/// What one look at the pod concluded.
enum Step {
    Ready,
    /// Waiting for something the service does by itself.
    Wait(String),
    /// The worker did something (start, delete, create) and said what.
    Acted,
    /// An action failed: wait longer before the next one.
    ActionFailed(String),
}

/// Pauses before repeating a failed action, doubling up to ten minutes.
const MAX_ACTION_BACKOFF: Duration = Duration::from_secs(600);

/// What a recovery remembers between looks.
#[derive(Default)]
struct Episode {
    /// `tpu-vm start` was tried and failed: recreate instead.
    start_failed: bool,
    /// Looks in a row at an `ACTIVE` queued resource whose node is lost.
    active_but_lost: u32,
    /// The node was seen in another state than READY: its hosts need the setup command.
    disturbed: bool,
}

/// A network or subnetwork resource path as the create flags take it: its last segment.
fn last_segment(path: &str) -> &str {
    path.rsplit('/').next().unwrap_or(path)
}

impl GcloudPod {
    pub(super) async fn recover_node(
        &self,
        progress: &(dyn Fn(String) + Send + Sync),
    ) -> anyhow::Result<()> {
        let deadline = Instant::now() + self.timing.recovery;
        let mut episode = Episode::default();
        let mut said = String::new();
        let mut action_pause = self.timing.poll;
        loop {
            let step = match self.settings.capacity {
                Capacity::Queued => self.queued_step(&mut episode, progress).await,
                _ => self.node_step(&mut episode, progress).await,
            };
            let pause = match step {
                Step::Ready => break,
                Step::Wait(what) => {
                    if what != said {
                        progress(what.clone());
                        said = what;
                    }
                    self.timing.poll
                }
                Step::Acted => {
                    action_pause = self.timing.poll;
                    self.timing.poll
                }
                Step::ActionFailed(what) => {
                    progress(format!(
                        "{what}; trying again in {}s",
                        action_pause.as_secs()
                    ));
                    said.clear();
                    let pause = action_pause;
                    action_pause = (action_pause * 2).min(MAX_ACTION_BACKOFF);
                    pause
                }
            };
            if Instant::now() + pause > deadline {
                bail!(
                    "node {} is not back after {}s (last: {})",
                    self.name,
                    self.timing.recovery.as_secs(),
                    if said.is_empty() {
                        "nothing to wait for"
                    } else {
                        &said
                    }
                );
            }
            tokio::time::sleep(pause).await;
        }
        if episode.disturbed {
            self.needs_setup
                .store(true, std::sync::atomic::Ordering::SeqCst);
        }
        progress(format!("node {} is READY and HEALTHY", self.name));
        if self.needs_setup.load(std::sync::atomic::Ordering::SeqCst) {
            self.setup(progress).await?;
        }
        Ok(())
    }

    /// One look at a node that is not owned by a queued resource.
    async fn node_step(
        &self,
        episode: &mut Episode,
        progress: &(dyn Fn(String) + Send + Sync),
    ) -> Step {
        let node = match self.describe().await {
            Ok(node) => node,
            Err(e) => return Step::Wait(format!("cannot describe node {}: {e}", self.name)),
        };
        let state = node.as_ref().map_or("NOT_FOUND", |n| n.state()).to_owned();
        let health = node
            .as_ref()
            .map_or("HEALTH_UNSPECIFIED", |n| n.health())
            .to_owned();
        match classify_state(&state) {
            StateClass::Ready => self.health_step(&health),
            StateClass::Changing | StateClass::Unknown => {
                episode.disturbed = true;
                Step::Wait(format!(
                    "waiting for node {}: {state} ({})",
                    self.name,
                    node::describe_state(&state)
                ))
            }
            StateClass::Lost => {
                episode.disturbed = true;
                let restartable = matches!(state.as_str(), "PREEMPTED" | "STOPPED" | "TERMINATED");
                let try_start = restartable
                    && !episode.start_failed
                    && matches!(
                        self.settings.capacity,
                        Capacity::Preemptible | Capacity::OnDemand
                    );
                if try_start {
                    progress(format!("starting node {} (it is {state})", self.name));
                    let args = self.args("tpu-vm", "start", &self.name);
                    match self
                        .runner
                        .call(&args, self.timing.operation, Retry::Never)
                        .await
                    {
                        Ok(_) => return Step::Acted,
                        Err(e) => {
                            episode.start_failed = true;
                            progress(format!(
                                "node {} did not start ({e}); deleting and creating it again",
                                self.name
                            ));
                        }
                    }
                }
                match self.recreate_node(node.is_some(), &state, progress).await {
                    Ok(()) => Step::Acted,
                    Err(e) => Step::ActionFailed(format!("{e:#}")),
                }
            }
        }
    }

    fn health_step(&self, health: &str) -> Step {
        match classify_health(health) {
            HealthClass::Healthy => Step::Ready,
            HealthClass::Maintenance => Step::Wait(format!(
                "node {} is READY but under maintenance ({health}): waiting",
                self.name
            )),
            HealthClass::Unhealthy | HealthClass::Unknown => Step::Wait(format!(
                "waiting for node {} to be HEALTHY: {health}",
                self.name
            )),
        }
    }

    /// Deletes the node (if it exists) and creates it again with the spec it had.
    async fn recreate_node(
        &self,
        exists: bool,
        state: &str,
        progress: &(dyn Fn(String) + Send + Sync),
    ) -> anyhow::Result<()> {
        let create = self.create_args()?;
        if exists {
            progress(format!(
                "deleting node {} (it is {state}) to create it again",
                self.name
            ));
            let mut args = self.args("tpu-vm", "delete", &self.name);
            args.push("--quiet".into());
            match self
                .runner
                .call(&args, self.timing.operation, Retry::Api)
                .await
            {
                Ok(_) | Err(CallError::NotFound(_)) => {}
                Err(e) => bail!("cannot delete node {}: {e}", self.name),
            }
        }
        progress(format!("creating node {}", self.name));
        self.runner
            .call(&create, self.timing.operation, Retry::Never)
            .await
            .with_context(|| format!("cannot create node {}", self.name))?;
        Ok(())
    }

    /// The accelerator type and runtime version to create with: the config's, else the
    /// last node seen.
    fn spec(&self) -> anyhow::Result<(String, String, Option<super::Node>)> {
        let last = self
            .last_node
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        let create = &self.settings.create;
        let accelerator = create
            .accelerator_type
            .clone()
            .or_else(|| last.as_ref().and_then(|n| n.accelerator_type.clone()))
            .unwrap_or_else(|| self.accelerator.clone());
        let version = create
            .runtime_version
            .clone()
            .or_else(|| last.as_ref().and_then(|n| n.runtime_version.clone()))
            .with_context(|| {
                format!(
                    "cannot create {}: its runtime version is unknown (no describe showed it); \
                     set gcloud.create.runtime_version",
                    self.name
                )
            })?;
        Ok((accelerator, version, last))
    }

    /// Network, subnetwork and labels of the last node seen, as create flags.
    fn shape_flags(last: Option<&super::Node>) -> Vec<String> {
        let mut flags = Vec::new();
        let Some(node) = last else { return flags };
        if let Some(network) = node.network_config.as_ref() {
            if let Some(n) = &network.network {
                flags.push(format!("--network={}", last_segment(n)));
            }
            if let Some(s) = &network.subnetwork {
                flags.push(format!("--subnetwork={}", last_segment(s)));
            }
        }
        if !node.labels.is_empty() {
            let labels: Vec<String> = node
                .labels
                .iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect();
            flags.push(format!("--labels={}", labels.join(",")));
        }
        flags
    }

    fn create_args(&self) -> anyhow::Result<Vec<String>> {
        let (accelerator, version, last) = self.spec()?;
        let mut args = self.args("tpu-vm", "create", &self.name);
        args.push(format!("--accelerator-type={accelerator}"));
        args.push(format!("--version={version}"));
        match self.settings.capacity {
            Capacity::Preemptible => args.push("--preemptible".into()),
            Capacity::Spot => args.push("--spot".into()),
            Capacity::OnDemand | Capacity::Queued => {}
        }
        args.extend(Self::shape_flags(last.as_ref()));
        args.extend(self.settings.create.extra_args.iter().cloned());
        Ok(args)
    }

    fn queued_create_args(&self) -> anyhow::Result<Vec<String>> {
        let (accelerator, version, last) = self.spec()?;
        let mut args = self.args("queued-resources", "create", &self.queued_resource());
        args.push(format!("--node-id={}", self.name));
        args.push(format!("--accelerator-type={accelerator}"));
        args.push(format!("--runtime-version={version}"));
        let spot = self.settings.create.spot.unwrap_or_else(|| {
            last.as_ref()
                .and_then(|n| n.scheduling_config.as_ref())
                .is_some_and(|s| s.spot)
        });
        if spot {
            args.push("--spot".into());
        }
        args.extend(Self::shape_flags(last.as_ref()));
        args.extend(self.settings.create.extra_args.iter().cloned());
        Ok(args)
    }

    async fn describe_queued(&self) -> Result<Option<QueuedResource>, CallError> {
        let mut args = self.args("queued-resources", "describe", &self.queued_resource());
        args.push("--format=json".into());
        match self.runner.call(&args, self.timing.api, Retry::Api).await {
            Ok(output) => QueuedResource::parse(&output.stdout)
                .map(Some)
                .map_err(|e| CallError::Failed {
                    code: Some(0),
                    stderr: format!("not a queued resource: {e}"),
                }),
            Err(CallError::NotFound(_)) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Deletes the queued resource (and its node) if it exists, and creates it again.
    async fn recreate_queued(
        &self,
        exists: bool,
        why: &str,
        progress: &(dyn Fn(String) + Send + Sync),
    ) -> Step {
        let qr = self.queued_resource();
        let create = match self.queued_create_args() {
            Ok(args) => args,
            Err(e) => return Step::ActionFailed(format!("{e:#}")),
        };
        if exists {
            progress(format!(
                "queued resource {qr} is {why}: deleting it and its node to create it again"
            ));
            let mut args = self.args("queued-resources", "delete", &qr);
            args.push("--force".into());
            args.push("--quiet".into());
            match self
                .runner
                .call(&args, self.timing.operation, Retry::Api)
                .await
            {
                Ok(_) | Err(CallError::NotFound(_)) => {}
                Err(e) => {
                    return Step::ActionFailed(format!("cannot delete queued resource {qr}: {e}"))
                }
            }
        }
        progress(format!(
            "creating queued resource {qr} for node {}",
            self.name
        ));
        match self
            .runner
            .call(&create, self.timing.operation, Retry::Never)
            .await
        {
            Ok(_) => Step::Acted,
            Err(e) => Step::ActionFailed(format!("cannot create queued resource {qr}: {e}")),
        }
    }

    /// One look at a node owned by a queued resource.
    async fn queued_step(
        &self,
        episode: &mut Episode,
        progress: &(dyn Fn(String) + Send + Sync),
    ) -> Step {
        let qr_name = self.queued_resource();
        let qr = match self.describe_queued().await {
            Ok(qr) => qr,
            Err(e) => return Step::Wait(format!("cannot describe queued resource {qr_name}: {e}")),
        };
        let Some(qr) = qr else {
            episode.disturbed = true;
            return self.recreate_queued(false, "gone", progress).await;
        };
        let state = qr.state().to_owned();
        match classify_queued(&state) {
            QueuedClass::Dead => {
                episode.disturbed = true;
                self.recreate_queued(true, &state, progress).await
            }
            QueuedClass::Waiting | QueuedClass::Unknown => {
                episode.disturbed = true;
                if classify_queued(&state) == QueuedClass::Unknown {
                    self.warn_once(format!("queued resource state {state}"));
                }
                Step::Wait(format!("waiting for queued resource {qr_name}: {state}"))
            }
            QueuedClass::Active => {
                let node = match self.describe().await {
                    Ok(node) => node,
                    Err(e) => {
                        return Step::Wait(format!("cannot describe node {}: {e}", self.name))
                    }
                };
                let node_state = node.as_ref().map_or("NOT_FOUND", |n| n.state()).to_owned();
                match classify_state(&node_state) {
                    StateClass::Ready => {
                        episode.active_but_lost = 0;
                        self.health_step(node.as_ref().map_or("HEALTH_UNSPECIFIED", |n| n.health()))
                    }
                    StateClass::Lost => {
                        // The queued resource follows its node into SUSPENDED; if it does
                        // not within a few looks, it will not bring the node back.
                        episode.disturbed = true;
                        episode.active_but_lost += 1;
                        if episode.active_but_lost > 3 {
                            episode.active_but_lost = 0;
                            self.recreate_queued(
                                true,
                                &format!("ACTIVE with its node {node_state}"),
                                progress,
                            )
                            .await
                        } else {
                            Step::Wait(format!(
                                "queued resource {qr_name} is ACTIVE but node {} is {node_state}: waiting",
                                self.name
                            ))
                        }
                    }
                    StateClass::Changing | StateClass::Unknown => {
                        episode.disturbed = true;
                        Step::Wait(format!(
                            "waiting for node {}: {node_state} ({})",
                            self.name,
                            node::describe_state(&node_state)
                        ))
                    }
                }
            }
        }
    }
}
