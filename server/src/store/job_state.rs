//! Which changes of a job's state are legal: one pure table, state × change → state, that
//! docs/architecture.md's "Job states" table is tested against. The store's writes of
//! `jobs.state` name their change, bind the state `next` answers, and guard their row with
//! `sources`, so that a write the table refuses changes nothing. [`apply`] runs such a write
//! and says why it changed nothing: the files that write a state (`jobs.rs`, `leases.rs`)
//! share it here, not through each other.

use podq_api::JobState::{self, *};
use podq_api::{JobAction, JobId};
use sqlx::AssertSqlSafe;

use super::db::{self, Conn};
use super::StoreError;

/// What changes a job's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    /// A pod takes the job (`leases::claim`).
    Lease,
    /// Its attempt reported that it runs (`leases::mark_running`).
    Start,
    /// Its attempt ended, and `scheduler/lease/policy.rs` judged the job's next state.
    End(JobState),
    /// A person cancelled it. A job on a pod is cancelled at once and its lease stays live
    /// until its worker ends the attempt.
    Cancel,
    /// A person released a failed, cancelled, held or stopped job.
    Requeue,
    /// A person suspended a queued job.
    Hold,
    /// A person resumed a held job, or its rung promoted it.
    Resume,
    /// Its rung pruned a run paused there (`scheduler/lease/rung_judge.rs`).
    Prune,
}

impl Change {
    /// Every change, an attempt's end once per state it can end in.
    pub const ALL: [Change; 13] = [
        Change::Lease,
        Change::Start,
        Change::End(Queued),
        Change::End(Succeeded),
        Change::End(Failed),
        Change::End(Cancelled),
        Change::End(Held),
        Change::End(Stopped),
        Change::Cancel,
        Change::Requeue,
        Change::Hold,
        Change::Resume,
        Change::Prune,
    ];

    /// As docs/architecture.md names it.
    pub fn name(self) -> String {
        match self {
            Change::Lease => "lease".into(),
            Change::Start => "start".into(),
            Change::End(to) => format!("end → {to}"),
            Change::Cancel => "cancel".into(),
            Change::Requeue => "requeue".into(),
            Change::Hold => "suspend while queued".into(),
            Change::Resume => "resume".into(),
            Change::Prune => "prune at a rung".into(),
        }
    }
}

/// A change the table does not allow from the job's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Refused {
    pub from: JobState,
    pub change: Change,
}

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "a {} job cannot {}", self.from, self.change.name())
    }
}

/// The state a job in `from` is in after `change`, or why it cannot change so.
pub fn next(from: JobState, change: Change) -> Result<JobState, Refused> {
    let refused = Refused { from, change };
    match (change, from) {
        (Change::Lease, Queued) => Ok(Leased),
        (Change::Start, Leased) => Ok(Running),
        // An attempt ends in one of the states its judgement gives; never on a pod again.
        (Change::End(Leased | Running), _) => Err(refused),
        (Change::End(to), Leased | Running) => Ok(to),
        // Cancelled while on its pod: the attempt's end keeps it cancelled, unless the run
        // finished first (`policy::decide`).
        (Change::End(to @ (Cancelled | Succeeded)), Cancelled) => Ok(to),
        (Change::Cancel, Queued | Leased | Running | Held) => Ok(Cancelled),
        (Change::Requeue, Failed | Cancelled | Held | Stopped) => Ok(Queued),
        (Change::Hold, Queued) => Ok(Held),
        (Change::Resume, Held) => Ok(Queued),
        (Change::Prune, Held) => Ok(Stopped),
        _ => Err(refused),
    }
}

/// The states `change` may start from: a write's `WHERE state IN (...)`.
pub fn sources(change: Change) -> Vec<JobState> {
    JobState::ALL
        .into_iter()
        .filter(|from| next(*from, change).is_ok())
        .collect()
}

/// `state IN ('a','b')` for `change`'s sources, for a statement's guard. The states are
/// the enum's own names, never input.
pub fn guard(change: Change) -> String {
    let states: Vec<String> = sources(change)
        .into_iter()
        .map(|s| format!("'{}'", s.as_str()))
        .collect();
    format!("state IN ({})", states.join(","))
}

