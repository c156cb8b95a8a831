//! Bringing a node that lost its capacity back, as Cloud TPU allows it, then re-provisioning
//! it.
//!
//! - A multi-host node (a slice of more than one host VM; a v4-64 has 8) is never started:
//!   the TPU API stops and starts single-host TPU VMs only, and a preempted pod slice has
//!   to be deleted and created again, which is what SkyPilot does for its TPU pods
//!   (skypilot-org/skypilot#1468, #1470, #1483). It is created again from its captured spec
//!   (`spec.rs`): accelerator type, runtime version, scheduling (preemptible, spot,
//!   reserved), network, subnetwork, external IPs, service account and scopes, metadata,
//!   tags, labels and data disks.
//! - A single-host preemptible or on-demand node that is `PREEMPTED`, `STOPPED` or
//!   `TERMINATED` gets one `tpu-vm start`; if that fails it is deleted and created again.
//!   A spot node is never restarted.
//! - queued: a `SUSPENDED` queued resource is deleted (with its node) and created again. A
//!   `FAILED` one is read first (`state.failedData.error`, by `errors`, the one reading of
//!   gcloud a pool acts on too): no capacity (a stockout, a full reservation, an expired
//!   `valid until`) or a passing failure (a per-minute request limit among them) is retried
//!   after a pause that doubles; a quota the project lacks, or what a person must fix (a
//!   request that is invalid, a denial, billing disabled), is *held*: nothing is deleted or
//!   created again, and the pod's recovery text says why, until a person deletes the queued
//!   resource (podq then creates it anew) or the worker restarts.
//! - A create call refused so holds the same way (`refusal`).
//!
//! Between actions the node (or queued resource) is described every `poll_s` until it is
//! `READY` and `HEALTHY`; each distinct thing waited for is reported through `progress`.
//! Then the setup command runs on every host. Preflight follows in the daemon.

use std::time::Duration;

use anyhow::bail;
use tokio::time::Instant;

use super::errors::{self, CloudError, Kind};
use super::node::{self, classify_queued};
use super::node::{QueuedClass, QueuedResource};
use super::runner::{CallError, Retry};
use super::spec::{self, NodeSpec, SavedSpec, Scheduling};
use super::{classify_health, classify_state, Capacity, GcloudPod, HealthClass, StateClass};

/// What one look at the pod concluded.
pub(super) enum Step {
    Ready,
    /// Waiting for something the service does by itself.
    Wait(String),
    /// Nothing will be done until a person acts (or the cause goes away): say why.
    Held(String),
    /// The worker did something (start, delete, create) and said what.
    Acted,
    /// An action failed: wait longer before the next one.
    ActionFailed(String),
}

/// Pauses before repeating a failed action, doubling up to ten minutes.
const MAX_ACTION_BACKOFF: Duration = Duration::from_secs(600);

fn backoff(base: Duration, failures: u32) -> Duration {
    podq_api::backoff::exponential(base, failures.min(16), MAX_ACTION_BACKOFF)
}

/// What a recovery remembers between looks.
#[derive(Default)]
pub(super) struct Episode {
    /// `tpu-vm start` was tried and failed: recreate instead.
    start_failed: bool,
    /// Looks in a row at an `ACTIVE` queued resource whose node is lost.
    active_but_lost: u32,
    /// The node was seen in another state than READY: its hosts need the setup command.
    disturbed: bool,
    /// Queued resources that FAILED for want of capacity in this recovery.
    capacity_failures: u32,
    /// The FAILED queued resource is created again at this time, not before.
    recreate_at: Option<Instant>,
    /// Said why a multi-host node is recreated rather than started.
    told_why_recreate: bool,
    /// A Compute Engine group was created in this recovery and none of its instances has
    /// been listed yet.
    pub(super) slice_created: bool,
}

/// Why a create did not happen.
pub(super) enum Refused {
    /// Asking again cannot help (quota, invalid request): held, with the reason.
    Held(String),
    /// It may work later.
    Failed(String),
}

