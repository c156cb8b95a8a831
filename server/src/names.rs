//! "Did you mean …?": a name a person typed (a group, an experiment, a job state, a config
//! key or config name) against the names podq knows, for every answer that rejects one.
//!
//! Two names are as far apart as the edits that turn one into the other by optimal string
//! alignment (`strsim::osa_distance`: insertions, deletions, substitutions and swaps of
//! neighbours, so `golbal` is one edit from `global`), where case does not count and `_` and
//! `-` are the same character. A name that differs only in case and separators is the same
//! name written another way, at distance 0 (`GlobalBatchSize` and `global_batch_size`).

/// Edits that turn `a` into `b`.
pub fn edit_distance(a: &str, b: &str) -> usize {
    strsim::osa_distance(a, b)
}

/// The known names close enough to `typed` to read as a typo of them, each with its
/// distance, in the order given.
fn near_misses<'a>(typed: &str, known: impl IntoIterator<Item = &'a str>) -> Vec<(usize, &'a str)> {
    let wanted = Spelling::of(typed);
    known
        .into_iter()
        .filter(|name| *name != typed)
        .map(|name| (distance(&wanted, name), name))
        .filter(|(distance, name)| {
            *distance <= tolerance(typed.chars().count().max(name.chars().count()))
        })
        .collect()
}

/// The one known name `typed` is most likely a misspelling of, if any is close enough: the
/// first of the nearest. For config keys, where a near miss is an error, so the tolerance
/// (see [`tolerance`]) keeps the user's own extra keys out of reach.
pub fn closest<'a>(typed: &str, known: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    near_misses(typed, known)
        .into_iter()
        .min_by_key(|(distance, _)| *distance)
        .map(|(_, name)| name)
}

/// The known names closest to `typed`: those at the smallest edit distance found, if it is
/// small enough to read as a typo of a name that long, at most three, in alphabetical order.
pub fn did_you_mean<'a>(typed: &str, known: impl IntoIterator<Item = &'a str>) -> Vec<String> {
    let mut close = near_misses(typed, known);
    close.sort();
    close.dedup();
    let best = close.first().map(|(distance, _)| *distance);
    close
        .into_iter()
        .take_while(|(distance, _)| Some(*distance) == best)
        .take(3)
        .map(|(_, name)| name.to_owned())
        .collect()
}

/// "; did you mean `a` or `b`?" to end a message, or nothing.
pub fn phrase(suggestions: &[String]) -> String {
    question(suggestions)
        .map(|q| format!("; {q}"))
        .unwrap_or_default()
}

/// "did you mean `a`?", for the one name a near miss was most likely meant as.
pub fn meant(name: &str) -> String {
    format!("did you mean `{name}`?")
}

/// "did you mean `a`, `b` or `c`?", when there is something to suggest.
pub fn question(suggestions: &[String]) -> Option<String> {
    let quoted: Vec<String> = suggestions.iter().map(|s| format!("`{s}`")).collect();
    match quoted.as_slice() {
        [] => None,
        [one] => Some(format!("did you mean {one}?")),
        [init @ .., last] => Some(format!("did you mean {} or {last}?", init.join(", "))),
    }
}

/// A name as it is compared: in lower case with `-` for `_`, and without separators.
struct Spelling {
    lower: String,
    bare: String,
}

impl Spelling {
    fn of(name: &str) -> Spelling {
        let lower: String = name
            .chars()
            .map(|c| if c == '_' { '-' } else { c })
            .flat_map(char::to_lowercase)
            .collect();
        let bare = lower.chars().filter(|c| *c != '-').collect();
        Spelling { lower, bare }
    }
}

/// 0 for the same name written another way, else the edits between the two spellings.
fn distance(typed: &Spelling, known: &str) -> usize {
    let known = Spelling::of(known);
    if typed.bare == known.bare {
        0
    } else {
        edit_distance(&typed.lower, &known.lower)
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    const GROUPS: [&str; 3] = ["exp01-model-scaling", "exp07-precision", "exp06-batch-size"];

    #[test]
    fn a_typo_names_the_one_it_was_meant_to_be() {
        assert_eq!(
            did_you_mean("exp01-model-scalling", GROUPS),
            ["exp01-model-scaling"]
        );
        assert_eq!(did_you_mean("EXP07_precision", GROUPS), ["exp07-precision"]);
        assert_eq!(did_you_mean("runing", ["queued", "running"]), ["running"]);
        assert_eq!(did_you_mean("rnuning", ["queued", "running"]), ["running"]);
    }

    #[test]
    fn ties_are_all_named_and_far_names_are_not() {
        let experiments = ["exp07b", "exp07d", "exp01a", "exp07c", "exp07a"];
        assert_eq!(
            did_you_mean("exp07z", experiments),
            ["exp07a", "exp07b", "exp07c"]
        );
        assert!(did_you_mean("nope", GROUPS).is_empty());
        assert!(did_you_mean("", GROUPS).is_empty());
    }

    #[test]
    fn phrases_read_as_a_question() {
        assert_eq!(phrase(&[]), "");
        assert_eq!(phrase(&["a".into()]), "; did you mean `a`?");
        assert_eq!(
            phrase(&["a".into(), "b".into(), "c".into()]),
            "; did you mean `a`, `b` or `c`?"
        );
    }

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