/// The SQL of a set of states, for `column` (`state`, `j.state`): `column = 'a'` for one
/// state (which a partial index `WHERE state = 'a'` matches), `column IN ('a','b')` for more.
/// The states are the enum's own names, never input: every job-state literal of the store's
/// SQL is written here (`the_stores_sql_names_no_state_but_through_here` keeps it so).
pub fn state_in(column: &str, states: &[JobState]) -> String {
    match states {
        [one] => format!("{column} = '{}'", one.as_str()),
        _ => {
            let states: Vec<String> = states.iter().map(|s| format!("'{}'", s.as_str())).collect();
            format!("{column} IN ({})", states.join(","))
        }
    }
}

/// The states a job waits for a pod in: those a pod may lease it from (`queued`).
pub fn waiting() -> Vec<JobState> {
    sources(Change::Lease)
}

/// The states of a job on a pod: leased, and what its start makes of it (`leased`, `running`).
pub fn on_pod() -> Vec<JobState> {
    let mut states = sources(Change::Start);
    states.extend(
        states
            .clone()
            .into_iter()
            .filter_map(|s| next(s, Change::Start).ok()),
    );
    states
}

/// The states of a job not finished: those a person may still cancel it from.
pub fn unfinished() -> Vec<JobState> {
    sources(Change::Cancel)
}

/// `alias`'s job (`q.`, or `""` for the table's own row) is in the queue: waiting, and its
/// own run (a linked job waits with the run it shares). What `job_accelerators.queued` says
/// of each row (migration 0027's trigger, written at insert by `job_accelerators::insert`).
pub fn in_queue(alias: &str) -> String {
    format!(
        "{} AND {alias}same_as IS NULL",
        state_in(&format!("{alias}state"), &waiting())
    )
}

/// `alias`'s job is leasable at `now` (SQL, a placeholder): in the queue and not backing off.
pub fn leasable(alias: &str, now: &str) -> String {
    format!(
        "{} AND ({alias}not_before IS NULL OR {alias}not_before <= {now})",
        in_queue(alias)
    )
}

/// The queue's order, for an `ORDER BY` over `alias`'s jobs: class, an evicted job at the
/// head of its class, priority, submission. The planner sorts its waiting runs by the same
/// key (`scheduler/plan/catalog_plan.rs`, `queue_order`; a test there ties the two).
pub fn queue_order(alias: &str) -> String {
    format!("{alias}class_rank, {alias}queue_head DESC, {alias}priority DESC, {alias}seq")
}

/// The order of one slice type's queue over `job_accelerators` rows (`alias`): the queue's
/// order, a job's first choice before its later ones among equals (migration 0027's index
/// `job_accelerators_queue`, which this walks unsorted).
pub fn type_queue_order(alias: &str) -> String {
    format!(
        "{alias}class_rank, {alias}queue_head DESC, {alias}priority DESC, {alias}later_choice, \
         {alias}seq"
    )
}

/// What a job's state allows a person to do to it, whoever they are (the team's rules are
/// `scheduler/reads/job_reads.rs`'s): each action the change of this table it makes, or for a
/// job on a pod, the end it asks for. `linked`: the job shares another's run, which is
/// suspended, resumed, reprioritised and judged by its rules for it; `stopping`: its pod
/// still holds its lease (cancelled or suspended on its pod, not yet let go). What
/// `GET /jobs/{id}` lists as `actions`, and what each endpoint then accepts.
pub fn actions(state: JobState, linked: bool, stopping: bool) -> Vec<JobAction> {
    let may = |change| next(state, change).is_ok();
    let requeue = may(Change::Requeue) && !stopping;
    JobAction::ALL
        .into_iter()
        .filter(|action| match action {
            JobAction::Cancel => may(Change::Cancel),
            JobAction::Requeue => requeue,
            JobAction::RequeueIgnoringStopRules => requeue && !linked,
            // Held at once while queued; on a pod, stopped and held at the attempt's end.
            JobAction::Suspend => !linked && (may(Change::Hold) || may(Change::End(Held))),
            JobAction::Resume => !linked && !stopping && may(Change::Resume),
            // A priority or class orders a queue and the evictions of a job not finished.
            JobAction::Reprioritise => !linked && unfinished().contains(&state),
        })
        .collect()
}

/// The door every write of `jobs.state` goes through: the state `change` sets, bound as
/// the statement's `state = ?`, and the guard its `WHERE` adds, so that a row in a state the
/// table refuses is not changed (the write answers no row).
pub struct Write {
    pub to: &'static str,
    pub guard: String,
}

