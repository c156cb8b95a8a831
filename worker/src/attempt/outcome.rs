//! Who is to blame for an attempt's end: one pure function from what the worker observed to
//! the outcome it reports, tested as a table (as the server's `policy::decide` is).
//!
//! The rule: an attempt is `failed` or `hung` (charged to the run's failure budget) only on
//! evidence against the trainer. Everything the infrastructure did (the pod preempted, a
//! host restarted under its trainer, the hosts shut down from outside podq, a launch that
//! could not reach or prepare the hosts, agents that never called) is `preempted` or `lost`,
//! and costs the run only the work since its last checkpoint.

use podq_api::AttemptOutcome;

use super::exits::{HostExit, StopReport};
use crate::pod::PodStatus;

/// Why the supervision loop ended.
#[derive(Debug, Clone, PartialEq)]
pub enum Stop {
    /// Every host's trainer ended.
    AllExited,
    /// This host's trainer ended with an error while others ran.
    HostEnded(HostExit),
    /// The pod said it lost its capacity.
    Preempted(String),
    /// No step progress for the hang timeout while every agent was alive and reporting.
    Hung(String),
    Cancelled,
    LeaseLost,
    Shutdown,
    /// The trainer reported a step before the one it was given to resume from.
    SilentRestart(String),
    /// No agent of the attempt ever called.
    AgentsGone(String),
    /// The hosts could not be prepared or the agents started (install, staging, ssh).
    LaunchFailed(String),
    /// The run was stopped ahead of a maintenance window the pod announced.
    Maintenance(String),
    /// The run was stopped ahead of the end of the pod's capacity, known in advance (a
    /// flex-start slice's max run duration), so it saved.
    CapacityEnds(String),
    /// The service is repairing the whole slice, and its hosts restart under the trainers
    /// (Compute Engine's managed capacity): the infrastructure's fault, not charged.
    Repairing(String),
    /// The server asked for the pod back (an eviction, a person's suspend): stopped with the
    /// full grace, so the trainer saves; the server does not charge it.
    Ordered(String),
}

/// What the worker knows when the attempt ends.
pub struct Observed<'a> {
    pub stop: &'a Stop,
    /// Each host's end, as its agent reported it (`None`: no report).
    pub exits: &'a [Option<HostExit>],
    /// The pod, looked at again after a host ended on a pod that seemed fine.
    pub pod: Option<&'a PodStatus>,
    pub stopped: &'a StopReport,
}

