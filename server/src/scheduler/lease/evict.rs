//! Priority that moves a running job. When the job at the head of an
//! accelerator's queue is of a class that may evict, and no pod of that accelerator is idle,
//! podq picks a running job of a class it may evict, asks its worker to stop it with the
//! full grace (the trainer saves), holds the pod for the evictor, and requeues the victim at
//! the head of its class, uncharged. The choice is pure and table-tested below; the
//! reaper's tick runs it (`evict_tick`).

use std::time::Duration;

use futures::FutureExt;

use crate::catalog::classes::{PriorityClass, PriorityClasses};
use crate::scheduler::{Result, Scheduler};
use crate::store::evictions::{self, Running};
use crate::store::now_ms;

/// How the server weighs an eviction.
#[derive(Debug, Clone)]
pub struct Guards {
    /// Overrides every class's `min_runtime` (`--eviction-min-runtime`).
    pub min_runtime: Option<Duration>,
}

/// The running job `evictor` should evict, if any: of a class it may evict, evictable, past
/// its class's minimum runtime, under its daily cap, and of those the one that loses the
/// least work (the least time since its newest committed checkpoint, or since its trainer
/// started when it has committed none in this attempt). Ties go to the lowest class.
pub fn choose<'a>(
    evictor: &PriorityClass,
    classes: &PriorityClasses,
    guards: &Guards,
    running: &'a [Running],
    now_ms: i64,
) -> Option<&'a Running> {
    running
        .iter()
        .filter_map(|job| {
            if !evictor.may_evict.contains(&job.priority_class) {
                return None;
            }
            let (rank, class) = classes.get(&job.priority_class)?;
            let started = job.running_at.unwrap_or(job.started_at);
            let min_runtime = guards.min_runtime.unwrap_or(class.min_runtime);
            let ran = Duration::from_millis(u64::try_from(now_ms - started).unwrap_or(0));
            let allowed = class.evictable
                && ran >= min_runtime
                && job.evictions_today < i64::from(class.max_evictions_per_day);
            let since_saved = now_ms - job.last_commit_at.map_or(started, |c| c.max(started));
            allowed.then_some((since_saved, std::cmp::Reverse(rank), job))
        })
        .min_by(|a, b| (a.0, a.1, &a.2.lease_id).cmp(&(b.0, b.1, &b.2.lease_id)))
        .map(|(_, _, job)| job)
}

/// How long a pod stays held for its evictor: the victim's stop grace and a slow worker's
/// report fit well inside, and a worker that never reports frees it in the end.
const RESERVATION: Duration = Duration::from_secs(30 * 60);

impl Scheduler {
    /// For each accelerator with running jobs: evict one, if the head of its queue may and
    /// no pod of it is idle. Reads only, unless it evicts.
    pub(in crate::scheduler) async fn evict_tick(&self) -> Result<usize> {
        if self.live.all().is_empty() {
            return Ok(0);
        }
        let accelerators = evictions::live_accelerators(&mut self.store.read().await?).await?;
        let mut evicted = 0;
        for accelerator in accelerators {
            if self.live.idle_pods(&accelerator) > 0 {
                continue;
            }
            evicted += usize::from(self.evict_for(&accelerator).await?);
        }
        Ok(evicted)
    }

