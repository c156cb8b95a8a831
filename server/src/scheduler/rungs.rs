//! Rungs across a group (issue 66): asynchronous successive halving with pauses ("promotion
//! ASHA"), as pure functions. The catalog gives a group's rungs (`catalog/rungs.rs`); the
//! caller reads each run's value at each rung it reached and the decisions already made, and
//! stores what [`decide`] answers. Nothing here reads or writes anything.
//!
//! - A run is judged at a rung on the first value of the metric at or after the rung's step
//!   ([`rung_step`], [`rung_value`]).
//! - It is promoted at once if it is among the best ⌊n × keep⌋ of the n runs of its group
//!   judged at that rung so far; otherwise it pauses.
//! - A paused run is promoted later if siblings judged after it rank below it.
//! - Once every run of the group has been judged at the rung or has ended, the best
//!   ⌈n × keep⌉ go on and the others are pruned.
//! - The baseline row is never pruned, nor paused: it goes on whatever its rank. Linked runs
//!   (one training shared by several jobs) count once. A run whose metric never reports at a
//!   rung is not pruned there ([`Verdict::NoValue`] says why). A cancelled run leaves the
//!   group's count.
//! - A promotion or a prune is final for that run at that rung: [`decide`] takes the earlier
//!   decisions and answers only new ones. A pause is not final: it ends in a promotion or a
//!   prune.
//!
//! Ranks are competition ranks ("1 + how many are strictly better"), so runs tied at the edge
//! of the share all go on. A non-finite value (NaN) ranks below every number.

use std::collections::BTreeMap;

use crate::catalog::rungs::Rungs;

pub use crate::catalog::rungs::rung_step;

/// Where a run stands for the rungs, as its job's state says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunState {
    /// It may still climb: queued, leased, running, or held (paused at a rung, or suspended
    /// by a person). At which rung it waits is in the earlier decisions.
    Live,
    /// It will train no further (succeeded, failed, stopped or pruned): it keeps its place in
    /// the counts of the rungs it was judged at and holds no rung open.
    Ended,
    /// A person cancelled it: it leaves its group's count at every rung.
    Cancelled,
}

/// One run (job) of a group, as the rungs see it.
#[derive(Debug, Clone, PartialEq)]
pub struct RungRun<Id> {
    pub id: Id,
    /// Whether it is its group's `baseline_row`.
    pub baseline: bool,
    /// The run whose training it is: the job it is linked to (`same_as`), else its own id.
    /// Runs with the same link count once, and decisions name the link.
    pub link: Id,
    pub state: RunState,
    /// Its value at each rung it has been judged at, first rung first: `values.len()` rungs
    /// reached. None where the metric never reported at or after the rung's step (the caller
    /// knows it never will: the run passed its next rung, or its end, without one).
    pub values: Vec<Option<f64>>,
}

/// How a run stood among the runs judged at a rung: `rank` of `of` (1 is the best), by
/// `value`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Standing {
    pub rank: usize,
    pub of: usize,
    pub value: f64,
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Verdict {
    /// It goes on past the rung (resumes, if it was paused). Final.
    Promote(Standing),
    /// It waits at the rung, holding no pod: promoted or pruned later.
    Pause(Standing),
    /// It ends `stopped` at the rung. Final.
    Prune(Standing),
    /// Its metric never reported at the rung: it goes on, not pruned, and an event says why.
    NoValue,
}

/// A decision about one run at one rung.
#[derive(Debug, Clone, PartialEq)]
pub struct Decision<Id> {
    /// The run's link (its own id when it is linked to none).
    pub run: Id,
    /// The rung, 0 for the first (people read it as "rung 1").
    pub rung: usize,
    pub verdict: Verdict,
}

