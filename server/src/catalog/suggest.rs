//! "Did you mean …?": the closest known name to a misspelled one.
//!
//! A small optimal-string-alignment distance (Levenshtein plus adjacent transpositions, so
//! `golbal` is one edit from `global`) is enough for config keys of at most a few dozen
//! characters; it keeps the catalog free of a dependency for twenty lines of code.

/// Edits (insert, delete, substitute, swap two neighbours) that turn `a` into `b`.
pub fn edit_distance(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.chars().collect();
    let b: Vec<char> = b.chars().collect();
    let mut d = vec![vec![0usize; b.len() + 1]; a.len() + 1];
    for (i, row) in d.iter_mut().enumerate() {
        row[0] = i;
    }
    for (j, cell) in d[0].iter_mut().enumerate() {
        *cell = j;
    }
    for i in 1..=a.len() {
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            let mut best = (d[i - 1][j] + 1)
                .min(d[i][j - 1] + 1)
                .min(d[i - 1][j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                best = best.min(d[i - 2][j - 2] + 1);
            }
            d[i][j] = best;
        }
    }
    d[a.len()][b.len()]
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
