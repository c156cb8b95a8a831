//! A slice's life in its pool, as one pure table: what the pool knows of a slice it holds
//! (its [`Phase`]), each [`Fact`] it learns (a create's answer, a listing, the server's word
//! on its worker, its fate), and for each phase and fact the next phase and the [`Action`]s
//! the pool carries out (the journal, the zone book, the cloud, the events). `run.rs`
//! gathers the facts and carries the actions out; it changes no slice's state itself.
//! docs/architecture.md §3.8 holds the table ([`next`]), and a test holds the two together.

use std::collections::BTreeSet;
use std::time::Duration;

use chrono::{DateTime, Utc};
use tokio::time::Instant;

use podq_api::{EventKind, PoolEventKind};

use super::classify::ErrorKind;
use super::cloud::SliceState;
use super::decide::{Going, SliceFacts};

/// Where a slice stands in its pool.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Phase {
    /// Not held: before its create is asked for or its listing adopted.
    Unheld,
    /// Its create is asked for (the journal holds the request), its answer not back. It
    /// counts as a slice being made, and a listing without it is no vanishing.
    Asked,
    /// Its create is asked for and not answered, and the cloud lists it READY: its worker
    /// waits for the answer.
    AskedUp,
    /// The cloud lists it CREATING (adopted so, answered before it was up, or repaired).
    Creating,
    /// READY, its worker not yet heard from by the server.
    Booting,
    /// READY, its worker heard from: leased, or not seen by a server that restarted since
    /// (that is no silence).
    Serving,
    /// READY, its worker seen and holding no lease.
    Idle,
    /// Its capacity was taken back; for good (a Spot slice's capacity does not come back).
    Preempted,
    /// The cloud lists it DELETING, a delete the pool did not ask for.
    Deleting,
    /// Given back: no longer held.
    Gone,
}

impl Phase {
    pub const ALL: [Phase; 10] = [
        Phase::Unheld,
        Phase::Asked,
        Phase::AskedUp,
        Phase::Creating,
        Phase::Booting,
        Phase::Serving,
        Phase::Idle,
        Phase::Preempted,
        Phase::Deleting,
        Phase::Gone,
    ];

    /// As docs/architecture.md names it.
    pub fn name(self) -> &'static str {
        match self {
            Phase::Unheld => "unheld",
            Phase::Asked => "asked",
            Phase::AskedUp => "asked, up",
            Phase::Creating => "creating",
            Phase::Booting => "booting",
            Phase::Serving => "serving",
            Phase::Idle => "idle",
            Phase::Preempted => "preempted",
            Phase::Deleting => "deleting",
            Phase::Gone => "gone",
        }
    }

    /// Its state as the pool reports it to the server.
    pub fn state(self) -> SliceState {
        match self {
            Phase::Unheld | Phase::Asked | Phase::Creating => SliceState::Creating,
            Phase::AskedUp | Phase::Booting | Phase::Serving | Phase::Idle => SliceState::Ready,
            Phase::Preempted => SliceState::Preempted,
            Phase::Deleting | Phase::Gone => SliceState::Deleting,
        }
    }

    /// Its create is in flight: asked for, its answer not back.
    pub fn in_flight(self) -> bool {
        matches!(self, Phase::Asked | Phase::AskedUp)
    }

    /// READY with its create answered: its worker runs.
    pub fn is_up(self) -> bool {
        matches!(self, Phase::Booting | Phase::Serving | Phase::Idle)
    }
}

/// A create the cloud refused, as the slice's life reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// No capacity or quota where it was asked: its zone is blocked for a while.
    Blocked,
    /// Failed on its way: its zone is tried again.
    Transient,
    /// A permission or an invalid request: the pool pauses until a person acts.
    Paused,
    /// Another owner's slice holds the name: left alone, said once.
    NameTaken,
}

impl Refusal {
    pub const ALL: [Refusal; 4] = [
        Refusal::Blocked,
        Refusal::Transient,
        Refusal::Paused,
        Refusal::NameTaken,
    ];

