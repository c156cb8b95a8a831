//! Composition of Hydra-style configs: the subset of Hydra's defaults lists that experiment
//! suites use.
//!
//! Supported entries of a `defaults:` list:
//! - `_self_`: the file's own keys (appended last when absent, as Hydra 1.1+ does);
//! - `name` or `/name`: another config merged at the same package, relative to the file's
//!   directory or (with `/`) to the root;
//! - `group: option` or `/group: option`: `group/option.yaml` placed under the key `group`
//!   (`a/b` under `a.b`); a relative group is looked up next to the file, then at the root;
//!   `group: null` selects nothing; `optional group: option` tolerates a missing option;
//! - `override group: option`: changes the option of `group` wherever the composed tree
//!   selects it. The outermost override wins.
//!
//! Later entries deep-merge over earlier ones; lists and scalars are replaced whole.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use serde_json::{Map, Value};

use super::source::{line_of, SourceFile, SourceFiles};

/// Composing a config failed; says where.
#[derive(Debug, Clone, PartialEq)]
pub struct ComposeError {
    pub file: String,
    pub line: Option<u32>,
    pub key: Option<String>,
    pub code: &'static str,
    pub message: String,
    /// What to change, when there is one obvious fix.
    pub fix: Option<String>,
}

/// Which file, and which key inside it, set each leaf of a composed config.
pub type Provenance = BTreeMap<String, (String, String)>;

pub struct Composed {
    pub config: Map<String, Value>,
    pub provenance: Provenance,
}

const MAX_INCLUDE_DEPTH: usize = 16;

enum Entry {
    Own,
    Config {
        name: String,
        absolute: bool,
    },
    Group {
        group: String,
        absolute: bool,
        option: Option<String>,
        optional: bool,
        is_override: bool,
    },
}

/// An `override group: option` entry and whether any selection of the group used it.
struct Override {
    option: Option<String>,
    file: String,
    line: Option<u32>,
    /// Its index in its file's defaults list.
    index: usize,
    used: bool,
}

struct ParsedEntry {
    entry: Entry,
    line: Option<u32>,
    index: usize,
}

pub struct Composer<'a> {
    files: &'a mut SourceFiles,
}

impl<'a> Composer<'a> {
    pub fn new(files: &'a mut SourceFiles) -> Self {
        Composer { files }
    }

    /// Composes the primary config at `rel_path` (relative to the root).
    pub fn compose(&mut self, rel_path: &Path) -> Result<Composed, ComposeError> {
        let mut overrides = HashMap::new();
        let mut provenance = Provenance::new();
        let mut stack = Vec::new();
        let config =
            self.compose_file(rel_path, &[], &mut overrides, &mut provenance, &mut stack)?;
        if let Some((group, unused)) = overrides.iter().find(|(_, o)| !o.used) {
            return Err(ComposeError {
                file: unused.file.clone(),
                line: unused.line,
                key: Some("defaults".into()),
                code: "unused_override",
                message: format!(
                    "could not override `{group}`: no config in the defaults tree selects that group"
                ),
                fix: None,
            });
        }
        Ok(Composed { config, provenance })
    }

