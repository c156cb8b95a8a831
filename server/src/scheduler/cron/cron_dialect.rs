//! The cron dialect of schedules: standard 5-field cron (minute hour day-of-month month
//! day-of-week, UTC; day of week 0-7 with 0 and 7 Sunday, or SUN-SAT), the shorthands
//! `@hourly`, `@daily`, `@weekly`, `@monthly`, `@yearly`, and the forms with a leading seconds
//! field. Errors speak of the fields the user wrote, never of the `cron` crate's own dialect.

use std::str::FromStr;

use chrono::{DateTime, Utc};

use crate::scheduler::{Result, SchedulerError};

/// One field of a cron expression: its name in messages, its range, and the names it
/// accepts for its numbers (`JAN` = 1, `SUN` = 0).
struct CronField {
    name: &'static str,
    min: u32,
    max: u32,
    names: &'static [&'static str],
    /// Added to a name's index to get its number.
    first_named: u32,
}

const fn numeric(name: &'static str, min: u32, max: u32) -> CronField {
    CronField {
        name,
        min,
        max,
        names: &[],
        first_named: 0,
    }
}

const SECOND: CronField = numeric("second", 0, 59);
const MINUTE: CronField = numeric("minute", 0, 59);
const HOUR: CronField = numeric("hour", 0, 23);
const DAY_OF_MONTH: CronField = numeric("day-of-month", 1, 31);
const MONTH: CronField = CronField {
    name: "month",
    min: 1,
    max: 12,
    names: &[
        "JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC",
    ],
    first_named: 1,
};
/// Standard cron's day of week: 0 to 7, where 0 and 7 are Sunday.
const DAY_OF_WEEK: CronField = CronField {
    name: "day-of-week",
    min: 0,
    max: 7,
    names: &["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"],
    first_named: 0,
};
const YEAR: CronField = numeric("year", 1970, 2099);

/// What the user may write: five fields, the crate's six (seconds first) or seven (and a
/// year), or a shorthand, which stands for five fields.
const FIVE: &[&CronField] = &[&MINUTE, &HOUR, &DAY_OF_MONTH, &MONTH, &DAY_OF_WEEK];
const SIX: &[&CronField] = &[&SECOND, &MINUTE, &HOUR, &DAY_OF_MONTH, &MONTH, &DAY_OF_WEEK];
const SEVEN: &[&CronField] = &[
    &SECOND,
    &MINUTE,
    &HOUR,
    &DAY_OF_MONTH,
    &MONTH,
    &DAY_OF_WEEK,
    &YEAR,
];
const SHORTHANDS: &[(&str, &str)] = &[
    ("@yearly", "0 0 1 1 *"),
    ("@annually", "0 0 1 1 *"),
    ("@monthly", "0 0 1 * *"),
    ("@weekly", "0 0 * * 0"),
    ("@daily", "0 0 * * *"),
    ("@midnight", "0 0 * * *"),
    ("@hourly", "0 * * * *"),
];
const NEEDS_FIVE: &str = "cron needs 5: minute hour day-of-month month day-of-week (or @daily, @hourly, @weekly, @monthly, @yearly)";

