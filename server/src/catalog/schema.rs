//! The trainer's config schema (TRM `PretrainConfig`, a pydantic model), checked before a
//! config is allowed to occupy the pod for days.

use serde_json::{Map, Value};

use podq_api::Severity;

#[derive(Debug, Clone, PartialEq)]
pub struct SchemaIssue {
    pub severity: Severity,
    pub code: &'static str,
    /// Dotted key path.
    pub key: String,
    pub message: String,
}

#[derive(Clone, Copy)]
enum Kind {
    Int {
        min: i64,
    },
    /// Inclusive bounds; pydantic accepts an int where a float is expected.
    Float {
        min: f64,
        max: f64,
    },
    Bool,
    Str,
    OptionalStr,
    OneOf(&'static [&'static str]),
    StrList,
    List,
    Mapping,
}

struct Field {
    key: &'static str,
    kind: Kind,
    required: bool,
}

const fn req(key: &'static str, kind: Kind) -> Field {
    Field {
        key,
        kind,
        required: true,
    }
}

const fn opt(key: &'static str, kind: Kind) -> Field {
    Field {
        key,
        kind,
        required: false,
    }
}

const POSITIVE: Kind = Kind::Int { min: 1 };
const NON_NEGATIVE: Kind = Kind::Int { min: 0 };
const UNIT: Kind = Kind::Float { min: 0.0, max: 1.0 };
const NON_NEGATIVE_FLOAT: Kind = Kind::Float {
    min: 0.0,
    max: f64::MAX,
};
const POSITIVE_RATE: Kind = Kind::Float {
    min: f64::MIN_POSITIVE,
    max: f64::MAX,
};

/// The keys the trainer reads at the top level of its config.
const TRAINING_FIELDS: &[Field] = &[
    req("arch", Kind::Mapping),
    req("data_paths", Kind::StrList),
    opt("data_paths_test", Kind::StrList),
    opt("evaluators", Kind::List),
    req("global_batch_size", POSITIVE),
    req("epochs", POSITIVE),
    req("lr", POSITIVE_RATE),
    req("lr_min_ratio", UNIT),
    req("lr_warmup_steps", NON_NEGATIVE),
    req("weight_decay", NON_NEGATIVE_FLOAT),
    req("beta1", UNIT),
    req("beta2", UNIT),
    req("puzzle_emb_lr", POSITIVE_RATE),
    req("puzzle_emb_weight_decay", NON_NEGATIVE_FLOAT),
    opt("project_name", Kind::OptionalStr),
    opt("run_name", Kind::OptionalStr),
    opt("load_checkpoint", Kind::OptionalStr),
    opt("checkpoint_path", Kind::OptionalStr),
    opt("seed", NON_NEGATIVE),
    opt("checkpoint_every_eval", Kind::Bool),
    req("eval_interval", POSITIVE),
    opt("min_eval_interval", NON_NEGATIVE),
    opt("eval_save_outputs", Kind::StrList),
    opt("ema", Kind::Bool),
    opt("ema_rate", UNIT),
    opt("freeze_weights", Kind::Bool),
];

/// The keys the model reads under `arch`.
const ARCH_FIELDS: &[Field] = &[
    req("name", Kind::Str),
    req("loss", Kind::Mapping),
    req("halt_exploration_prob", UNIT),
    req("halt_max_steps", POSITIVE),
    req("H_cycles", POSITIVE),
    req("L_cycles", POSITIVE),
    opt("H_layers", NON_NEGATIVE),
    req("L_layers", POSITIVE),
    req("hidden_size", POSITIVE),
    req("num_heads", POSITIVE),
    req("expansion", POSITIVE_RATE),
    opt("puzzle_emb_ndim", NON_NEGATIVE),
    opt("puzzle_emb_len", NON_NEGATIVE),
    opt("mlp_t", Kind::Bool),
    opt("pos_encodings", Kind::OneOf(&["none", "rope", "learned"])),
    req(
        "forward_dtype",
        Kind::OneOf(&["float32", "bfloat16", "float16"]),
    ),
    opt("no_ACT_continue", Kind::Bool),
];

const LOSS_FIELDS: &[Field] = &[req("name", Kind::Str), opt("loss_type", Kind::Str)];

/// Top-level keys that name a run rather than define its training: not part of its hash.
pub const IDENTITY_KEYS: &[&str] = &[
    "run_name",
    "project_name",
    "checkpoint_path",
    "load_checkpoint",
];

