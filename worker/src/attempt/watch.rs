//! When a running attempt stops, and why: one pure judgement over the facts the attempt's
//! loop sees, one at a time, tested as a table (as `outcome::classify` is). No I/O and no
//! clock of its own: every fact comes with the time it was seen.
//!
//! The loop feeds it, in the order it learns them: the worker or the server ending the
//! attempt, a host's exit, host 0's progress lines and, at each status poll, the pod's state
//! and the agents' calls (read right after it).

use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};

use super::exits::HostExit;
use super::outcome::Stop;
use crate::pod::PodStatus;

/// How long a reattached worker waits for the first call of the attempt's agents.
pub const REATTACH_GRACE: Duration = Duration::from_secs(30);

/// The timeouts the watch applies (from the worker's settings).
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// No step progress for this long while running: the attempt is hung.
    pub hang_timeout: Duration,
    /// A run is stopped this long before a maintenance window the pod announced opens.
    pub maintenance_lead: Duration,
    /// A maintenance event under way for longer than this ends the attempt as preempted.
    pub maintenance_timeout: Duration,
}

/// One thing the attempt's loop learned.
#[derive(Debug, Clone)]
pub enum Fact {
    /// The worker is shutting down.
    Shutdown,
    /// The server no longer knows the lease.
    LeaseLost,
    /// The server asked for the attempt to be cancelled.
    Cancelled,
    /// The server needs the pod back for a job that did nothing wrong (evicted, suspended).
    StopOrdered(String),
    /// A host's trainer ended (`None`: every host had already ended), and which hosts'
    /// trainers still run after it.
    Exit {
        exit: Option<HostExit>,
        alive: Vec<bool>,
    },
    /// Host 0 reported this step.
    Step(i64),
    /// Host 0 said it saved a checkpoint.
    Checkpoint,
    /// Host 0 began or ended a phase (a compile, a restore, a save): a sign of life.
    Phase,
    /// A status poll: the pod's state (`None`: it could not be read) and the agents' calls.
    Poll {
        pod: Option<PodStatus>,
        /// The wall clock, for the pod's announced maintenance window.
        utc: DateTime<Utc>,
        agents: Agents,
    },
    /// New agents were asked for on the hosts whose agents went silent (whether or not
    /// they could be started).
    SilentAgentsTended,
}

/// What the agents' calls showed at a poll.
#[derive(Debug, Clone, Default)]
pub struct Agents {
    /// Any of the attempt's agents has called.
    pub contacted: bool,
    /// For each host whose trainer has not ended, how long since any of its agents called.
    pub quiet: Vec<(u32, Duration)>,
    /// Some host's agent has been silent for the agent-silence limit while its trainer
    /// runs (the loop starts a new one there).
    pub silent: bool,
}

/// The attempt's progress as far as the stop decisions need it.
#[derive(Debug)]
pub struct Watch {
    limits: Limits,
    /// The attempt is a reattached worker's, not a launch.
    reattached: bool,
    /// The step the trainer was given to resume from.
    resume_step: Option<i64>,
    began: Instant,
    last_progress: Instant,
    first_step: Option<i64>,
    last_step: Option<i64>,
    maintenance_since: Option<Instant>,
}

impl Watch {
    pub fn new(limits: Limits, reattached: bool, resume_step: Option<i64>, now: Instant) -> Watch {
        Watch {
            limits,
            reattached,
            resume_step,
            began: now,
            last_progress: now,
            first_step: None,
            last_step: None,
            maintenance_since: None,
        }
    }

    /// The highest step reported so far.
    pub fn last_step(&self) -> Option<i64> {
        self.last_step
    }

    /// A step reported after the stop was decided (lines already printed still count).
    pub fn step_after_stop(&mut self, step: i64) {
        self.last_step = Some(self.last_step.map_or(step, |last| last.max(step)));
    }

