//! Prometheus metrics (the `prometheus-client` crate: an explicit registry per server, so
//! tests that run several servers in one process do not share a global one).
//!
//! Counters and histograms move where things happen (the scheduler, the HTTP layer, the
//! store's writer). Gauges of state (jobs by state, pods, running jobs' steps, goodput) are
//! set from the database and the live lease table when `/metrics` is scraped, so they can
//! never drift from what the API says.

use std::sync::atomic::AtomicU64;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StateLabel {
    pub state: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OutcomeLabel {
    pub outcome: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RouteLabels {
    pub method: String,
    /// The route as declared (`/api/v1/leases/{id}/heartbeat`), never the raw path.
    pub route: String,
    pub status: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct JobLabels {
    /// The job's id as text: a label value.
    pub job_id: String,
    pub experiment: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PodLabels {
    pub pod: String,
    pub state: String,
    pub health: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PodTimeLabels {
    /// `grant`, `pod` or `group`.
    pub scope: String,
    /// The pod's or group's name; empty for the grant.
    pub name: String,
    pub cause: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PoolLabels {
    pub pool: String,
    /// A slice's state, or a zone's; empty for the pool's demand.
    pub state: String,
    /// The zone, for a zone's series; empty otherwise.
    pub zone: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PhaseLabel {
    pub phase: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KindLabel {
    pub kind: String,
}

type FloatGauge = Gauge<f64, AtomicU64>;

pub struct Telemetry {
    registry: Registry,
    pub jobs: Family<StateLabel, Gauge>,
    pub attempt_outcomes: Family<OutcomeLabel, Counter>,
    pub preemptions: Counter,
    pub leases_granted: Counter,
    pub requests: Family<RouteLabels, Histogram>,
    pub metric_points: Counter,
    pub log_lines: Counter,
    pub job_step: Family<JobLabels, Gauge>,
    pub job_steps_per_second: Family<JobLabels, FloatGauge>,
    pub pods: Family<PodLabels, Gauge>,
    pub goodput_seconds: Family<KindLabel, FloatGauge>,
    pub pod_time_seconds: Family<PodTimeLabels, FloatGauge>,
    pub recovery_seconds: Family<PhaseLabel, Histogram>,
    pub pool_slices: Family<PoolLabels, Gauge>,
    pub pool_zones: Family<PoolLabels, Gauge>,
    pub pool_demand: Family<PoolLabels, Gauge>,
    pub write_queue: Gauge,
    pub write_batch: Histogram,
    pub write_transaction: Histogram,
    pub wal_restart: Histogram,
    pub webhook_deliveries: Family<OutcomeLabel, Counter>,
}

impl Telemetry {
    /// `store` is the store's own writer instruments (its queue and its batch sizes).
    pub fn new(store: crate::store::WriterInstruments) -> Telemetry {
        let mut registry = Registry::with_prefix("podq");
        let t = Telemetry {
            jobs: Family::default(),
            attempt_outcomes: Family::default(),
            preemptions: Counter::default(),
            leases_granted: Counter::default(),
            // 1 ms to about 65 s: a long-polled lease waits up to 60 s.
            requests: Family::new_with_constructor(|| {
                Histogram::new(exponential_buckets(0.001, 2.0, 17))
            }),
            metric_points: Counter::default(),
            log_lines: Counter::default(),
            job_step: Family::default(),
            job_steps_per_second: Family::default(),
            pods: Family::default(),
            goodput_seconds: Family::default(),
            pod_time_seconds: Family::default(),
            // 0.5 s to about 70 minutes: a recovery on the sim pod to a slow create's.
            recovery_seconds: Family::new_with_constructor(|| {
                Histogram::new(exponential_buckets(0.5, 2.0, 14))
            }),
            pool_slices: Family::default(),
            pool_zones: Family::default(),
            pool_demand: Family::default(),
            write_queue: store.queue,
            write_batch: store.batch,
            write_transaction: store.transaction,
            wal_restart: store.wal_restart,
            webhook_deliveries: Family::default(),
            registry: Registry::default(),
        };
        registry.register(
            "jobs",
            "Jobs by state, as the API shows them",
            t.jobs.clone(),
        );
        registry.register(
            "attempt_outcomes",
            "Attempts ended, by outcome",
            t.attempt_outcomes.clone(),
        );
        registry.register(
            "preemptions",
            "Attempts ended by a preemption or a lost worker",
            t.preemptions.clone(),
        );
        registry.register("leases_granted", "Leases granted", t.leases_granted.clone());
        registry.register(
            "http_request_duration_seconds",
            "HTTP requests by method, route and status",
            t.requests.clone(),
        );
        registry.register(
            "metric_points_ingested",
            "Metric values stored from workers",
            t.metric_points.clone(),
        );
        registry.register(
            "log_lines_ingested",
            "Trainer log lines stored from workers (lines sent again are not counted)",
            t.log_lines.clone(),
        );
        registry.register(
            "job_step",
            "The newest step of each job on a pod",
            t.job_step.clone(),
        );
        registry.register(
            "job_steps_per_second",
            "Steps per second of each job on a pod, over its current attempt",
            t.job_steps_per_second.clone(),
        );
        registry.register(
            "pod_info",
            "1 for each pod, with its state and health",
            t.pods.clone(),
        );
        registry.register(
            "goodput_seconds",
            "Pod time of every run: kept progress, lost work, overhead",
            t.goodput_seconds.clone(),
        );
        registry.register(
            "pod_time_seconds",
            "Pod time by cause (provisioning, setup, startup, restore, productive, save, wasted, \
             stopping, idle), for the grant (scope=\"grant\") and each pod and group",
            t.pod_time_seconds.clone(),
        );
        registry.register(
            "recovery_seconds",
            "Each recovery from an interruption (GET /api/v1/recoveries), whole (phase=\"total\") \
             and by phase: stopping, waiting, creating, setup, startup, compile, restore",
            t.recovery_seconds.clone(),
        );
        registry.register(
            "pool_slices",
            "Slices each pool holds, by state (creating, ready, preempted, deleting)",
            t.pool_slices.clone(),
        );
        registry.register(
            "pool_zone_info",
            "1 for each zone of each pool, with its state (ready, stockout, quota, churn, paused)",
            t.pool_zones.clone(),
        );
        registry.register(
            "pool_demand",
            "Leasable jobs of each pool's accelerator that no waiting pod will take",
            t.pool_demand.clone(),
        );
        registry.register(
            "store_write_queue",
            "Writes waiting for the store's writer",
            t.write_queue.clone(),
        );
        registry.register(
            "store_write_batch_size",
            "Writes committed together in one transaction",
            t.write_batch.clone(),
        );
        registry.register(
            "store_write_transaction_seconds",
            "Time from a write transaction's begin to its durable commit",
            t.write_transaction.clone(),
        );
        registry.register(
            "store_wal_restart_seconds",
            "Time the writer spent starting SQLite's write-ahead log over (it writes nothing meanwhile)",
            t.wal_restart.clone(),
        );
        registry.register(
            "webhook_deliveries",
            "Webhook delivery attempts, by result",
            t.webhook_deliveries.clone(),
        );
        // Counters that exist before their first increment, so a rate over them is 0, not
        // "no data".
        use podq_api::AttemptOutcome::*;
        for outcome in [Succeeded, Preempted, Failed, Hung, Lost, Cancelled] {
            t.attempt_outcomes
                .get_or_create(&OutcomeLabel {
                    outcome: outcome.as_str().to_owned(),
                })
                .get();
        }
        for outcome in ["delivered", "failed"] {
            t.webhook_deliveries
                .get_or_create(&OutcomeLabel {
                    outcome: outcome.to_owned(),
                })
                .get();
        }
        Telemetry { registry, ..t }
    }

    /// The registry in Prometheus' text format.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }
}