    async fn evict_for(&self, accelerator: &str) -> Result<bool> {
        let now = now_ms();
        let (head, running) = {
            let mut conn = self.store.read().await?;
            let Some(head) = evictions::queue_head(&mut conn, accelerator).await? else {
                return Ok(false);
            };
            if head.reserved_pod.is_some() && head.reserved_until.is_some_and(|t| t > now) {
                return Ok(false);
            }
            // An idle pod of another type the head may run on takes it without an eviction.
            let elsewhere = crate::store::job_accelerators::of_job(&mut conn, head.id).await?;
            if elsewhere.iter().any(|a| self.live.idle_pods(a) > 0) {
                return Ok(false);
            }
            (head, evictions::running(&mut conn, accelerator).await?)
        };
        let classes = &self.catalog.classes;
        let Some((_, evictor_class)) = classes.get(&head.priority_class) else {
            return Ok(false);
        };
        let guards = Guards {
            min_runtime: self.config.eviction_min_runtime,
        };
        let Some(victim) = choose(evictor_class, classes, &guards, &running, now).cloned() else {
            return Ok(false);
        };
        let person = head
            .submitted_by
            .as_deref()
            .map(|p| format!(" submitted by {p}"))
            .unwrap_or_default();
        let why = format!(
            "evicted by job {} ({}, {}){person}",
            head.id, head.experiment, head.priority_class
        );
        let until = now + i64::try_from(RESERVATION.as_millis()).unwrap_or(i64::MAX / 2);
        let write_why = why.clone();
        let lease = victim.lease_id;
        let done = self
            .store
            .write(move |conn| {
                async move { evictions::evict(conn, &head, &victim, &write_why, until).await }
                    .boxed()
            })
            .await?;
        if done {
            self.live.flag_stop(lease, why.clone());
            tracing::info!(%lease, "{why}");
        }
        Ok(done)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use podq_api::{JobId, LeaseId};

    const MIN: i64 = 60_000;
    const NOW: i64 = 1_000 * MIN;

    fn running(id: &str, class: &str, ran_min: i64, saved_min_ago: Option<i64>) -> Running {
        Running {
            id: JobId::new_random(),
            experiment: id.into(),
            priority_class: class.into(),
            lease_id: LeaseId::new_random(),
            pod: format!("pod-{id}"),
            started_at: NOW - ran_min * MIN,
            running_at: Some(NOW - ran_min * MIN),
            last_commit_at: saved_min_ago.map(|m| NOW - m * MIN),
            evictions_today: 0,
        }
    }

    fn pick(evictor: &str, jobs: &[Running], guards: &Guards) -> Option<String> {
        let classes = PriorityClasses::default();
        let evictor = classes.get(evictor).unwrap().1.clone();
        choose(&evictor, &classes, guards, jobs, NOW).map(|j| j.experiment.clone())
    }

    const DEFAULTS: Guards = Guards { min_runtime: None };

    /// What is checked, the evictor's class, the running jobs, the guards, the victim.
    type Case = (
        &'static str,
        &'static str,
        Vec<Running>,
        Guards,
        Option<&'static str>,
    );

    #[test]
    fn evictions_follow_the_classes_and_their_guards() {
        let capped = Running {
            evictions_today: 3,
            ..running("capped", "normal", 120, Some(1))
        };
        #[rustfmt::skip]
        let cases: Vec<Case> = vec![
            ("urgent evicts normal", "urgent", vec![running("a", "normal", 60, Some(5))], DEFAULTS, Some("a")),
            ("normal may not evict normal", "normal", vec![running("a", "normal", 60, Some(5))], DEFAULTS, None),
            ("sweep evicts nothing", "sweep", vec![running("a", "sweep", 60, Some(5))], DEFAULTS, None),
            ("nothing runs", "urgent", vec![], DEFAULTS, None),
            ("not before 30 minutes", "urgent", vec![running("a", "normal", 29, None)], DEFAULTS, None),
            ("at 30 minutes", "urgent", vec![running("a", "normal", 30, None)], DEFAULTS, Some("a")),
            ("the server's minimum wins", "urgent", vec![running("a", "normal", 30, None)], Guards { min_runtime: Some(Duration::from_secs(3600)) }, None),
            ("a zero minimum", "urgent", vec![running("a", "normal", 0, None)], Guards { min_runtime: Some(Duration::ZERO) }, Some("a")),
            ("the daily cap", "urgent", vec![capped.clone()], DEFAULTS, None),
            ("under the cap", "urgent", vec![Running { evictions_today: 2, ..capped }], DEFAULTS, Some("capped")),
            ("the freshest checkpoint loses least", "urgent", vec![running("old", "normal", 300, Some(50)), running("fresh", "normal", 300, Some(2))], DEFAULTS, Some("fresh")),
            ("no checkpoint: time since it started", "urgent", vec![running("long", "normal", 300, None), running("short", "normal", 40, None)], DEFAULTS, Some("short")),
            ("a checkpoint from before the attempt counts as its start", "urgent", vec![running("a", "normal", 45, Some(500)), running("b", "normal", 300, Some(40))], DEFAULTS, Some("b")),
            ("a tie goes to the lowest class", "urgent", vec![running("n", "normal", 60, Some(5)), running("s", "sweep", 60, Some(5))], DEFAULTS, Some("s")),
        ];
        for (what, evictor, jobs, guards, expected) in cases {
            assert_eq!(pick(evictor, &jobs, &guards).as_deref(), expected, "{what}");
        }
    }

    #[test]
    fn a_class_set_never_to_be_evicted_is_not() {
        let classes = PriorityClasses::parse(
            &serde_yaml::from_str(
                "- name: hot\n  may_evict: [cold]\n- name: cold\n  default: true\n  evictable: false\n",
            )
            .unwrap(),
        )
        .unwrap();
        let hot = classes.get("hot").unwrap().1.clone();
        let jobs = [running("a", "cold", 600, Some(1))];
        assert!(choose(&hot, &classes, &DEFAULTS, &jobs, NOW).is_none());
    }
}