/// Parses standard 5-field cron (minute hour day-of-month month day-of-week, UTC; day of week
/// 0-7 with 0 and 7 Sunday, or SUN-SAT), the shorthands `@hourly`, `@daily`, `@weekly`,
/// `@monthly`, `@yearly`, and the forms with a leading seconds field (6 fields, or 7 with a
/// year). Every field is checked here, so an error speaks of the fields the user wrote, never
/// of the `cron` crate's own dialect; the crate then gets the values spelled out (its day of
/// week counts 1-7 from Sunday).
pub fn parse_cron(expr: &str) -> Result<cron::Schedule> {
    // The document's pattern admits the expression's shape; what is wrong with it now is a
    // value (out of range, a bad name), which no schema can say.
    let invalid = |message: String| SchedulerError::unprocessable("invalid_cron", message);
    let trimmed = expr.trim();
    let written = if trimmed.starts_with('@') {
        SHORTHANDS
            .iter()
            .find(|(name, _)| trimmed.eq_ignore_ascii_case(name))
            .map(|(_, five)| *five)
            .ok_or_else(|| {
                invalid(format!(
                    "`{expr}` is not a cron shorthand: use @daily, @hourly, @weekly, @monthly or @yearly, or 5 fields: minute hour day-of-month month day-of-week"
                ))
            })?
    } else {
        trimmed
    };
    let words: Vec<&str> = written.split_whitespace().collect();
    let fields = match words.len() {
        5 => FIVE,
        6 => SIX,
        7 => SEVEN,
        1 => return Err(invalid(format!("`{expr}` has 1 field; {NEEDS_FIVE}"))),
        n => return Err(invalid(format!("`{expr}` has {n} fields; {NEEDS_FIVE}"))),
    };
    let legend = fields.iter().map(|f| f.name).collect::<Vec<_>>().join(" ");
    let mut spelled = Vec::with_capacity(7);
    if fields.len() == 5 {
        spelled.push("0".to_owned());
    }
    for (word, field) in words.iter().zip(fields) {
        let values = cron_values(word, field)
            .map_err(|problem| invalid(format!("{problem} in `{expr}` (fields: {legend})")))?;
        spelled.push(match values {
            None => "*".to_owned(),
            Some(values) if field.name == DAY_OF_WEEK.name => values
                .iter()
                .map(|day| (day % 7 + 1) as u8)
                .collect::<std::collections::BTreeSet<_>>()
                .iter()
                .map(u8::to_string)
                .collect::<Vec<_>>()
                .join(","),
            Some(values) => values
                .iter()
                .map(u32::to_string)
                .collect::<Vec<_>>()
                .join(","),
        });
    }
    let schedule = cron::Schedule::from_str(&spelled.join(" ")).map_err(|e| {
        invalid(format!(
            "`{expr}` is not a schedule podq can run ({e}) (fields: {legend})"
        ))
    })?;
    if schedule.upcoming(Utc).next().is_none() {
        return Err(invalid(format!(
            "`{expr}` never fires: no date has that day-of-month in that month, or that day-of-month on that day-of-week (fields: {legend}; when both days are given, a day must match both)"
        )));
    }
    Ok(schedule)
}

/// The values one field selects, or `None` for every value (`*`, and `?` in the day fields).
fn cron_values(
    word: &str,
    field: &CronField,
) -> std::result::Result<Option<std::collections::BTreeSet<u32>>, String> {
    let name = field.name;
    let day_field = name == DAY_OF_MONTH.name || name == DAY_OF_WEEK.name;
    if word == "*" || (word == "?" && day_field) {
        return Ok(None);
    }
    let value = |token: &str| -> std::result::Result<u32, String> {
        let number = match token.parse::<u32>() {
            Ok(n) => n,
            Err(_) => match field
                .names
                .iter()
                .position(|n| n.eq_ignore_ascii_case(token))
            {
                Some(i) => i as u32 + field.first_named,
                None if field.names.is_empty() => {
                    return Err(format!(
                        "{name} `{token}` is not a number from {} to {}",
                        field.min, field.max
                    ))
                }
                None => {
                    return Err(format!(
                        "{name} `{token}` is not a number from {} to {} or a name {}-{}",
                        field.min,
                        field.max,
                        field.names[0],
                        field.names[field.names.len() - 1]
                    ))
                }
            },
        };
        if number < field.min || number > field.max {
            let sunday = if name == DAY_OF_WEEK.name {
                " (0 and 7 are Sunday)"
            } else {
                ""
            };
            return Err(format!(
                "{name} {number} is out of range {}-{}{sunday}",
                field.min, field.max
            ));
        }
        Ok(number)
    };
    let mut values = std::collections::BTreeSet::new();
    for item in word.split(',') {
        if item.is_empty() {
            return Err(format!("{name} `{word}` has an empty item in its list"));
        }
        let (span, step) = match item.split_once('/') {
            Some((span, step)) => match step.parse::<u32>() {
                Ok(step) if step >= 1 => (span, Some(step)),
                _ => {
                    return Err(format!(
                        "{name} step `/{step}` must be a whole number of at least 1"
                    ))
                }
            },
            None => (item, None),
        };
        let (low, high) = if span == "*" {
            // `*/2` in the day of week is every other day from Sunday; 7 would repeat it.
            let max = if name == DAY_OF_WEEK.name {
                6
            } else {
                field.max
            };
            (field.min, max)
        } else if let Some((low, high)) = span.split_once('-') {
            let (low, high) = (value(low)?, value(high)?);
            if low > high {
                return Err(format!(
                    "{name} range `{span}` runs backwards; write the lower bound first"
                ));
            }
            (low, high)
        } else {
            let point = value(span)?;
            // `5/15` is every 15th from 5, as in Vixie cron.
            (point, if step.is_some() { field.max } else { point })
        };
        values.extend((low..=high).step_by(step.unwrap_or(1) as usize));
    }
    Ok(Some(values))
}

