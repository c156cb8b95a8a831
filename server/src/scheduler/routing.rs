//! Which slice type each leasable job's demand goes to, when a job may run on several.
//!
//! A job's demand goes to its most preferred slice type whose pools can make a slice now;
//! when none of that type's pools can (every zone blocked, paused, at `max_slices`, or out of
//! the grant's hours), it falls to the next type of its list, and comes back as soon as the
//! first can make slices again (the next report after a zone's retry time). A job that a pod
//! already up or being made will serve makes no demand at all, so one job makes at most one
//! slice. This is Kueue's `TryNextFlavor` and SkyPilot's ordered `accelerators`, applied to
//! the pools' last reports (docs/architecture.md, "Generations").

use std::collections::BTreeMap;

/// What the pools of one slice type hold and may still make, from their last reports.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TypeCapacity {
    /// Pods that will take a job without a new slice: idle and waiting for work, or being
    /// made (a slice creating, or up with its worker not yet heard from).
    pub supply: usize,
    /// Slices the type's pools may still make now: below `max_slices`, within the grant,
    /// with a zone to try.
    pub headroom: usize,
    /// Whether any pool makes slices of this type.
    pub has_pool: bool,
}

/// The demand one slice type was given, and the waiting jobs that prefer it but went to a
/// later type of their list (a slice to make, or one up or being made) because no pool of it
/// could make a slice.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Routed {
    pub given: u32,
    pub passed_on: u32,
}

/// Routes each job (its slice types, most preferred first, in the queue's order) to the
/// slice type whose pools should make its slice.
pub fn route(
    jobs: &[Vec<String>],
    capacity: &BTreeMap<String, TypeCapacity>,
) -> BTreeMap<String, Routed> {
    let mut left = capacity.clone();
    let mut routed: BTreeMap<String, Routed> = BTreeMap::new();
    for list in jobs {
        let served = list
            .iter()
            .position(|a| left.get(a).is_some_and(|c| c.supply > 0));
        let landing = served.or_else(|| {
            list.iter()
                .position(|a| left.get(a).is_some_and(|c| c.headroom > 0))
        });
        let Some(at) = landing else {
            // No type of the list can make a slice now: the demand waits on the first type
            // that has a pool, which tries again once a zone's retry time has passed.
            if let Some(a) = list
                .iter()
                .find(|a| left.get(*a).is_some_and(|c| c.has_pool))
            {
                routed.entry(a.clone()).or_default().given += 1;
            }
            continue;
        };
        let entry = left.get_mut(&list[at]).expect("found above");
        if served.is_some() {
            entry.supply -= 1;
        } else {
            entry.headroom -= 1;
            routed.entry(list[at].clone()).or_default().given += 1;
        }
        // The types it prefers whose pools could not make its slice passed it on.
        for earlier in &list[..at] {
            if left
                .get(earlier)
                .is_some_and(|c| c.has_pool && c.headroom == 0)
            {
                routed.entry(earlier.clone()).or_default().passed_on += 1;
            }
        }
    }
    routed
}

#[cfg(test)]
mod tests {
    use super::*;

    fn jobs(lists: &[&[&str]]) -> Vec<Vec<String>> {
        lists
            .iter()
            .map(|l| l.iter().map(|s| (*s).to_owned()).collect())
            .collect()
    }

    fn capacity(types: &[(&str, usize, usize)]) -> BTreeMap<String, TypeCapacity> {
        types
            .iter()
            .map(|(name, supply, headroom)| {
                let c = TypeCapacity {
                    supply: *supply,
                    headroom: *headroom,
                    has_pool: true,
                };
                ((*name).to_owned(), c)
            })
            .collect()
    }

    fn given(routed: &BTreeMap<String, Routed>, a: &str) -> (u32, u32) {
        routed.get(a).map_or((0, 0), |r| (r.given, r.passed_on))
    }

    #[test]
    fn demand_goes_first_where_it_is_preferred_then_falls_then_waits() {
        const BOTH: &[&str] = &["v4-64", "v6e-32"];
        // (case, jobs, (type, supply, headroom), expected v4 (given, passed), v6e (given, passed))
        type Case = (
            &'static str,
            Vec<Vec<String>>,
            Vec<(&'static str, usize, usize)>,
            (u32, u32),
            (u32, u32),
        );
        let cases: Vec<Case> = vec![
            (
                "room on the first type: all of it goes there",
                jobs(&[BOTH, BOTH]),
                vec![("v4-64", 0, 3), ("v6e-32", 0, 2)],
                (2, 0),
                (0, 0),
            ),
            (
                "the first type is blocked: it passes every job on",
                jobs(&[BOTH, BOTH, BOTH]),
                vec![("v4-64", 0, 0), ("v6e-32", 0, 2)],
                (1, 2),
                (2, 0),
            ),
            (
                "the first type has room for one: the rest falls",
                jobs(&[BOTH, BOTH]),
                vec![("v4-64", 0, 1), ("v6e-32", 0, 2)],
                (1, 1),
                (1, 0),
            ),
            (
                "a pod up or being made serves a job before any new slice",
                jobs(&[BOTH, BOTH]),
                vec![("v4-64", 0, 0), ("v6e-32", 1, 2)],
                (0, 2),
                (1, 0),
            ),
            (
                "a free pod of a later type is no demand passed on by a type with room",
                jobs(&[BOTH]),
                vec![("v4-64", 0, 1), ("v6e-32", 1, 2)],
                (0, 0),
                (0, 0),
            ),
            (
                "a job of one type never lands on another",
                jobs(&[&["v4-64"], &["v4-64"]]),
                vec![("v4-64", 0, 0), ("v6e-32", 0, 2)],
                (2, 0),
                (0, 0),
            ),
            (
                "the second type first for a job that prefers it",
                jobs(&[&["v6e-32", "v4-64"], BOTH]),
                vec![("v4-64", 0, 1), ("v6e-32", 0, 1)],
                (1, 0),
                (1, 0),
            ),
            (
                "no queue, no demand",
                jobs(&[]),
                vec![("v4-64", 2, 3), ("v6e-32", 0, 2)],
                (0, 0),
                (0, 0),
            ),
        ];
        for (case, jobs, types, v4, v6e) in cases {
            let routed = route(&jobs, &capacity(&types));
            assert_eq!(given(&routed, "v4-64"), v4, "{case}: v4-64");
            assert_eq!(given(&routed, "v6e-32"), v6e, "{case}: v6e-32");
        }
    }

    #[test]
    fn a_type_without_a_pool_neither_takes_nor_passes_demand() {
        let lists = jobs(&[&["v5p-64", "v6e-32"]]);
        let mut types = capacity(&[("v6e-32", 0, 1)]);
        types.insert("v5p-64".into(), TypeCapacity::default());
        let routed = route(&lists, &types);
        assert_eq!(given(&routed, "v5p-64"), (0, 0));
        assert_eq!(given(&routed, "v6e-32"), (1, 0));
        assert!(route(&jobs(&[&["v5p-64"]]), &types).is_empty());
    }
}
