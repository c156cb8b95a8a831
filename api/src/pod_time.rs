//! Where pod time went (goodput, the pod-time causes, `GET /api/v1/pod-time`) and the
//! checkpoint advice drawn from it.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Where pod time went, in pod-seconds. `kept_s` produced progress that a committed
/// checkpoint (or the end of the run) kept; `lost_s` was trained after the last committed
/// checkpoint of an interrupted attempt and must be trained again; `overhead_s` is
/// preparing the hosts and start-up until the first step.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Goodput {
    pub kept_s: f64,
    pub lost_s: f64,
    pub overhead_s: f64,
    /// Steps kept, each counted once however often it was trained.
    pub kept_steps: i64,
    /// kept / (kept + lost + overhead); null before any pod time was spent.
    pub ratio: Option<f64>,
}

impl Goodput {
    pub fn add(&mut self, other: &Goodput) {
        self.kept_s += other.kept_s;
        self.lost_s += other.lost_s;
        self.overhead_s += other.overhead_s;
        self.kept_steps += other.kept_steps;
        self.finish();
    }

    pub fn finish(&mut self) {
        let total = self.kept_s + self.lost_s + self.overhead_s;
        self.ratio = (total > 0.0).then(|| self.kept_s / total);
    }
}

/// Pod time split by where it went (the causes follow Google's ml-goodput-measurement). In
/// seconds; the parts sum to `total_s`.
///
/// An attempt's time runs from its lease to its end, plus the pod's recovery that followed it
/// directly when it ended preempted or lost. A pod's time also holds the recoveries no
/// attempt caused and its idle time.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct PodTime {
    /// Waiting for the pod to be usable again: re-provisioning after a preemption, a
    /// recreated node, a host coming back, a maintenance window, a failing preflight.
    pub provisioning_s: f64,
    /// From the lease to the trainers' launch: checking the checkpoint store, staging the
    /// config, cleaning the hosts, starting the agents.
    pub setup_s: f64,
    /// From the launch to the first step, restore excepted: the trainer's start-up, JAX's
    /// initialisation and compilation (`compile_s` of it, when the trainer reported it).
    pub startup_s: f64,
    /// Restoring the checkpoint resumed from, as the trainer reported it.
    pub restore_s: f64,
    /// Training whose progress was kept.
    pub productive_s: f64,
    /// The blocking part of checkpoint saves, as the trainer reported it.
    pub save_s: f64,
    /// Training after the last committed checkpoint of an attempt that did not succeed:
    /// done again by the next attempt.
    pub wasted_s: f64,
    /// From the decision to stop (a shutdown notice, a cancel, a host's end) to the end.
    pub stopping_s: f64,
    /// A ready pod with nothing it could lease (only in a pod's or the grant's time).
    pub idle_s: f64,
    /// Of an attempt evicted for a job of a higher priority class: its stop, and
    /// its training since its last committed checkpoint, which the next attempt does again.
    /// Charged here rather than to `stopping` and `wasted`, so the cost of evictions is seen.
    #[serde(default)]
    pub evicted_s: f64,
    /// Of `startup_s`: compiling the first step, as the trainer reported it.
    pub compile_s: f64,
    pub total_s: f64,
}

impl PodTime {
    /// The causes in display order, with their names as `/metrics` and the CLI write them.
    pub fn causes(&self) -> [(&'static str, f64); 10] {
        [
            ("provisioning", self.provisioning_s),
            ("setup", self.setup_s),
            ("startup", self.startup_s),
            ("restore", self.restore_s),
            ("productive", self.productive_s),
            ("save", self.save_s),
            ("wasted", self.wasted_s),
            ("stopping", self.stopping_s),
            ("evicted", self.evicted_s),
            ("idle", self.idle_s),
        ]
    }

    pub fn add(&mut self, other: &PodTime) {
        self.provisioning_s += other.provisioning_s;
        self.setup_s += other.setup_s;
        self.startup_s += other.startup_s;
        self.restore_s += other.restore_s;
        self.productive_s += other.productive_s;
        self.save_s += other.save_s;
        self.wasted_s += other.wasted_s;
        self.stopping_s += other.stopping_s;
        self.idle_s += other.idle_s;
        self.evicted_s += other.evicted_s;
        self.compile_s += other.compile_s;
        self.finish();
    }

    /// Sets `total_s` to the sum of the causes.
    pub fn finish(&mut self) {
        self.total_s = self.causes().iter().map(|(_, s)| s).sum();
    }
}

/// `GET /api/v1/pod-time`: where the pod time of the whole grant, each pod and each group
/// went. A pod's and the grant's include idle time and recoveries no attempt caused; a
/// group's are its runs' attempts.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct PodTimeReport {
    pub grant: PodTime,
    pub pods: BTreeMap<String, PodTime>,
    pub groups: BTreeMap<String, PodTime>,
    /// Pod-hours not spent because stop rules or the divergence guard ended runs early: each
    /// stopped run's time to go when it stopped.
    #[serde(default)]
    pub saved_by_stopping: SavedByStopping,
    /// Pod-hours not spent because a group's rungs pruned runs: each pruned run's estimate
    /// less the part it had trained.
    #[serde(default)]
    pub saved_by_rungs: SavedByStopping,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SavedByStopping {
    pub pod_hours: f64,
    /// Runs that ended `stopped`.
    pub runs: i64,
}

/// Young/Daly checkpoint advice for one run.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct CheckpointAdvice {
    /// The run's interval: its config's (`checkpoint_interval`, or every evaluation with
    /// `checkpoint_every_eval`, or only at the end); the advised one under `auto`.
    pub interval_steps_now: u64,
    /// Daly's optimum, sqrt(2·C·MTBF) to first order, in steps of the run's step time.
    pub interval_steps_advised: u64,
    /// C: the blocking save cost, from the trainer's save timings or, before it reported
    /// any, the assumed `10` s.
    pub save_cost_s: f64,
    /// The pod type's mean time between interruptions, from its history with a prior of
    /// one a day counted as one interruption.
    pub mtbf_s: f64,
    /// Pod-hours the advised interval would save over the run's remaining hours.
    pub pod_hours_saved: f64,
    /// `true` when the run follows the advice itself (`checkpoint_interval: auto`).
    pub auto: bool,
    /// Where C came from: `trainer` (its save timings) or `assumed`.
    pub save_cost_source: String,
}