/// The write for `change`. Every change has one target state, whatever its source.
pub fn write(change: Change) -> Write {
    let to = sources(change)
        .first()
        .and_then(|from| next(*from, change).ok())
        .expect("every change has a source state");
    Write {
        to: to.as_str(),
        guard: guard(change),
    }
}

/// The new state of [`apply`]'s statement: the one `write(change)` answers.
pub(super) const TO: &str = "?";

/// The one guarded write of job `id`'s state for `change`: `UPDATE jobs SET state = {state},
/// {sets} WHERE id = ? AND` the change's guard. `state` is the SQL of the new state with one
/// `?`, where the state `write(change)` answers is bound ([`TO`] but for a requeued linked
/// job, which takes its run's); `bind` binds the `?`s of `sets`, in order. A row the table
/// refuses `change` from is not changed, and the answer says why
/// ([`StoreError::StateRefused`]).
pub(super) async fn apply(
    conn: &mut Conn,
    id: JobId,
    change: Change,
    state: &str,
    sets: &str,
    bind: impl FnOnce(db::Query) -> db::Query,
) -> Result<(), StoreError> {
    let write = write(change);
    let update = db::query(AssertSqlSafe(format!(
        "UPDATE jobs SET state = {state}, {sets} WHERE id = ? AND {}",
        write.guard
    )))
    .bind(write.to);
    let changed = bind(update).bind(id).execute(&mut *conn).await?;
    if changed == 0 {
        return Err(refused(conn, id, change).await);
    }
    Ok(())
}

