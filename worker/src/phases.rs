//! Times the trainer's phase lines (`PODQ {"event":"phase"}`) as they arrive: the worker's
//! clock, not the trainer's, so a host with a wrong clock cannot skew them.

use std::collections::HashMap;

use podq_api::TrainerPhases;
use tokio::time::Instant;

use crate::events::{PhaseEdge, TrainerPhase};

#[derive(Default)]
pub struct PhaseClock {
    open: HashMap<TrainerPhase, Instant>,
    totals: TrainerPhases,
    stopped_at: Option<Instant>,
}

impl PhaseClock {
    /// Notes one edge. An end without its start (the worker restarted in between) and a
    /// second start (the first never ended) count nothing for the lost part.
    pub fn note(&mut self, phase: TrainerPhase, edge: PhaseEdge, at: Instant) -> bool {
        match edge {
            // What starts after the stop was decided (the save on a shutdown notice) is the
            // stopping's time, not a save that held up training.
            PhaseEdge::Start if self.stopped_at.is_some_and(|stop| at >= stop) => false,
            PhaseEdge::Start => {
                self.open.insert(phase, at);
                false
            }
            PhaseEdge::End => {
                let Some(started) = self.open.remove(&phase) else {
                    return false;
                };
                let seconds = at.saturating_duration_since(started).as_secs_f64();
                match phase {
                    TrainerPhase::Compile => self.totals.compile_s += seconds,
                    TrainerPhase::Restore => self.totals.restore_s += seconds,
                    TrainerPhase::Save => {
                        self.totals.save_s += seconds;
                        self.totals.saves += 1;
                    }
                }
                true
            }
        }
    }

    /// The SDK's own count of the compile before the first step, once per attempt, unless
    /// the trainer's phase lines already timed one (they are the worker's clock, and win).
    /// A figure that is not a finite, non-negative number counts nothing.
    pub fn compiled(&mut self, seconds: f64) -> bool {
        if !seconds.is_finite() || seconds < 0.0 || self.totals.compile_s > 0.0 {
            return false;
        }
        if self.open.contains_key(&TrainerPhase::Compile) {
            return false;
        }
        self.totals.compile_s = seconds;
        true
    }

    /// The attempt was told to stop at `at`.
    pub fn stopped(&mut self, at: Instant) {
        self.stopped_at = Some(at);
    }

    pub fn totals(&self) -> TrainerPhases {
        self.totals
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sdks_compile_figure_counts_once_and_only_without_a_timed_phase() {
        let mut clock = PhaseClock::default();
        assert!(!clock.compiled(f64::NAN));
        assert!(!clock.compiled(-1.0));
        assert!(clock.compiled(2.5));
        assert!(!clock.compiled(9.0), "once");
        assert_eq!(clock.totals().compile_s, 2.5);
        let mut timed = PhaseClock::default();
        let t0 = Instant::now();
        timed.note(TrainerPhase::Compile, PhaseEdge::Start, t0);
        assert!(!timed.compiled(2.5), "a phase is being timed");
        timed.note(
            TrainerPhase::Compile,
            PhaseEdge::End,
            t0 + std::time::Duration::from_secs(1),
        );
        assert!(!timed.compiled(2.5), "the timed phase wins");
        assert_eq!(timed.totals().compile_s, 1.0);
    }
    use std::time::Duration;

    #[test]
    fn pairs_each_end_with_its_start_and_ignores_orphans() {
        let t0 = Instant::now();
        let at = |s: u64| t0 + Duration::from_secs(s);
        let mut clock = PhaseClock::default();
        assert!(!clock.note(TrainerPhase::Save, PhaseEdge::End, at(1)));
        clock.note(TrainerPhase::Compile, PhaseEdge::Start, at(0));
        clock.note(TrainerPhase::Save, PhaseEdge::Start, at(10));
        assert!(clock.note(TrainerPhase::Save, PhaseEdge::End, at(13)));
        assert!(clock.note(TrainerPhase::Compile, PhaseEdge::End, at(20)));
        clock.note(TrainerPhase::Save, PhaseEdge::Start, at(30));
        clock.note(TrainerPhase::Save, PhaseEdge::End, at(32));
        let totals = clock.totals();
        assert_eq!(
            (totals.compile_s, totals.save_s, totals.saves),
            (20.0, 5.0, 2)
        );
        assert_eq!(totals.restore_s, 0.0);
        // The save on a shutdown notice starts after the stop: not a training save.
        clock.stopped(at(40));
        clock.note(TrainerPhase::Save, PhaseEdge::Start, at(41));
        assert!(!clock.note(TrainerPhase::Save, PhaseEdge::End, at(45)));
        assert_eq!(clock.totals().saves, 2);
    }
}
