//! Times as requests send them: RFC 3339 with a `T` between date and time and no leap second,
//! as the OpenAPI document's `date-time` pattern says. chrono alone also takes a space there,
//! and a `:60`.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Deserializer};

/// Parses `text` as an RFC 3339 date and time with `T` (or `t`) between date and time.
pub fn parse_rfc3339(text: &str) -> Result<DateTime<Utc>, String> {
    // A leap second (`:60`) is refused: chrono would fold it into the next second, and
    // JSON Schema's `date-time` allows it only at 23:59 UTC.
    if !matches!(text.as_bytes().get(10), Some(b'T' | b't')) || text.get(17..19) == Some("60") {
        return Err(format!(
            "`{text}` is not an RFC 3339 time such as 2026-12-23T00:00:00Z"
        ));
    }
    DateTime::parse_from_rfc3339(text)
        .map(|t| t.with_timezone(&Utc))
        .map_err(|e| format!("`{text}` is not an RFC 3339 time such as 2026-12-23T00:00:00Z: {e}"))
}

/// `#[serde(deserialize_with = "time::rfc3339")]`
pub fn rfc3339<'de, D: Deserializer<'de>>(deserializer: D) -> Result<DateTime<Utc>, D::Error> {
    let text = String::deserialize(deserializer)?;
    parse_rfc3339(&text).map_err(serde::de::Error::custom)
}

/// `#[serde(default, deserialize_with = "time::optional_rfc3339")]`
pub fn optional_rfc3339<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<DateTime<Utc>>, D::Error> {
    Option::<String>::deserialize(deserializer)?
        .map(|text| parse_rfc3339(&text).map_err(serde::de::Error::custom))
        .transpose()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_t_separates_date_and_time() {
        assert!(parse_rfc3339("2026-12-23T00:00:00Z").is_ok());
        assert!(parse_rfc3339("2026-12-23t00:00:00+01:00").is_ok());
        assert!(parse_rfc3339("2026-12-23 00:00:00Z").is_err());
        assert!(parse_rfc3339("2026-13-23T00:00:00Z").is_err());
        assert!(parse_rfc3339("").is_err());
        assert!(parse_rfc3339("2026-12-23T22:05:60Z").is_err());
    }
}