/// Why a write of job `id`'s state through `write(change)` changed no row: the table refuses
/// `change` from the job's state (or there is no such job).
pub(super) async fn refused(conn: &mut Conn, id: JobId, change: Change) -> StoreError {
    let state: Result<Option<String>, _> = db::query_scalar("SELECT state FROM jobs WHERE id = ?")
        .bind(id)
        .fetch_optional(conn)
        .await;
    match state {
        Ok(Some(state)) => match state.parse() {
            Ok(from) => StoreError::StateRefused {
                job: id,
                refused: Refused { from, change },
            },
            Err(e) => StoreError::Corrupt(e),
        },
        Ok(None) => StoreError::Corrupt(format!("job {id} is gone")),
        Err(e) => e.into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_allows_what_the_scheduler_does_and_nothing_else() {
        // (from, change, to or None for refused), every pair of note.
        let rows: &[(JobState, Change, Option<JobState>)] = &[
            (Queued, Change::Lease, Some(Leased)),
            (Held, Change::Lease, None),
            (Leased, Change::Lease, None),
            (Leased, Change::Start, Some(Running)),
            (Running, Change::Start, None),
            (Queued, Change::Start, None),
            (Running, Change::End(Succeeded), Some(Succeeded)),
            (Leased, Change::End(Queued), Some(Queued)),
            (Running, Change::End(Stopped), Some(Stopped)),
            (Running, Change::End(Running), None),
            (Queued, Change::End(Failed), None),
            (Cancelled, Change::End(Cancelled), Some(Cancelled)),
            (Cancelled, Change::End(Succeeded), Some(Succeeded)),
            (Cancelled, Change::End(Queued), None),
            (Running, Change::Cancel, Some(Cancelled)),
            (Held, Change::Cancel, Some(Cancelled)),
            (Succeeded, Change::Cancel, None),
            (Stopped, Change::Cancel, None),
            (Failed, Change::Requeue, Some(Queued)),
            (Stopped, Change::Requeue, Some(Queued)),
            (Succeeded, Change::Requeue, None),
            (Running, Change::Requeue, None),
            (Queued, Change::Hold, Some(Held)),
            (Running, Change::Hold, None),
            (Held, Change::Resume, Some(Queued)),
            (Queued, Change::Resume, None),
        ];
        for (from, change, to) in rows {
            assert_eq!(next(*from, *change).ok(), *to, "{from} × {}", change.name());
        }
        // A terminal state changes only by a requeue (or a cancelled run finishing).
        for from in JobState::ALL.into_iter().filter(|s| s.is_terminal()) {
            for change in Change::ALL {
                if let Ok(to) = next(from, change) {
                    assert!(
                        change == Change::Requeue
                            || (from == Cancelled && matches!(change, Change::End(_))),
                        "{from} × {} → {to}",
                        change.name()
                    );
                }
            }
        }
        assert_eq!(sources(Change::Hold), [Queued]);
        for change in Change::ALL {
            let to = write(change).to;
            for from in sources(change) {
                assert_eq!(
                    next(from, change).map(JobState::as_str),
                    Ok(to),
                    "{}",
                    change.name()
                );
            }
        }
        assert_eq!(guard(Change::Start), "state IN ('leased')");
        assert_eq!(
            guard(Change::Cancel),
            "state IN ('queued','leased','running','held')"
        );
    }

    #[test]
    fn the_fragments_come_from_the_table() {
        assert_eq!(waiting(), [Queued]);
        assert_eq!(on_pod(), [Leased, Running]);
        assert_eq!(unfinished(), [Queued, Leased, Running, Held]);
        assert_eq!(state_in("j.state", &waiting()), "j.state = 'queued'");
        assert_eq!(
            state_in("state", &on_pod()),
            "state IN ('leased','running')"
        );
        assert_eq!(in_queue("q."), "q.state = 'queued' AND q.same_as IS NULL");
        assert_eq!(
            leasable("", "?1"),
            "state = 'queued' AND same_as IS NULL AND (not_before IS NULL OR not_before <= ?1)"
        );
        assert_eq!(
            queue_order("j."),
            "j.class_rank, j.queue_head DESC, j.priority DESC, j.seq"
        );
    }

    /// What each state allows, as `control.rs` and the endpoints have it.
    #[test]
    fn each_state_allows_its_actions() {
        use JobAction::*;
        let rows: &[(JobState, bool, bool, &[JobAction])] = &[
            (Queued, false, false, &[Cancel, Suspend, Reprioritise]),
            (Leased, false, false, &[Cancel, Suspend, Reprioritise]),
            (Running, false, false, &[Cancel, Suspend, Reprioritise]),
            (Running, true, false, &[Cancel]),
            (
                Held,
                false,
                false,
                &[
                    Cancel,
                    Requeue,
                    RequeueIgnoringStopRules,
                    Resume,
                    Reprioritise,
                ],
            ),
            (Held, false, true, &[Cancel, Reprioritise]),
            (Held, true, false, &[Cancel, Requeue]),
            (Succeeded, false, false, &[]),
            (Failed, false, false, &[Requeue, RequeueIgnoringStopRules]),
            (Cancelled, false, true, &[]),
            (Cancelled, true, false, &[Requeue]),
            (Stopped, false, false, &[Requeue, RequeueIgnoringStopRules]),
        ];
        for (state, linked, stopping, want) in rows {
            assert_eq!(
                actions(*state, *linked, *stopping),
                *want,
                "{state}, linked {linked}, stopping {stopping}"
            );
        }
    }

    /// The string literals of a Rust source, its comments and its test modules left out: a
    /// small lexer, enough for the store's files (plain, raw and byte strings; char literals
    /// and lifetimes told apart).
    fn string_literals(source: &str) -> Vec<String> {
        // The tests at the end of a file (`#[cfg(test)]` then `mod`) write rows of their own.
        let mut end = source.len();
        let mut at = 0;
        while let Some(found) = source[at..].find("#[cfg(test)]") {
            let start = at + found;
            let after = source[start + "#[cfg(test)]".len()..].trim_start();
            if after.starts_with("mod ") || after.starts_with("pub(crate) mod ") {
                end = start;
                break;
            }
            at = start + 1;
        }
        let chars: Vec<char> = source[..end].chars().collect();
        let mut literals = Vec::new();
        let mut i = 0;
        while i < chars.len() {
            match chars[i] {
                '/' if chars.get(i + 1) == Some(&'/') => {
                    while i < chars.len() && chars[i] != '\n' {
                        i += 1;
                    }
                }
                '/' if chars.get(i + 1) == Some(&'*') => {
                    i += 2;
                    while i + 1 < chars.len() && !(chars[i] == '*' && chars[i + 1] == '/') {
                        i += 1;
                    }
                    i += 2;
                }
                'r' if matches!(chars.get(i + 1), Some('"' | '#'))
                    && (i == 0 || !(chars[i - 1].is_alphanumeric() || chars[i - 1] == '_')) =>
                {
                    let mut hashes = 0;
                    let mut j = i + 1;
                    while chars.get(j) == Some(&'#') {
                        hashes += 1;
                        j += 1;
                    }
                    if chars.get(j) != Some(&'"') {
                        i += 1;
                        continue;
                    }
                    let close: String = std::iter::once('"')
                        .chain(std::iter::repeat_n('#', hashes))
                        .collect();
                    let rest: String = chars[j + 1..].iter().collect();
                    let len = rest.find(&close).unwrap_or(rest.len());
                    literals.push(rest[..len].to_owned());
                    i = j + 1 + rest[..len].chars().count() + close.chars().count();
                }
                '"' => {
                    let mut text = String::new();
                    i += 1;
                    while i < chars.len() && chars[i] != '"' {
                        if chars[i] == '\\' {
                            i += 1;
                        }
                        if let Some(c) = chars.get(i) {
                            text.push(*c);
                        }
                        i += 1;
                    }
                    literals.push(text);
                    i += 1;
                }
                '\'' => {
                    // A char literal ('x', '\n', '"'), else a lifetime.
                    if chars.get(i + 1) == Some(&'\\') {
                        i += 2;
                        while i < chars.len() && chars[i] != '\'' {
                            i += 1;
                        }
                        i += 1;
                    } else if chars.get(i + 2) == Some(&'\'') {
                        i += 3;
                    } else {
                        i += 1;
                    }
                }
                _ => i += 1,
            }
        }
        literals
    }

    /// The store's SQL names a job state only through the fragments above: no `'queued'` (or
    /// any other state) in a string of `server/src/store/` but this file's and the migrations'.
    #[test]
    fn the_stores_sql_names_no_state_but_through_here() {
        let store = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/store");
        let mut files = Vec::new();
        let mut dirs = vec![store];
        while let Some(dir) = dirs.pop() {
            for entry in std::fs::read_dir(&dir).unwrap() {
                let path = entry.unwrap().path();
                if path.is_dir() {
                    dirs.push(path);
                } else if path.extension().is_some_and(|e| e == "rs")
                    && path.file_name().is_some_and(|n| n != "job_state.rs")
                {
                    files.push(path);
                }
            }
        }
        assert!(files.len() > 20, "the store's files: {files:?}");
        let quoted: Vec<String> = JobState::ALL
            .into_iter()
            .map(|s| format!("'{}'", s.as_str()))
            .collect();
        let mut found = Vec::new();
        for file in &files {
            let source = std::fs::read_to_string(file).unwrap();
            for literal in string_literals(&source) {
                for state in quoted.iter().filter(|q| literal.contains(q.as_str())) {
                    found.push(format!("{}: {state} in \"{literal}\"", file.display()));
                }
            }
        }
        assert!(
            found.is_empty(),
            "job states written into the store's SQL: write them through job_state.rs's \
             fragments (state_in, in_queue, leasable, ...):\n{}",
            found.join("\n")
        );
        // The check sees what it is meant to see.
        let sample = "// 'queued' in a comment\nconst A: &str = \"x = 'held'\";\n\
                      let c = '\"'; let d = r#\"'running'\"#;\n#[cfg(test)]\nmod t { \"'failed'\" }";
        assert_eq!(string_literals(sample), ["x = 'held'", "'running'"]);
    }

    /// docs/architecture.md's table of job-state changes, `| change | from | to |`, row by
    /// row, is this module's table.
    #[test]
    fn the_architecture_documents_this_table() {
        let doc = include_str!("../../../docs/architecture.md");
        let start = doc
            .find("| change | from | to |")
            .expect("docs/architecture.md has the job-state table");
        let documented: Vec<String> = doc[start..]
            .lines()
            .skip(2)
            .take_while(|line| line.starts_with('|'))
            .map(|line| line.trim().to_owned())
            .collect();
        let derived: Vec<String> = Change::ALL
            .into_iter()
            .map(|change| {
                let from: Vec<String> = sources(change).iter().map(|s| format!("`{s}`")).collect();
                let to: Vec<String> = sources(change)
                    .iter()
                    .filter_map(|s| next(*s, change).ok())
                    .map(|s| format!("`{s}`"))
                    .collect::<std::collections::BTreeSet<_>>()
                    .into_iter()
                    .collect();
                format!(
                    "| {} | {} | {} |",
                    change.name(),
                    from.join(", "),
                    to.join(", ")
                )
            })
            .collect();
        assert_eq!(
            documented,
            derived,
            "docs/architecture.md's job-state table differs from store/job_state.rs; the \
             table the code allows:\n{}",
            derived.join("\n")
        );
    }
}
