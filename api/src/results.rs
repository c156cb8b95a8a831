//! Results out: a study's rows as a table for a notebook
//! (`GET /api/v1/results`, `/groups/{name}/results`, and their `.csv`), and a run's metric
//! series in long format (`GET /api/v1/jobs/{id}/metrics.csv` and `.ndjson`).
//!
//! The table's layout (its columns and each row's cells) and the two rules every reader of a
//! metric shares (which value is the best; how a non-finite value is written) live here, once,
//! so the server's CSV, the CLI's JSON and the study view cannot disagree.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::ids::JobId;

/// Whether a smaller value of the metric `name` is better: its name says it measures a loss,
/// an error or a perplexity (`train/lm_loss`, `eval/error_rate`, `eval/perplexity`). Every
/// other metric (accuracy, reward, throughput, ...) is better larger. The one rule for
/// "best" in podq: the study's `best` column, `results.csv`'s `<metric>.best`.
pub fn lower_is_better(name: &str) -> bool {
    let name = name.to_ascii_lowercase();
    ["loss", "error", "perplexity"]
        .iter()
        .any(|word| name.contains(word))
}

/// The results of a group (or of the whole suite): one row per experiment of the catalog.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Results {
    /// The group, or null for the whole suite.
    pub group: Option<String>,
    /// The config keys (dotted) that vary: those the study view shows, for the whole suite
    /// the union of every group's.
    pub params: Vec<String>,
    /// The eval metrics (`eval/...`) any row recorded, sorted.
    pub metrics: Vec<String>,
    pub rows: Vec<ResultRow>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ResultRow {
    pub experiment: String,
    pub group: String,
    /// The experiment's value of each of `params` it has (not only where it differs from
    /// the baseline: a notebook wants the value).
    pub params: BTreeMap<String, serde_json::Value>,
    /// Per eval metric, the newest point's value. Non-finite values are the strings `NaN`,
    /// `Infinity`, `-Infinity`.
    #[serde(rename = "final")]
    #[cfg_attr(feature = "openapi", schema(value_type = BTreeMap<String, serde_json::Value>))]
    pub last: BTreeMap<String, JsonNumber>,
    /// Per eval metric, the best point's value ([`lower_is_better`]).
    #[cfg_attr(feature = "openapi", schema(value_type = BTreeMap<String, serde_json::Value>))]
    pub best: BTreeMap<String, JsonNumber>,
    /// The run's newest step; null before its first.
    pub steps: Option<i64>,
    /// The job's state as `GET /jobs/{id}` gives it, or `not_submitted`.
    #[cfg_attr(feature = "openapi", schema(value_type = String))]
    pub state: crate::RunState,
    /// Pod-hours the run has used (every attempt, every cause).
    pub pod_hours: Option<f64>,
    /// The run's attempts; null when never submitted.
    pub attempts: Option<i64>,
    /// The slice types its attempts ran on, in the order first used, space-separated
    /// (`v4-64 v6e-32`); null before its first attempt.
    #[serde(default)]
    pub accelerators: Option<String>,
    /// The last rung its group's rungs decided its run at (1 for the first); null for a
    /// group without rungs or a run before its first rung.
    #[serde(default)]
    pub rung: Option<i64>,
    /// The decision there: `promoted`, `paused` (waiting for its siblings), `pruned` or
    /// `no_value` (its metric never reported there).
    #[serde(default)]
    pub rung_decision: Option<String>,
    /// The experiment's newest job; null when never submitted.
    pub job_id: Option<JobId>,
}

/// An `f64` that survives JSON: finite values as numbers, the others as the strings `NaN`,
/// `Infinity` and `-Infinity` (the markers every metric value travels with, nonfinite.rs).
pub use crate::nonfinite::Number as JsonNumber;

/// A number as a CSV cell: the shortest text that reads back as the same `f64`, and `NaN`,
/// `inf`, `-inf` for the non-finite (what Python's `float()` and pandas' `read_csv` read).
pub fn csv_number(v: f64) -> String {
    if v.is_nan() {
        "NaN".to_owned()
    } else if v.is_infinite() {
        if v > 0.0 { "inf" } else { "-inf" }.to_owned()
    } else {
        // `{:?}` is the shortest round-trip form, in exponent notation when that is shorter.
        format!("{v:?}")
    }
}