/// The outcome to report and its message naming the evidence; `None` when the worker must
/// not report one (the lease is gone, or the worker is leaving the attempt to its agents).
pub fn classify(o: &Observed) -> Option<(AttemptOutcome, String)> {
    let pod_lost = o.pod.filter(|p| p.is_preempted());
    let pod_state = |p: &PodStatus| format!("pod state {}/{}", p.state, p.health);
    Some(match o.stop {
        Stop::LeaseLost | Stop::Shutdown => return None,
        Stop::Cancelled => (
            AttemptOutcome::Cancelled,
            format!("cancelled; stopped every host: {}", o.stopped.describe()),
        ),
        Stop::Preempted(what) => (AttemptOutcome::Preempted, what.clone()),
        Stop::Maintenance(what) | Stop::CapacityEnds(what) => {
            (AttemptOutcome::Preempted, what.clone())
        }
        Stop::Repairing(what) => (AttemptOutcome::Lost, what.clone()),
        Stop::Ordered(why) => (
            AttemptOutcome::Preempted,
            format!(
                "stopped as the server asked ({why}): {}",
                o.stopped.describe()
            ),
        ),
        Stop::LaunchFailed(what) => (
            AttemptOutcome::Lost,
            format!("{what}; the trainer never started, so the run is not charged"),
        ),
        Stop::AgentsGone(what) => (AttemptOutcome::Lost, what.clone()),
        Stop::SilentRestart(what) => (AttemptOutcome::Failed, what.clone()),
        Stop::Hung(what) => (
            AttemptOutcome::Hung,
            format!("{what}; stopped every host: {}", o.stopped.describe()),
        ),
        Stop::HostEnded(exit) => {
            if let Some(pod) = pod_lost {
                (
                    AttemptOutcome::Preempted,
                    format!("{}; {}", exit.describe(), pod_state(pod)),
                )
            } else if let Some(pod) = o.pod.filter(|p| p.is_repairing()) {
                (
                    AttemptOutcome::Lost,
                    format!(
                        "{}; the slice is being repaired ({}); not charged",
                        exit.describe(),
                        pod_state(pod)
                    ),
                )
            } else if exit.vanished {
                (
                    AttemptOutcome::Lost,
                    format!("{}; stopped the others; not charged", exit.describe()),
                )
            } else if let Some(gone) = o.exits.iter().flatten().find(|e| e.vanished) {
                // A host going away breaks the others' collectives (JAX aborts them): the
                // crash seen first is its consequence, not the trainer's fault.
                (
                    AttemptOutcome::Lost,
                    format!("{}, and {}; not charged", exit.describe(), gone.describe()),
                )
            } else if terminated_from_outside(std::slice::from_ref(&Some(*exit))) {
                (
                    AttemptOutcome::Lost,
                    format!(
                        "{} by a SIGTERM podq did not send (the host shutting down); \
                         stopped the others; not charged",
                        exit.describe()
                    ),
                )
            } else {
                (
                    AttemptOutcome::Failed,
                    format!("{} on a healthy pod; stopped the others", exit.describe()),
                )
            }
        }
        Stop::AllExited => {
            let ended: Vec<&HostExit> = o.exits.iter().flatten().collect();
            if !ended.is_empty() && ended.iter().all(|e| e.success()) {
                (AttemptOutcome::Succeeded, "every host exited 0".to_owned())
            } else if let Some(pod) = pod_lost {
                (
                    AttemptOutcome::Preempted,
                    format!("the hosts ended; {}", pod_state(pod)),
                )
            } else if let Some(gone) = ended.iter().find(|e| e.vanished) {
                (
                    AttemptOutcome::Lost,
                    format!("{}; not charged", gone.describe()),
                )
            } else if terminated_from_outside(o.exits) {
                (
                    AttemptOutcome::Lost,
                    "every host's trainer ended on a SIGTERM podq did not send (the hosts \
                     shutting down); not charged"
                        .to_owned(),
                )
            } else {
                let first = ended.iter().find(|e| !e.success());
                (
                    AttemptOutcome::Failed,
                    match first {
                        Some(e) => format!("hosts ended with errors: {}", e.describe()),
                        None => "hosts ended with errors".to_owned(),
                    },
                )
            }
        }
    })
}