    pub fn of(kind: ErrorKind) -> Refusal {
        match kind {
            ErrorKind::Stockout | ErrorKind::Quota => Refusal::Blocked,
            ErrorKind::Transient => Refusal::Transient,
            ErrorKind::Denied | ErrorKind::Invalid => Refusal::Paused,
            ErrorKind::NameTaken => Refusal::NameTaken,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Refusal::Blocked => "stockout or quota",
            Refusal::Transient => "transient",
            Refusal::Paused => "denied or invalid",
            Refusal::NameTaken => "name taken",
        }
    }

    /// The event that says so.
    fn event(self) -> PoolEventKind {
        match self {
            Refusal::Blocked => PoolEventKind::ZoneBlocked,
            Refusal::Transient => PoolEventKind::CreateFailed,
            Refusal::Paused => PoolEventKind::PoolPaused,
            Refusal::NameTaken => PoolEventKind::SliceForeign,
        }
    }
}

/// What the server says of a slice's worker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Heard {
    /// A live lease holds it.
    Leased,
    /// Its worker calls, and holds no lease.
    Unleased,
    /// The server has not heard from its worker (or has forgotten, having restarted).
    Unseen,
}

impl Heard {
    pub const ALL: [Heard; 3] = [Heard::Leased, Heard::Unleased, Heard::Unseen];

    pub fn of(pod: &podq_api::SlicePod) -> Heard {
        match (pod.leased, pod.seen_at.is_some()) {
            (true, _) => Heard::Leased,
            (false, true) => Heard::Unleased,
            (false, false) => Heard::Unseen,
        }
    }
}

/// Why a slice goes, as `decide::fate` judged it (its words aside).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fate {
    Preempted,
    Quarantined,
    Silent,
    Idle,
}

impl Fate {
    pub const ALL: [Fate; 4] = [Fate::Preempted, Fate::Quarantined, Fate::Silent, Fate::Idle];

    pub fn of(going: &Going) -> Fate {
        match going {
            Going::Preempted => Fate::Preempted,
            Going::Quarantined(_) => Fate::Quarantined,
            Going::Silent => Fate::Silent,
            Going::Idle => Fate::Idle,
        }
    }
}

/// What the pool learns of a slice.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fact {
    /// Its create is asked for (written to the journal first, under the name it gives).
    CreateAsked,
    /// Listed by the cloud, not held, its request in the journal and its owner this pool:
    /// adopted, as it is listed.
    Adopted(SliceState),
    /// Its create answered: made.
    CreateOk,
    /// Its create answered: refused.
    CreateRefused(Refusal),
    /// Its create's task ended without an answer: the listing decides, as after a restart.
    CreateLost,
    /// The cloud lists it in this state.
    Listed(SliceState),
    /// The cloud's listing lacks it.
    NotListed,
    /// The server's word on its worker.
    Heard(Heard),
    /// Its fate is decided: it goes.
    Fate(Fate),
}

impl Fact {
    /// Every fact, for the table.
    pub fn all() -> Vec<Fact> {
        let mut all = vec![Fact::CreateAsked];
        all.extend(
            [
                SliceState::Creating,
                SliceState::Ready,
                SliceState::Preempted,
            ]
            .into_iter()
            .map(Fact::Adopted),
        );
        all.push(Fact::CreateOk);
        all.extend(Refusal::ALL.into_iter().map(Fact::CreateRefused));
        all.push(Fact::CreateLost);
        all.extend(SliceState::ALL.into_iter().map(Fact::Listed));
        all.push(Fact::NotListed);
        all.extend(Heard::ALL.into_iter().map(Fact::Heard));
        all.extend(Fate::ALL.into_iter().map(Fact::Fate));
        all
    }

    /// As docs/architecture.md names it.
    pub fn name(self) -> String {
        match self {
            Fact::CreateAsked => "create asked".into(),
            Fact::Adopted(state) => format!("adopted, listed {}", state.as_str()),
            Fact::CreateOk => "create answered: made".into(),
            Fact::CreateRefused(refusal) => format!("create refused: {}", refusal.name()),
            Fact::CreateLost => "create's task lost".into(),
            Fact::Listed(state) => format!("listed {}", state.as_str()),
            Fact::NotListed => "not listed".into(),
            Fact::Heard(Heard::Leased) => "server: leased".into(),
            Fact::Heard(Heard::Unleased) => "server: seen, no lease".into(),
            Fact::Heard(Heard::Unseen) => "server: not seen".into(),
            Fact::Fate(fate) => format!("fate: {}", Going::from(fate).as_str()),
        }
    }
}

