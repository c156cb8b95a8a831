//! "Did you mean …?" for config keys and config names: the closest known name to a
//! misspelled one, by optimal string alignment (`strsim::osa_distance`: insertions,
//! deletions, substitutions and swaps of neighbours, so `golbal` is one edit from `global`),
//! the distance `crate::names` uses for the names a person types. The tolerance here is tuned
//! for keys: a near miss is an error, so the user's own extra keys must stay out of reach.

/// Edits that turn `a` into `b`.
pub fn edit_distance(a: &str, b: &str) -> usize {
    strsim::osa_distance(a, b)
}

/// The same name written another way: case, `_` and `-` do not count.
fn normalized(name: &str) -> String {
    name.chars()
        .filter(|c| *c != '_' && *c != '-')
        .flat_map(char::to_lowercase)
        .collect()
}

/// How many edits still read as a typo of a name this long: one for the shortest names, up to
/// three for long ones. `global_batchsize` (16) is one edit from `global_batch_size`, while
/// the user's own extra keys (`use_tpu`, `num_workers`, `save_checkpoint_steps`) are at least
/// four from any key the trainer reads.
fn tolerance(len: usize) -> usize {
    match len {
        0..=4 => 1,
        5..=10 => 2,
        _ => 3,
    }
}

/// The candidate `word` is most likely a misspelling of, if any is close enough.
pub fn closest<'a>(word: &str, candidates: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    let wanted = normalized(word);
    let lower = word.to_lowercase();
    candidates
        .into_iter()
        .filter(|c| *c != word)
        .filter_map(|c| {
            let distance = if normalized(c) == wanted {
                0
            } else {
                edit_distance(&lower, &c.to_lowercase())
            };
            (distance <= tolerance(word.chars().count().max(c.chars().count())))
                .then_some((distance, c))
        })
        .min_by_key(|(distance, _)| *distance)
        .map(|(_, c)| c)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_edits_and_swaps() {
        assert_eq!(edit_distance("global_batchsize", "global_batch_size"), 1);
        assert_eq!(edit_distance("golbal", "global"), 1);
        assert_eq!(edit_distance("", "lr"), 2);
        assert_eq!(edit_distance("kitten", "sitting"), 3);
    }

    #[test]
    fn suggests_only_near_misses() {
        let keys = [
            "global_batch_size",
            "lr",
            "lr_min_ratio",
            "epochs",
            "ema_rate",
        ];
        assert_eq!(closest("global_batchsize", keys), Some("global_batch_size"));
        assert_eq!(closest("GlobalBatchSize", keys), Some("global_batch_size"));
        assert_eq!(closest("epoch", keys), Some("epochs"));
        assert_eq!(closest("lr_min_ration", keys), Some("lr_min_ratio"));
        assert_eq!(closest("use_tpu", keys), None);
        assert_eq!(closest("num_workers", keys), None);
        assert_eq!(closest("save_checkpoint_steps", keys), None);
        assert_eq!(closest("lr", keys), None, "a known key is no near miss");
    }
}