    /// Takes in one fact seen at `now`: the stop it calls for, if any.
    pub fn observe(&mut self, fact: Fact, now: Instant) -> Option<Stop> {
        match fact {
            Fact::Shutdown => Some(Stop::Shutdown),
            Fact::LeaseLost => Some(Stop::LeaseLost),
            Fact::Cancelled => Some(Stop::Cancelled),
            Fact::StopOrdered(why) => Some(Stop::Ordered(why)),
            Fact::Exit { exit: None, .. } => Some(Stop::AllExited),
            Fact::Exit {
                exit: Some(exit),
                alive,
            } if exit.success() => alive.iter().all(|alive| !alive).then_some(Stop::AllExited),
            Fact::Exit {
                exit: Some(exit), ..
            } => Some(Stop::HostEnded(exit)),
            Fact::Step(step) => self.step(step, now),
            // A phase line is a sign of life: a long compile or save is not a hang.
            Fact::Checkpoint | Fact::Phase => {
                self.last_progress = now;
                None
            }
            Fact::Poll { pod, utc, agents } => pod
                .and_then(|pod| self.pod(&pod, utc, now))
                .or_else(|| self.agents(&agents, now)),
            Fact::SilentAgentsTended => {
                if let Some(half_a_hang_ago) = now.checked_sub(self.limits.hang_timeout / 2) {
                    self.last_progress = self.last_progress.max(half_a_hang_ago);
                }
                None
            }
        }
    }

    fn step(&mut self, step: i64, now: Instant) -> Option<Stop> {
        if self.first_step.is_none() {
            self.first_step = Some(step);
            if let (Some(resume), true) = (self.resume_step, started_over(self.resume_step, step)) {
                return Some(Stop::SilentRestart(format!(
                    "the trainer was given checkpoint step {resume} but reported step {step} first: \
                     it could not load the checkpoint and started over"
                )));
            }
        }
        if self.last_step.is_none_or(|last| step > last) {
            self.last_step = Some(step);
            self.last_progress = now;
        }
        None
    }

    fn pod(&mut self, status: &PodStatus, utc: DateTime<Utc>, now: Instant) -> Option<Stop> {
        if status.is_repairing() {
            return Some(Stop::Repairing(format!(
                "the slice is being repaired by its cloud (pod state {}/{}): every host \
                 restarts, and the trainers with them; not charged",
                status.state, status.health
            )));
        }
        if let Some(ends) = status.capacity_ends_within(self.limits.maintenance_lead, utc) {
            return Some(Stop::CapacityEnds(format!(
                "the slice's capacity ends at {} (its max run duration): stopped ahead of it \
                 with SIGTERM and the full grace, so the trainer could save; not charged",
                ends.to_rfc3339()
            )));
        }
        if status.is_preempted() {
            return Some(Stop::Preempted(format!(
                "pod state {}/{}",
                status.state, status.health
            )));
        }
        // Under maintenance nothing is killed: the hosts usually come back as they were, and
        // a paused trainer is not hung. Hosts that restart are seen through their agents.
        if status.in_maintenance() {
            let since = *self.maintenance_since.get_or_insert(now);
            self.last_progress = now;
            let under_way = now.saturating_duration_since(since);
            return (under_way >= self.limits.maintenance_timeout).then(|| {
                Stop::Preempted(format!(
                    "a maintenance event has not ended after {}s (pod state {}/{})",
                    under_way.as_secs(),
                    status.state,
                    status.health
                ))
            });
        }
        self.maintenance_since = None;
        let m = status.maintenance_ahead(self.limits.maintenance_lead, utc)?;
        Some(Stop::Maintenance(format!(
            "a {} maintenance window opens at {}: stopped ahead of it with \
             SIGTERM and the full grace, so the trainer could save; not charged",
            m.kind,
            m.window_start
                .map_or("an unknown time".into(), |t| t.to_rfc3339()),
        )))
    }

    fn agents(&mut self, agents: &Agents, now: Instant) -> Option<Stop> {
        let hang = self.limits.hang_timeout;
        if self.reattached
            && now.saturating_duration_since(self.last_progress) >= REATTACH_GRACE
            && !agents.contacted
        {
            return Some(Stop::AgentsGone(format!(
                "no agent called within {}s of the worker's restart; not charged",
                REATTACH_GRACE.as_secs()
            )));
        }
        let since_launch = now.saturating_duration_since(self.began);
        if !self.reattached && since_launch >= hang.max(REATTACH_GRACE) && !agents.contacted {
            return Some(Stop::AgentsGone(format!(
                "no agent called within {}s of the launch; not charged",
                since_launch.as_secs()
            )));
        }
        // While an agent is silent, no progress is not the trainer's fault: its reports have
        // nowhere to go (the loop starts a new agent). One that stays silent through new
        // agents for the hang timeout is given up on.
        if let Some((host, quiet)) = agents.quiet.iter().find(|(_, quiet)| *quiet >= hang) {
            return Some(Stop::AgentsGone(format!(
                "host {host}'s agent has not called for {}s, nor any agent started \
                 there since; not charged",
                quiet.as_secs()
            )));
        }
        if !agents.silent && now.saturating_duration_since(self.last_progress) >= hang {
            return Some(Stop::Hung(format!(
                "no step progress for {}s while every host's agent reported (last step {})",
                hang.as_secs(),
                self.last_step.map_or("none".into(), |s| s.to_string())
            )));
        }
        None
    }
}

