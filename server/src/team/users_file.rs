//! `--users FILE`: people kept as code. A YAML list, one entry per person:
//!
//! ```yaml
//! - name: alice
//!   role: submitter
//!   token_sha256: 3f5c…   # `podq users hash` prints it for a token
//! - name: stable-1-worker
//!   role: worker
//!   pods: [stable-1]
//!   token_sha256: 9a1e…
//! ```
//!
//! With a file the server takes its people from it alone: `podq users add` and the rest are
//! refused (the file is the truth, and a change is a change to it).

use std::collections::HashSet;
use std::path::Path;

use serde::Deserialize;

use super::{tokens, Role};

/// One person as the file gives them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FilePerson {
    pub name: String,
    pub role: Role,
    pub token_sha256: String,
    pub pods: Option<Vec<String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Entry {
    name: String,
    role: String,
    token_sha256: String,
    #[serde(default)]
    pods: Option<Vec<String>>,
}

/// Reads and checks the file: every problem names the file and the line.
pub fn load(path: &Path) -> Result<Vec<FilePerson>, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read the users file {}: {e}", path.display()))?;
    parse(&text).map_err(|(line, message)| format!("{}:{line}: {message}", path.display()))
}

/// The people of a users file's text, or the first problem with its 1-based line.
pub fn parse(text: &str) -> Result<Vec<FilePerson>, (usize, String)> {
    let entries: Vec<Entry> = serde_yaml::from_str(text).map_err(|e| {
        let line = e.location().map_or(1, |l| l.line());
        (
            line,
            format!("not a list of people (name, role, token_sha256, pods): {e}"),
        )
    })?;
    let mut seen = HashSet::new();
    let mut hashes = HashSet::new();
    let mut people = Vec::new();
    let starts = entry_lines(text);
    for (index, entry) in entries.into_iter().enumerate() {
        let line = starts.get(index).copied().unwrap_or(1);
        if !valid_name(&entry.name) {
            return Err((line, format!("`{}` is not a name: {NAME_RULE}", entry.name)));
        }
        if !seen.insert(entry.name.clone()) {
            return Err((line, format!("`{}` is listed twice", entry.name)));
        }
        let role: Role = entry.role.parse().map_err(|e| (line, e))?;
        let token_sha256 = entry.token_sha256.to_ascii_lowercase();
        if !tokens::is_hash(&token_sha256) {
            return Err((
                line,
                format!(
                    "the token_sha256 of `{}` is not 64 hex digits: `podq users hash` prints a token's",
                    entry.name
                ),
            ));
        }
        if !hashes.insert(token_sha256.clone()) {
            return Err((
                line,
                format!("`{}` shares its token with another person", entry.name),
            ));
        }
        if entry.pods.is_some() && role != Role::Worker {
            return Err((
                line,
                format!("`{}`: only a worker token is limited to pods", entry.name),
            ));
        }
        people.push(FilePerson {
            name: entry.name,
            role,
            token_sha256,
            pods: entry.pods,
        });
    }
    Ok(people)
}

/// What a name may be: it appears in the audit, URLs and the CLI's output.
pub const NAME_RULE: &str =
    "1 to 64 letters, digits, `.`, `_`, `-` or `@`, starting with a letter or digit";

pub fn valid_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphanumeric())
        && name.len() <= 64
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-' | '@'))
        && !RESERVED_NAMES.contains(&name)
}

/// Names podq's own actors: `podq` itself, a caller without a token, and the built-in
/// tokens (a person so named would own the jobs submitted with PODQ_ADMIN_TOKEN).
pub const RESERVED_NAMES: [&str; 4] = ["podq", "anonymous", "admin", "worker"];

/// The 1-based line each entry of the top-level list starts on.
fn entry_lines(text: &str) -> Vec<usize> {
    text.lines()
        .enumerate()
        .filter(|(_, l)| l.starts_with('-'))
        .map(|(i, _)| i + 1)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const HASH_A: &str = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad";
    const HASH_B: &str = "3f5c8c2ba5d0b8d9c2d3a7f1e0b4c6d8e9f0a1b2c3d4e5f60718293a4b5c6d7e";

    #[test]
    fn a_good_file_gives_its_people() {
        let text = format!(
            "- name: alice\n  role: submitter\n  token_sha256: {HASH_A}\n\
             - name: w1\n  role: worker\n  pods: [stable-1]\n  token_sha256: {HASH_B}\n"
        );
        let people = parse(&text).unwrap();
        assert_eq!(people.len(), 2);
        assert_eq!(people[0].role, Role::Submitter);
        assert_eq!(people[1].pods, Some(vec!["stable-1".to_owned()]));
    }

    #[test]
    fn each_bad_file_is_refused_at_its_line() {
        let cases = [
            (
                format!("- name: a\n  role: admin\n  token_sha256: {HASH_A}\n- name: a\n  role: viewer\n  token_sha256: {HASH_B}\n"),
                4,
                "`a` is listed twice",
            ),
            (
                format!("- name: a\n  role: admin\n  token_sha256: {HASH_A}\n- name: b\n  role: boss\n  token_sha256: {HASH_B}\n"),
                4,
                "no role `boss`",
            ),
            (format!("- name: a\n  role: amdin\n  token_sha256: {HASH_A}\n"), 1, "did you mean `admin`?"),
            ("- name: a\n  role: admin\n  token_sha256: xyz\n".to_owned(), 1, "not 64 hex digits"),
            (
                format!("- name: a\n  role: admin\n  token_sha256: {HASH_A}\n- name: b\n  role: admin\n  token_sha256: {HASH_A}\n"),
                4,
                "shares its token",
            ),
            (format!("- name: a\n  role: admin\n  pods: [x]\n  token_sha256: {HASH_A}\n"), 1, "only a worker token"),
            ("- name: a\n  rol: admin\n".to_owned(), 2, "not a list of people"),
        ];
        for (text, line, message) in cases {
            let (at, said) = parse(&text).unwrap_err();
            assert_eq!(at, line, "{said}");
            assert!(said.contains(message), "{said}");
        }
    }
}
