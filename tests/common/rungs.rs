//! A group with rungs, and a pod played through the worker API so each run reports exactly
//! the value a case needs at its rung (`tests/rungs.rs`, and the study, CLI and dashboard
//! tests that show the decisions).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::{json, Value};

use super::Server;

/// The exp10 group, whose rungs the tests give it: its baseline row is exp10b.
pub const RUNG_GROUP: &str = "exp10-lr-schedule";
pub const RUNG_METRIC: &str = "eval/exact_accuracy";

/// The repository's catalog with `rungs` (YAML) on the exp10 group.
pub fn catalog_with_rungs(dir: &Path, rungs: &str) -> PathBuf {
    let root = dir.join("experiments");
    super::copy_dir(&super::experiments_dir(), &root);
    let group = root.join(format!("groups/{RUNG_GROUP}/group.yaml"));
    let mut text = std::fs::read_to_string(&group).unwrap();
    text.push_str(&format!("rungs: {rungs}\n"));
    std::fs::write(&group, text).unwrap();
    root
}

/// A pod played through the worker API.
pub struct RungPod<'a> {
    pub server: &'a Server,
    pub name: &'static str,
    /// Report two points on the way to each value, so each run draws a curve.
    pub curve: bool,
}

/// An attempt a `RungPod` holds.
pub struct Held {
    pub lease: String,
    pub experiment: String,
    pub total: i64,
}

impl RungPod<'_> {
    pub fn new<'a>(server: &'a Server, name: &'static str) -> RungPod<'a> {
        RungPod {
            server,
            name,
            curve: false,
        }
    }

    /// The next job the queue gives this pod, running; none when the queue has none.
    pub async fn lease(&self) -> Option<Held> {
        let ask = json!({"accelerator": "v4-64", "hosts": 8, "state": "READY",
                         "health": "HEALTHY", "wait_s": 0});
        let (status, lease) = self
            .server
            .post(&format!("/pods/{}/lease", self.name), ask)
            .await;
        if status == 204 {
            return None;
        }
        assert_eq!(status, 200, "{lease}");
        let lease_id = lease["lease_id"].as_str().unwrap().to_owned();
        let job = self.server.job(lease["job_id"].as_str().unwrap()).await;
        let total = job["total_steps"].as_i64().expect("total steps");
        let beat = json!({"phase": "running", "step": 0, "hosts_alive": [true]});
        let (status, answer) = self
            .server
            .post(&format!("/leases/{lease_id}/heartbeat"), beat)
            .await;
        assert_eq!(status, 200, "{answer}");
        Some(Held {
            lease: lease_id,
            experiment: lease["experiment"].as_str().unwrap().to_owned(),
            total,
        })
    }

    /// The next run that is not the baseline row, the baseline trained to its end on the way
    /// (it goes on at every rung) after reporting `baseline_value` at `at`.
    pub async fn lease_not_baseline(&self, at: f64, baseline_value: f64) -> Held {
        loop {
            let held = self.lease().await.expect("a run to lease");
            if held.experiment != "exp10b" {
                return held;
            }
            let step = (held.total as f64 * at).ceil() as i64;
            assert_eq!(self.report(&held, step, baseline_value).await, None);
            let total = held.total;
            self.finish(held, "succeeded", total).await;
        }
    }

    /// Reports `value` of the rungs' metric at `step`: the stop the server asked for, if any.
    pub async fn report(&self, held: &Held, step: i64, value: f64) -> Option<String> {
        let steps = if self.curve {
            vec![step / 3, step * 2 / 3, step]
        } else {
            vec![step]
        };
        let points: Vec<Value> = steps
            .iter()
            .map(|&s| {
                let at = value * s as f64 / step.max(1) as f64;
                json!({"step": s, "values": {RUNG_METRIC: at, "train/loss": 1.0}})
            })
            .collect();
        let (status, ack) = self
            .server
            .post(
                &format!("/leases/{}/metrics", held.lease),
                json!({"points": points}),
            )
            .await;
        assert_eq!(status, 200, "{ack}");
        ack["stop"]["reason"].as_str().map(str::to_owned)
    }

    /// Ends the attempt: its run finished, or it stopped as it was asked to.
    pub async fn finish(&self, held: Held, outcome: &str, step: i64) -> Value {
        let end = json!({"outcome": outcome, "exit_codes": [0], "end_step": step,
                         "knows_stopped": true});
        let (status, answer) = self
            .server
            .post(&format!("/leases/{}/finish", held.lease), end)
            .await;
        assert_eq!(status, 200, "{answer}");
        answer
    }

    /// Plays the next run: it reports `value(experiment)` at `at` of its steps (past it, when
    /// it was judged there before, in `judged`); asked to stop there, it stops, else it
    /// trains to its end. Answers its experiment, or None when the queue is empty.
    pub async fn play_one(
        &self,
        at: f64,
        judged: &mut Vec<String>,
        value: impl Fn(&str) -> f64,
    ) -> Option<String> {
        let held = self.lease().await?;
        let experiment = held.experiment.clone();
        let step = (held.total as f64 * at).ceil() as i64;
        let report = if judged.contains(&experiment) {
            step + 10
        } else {
            step
        };
        judged.push(experiment.clone());
        match self.report(&held, report, value(&experiment)).await {
            Some(_) => self.finish(held, "cancelled", report).await,
            None => {
                let total = held.total;
                self.finish(held, "succeeded", total).await
            }
        };
        Some(experiment)
    }

    /// Plays the queue to its end, each run judged at `at` on `values[experiment]`.
    /// Answers the order in which runs were first judged.
    pub async fn play(&self, at: f64, values: &BTreeMap<&str, f64>) -> Vec<String> {
        let mut judged = Vec::new();
        while self
            .play_one(at, &mut judged, |e| values[e])
            .await
            .is_some()
        {}
        let mut first = Vec::new();
        for experiment in judged {
            if !first.contains(&experiment) {
                first.push(experiment);
            }
        }
        first
    }
}