/// The trainer was given a checkpoint of `resume_step` and reported `first_step` first,
/// below it: it could not load the checkpoint and started over.
pub fn started_over(resume_step: Option<i64>, first_step: i64) -> bool {
    resume_step.is_some_and(|resume| first_step < resume)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pod::Maintenance;

    const HANG: u64 = 600;
    const MAINTENANCE_TIMEOUT: u64 = 1800;
    const LEAD: u64 = 300;

    fn limits() -> Limits {
        Limits {
            hang_timeout: Duration::from_secs(HANG),
            maintenance_lead: Duration::from_secs(LEAD),
            maintenance_timeout: Duration::from_secs(MAINTENANCE_TIMEOUT),
        }
    }

    fn exit(host: u32, code: Option<i32>, signal: Option<i32>) -> HostExit {
        HostExit {
            host,
            code,
            signal,
            vanished: false,
        }
    }

    fn ended(exit: HostExit, alive: &[bool]) -> Fact {
        Fact::Exit {
            exit: Some(exit),
            alive: alive.to_vec(),
        }
    }

    fn status(state: &str, health: &str) -> PodStatus {
        PodStatus {
            state: state.into(),
            health: health.into(),
            maintenance: None,
            ..Default::default()
        }
    }

    /// The wall clock of every poll: maintenance windows are set against it.
    fn utc() -> DateTime<Utc> {
        DateTime::parse_from_rfc3339("2026-11-26T12:00:00Z")
            .unwrap()
            .with_timezone(&Utc)
    }

    /// A pod with a maintenance window `opens_in` seconds after `utc()`.
    fn window(opens_in: i64, status: &str) -> PodStatus {
        PodStatus {
            maintenance: Some(Maintenance {
                kind: "SCHEDULED".into(),
                status: status.into(),
                window_start: Some(utc() + chrono::TimeDelta::seconds(opens_in)),
                window_end: None,
            }),
            ..self::status("READY", "HEALTHY")
        }
    }

    /// A Compute Engine slice whose capacity ends `ends_in` seconds after `utc()`.
    fn slice(state: &str, topology: &str, ends_in: Option<i64>) -> PodStatus {
        PodStatus {
            api: crate::pod::PodApi::Compute,
            capacity_ends: ends_in.map(|s| utc() + chrono::TimeDelta::seconds(s)),
            ..status(state, topology)
        }
    }

    /// A poll where every agent calls (all contacted, none quiet, none silent).
    fn poll(pod: PodStatus) -> Fact {
        polled(Some(pod), heard())
    }

    fn polled(pod: Option<PodStatus>, agents: Agents) -> Fact {
        Fact::Poll {
            pod,
            utc: utc(),
            agents,
        }
    }

    fn heard() -> Agents {
        Agents {
            contacted: true,
            quiet: vec![(0, Duration::from_secs(1)), (1, Duration::from_secs(1))],
            silent: false,
        }
    }

    fn ready() -> Fact {
        poll(status("READY", "HEALTHY"))
    }

    fn named(stop: &Stop) -> (&'static str, String) {
        match stop {
            Stop::AllExited => ("AllExited", String::new()),
            Stop::HostEnded(exit) => ("HostEnded", exit.describe()),
            Stop::Preempted(why) => ("Preempted", why.clone()),
            Stop::Hung(why) => ("Hung", why.clone()),
            Stop::Cancelled => ("Cancelled", String::new()),
            Stop::LeaseLost => ("LeaseLost", String::new()),
            Stop::Shutdown => ("Shutdown", String::new()),
            Stop::SilentRestart(why) => ("SilentRestart", why.clone()),
            Stop::AgentsGone(why) => ("AgentsGone", why.clone()),
            Stop::LaunchFailed(why) => ("LaunchFailed", why.clone()),
            Stop::Maintenance(why) => ("Maintenance", why.clone()),
            Stop::CapacityEnds(why) => ("CapacityEnds", why.clone()),
            Stop::Repairing(why) => ("Repairing", why.clone()),
            Stop::Ordered(why) => ("Ordered", why.clone()),
        }
    }

    /// How the attempt began (`true`: reattached), the step it resumes from, the facts seen
    /// before (each at its second since the loop began), the fact, its second, and the stop
    /// (its kind and a part of its reason; `None`: the attempt runs on).
    type Case<'a> = (
        &'a str,
        bool,
        Option<i64>,
        Vec<(Fact, u64)>,
        Fact,
        u64,
        Option<(&'a str, &'a str)>,
    );

    #[test]
    fn each_fact_stops_the_attempt_or_lets_it_run() {
        const REATTACH: u64 = REATTACH_GRACE.as_secs();
        let (launched, reattached) = (false, true);
        let ok = exit(0, Some(0), None);
        let crash = exit(1, Some(1), None);
        let killed = exit(2, None, Some(9));
        let maintenance = status("READY", "UNHEALTHY_MAINTENANCE");
        let quiet = |secs: u64| Agents {
            quiet: vec![(0, Duration::from_secs(1)), (3, Duration::from_secs(secs))],
            ..heard()
        };
        let silent = Agents {
            silent: true,
            ..heard()
        };
        let unheard = Agents {
            contacted: false,
            ..Agents::default()
        };
        #[rustfmt::skip]
        let table: Vec<Case> = vec![
            // The worker and the server.
            ("the worker is leaving", launched, None, vec![], Fact::Shutdown, 1, Some(("Shutdown", ""))),
            ("the lease was lost", launched, None, vec![], Fact::LeaseLost, 1, Some(("LeaseLost", ""))),
            ("the server cancelled", launched, None, vec![], Fact::Cancelled, 1, Some(("Cancelled", ""))),
            ("the server wants the pod back", launched, None, vec![], Fact::StopOrdered("evicted by job j".into()), 1, Some(("Ordered", "evicted by job j"))),
            // The hosts' exits.
            ("every host had ended", launched, None, vec![], Fact::Exit { exit: None, alive: vec![false, false] }, 1, Some(("AllExited", ""))),
            ("one host exited 0, another runs", launched, None, vec![], ended(ok, &[false, true]), 1, None),
            ("the last host exited 0", launched, None, vec![], ended(ok, &[false, false]), 1, Some(("AllExited", ""))),
            ("a host exited 1 while others ran", launched, None, vec![], ended(crash, &[true, false]), 1, Some(("HostEnded", "host 1 exited with code 1"))),
            ("a host was killed", launched, None, vec![], ended(killed, &[true, true, false]), 1, Some(("HostEnded", "host 2 was killed by SIGKILL"))),
            ("the last host exited 1", launched, None, vec![], ended(crash, &[false, false]), 1, Some(("HostEnded", "host 1 exited with code 1"))),
            // Host 0's first step against the checkpoint it was given.
            ("the first step is past the resume step", launched, Some(5000), vec![], Fact::Step(5001), 1, None),
            ("the first step is the resume step", launched, Some(5000), vec![], Fact::Step(5000), 1, None),
            ("the first step is below the resume step", launched, Some(5000), vec![], Fact::Step(0), 1, Some(("SilentRestart", "given checkpoint step 5000 but reported step 0 first"))),
            ("a first step with no resume step", launched, None, vec![], Fact::Step(0), 1, None),
            ("a later step below the resume step", launched, Some(5000), vec![(Fact::Step(5001), 1)], Fact::Step(10), 2, None),
            ("a reattached worker checks its first step too", reattached, Some(5000), vec![], Fact::Step(4999), 1, Some(("SilentRestart", "reported step 4999 first"))),
            // The pod's state.
            ("the pod is ready", launched, None, vec![], ready(), 1, None),
            ("the pod was preempted", launched, None, vec![], poll(status("PREEMPTED", "HEALTHY")), 1, Some(("Preempted", "pod state PREEMPTED/HEALTHY"))),
            ("the node is being deleted", launched, None, vec![], poll(status("DELETING", "")), 1, Some(("Preempted", "pod state DELETING/"))),
            ("a glitch in the state", launched, None, vec![], poll(status("STATE_UNSPECIFIED", "HEALTHY")), 1, None),
            ("the pod could not be read", launched, None, vec![], polled(None, heard()), 1, None),
            ("a preempted pod is seen before a hang", launched, None, vec![], poll(status("PREEMPTED", "HEALTHY")), HANG, Some(("Preempted", "pod state"))),
            // Maintenance under way.
            ("maintenance begins", launched, None, vec![], poll(maintenance.clone()), 1, None),
            ("maintenance just before its timeout", launched, None, vec![(poll(maintenance.clone()), 10)], poll(maintenance.clone()), 10 + MAINTENANCE_TIMEOUT - 1, None),
            ("maintenance at its timeout", launched, None, vec![(poll(maintenance.clone()), 10)], poll(maintenance.clone()), 10 + MAINTENANCE_TIMEOUT, Some(("Preempted", "a maintenance event has not ended after 1800s (pod state READY/UNHEALTHY_MAINTENANCE)"))),
            ("maintenance under way by its window", launched, None, vec![(poll(window(-60, "ONGOING")), 10)], poll(window(-60, "ONGOING")), 10 + MAINTENANCE_TIMEOUT, Some(("Preempted", "has not ended after 1800s"))),
            ("maintenance that ended is timed afresh", launched, None, vec![(poll(maintenance.clone()), 10), (ready(), 20), (poll(maintenance.clone()), 30)], poll(maintenance.clone()), 10 + MAINTENANCE_TIMEOUT, None),
            ("a poll that cannot read the pod keeps the maintenance's start", launched, None, vec![(poll(maintenance.clone()), 10), (polled(None, heard()), 20)], poll(maintenance.clone()), 10 + MAINTENANCE_TIMEOUT, Some(("Preempted", "after 1800s"))),
            ("a trainer paused by maintenance is not hung", launched, None, vec![(poll(maintenance.clone()), HANG - 1)], ready(), 2 * HANG - 2, None),
            // A maintenance window ahead.
            ("a window beyond the lead", launched, None, vec![], poll(window(LEAD as i64 + 1, "PENDING")), 1, None),
            ("a window at the lead", launched, None, vec![], poll(window(LEAD as i64, "PENDING")), 1, Some(("Maintenance", "a SCHEDULED maintenance window opens at 2026-11-26T12:05:00+00:00: stopped ahead of it"))),
            ("a window already open", launched, None, vec![], poll(window(-5, "PENDING")), 1, Some(("Maintenance", "not charged"))),
            // A Compute Engine slice.
            ("a slice being repaired", launched, None, vec![], poll(slice("REPAIRING", "REACTIVATING", None)), 1, Some(("Repairing", "pod state REPAIRING/REACTIVATING"))),
            ("a Spot slice preempted", launched, None, vec![], poll(slice("TERMINATED", "INCOMPLETE", None)), 1, Some(("Preempted", "pod state TERMINATED/INCOMPLETE"))),
            ("flex-start capacity beyond the lead", launched, None, vec![], poll(slice("RUNNING", "ACTIVE", Some(LEAD as i64 + 1))), 1, None),
            ("flex-start capacity ends at the lead", launched, None, vec![], poll(slice("RUNNING", "ACTIVE", Some(LEAD as i64))), 1, Some(("CapacityEnds", "capacity ends at 2026-11-26T12:05:00+00:00"))),
            // The agents' first calls.
            ("no agent yet, just before the launch grace", launched, None, vec![], polled(Some(status("READY", "HEALTHY")), unheard.clone()), HANG - 1, None),
            ("no agent at the launch grace", launched, None, vec![], polled(Some(status("READY", "HEALTHY")), unheard.clone()), HANG, Some(("AgentsGone", "no agent called within 600s of the launch"))),
            ("no agent after the launch grace", launched, None, vec![], polled(None, unheard.clone()), HANG + 7, Some(("AgentsGone", "within 607s of the launch"))),
            ("no agent just before the reattach grace", reattached, None, vec![], polled(None, unheard.clone()), REATTACH - 1, None),
            ("no agent at the reattach grace", reattached, None, vec![], polled(None, unheard.clone()), REATTACH, Some(("AgentsGone", "no agent called within 30s of the worker's restart"))),
            ("the reattach grace runs from the last sign of life", reattached, None, vec![(Fact::Phase, 20)], polled(None, unheard.clone()), 20 + REATTACH - 1, None),
            ("a reattached worker's agents called", reattached, None, vec![], polled(None, heard()), REATTACH, None),
            // An agent that stopped calling.
            ("a host's agents quiet just under the hang timeout", launched, None, vec![(Fact::Step(1), HANG - 1)], polled(None, quiet(HANG - 1)), HANG, None),
            ("a host's agents quiet for the hang timeout", launched, None, vec![(Fact::Step(1), HANG - 1)], polled(None, quiet(HANG)), HANG, Some(("AgentsGone", "host 3's agent has not called for 600s, nor any agent started there since"))),
            ("a quiet host is seen before a hang", launched, None, vec![], polled(None, quiet(HANG)), HANG, Some(("AgentsGone", "host 3's agent"))),
            ("a silent agent is no hang", launched, None, vec![], polled(None, silent.clone()), HANG, None),
            ("a new agent buys half the hang timeout", launched, None, vec![(Fact::SilentAgentsTended, HANG)], ready(), HANG + HANG / 2 - 1, None),
            ("and no more", launched, None, vec![(Fact::SilentAgentsTended, HANG)], ready(), HANG + HANG / 2, Some(("Hung", "no step progress for 600s"))),
            ("a new agent does not set back recent progress", launched, None, vec![(Fact::Step(7), HANG - 10), (Fact::SilentAgentsTended, HANG)], ready(), 2 * HANG - 10, Some(("Hung", "(last step 7)"))),
            // No progress.
            ("no progress just before the hang timeout", launched, None, vec![], ready(), HANG - 1, None),
            ("no progress at the hang timeout", launched, None, vec![], ready(), HANG, Some(("Hung", "no step progress for 600s while every host's agent reported (last step none)"))),
            ("no progress when the pod cannot be read", launched, None, vec![], polled(None, heard()), HANG, Some(("Hung", "last step none"))),
            ("a new step sets the hang clock back", launched, None, vec![(Fact::Step(1), 100)], ready(), 100 + HANG - 1, None),
            ("until the hang timeout after it", launched, None, vec![(Fact::Step(1), 100)], ready(), 100 + HANG, Some(("Hung", "(last step 1)"))),
            ("a step seen again is no progress", launched, None, vec![(Fact::Step(5), 10), (Fact::Step(5), 100)], ready(), 10 + HANG, Some(("Hung", "(last step 5)"))),
            ("an older step is no progress", launched, None, vec![(Fact::Step(5), 10), (Fact::Step(4), 100)], ready(), 10 + HANG, Some(("Hung", "(last step 5)"))),
            ("a checkpoint line is progress", launched, None, vec![(Fact::Step(5), 10), (Fact::Checkpoint, 100)], ready(), 10 + HANG, None),
            ("a phase line is progress", launched, None, vec![(Fact::Step(5), 10), (Fact::Phase, 100)], ready(), 100 + HANG - 1, None),
            ("steps past the resume step are progress", launched, Some(5000), vec![(Fact::Step(5001), 1), (Fact::Step(5002), 100)], ready(), 100 + HANG, Some(("Hung", "(last step 5002)"))),
        ];
        for (case, reattached, resume_step, before, fact, at, expected) in table {
            let t0 = Instant::now();
            let at_second = |s: u64| t0 + Duration::from_secs(s);
            let mut watch = Watch::new(limits(), reattached, resume_step, t0);
            for (earlier, when) in before {
                assert_eq!(
                    watch.observe(earlier, at_second(when)),
                    None,
                    "{case}: before"
                );
            }
            let got = watch.observe(fact, at_second(at));
            match (got.as_ref().map(named), expected) {
                (None, None) => {}
                (Some((kind, why)), Some((want, part))) => {
                    assert_eq!(kind, want, "{case}: {got:?}");
                    assert!(why.contains(part), "{case}: {why:?} lacks {part:?}");
                }
                (got, _) => panic!("{case}: got {got:?}, expected {expected:?}"),
            }
        }
    }

    #[test]
    fn the_end_step_counts_every_step_printed_before_the_hosts_stopped() {
        let t0 = Instant::now();
        let mut watch = Watch::new(limits(), false, Some(100), t0);
        assert_eq!(watch.last_step(), None);
        // The first step below the resume step stops the attempt and is not its progress.
        assert!(watch.observe(Fact::Step(3), t0).is_some());
        assert_eq!(watch.last_step(), None);
        watch.step_after_stop(4);
        watch.step_after_stop(2);
        assert_eq!(watch.last_step(), Some(4));
        assert!(started_over(Some(100), 99) && !started_over(Some(100), 100));
        assert!(!started_over(None, 0));
    }
}