    fn compose_file(
        &mut self,
        rel_path: &Path,
        package: &[String],
        overrides: &mut HashMap<String, Override>,
        provenance: &mut Provenance,
        stack: &mut Vec<PathBuf>,
    ) -> Result<Map<String, Value>, ComposeError> {
        let file_name = rel_path.display().to_string();
        if stack.contains(&rel_path.to_path_buf()) {
            return Err(ComposeError {
                file: file_name,
                line: None,
                key: Some("defaults".into()),
                code: "include_cycle",
                message: format!(
                    "defaults include each other in a cycle: {}",
                    stack
                        .iter()
                        .map(|p| p.display().to_string())
                        .collect::<Vec<_>>()
                        .join(" -> ")
                ),
                fix: None,
            });
        }
        if stack.len() >= MAX_INCLUDE_DEPTH {
            return Err(ComposeError {
                file: file_name,
                line: None,
                key: Some("defaults".into()),
                code: "include_too_deep",
                message: format!("defaults nest deeper than {MAX_INCLUDE_DEPTH} files"),
                fix: None,
            });
        }
        let source = self.files.load(rel_path).map_err(|e| ComposeError {
            file: file_name.clone(),
            line: e.line,
            key: None,
            code: e.code,
            message: e.message,
            fix: None,
        })?;
        let mut body = source.value.clone();
        let defaults = body.remove("defaults");
        let entries = parse_defaults(source, defaults)?;
        stack.push(rel_path.to_path_buf());

        // Overrides are registered before anything is composed, so they reach every nested
        // selection; an override from an outer file is not replaced by an inner one.
        for parsed in &entries {
            if let Entry::Group {
                group,
                option,
                is_override: true,
                absolute,
                ..
            } = &parsed.entry
            {
                let key = self.group_key(rel_path, group, *absolute);
                overrides.entry(key).or_insert_with(|| Override {
                    option: option.clone(),
                    file: file_name.clone(),
                    line: parsed.line,
                    index: parsed.index,
                    used: false,
                });
            }
        }

        let mut result = Map::new();
        let has_self = entries.iter().any(|e| matches!(e.entry, Entry::Own));
        let mut own_merged = false;
        for parsed in &entries {
            match &parsed.entry {
                Entry::Own => {
                    merge_own(&mut result, &body, &file_name, package, provenance);
                    own_merged = true;
                }
                Entry::Config { name, absolute } => {
                    let path = if *absolute {
                        PathBuf::from(format!("{name}.yaml"))
                    } else {
                        parent_of(rel_path).join(format!("{name}.yaml"))
                    };
                    if self.files.outside(&path) {
                        stack.pop();
                        return Err(outside_catalog(&file_name, parsed.line, parsed.index, name));
                    }
                    if !self.files.exists(&path) {
                        stack.pop();
                        let siblings = self.files.options(&parent_of(&path));
                        let (dir, stem) = match name.rsplit_once('/') {
                            Some((dir, stem)) => (format!("{dir}/"), stem),
                            None => (String::new(), name.as_str()),
                        };
                        let slash = if *absolute { "/" } else { "" };
                        let fix = crate::names::closest(stem, siblings.iter().map(String::as_str))
                            .map(|near| crate::names::meant(&format!("{slash}{dir}{near}")));
                        return Err(ComposeError {
                            file: file_name,
                            line: parsed.line,
                            key: Some(format!("defaults[{}]", parsed.index)),
                            code: "missing_config",
                            message: format!(
                                "config `{name}` not found (looked for {})",
                                path.display()
                            ),
                            fix,
                        });
                    }
                    let included =
                        self.compose_file(&path, package, overrides, provenance, stack)?;
                    deep_merge(&mut result, included);
                }
                Entry::Group {
                    group,
                    absolute,
                    option,
                    optional,
                    is_override,
                } => {
                    if *is_override {
                        continue;
                    }
                    let key = self.group_key(rel_path, group, *absolute);
                    // An option chosen by an override is the override's doing: a bad one is
                    // reported where the override is written, not at the entry it replaces.
                    let (chosen, chosen_at) = match overrides.get_mut(&key) {
                        Some(chosen) => {
                            chosen.used = true;
                            (
                                chosen.option.clone(),
                                Some((chosen.file.clone(), chosen.line, chosen.index)),
                            )
                        }
                        None => (option.clone(), None),
                    };
                    let Some(chosen) = chosen.filter(|c| !c.is_empty() && c != "null") else {
                        continue;
                    };
                    let group_dir = PathBuf::from(&key);
                    let path = group_dir.join(format!("{chosen}.yaml"));
                    if self.files.outside(&group_dir) || self.files.outside(&path) {
                        stack.pop();
                        let entry = format!("{group}: {chosen}");
                        return Err(outside_catalog(
                            &file_name,
                            parsed.line,
                            parsed.index,
                            &entry,
                        ));
                    }
                    if !self.files.is_dir(&group_dir) {
                        stack.pop();
                        return Err(ComposeError {
                            file: file_name,
                            line: parsed.line,
                            key: Some(format!("defaults[{}]", parsed.index)),
                            code: "unknown_group",
                            message: format!(
                                "unknown config group `{group}` (no directory {key}/)"
                            ),
                            fix: None,
                        });
                    }
                    if !self.files.exists(&path) {
                        if *optional {
                            continue;
                        }
                        stack.pop();
                        let available = self.files.options(&group_dir);
                        let fix =
                            crate::names::closest(&chosen, available.iter().map(String::as_str))
                                .map(crate::names::meant);
                        let (file, line, index, how) = match chosen_at {
                            Some((file, line, index)) => (file, line, index, "override "),
                            None => (file_name, parsed.line, parsed.index, ""),
                        };
                        return Err(ComposeError {
                            file,
                            line,
                            key: Some(format!("defaults[{index}]")),
                            code: "unknown_option",
                            // With a likely meaning the fix says it; the whole list is for
                            // when there is none.
                            message: match fix {
                                Some(_) => format!(
                                    "{how}`{group}: {chosen}`: config group `{group}` has no option `{chosen}`"
                                ),
                                None => format!(
                                    "{how}`{group}: {chosen}`: config group `{group}` has no option `{chosen}` (available: {})",
                                    available.join(", ")
                                ),
                            },
                            fix,
                        });
                    }
                    let mut group_package = package.to_vec();
                    group_package
                        .extend(group.trim_start_matches('/').split('/').map(str::to_owned));
                    let content =
                        self.compose_file(&path, &group_package, overrides, provenance, stack)?;
                    let mut wrapped = Value::Object(content);
                    for part in group.trim_start_matches('/').split('/').rev() {
                        let mut outer = Map::new();
                        outer.insert(part.to_owned(), wrapped);
                        wrapped = Value::Object(outer);
                    }
                    if let Value::Object(wrapped) = wrapped {
                        deep_merge(&mut result, wrapped);
                    }
                }
            }
        }
        if !has_self && !own_merged {
            merge_own(&mut result, &body, &file_name, package, provenance);
        }
        stack.pop();
        Ok(result)
    }