/// What a refused create (of a node, a queued resource, a group, its template or policy)
/// means for a pod, read by `errors`: held when asking again cannot help (a person must act,
/// or the quota of the pod's one zone is gone), else a failure retried after a pause.
pub(super) fn refusal(what: &str, error: &CallError) -> Refused {
    let read = error.reading();
    if read.response().holds() {
        Refused::Held(format!(
            "held: cannot create {what} ({}): {error}. podq will not try again until the \
             cause is fixed and the worker restarted (or the node created by hand)",
            read.kind.describe()
        ))
    } else {
        Refused::Failed(format!(
            "cannot create {what} ({}): {error}",
            read.kind.describe()
        ))
    }
}

/// Why a `FAILED` queued resource failed (`failedData.error`), read by `errors`, and the
/// words to show.
pub(super) fn queued_failure(qr: &QueuedResource) -> (CloudError, String) {
    match qr.failure() {
        Some(error) => {
            let message = error.message.clone().unwrap_or_default();
            let code = error
                .code
                .map(|c| format!(" (code {c})"))
                .unwrap_or_default();
            (
                errors::classify_status(error.code, &message),
                format!("{message}{code}"),
            )
        }
        None => (
            CloudError::new(Kind::Unknown, errors::Scope::Zone, ""),
            "it gave no reason".to_owned(),
        ),
    }
}