impl From<Fate> for Going {
    fn from(fate: Fate) -> Going {
        match fate {
            Fate::Preempted => Going::Preempted,
            Fate::Quarantined => Going::Quarantined(String::new()),
            Fate::Silent => Going::Silent,
            Fate::Idle => Going::Idle,
        }
    }
}

/// What the pool does for a change of a slice's life, in this order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// The journal writes it down as made (adopted, or its create answered).
    JournalCreated,
    /// The journal writes it down as given up (before any delete: a crash between the two
    /// finds it unheld on restart, and deletes it then).
    JournalGone,
    /// Its zone's book: a slice found alive there.
    ZoneBirth,
    /// Its zone's book: a create succeeded there.
    ZoneSuccess,
    /// Its zone's book: a create was refused there (blocked, backed off, or paused).
    ZoneError,
    /// Its zone's book: a slice died there (young ones count as churn).
    ZoneDeath,
    /// Its zone's book: a slice the pool removed there (no death).
    ZoneRemoved,
    /// The next create avoids its zone.
    AvoidZone,
    /// Said once, left alone: another owner's.
    NoteForeign,
    /// An event of the pool's onto the audit.
    Event(PoolEventKind),
    /// Its worker's daemon stops and its hosts power off.
    StopWorker,
    /// The server is told its pod is given back.
    Retire,
    /// Deleted in the cloud, on a task of its own.
    Delete,
}

impl Action {
    pub fn name(self) -> String {
        match self {
            Action::JournalCreated => "journal: made".into(),
            Action::JournalGone => "journal: gone".into(),
            Action::ZoneBirth => "zone: birth".into(),
            Action::ZoneSuccess => "zone: success".into(),
            Action::ZoneError => "zone: error".into(),
            Action::ZoneDeath => "zone: death".into(),
            Action::ZoneRemoved => "zone: removed".into(),
            Action::AvoidZone => "avoid its zone".into(),
            Action::NoteForeign => "note foreign".into(),
            Action::Event(kind) => format!("`{}`", kind.as_str()),
            Action::StopWorker => "stop its worker".into(),
            Action::Retire => "retire its pod".into(),
            Action::Delete => "delete".into(),
        }
    }
}

use Action::*;

/// A slice's next phase, and what the pool does on the way.
pub type Outcome = (Phase, Vec<Action>);

