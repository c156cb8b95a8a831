//! The worker's one shell quoter. Every value the worker puts into a command a shell reads
//! (the scripts of `pod::gcloud::remote`, the trainer command of `attempt::launch`, the sim
//! trainer's default command) goes through [`word`], which is `shlex::try_quote`.
//!
//! A NUL byte cannot be part of a shell word: no argument, environment value or file of a
//! POSIX shell can hold one, and a shell given one would end the word there. So [`word`]
//! refuses a value that holds one, and every builder that takes an outside value answers
//! [`NulByte`] naming that value: the command is never built, so it is never run cut short
//! at the NUL. The error names what held the byte, never its text (a value may be a
//! secret).

use std::borrow::Cow;
use std::fmt;

/// A value that cannot be one shell word because it holds a NUL byte.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NulByte {
    /// What held it, e.g. "the trainer command" or "environment variable HF_TOKEN".
    pub what: String,
}

impl fmt::Display for NulByte {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} holds a NUL byte, which no shell word can carry; the command was not built",
            self.what
        )
    }
}

impl std::error::Error for NulByte {}

/// `value` as one shell word (POSIX sh and bash), or [`NulByte`] naming it as `what`.
pub fn word<'a>(value: &'a str, what: impl fmt::Display) -> Result<Cow<'a, str>, NulByte> {
    shlex::try_quote(value).map_err(|_| NulByte {
        what: what.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_word_is_one_argument_and_a_nul_is_refused() {
        for value in [
            "plain",
            "",
            "with space",
            "it's",
            "\"double\"",
            "$(touch /tmp/x) `id` $HOME",
            "line\nbreak",
            "~/x",
            "a=b",
        ] {
            let quoted = word(value, "v").unwrap();
            assert_eq!(shlex::split(&quoted).unwrap(), [value], "{quoted}");
        }
        let err = word("a\0b", "the secret").unwrap_err();
        assert_eq!(err.what, "the secret");
        assert!(err.to_string().contains("NUL"));
    }
}
