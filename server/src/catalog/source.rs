//! Reading YAML config files: bounded parsing into JSON values, with enough of the text kept
//! to point a person at the line of a key.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use serde_json::{Map, Number, Value};

/// Limits that keep a hostile or broken YAML document from exhausting the server. serde_yaml
/// itself stops alias expansion ("billion laughs") and nesting past 128; these are tighter.
pub const MAX_YAML_BYTES: usize = 256 * 1024;
pub const MAX_YAML_DEPTH: usize = 32;
pub const MAX_YAML_NODES: usize = 100_000;

#[derive(Debug, Clone, PartialEq)]
pub struct YamlError {
    pub code: &'static str,
    pub message: String,
    pub line: Option<u32>,
}

/// Parses one YAML document whose top level is a mapping (or empty) into JSON.
pub fn parse_yaml_mapping(text: &str) -> Result<Map<String, Value>, YamlError> {
    if text.len() > MAX_YAML_BYTES {
        return Err(YamlError {
            code: "yaml_too_large",
            message: format!(
                "document is {} bytes; the limit is {MAX_YAML_BYTES}",
                text.len()
            ),
            line: None,
        });
    }
    let yaml: serde_yaml::Value = serde_yaml::from_str(text).map_err(|e| YamlError {
        code: "yaml_syntax",
        line: e.location().map(|l| l.line() as u32),
        message: e.to_string(),
    })?;
    let mut nodes = 0;
    match yaml_to_json(yaml, 0, &mut nodes)? {
        Value::Null => Ok(Map::new()),
        Value::Object(map) => Ok(map),
        _ => Err(YamlError {
            code: "not_a_mapping",
            message: "the top level of a config must be a mapping of keys to values".into(),
            line: Some(1),
        }),
    }
}

fn yaml_to_json(
    yaml: serde_yaml::Value,
    depth: usize,
    nodes: &mut usize,
) -> Result<Value, YamlError> {
    *nodes += 1;
    if *nodes > MAX_YAML_NODES {
        return Err(YamlError {
            code: "yaml_too_large",
            message: format!("document has more than {MAX_YAML_NODES} values"),
            line: None,
        });
    }
    if depth > MAX_YAML_DEPTH {
        return Err(YamlError {
            code: "yaml_too_deep",
            message: format!("document nests deeper than {MAX_YAML_DEPTH} levels"),
            line: None,
        });
    }
    Ok(match yaml {
        serde_yaml::Value::Null => Value::Null,
        serde_yaml::Value::Bool(b) => Value::Bool(b),
        serde_yaml::Value::Number(n) => {
            if let Some(i) = n.as_i64() {
                Value::Number(i.into())
            } else if let Some(u) = n.as_u64() {
                Value::Number(u.into())
            } else {
                let f = n.as_f64().unwrap_or(f64::NAN);
                Number::from_f64(f).map(Value::Number).ok_or(YamlError {
                    code: "yaml_value",
                    message: format!("{f} is not a finite number"),
                    line: None,
                })?
            }
        }
        serde_yaml::Value::String(s) => Value::String(s),
        serde_yaml::Value::Sequence(items) => Value::Array(
            items
                .into_iter()
                .map(|item| yaml_to_json(item, depth + 1, nodes))
                .collect::<Result<_, _>>()?,
        ),
        serde_yaml::Value::Mapping(mapping) => {
            let mut map = Map::new();
            for (key, value) in mapping {
                let key = match key {
                    serde_yaml::Value::String(s) => s,
                    serde_yaml::Value::Number(n) => n.to_string(),
                    serde_yaml::Value::Bool(b) => b.to_string(),
                    other => {
                        return Err(YamlError {
                            code: "yaml_value",
                            message: format!("mapping key {other:?} is not a string"),
                            line: None,
                        })
                    }
                };
                map.insert(key, yaml_to_json(value, depth + 1, nodes)?);
            }
            Value::Object(map)
        }
        serde_yaml::Value::Tagged(tagged) => yaml_to_json(tagged.value, depth, nodes)?,
    })
}

/// A loaded config file.
#[derive(Debug, Clone)]
pub struct SourceFile {
    /// Path relative to the catalog root, for messages.
    pub rel_path: String,
    pub text: String,
    pub value: Map<String, Value>,
}

