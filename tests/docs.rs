//! The docs name only what exists (issue 67, item 8): every repository path README.md and
//! docs/**/*.md (docs/operations/ included) name in backticks or links is a file or directory
//! of the repository, every link from one Markdown file to another (`[x](page.md#anchor)`,
//! or `(#anchor)` within a page) reaches a file and, where it names one, a heading of it, and
//! every migration they cite is one of migrations/sqlite or migrations/postgres, as cited.
//!
//! What counts as a path: a backtick span that is one word, or a link's target, starting
//! with a top-level directory of the repository (or naming a top-level file), or a Rust
//! source named from inside its crate (`scheduler/pools.rs`, `pool/run.rs`) or a Markdown
//! file with a `/`, which must be the end of the path of such a file of the repository
//! (a doc does not send its reader to a file they do not have); `:line`,
//! `::item` and `#anchor` suffixes are dropped; a `{placeholder}`, `*` glob, `<name>` or
//! `...` is not a path. A link is read from the file's own directory. Fenced code blocks are
//! examples and are not read.
//!
//! What counts as a migration: a four-digit number `00NN` (not part of a decimal). Its store
//! is the nearest "sqlite" or "postgres" (PostgreSQL) written just before it; `A/B` is
//! SQLite's A and PostgreSQL's B, the same migration in both, so both names match; with no
//! store named it must exist in one of them. A range `A–B` (or `A to B`) is a store's whole
//! schema: it starts at 0001 and ends at that store's newest migration.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

const TOP_DIRS: [&str; 18] = [
    "api",
    "server",
    "worker",
    "src",
    "tests",
    "docs",
    "deploy",
    "experiments",
    "migrations",
    "scripts",
    "web",
    "benches",
    "trainer",
    "examples",
    "sim-trainer",
    "testkit",
    "vendor",
    ".ci",
];
const TOP_FILES: [&str; 5] = [
    "README.md",
    "CHANGELOG.md",
    "Cargo.toml",
    "Cargo.lock",
    "Dockerfile",
];

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// README.md and every Markdown file under docs/, at any depth (docs/operations/*.md).
fn docs() -> Vec<(PathBuf, String)> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                walk(&path, out);
            } else if path.extension().is_some_and(|e| e == "md") {
                out.push(path);
            }
        }
    }
    let mut files = vec![root().join("README.md")];
    let mut in_docs = Vec::new();
    walk(&root().join("docs"), &mut in_docs);
    in_docs.sort();
    files.extend(in_docs);
    files
        .into_iter()
        .map(|f| {
            let text = std::fs::read_to_string(&f).unwrap();
            (f, without_fences(&text))
        })
        .collect()
}