impl<Id> Decision<Id> {
    /// What the job, its event and its panel say: "pruned at rung 1: rank 3 of 4 by
    /// eval/exact_accuracy (0.41)".
    pub fn reason(&self, metric: &str) -> String {
        let k = self.rung + 1;
        let by = |s: &Standing| {
            format!(
                "rank {} of {} by {metric} ({})",
                s.rank,
                s.of,
                show(s.value)
            )
        };
        match &self.verdict {
            Verdict::Promote(s) => format!("promoted at rung {k}: {}", by(s)),
            Verdict::Pause(s) => format!(
                "paused at rung {k}: rank {} of the {} judged so far by {metric} ({}); waits \
                 for its siblings",
                s.rank,
                s.of,
                show(s.value)
            ),
            Verdict::Prune(s) => format!("pruned at rung {k}: {}", by(s)),
            Verdict::NoValue => format!(
                "no value of {metric} at or after rung {k}'s step: not judged there, not pruned"
            ),
        }
    }

    /// Whether no later call changes it.
    pub fn is_final(&self) -> bool {
        !matches!(self.verdict, Verdict::Pause(_))
    }
}

fn show(value: f64) -> String {
    podq_api::nonfinite::marker(value)
        .map(str::to_owned)
        .unwrap_or_else(|| format!("{value}"))
}

/// The first value of a metric at or after `rung_step`, with its step: the value a run is
/// judged on there. `series` is (step, value) in any order.
pub fn rung_value(series: &[(i64, f64)], rung_step: i64) -> Option<(i64, f64)> {
    series
        .iter()
        .filter(|(step, _)| *step >= rung_step)
        .min_by_key(|(step, _)| *step)
        .copied()
}

/// A margin for shares such as 1/3 that floating point does not hold exactly.
const EPSILON: f64 = 1e-9;

/// ⌊n × keep⌋: how many of the n judged so far are promoted at once.
fn promoted_at_once(n: usize, keep: f64) -> usize {
    ((n as f64 * keep + EPSILON).floor() as usize).min(n)
}

/// ⌈n × keep⌉, at least one of a non-empty rung: how many go on once a rung is closed.
pub fn kept(n: usize, keep: f64) -> usize {
    if n == 0 {
        return 0;
    }
    ((n as f64 * keep - EPSILON).ceil() as usize).clamp(1, n)
}

/// Whether `a` is strictly better than `b`; a NaN is worse than any number.
fn better(a: f64, b: f64, lower_is_better: bool) -> bool {
    match (a.is_nan(), b.is_nan()) {
        (true, _) => false,
        (false, true) => true,
        _ if lower_is_better => a < b,
        _ => a > b,
    }
}

/// A link's runs, merged: one training.
struct Unit<Id> {
    link: Id,
    baseline: bool,
    live: bool,
    cancelled: bool,
    values: Vec<Option<f64>>,
}

fn units<Id: Clone + Ord>(runs: &[RungRun<Id>]) -> Vec<Unit<Id>> {
    let mut units: Vec<Unit<Id>> = Vec::new();
    for run in runs {
        let unit = match units.iter_mut().position(|u| u.link == run.link) {
            Some(i) => &mut units[i],
            None => {
                units.push(Unit {
                    link: run.link.clone(),
                    baseline: false,
                    live: false,
                    cancelled: true,
                    values: Vec::new(),
                });
                units.last_mut().expect("just pushed")
            }
        };
        unit.baseline |= run.baseline;
        unit.live |= run.state == RunState::Live;
        unit.cancelled &= run.state == RunState::Cancelled;
        for (k, value) in run.values.iter().enumerate() {
            match unit.values.get_mut(k) {
                Some(slot @ None) => *slot = *value,
                Some(Some(_)) => {}
                None => unit.values.push(*value),
            }
        }
    }
    units
}