/// The files of one catalog root, each read and parsed at most once.
pub struct SourceFiles {
    root: PathBuf,
    cache: HashMap<PathBuf, Result<SourceFile, YamlError>>,
    /// Documents that exist only in memory (a request body being validated).
    virtual_files: HashMap<PathBuf, String>,
}

impl SourceFiles {
    pub fn new(root: &Path) -> Self {
        SourceFiles {
            root: root.to_path_buf(),
            cache: HashMap::new(),
            virtual_files: HashMap::new(),
        }
    }

    pub fn add_virtual(&mut self, rel: &Path, text: &str) {
        self.virtual_files
            .insert(rel.to_path_buf(), text.to_owned());
    }

    pub fn exists(&self, rel: &Path) -> bool {
        self.virtual_files.contains_key(rel) || self.inside(rel).is_some_and(|p| p.is_file())
    }

    pub fn is_dir(&self, rel: &Path) -> bool {
        self.inside(rel).is_some_and(|p| p.is_dir())
    }

    /// Whether `rel` leaves the catalog: absolute, through `..`, or through a symlink that
    /// points out of the root. Nothing outside is read, listed or said to exist.
    pub fn outside(&self, rel: &Path) -> bool {
        !self.virtual_files.contains_key(rel) && self.inside(rel).is_none()
    }

    /// `rel` under the root, resolved, when it stays there (symlinks included). A path that
    /// does not exist is judged by its deepest part that does, so that a missing file behind
    /// a symlink out reads as outside, as an existing one does: nothing tells what is there.
    fn inside(&self, rel: &Path) -> Option<PathBuf> {
        use std::path::Component;
        if !rel
            .components()
            .all(|c| matches!(c, Component::Normal(_) | Component::CurDir))
        {
            return None;
        }
        let path = self.root.join(rel);
        let Ok(root) = self.root.canonicalize() else {
            // No catalog on disk (documents in memory only): nothing there to reach.
            return Some(path);
        };
        let existing = path.ancestors().find(|p| p.exists())?;
        let real = existing.canonicalize().ok()?;
        if !real.starts_with(&root) {
            return None;
        }
        // (Joining an empty rest would add a trailing `/`, which a file's path must not have.)
        match path.strip_prefix(existing) {
            Ok(rest) if !rest.as_os_str().is_empty() => Some(real.join(rest)),
            _ => Some(real),
        }
    }

    /// The option names of a config group directory, sorted.
    pub fn options(&self, rel_dir: &Path) -> Vec<String> {
        let Some(dir) = self.inside(rel_dir) else {
            return Vec::new();
        };
        let mut names: Vec<String> = std::fs::read_dir(dir)
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|entry| {
                let path = entry.path();
                (path.extension()? == "yaml")
                    .then(|| path.file_stem()?.to_str().map(str::to_owned))
                    .flatten()
            })
            .collect();
        names.sort();
        names
    }

    pub fn load(&mut self, rel: &Path) -> Result<&SourceFile, YamlError> {
        let inside = self.inside(rel);
        let in_memory = self.virtual_files.get(rel).cloned();
        self.cache
            .entry(rel.to_path_buf())
            .or_insert_with(|| {
                let text = match in_memory {
                    Some(text) => text,
                    None => {
                        let path = inside.ok_or_else(|| YamlError {
                            code: "outside_catalog",
                            message: format!("{} is outside the catalog", rel.display()),
                            line: None,
                        })?;
                        std::fs::read_to_string(path).map_err(|e| YamlError {
                            code: "unreadable_file",
                            message: format!("cannot read {}: {e}", rel.display()),
                            line: None,
                        })?
                    }
                };
                let value = parse_yaml_mapping(&text)?;
                Ok(SourceFile {
                    rel_path: rel.display().to_string(),
                    text,
                    value,
                })
            })
            .as_ref()
            .map_err(Clone::clone)
    }

    /// The text of a file already loaded, for line look-ups.
    pub fn text_of(&self, rel: &str) -> Option<&str> {
        self.cache
            .get(Path::new(rel))
            .and_then(|r| r.as_ref().ok())
            .map(|f| f.text.as_str())
    }

    /// The line a finding about a whole file points at: its first line that is neither blank
    /// nor a comment (where its content starts), or 1.
    pub fn whole_file_line(&self, rel: &str) -> u32 {
        self.any_text(rel)
            .and_then(|t| first_content_line(&t))
            .unwrap_or(1)
    }

    /// The line of a dotted key in a file, loaded or not.
    pub fn line_of_key(&self, rel: &str, dotted: &str) -> Option<u32> {
        line_of_key(&self.any_text(rel)?, dotted)
    }

    fn any_text(&self, rel: &str) -> Option<String> {
        match self.text_of(rel) {
            Some(text) => Some(text.to_owned()),
            None => self
                .virtual_files
                .get(Path::new(rel))
                .cloned()
                .or_else(|| std::fs::read_to_string(self.inside(Path::new(rel))?).ok()),
        }
    }
}

