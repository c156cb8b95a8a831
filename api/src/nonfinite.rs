//! Metric values that JSON cannot carry. A trainer whose loss became NaN or infinite must say
//! so rather than go quiet, but JSON has no NaN or Infinity. podq writes them as
//! the strings `"NaN"`, `"Infinity"` and `"-Infinity"` (JavaScript's `String(x)` of each, so
//! the dashboard can `Number()` them back) everywhere a metric value travels: the trainer's
//! `PODQ` lines, the worker's batches and the API's answers. A finite value stays a number.
//!
//! Use with `#[serde(with = "podq_api::nonfinite")]` on an `f64`, or
//! `#[serde(with = "podq_api::nonfinite::map")]` on a `BTreeMap<String, f64>`.

use serde::de::{self, Deserializer, Visitor};
use serde::{Deserialize, Serialize, Serializer};

pub const NAN: &str = "NaN";
pub const INFINITY: &str = "Infinity";
pub const NEG_INFINITY: &str = "-Infinity";

/// The marker of a non-finite value; `None` for a finite one.
pub fn marker(value: f64) -> Option<&'static str> {
    if value.is_nan() {
        Some(NAN)
    } else if value == f64::INFINITY {
        Some(INFINITY)
    } else if value == f64::NEG_INFINITY {
        Some(NEG_INFINITY)
    } else {
        None
    }
}

/// The value a marker stands for. Python's own spellings (`nan`, `inf`, `-inf`) are read too,
/// in any case: a trainer that formats its values by hand writes those.
pub fn parse_marker(text: &str) -> Option<f64> {
    match text.trim().to_ascii_lowercase().as_str() {
        "nan" => Some(f64::NAN),
        "infinity" | "inf" | "+infinity" | "+inf" => Some(f64::INFINITY),
        "-infinity" | "-inf" => Some(f64::NEG_INFINITY),
        _ => None,
    }
}

pub fn serialize<S: Serializer>(value: &f64, serializer: S) -> Result<S::Ok, S::Error> {
    match marker(*value) {
        Some(marker) => serializer.serialize_str(marker),
        None => serializer.serialize_f64(*value),
    }
}

pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<f64, D::Error> {
    deserializer.deserialize_any(ValueVisitor)
}

/// A metric value as it is written: a number or a marker.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Number(pub f64);

impl Serialize for Number {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serialize(&self.0, serializer)
    }
}

impl<'de> Deserialize<'de> for Number {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserialize(deserializer).map(Number)
    }
}

struct ValueVisitor;

impl Visitor<'_> for ValueVisitor {
    type Value = f64;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a number, or \"NaN\", \"Infinity\" or \"-Infinity\"")
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<f64, E> {
        Ok(v)
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<f64, E> {
        Ok(v as f64)
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<f64, E> {
        Ok(v as f64)
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<f64, E> {
        parse_marker(v).ok_or_else(|| E::invalid_value(de::Unexpected::Str(v), &self))
    }
}

/// For a `BTreeMap<String, f64>` of metric values.
pub mod map {
    use std::collections::BTreeMap;

    use serde::ser::SerializeMap;
    use serde::{Deserialize, Deserializer, Serializer};

    use super::Number;

    pub fn serialize<S: Serializer>(
        values: &BTreeMap<String, f64>,
        serializer: S,
    ) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(values.len()))?;
        for (name, value) in values {
            map.serialize_entry(name, &Number(*value))?;
        }
        map.end()
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<BTreeMap<String, f64>, D::Error> {
        let values = BTreeMap::<String, Number>::deserialize(deserializer)?;
        Ok(values.into_iter().map(|(k, Number(v))| (k, v)).collect())
    }
}

/// The OpenAPI schema of a metric value: a number or one of the three markers. Only a
/// schema: the values themselves are `f64`s written by this module's functions.
#[cfg(feature = "openapi")]
#[derive(Serialize, utoipa::ToSchema)]
#[serde(untagged)]
#[schema(as = MetricNumber)]
pub enum MetricNumberSchema {
    Number(f64),
    Marker(NonFiniteMarker),
}

#[cfg(feature = "openapi")]
#[derive(Serialize, utoipa::ToSchema)]
pub enum NonFiniteMarker {
    #[serde(rename = "NaN")]
    NaN,
    #[serde(rename = "Infinity")]
    Infinity,
    #[serde(rename = "-Infinity")]
    NegInfinity,
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use serde::{Deserialize, Serialize};

    #[derive(Debug, Serialize, Deserialize)]
    struct Step {
        #[serde(with = "crate::nonfinite::map")]
        values: BTreeMap<String, f64>,
        #[serde(with = "crate::nonfinite")]
        one: f64,
    }

    #[test]
    fn non_finite_values_travel_as_markers_and_finite_ones_as_numbers() {
        let step = Step {
            values: [
                ("a".to_owned(), f64::NAN),
                ("b".to_owned(), f64::INFINITY),
                ("c".to_owned(), f64::NEG_INFINITY),
                ("d".to_owned(), 0.5),
            ]
            .into(),
            one: 2.0,
        };
        let text = serde_json::to_string(&step).unwrap();
        assert_eq!(
            text,
            r#"{"values":{"a":"NaN","b":"Infinity","c":"-Infinity","d":0.5},"one":2.0}"#
        );
        let back: Step = serde_json::from_str(&text).unwrap();
        assert!(back.values["a"].is_nan());
        assert_eq!(back.values["b"], f64::INFINITY);
        assert_eq!(back.values["c"], f64::NEG_INFINITY);
        assert_eq!(back.values["d"], 0.5);
    }

    #[test]
    fn python_spellings_are_read_and_other_strings_refused() {
        let read = |v: &str| {
            serde_json::from_str::<Step>(&format!(r#"{{"values":{{"x":{v}}},"one":1}}"#))
                .map(|s| s.values["x"])
        };
        assert!(read(r#""nan""#).unwrap().is_nan());
        assert_eq!(read(r#""-inf""#).unwrap(), f64::NEG_INFINITY);
        assert_eq!(read("3").unwrap(), 3.0);
        assert!(read(r#""high""#).is_err());
        assert!(read("null").is_err());
    }
}
