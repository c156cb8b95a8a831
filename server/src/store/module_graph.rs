//! No two files of the store depend on each other, directly or through others: a circle
//! would make each the other's implementation detail, and neither could change alone
//! (issue 67, item 7). What is shared lives in a file both use (`job_state.rs` for the
//! guarded write of a job's state, `job_accelerators.rs` for a job's slice types).
//!
//! The check reads the sources: a file depends on a sibling it names as `super::NAME`
//! (`super::{a, b::c}` too) or `crate::store::NAME`, anywhere in it, its tests included.
//! `backend/` is one node; `mod.rs`, the parent, is none (a name it re-exports is not seen
//! through it).

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// The sibling modules each file of `dir` names, by module name.
fn dependencies(dir: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let mut sources: BTreeMap<String, Vec<(String, bool)>> = BTreeMap::new();
    for entry in std::fs::read_dir(dir).expect("server/src/store") {
        let path = entry.expect("a directory entry").path();
        let stem = path.file_stem().unwrap().to_string_lossy().into_owned();
        if path.is_dir() {
            for inner in std::fs::read_dir(&path).expect("a module directory") {
                let inner = inner.expect("a directory entry").path();
                // In `backend/mod.rs`, `super::` is the store; in its children, `backend`.
                let parent_is_store = inner.file_stem().is_some_and(|s| s == "mod");
                let text = std::fs::read_to_string(&inner).expect("a source file");
                sources
                    .entry(stem.clone())
                    .or_default()
                    .push((text, parent_is_store));
            }
        } else if path.extension().is_some_and(|e| e == "rs") && stem != "mod" {
            let text = std::fs::read_to_string(&path).expect("a source file");
            sources.entry(stem).or_default().push((text, true));
        }
    }
    let modules: BTreeSet<String> = sources.keys().cloned().collect();
    sources
        .iter()
        .map(|(module, texts)| {
            let mut named = BTreeSet::new();
            for (text, parent_is_store) in texts {
                let mut prefixes = vec!["crate::store::", "super::super::"];
                if *parent_is_store {
                    prefixes = vec!["crate::store::", "super::"];
                }
                for prefix in prefixes {
                    for (at, _) in text.match_indices(prefix) {
                        let rest = &text[at + prefix.len()..];
                        let names: Vec<&str> = match rest.strip_prefix('{') {
                            Some(group) => group[..group.find('}').unwrap_or(group.len())]
                                .split(',')
                                .map(|part| part.trim().split("::").next().unwrap_or(""))
                                .collect(),
                            None => vec![rest
                                .split(|c: char| !(c.is_alphanumeric() || c == '_'))
                                .next()
                                .unwrap_or("")],
                        };
                        named.extend(
                            names
                                .into_iter()
                                .filter(|n| *n != module && modules.contains(*n))
                                .map(str::to_owned),
                        );
                    }
                }
            }
            (module.clone(), named)
        })
        .collect()
}

/// A circle of `graph`, as the modules along it, if there is one.
fn circle(graph: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        graph: &BTreeMap<String, BTreeSet<String>>,
        module: &str,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(at) = path.iter().position(|m| m == module) {
            let mut found = path[at..].to_vec();
            found.push(module.to_owned());
            return Some(found);
        }
        if done.contains(module) {
            return None;
        }
        path.push(module.to_owned());
        for next in graph.get(module).into_iter().flatten() {
            if let Some(found) = visit(graph, next, path, done) {
                return Some(found);
            }
        }
        path.pop();
        done.insert(module.to_owned());
        None
    }
    let mut done = BTreeSet::new();
    graph
        .keys()
        .find_map(|module| visit(graph, module, &mut Vec::new(), &mut done))
}

#[test]
fn no_files_of_the_store_depend_on_each_other() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/store");
    let graph = dependencies(&dir);
    assert!(
        graph["leases"].contains("job_state") && graph["evictions"].contains("leases"),
        "the scan finds what the files name: {graph:?}"
    );
    if let Some(found) = circle(&graph) {
        panic!(
            "files of server/src/store depend on each other: {}",
            found.join(" → ")
        );
    }
}

#[test]
fn a_circle_is_found() {
    let graph: BTreeMap<String, BTreeSet<String>> = [
        ("a", vec!["b"]),
        ("b", vec!["c"]),
        ("c", vec!["a"]),
        ("d", vec![]),
    ]
    .into_iter()
    .map(|(m, to)| (m.to_owned(), to.into_iter().map(str::to_owned).collect()))
    .collect();
    assert_eq!(
        circle(&graph),
        Some(["a", "b", "c", "a"].map(str::to_owned).to_vec())
    );
}