/// Checks `config` against the schema. Ints given for float fields are turned into floats,
/// as pydantic does, so equal configs hash equally. The global batch must divide among the
/// devices of every slice type the run may land on. Returns every issue found.
pub fn validate(config: &mut Map<String, Value>, accelerators: &[String]) -> Vec<SchemaIssue> {
    let mut issues = Vec::new();
    check_fields(config, TRAINING_FIELDS, "", &mut issues);
    if let Some(Value::Object(arch)) = config.get_mut("arch") {
        check_fields(arch, ARCH_FIELDS, "arch.", &mut issues);
        if let Some(Value::Object(loss)) = arch.get_mut("loss") {
            check_fields(loss, LOSS_FIELDS, "arch.loss.", &mut issues);
        }
    }
    check_relations(config, accelerators, &mut issues);
    issues
}

/// Keys present in `config` that the trainer never reads, as dotted paths.
pub fn unread_keys(config: &Map<String, Value>) -> Vec<String> {
    let mut unread: Vec<String> = config
        .keys()
        .filter(|k| !TRAINING_FIELDS.iter().any(|f| f.key == k.as_str()))
        .cloned()
        .collect();
    if let Some(Value::Object(arch)) = config.get("arch") {
        unread.extend(
            arch.keys()
                .filter(|k| !ARCH_FIELDS.iter().any(|f| f.key == k.as_str()))
                .map(|k| format!("arch.{k}")),
        );
    }
    unread
}

/// The schema key an unread key (a dotted path from [`unread_keys`]) was most likely meant to
/// be: a near miss of a key at the same level (`global_batchsize` -> `global_batch_size`,
/// `arch.hiden_size` -> `arch.hidden_size`), or an architecture key written at the top level
/// (`hidden_size` -> `arch.hidden_size`), where the trainer does not look for it.
pub fn near_miss(unread: &str) -> Option<String> {
    if let Some(inner) = unread.strip_prefix("arch.") {
        return crate::names::closest(inner, ARCH_FIELDS.iter().map(|f| f.key))
            .map(|key| format!("arch.{key}"));
    }
    if let Some(key) = crate::names::closest(unread, TRAINING_FIELDS.iter().map(|f| f.key)) {
        return Some(key.to_owned());
    }
    // `name` alone is too common a word to be taken for the model's class name.
    ARCH_FIELDS
        .iter()
        .find(|f| f.key == unread && f.key != "name")
        .map(|f| format!("arch.{}", f.key))
}

/// Every key the trainer reads at the top level, for documentation and suggestions.
pub fn training_keys() -> impl Iterator<Item = &'static str> {
    TRAINING_FIELDS.iter().map(|f| f.key)
}

/// Every key the model reads under `arch`.
pub fn arch_keys() -> impl Iterator<Item = &'static str> {
    ARCH_FIELDS.iter().map(|f| f.key)
}

fn check_fields(
    map: &mut Map<String, Value>,
    fields: &[Field],
    prefix: &str,
    issues: &mut Vec<SchemaIssue>,
) {
    for field in fields {
        let key = format!("{prefix}{}", field.key);
        let Some(value) = map.get_mut(field.key) else {
            if field.required {
                issues.push(SchemaIssue {
                    severity: Severity::Error,
                    code: if field.key == "arch" {
                        "missing_arch"
                    } else {
                        "missing_key"
                    },
                    message: if field.key == "arch" {
                        "the trainer requires the key `arch` (the architecture); it is missing. \
                         A defaults entry `X: name` puts its config under the key `X`, so the \
                         architecture group must be named `arch`"
                            .to_owned()
                    } else {
                        format!("the trainer requires `{key}`; it is missing")
                    },
                    key,
                });
            }
            continue;
        };
        if let Err(message) = check_kind(value, field.kind) {
            issues.push(SchemaIssue {
                severity: Severity::Error,
                code: "invalid_value",
                message: format!("`{key}`: {message}"),
                key,
            });
        }
    }
}

