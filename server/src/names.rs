//! "Did you mean …?": a name a person typed (a group, an experiment, a job state, a config
//! key or config name) against the names podq knows, for every answer that rejects one.
//!
//! Two names are as far apart as the edits that turn one into the other by optimal string
//! alignment (`strsim::osa_distance`: insertions, deletions, substitutions and swaps of
//! neighbours, so `golbal` is one edit from `global`), where case does not count and `_` and
//! `-` are the same character. A name that differs only in case and separators is the same
//! name written another way, at distance 0 (`GlobalBatchSize` and `global_batch_size`).
//!
//! The work is bounded whatever is typed: an edit distance costs the product of the two
//! lengths, so a name longer than [`MAX_COMPARED_CHARS`] is compared with nothing, and a known
//! name is compared only when the two lengths are close enough for it to be a typo. Callers
//! that can, refuse a name longer than every known one before asking ([`longer_than_all`]),
//! and quote it with [`shown`].

/// Edits that turn `a` into `b`.
pub fn edit_distance(a: &str, b: &str) -> usize {
    strsim::osa_distance(a, b)
}

/// The longest name, typed or known, a did-you-mean compares, in characters. Every name podq
/// suggests (groups, experiments, classes, states, config keys, metric series) is far
/// shorter; a longer one reads as a typo of nothing.
pub const MAX_COMPARED_CHARS: usize = 256;

/// How many characters `name` has, or None when more than `most` (counted no further).
fn chars_at_most(name: &str, most: usize) -> Option<usize> {
    if name.len() > most.saturating_mul(4) {
        return None;
    }
    Some(name.chars().count()).filter(|n| *n <= most)
}

/// Whether `typed` is longer (in bytes) than every name in `known`: it is none of them and too
/// long to be a typo of one, so it is refused before any did-you-mean.
pub fn longer_than_all<'a>(typed: &str, known: impl IntoIterator<Item = &'a str>) -> bool {
    let longest = known.into_iter().map(str::len).max().unwrap_or(0);
    typed.len() > longest + tolerance(longest)
}

/// How an answer quotes a name someone typed: whole up to 64 characters, else its first 64
/// and how long it was, so a refused megabyte is not sent back.
pub fn shown(typed: &str) -> String {
    const MOST: usize = 64;
    match typed.char_indices().nth(MOST) {
        None => typed.to_owned(),
        Some((cut, _)) => format!("{}… ({} bytes)", &typed[..cut], typed.len()),
    }
}

/// The known names close enough to `typed` to read as a typo of them, each with its
/// distance, in the order given. Names longer than [`MAX_COMPARED_CHARS`] are compared with
/// nothing, and a pair whose lengths differ by more than the tolerance is never aligned (its
/// distance is at least that difference), so the work is bounded by the known names.
fn near_misses<'a>(typed: &str, known: impl IntoIterator<Item = &'a str>) -> Vec<(usize, &'a str)> {
    let Some(typed_chars) = chars_at_most(typed, MAX_COMPARED_CHARS) else {
        return Vec::new();
    };
    let wanted = Spelling::of(typed);
    known
        .into_iter()
        .filter(|name| *name != typed)
        .filter_map(|name| {
            let most = tolerance(typed_chars.max(chars_at_most(name, MAX_COMPARED_CHARS)?));
            let distance = distance(&wanted, name, most)?;
            (distance <= most).then_some((distance, name))
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
    /// `lower`'s length in characters.
    chars: usize,
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
        Spelling {
            chars: lower.chars().count(),
            lower,
            bare,
        }
    }
}

/// 0 for the same name written another way, else the edits between the two spellings; None
/// when they are surely more than `most` apart (their lengths differ by more).
fn distance(typed: &Spelling, known: &str, most: usize) -> Option<usize> {
    let known = Spelling::of(known);
    if typed.bare == known.bare {
        Some(0)
    } else if typed.chars.abs_diff(known.chars) > most {
        None
    } else {
        Some(edit_distance(&typed.lower, &known.lower))
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
    fn a_huge_name_costs_no_search_and_is_not_quoted_whole() {
        let huge = "A".repeat(3 << 20);
        let experiments: Vec<String> = (0..200).map(|i| format!("exp{i:03}_a_long_name")).collect();
        let started = std::time::Instant::now();
        assert!(did_you_mean(&huge, experiments.iter().map(String::as_str)).is_empty());
        assert_eq!(closest(&huge, experiments.iter().map(String::as_str)), None);
        // Just over the cap, and known names of every length: still quick.
        let long = "exp001_a_long_name".repeat(20);
        assert!(did_you_mean(&long, experiments.iter().map(String::as_str)).is_empty());
        assert!(
            started.elapsed() < std::time::Duration::from_millis(200),
            "{:?}",
            started.elapsed()
        );
        assert!(longer_than_all(&huge, GROUPS));
        assert!(!longer_than_all("exp01-model-scalling", GROUPS));
        assert!(shown(&huge).len() < 100, "{}", shown(&huge).len());
        assert!(shown(&huge).ends_with("(3145728 bytes)"));
        assert_eq!(shown("exp07a"), "exp07a");
        // The length filter loses no near miss: separators and case still count for nothing.
        assert_eq!(closest("a_b_c_d_e_f", ["abcdef"]), Some("abcdef"));
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