/// A text cell as CSV writes it, after OWASP's rule against CSV injection: text that begins
/// with `=`, `+`, `-`, `@`, a tab or a carriage return, which a spreadsheet would read as a
/// formula, is written after a single quote (`'=HYPERLINK(...)`); other text as it is.
/// Metric names and config values come from trainers and people: every text cell of every
/// CSV podq writes (`results.csv`'s header and cells, `metrics.csv`'s names) goes through
/// this. Numbers are not text: `-0.5` stays a number ([`csv_number`]).
pub fn csv_text(text: &str) -> std::borrow::Cow<'_, str> {
    if text.starts_with(['=', '+', '-', '@', '\t', '\r']) {
        format!("'{text}").into()
    } else {
        text.into()
    }
}

/// One point of a metric series in long format: a line of `metrics.ndjson`, a row of
/// `metrics.csv` (`step,name,value`).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct MetricPoint {
    pub step: i64,
    pub name: String,
    pub value: JsonNumber,
}

/// One cell of the results table.
#[derive(Debug, Clone, PartialEq)]
pub enum Cell {
    Empty,
    Text(String),
    Int(i64),
    Number(f64),
    /// A config value that is not a string (numbers, booleans, lists) as its JSON.
    Json(serde_json::Value),
}

impl Cell {
    /// The cell as CSV text: text neutralised ([`csv_text`]), numbers and JSON as they are.
    pub fn to_csv(&self) -> String {
        match self {
            Cell::Empty => String::new(),
            Cell::Text(t) => csv_text(t).into_owned(),
            Cell::Int(i) => i.to_string(),
            Cell::Number(v) => csv_number(*v),
            Cell::Json(serde_json::Value::Null) => String::new(),
            Cell::Json(v) => v.to_string(),
        }
    }

    /// The cell as a JSON value (`podq results --format json`).
    pub fn to_json(&self) -> serde_json::Value {
        match self {
            Cell::Empty => serde_json::Value::Null,
            Cell::Text(t) => t.clone().into(),
            Cell::Int(i) => (*i).into(),
            Cell::Number(v) => serde_json::to_value(JsonNumber(*v)).unwrap_or_default(),
            Cell::Json(v) => v.clone(),
        }
    }
}

impl Results {
    /// The table's header as CSV writes it: each column name neutralised ([`csv_text`]).
    pub fn csv_columns(&self) -> Vec<String> {
        self.columns()
            .iter()
            .map(|c| csv_text(c).into_owned())
            .collect()
    }

    /// The table's header: `experiment`, `group`, the varied params, `<metric>.final` and
    /// `<metric>.best` for each eval metric, `steps`, `state`, `pod_hours`, `attempts`,
    /// `accelerators`, `rung`, `rung_decision`, `job_id`.
    pub fn columns(&self) -> Vec<String> {
        let mut columns = vec!["experiment".to_owned(), "group".to_owned()];
        columns.extend(self.params.iter().cloned());
        for m in &self.metrics {
            columns.push(format!("{m}.final"));
            columns.push(format!("{m}.best"));
        }
        columns.extend(
            [
                "steps",
                "state",
                "pod_hours",
                "attempts",
                "accelerators",
                "rung",
                "rung_decision",
                "job_id",
            ]
            .iter()
            .map(|c| (*c).to_owned()),
        );
        columns
    }

    /// A row's cells, in the order of [`Results::columns`]; empty where the row has no value.
    pub fn cells(&self, row: &ResultRow) -> Vec<Cell> {
        let mut cells = vec![
            Cell::Text(row.experiment.clone()),
            Cell::Text(row.group.clone()),
        ];
        cells.extend(self.params.iter().map(|k| match row.params.get(k) {
            None => Cell::Empty,
            Some(serde_json::Value::String(s)) => Cell::Text(s.clone()),
            Some(v) => Cell::Json(v.clone()),
        }));
        let number = |v: Option<&JsonNumber>| v.map_or(Cell::Empty, |v| Cell::Number(v.0));
        for m in &self.metrics {
            cells.push(number(row.last.get(m)));
            cells.push(number(row.best.get(m)));
        }
        cells.push(row.steps.map_or(Cell::Empty, Cell::Int));
        cells.push(Cell::Text(row.state.to_string()));
        cells.push(row.pod_hours.map_or(Cell::Empty, Cell::Number));
        cells.push(row.attempts.map_or(Cell::Empty, Cell::Int));
        cells.push(row.accelerators.clone().map_or(Cell::Empty, Cell::Text));
        cells.push(row.rung.map_or(Cell::Empty, Cell::Int));
        cells.push(row.rung_decision.clone().map_or(Cell::Empty, Cell::Text));
        cells.push(
            row.job_id
                .map_or(Cell::Empty, |id| Cell::Text(id.to_string())),
        );
        cells
    }

