//! The canonical hash of a config: the same training config hashes the same whatever its
//! key order or formatting, which is what lets identical runs be deduplicated.

use serde_json::Value;
use sha2::{Digest, Sha256};

/// sha256 of the canonical JSON (keys sorted at every level, no spaces).
pub fn sha256_canonical(value: &Value) -> String {
    let mut out = String::new();
    write_canonical(value, &mut out);
    hex::encode(Sha256::digest(out.as_bytes()))
}

fn write_canonical(value: &Value, out: &mut String) {
    match value {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            out.push('{');
            for (i, key) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String(key.clone()).to_string());
                out.push(':');
                write_canonical(&map[key], out);
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_canonical(item, out);
            }
            out.push(']');
        }
        other => out.push_str(&other.to_string()),
    }
}
