//! Names a person typed (a group, an experiment, a job state), against the names podq knows:
//! the "did you mean" of every answer that rejects one.

/// The known names closest to `typed`: those at the smallest edit distance found, if it is
/// small enough to read as a typo of a name that long, at most three, in alphabetical order.
/// Case and the difference between `-` and `_` do not count; swapping two neighbouring
/// letters is one edit (optimal string alignment).
pub fn did_you_mean<'a>(typed: &str, known: impl IntoIterator<Item = &'a str>) -> Vec<String> {
    let wanted = normalized(typed);
    let mut close: Vec<(usize, &str)> = known
        .into_iter()
        .filter(|name| *name != typed)
        .map(|name| (strsim::osa_distance(&wanted, &normalized(name)), name))
        .filter(|(distance, name)| {
            *distance <= tolerance(typed.chars().count().max(name.chars().count()))
        })
        .collect();
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

/// "did you mean `a`, `b` or `c`?", when there is something to suggest.
pub fn question(suggestions: &[String]) -> Option<String> {
    let quoted: Vec<String> = suggestions.iter().map(|s| format!("`{s}`")).collect();
    match quoted.as_slice() {
        [] => None,
        [one] => Some(format!("did you mean {one}?")),
        [init @ .., last] => Some(format!("did you mean {} or {last}?", init.join(", "))),
    }
}

fn normalized(name: &str) -> String {
    name.chars()
        .map(|c| if c == '_' { '-' } else { c })
        .flat_map(char::to_lowercase)
        .collect()
}

/// Edits that still read as a typo of a name this long.
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
}
