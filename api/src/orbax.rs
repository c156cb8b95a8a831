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

/// Why a checkpoint URI is refused: podq passes a resume point to a trainer's command, so it
/// must be plainly data and must lie in the job's own checkpoint directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BadCheckpointUri(pub String);

impl std::fmt::Display for BadCheckpointUri {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// The characters a step directory's name may hold in a resume point: none that a shell
/// gives a meaning to (`$`, `` ` ``, quotes, spaces, `;`, `|`, `&`, `<`, `>`, `(`, `)`, `*`,
/// `?`, `\`, control characters...).
fn plain_name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')
}

/// The step directory `uri` names inside `checkpoint_dir`, if `uri` is exactly
/// `checkpoint_dir/<name>` with `<name>` a step directory Orbax writes (final or
/// temporary), made of letters, digits, `.`, `_` and `-`. `checkpoint_dir` is the catalog's
/// (a person's), so such a URI holds nothing the catalog did not: no `..`, no control
/// character, no shell metacharacter of a worker's or a trainer's making.
pub fn step_dir_in(checkpoint_dir: &str, uri: &str) -> Result<StepDir, BadCheckpointUri> {
    let bad = |why: &str| Err(BadCheckpointUri(why.to_owned()));
    if uri.len() > 4096 {
        return bad("a checkpoint URI is at most 4096 bytes");
    }
    if uri.chars().any(char::is_control) {
        return bad("a checkpoint URI holds no control character");
    }
    if uri.split('/').any(|segment| segment == "..") {
        return bad("a checkpoint URI has no `..` segment");
    }
    let dir = checkpoint_dir.trim_end_matches('/');
    let Some(name) = uri
        .strip_prefix(dir)
        .and_then(|rest| rest.strip_prefix('/'))
        .map(|rest| rest.trim_end_matches('/'))
    else {
        return bad("a checkpoint URI lies directly in the job's own checkpoint_dir");
    };
    if name.is_empty() || name == "." || !name.chars().all(plain_name_char) {
        return bad(
            "a checkpoint URI is `<checkpoint_dir>/<step directory>`, the step directory's \
             name made of letters, digits, `.`, `_` and `-`",
        );
    }
    match parse_step_dir(name) {
        Some((step, tmp)) if step >= 0 => Ok(StepDir {
            step,
            committed_name: !tmp,
            name: name.to_owned(),
        }),
        _ => bad("a checkpoint URI names an Orbax step directory (`<step>` or `<prefix>_<step>`)"),
    }
}

/// A step directory found by [`step_dir_in`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StepDir {
    pub step: i64,
    /// Final (not a save in progress): a name a trainer may resume from.
    pub committed_name: bool,
    pub name: String,
}

/// [`step_dir_in`], for a resume point: the name must be final.
pub fn resume_point_in(checkpoint_dir: &str, uri: &str) -> Result<StepDir, BadCheckpointUri> {
    let dir = step_dir_in(checkpoint_dir, uri)?;
    if !dir.committed_name {
        return Err(BadCheckpointUri(
            "a resume point is a final step directory, not a save in progress".to_owned(),
        ));
    }
    Ok(dir)
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

    #[test]
    fn a_checkpoint_uri_is_a_plain_step_directory_of_the_jobs_own() {
        let dir = "gs://b/ckpt/exp01";
        let found = |step, name: &str| StepDir {
            step,
            committed_name: true,
            name: name.into(),
        };
        assert_eq!(
            resume_point_in(dir, "gs://b/ckpt/exp01/814"),
            Ok(found(814, "814"))
        );
        assert_eq!(
            resume_point_in("gs://b/ckpt/exp01/", "gs://b/ckpt/exp01/step_20/"),
            Ok(found(20, "step_20"))
        );
        let saving = step_dir_in(dir, "gs://b/ckpt/exp01/814.orbax-checkpoint-tmp").unwrap();
        assert!(!saving.committed_name);
        for hostile in [
            "gs://b/ckpt/exp01/x$(touch${IFS}/tmp/m)/814",
            "gs://b/ckpt/exp01/x$(touch)_814",
            "gs://b/ckpt/exp01/`id`_814",
            "gs://b/ckpt/exp01/814;reboot",
            "gs://b/ckpt/exp01/814 --flag",
            "gs://b/ckpt/exp01/../exp02/814",
            "gs://b/ckpt/exp02/814",
            "gs://b/ckpt/exp010/814",
            "gs://b/ckpt/exp01/a/814",
            "gs://b/ckpt/exp01/814.orbax-checkpoint-tmp",
            "gs://b/ckpt/exp01/",
            "gs://b/ckpt/exp01/814\n",
            "gs://b/ckpt/exp01/81\u{7}4",
        ] {
            assert!(
                resume_point_in(dir, hostile).is_err(),
                "{hostile} was taken"
            );
        }
    }
}