    /// The directory of a group, relative to the root: next to the including file when such a
    /// directory exists there, else at the root.
    fn group_key(&self, including: &Path, group: &str, absolute: bool) -> String {
        let group = group.trim_start_matches('/');
        if !absolute {
            let local = parent_of(including).join(group);
            if local.parent().is_some_and(|p| !p.as_os_str().is_empty())
                && self.files.is_dir(&local)
            {
                return local.display().to_string();
            }
        }
        group.to_owned()
    }
}

fn parent_of(path: &Path) -> PathBuf {
    path.parent().map(Path::to_path_buf).unwrap_or_default()
}

fn parse_defaults(
    source: &SourceFile,
    defaults: Option<Value>,
) -> Result<Vec<ParsedEntry>, ComposeError> {
    let err = |line, index: Option<usize>, message: String| ComposeError {
        file: source.rel_path.clone(),
        line,
        key: Some(index.map_or("defaults".into(), |i| format!("defaults[{i}]"))),
        code: "bad_defaults",
        message,
        fix: None,
    };
    let list = match defaults {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(Value::Array(list)) => list,
        Some(_) => {
            return Err(err(
                line_of(&source.text, "defaults:"),
                None,
                "`defaults` must be a list".into(),
            ))
        }
    };
    let mut entries = Vec::with_capacity(list.len());
    for (index, item) in list.into_iter().enumerate() {
        match item {
            Value::String(s) if s == "_self_" => entries.push(ParsedEntry {
                entry: Entry::Own,
                line: line_of(&source.text, "_self_"),
                index,
            }),
            Value::String(s) => entries.push(ParsedEntry {
                line: line_of(&source.text, &s),
                entry: Entry::Config {
                    absolute: s.starts_with('/'),
                    name: s.trim_start_matches('/').to_owned(),
                },
                index,
            }),
            Value::Object(map) if map.len() == 1 => {
                let (raw_key, option) = map.into_iter().next().expect("one entry");
                let line = line_of(&source.text, &raw_key);
                let option = match option {
                    Value::Null => None,
                    Value::String(s) => Some(s),
                    Value::Number(n) => Some(n.to_string()),
                    Value::Bool(b) => Some(b.to_string()),
                    _ => {
                        return Err(err(
                            line,
                            Some(index),
                            format!("option of `{raw_key}` must be a name"),
                        ))
                    }
                };
                let mut words: Vec<&str> = raw_key.split_whitespace().collect();
                let group_word = words.pop().unwrap_or_default();
                let is_override = words.contains(&"override");
                let optional = words.contains(&"optional");
                if words.iter().any(|w| *w != "override" && *w != "optional") {
                    return Err(err(
                        line,
                        Some(index),
                        format!("unsupported keyword in `{raw_key}`"),
                    ));
                }
                if group_word.contains('@') {
                    return Err(err(
                        line,
                        Some(index),
                        format!("package overrides (`{group_word}`) are not supported"),
                    ));
                }
                entries.push(ParsedEntry {
                    entry: Entry::Group {
                        absolute: group_word.starts_with('/'),
                        group: group_word.trim_start_matches('/').to_owned(),
                        option,
                        optional,
                        is_override,
                    },
                    line,
                    index,
                });
            }
            other => {
                return Err(err(
                    None,
                    Some(index),
                    format!("unsupported defaults entry {other}"),
                ))
            }
        }
    }
    Ok(entries)
}