/// When `expr` next fires after `after`, in ms since the epoch.
pub fn next_after(expr: &str, after: DateTime<Utc>) -> Option<i64> {
    parse_cron(expr)
        .ok()?
        .after(&after)
        .next()
        .map(|t| t.timestamp_millis())
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::{Datelike, TimeZone, Timelike};

    fn message(expr: &str) -> String {
        match parse_cron(expr) {
            Ok(_) => panic!("`{expr}` parsed"),
            Err(e) => e.to_string(),
        }
    }

    const FIELDS: &str = "(fields: minute hour day-of-month month day-of-week)";

    #[test]
    fn errors_speak_of_the_five_fields_written() {
        assert_eq!(
            message("0 25 * * *"),
            format!("hour 25 is out of range 0-23 in `0 25 * * *` {FIELDS}")
        );
        assert_eq!(
            message("0 3 * *"),
            "`0 3 * *` has 4 fields; cron needs 5: minute hour day-of-month month day-of-week (or @daily, @hourly, @weekly, @monthly, @yearly)"
        );
        assert_eq!(
            message("61 * * * *"),
            format!("minute 61 is out of range 0-59 in `61 * * * *` {FIELDS}")
        );
        assert_eq!(
            message("0 0 0 * *"),
            format!("day-of-month 0 is out of range 1-31 in `0 0 0 * *` {FIELDS}")
        );
        assert_eq!(
            message("0 0 * 13 *"),
            format!("month 13 is out of range 1-12 in `0 0 * 13 *` {FIELDS}")
        );
        assert_eq!(
            message("0 0 * * 8"),
            format!(
                "day-of-week 8 is out of range 0-7 (0 and 7 are Sunday) in `0 0 * * 8` {FIELDS}"
            )
        );
        assert_eq!(
            message("0 0 * FOO *"),
            format!("month `FOO` is not a number from 1 to 12 or a name JAN-DEC in `0 0 * FOO *` {FIELDS}")
        );
        assert_eq!(
            message("*/0 * * * *"),
            format!(
                "minute step `/0` must be a whole number of at least 1 in `*/0 * * * *` {FIELDS}"
            )
        );
        assert_eq!(
            message("0 5-2 * * *"),
            format!("hour range `5-2` runs backwards; write the lower bound first in `0 5-2 * * *` {FIELDS}")
        );
        assert!(message("@dayly").contains("@daily"));
        assert!(message("0 0 30 2 *").contains("never fires"));
        // The seconds form names its seconds field.
        assert_eq!(
            message("60 * * * * *"),
            "second 60 is out of range 0-59 in `60 * * * * *` (fields: second minute hour day-of-month month day-of-week)"
        );
        for expr in ["0 25 * * *", "0 3 * *", "0 0 * * 8", "x * * * *"] {
            let text = message(expr);
            assert!(
                !text.contains("Hours") && !text.contains("0 0 25"),
                "no trace of the crate's dialect: {text}"
            );
        }
    }

    fn next(expr: &str, after: DateTime<Utc>) -> DateTime<Utc> {
        parse_cron(expr).unwrap().after(&after).next().unwrap()
    }

    #[test]
    fn accepts_standard_cron_with_its_meaning() {
        // 2025-01-01 was a Wednesday.
        let start = Utc.with_ymd_and_hms(2025, 1, 1, 12, 0, 0).unwrap();
        let at = next("0 3 * * *", start);
        assert_eq!((at.day(), at.hour(), at.minute()), (2, 3, 0));
        // Day of week as cron counts it: 1 is Monday, 0 and 7 are Sunday.
        assert_eq!(next("0 3 * * 1", start).weekday(), chrono::Weekday::Mon);
        assert_eq!(next("0 3 * * 0", start).weekday(), chrono::Weekday::Sun);
        assert_eq!(next("0 3 * * 7", start).weekday(), chrono::Weekday::Sun);
        assert_eq!(next("0 3 * * sat", start).weekday(), chrono::Weekday::Sat);
        assert_eq!(next("0 3 * * 5-7", start).weekday(), chrono::Weekday::Fri);
        assert_eq!(next("*/15 * * * *", start).minute(), 15);
        assert_eq!(next("5/20 * * * *", start).minute(), 5);
        assert_eq!(next("0 0 1 jan *", start).month(), 1);
        // Shorthands.
        assert_eq!(
            next("@daily", start),
            Utc.with_ymd_and_hms(2025, 1, 2, 0, 0, 0).unwrap()
        );
        assert_eq!(next("@hourly", start).hour(), 13);
        assert_eq!(next("@weekly", start).weekday(), chrono::Weekday::Sun);
        assert_eq!(next("@monthly", start).day(), 1);
        assert_eq!(next("@yearly", start).year(), 2026);
        // The seconds form, and a year.
        assert_eq!(next("30 * * * * *", start).second(), 30);
        assert_eq!(next("0 0 0 1 1 * 2030", start).year(), 2030);
    }
}
