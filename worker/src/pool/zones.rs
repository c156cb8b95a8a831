//! The waterfall: which of a pool's zones to try next, from what each has answered and how
//! its slices have fared. Pure: every call is given the time; nothing here reads a clock.
//!
//! - A stockout backs its zone off 60 s, growing ×1.6 with each stockout in a row, capped at
//!   5 min (SkyPilot's managed-job backoff, `sky/jobs/recovery_strategy.py`). A slice made
//!   there starts the count again.
//! - A quota error blocks what it names, the zone, every zone of a region or every zone, for
//!   a fixed 5 min (Iris's quota block, `backoff_detector.py`): waiting longer would not
//!   raise the quota, and trying sooner would only be refused again.
//! - A denial or an invalid request pauses the whole pool: every zone would answer the same,
//!   and only a person can change that. `resume` lifts it.
//! - A transient error leaves the zone ready, to be tried again.
//! - Churn: a zone where more than half of the slices whose fate is known died young (within
//!   5 min of their creation) over the last 30 min is skipped until that is no longer so
//!   (Iris's churn window, with its "hostile" cut at a half rather than four fifths: a zone
//!   losing half its young slices already costs more than it gives).

use chrono::{DateTime, TimeDelta, Utc};
use serde::{Deserialize, Serialize};

use super::classify::{CreateError, ErrorKind, Scope};

/// A first stockout's backoff.
pub const STOCKOUT_FIRST_S: f64 = 60.0;
/// Each stockout in a row multiplies the backoff by this.
pub const STOCKOUT_GROWTH: f64 = 1.6;
pub const STOCKOUT_CAP_S: f64 = 300.0;
/// A jitter of ±1 moves a stockout's backoff by this share of it (SkyPilot's ±40%).
pub const JITTER_SPREAD: f64 = 0.4;
pub const QUOTA_BLOCK_S: i64 = 300;
/// A slice that dies before this age died young.
pub const YOUNG_S: i64 = 300;
pub const CHURN_WINDOW_S: i64 = 1800;

/// One zone as a pool reports it and `GET /api/v1/pools` shows it: the wire's type, the one
/// definition.
pub use podq_api::{ZoneState, ZoneView};

/// The region of a zone: its name without the last `-x` (`us-central2-b` → `us-central2`).
pub fn region_of(zone: &str) -> &str {
    zone.rsplit_once('-').map_or(zone, |(region, _)| region)
}

/// The stockout backoff after `in_a_row` stockouts (1 for the first); `jitter` in [-1, 1]
/// spreads it by `JITTER_SPREAD`, 0 keeps it exact.
pub fn stockout_backoff(in_a_row: u32, jitter: f64) -> TimeDelta {
    let exponent = in_a_row.saturating_sub(1).min(64) as i32;
    let base = STOCKOUT_FIRST_S * STOCKOUT_GROWTH.powi(exponent);
    let spread = 1.0 + JITTER_SPREAD * jitter.clamp(-1.0, 1.0);
    let seconds = (base * spread).min(STOCKOUT_CAP_S);
    TimeDelta::milliseconds((seconds * 1000.0).round() as i64)
}