fn merge_own(
    result: &mut Map<String, Value>,
    body: &Map<String, Value>,
    file: &str,
    package: &[String],
    provenance: &mut Provenance,
) {
    record_provenance(body, file, package, "", provenance);
    deep_merge(result, body.clone());
}

fn record_provenance(
    body: &Map<String, Value>,
    file: &str,
    package: &[String],
    prefix: &str,
    provenance: &mut Provenance,
) {
    for (key, value) in body {
        let local = if prefix.is_empty() {
            key.clone()
        } else {
            format!("{prefix}.{key}")
        };
        match value {
            Value::Object(inner) if !inner.is_empty() => {
                record_provenance(inner, file, package, &local, provenance)
            }
            _ => {
                let mut full = package.join(".");
                if !full.is_empty() {
                    full.push('.');
                }
                full.push_str(&local);
                provenance.insert(full, (file.to_owned(), local));
            }
        }
    }
}

/// Merges `overlay` into `base`: mappings merge key by key, anything else replaces.
pub fn deep_merge(base: &mut Map<String, Value>, overlay: Map<String, Value>) {
    for (key, value) in overlay {
        match (base.get_mut(&key), value) {
            (Some(Value::Object(existing)), Value::Object(incoming)) => {
                deep_merge(existing, incoming)
            }
            (_, value) => {
                base.insert(key, value);
            }
        }
    }
}

/// A `defaults` entry that leads out of the catalog: refused, and nothing out there is
/// named or listed.
fn outside_catalog(file: &str, line: Option<u32>, index: usize, entry: &str) -> ComposeError {
    ComposeError {
        file: file.to_owned(),
        line,
        key: Some(format!("defaults[{index}]")),
        code: "outside_catalog",
        message: format!(
            "`{entry}` leads out of the catalog: defaults name files and groups under the \
             catalog's root, without `..`, a leading `/` path or a symlink out"
        ),
        fix: None,
    }
}
