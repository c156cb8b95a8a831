//! Whether a pool keeps warm spares: ready, idle slices that a preempted run resumes on at
//! once instead of waiting for a slice to be made. A spare costs its idle hours; it saves,
//! at each interruption of the pool's running slices, the wait a replacement would have
//! taken. `spares: N` keeps N while the pool runs jobs; `spares: auto` keeps one only while
//! the measured saving outweighs the cost and the grant has room for it.

use podq_api::Spares;

/// What `spares: auto` is judged on, for one pool.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SpareFacts {
    /// The pool's slices holding a lease now.
    pub running: u32,
    /// The slice type's mean time between interruptions, in hours of one slice.
    pub mtbf_h: f64,
    /// The measured median wait for a pod after an interruption of this type, in seconds;
    /// none before any was measured.
    pub measured_wait_s: Option<f64>,
    /// Pod-hours left of the grant for this type; none when it sets no budget.
    pub grant_left_h: Option<f64>,
}

/// A spare idles for an hour each hour it is kept; it pays when the runs' expected
/// interruptions in that hour (`running / mtbf_h`) times the wait each would save reach that
/// hour. Never on a guess: without a measured wait it does not pay. The grant must hold at
/// least the hour it is kept for.
pub fn spare_pays(f: &SpareFacts) -> bool {
    let Some(wait_s) = f.measured_wait_s else {
        return false;
    };
    if f.running == 0 || f.mtbf_h <= 0.0 || f.grant_left_h.is_some_and(|left| left < 1.0) {
        return false;
    }
    let interruptions_per_h = f64::from(f.running) / f.mtbf_h;
    interruptions_per_h * wait_s / 3600.0 >= 1.0
}

/// The ready, idle slices a pool of `setting` keeps now: none while it runs nothing.
pub fn spares_to_keep(setting: Spares, facts: &SpareFacts) -> u32 {
    if facts.running == 0 {
        return 0;
    }
    match setting {
        Spares::Count(n) => n,
        Spares::Auto(_) => u32::from(spare_pays(facts)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use podq_api::SparesAuto;

    fn facts(running: u32, mtbf_h: f64, wait_s: Option<f64>, grant: Option<f64>) -> SpareFacts {
        SpareFacts {
            running,
            mtbf_h,
            measured_wait_s: wait_s,
            grant_left_h: grant,
        }
    }

    #[test]
    fn a_spare_is_kept_while_it_pays() {
        let auto = Spares::Auto(SparesAuto::Auto);
        // (running, MTBF h, measured wait s, grant left h) -> spares kept under `auto`.
        let table = [
            // 8 slices preempted every 2 h each: 4 interruptions an hour, 15 min saved
            // each: an hour saved for the hour idled.
            ((8, 2.0, Some(900.0), None), 1),
            // The same at 14 min each: not quite.
            ((8, 2.0, Some(840.0), None), 0),
            // One slice, interrupted every 24 h, a 20 s create: never.
            ((1, 24.0, Some(20.0), None), 0),
            // Nothing running: no spare however bad the zone.
            ((0, 0.1, Some(3600.0), None), 0),
            // Nothing measured yet: no spare on a guess.
            ((8, 0.5, None, None), 0),
            // The grant has less than the hour left.
            ((8, 0.5, Some(3600.0), Some(0.5)), 0),
            ((8, 0.5, Some(3600.0), Some(10.0)), 1),
            // A nonsensical MTBF keeps nothing.
            ((8, 0.0, Some(3600.0), None), 0),
        ];
        for ((running, mtbf, wait, grant), kept) in table {
            let f = facts(running, mtbf, wait, grant);
            assert_eq!(spares_to_keep(auto, &f), kept, "{f:?}");
        }
    }

    #[test]
    fn a_number_is_kept_while_the_pool_runs_jobs() {
        let f = facts(2, 100.0, None, None);
        assert_eq!(spares_to_keep(Spares::Count(2), &f), 2);
        assert_eq!(spares_to_keep(Spares::Count(0), &f), 0);
        let idle = facts(0, 100.0, None, None);
        assert_eq!(spares_to_keep(Spares::Count(2), &idle), 0);
    }
}