/// Every host that ended with an error ended on SIGTERM (killed by it, or exiting 128 + 15
/// as a trainer that saves on the preemption notice does), and the supervision loop never
/// sent one: the hosts were being shut down.
pub fn terminated_from_outside(exits: &[Option<HostExit>]) -> bool {
    let failed: Vec<&HostExit> = exits.iter().flatten().filter(|e| !e.success()).collect();
    !failed.is_empty()
        && failed
            .iter()
            .all(|e| e.code == Some(128 + 15) || e.signal == Some(15))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn exit(host: u32, code: Option<i32>, signal: Option<i32>) -> Option<HostExit> {
        Some(HostExit {
            host,
            code,
            signal,
            vanished: false,
        })
    }

    fn vanished(host: u32) -> Option<HostExit> {
        Some(HostExit {
            host,
            code: None,
            signal: None,
            vanished: true,
        })
    }

    fn pod(state: &str, health: &str) -> PodStatus {
        PodStatus {
            state: state.into(),
            health: health.into(),
            maintenance: None,
            ..Default::default()
        }
    }

    /// What happened, how it ended, each host's end, the pod, the stop, and the outcome.
    type Case<'a> = (
        &'a str,
        Stop,
        Vec<Option<HostExit>>,
        Option<&'a PodStatus>,
        &'a StopReport,
        Option<AttemptOutcome>,
    );

    #[test]
    fn the_infrastructure_is_never_charged_to_the_run() {
        use AttemptOutcome::*;
        let ok = exit(0, Some(0), None);
        let killed = StopReport { killed: vec![1] };
        let none = StopReport::default();
        let ready = pod("READY", "HEALTHY");
        let preempted = pod("PREEMPTED", "HEALTH_UNSPECIFIED");
        let maintenance = pod("READY", "UNHEALTHY_MAINTENANCE");
        let crash = HostExit {
            host: 1,
            code: Some(1),
            signal: None,
            vanished: false,
        };
        let rebooted = vanished(2).unwrap();
        #[rustfmt::skip]
        let table: Vec<Case> = vec![
            ("every host exited 0", Stop::AllExited, vec![ok, exit(1, Some(0), None)], Some(&ready), &none, Some(Succeeded)),
            ("a trainer crashed on a healthy pod", Stop::HostEnded(crash), vec![ok, Some(crash)], Some(&ready), &killed, Some(Failed)),
            ("a trainer ended as the pod was preempted", Stop::HostEnded(crash), vec![Some(crash)], Some(&preempted), &none, Some(Preempted)),
            ("a host restarted under its trainer", Stop::HostEnded(rebooted), vec![ok, Some(rebooted)], Some(&ready), &killed, Some(Lost)),
            ("another host's abort seen before the restart", Stop::HostEnded(exit(0, None, Some(6)).unwrap()), vec![exit(0, None, Some(6)), Some(rebooted)], Some(&ready), &killed, Some(Lost)),
            ("every trainer saved on a shutdown notice", Stop::AllExited, vec![exit(0, Some(143), None), exit(1, Some(143), None)], Some(&ready), &none, Some(Lost)),
            ("the same, once the node said so", Stop::AllExited, vec![exit(0, Some(143), None), exit(1, None, Some(15))], Some(&preempted), &none, Some(Preempted)),
            ("one trainer killed by the shutdown", Stop::HostEnded(exit(1, None, Some(15)).unwrap()), vec![exit(1, None, Some(15))], Some(&ready), &none, Some(Lost)),
            ("a trainer exited 1 among SIGTERMs", Stop::AllExited, vec![exit(0, Some(143), None), Some(crash)], Some(&ready), &none, Some(Failed)),
            ("the pod said preempted", Stop::Preempted("pod state PREEMPTED".into()), vec![], None, &none, Some(Preempted)),
            ("maintenance ahead", Stop::Maintenance("window".into()), vec![], None, &none, Some(Preempted)),
            ("the server asked for the pod", Stop::Ordered("evicted".into()), vec![], None, &none, Some(Preempted)),
            ("a trainer crashed during maintenance", Stop::HostEnded(crash), vec![Some(crash)], Some(&maintenance), &none, Some(Failed)),
            ("install or staging failed", Stop::LaunchFailed("launch failed: scp".into()), vec![], None, &none, Some(Lost)),
            ("no agent ever called", Stop::AgentsGone("no agent called".into()), vec![], None, &none, Some(Lost)),
            ("no progress with every agent reporting", Stop::Hung("no step progress".into()), vec![], Some(&ready), &killed, Some(Hung)),
            ("the trainer started over", Stop::SilentRestart("step 0".into()), vec![], None, &none, Some(Failed)),
            ("cancelled", Stop::Cancelled, vec![], None, &none, Some(Cancelled)),
            ("the lease was lost", Stop::LeaseLost, vec![], None, &none, None),
            ("the worker is leaving", Stop::Shutdown, vec![], None, &none, None),
        ];
        for (case, stop, exits, pod, stopped, expected) in table {
            let got = classify(&Observed {
                stop: &stop,
                exits: &exits,
                pod,
                stopped,
            });
            assert_eq!(got.as_ref().map(|(o, _)| *o), expected, "{case}: {got:?}");
        }
    }

    #[test]
    fn each_message_names_its_evidence() {
        let rebooted = vanished(2).unwrap();
        let (_, message) = classify(&Observed {
            stop: &Stop::HostEnded(rebooted),
            exits: &[Some(rebooted)],
            pod: Some(&pod("READY", "HEALTHY")),
            stopped: &StopReport::default(),
        })
        .unwrap();
        assert!(message.contains("host 2's trainer is gone"), "{message}");
        assert!(message.contains("not charged"), "{message}");
        let (_, message) = classify(&Observed {
            stop: &Stop::LaunchFailed("launch failed: cannot copy the agent: host 3".into()),
            exits: &[],
            pod: None,
            stopped: &StopReport::default(),
        })
        .unwrap();
        assert!(message.contains("host 3"), "{message}");
    }
}