/// What becomes of a slice in `phase` that the pool learns `fact` of: its next phase and
/// what the pool does. `None`: the fact changes nothing in that phase.
pub fn next(phase: Phase, fact: Fact) -> Option<Outcome> {
    use Phase as P;
    let given_back = |zone: Action, kind: PoolEventKind| {
        vec![zone, Event(kind), StopWorker, Retire, JournalGone, Delete]
    };
    let made = vec![
        ZoneSuccess,
        JournalCreated,
        Event(PoolEventKind::SliceCreated),
    ];
    let (to, actions) = match (phase, fact) {
        (P::Unheld, Fact::CreateAsked) => (P::Asked, vec![]),
        (P::Unheld, Fact::Adopted(state)) => {
            let to = match state {
                SliceState::Creating => P::Creating,
                SliceState::Ready => P::Booting,
                SliceState::Preempted => P::Preempted,
                // A slice listed DELETING is a stray's delete left unfinished, never adopted.
                SliceState::Deleting => return None,
            };
            (to, vec![JournalCreated, ZoneBirth])
        }
        (P::Asked, Fact::CreateOk) => (P::Creating, made.clone()),
        (P::AskedUp, Fact::CreateOk) => (P::Booting, made.clone()),
        (P::Asked | P::AskedUp, Fact::CreateRefused(refusal)) => {
            // The server wrote the slice down as a pod being made: it is retired with it.
            let mut actions = vec![Retire, JournalGone, ZoneError];
            if refusal == Refusal::NameTaken {
                actions.push(NoteForeign);
            }
            actions.push(Event(refusal.event()));
            (P::Gone, actions)
        }
        (P::Asked, Fact::CreateLost) => (P::Creating, vec![]),
        (P::AskedUp, Fact::CreateLost) => (P::Booting, vec![]),
        // Its create's answer decides what became of it: a group still waiting for capacity
        // may list as lost meanwhile, and the cloud may not list it before it answers.
        (P::Asked, Fact::Listed(SliceState::Ready)) => (P::AskedUp, vec![]),
        (P::Asked | P::AskedUp, Fact::Listed(_) | Fact::NotListed) => return None,
        (P::Unheld | P::Asked | P::AskedUp | P::Gone, _) => return None,
        // Preempted for good: its listing changes nothing more, until it vanishes.
        (P::Preempted, Fact::Listed(_)) => return None,
        (_, Fact::Listed(SliceState::Preempted)) => (P::Preempted, vec![ZoneDeath]),
        (_, Fact::Listed(SliceState::Creating)) => (P::Creating, vec![]),
        (P::Creating | P::Deleting, Fact::Listed(SliceState::Ready)) => (P::Booting, vec![]),
        (_, Fact::Listed(SliceState::Ready)) => return None,
        (_, Fact::Listed(SliceState::Deleting)) => (P::Deleting, vec![]),
        // Its death was counted against its zone when it was found preempted.
        (P::Preempted, Fact::NotListed) => (
            P::Gone,
            vec![
                StopWorker,
                Retire,
                JournalGone,
                Event(PoolEventKind::SliceDeleted),
            ],
        ),
        (_, Fact::NotListed) => (
            P::Gone,
            vec![
                ZoneDeath,
                StopWorker,
                Retire,
                JournalGone,
                Event(PoolEventKind::SliceDeleted),
            ],
        ),
        (P::Booting | P::Serving | P::Idle, Fact::Heard(Heard::Leased)) => (P::Serving, vec![]),
        (P::Booting | P::Serving | P::Idle, Fact::Heard(Heard::Unleased)) => (P::Idle, vec![]),
        (P::Idle, Fact::Heard(Heard::Unseen)) => (P::Serving, vec![]),
        (_, Fact::Heard(_)) => return None,
        (P::Preempted, Fact::Fate(Fate::Preempted)) => {
            // Its death was counted against its zone when it was seen.
            let mut actions = given_back(ZoneDeath, PoolEventKind::SliceDeleted);
            actions.remove(0);
            (P::Gone, actions)
        }
        (
            P::Creating | P::Booting | P::Serving | P::Idle | P::Deleting,
            Fact::Fate(Fate::Quarantined),
        ) => {
            let mut actions = vec![AvoidZone];
            actions.extend(given_back(ZoneRemoved, PoolEventKind::SliceQuarantined));
            (P::Gone, actions)
        }
        // It never served: a slice lost young, as far as its zone is concerned.
        (P::Booting, Fact::Fate(Fate::Silent)) => {
            (P::Gone, given_back(ZoneDeath, PoolEventKind::SliceDeleted))
        }
        (P::Idle, Fact::Fate(Fate::Idle)) => (
            P::Gone,
            given_back(ZoneRemoved, PoolEventKind::SliceDeleted),
        ),
        (_, Fact::Fate(_)) => return None,
        (
            _,
            Fact::CreateAsked
            | Fact::Adopted(_)
            | Fact::CreateOk
            | Fact::CreateRefused(_)
            | Fact::CreateLost,
        ) => return None,
    };
    // Staying as it is, doing nothing, is no change.
    (to != phase || !actions.is_empty()).then_some((to, actions))
}

/// Whose a listed slice is, by its identity label (`cloud::POOL_ID_LABEL`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Owner {
    /// This pool's identity.
    Ours,
    /// No identity label: a slice of an older podq, made before the label.
    Unlabelled,
    /// Another installation's, or a person's.
    Another,
}

/// What the pool's journal says of a name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Record {
    /// Asked for or made, not given up.
    Held,
    /// Given up (its delete may be under way).
    GivenUp,
    /// Never asked for by this pool.
    Unknown,
}

/// What the pool does with a slice the cloud lists with its pool's label and that it does
/// not hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Found {
    /// Its own: adopted as listed ([`Fact::Adopted`]).
    Adopt,
    /// Its own, given up or asked for under a lost journal, or a delete a crash
    /// interrupted: deleted (once the adopted slices' workers run: a delete takes
    /// minutes). `retire`: the server is told its pod is given back.
    Delete { why: &'static str, retire: bool },
    /// Asked for under a name another owner's slice holds: never its own. The request is
    /// given up (journal: gone, retire its pod) and the slice left alone, said once.
    NameTaken,
    /// Labelled with this pool's name by another podq (or a person): not its to delete,
    /// whatever its name; left alone, said once.
    Foreign,
}