/// The new decisions for a group's `runs` at its rungs, given the `earlier` ones (in the
/// order they were made), with `keep` the share kept past each rung: the rungs' own, or the
/// plan's choice for `keep: auto` (1 prunes nothing). Decisions come rung by rung, each
/// rung's in the order of `runs`; none repeats or reverses an earlier one.
pub fn decide<Id: Clone + Ord>(
    rungs: &Rungs,
    keep: f64,
    runs: &[RungRun<Id>],
    earlier: &[Decision<Id>],
) -> Vec<Decision<Id>> {
    let lower = rungs.lower_is_better;
    let units = units(runs);
    // Each run's standing decision at each rung: a final one, else a pause.
    let mut book: BTreeMap<(Id, usize), Verdict> = BTreeMap::new();
    let record = |book: &mut BTreeMap<(Id, usize), Verdict>, d: &Decision<Id>| {
        let slot = book.entry((d.run.clone(), d.rung)).or_insert(d.verdict);
        if matches!(slot, Verdict::Pause(_)) {
            *slot = d.verdict;
        }
    };
    for d in earlier {
        record(&mut book, d);
    }
    let pruned_before = |book: &BTreeMap<(Id, usize), Verdict>, link: &Id, rung: usize| {
        (0..rung).any(|j| matches!(book.get(&(link.clone(), j)), Some(Verdict::Prune(_))))
    };
    let mut new = Vec::new();
    for k in 0..rungs.at.len() {
        // The runs the rung counts: not cancelled, not pruned at an earlier rung.
        let counted: Vec<&Unit<Id>> = units
            .iter()
            .filter(|u| !u.cancelled && !pruned_before(&book, &u.link, k))
            .collect();
        let judged: Vec<(&Unit<Id>, f64)> = counted
            .iter()
            .filter_map(|u| u.values.get(k).copied().flatten().map(|v| (*u, v)))
            .collect();
        let n = judged.len();
        // Closed once every run counted has been judged here (with a value or without) or
        // has ended.
        let closed = counted.iter().all(|u| u.values.len() > k || !u.live);
        let mut decided = Vec::new();
        for u in &counted {
            if matches!(u.values.get(k), Some(None)) && !book.contains_key(&(u.link.clone(), k)) {
                decided.push(Decision {
                    run: u.link.clone(),
                    rung: k,
                    verdict: Verdict::NoValue,
                });
            }
        }
        for &(u, value) in &judged {
            let standing = book.get(&(u.link.clone(), k)).copied();
            if !matches!(standing, None | Some(Verdict::Pause(_))) || !u.live {
                continue;
            }
            let rank = 1 + judged
                .iter()
                .filter(|(_, other)| better(*other, value, lower))
                .count();
            let at = Standing { rank, of: n, value };
            // Already past the rung (a person resumed it, or the rungs changed): it went on.
            let went_on = u.values.len() > k + 1;
            let verdict = if u.baseline || went_on {
                Verdict::Promote(at)
            } else if closed {
                if rank <= kept(n, keep) {
                    Verdict::Promote(at)
                } else {
                    Verdict::Prune(at)
                }
            } else if rank <= promoted_at_once(n, keep) {
                Verdict::Promote(at)
            } else if standing.is_none() {
                Verdict::Pause(at)
            } else {
                continue;
            };
            decided.push(Decision {
                run: u.link.clone(),
                rung: k,
                verdict,
            });
        }
        for d in decided {
            record(&mut book, &d);
            new.push(d);
        }
    }
    new
}

/// How many runs train each stretch of a run under rungs at `rungs` places keeping `keep`,
/// for a group of `n`: n to the first rung, ⌈n × keep⌉ from it to the next, and so on; one
/// number per stretch (`rungs + 1`). This counts a rung as decided when it closes; the runs
/// asynchronous promotion sends on early, and a baseline below the share, may add some.
pub fn runs_per_stretch(n: usize, rungs: usize, keep: f64) -> Vec<usize> {
    let mut counts = vec![n];
    for _ in 0..rungs {
        let last = *counts.last().expect("not empty");
        counts.push(kept(last, keep));
    }
    counts
}

/// The pod-hours a group's runs are expected to take under rungs at `at` keeping `keep`:
/// each stretch of the run (0 to the first rung, …, the last rung to the end) costs its share
/// of the runs' mean `hours`, times the runs expected to train it ([`runs_per_stretch`]).
/// Which runs go on is not known ahead, hence the mean. `keep` 1 gives the sum of `hours`.
pub fn expected_hours(hours: &[f64], at: &[f64], keep: f64) -> f64 {
    if hours.is_empty() {
        return 0.0;
    }
    let mean = hours.iter().sum::<f64>() / hours.len() as f64;
    let counts = runs_per_stretch(hours.len(), at.len(), keep);
    let mut from = 0.0;
    let mut total = 0.0;
    for (i, count) in counts.iter().enumerate() {
        let to = at.get(i).copied().unwrap_or(1.0);
        total += (to - from) * mean * *count as f64;
        from = to;
    }
    total
}