/// Per-zone state for one pool's zones, in the order they are tried. Kept on disk by the
/// pool's process, so a block or a zone's churn outlives its restart.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ZoneBook {
    zones: Vec<Zone>,
    /// Why the pool is paused (the message of the denial or invalid request).
    paused: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Zone {
    name: String,
    block: Option<Block>,
    stockouts_in_a_row: u32,
    last_error: Option<String>,
    slices: Vec<SliceRecord>,
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
struct Block {
    state: ZoneState,
    until: DateTime<Utc>,
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
struct SliceRecord {
    created_at: DateTime<Utc>,
    fate: Fate,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
enum Fate {
    Alive,
    /// Preempted or lost.
    Died(DateTime<Utc>),
    /// Deleted by the pool itself (idle, quarantine): says nothing against the zone.
    Removed(DateTime<Utc>),
}

impl ZoneBook {
    pub fn new<Z: Into<String>>(zones: impl IntoIterator<Item = Z>) -> ZoneBook {
        ZoneBook {
            zones: zones
                .into_iter()
                .map(|name| Zone {
                    name: name.into(),
                    block: None,
                    stockouts_in_a_row: 0,
                    last_error: None,
                    slices: Vec::new(),
                })
                .collect(),
            paused: None,
        }
    }

    /// The book of `self`'s zones that keeps what `saved` (the book before a restart) knew
    /// of each: blocks, stockouts in a row, last errors and slices' fates. Zones no longer
    /// listed are dropped; a pause is not kept, since restarting is how a person lifts it.
    pub fn restored(mut self, saved: ZoneBook) -> ZoneBook {
        for zone in &mut self.zones {
            if let Some(old) = saved.zones.iter().find(|z| z.name == zone.name) {
                *zone = old.clone();
            }
        }
        self
    }

    /// The first zone, in order, that is ready at `now`.
    pub fn choose(&self, now: DateTime<Utc>) -> Option<&str> {
        self.zones
            .iter()
            .find(|zone| self.state_of(zone, now) == ZoneState::Ready)
            .map(|zone| zone.name.as_str())
    }

    /// The first zone, in order, that is ready at `now` and that `keep` keeps (not where a
    /// slice was just quarantined, not one with its fill of creates in flight).
    pub fn choose_where(&self, now: DateTime<Utc>, keep: impl Fn(&str) -> bool) -> Option<&str> {
        self.zones
            .iter()
            .find(|zone| keep(&zone.name) && self.state_of(zone, now) == ZoneState::Ready)
            .map(|zone| zone.name.as_str())
    }

    /// `None` for a zone the book does not hold.
    pub fn state(&self, zone: &str, now: DateTime<Utc>) -> Option<ZoneState> {
        self.zone(zone).map(|z| self.state_of(z, now))
    }

    /// Why the pool is paused, when it is.
    pub fn paused(&self) -> Option<&str> {
        self.paused.as_deref()
    }

    /// A person has fixed what paused the pool. Blocks already running run out as they would.
    pub fn resume(&mut self) {
        self.paused = None;
    }

    /// A create in `zone` failed with `error` (from `classify_create_error(message)`).
    /// `jitter` in [-1, 1] spreads a stockout's backoff; pass 0 for the exact one.
    pub fn record_error(
        &mut self,
        zone: &str,
        error: &CreateError,
        message: &str,
        now: DateTime<Utc>,
        jitter: f64,
    ) {
        match error.kind {
            ErrorKind::Stockout => {
                if let Some(z) = self.zone_mut(zone) {
                    z.stockouts_in_a_row += 1;
                    z.block = Some(Block {
                        state: ZoneState::Stockout,
                        until: now + stockout_backoff(z.stockouts_in_a_row, jitter),
                    });
                    z.last_error = Some(message.to_owned());
                }
            }
            ErrorKind::Quota => {
                let until = now + TimeDelta::seconds(QUOTA_BLOCK_S);
                for z in &mut self.zones {
                    let tried = z.name == zone;
                    let reached = tried
                        || match &error.scope {
                            Scope::Zone => false,
                            Scope::Region(region) => region_of(&z.name) == region,
                            Scope::AllRegions | Scope::Pool => true,
                        };
                    if !reached {
                        continue;
                    }
                    // No other block outlasts one given now: a stockout's is at most as long.
                    z.block = Some(Block {
                        state: ZoneState::Quota,
                        until,
                    });
                    z.last_error = Some(message.to_owned());
                }
            }
            ErrorKind::Denied | ErrorKind::Invalid => {
                self.paused = Some(message.to_owned());
                if let Some(z) = self.zone_mut(zone) {
                    z.last_error = Some(message.to_owned());
                }
            }
            ErrorKind::Transient => {
                if let Some(z) = self.zone_mut(zone) {
                    z.last_error = Some(message.to_owned());
                }
            }
            // Nothing about the zone: the name was someone else's.
            ErrorKind::NameTaken => {}
        }
    }

    /// A slice was made in `zone`: the zone has capacity again, so its stockout count and
    /// any block end, and the slice's life starts counting for churn.
    pub fn record_success(&mut self, zone: &str, created_at: DateTime<Utc>) {
        if let Some(z) = self.zone_mut(zone) {
            z.stockouts_in_a_row = 0;
            z.block = None;
            z.born(created_at);
        }
    }

    /// A slice living in `zone` since `created_at` that this book did not see made (one
    /// adopted after a restart).
    pub fn record_birth(&mut self, zone: &str, created_at: DateTime<Utc>) {
        if let Some(z) = self.zone_mut(zone) {
            // Known already, from the book kept before a restart. (Two slices of one zone
            // created in the same second, adopted by a pool that lost its book, count once.)
            let known = z
                .slices
                .iter()
                .any(|s| s.created_at == created_at && s.fate == Fate::Alive);
            if !known {
                z.born(created_at);
            }
        }
    }

    /// A slice of `zone` was preempted or lost. Deaths within `YOUNG_S` of creation count
    /// against the zone.
    pub fn record_death(&mut self, zone: &str, created_at: DateTime<Utc>, died_at: DateTime<Utc>) {
        self.end(zone, created_at, Fate::Died(died_at), died_at);
    }

    /// The pool deleted a slice of `zone` itself (idle, quarantine): not a death, but a
    /// slice that lived `YOUNG_S` still counts for the zone.
    pub fn record_removed(
        &mut self,
        zone: &str,
        created_at: DateTime<Utc>,
        removed_at: DateTime<Utc>,
    ) {
        self.end(zone, created_at, Fate::Removed(removed_at), removed_at);
    }

    pub fn view(&self, now: DateTime<Utc>) -> Vec<ZoneView> {
        self.zones
            .iter()
            .map(|z| {
                let state = self.state_of(z, now);
                let next_try_at = match state {
                    ZoneState::Stockout | ZoneState::Quota => z.block.map(|b| b.until),
                    ZoneState::Churn => z.churn_ends(now),
                    ZoneState::Ready | ZoneState::Paused => None,
                };
                ZoneView {
                    zone: z.name.clone(),
                    state,
                    next_try_at,
                    last_error: self.paused.clone().or_else(|| z.last_error.clone()),
                }
            })
            .collect()
    }

    fn end(&mut self, zone: &str, created_at: DateTime<Utc>, fate: Fate, at: DateTime<Utc>) {
        let Some(z) = self.zone_mut(zone) else {
            return;
        };
        // Slices are known by zone and birth; two born in the same instant are alike here.
        match z
            .slices
            .iter_mut()
            .find(|s| s.created_at == created_at && s.fate == Fate::Alive)
        {
            Some(slice) => slice.fate = fate,
            None => z.slices.push(SliceRecord { created_at, fate }),
        }
        z.forget_before(at);
    }

    fn state_of(&self, zone: &Zone, now: DateTime<Utc>) -> ZoneState {
        if self.paused.is_some() {
            return ZoneState::Paused;
        }
        match zone.block {
            Some(block) if block.until > now => block.state,
            _ if zone.churning(now) => ZoneState::Churn,
            _ => ZoneState::Ready,
        }
    }

    fn zone(&self, name: &str) -> Option<&Zone> {
        self.zones.iter().find(|z| z.name == name)
    }

    fn zone_mut(&mut self, name: &str) -> Option<&mut Zone> {
        self.zones.iter_mut().find(|z| z.name == name)
    }
}

impl Zone {
    fn born(&mut self, created_at: DateTime<Utc>) {
        self.slices.push(SliceRecord {
            created_at,
            fate: Fate::Alive,
        });
        self.forget_before(created_at);
    }

    /// Over the window ending `now`: slices that died young, and slices whose fate is known.
    /// A living slice is known once it has outlived `YOUNG_S` and stays so while it lives
    /// (as Iris counts a long-lived slice); an ended one while its end is in the window; a
    /// young slice still alive is not known yet.
    fn churn_counts(&self, now: DateTime<Utc>) -> (usize, usize) {
        let young = TimeDelta::seconds(YOUNG_S);
        let window_start = now - TimeDelta::seconds(CHURN_WINDOW_S);
        let (mut died_young, mut known) = (0, 0);
        for slice in &self.slices {
            match slice.fate {
                Fate::Alive => {
                    if now - slice.created_at >= young {
                        known += 1;
                    }
                }
                Fate::Died(at) if at > window_start && at <= now => {
                    known += 1;
                    if at - slice.created_at < young {
                        died_young += 1;
                    }
                }
                Fate::Removed(at) if at > window_start && at <= now => {
                    if at - slice.created_at >= young {
                        known += 1;
                    }
                }
                Fate::Died(_) | Fate::Removed(_) => {}
            }
        }
        (died_young, known)
    }

    fn churning(&self, now: DateTime<Utc>) -> bool {
        let (died_young, known) = self.churn_counts(now);
        died_young * 2 > known
    }

    /// When the zone stops churning if nothing else happens: the first moment a death
    /// leaves the window or a living slice outlives `YOUNG_S` and the share drops to half.
    fn churn_ends(&self, now: DateTime<Utc>) -> Option<DateTime<Utc>> {
        let mut moments: Vec<DateTime<Utc>> = self
            .slices
            .iter()
            .map(|s| match s.fate {
                Fate::Alive => s.created_at + TimeDelta::seconds(YOUNG_S),
                Fate::Died(at) | Fate::Removed(at) => at + TimeDelta::seconds(CHURN_WINDOW_S),
            })
            .filter(|&moment| moment > now)
            .collect();
        moments.sort();
        moments.into_iter().find(|&moment| !self.churning(moment))
    }

    /// Drops ends older than two windows before `at`: they can no longer count, and a
    /// zone's record must not grow without end. Two windows leave room for events that
    /// arrive a little out of order.
    fn forget_before(&mut self, at: DateTime<Utc>) {
        let horizon = at - TimeDelta::seconds(2 * CHURN_WINDOW_S);
        self.slices.retain(|s| match s.fate {
            Fate::Alive => true,
            Fate::Died(ended) | Fate::Removed(ended) => ended > horizon,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pool::classify::classify_create_error;

    fn t(seconds: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(1_800_000_000 + seconds, 0).unwrap()
    }

    const STOCKOUT: &str = r#"{"code": 8, "message": "There is no more capacity in the zone \"us-central2-b\"; you can try in another zone where Cloud TPU Nodes are offered"}"#;
    const ZONE_QUOTA: &str =
        "Quota 'TPUV4sPreemptiblePodPerProjectPerZoneForTPUAPI' exhausted. Limit 32 in zone us-east5-a";
    const REGION_QUOTA: &str = "Quota limit 'TPUV6EPreemptiblePerProjectPerRegionForTPUAPI' has been exceeded. Limit: 0 in region us-east5.";
    const DENIED: &str = "ERROR: (gcloud.compute.tpus.tpu-vm.create) PERMISSION_DENIED: Permission 'tpu.nodes.create' denied on 'projects/p/locations/us-central2-b'";
    const INVALID: &str = "ERROR: (gcloud.compute.tpus.tpu-vm.create) INVALID_ARGUMENT: Cloud TPU received a bad request. the accelerator v4-128 was not found";
    const TRANSIENT: &str = "ERROR: (gcloud.compute.tpus.tpu-vm.create) UNAVAILABLE: The service is currently unavailable.";

    fn fail(book: &mut ZoneBook, zone: &str, message: &str, now: DateTime<Utc>) {
        book.record_error(zone, &classify_create_error(message), message, now, 0.0);
    }

    fn book() -> ZoneBook {
        ZoneBook::new([
            "us-central2-b",
            "us-east5-a",
            "us-east5-b",
            "europe-west4-a",
        ])
    }

    #[test]
    fn the_waterfall_passes_a_stockout_and_a_quota_zone() {
        let mut book = book();
        assert_eq!(book.choose(t(0)), Some("us-central2-b"));
        fail(&mut book, "us-central2-b", STOCKOUT, t(0));
        assert_eq!(book.choose(t(1)), Some("us-east5-a"));
        fail(&mut book, "us-east5-a", ZONE_QUOTA, t(1));
        // A quota "in zone" blocks that zone alone: its regional sibling is next.
        assert_eq!(book.choose(t(2)), Some("us-east5-b"));
        let views = book.view(t(2));
        let states: Vec<&str> = views.iter().map(|v| v.state.as_str()).collect();
        assert_eq!(states, ["stockout", "quota", "ready", "ready"]);
        assert_eq!(views[0].next_try_at, Some(t(60)));
        assert_eq!(views[1].next_try_at, Some(t(301)));
        assert_eq!(views[0].last_error.as_deref(), Some(STOCKOUT));
        // The stockout runs out first, and the first zone is first again.
        assert_eq!(book.choose(t(60)), Some("us-central2-b"));
        assert_eq!(book.state("us-east5-a", t(60)), Some(ZoneState::Quota));
        assert_eq!(book.state("us-east5-a", t(301)), Some(ZoneState::Ready));
    }

    #[test]
    fn a_restored_book_keeps_blocks_and_fates_but_not_a_pause() {
        let mut before = book();
        fail(&mut before, "us-central2-b", STOCKOUT, t(0));
        fail(&mut before, "us-east5-a", ZONE_QUOTA, t(1));
        before.record_success("us-east5-b", t(2));
        fail(&mut before, "europe-west4-a", DENIED, t(3));
        // Through its file, as a restarted pool reads it; one zone dropped from the file.
        let saved: ZoneBook =
            serde_json::from_str(&serde_json::to_string(&before).unwrap()).unwrap();
        let mut after =
            ZoneBook::new(["us-central2-b", "us-east5-a", "us-east5-b"]).restored(saved);
        assert_eq!(
            after.paused(),
            None,
            "restarting is how a person lifts a pause"
        );
        let states: Vec<&str> = after.view(t(4)).iter().map(|v| v.state.as_str()).collect();
        assert_eq!(states, ["stockout", "quota", "ready"]);
        // An adopted slice the book knew already is not a second birth: its one death is
        // one death, and so does not make the zone churn alone.
        after.record_birth("us-east5-b", t(2));
        after.record_death("us-east5-b", t(2), t(60));
        after.record_birth("us-east5-b", t(70));
        after.record_removed("us-east5-b", t(70), t(700));
        assert_eq!(after.state("us-east5-b", t(701)), Some(ZoneState::Ready));
    }

    #[test]
    fn stockout_backoff_grows_and_is_capped() {
        let cases = [
            (1, 0.0, 60_000),
            (2, 0.0, 96_000),
            (3, 0.0, 153_600),
            (4, 0.0, 245_760),
            (5, 0.0, 300_000),
            (40, 0.0, 300_000),
            (1, 1.0, 84_000),
            (1, -1.0, 36_000),
            (1, 7.0, 84_000),
            (4, 1.0, 300_000),
        ];
        for (in_a_row, jitter, millis) in cases {
            assert_eq!(
                stockout_backoff(in_a_row, jitter).num_milliseconds(),
                millis,
                "{in_a_row} in a row, jitter {jitter}"
            );
        }
    }

    #[test]
    fn stockouts_in_a_row_back_off_longer_until_a_slice_is_made() {
        let mut book = ZoneBook::new(["zone-a"]);
        let mut now = t(0);
        let mut waits = Vec::new();
        for _ in 0..6 {
            assert_eq!(book.choose(now), Some("zone-a"));
            fail(&mut book, "zone-a", STOCKOUT, now);
            assert_eq!(book.choose(now), None);
            let next = book.view(now)[0].next_try_at.unwrap();
            waits.push((next - now).num_milliseconds());
            now = next;
        }
        assert_eq!(waits, [60_000, 96_000, 153_600, 245_760, 300_000, 300_000]);
        book.record_success("zone-a", now);
        fail(&mut book, "zone-a", STOCKOUT, now);
        assert_eq!(
            book.view(now)[0].next_try_at,
            Some(now + TimeDelta::seconds(60))
        );
    }

    #[test]
    fn a_region_quota_blocks_the_sibling_zone() {
        let mut book = book();
        fail(&mut book, "us-central2-b", STOCKOUT, t(0));
        fail(&mut book, "us-east5-a", REGION_QUOTA, t(0));
        assert_eq!(book.state("us-east5-b", t(0)), Some(ZoneState::Quota));
        assert_eq!(book.choose(t(0)), Some("europe-west4-a"));
        let sibling = &book.view(t(0))[2];
        assert_eq!(sibling.next_try_at, Some(t(300)));
        assert_eq!(sibling.last_error.as_deref(), Some(REGION_QUOTA));
        assert_eq!(region_of("us-east5-b"), "us-east5");
        assert_eq!(book.choose(t(300)), Some("us-central2-b"));
    }

    #[test]
    fn a_global_quota_blocks_every_zone() {
        let mut book = book();
        let message = "Quota 'GPUS_ALL_REGIONS' exceeded. Limit: 0.0 globally.";
        fail(&mut book, "us-east5-b", message, t(0));
        assert_eq!(book.choose(t(299)), None);
        assert_eq!(book.choose(t(300)), Some("us-central2-b"));
    }

    #[test]
    fn denied_and_invalid_pause_the_pool_until_resumed() {
        for message in [DENIED, INVALID] {
            let mut book = book();
            fail(&mut book, "us-central2-b", message, t(0));
            assert_eq!(book.choose(t(10_000)), None, "{message}");
            assert_eq!(book.paused(), Some(message));
            for view in book.view(t(0)) {
                assert_eq!(view.state, ZoneState::Paused);
                assert_eq!(view.next_try_at, None);
                assert_eq!(view.last_error.as_deref(), Some(message));
            }
            book.resume();
            assert_eq!(book.choose(t(10_000)), Some("us-central2-b"));
        }
    }

    #[test]
    fn a_transient_error_retries_the_same_zone() {
        let mut book = book();
        fail(&mut book, "us-central2-b", TRANSIENT, t(0));
        assert_eq!(book.choose(t(0)), Some("us-central2-b"));
        assert_eq!(book.view(t(0))[0].last_error.as_deref(), Some(TRANSIENT));
    }

    #[test]
    fn a_zone_whose_slices_die_young_is_skipped_for_the_window() {
        let mut book = ZoneBook::new(["zone-a", "zone-b"]);
        book.record_success("zone-a", t(0));
        book.record_success("zone-a", t(10));
        book.record_death("zone-a", t(0), t(50));
        // One young death against a slice whose fate is unknown yet: one of one died young.
        assert_eq!(book.state("zone-a", t(60)), Some(ZoneState::Churn));
        book.record_death("zone-a", t(10), t(70));
        assert_eq!(book.choose(t(100)), Some("zone-b"));
        let view = &book.view(t(100))[0];
        assert_eq!(view.state, ZoneState::Churn);
        // Back once the later death leaves the 30-minute window.
        assert_eq!(view.next_try_at, Some(t(70 + 1800)));
        assert_eq!(book.choose(t(1869)), Some("zone-b"));
        assert_eq!(book.choose(t(1870)), Some("zone-a"));
    }

    #[test]
    fn churn_needs_more_than_half_of_the_known_fates() {
        // (slices: (born, died), at, churning)
        type Slices<'a> = &'a [(i64, Option<i64>)];
        let alive = None;
        let cases: [(Slices, i64, bool); 6] = [
            // One young death, one slice that outlived five minutes: exactly half.
            (&[(0, Some(60)), (0, alive)], 400, false),
            // Until the survivor is five minutes old its fate is unknown.
            (&[(0, Some(60)), (200, alive)], 400, true),
            // Two young deaths against one survivor.
            (&[(0, Some(60)), (0, Some(90)), (0, alive)], 400, true),
            // A death after five minutes is no young death.
            (&[(0, Some(400)), (0, Some(500))], 600, false),
            // A young death an hour old is out of the window.
            (&[(0, Some(60))], 3600, false),
            // A survivor keeps counting however old.
            (
                &[(0, Some(5000)), (4900, Some(4950)), (0, alive)],
                5000,
                false,
            ),
        ];
        for (slices, at, churning) in cases {
            let mut book = ZoneBook::new(["zone-a"]);
            for &(born, died) in slices {
                book.record_success("zone-a", t(born));
                if let Some(died) = died {
                    book.record_death("zone-a", t(born), t(died));
                }
            }
            assert_eq!(
                book.state("zone-a", t(at)) == Some(ZoneState::Churn),
                churning,
                "{slices:?} at {at}"
            );
        }
    }

    #[test]
    fn slices_the_pool_deleted_are_not_deaths() {
        let mut book = ZoneBook::new(["zone-a"]);
        book.record_success("zone-a", t(0));
        book.record_removed("zone-a", t(0), t(30));
        assert_eq!(book.state("zone-a", t(31)), Some(ZoneState::Ready));
        // One that lived five minutes speaks for the zone against a young death.
        book.record_success("zone-a", t(100));
        book.record_removed("zone-a", t(100), t(800));
        book.record_success("zone-a", t(900));
        book.record_death("zone-a", t(900), t(910));
        assert_eq!(book.state("zone-a", t(911)), Some(ZoneState::Ready));
    }

    #[test]
    fn old_records_are_forgotten() {
        let mut book = ZoneBook::new(["zone-a"]);
        for i in 0..100 {
            book.record_success("zone-a", t(i * 1000));
            book.record_death("zone-a", t(i * 1000), t(i * 1000 + 10));
        }
        assert!(book.zones[0].slices.len() <= 4);
        assert_eq!(book.state("zone-a", t(99_011)), Some(ZoneState::Churn));
    }

    #[test]
    fn states_read_as_the_api_writes_them() {
        let json = serde_json::to_string(&ZoneView {
            zone: "zone-a".into(),
            state: ZoneState::Stockout,
            next_try_at: Some(t(0)),
            last_error: None,
        })
        .unwrap();
        assert!(json.contains(r#""state":"stockout""#), "{json}");
        let names: Vec<String> = [
            ZoneState::Ready,
            ZoneState::Stockout,
            ZoneState::Quota,
            ZoneState::Churn,
            ZoneState::Paused,
        ]
        .iter()
        .map(ZoneState::to_string)
        .collect();
        assert_eq!(names, ["ready", "stockout", "quota", "churn", "paused"]);
    }
}