/// The 1-based line of the first line outside a comment containing `needle`.
pub fn line_of(text: &str, needle: &str) -> Option<u32> {
    text.lines()
        .position(|line| !line.trim_start().starts_with('#') && line.contains(needle))
        .map(|i| i as u32 + 1)
}

/// The 1-based line of the first line that is neither blank nor a comment.
pub fn first_content_line(text: &str) -> Option<u32> {
    text.lines()
        .position(|line| {
            let line = line.trim_start();
            !line.is_empty() && !line.starts_with('#')
        })
        .map(|i| i as u32 + 1)
}

/// The 1-based line where the dotted key path is defined in block-style YAML.
pub fn line_of_key(text: &str, dotted: &str) -> Option<u32> {
    let wanted: Vec<&str> = dotted.split('.').collect();
    let mut stack: Vec<(usize, String)> = Vec::new();
    for (index, line) in text.lines().enumerate() {
        let trimmed = line.trim_start();
        if trimmed.is_empty() || trimmed.starts_with('#') || trimmed.starts_with('-') {
            continue;
        }
        let Some((key, _)) = trimmed.split_once(':') else {
            continue;
        };
        let key = key.trim().trim_matches(|c| c == '"' || c == '\'');
        let indent = line.len() - trimmed.len();
        while stack.last().is_some_and(|(i, _)| *i >= indent) {
            stack.pop();
        }
        stack.push((indent, key.to_owned()));
        if stack.len() == wanted.len() && stack.iter().zip(&wanted).all(|((_, a), b)| a == b) {
            return Some(index as u32 + 1);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_nested_key_lines() {
        let text = "a: 1\narch:\n  # comment\n  hidden_size: 512\n  loss:\n    name: x\nb: 2\n";
        assert_eq!(line_of_key(text, "arch.hidden_size"), Some(4));
        assert_eq!(line_of_key(text, "arch.loss.name"), Some(6));
        assert_eq!(line_of_key(text, "b"), Some(7));
        assert_eq!(line_of_key(text, "missing"), None);
    }

    #[test]
    fn lines_skip_comments() {
        let text = "# @package _global_\n# uses /baseline\n\ndefaults:\n  - /baseline\n";
        assert_eq!(line_of(text, "/baseline"), Some(5));
        assert_eq!(first_content_line(text), Some(4));
        assert_eq!(first_content_line("# only a comment\n"), None);
    }

    #[test]
    fn rejects_alias_bombs_and_deep_nesting() {
        let mut bomb =
            String::from("a: &a [\"x\",\"x\",\"x\",\"x\",\"x\",\"x\",\"x\",\"x\",\"x\"]\n");
        let mut prev = 'a';
        for name in 'b'..='k' {
            bomb.push_str(&format!(
                "{name}: &{name} [*{prev},*{prev},*{prev},*{prev},*{prev},*{prev},*{prev},*{prev},*{prev}]\n"
            ));
            prev = name;
        }
        assert!(parse_yaml_mapping(&bomb).is_err());
        let deep = format!("a: {}1{}", "[".repeat(1000), "]".repeat(1000));
        assert!(parse_yaml_mapping(&deep).is_err());
    }

    #[test]
    fn reports_syntax_error_lines() {
        let err = parse_yaml_mapping("a: 1\nb: [1, 2\nc: 3\n").unwrap_err();
        assert_eq!(err.code, "yaml_syntax");
        assert!(err.line.is_some());
    }
}