/// For `keep: auto`: the largest share kept for which `fits` holds (the plan asks whether the
/// suite still finishes before the deadline), among the shares that change what a group of
/// `n` runs does: 1 (nothing pruned), then every a/b with 1 ≤ a < b ≤ n, from the largest
/// down, so `fits` should hold for every share below one it holds for. None when not even
/// 1/n fits (every rung keeps one run).
pub fn largest_keep(n: usize, mut fits: impl FnMut(f64) -> bool) -> Option<f64> {
    let mut shares: Vec<(usize, usize)> = vec![(1, 1)];
    for b in 2..=n.max(1) {
        shares.extend((1..b).map(|a| (a, b)));
    }
    // Largest first; a/b and c/d compared as a·d and c·b, without rounding.
    shares.sort_by(|(a, b), (c, d)| (c * b).cmp(&(a * d)));
    shares.dedup_by(|(a, b), (c, d)| *a * *d == *c * *b);
    shares
        .into_iter()
        .map(|(a, b)| a as f64 / b as f64)
        .find(|&keep| fits(keep))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::rungs::Keep;

    type Run = RungRun<&'static str>;
    type D = Decision<&'static str>;

    fn rungs(metric: &str, at: &[f64]) -> Rungs {
        Rungs {
            metric: metric.into(),
            lower_is_better: podq_api::lower_is_better(metric),
            at: at.to_vec(),
            keep: Keep::Share(0.5),
        }
    }

    fn accuracy() -> Rungs {
        rungs("eval/exact_accuracy", &[0.25])
    }

    /// A live run, judged at each rung with a value of `values` (NaN for "none reported").
    fn run(id: &'static str, values: &[f64]) -> Run {
        RungRun {
            id,
            baseline: false,
            link: id,
            state: RunState::Live,
            values: values.iter().map(|v| (!v.is_nan()).then_some(*v)).collect(),
        }
    }

    fn baseline(run: Run) -> Run {
        RungRun {
            baseline: true,
            ..run
        }
    }

    fn with_state(run: Run, state: RunState) -> Run {
        RungRun { state, ..run }
    }

    /// Decisions as `(run, rung, "promote 1/4")`, for tables.
    fn brief(decisions: &[D]) -> Vec<(&'static str, usize, String)> {
        decisions
            .iter()
            .map(|d| {
                let what = match d.verdict {
                    Verdict::Promote(s) => format!("promote {}/{}", s.rank, s.of),
                    Verdict::Pause(s) => format!("pause {}/{}", s.rank, s.of),
                    Verdict::Prune(s) => format!("prune {}/{}", s.rank, s.of),
                    Verdict::NoValue => "no value".into(),
                };
                (d.run, d.rung, what)
            })
            .collect()
    }

    /// A decision as a table writes it: run, rung, what.
    type Row = (&'static str, usize, &'static str);

    fn table(rows: &[Row]) -> Vec<(&'static str, usize, String)> {
        rows.iter()
            .map(|(run, rung, what)| (*run, *rung, what.to_string()))
            .collect()
    }

    #[test]
    fn steps_and_values_at_a_rung() {
        assert_eq!(rung_step(0.25, 8138), 2035);
        assert_eq!(rung_step(0.3, 100), 30);
        let series = [(40, 0.7), (10, 0.2), (30, 0.5), (20, 0.4)];
        assert_eq!(rung_value(&series, 25), Some((30, 0.5)));
        assert_eq!(
            rung_value(&series, 30),
            Some((30, 0.5)),
            "at the step counts"
        );
        assert_eq!(rung_value(&series, 41), None);
    }

    /// Every case at one rung (25%) with keep 1/2, every run of the group judged: the best
    /// ⌈n/2⌉ go on, the others are pruned.
    #[test]
    fn a_closed_rung_keeps_the_best_by_value() {
        let nan = f64::NAN;
        let cases: Vec<(&str, Rungs, Vec<Run>, Vec<Row>)> = vec![
            (
                "promotions and prunes follow the values",
                accuracy(),
                vec![
                    run("a", &[0.9]),
                    run("b", &[0.5]),
                    run("c", &[0.7]),
                    run("d", &[0.3]),
                ],
                vec![
                    ("a", 0, "promote 1/4"),
                    ("b", 0, "prune 3/4"),
                    ("c", 0, "promote 2/4"),
                    ("d", 0, "prune 4/4"),
                ],
            ),
            (
                "an odd group keeps ⌈n/2⌉",
                accuracy(),
                vec![run("a", &[0.9]), run("b", &[0.5]), run("c", &[0.7])],
                vec![
                    ("a", 0, "promote 1/3"),
                    ("b", 0, "prune 3/3"),
                    ("c", 0, "promote 2/3"),
                ],
            ),
            (
                "a loss is better lower",
                rungs("eval/loss", &[0.25]),
                vec![
                    run("a", &[0.3]),
                    run("b", &[1.2]),
                    run("c", &[0.5]),
                    run("d", &[2.0]),
                ],
                vec![
                    ("a", 0, "promote 1/4"),
                    ("b", 0, "prune 3/4"),
                    ("c", 0, "promote 2/4"),
                    ("d", 0, "prune 4/4"),
                ],
            ),
            (
                "the baseline row is never pruned",
                accuracy(),
                vec![
                    run("a", &[0.9]),
                    baseline(run("b", &[0.1])),
                    run("c", &[0.7]),
                    run("d", &[0.3]),
                ],
                vec![
                    ("a", 0, "promote 1/4"),
                    ("b", 0, "promote 4/4"),
                    ("c", 0, "promote 2/4"),
                    ("d", 0, "prune 3/4"),
                ],
            ),
            (
                "linked runs count once, and a linked baseline row is the run's",
                accuracy(),
                vec![
                    run("a", &[0.9]),
                    baseline(RungRun {
                        link: "c",
                        ..run("c-linked", &[])
                    }),
                    run("b", &[0.5]),
                    run("c", &[0.3]),
                ],
                vec![
                    ("a", 0, "promote 1/3"),
                    ("c", 0, "promote 3/3"),
                    ("b", 0, "promote 2/3"),
                ],
            ),
            (
                "linked runs count once",
                accuracy(),
                vec![
                    run("a", &[0.9]),
                    RungRun {
                        link: "a",
                        ..run("a-linked", &[0.9])
                    },
                    run("b", &[0.5]),
                    run("c", &[0.3]),
                ],
                vec![
                    ("a", 0, "promote 1/3"),
                    ("b", 0, "promote 2/3"),
                    ("c", 0, "prune 3/3"),
                ],
            ),
            (
                "a run whose metric never reported is not pruned and not counted",
                accuracy(),
                vec![
                    run("a", &[0.9]),
                    run("b", &[0.5]),
                    run("c", &[0.7]),
                    run("d", &[nan]),
                ],
                vec![
                    ("d", 0, "no value"),
                    ("a", 0, "promote 1/3"),
                    ("b", 0, "prune 3/3"),
                    ("c", 0, "promote 2/3"),
                ],
            ),
            (
                "a cancelled run leaves the count, judged or not",
                accuracy(),
                vec![
                    run("a", &[0.9]),
                    run("b", &[0.5]),
                    with_state(run("c", &[0.99]), RunState::Cancelled),
                    with_state(run("d", &[]), RunState::Cancelled),
                ],
                vec![("a", 0, "promote 1/2"), ("b", 0, "prune 2/2")],
            ),
            (
                "a run that ended before the rung holds it open no longer",
                accuracy(),
                vec![
                    run("a", &[0.9]),
                    run("b", &[0.5]),
                    with_state(run("c", &[]), RunState::Ended),
                ],
                vec![("a", 0, "promote 1/2"), ("b", 0, "prune 2/2")],
            ),
            (
                "a run that ended after being judged counts but is not decided",
                accuracy(),
                vec![
                    run("a", &[0.9]),
                    run("b", &[0.5]),
                    with_state(run("c", &[0.7]), RunState::Ended),
                ],
                vec![("a", 0, "promote 1/3"), ("b", 0, "prune 3/3")],
            ),
            (
                "ties at the edge all go on",
                accuracy(),
                vec![
                    run("a", &[0.5]),
                    run("b", &[0.5]),
                    run("c", &[0.5]),
                    run("d", &[0.1]),
                ],
                vec![
                    ("a", 0, "promote 1/4"),
                    ("b", 0, "promote 1/4"),
                    ("c", 0, "promote 1/4"),
                    ("d", 0, "prune 4/4"),
                ],
            ),
            (
                "a NaN ranks last, whichever way is better",
                rungs("eval/loss", &[0.25]),
                vec![
                    RungRun {
                        values: vec![Some(f64::NAN)],
                        ..run("a", &[])
                    },
                    run("b", &[9.0]),
                ],
                vec![("b", 0, "promote 1/2"), ("a", 0, "prune 2/2")],
            ),
        ];
        for (name, rungs, runs, expected) in cases {
            let mut got = brief(&decide(&rungs, 0.5, &runs, &[]));
            let mut want = table(&expected);
            got.sort();
            want.sort();
            assert_eq!(got, want, "{name}");
        }
    }

    /// Plays a group's rung judged one run at a time, in `order`, feeding each call the
    /// decisions made before; returns every decision made, in order.
    fn play(rungs: &Rungs, keep: f64, runs: &[Run], order: &[&'static str]) -> Vec<D> {
        let mut made: Vec<D> = Vec::new();
        for i in 0..=order.len() {
            let now: Vec<Run> = runs
                .iter()
                .map(|r| {
                    if order[..i].contains(&r.id) {
                        r.clone()
                    } else {
                        RungRun {
                            values: Vec::new(),
                            ..r.clone()
                        }
                    }
                })
                .collect();
            let new = decide(rungs, keep, &now, &made);
            made.extend(new);
        }
        made
    }

    #[test]
    fn a_run_judged_first_waits_then_is_promoted_later() {
        let runs = [
            run("a", &[0.9]),
            run("b", &[0.5]),
            run("c", &[0.95]),
            run("d", &[0.2]),
        ];
        let made = play(&accuracy(), 0.5, &runs, &["a", "b", "c", "d"]);
        assert_eq!(
            brief(&made),
            table(&[
                // a alone: ⌊1/2⌋ = 0 go on at once.
                ("a", 0, "pause 1/1"),
                // b ranks below a: a is promoted, b waits.
                ("a", 0, "promote 1/2"),
                ("b", 0, "pause 2/2"),
                ("c", 0, "promote 1/3"),
                // Every run judged: the best ⌈4/2⌉ are c and a; b and d are pruned.
                ("b", 0, "prune 3/4"),
                ("d", 0, "prune 4/4"),
            ])
        );
        assert_eq!(
            made[4].reason("eval/exact_accuracy"),
            "pruned at rung 1: rank 3 of 4 by eval/exact_accuracy (0.5)"
        );
        assert_eq!(
            made[0].reason("eval/exact_accuracy"),
            "paused at rung 1: rank 1 of the 1 judged so far by eval/exact_accuracy (0.9); \
             waits for its siblings"
        );
    }

    #[test]
    fn a_promotion_is_never_reversed_and_nothing_is_decided_twice() {
        // Judged worst first: each newcomer is the best so far and goes on at once, so more
        // than ⌈n/2⌉ go on; the early ones keep their promotion.
        let runs = [
            run("a", &[0.1]),
            run("b", &[0.2]),
            run("c", &[0.3]),
            run("d", &[0.4]),
        ];
        let made = play(&accuracy(), 0.5, &runs, &["a", "b", "c", "d"]);
        assert_eq!(
            brief(&made),
            table(&[
                // a waits, and is not paused again as the others rank above it.
                ("a", 0, "pause 1/1"),
                ("b", 0, "promote 1/2"),
                ("c", 0, "promote 1/3"),
                ("a", 0, "prune 4/4"),
                ("d", 0, "promote 1/4"),
            ])
        );
        // Asked again with everything decided: nothing new.
        assert_eq!(decide(&accuracy(), 0.5, &runs, &made), vec![]);
        // An earlier promotion stands even when the closed rung ranks it out.
        let earlier = [Decision {
            run: "a",
            rung: 0,
            verdict: Verdict::Promote(Standing {
                rank: 1,
                of: 1,
                value: 0.1,
            }),
        }];
        assert_eq!(
            brief(&decide(&accuracy(), 0.5, &runs, &earlier)),
            table(&[
                ("b", 0, "prune 3/4"),
                ("c", 0, "promote 2/4"),
                ("d", 0, "promote 1/4"),
            ])
        );
    }

    #[test]
    fn the_baseline_row_goes_on_at_once_and_keep_one_prunes_nothing() {
        // Judged first, alone, where any other run would wait.
        let runs = [baseline(run("base", &[0.1])), run("b", &[]), run("c", &[])];
        assert_eq!(
            brief(&decide(&accuracy(), 0.5, &runs, &[])),
            table(&[("base", 0, "promote 1/1")])
        );
        let runs = [run("a", &[0.1]), run("b", &[0.2]), run("c", &[0.3])];
        assert_eq!(
            brief(&decide(&accuracy(), 1.0, &runs, &[])),
            table(&[
                ("a", 0, "promote 3/3"),
                ("b", 0, "promote 2/3"),
                ("c", 0, "promote 1/3"),
            ])
        );
    }

    #[test]
    fn a_rung_stays_open_while_a_run_may_still_reach_it() {
        let runs = [
            run("a", &[0.9]),
            run("b", &[0.5]),
            run("c", &[0.7]),
            run("d", &[]),
        ];
        // d still runs towards the rung: nobody is pruned yet; ⌊3/2⌋ = 1 goes on.
        assert_eq!(
            brief(&decide(&accuracy(), 0.5, &runs, &[])),
            table(&[
                ("a", 0, "promote 1/3"),
                ("b", 0, "pause 3/3"),
                ("c", 0, "pause 2/3"),
            ])
        );
    }

    #[test]
    fn the_next_rung_counts_the_promoted_and_waits_for_the_paused() {
        let two = rungs("eval/exact_accuracy", &[0.25, 0.5]);
        let promote = |run, rung| Decision {
            run,
            rung,
            verdict: Verdict::Promote(Standing {
                rank: 1,
                of: 1,
                value: 0.0,
            }),
        };
        let pause = |run, rung| Decision {
            verdict: Verdict::Pause(Standing {
                rank: 1,
                of: 1,
                value: 0.0,
            }),
            ..promote(run, rung)
        };
        let prune = |run, rung| Decision {
            verdict: Verdict::Prune(Standing {
                rank: 1,
                of: 1,
                value: 0.0,
            }),
            ..promote(run, rung)
        };
        // e was pruned at rung 1 (and ended); a, b, c went on and reached rung 2; d waits at
        // rung 1 though every run is judged there, as a server stopped mid-decision leaves it.
        let mut runs = vec![
            run("a", &[0.9, 0.95]),
            run("b", &[0.8, 0.6]),
            run("c", &[0.7, 0.7]),
            run("d", &[0.65]),
            with_state(run("e", &[0.1]), RunState::Ended),
            run("f", &[0.6]),
        ];
        let earlier = vec![
            promote("a", 0),
            promote("b", 0),
            promote("c", 0),
            pause("d", 0),
            prune("e", 0),
            pause("f", 0),
        ];
        // Rung 1 closes: d (rank 4 of 6, ⌈6/2⌉ = 3 kept) and f are pruned; e, pruned before,
        // still counts there. Rung 2 then counts a, b and c alone, and closes: ⌈3/2⌉ = 2 go on.
        assert_eq!(
            brief(&decide(&two, 0.5, &runs, &earlier)),
            table(&[
                ("d", 0, "prune 4/6"),
                ("f", 0, "prune 5/6"),
                ("a", 1, "promote 1/3"),
                ("b", 1, "prune 3/3"),
                ("c", 1, "promote 2/3"),
            ])
        );
        // With d promoted by hand at rung 1 and still on its way, rung 2 stays open.
        runs[5] = with_state(runs[5].clone(), RunState::Ended);
        let mut earlier = earlier;
        earlier.push(promote("d", 0));
        earlier.push(prune("f", 0));
        assert_eq!(
            brief(&decide(&two, 0.5, &runs, &earlier)),
            table(&[
                ("a", 1, "promote 1/3"),
                ("b", 1, "pause 3/3"),
                ("c", 1, "pause 2/3"),
            ])
        );
    }

    #[test]
    fn a_run_already_past_a_rung_went_on_there() {
        let two = rungs("eval/exact_accuracy", &[0.25, 0.5]);
        let runs = [run("a", &[0.1, 0.5]), run("b", &[0.9]), run("c", &[])];
        assert_eq!(
            brief(&decide(&two, 0.5, &runs, &[])),
            table(&[
                ("a", 0, "promote 2/2"),
                ("b", 0, "promote 1/2"),
                // At rung 2 it is the first judged: it waits there.
                ("a", 1, "pause 1/1"),
            ])
        );
    }

    #[test]
    fn reasons_name_the_rung_rank_metric_and_value() {
        let d = |verdict| Decision {
            run: "a",
            rung: 1,
            verdict,
        };
        let s = Standing {
            rank: 2,
            of: 5,
            value: 1.25,
        };
        assert_eq!(
            d(Verdict::Promote(s)).reason("eval/loss"),
            "promoted at rung 2: rank 2 of 5 by eval/loss (1.25)"
        );
        assert_eq!(
            d(Verdict::Prune(Standing {
                value: f64::NAN,
                ..s
            }))
            .reason("eval/loss"),
            "pruned at rung 2: rank 2 of 5 by eval/loss (NaN)"
        );
        assert!(d(Verdict::NoValue)
            .reason("eval/loss")
            .contains("not pruned"));
        assert!(!d(Verdict::Pause(s)).is_final());
        assert!(d(Verdict::NoValue).is_final());
    }

    #[test]
    fn expected_hours_follow_the_runs_kept_past_each_rung() {
        assert_eq!(runs_per_stretch(16, 3, 0.5), [16, 8, 4, 2]);
        assert_eq!(runs_per_stretch(5, 2, 1.0 / 3.0), [5, 2, 1]);
        assert_eq!(runs_per_stretch(3, 1, 1.0 / 3.0), [3, 1]);
        let hours = [40.0; 4];
        assert_eq!(expected_hours(&hours, &[], 0.5), 160.0);
        assert_eq!(expected_hours(&hours, &[0.25, 0.5], 1.0), 160.0);
        // 4 runs to 25%, 2 to 50%, 1 to the end: 40 h × (1 + 0.5 + 0.5).
        assert_eq!(expected_hours(&hours, &[0.25, 0.5], 0.5), 80.0);
        // The bench: 16 runs, rungs at 12.5%, 25% and 50%, keep 1/2: 16, 8, 4 and 2
        // runs over the four stretches, 31% of the hours, within its 40% target.
        let share = expected_hours(&[10.0; 16], &[0.125, 0.25, 0.5], 0.5) / 160.0;
        assert!((share - 0.3125).abs() < 1e-9, "{share}");
        assert_eq!(expected_hours(&[], &[0.5], 0.5), 0.0);
    }

    #[test]
    fn the_largest_keep_that_fits() {
        let hours = [40.0; 5];
        let at = [0.25, 0.5];
        let fits = |budget: f64| move |keep: f64| expected_hours(&hours, &at, keep) <= budget;
        assert_eq!(largest_keep(5, fits(1000.0)), Some(1.0), "all of it fits");
        // 1/2 keeps 3 then 2: 40 × (1.25 + 0.75 + 1) = 120; 3/5 keeps 3 then 2 too; 2/3 keeps
        // 4 then 3: 40 × (1.25 + 1 + 1.5) = 150.
        assert_eq!(largest_keep(5, fits(120.0)), Some(0.6));
        assert_eq!(largest_keep(5, fits(10.0)), None);
        // 1/5 keeps 1 then 1: 40 × (1.25 + 0.25 + 0.5) = 80; 1/4 keeps 2 then 1: 90.
        assert_eq!(largest_keep(5, fits(80.0)), Some(0.2));
        assert_eq!(largest_keep(1, |_| true), Some(1.0));
        let mut asked = Vec::new();
        largest_keep(3, |keep| {
            asked.push(keep);
            false
        });
        assert_eq!(asked, [1.0, 2.0 / 3.0, 0.5, 1.0 / 3.0]);
    }
}