    /// Each row as one flat object keyed by the columns (what `podq results --format json`
    /// prints, and what `pandas.DataFrame` takes).
    pub fn flat_rows(&self) -> Vec<serde_json::Map<String, serde_json::Value>> {
        let columns = self.columns();
        self.rows
            .iter()
            .map(|row| {
                columns
                    .iter()
                    .cloned()
                    .zip(self.cells(row).iter().map(Cell::to_json))
                    .collect()
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn losses_errors_and_perplexities_are_better_lower() {
        for name in [
            "train/lm_loss",
            "eval/loss",
            "eval/error_rate",
            "eval/Perplexity",
        ] {
            assert!(lower_is_better(name), "{name} is better lower");
        }
        for name in ["eval/exact_accuracy", "eval/reward", "train/tokens_per_s"] {
            assert!(!lower_is_better(name), "{name} is better higher");
        }
    }

    #[test]
    fn text_a_spreadsheet_would_run_is_neutralised_and_numbers_are_not() {
        for (text, written) in [
            ("=HYPERLINK(\"http://x\")", "'=HYPERLINK(\"http://x\")"),
            ("+1", "'+1"),
            ("-2+3", "'-2+3"),
            ("@SUM(A1)", "'@SUM(A1)"),
            ("\t=1", "'\t=1"),
            ("\r=1", "'\r=1"),
            ("eval/loss", "eval/loss"),
            ("a=b", "a=b"),
            ("", ""),
        ] {
            assert_eq!(csv_text(text), written, "{text:?}");
            assert_eq!(Cell::Text(text.to_owned()).to_csv(), written, "{text:?}");
        }
        assert_eq!(Cell::Number(-0.5).to_csv(), "-0.5");
        assert_eq!(Cell::Number(f64::NEG_INFINITY).to_csv(), "-inf");
        assert_eq!(Cell::Int(-3).to_csv(), "-3");
        assert_eq!(Cell::Json(serde_json::json!(-0.5)).to_csv(), "-0.5");
        let results = Results {
            group: None,
            params: vec!["=p".into()],
            metrics: vec!["@m".into()],
            rows: Vec::new(),
        };
        let columns = results.csv_columns();
        assert!(columns.contains(&"'=p".to_owned()), "{columns:?}");
        assert!(columns.contains(&"'@m.final".to_owned()), "{columns:?}");
    }

    #[test]
    fn non_finite_values_are_written_as_pandas_and_javascript_read_them() {
        assert_eq!(csv_number(f64::NAN), "NaN");
        assert_eq!(csv_number(f64::INFINITY), "inf");
        assert_eq!(csv_number(f64::NEG_INFINITY), "-inf");
        assert_eq!(csv_number(0.1), "0.1");
        assert_eq!(csv_number(2.0), "2.0");
        assert_eq!(csv_number(1e-9).parse::<f64>().unwrap(), 1e-9);
        let line = |v| {
            serde_json::to_string(&MetricPoint {
                step: 3,
                name: "x".into(),
                value: JsonNumber(v),
            })
            .unwrap()
        };
        assert_eq!(line(0.5), r#"{"step":3,"name":"x","value":0.5}"#);
        assert_eq!(line(f64::NAN), r#"{"step":3,"name":"x","value":"NaN"}"#);
        assert_eq!(
            line(f64::INFINITY),
            r#"{"step":3,"name":"x","value":"Infinity"}"#
        );
        assert_eq!(
            line(f64::NEG_INFINITY),
            r#"{"step":3,"name":"x","value":"-Infinity"}"#
        );
        let back: MetricPoint =
            serde_json::from_str(r#"{"step":3,"name":"x","value":"-Infinity"}"#).unwrap();
        assert_eq!(back.value.0, f64::NEG_INFINITY);
    }
}