fn check_kind(value: &mut Value, kind: Kind) -> Result<(), String> {
    let describe = |v: &Value| match v {
        Value::Null => "null".to_owned(),
        Value::String(s) => format!("the string {s:?}"),
        other => other.to_string(),
    };
    match kind {
        Kind::Int { min } => match value.as_i64() {
            Some(i) if i >= min => Ok(()),
            Some(i) => Err(format!("must be at least {min}, got {i}")),
            None => Err(format!("must be an integer, got {}", describe(value))),
        },
        Kind::Float { min, max } => match value.as_f64() {
            Some(f) if f >= min && f <= max => {
                if !value.is_f64() {
                    *value = Value::from(f);
                }
                Ok(())
            }
            Some(f) if max == f64::MAX => Err(format!("must be greater than {min}, got {f}")),
            Some(f) => Err(format!("must be between {min} and {max}, got {f}")),
            None => Err(format!("must be a number, got {}", describe(value))),
        },
        Kind::Bool => value
            .is_boolean()
            .then_some(())
            .ok_or_else(|| format!("must be true or false, got {}", describe(value))),
        Kind::Str => value
            .is_string()
            .then_some(())
            .ok_or_else(|| format!("must be a string, got {}", describe(value))),
        Kind::OptionalStr => (value.is_string() || value.is_null())
            .then_some(())
            .ok_or_else(|| format!("must be a string or null, got {}", describe(value))),
        Kind::OneOf(options) => match value.as_str() {
            Some(s) if options.contains(&s) => Ok(()),
            _ => Err(format!(
                "must be one of {}, got {}",
                options.join(", "),
                describe(value)
            )),
        },
        Kind::StrList => match value.as_array() {
            Some(items) if items.iter().all(Value::is_string) => Ok(()),
            _ => Err(format!(
                "must be a list of strings, got {}",
                describe(value)
            )),
        },
        Kind::List => value
            .is_array()
            .then_some(())
            .ok_or_else(|| format!("must be a list, got {}", describe(value))),
        Kind::Mapping => value
            .is_object()
            .then_some(())
            .ok_or_else(|| format!("must be a mapping, got {}", describe(value))),
    }
}

fn check_relations(
    config: &Map<String, Value>,
    accelerators: &[String],
    issues: &mut Vec<SchemaIssue>,
) {
    let int = |map: &Map<String, Value>, key: &str| map.get(key).and_then(Value::as_i64);
    if let Some(batch) = int(config, "global_batch_size") {
        for accelerator in accelerators {
            let devices = podq_api::accelerators::devices_of(accelerator);
            if devices > 0 && batch % i64::from(devices) != 0 {
                issues.push(SchemaIssue {
                    severity: Severity::Error,
                    code: "batch_not_divisible",
                    key: "global_batch_size".into(),
                    message: format!(
                        "global_batch_size {batch} must be divisible by the {devices} devices \
                         of a {accelerator}"
                    ),
                });
            }
        }
    }
    if let (Some(epochs), Some(interval)) = (int(config, "epochs"), int(config, "eval_interval")) {
        if interval > 0 && epochs % interval != 0 {
            issues.push(SchemaIssue {
                severity: Severity::Error,
                code: "eval_interval_not_divisor",
                key: "eval_interval".into(),
                message: format!("eval_interval {interval} must divide epochs {epochs}"),
            });
        }
    }
    if let Some(Value::Object(arch)) = config.get("arch") {
        if let (Some(hidden), Some(heads)) = (int(arch, "hidden_size"), int(arch, "num_heads")) {
            if heads > 0 && hidden % heads != 0 {
                issues.push(SchemaIssue {
                    severity: Severity::Error,
                    code: "heads_not_divisor",
                    key: "arch.num_heads".into(),
                    message: format!(
                        "arch.hidden_size {hidden} must be divisible by arch.num_heads {heads}"
                    ),
                });
            }
        }
    }
    if let Some(Value::Array(paths)) = config.get("data_paths") {
        if paths.is_empty() {
            issues.push(SchemaIssue {
                severity: Severity::Error,
                code: "invalid_value",
                key: "data_paths".into(),
                message: "`data_paths` must name at least one dataset".into(),
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn near_misses_name_the_schema_key() {
        assert_eq!(
            near_miss("global_batchsize").as_deref(),
            Some("global_batch_size")
        );
        assert_eq!(
            near_miss("arch.hiden_size").as_deref(),
            Some("arch.hidden_size")
        );
        assert_eq!(
            near_miss("hidden_size").as_deref(),
            Some("arch.hidden_size")
        );
        assert_eq!(near_miss("ema_rte").as_deref(), Some("ema_rate"));
    }

    #[test]
    fn the_documentation_lists_every_key_the_trainer_reads() {
        let doc = std::fs::read_to_string(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/catalog.md"),
        )
        .unwrap();
        for key in training_keys().chain(arch_keys()) {
            assert!(
                doc.contains(&format!("`{key}`")),
                "docs/catalog.md lacks `{key}`"
            );
        }
    }

    #[test]
    fn keys_the_user_added_on_purpose_are_no_near_misses() {
        // Every extra key of the study's configs: today's trainer ignores them, and they stay
        // warnings.
        for key in [
            "use_tpu",
            "num_workers",
            "save_checkpoint_steps",
            "use_curriculum_recursion",
            "curriculum_start_h_cycles",
            "curriculum_start_l_cycles",
            "curriculum_end_epoch",
            "use_adaptive_halting",
            "halt_exploration_final",
            "arch_config",
            "name",
        ] {
            assert_eq!(near_miss(key), None, "{key}");
        }
    }
}