/// What becomes of a listed slice the pool does not hold, by its state, its owner and the
/// journal's record of its name.
pub fn found(state: SliceState, owner: Owner, record: Record) -> Found {
    if state == SliceState::Deleting {
        // A delete that a crash interrupted: deleting again is harmless.
        return Found::Delete {
            why: "a delete left unfinished",
            retire: false,
        };
    }
    let not_theirs = owner != Owner::Another;
    match record {
        Record::Held if not_theirs => Found::Adopt,
        Record::Held => Found::NameTaken,
        Record::GivenUp if not_theirs => Found::Delete {
            why: "a slice this pool does not hold",
            retire: true,
        },
        _ if owner == Owner::Ours => Found::Delete {
            why: "a slice this pool does not hold",
            retire: true,
        },
        _ => Found::Foreign,
    }
}

/// The two clocks a change is noted by: the wall clock the server is told of, and the
/// monotonic one durations are measured with.
#[derive(Debug, Clone, Copy)]
pub struct At {
    pub wall: DateTime<Utc>,
    pub mono: Instant,
}

impl At {
    pub fn now() -> At {
        At {
            wall: Utc::now(),
            mono: Instant::now(),
        }
    }
}

/// One slice's life: its phase, and what its phases have noted.
#[derive(Debug, Clone, PartialEq)]
pub struct SliceLife {
    pub phase: Phase,
    pub zone: String,
    pub created_at: DateTime<Utc>,
    /// When this process first saw it READY (since it was last listed CREATING).
    pub ready_since: Option<Instant>,
    /// When this process found it preempted.
    pub preempted_at: Option<Instant>,
    /// Since when it has been idle: up, its worker seen, no lease.
    pub idle_since: Option<DateTime<Utc>>,
    /// The distinct preflights its worker failed.
    pub failed_preflights: BTreeSet<DateTime<Utc>>,
}

impl SliceLife {
    /// A slice in `zone` not held yet: the next fact is its create asked for, or its
    /// adoption.
    pub fn unheld(zone: &str, created_at: DateTime<Utc>) -> SliceLife {
        SliceLife {
            phase: Phase::Unheld,
            zone: zone.to_owned(),
            created_at,
            ready_since: None,
            preempted_at: None,
            idle_since: None,
            failed_preflights: BTreeSet::new(),
        }
    }

    /// The life after `fact`, noted `at`, and what the pool does for it.
    pub fn advance(&self, fact: Fact, at: At) -> (SliceLife, Vec<Action>) {
        let Some((phase, actions)) = next(self.phase, fact) else {
            return (self.clone(), Vec::new());
        };
        let mut life = self.clone();
        life.phase = phase;
        match phase {
            Phase::Unheld | Phase::Asked | Phase::Creating => life.ready_since = None,
            Phase::AskedUp | Phase::Booting | Phase::Serving | Phase::Idle => {
                life.ready_since = life.ready_since.or(Some(at.mono))
            }
            Phase::Preempted => life.preempted_at = life.preempted_at.or(Some(at.mono)),
            Phase::Deleting | Phase::Gone => {}
        }
        life.idle_since = match phase {
            Phase::Idle => life.idle_since.or(Some(at.wall)),
            _ => None,
        };
        (life, actions)
    }

    /// Notes a preflight its worker failed, when it was run.
    pub fn preflight_failed(&mut self, at: DateTime<Utc>) {
        self.failed_preflights.insert(at);
    }

    /// What `decide::fate` judges it by, `now` on the monotonic clock.
    pub fn facts(&self, now: Instant) -> SliceFacts {
        SliceFacts {
            state: self.phase.state(),
            preempted_for: self
                .preempted_at
                .map(|at| now.saturating_duration_since(at)),
            failed_preflights: self.failed_preflights.len(),
            ever_seen: self.phase != Phase::Booting,
            ready_for: self
                .ready_since
                .filter(|_| self.phase.is_up())
                .map(|since| now.saturating_duration_since(since)),
            idle_since: self.idle_since,
        }
    }