impl GcloudPod {
    pub(super) async fn recover_node(
        &self,
        progress: &(dyn Fn(String) + Send + Sync),
    ) -> anyhow::Result<()> {
        let deadline = Instant::now() + self.timing.recovery;
        let mut episode = Episode::default();
        let mut said = String::new();
        let mut failed_actions = 0;
        loop {
            let step = match (self.compute(), self.settings.capacity) {
                (Some(slice), _) => self.slice_step(slice, &mut episode, progress).await,
                (None, Capacity::Queued) => self.queued_step(&mut episode, progress).await,
                (None, _) => self.node_step(&mut episode, progress).await,
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
                Step::Held(why) => {
                    if why != said {
                        tracing::warn!(pod = %self.name, "held: {why}");
                        progress(why.clone());
                        said = why;
                    }
                    self.timing.poll
                }
                Step::Acted => {
                    failed_actions = 0;
                    self.timing.poll
                }
                Step::ActionFailed(what) => {
                    let pause = backoff(self.timing.poll, failed_actions);
                    progress(format!("{what}; trying again in {}s", pause.as_secs()));
                    said.clear();
                    failed_actions += 1;
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
        self.release_hold();
        progress(match self.compute() {
            Some(slice) => format!(
                "slice {}: every instance RUNNING, the topology ACTIVE",
                slice.spec.group
            ),
            None => format!("node {} is READY and HEALTHY", self.name),
        });
        if self.setup_needed() {
            self.setup(progress).await?;
        }
        Ok(())
    }

    /// The node's hosts are being changed (started, deleted, created): they will need the
    /// setup command, which is recorded at once so a worker restarted meanwhile runs it.
    pub(super) fn disturbed(&self, episode: &mut Episode) {
        episode.disturbed = true;
        self.setup_state.require();
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
            StateClass::Changing
            | StateClass::Repairing
            | StateClass::Unsettled
            | StateClass::Unknown => {
                self.disturbed(episode);
                Step::Wait(format!(
                    "waiting for node {}: {state} ({})",
                    self.name,
                    node::describe_state(&state)
                ))
            }
            StateClass::Lost => {
                self.disturbed(episode);
                if self.settings.pool_owned {
                    // Its pool deletes it and makes another where capacity is: a worker
                    // that recreated it would make a second slice for one request.
                    return Step::Held(format!(
                        "node {} is {state}: its pool gives it back and makes another",
                        self.name
                    ));
                }
                if let Some(why) = self.held() {
                    return Step::Held(why);
                }
                let hosts = self.hosts.load(std::sync::atomic::Ordering::SeqCst);
                let spot = match self.create_spec() {
                    Ok(spec) => spec.scheduling().spot,
                    Err(_) => self.settings.capacity == Capacity::Spot,
                };
                let restartable = matches!(state.as_str(), "PREEMPTED" | "STOPPED" | "TERMINATED");
                let try_start = hosts == 1
                    && restartable
                    && !spot
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
                } else if hosts > 1 && restartable && !episode.told_why_recreate {
                    episode.told_why_recreate = true;
                    progress(format!(
                        "node {} is {state}: a slice of {hosts} hosts cannot be started again, \
                         it is deleted and created again from its captured spec",
                        self.name
                    ));
                }
                match self.recreate_node(node.is_some(), &state, progress).await {
                    Ok(()) => Step::Acted,
                    Err(Refused::Held(why)) => Step::Held(why),
                    Err(Refused::Failed(what)) => Step::ActionFailed(what),
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

    /// The spec to create the node (or its queued resource) with: the one captured from the
    /// node (or, before any was seen, the config's accelerator and capacity), with the
    /// config's `create` settings on top.
    pub(super) fn create_spec(&self) -> anyhow::Result<NodeSpec> {
        let mut spec = self
            .saved_spec
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
            .map(|saved| saved.spec.clone())
            .unwrap_or_else(|| NodeSpec {
                accelerator_type: Some(self.accelerator.clone()),
                scheduling_config: Some(Scheduling {
                    preemptible: self.settings.capacity == Capacity::Preemptible,
                    spot: self.settings.capacity == Capacity::Spot,
                    reserved: false,
                }),
                ..NodeSpec::default()
            });
        let create = &self.settings.create;
        if let Some(accelerator) = &create.accelerator_type {
            spec.accelerator_type = Some(accelerator.clone());
        }
        if let Some(version) = &create.runtime_version {
            spec.runtime_version = Some(version.clone());
        }
        if let Some(spot) = create.spot {
            let scheduling = spec
                .scheduling_config
                .get_or_insert_with(Scheduling::default);
            scheduling.spot = spot;
            if spot {
                scheduling.preemptible = false;
            }
        }
        if !spec.is_complete() {
            bail!(
                "cannot create {}: its runtime version is unknown (no describe showed it); \
                 set gcloud.create.runtime_version",
                self.name
            );
        }
        Ok(spec)
    }

    /// `gcloud compute tpus tpu-vm create NAME ...` that brings the node back.
    fn node_create_args(&self) -> anyhow::Result<(NodeSpec, Vec<String>)> {
        let spec = self.create_spec()?;
        let mut args = self.args("tpu-vm", "create", &self.name);
        if let Some(track) = spec.release_track() {
            args.insert(0, track.to_owned());
        }
        args.extend(spec.create_flags()?);
        args.extend(self.settings.create.extra_args.iter().cloned());
        Ok((spec, args))
    }

    /// `gcloud compute tpus queued-resources create QR ...` whose node is this node.
    fn queued_create_args(&self) -> anyhow::Result<(NodeSpec, Vec<String>)> {
        let spec = self.create_spec()?;
        let mut args = self.args("queued-resources", "create", &self.queued_resource());
        if let Some(track) = spec.release_track() {
            args.insert(0, track.to_owned());
        }
        args.extend(spec.queued_create_flags(&self.name)?);
        args.extend(self.settings.create.extra_args.iter().cloned());
        Ok((spec, args))
    }

    fn warn_once_text(&self, text: String) {
        let mut warned = self.warned.lock().unwrap_or_else(|e| e.into_inner());
        if warned.insert(text.clone()) {
            tracing::warn!(pod = %self.name, "{text}");
        }
    }

    fn warn_not_carried(&self, spec: &NodeSpec, queued: bool) {
        for what in spec.not_carried(queued) {
            self.warn_once_text(format!(
                "node {}: the create call cannot carry {what}",
                self.name
            ));
        }
    }

    /// Deletes the node (if it exists) and creates it again with its spec.
    async fn recreate_node(
        &self,
        exists: bool,
        state: &str,
        progress: &(dyn Fn(String) + Send + Sync),
    ) -> Result<(), Refused> {
        let (spec, create) = self
            .node_create_args()
            .map_err(|e| Refused::Failed(format!("{e:#}")))?;
        self.warn_not_carried(&spec, false);
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
                Err(e) => {
                    return Err(Refused::Failed(format!(
                        "cannot delete node {}: {e}",
                        self.name
                    )))
                }
            }
        }
        progress(format!(
            "creating node {} ({} {})",
            self.name,
            spec.accelerator_type.as_deref().unwrap_or_default(),
            spec.runtime_version.as_deref().unwrap_or_default()
        ));
        match self
            .runner
            .call(&create, self.timing.operation, Retry::Never)
            .await
        {
            Ok(_) => Ok(()),
            Err(e) => Err(self.refused(&format!("node {}", self.name), &e)),
        }
    }

    /// What a failed create means: a hold (recorded, with the reason) or a retry.
    pub(super) fn refused(&self, what: &str, error: &CallError) -> Refused {
        let refused = refusal(what, error);
        if let Refused::Held(why) = &refused {
            self.hold(why.clone());
        }
        refused
    }

    pub(super) fn held(&self) -> Option<String> {
        self.held.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    pub(super) fn hold(&self, why: String) {
        *self.held.lock().unwrap_or_else(|e| e.into_inner()) = Some(why);
    }

    pub(super) fn release_hold(&self) {
        self.held.lock().unwrap_or_else(|e| e.into_inner()).take();
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
        let (spec, create) = match self.queued_create_args() {
            Ok(made) => made,
            Err(e) => return Step::ActionFailed(format!("{e:#}")),
        };
        self.warn_not_carried(&spec, true);
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
            Err(e) => match self.refused(&format!("queued resource {qr}"), &e) {
                Refused::Held(why) => Step::Held(why),
                Refused::Failed(what) => Step::ActionFailed(what),
            },
        }
    }

    /// A `FAILED` queued resource: created again after a pause when it found no capacity,
    /// held when asking again cannot help.
    async fn failed_queued(
        &self,
        qr: &QueuedResource,
        episode: &mut Episode,
        progress: &(dyn Fn(String) + Send + Sync),
    ) -> Step {
        let name = self.queued_resource();
        let (read, why) = queued_failure(qr);
        let class = read.kind;
        if read.response().holds() {
            let zone = &self.settings.zone;
            return Step::Held(format!(
                "held: queued resource {name} FAILED, {}: {why}. podq will not create it again \
                 on its own: fix the cause, then delete it (gcloud compute tpus \
                 queued-resources delete {name} --zone={zone} --force) and podq creates it anew",
                class.describe()
            ));
        }
        let now = Instant::now();
        match episode.recreate_at {
            None => {
                let pause = backoff(self.timing.poll, episode.capacity_failures);
                episode.capacity_failures += 1;
                episode.recreate_at = Some(now + pause);
                Step::Wait(format!(
                    "queued resource {name} FAILED, {}: {why}; creating it again in {:.1}s",
                    class.describe(),
                    pause.as_secs_f64()
                ))
            }
            Some(at) if now < at => Step::Wait(format!(
                "queued resource {name} FAILED, {}: {why}; creating it again after a pause",
                class.describe()
            )),
            Some(_) => {
                episode.recreate_at = None;
                self.recreate_queued(
                    true,
                    &format!("FAILED ({}: {why})", class.describe()),
                    progress,
                )
                .await
            }
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
            self.disturbed(episode);
            if let Some(why) = self.held() {
                return Step::Held(why);
            }
            return self.recreate_queued(false, "gone", progress).await;
        };
        // A queued resource exists again: whatever refused to create one is over.
        self.release_hold();
        let state = qr.state().to_owned();
        match classify_queued(&state) {
            QueuedClass::Dead if state == "FAILED" => {
                self.disturbed(episode);
                self.failed_queued(&qr, episode, progress).await
            }
            QueuedClass::Dead => {
                self.disturbed(episode);
                self.recreate_queued(true, &state, progress).await
            }
            QueuedClass::Waiting | QueuedClass::Unknown => {
                self.disturbed(episode);
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
                        // The queued resource follows its node into SUSPENDING; if it does
                        // not within a few looks, it will not bring the node back.
                        self.disturbed(episode);
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
                    StateClass::Changing
                    | StateClass::Repairing
                    | StateClass::Unsettled
                    | StateClass::Unknown => {
                        self.disturbed(episode);
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

    /// Keeps the spec of a node a describe showed: always when the node is `READY` (what it
    /// is when it works), otherwise only while none is known (a worker that first sees the
    /// node preempted still recreates it as it was). A new spec goes to the state file.
    pub(super) fn capture_spec(&self, state: &str, spec: NodeSpec) {
        if !spec.is_complete() {
            return;
        }
        let mut saved = self.saved_spec.lock().unwrap_or_else(|e| e.into_inner());
        let known = saved.as_ref();
        if state != "READY" && known.is_some() {
            return;
        }
        if known
            .is_some_and(|s| s.spec == spec && (s.captured_state == "READY" || state != "READY"))
        {
            return;
        }
        let new = SavedSpec {
            node: self.name.clone(),
            zone: self.settings.zone.clone(),
            project: self.settings.project.clone(),
            captured_at: chrono::Utc::now(),
            captured_state: state.to_owned(),
            spec,
        };
        match spec::save(&self.spec_path, &new) {
            Ok(()) => tracing::info!(
                pod = %self.name,
                path = %self.spec_path.display(),
                state,
                "kept the node's spec for recreating it"
            ),
            Err(e) => tracing::warn!(
                pod = %self.name,
                error = %format!("{e:#}"),
                "cannot save the node's spec; it is kept in memory only"
            ),
        }
        *saved = Some(new);
    }
}

/// The spec a previous worker saved for this node, if any.
pub(super) fn load_saved_spec(path: &std::path::Path, node: &str, zone: &str) -> Option<SavedSpec> {
    match spec::load(path) {
        Ok(Some(saved)) if saved.node == node && saved.zone == zone => {
            tracing::info!(
                pod = node,
                path = %path.display(),
                captured_at = %saved.captured_at,
                "using the node spec saved earlier"
            );
            Some(saved)
        }
        Ok(Some(saved)) => {
            tracing::warn!(
                path = %path.display(),
                "the saved spec is of node {} in {}, not {node} in {zone}; ignored",
                saved.node,
                saved.zone
            );
            None
        }
        Ok(None) => None,
        Err(e) => {
            tracing::warn!(error = %format!("{e:#}"), "ignoring the saved node spec");
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::GcloudSettings;
    use super::*;

    const DESCRIBE: &str = r#"{
      "acceleratorType": "v4-64",
      "runtimeVersion": "tpu-ubuntu2204-base",
      "name": "projects/trm-grant/locations/us-central2-b/nodes/stable-1",
      "state": "READY",
      "health": "HEALTHY",
      "schedulingConfig": {"preemptible": true},
      "networkConfig": {"network": "projects/trm-grant/global/networks/default",
                        "subnetwork": "projects/trm-grant/regions/us-central2/subnetworks/default",
                        "enableExternalIps": true},
      "serviceAccount": {"email": "trainer@trm-grant.iam.gserviceaccount.com",
                         "scope": ["https://www.googleapis.com/auth/cloud-platform"]},
      "metadata": {"enable-oslogin": "TRUE"},
      "labels": {"team": "trm"},
      "networkEndpoints": [{"ipAddress": "10.0.0.2"}, {"ipAddress": "10.0.0.3"}]
    }"#;

    fn pod(state_dir: &std::path::Path, settings: GcloudSettings) -> GcloudPod {
        GcloudPod::new(
            "stable-1",
            "v4-64",
            8,
            GcloudSettings {
                zone: "us-central2-b".into(),
                project: Some("trm-grant".into()),
                state_dir: Some(state_dir.to_owned()),
                ..settings
            },
        )
        .unwrap()
    }

    #[test]
    fn the_captured_spec_outlives_the_worker_and_makes_the_create_calls() {
        let dir = std::env::temp_dir().join(format!("podq-recovery-{}", uuid::Uuid::new_v4()));
        let first = pod(&dir, GcloudSettings::default());
        // Before any describe: the config's accelerator, and no runtime version to use.
        assert!(first.node_create_args().is_err());
        first.capture_spec("READY", NodeSpec::parse(DESCRIBE).unwrap());
        let expected = [
            "compute",
            "tpus",
            "tpu-vm",
            "create",
            "stable-1",
            "--zone=us-central2-b",
            "--project=trm-grant",
            "--accelerator-type=v4-64",
            "--version=tpu-ubuntu2204-base",
            "--preemptible",
            "--network=projects/trm-grant/global/networks/default",
            "--subnetwork=projects/trm-grant/regions/us-central2/subnetworks/default",
            "--service-account=trainer@trm-grant.iam.gserviceaccount.com",
            "--scopes=https://www.googleapis.com/auth/cloud-platform",
            "--metadata=enable-oslogin=TRUE",
            "--labels=team=trm",
        ];
        assert_eq!(first.node_create_args().unwrap().1, expected);

        // A new worker reads the spec back; a describe of the lost node does not replace it.
        let restarted = pod(
            &dir,
            GcloudSettings {
                create: super::super::CreateSettings {
                    extra_args: vec!["--description=podq".into()],
                    ..Default::default()
                },
                ..GcloudSettings::default()
            },
        );
        restarted.capture_spec(
            "PREEMPTED",
            NodeSpec::parse(r#"{"acceleratorType": "v4-64", "runtimeVersion": "other"}"#).unwrap(),
        );
        let mut with_extra = expected.map(str::to_owned).to_vec();
        with_extra.push("--description=podq".into());
        assert_eq!(restarted.node_create_args().unwrap().1, with_extra);
        let queued = restarted.queued_create_args().unwrap().1;
        assert_eq!(
            queued[..10],
            [
                "compute",
                "tpus",
                "queued-resources",
                "create",
                "stable-1-qr",
                "--zone=us-central2-b",
                "--project=trm-grant",
                "--node-id=stable-1",
                "--accelerator-type=v4-64",
                "--runtime-version=tpu-ubuntu2204-base",
            ]
        );
        assert_eq!(queued[10], "--spot");
        assert_eq!(queued[11..], with_extra[10..]);

        // The config's overrides win over the captured spec.
        let overridden = pod(
            &dir,
            GcloudSettings {
                create: super::super::CreateSettings {
                    runtime_version: Some("v2-alpha-tpuv4".into()),
                    spot: Some(true),
                    ..Default::default()
                },
                ..GcloudSettings::default()
            },
        );
        let args = overridden.node_create_args().unwrap().1;
        assert!(
            args.contains(&"--version=v2-alpha-tpuv4".to_owned()),
            "{args:?}"
        );
        assert!(args.contains(&"--spot".to_owned()) && !args.contains(&"--preemptible".to_owned()));
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn pauses_double_up_to_ten_minutes() {
        let base = Duration::from_secs(30);
        assert_eq!(backoff(base, 0), base);
        assert_eq!(backoff(base, 2), Duration::from_secs(120));
        assert_eq!(backoff(base, 40), MAX_ACTION_BACKOFF);
    }
}