/// `text` with fenced code blocks blanked (lines kept, so line numbers still hold).
fn without_fences(text: &str) -> String {
    let mut fenced = false;
    text.lines()
        .map(|line| {
            if line.trim_start().starts_with("```") {
                fenced = !fenced;
                ""
            } else if fenced {
                ""
            } else {
                line
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
}

fn line_of(text: &str, at: usize) -> usize {
    text[..at].matches('\n').count() + 1
}

/// Backtick spans and link targets, with where each starts; the bool says a link.
fn named(text: &str) -> Vec<(usize, String, bool)> {
    let mut out = Vec::new();
    let bytes = text.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'`' {
            let run = bytes[i..].iter().take_while(|&&b| b == b'`').count();
            let fence = &text[i..i + run];
            if let Some(end) = text[i + run..].find(fence) {
                let span = text[i + run..i + run + end].trim();
                out.push((i, span.to_owned(), false));
                i += run + end + run;
                continue;
            }
            i += run;
            continue;
        }
        if bytes[i..].starts_with(b"](") {
            if let Some(end) = text[i + 2..].find(')') {
                out.push((i, text[i + 2..i + 2 + end].trim().to_owned(), true));
                i += 2 + end;
                continue;
            }
        }
        i += 1;
    }
    out
}

/// What a word names: a path from the repository's root, or the tail of a Rust source's
/// or a Markdown file's.
enum Named {
    Path(PathBuf),
    SourceTail(String),
}

/// Every `.rs` and `.md` file of the repository, as `/`-joined paths from its root.
fn rust_sources() -> Vec<String> {
    fn walk(dir: &Path, out: &mut Vec<String>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            let name = path.file_name().unwrap().to_string_lossy();
            if name.starts_with('.') || name == "target" || name == "vendor" {
                continue;
            }
            if path.is_dir() {
                walk(&path, out);
            } else if name.ends_with(".rs") || name.ends_with(".md") {
                let rel = path.strip_prefix(root()).unwrap();
                out.push(rel.to_string_lossy().replace('\\', "/"));
            }
        }
    }
    let mut out = Vec::new();
    walk(&root(), &mut out);
    out
}

/// The repository path `word` names, if it is one.
fn as_path(word: &str, link: bool, doc: &Path) -> Option<Named> {
    if word.is_empty() || word.chars().any(char::is_whitespace) {
        return None;
    }
    if ["{", "}", "*", "<", ">", "$", "...", "…", "://", "mailto:"]
        .iter()
        .any(|bad| word.contains(bad))
    {
        return None;
    }
    let mut path = word;
    for cut in ["#", "::"] {
        path = path.split(cut).next().unwrap();
    }
    // `file.rs:123`, `file.rs:12-30`.
    if let Some((head, tail)) = path.rsplit_once(':') {
        if tail.chars().all(|c| c.is_ascii_digit() || c == '-') {
            path = head;
        }
    }
    let path = path.trim_end_matches([',', '.', ';']);
    if path.is_empty() {
        return None;
    }
    if link {
        let base = doc.parent().unwrap();
        return Some(Named::Path(base.join(path)));
    }
    let first = path.split('/').next().unwrap();
    let top = (path.contains('/') && TOP_DIRS.contains(&first)) || TOP_FILES.contains(&path);
    if top {
        Some(Named::Path(root().join(path)))
    } else if path.contains('/')
        && (path.ends_with(".rs") || path.ends_with(".md"))
        && !path.starts_with(['/', '.', '~'])
    {
        Some(Named::SourceTail(format!("/{path}")))
    } else {
        None
    }
}

#[test]
fn every_path_the_docs_name_exists() {
    let sources = rust_sources();
    let mut missing = Vec::new();
    let mut checked = 0;
    for (doc, text) in docs() {
        for (at, word, link) in named(&text) {
            let exists = match as_path(&word, link, &doc) {
                None => continue,
                Some(Named::Path(path)) => path.exists(),
                Some(Named::SourceTail(tail)) => sources.iter().any(|s| s.ends_with(&tail)),
            };
            checked += 1;
            if !exists {
                missing.push(format!(
                    "{}:{}: `{word}`",
                    doc.strip_prefix(root()).unwrap().display(),
                    line_of(&text, at)
                ));
            }
        }
    }
    assert!(
        checked > 50,
        "only {checked} paths found: is the parser right?"
    );
    assert!(
        missing.is_empty(),
        "the docs name paths that are not in the repository:\n{}",
        missing.join("\n")
    );
}

/// GitHub's anchor for a heading's text: a link's text kept and its target dropped, then
/// lowercase, every character but letters, digits, spaces, `-` and `_` dropped, and each space
/// a `-` (`## Pools: slices made on demand` is `#pools-slices-made-on-demand`).
fn github_anchor(heading: &str) -> String {
    let mut text = String::new();
    let mut rest = heading;
    // `[text](target)` reads as `text`.
    while let Some(open) = rest.find('[') {
        let link = rest[open..].find("](").and_then(|mid| {
            rest[open + mid..]
                .find(')')
                .map(|end| (mid, open + mid + end))
        });
        match link {
            Some((mid, close)) => {
                text.push_str(&rest[..open]);
                text.push_str(&rest[open + 1..open + mid]);
                rest = &rest[close + 1..];
            }
            None => break,
        }
    }
    text.push_str(rest);
    text.to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || matches!(c, ' ' | '-' | '_'))
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// The anchors of a Markdown text's headings (fences already blanked), as GitHub makes them:
/// a repeated heading's second anchor ends `-1`, its third `-2`; and any `<a name>`/`<a id>`.
fn anchors(text: &str) -> BTreeSet<String> {
    let mut seen: std::collections::BTreeMap<String, usize> = Default::default();
    let mut out = BTreeSet::new();
    for line in text.lines() {
        let hashes = line.chars().take_while(|&c| c == '#').count();
        if (1..=6).contains(&hashes) && line[hashes..].starts_with([' ', '\t']) {
            let heading = line[hashes..].trim().trim_end_matches('#').trim_end();
            let anchor = github_anchor(heading);
            let n = seen.entry(anchor.clone()).or_insert(0);
            out.insert(if *n == 0 {
                anchor
            } else {
                format!("{anchor}-{n}")
            });
            *n += 1;
        }
        for attr in ["<a name=\"", "<a id=\""] {
            let mut rest = line;
            while let Some(at) = rest.find(attr) {
                rest = &rest[at + attr.len()..];
                if let Some(end) = rest.find('"') {
                    out.insert(rest[..end].to_owned());
                }
            }
        }
    }
    out
}

#[test]
fn github_anchors_are_made_as_github_makes_them() {
    assert_eq!(
        github_anchor("Pools: slices made on demand"),
        "pools-slices-made-on-demand"
    );
    assert_eq!(
        github_anchor("The local (simulated) pod"),
        "the-local-simulated-pod"
    );
    assert_eq!(github_anchor("3.9 Generations"), "39-generations");
    assert_eq!(
        github_anchor("`podq_trainer.restore_args` and [Orbax](https://orbax.rtfd.io)"),
        "podq_trainerrestore_args-and-orbax"
    );
    let twice = anchors("# A\n## Backups\n### SQLite\n## Backups\n### SQLite");
    let want: BTreeSet<String> = ["a", "backups", "backups-1", "sqlite", "sqlite-1"]
        .map(String::from)
        .into();
    assert_eq!(twice, want);
}

/// Every relative link of the docs reaches a file or directory, read from the linking file's
/// own directory; one with `#anchor` into a Markdown file (or `(#anchor)`, into its own)
/// reaches a heading there. Links to the web are not followed.
#[test]
fn every_link_between_the_docs_resolves() {
    let mut broken = Vec::new();
    let mut checked = 0;
    let mut anchored = 0;
    let mut cache: std::collections::BTreeMap<PathBuf, BTreeSet<String>> = Default::default();
    for (doc, text) in docs() {
        for (at, target, link) in named(&text) {
            if !link {
                continue;
            }
            let target = target.split_whitespace().next().unwrap_or("");
            if target.is_empty() || target.contains("://") || target.starts_with("mailto:") {
                continue;
            }
            let (path, anchor) = match target.split_once('#') {
                Some((path, anchor)) => (path, Some(anchor)),
                None => (target, None),
            };
            let file = if path.is_empty() {
                doc.clone()
            } else {
                doc.parent().unwrap().join(path)
            };
            checked += 1;
            let here = format!(
                "{}:{}: ({target})",
                doc.strip_prefix(root()).unwrap().display(),
                line_of(&text, at)
            );
            if !file.exists() {
                broken.push(format!("{here}: no such file"));
                continue;
            }
            let Some(anchor) = anchor.filter(|a| !a.is_empty()) else {
                continue;
            };
            if file.extension().is_none_or(|e| e != "md") {
                continue; // a source file's `#L12` is GitHub's, not a heading
            }
            anchored += 1;
            let known = cache.entry(file.clone()).or_insert_with(|| {
                anchors(&without_fences(&std::fs::read_to_string(&file).unwrap()))
            });
            if !known.contains(anchor) {
                broken.push(format!("{here}: no heading makes #{anchor}"));
            }
        }
    }
    assert!(
        checked > 50 && anchored > 10,
        "only {checked} links ({anchored} with an anchor) found: is the parser right?"
    );
    assert!(
        broken.is_empty(),
        "links of the docs that reach nothing:\n{}",
        broken.join("\n")
    );
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Store {
    Sqlite,
    Postgres,
}

/// The migrations of one store: number and name (`0017_rungs.sql` is 17, "rungs").
fn migrations(store: Store) -> Vec<(u32, String)> {
    let dir = root().join("migrations").join(match store {
        Store::Sqlite => "sqlite",
        Store::Postgres => "postgres",
    });
    let mut out: Vec<(u32, String)> = std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| {
            let name = e.unwrap().file_name().into_string().unwrap();
            let stem = name.strip_suffix(".sql")?;
            let (number, rest) = stem.split_once('_')?;
            Some((number.parse().ok()?, rest.to_owned()))
        })
        .collect();
    out.sort();
    out
}

/// Every `00NN` of `text` (not inside a decimal such as 0.0006 or 5,0012), with its start.
fn numbers(text: &str) -> Vec<(usize, u32)> {
    let b = text.as_bytes();
    let mut out = Vec::new();
    for i in 0..b.len().saturating_sub(3) {
        let digits = b[i..i + 4].iter().all(u8::is_ascii_digit);
        if !digits || &b[i..i + 2] != b"00" {
            continue;
        }
        let before = i.checked_sub(1).map(|j| b[j]);
        let after = b.get(i + 4).copied();
        let after2 = b.get(i + 5).copied();
        let glued = |c: Option<u8>| c.is_some_and(|c| c.is_ascii_alphanumeric());
        let decimal_before =
            matches!(before, Some(b'.' | b',')) && i >= 2 && b[i - 2].is_ascii_digit();
        let decimal_after =
            matches!(after, Some(b'.' | b',')) && after2.is_some_and(|c| c.is_ascii_digit());
        if glued(before) || glued(after) || decimal_before || decimal_after {
            continue;
        }
        out.push((i, text[i..i + 4].parse().unwrap()));
    }
    out
}

/// The store named in the few characters before `at` (the nearest one), if any.
fn store_before(text: &str, at: usize) -> Option<Store> {
    let mut from = at.saturating_sub(40);
    while !text.is_char_boundary(from) {
        from -= 1;
    }
    let window = text[from..at].to_lowercase();
    let sqlite = window.rfind("sqlite");
    let postgres = window.rfind("postgres");
    match (sqlite, postgres) {
        (Some(s), Some(p)) if s > p => Some(Store::Sqlite),
        (Some(_), Some(_)) => Some(Store::Postgres),
        (Some(_), None) => Some(Store::Sqlite),
        (None, Some(_)) => Some(Store::Postgres),
        (None, None) => None,
    }
}

#[test]
fn every_migration_the_docs_cite_exists_as_cited() {
    let sqlite = migrations(Store::Sqlite);
    let postgres = migrations(Store::Postgres);
    let of = |store| match store {
        Store::Sqlite => &sqlite,
        Store::Postgres => &postgres,
    };
    let name = |store, n: u32| {
        of(store)
            .iter()
            .find(|(m, _)| *m == n)
            .map(|(_, name)| name.clone())
    };
    let newest = |store| of(store).last().unwrap().0;
    let mut wrong = Vec::new();
    let mut checked = 0;
    for (doc, text) in docs() {
        let doc = doc.strip_prefix(root()).unwrap().display().to_string();
        let found = numbers(&text);
        let mut used = BTreeSet::new();
        for (k, &(at, n)) in found.iter().enumerate() {
            if used.contains(&k) {
                continue;
            }
            checked += 1;
            let here = format!("{doc}:{}", line_of(&text, at));
            let next = found.get(k + 1).copied();
            let between = next.map(|(to, _)| &text[at + 4..to]);
            let store = store_before(&text, at);
            // `A/B`: SQLite's A and PostgreSQL's B, one migration.
            if let (Some("/"), Some((_, m))) = (between, next) {
                used.insert(k + 1);
                match (name(Store::Sqlite, n), name(Store::Postgres, m)) {
                    (Some(a), Some(b)) if a == b => {}
                    (a, b) => wrong.push(format!(
                        "{here}: {n:04}/{m:04} is SQLite's {a:?} and PostgreSQL's {b:?}"
                    )),
                }
                continue;
            }
            // `A–B`, `A to B`: a store's whole schema.
            if let (Some("–" | "-" | " to " | "—"), Some((_, m))) = (between, next) {
                used.insert(k + 1);
                let stores = match store {
                    Some(s) => vec![s],
                    None => vec![Store::Sqlite, Store::Postgres],
                };
                if n != 1 || !stores.iter().any(|&s| newest(s) == m) {
                    wrong.push(format!(
                        "{here}: {n:04}–{m:04} is not a whole schema ({stores:?} run 0001–{})",
                        stores
                            .iter()
                            .map(|&s| format!("{:04}", newest(s)))
                            .collect::<Vec<_>>()
                            .join("/")
                    ));
                }
                continue;
            }
            let exists = match store {
                Some(s) => name(s, n).is_some(),
                None => name(Store::Sqlite, n).is_some() || name(Store::Postgres, n).is_some(),
            };
            if !exists {
                wrong.push(format!("{here}: no migration {n:04} in {store:?}"));
            }
        }
    }
    assert!(
        checked > 5,
        "only {checked} migrations found: is the parser right?"
    );
    assert!(
        wrong.is_empty(),
        "the docs cite migrations that are not there as cited:\n{}",
        wrong.join("\n")
    );
}