    /// How long it has been READY, if it is up.
    pub fn ready_for(&self, now: Instant) -> Option<Duration> {
        self.facts(now).ready_for
    }
}

/// The table as docs/architecture.md shows it: one row per fact and outcome, the phases it
/// happens in; a fact that changes nothing in a phase is left out.
pub fn table() -> Vec<String> {
    let mut rows = vec![
        "| fact | in | becomes | the pool does |".to_owned(),
        "|---|---|---|---|".to_owned(),
    ];
    for fact in Fact::all() {
        let mut outcomes: Vec<(Outcome, Vec<Phase>)> = Vec::new();
        for phase in Phase::ALL {
            let Some(outcome) = next(phase, fact) else {
                continue;
            };
            match outcomes.iter_mut().find(|(o, _)| *o == outcome) {
                Some((_, from)) => from.push(phase),
                None => outcomes.push((outcome, vec![phase])),
            }
        }
        for ((to, actions), from) in outcomes {
            let from: Vec<String> = from.iter().map(|p| format!("`{}`", p.name())).collect();
            let mut actions: Vec<String> = actions.iter().map(|a| a.name()).collect();
            if actions.is_empty() {
                actions.push("—".to_owned());
            }
            rows.push(format!(
                "| {} | {} | `{}` | {} |",
                fact.name(),
                from.join(", "),
                to.name(),
                actions.join(", ")
            ));
        }
    }
    rows
}

#[cfg(test)]
mod tests {
    use super::*;
    use Phase as P;

