//! Orbax step-directory names: the one reading of them that the worker's checkpoint
//! discovery and the sim trainer share, so what the trainer writes as committed is exactly
//! what the worker resumes from (checked against real Orbax 0.12, `tests/orbax.rs`).
//!
//! A step directory is named `<step>` (Orbax's default) or `<prefix>_<step>`; a name holding
//! `.orbax-checkpoint-tmp` (older Orbax: `...-tmp-<n>`) is a save in progress or cut short.
//! Whether a final name is committed also depends on the store; that rule stays with the
//! worker's store listing.

/// In the name of a step directory Orbax has not committed.
pub const TMP_MARKER: &str = ".orbax-checkpoint-tmp";

/// `step_5000` -> (5000, false); `5000` -> (5000, false);
/// `step_5000.orbax-checkpoint-tmp` or `step_5000.orbax-checkpoint-tmp-1712345` -> (5000, true).
pub fn parse_step_dir(name: &str) -> Option<(i64, bool)> {
    let (base, tmp) = match name.find(TMP_MARKER) {
        Some(at) => (&name[..at], true),
        None => (name, false),
    };
    let digits = base.rsplit('_').next()?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some((digits.parse::<i64>().ok()?, tmp))
}

/// The step of a name Orbax would treat as final (`<step>` or `<prefix>_<step>`), never of a
/// temporary name.
pub fn committed_step(name: &str) -> Option<u64> {
    match parse_step_dir(name)? {
        (step, false) => u64::try_from(step).ok(),
        (_, true) => None,
    }
}

/// Orbax's default step name: the bare number.
pub fn step_name(step: u64) -> String {
    step.to_string()
}

/// The name Orbax writes a step under before the rename that commits it.
pub fn tmp_step_name(step: u64) -> String {
    format!("{}{TMP_MARKER}", step_name(step))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_of_step_directories() {
        assert_eq!(parse_step_dir("step_5000"), Some((5000, false)));
        assert_eq!(parse_step_dir("5000"), Some((5000, false)));
        assert_eq!(
            parse_step_dir("step_814.orbax-checkpoint-tmp"),
            Some((814, true))
        );
        assert_eq!(
            parse_step_dir("step_814.orbax-checkpoint-tmp-1712345"),
            Some((814, true))
        );
        assert_eq!(parse_step_dir("metrics"), None);
        assert_eq!(parse_step_dir("step_+5"), None);
        assert_eq!(
            parse_step_dir("5000.orbax-checkpoint-tmp"),
            Some((5000, true))
        );
    }

    #[test]
    fn committed_names_follow_orbax() {
        assert_eq!(committed_step("step_5000"), Some(5000));
        assert_eq!(committed_step("5000"), Some(5000));
        assert_eq!(committed_step("step_5000.orbax-checkpoint-tmp"), None);
        assert_eq!(committed_step("step_5000.orbax-checkpoint-tmp-1712"), None);
        assert_eq!(committed_step("notes"), None);
    }

    #[test]
    fn written_names_read_back() {
        assert_eq!(step_name(5000), "5000");
        assert_eq!(tmp_step_name(5000), "5000.orbax-checkpoint-tmp");
        assert_eq!(parse_step_dir(&step_name(814)), Some((814, false)));
        assert_eq!(parse_step_dir(&tmp_step_name(814)), Some((814, true)));
    }
}