    /// (phase, fact, next phase, actions), every pair of note: `None` where the fact
    /// changes nothing.
    #[test]
    fn every_change_of_a_slices_life() {
        let gone_idle = vec![
            ZoneRemoved,
            Event(PoolEventKind::SliceDeleted),
            StopWorker,
            Retire,
            JournalGone,
            Delete,
        ];
        let made = vec![
            ZoneSuccess,
            JournalCreated,
            Event(PoolEventKind::SliceCreated),
        ];
        let rows: Vec<(Phase, Fact, Option<Outcome>)> = vec![
            (P::Unheld, Fact::CreateAsked, Some((P::Asked, vec![]))),
            (
                P::Unheld,
                Fact::Adopted(SliceState::Ready),
                Some((P::Booting, vec![JournalCreated, ZoneBirth])),
            ),
            (
                P::Unheld,
                Fact::Adopted(SliceState::Preempted),
                Some((P::Preempted, vec![JournalCreated, ZoneBirth])),
            ),
            (P::Unheld, Fact::Adopted(SliceState::Deleting), None),
            (
                P::Asked,
                Fact::Listed(SliceState::Ready),
                Some((P::AskedUp, vec![])),
            ),
            (P::Asked, Fact::Listed(SliceState::Preempted), None),
            (P::Asked, Fact::NotListed, None),
            (P::AskedUp, Fact::Listed(SliceState::Creating), None),
            (P::Asked, Fact::CreateOk, Some((P::Creating, made.clone()))),
            (P::AskedUp, Fact::CreateOk, Some((P::Booting, made))),
            (
                P::Asked,
                Fact::CreateRefused(Refusal::Blocked),
                Some((
                    P::Gone,
                    vec![
                        Retire,
                        JournalGone,
                        ZoneError,
                        Event(PoolEventKind::ZoneBlocked),
                    ],
                )),
            ),
            (
                P::Asked,
                Fact::CreateRefused(Refusal::NameTaken),
                Some((
                    P::Gone,
                    vec![
                        Retire,
                        JournalGone,
                        ZoneError,
                        NoteForeign,
                        Event(PoolEventKind::SliceForeign),
                    ],
                )),
            ),
            (P::Asked, Fact::CreateLost, Some((P::Creating, vec![]))),
            (P::AskedUp, Fact::CreateLost, Some((P::Booting, vec![]))),
            (P::Creating, Fact::CreateOk, None),
            (
                P::Creating,
                Fact::Listed(SliceState::Ready),
                Some((P::Booting, vec![])),
            ),
            (P::Serving, Fact::Listed(SliceState::Ready), None),
            (
                P::Serving,
                Fact::Listed(SliceState::Creating),
                Some((P::Creating, vec![])),
            ),
            (
                P::Idle,
                Fact::Listed(SliceState::Preempted),
                Some((P::Preempted, vec![ZoneDeath])),
            ),
            (P::Preempted, Fact::Listed(SliceState::Ready), None),
            (
                P::Serving,
                Fact::NotListed,
                Some((
                    P::Gone,
                    vec![
                        ZoneDeath,
                        StopWorker,
                        Retire,
                        JournalGone,
                        Event(PoolEventKind::SliceDeleted),
                    ],
                )),
            ),
            (
                P::Preempted,
                Fact::NotListed,
                Some((
                    P::Gone,
                    vec![
                        StopWorker,
                        Retire,
                        JournalGone,
                        Event(PoolEventKind::SliceDeleted),
                    ],
                )),
            ),
            (P::Booting, Fact::Heard(Heard::Unseen), None),
            (
                P::Booting,
                Fact::Heard(Heard::Leased),
                Some((P::Serving, vec![])),
            ),
            (
                P::Booting,
                Fact::Heard(Heard::Unleased),
                Some((P::Idle, vec![])),
            ),
            (P::Serving, Fact::Heard(Heard::Unseen), None),
            (
                P::Idle,
                Fact::Heard(Heard::Unseen),
                Some((P::Serving, vec![])),
            ),
            (P::Idle, Fact::Heard(Heard::Unleased), None),
            (P::Creating, Fact::Listed(SliceState::Creating), None),
            (P::Creating, Fact::Heard(Heard::Unleased), None),
            (P::Preempted, Fact::Heard(Heard::Unleased), None),
            (P::Idle, Fact::Fate(Fate::Idle), Some((P::Gone, gone_idle))),
            (P::Serving, Fact::Fate(Fate::Idle), None),
            (
                P::Booting,
                Fact::Fate(Fate::Silent),
                Some((
                    P::Gone,
                    vec![
                        ZoneDeath,
                        Event(PoolEventKind::SliceDeleted),
                        StopWorker,
                        Retire,
                        JournalGone,
                        Delete,
                    ],
                )),
            ),
            (
                P::Serving,
                Fact::Fate(Fate::Quarantined),
                Some((
                    P::Gone,
                    vec![
                        AvoidZone,
                        ZoneRemoved,
                        Event(PoolEventKind::SliceQuarantined),
                        StopWorker,
                        Retire,
                        JournalGone,
                        Delete,
                    ],
                )),
            ),
            (
                P::Preempted,
                Fact::Fate(Fate::Preempted),
                Some((
                    P::Gone,
                    vec![
                        Event(PoolEventKind::SliceDeleted),
                        StopWorker,
                        Retire,
                        JournalGone,
                        Delete,
                    ],
                )),
            ),
            (P::Preempted, Fact::Fate(Fate::Quarantined), None),
            (P::Gone, Fact::NotListed, None),
        ];
        for (phase, fact, want) in rows {
            assert_eq!(
                next(phase, fact),
                want,
                "{} × {}",
                phase.name(),
                fact.name()
            );
        }
        // A slice given up stays given up; nothing but its ask or adoption holds one; a
        // slice being made goes only by its create's answer.
        for fact in Fact::all() {
            assert_eq!(next(P::Gone, fact), None, "gone × {}", fact.name());
            for phase in Phase::ALL {
                let Some((to, actions)) = next(phase, fact) else {
                    continue;
                };
                if phase == P::Unheld {
                    assert!(matches!(fact, Fact::CreateAsked | Fact::Adopted(_)));
                }
                if phase.in_flight() && to == P::Gone {
                    assert!(matches!(fact, Fact::CreateRefused(_)), "{}", fact.name());
                }
                // What goes is retired and written down as gone; what was up stops its
                // worker first.
                if to == P::Gone {
                    assert!(actions.contains(&Retire) && actions.contains(&JournalGone));
                    if !phase.in_flight() {
                        let stop = actions.iter().position(|a| *a == StopWorker);
                        let gone = actions.iter().position(|a| *a == JournalGone);
                        assert!(stop.is_some() && stop < gone, "{}", fact.name());
                    }
                }
            }
        }
    }

    #[test]
    fn a_listed_slice_not_held_is_adopted_only_when_it_is_the_pools_own() {
        use Owner::*;
        use Record::*;
        let delete = Found::Delete {
            why: "a slice this pool does not hold",
            retire: true,
        };
        let rows = [
            (Ours, Held, Found::Adopt),
            (Unlabelled, Held, Found::Adopt),
            (Another, Held, Found::NameTaken),
            (Ours, GivenUp, delete),
            (Unlabelled, GivenUp, delete),
            (Another, GivenUp, Found::Foreign),
            // Its own identity, asked for under a journal since lost.
            (Ours, Unknown, delete),
            (Unlabelled, Unknown, Found::Foreign),
            (Another, Unknown, Found::Foreign),
        ];
        for (owner, record, want) in rows {
            for state in [
                SliceState::Creating,
                SliceState::Ready,
                SliceState::Preempted,
            ] {
                assert_eq!(
                    found(state, owner, record),
                    want,
                    "{owner:?} {record:?} {state:?}"
                );
            }
            assert_eq!(
                found(SliceState::Deleting, owner, record),
                Found::Delete {
                    why: "a delete left unfinished",
                    retire: false
                }
            );
        }
    }

    #[test]
    fn a_life_notes_its_times_as_it_goes() {
        let t0 = At::now();
        let later = |s: u64| At {
            wall: t0.wall + chrono::Duration::seconds(s as i64),
            mono: t0.mono + Duration::from_secs(s),
        };
        let life = SliceLife::unheld("z-a", t0.wall);
        let (life, _) = life.advance(Fact::CreateAsked, t0);
        assert_eq!(
            (life.phase, life.phase.state()),
            (P::Asked, SliceState::Creating)
        );
        assert!(life.phase.in_flight());
        let (life, _) = life.advance(Fact::Listed(SliceState::Ready), later(10));
        assert_eq!(life.phase.state(), SliceState::Ready);
        assert_eq!(life.ready_since, Some(later(10).mono));
        let (life, _) = life.advance(Fact::CreateOk, later(20));
        assert_eq!(life.phase, P::Booting);
        let facts = life.facts(later(30).mono);
        assert_eq!(facts.ready_for, Some(Duration::from_secs(20)));
        assert!(!facts.ever_seen);
        let (life, _) = life.advance(Fact::Heard(Heard::Unleased), later(40));
        assert_eq!(
            (life.phase, life.idle_since),
            (P::Idle, Some(later(40).wall))
        );
        let (life, _) = life.advance(Fact::Heard(Heard::Unleased), later(50));
        assert_eq!(
            life.idle_since,
            Some(later(40).wall),
            "idle since its first idle look"
        );
        let (life, _) = life.advance(Fact::Heard(Heard::Leased), later(60));
        assert_eq!((life.phase, life.idle_since), (P::Serving, None));
        assert!(life.facts(later(60).mono).ever_seen);
        let (life, actions) = life.advance(Fact::Listed(SliceState::Preempted), later(70));
        assert_eq!(life.phase, P::Preempted);
        assert_eq!(actions, vec![ZoneDeath]);
        assert_eq!(
            life.facts(later(75).mono).preempted_for,
            Some(Duration::from_secs(5))
        );
        assert_eq!(life.facts(later(75).mono).ready_for, None);
        // A fact that changes nothing leaves the life as it was.
        let (same, actions) = life.advance(Fact::Listed(SliceState::Ready), later(80));
        assert_eq!((same, actions), (life, vec![]));
    }

    /// docs/architecture.md's table of a slice's life, `| fact | in | becomes | the pool
    /// does |`, row by row, is [`table`].
    #[test]
    fn the_architecture_documents_this_table() {
        let doc = include_str!("../../../docs/architecture.md");
        let start = doc
            .find("| fact | in | becomes | the pool does |")
            .expect("docs/architecture.md has the table of a slice's life");
        let documented: Vec<String> = doc[start..]
            .lines()
            .take_while(|line| line.starts_with('|'))
            .map(|line| line.trim().to_owned())
            .collect();
        let derived = table();
        assert_eq!(
            documented,
            derived,
            "docs/architecture.md's table of a slice's life differs from \
             worker/src/pool/slice_life.rs; the table the code follows:\n{}",
            derived.join("\n")
        );
    }
}
