//! `podq study GROUP`: a group's runs as the study view shows them, one row per experiment:
//! its state, what it varies, the final value of the metric it is judged by, and, for a
//! group with rungs, a column per rung with the run's value there, its rank and the
//! decision (promoted, paused, pruned).

use std::process::ExitCode;

use clap::Args;
use podq_api::{GroupStudy, StudyRow, StudyRung};
use reqwest::Method;

use super::table::Table;
use super::{encode, Client, ServerAddress};

#[derive(Args)]
pub struct StudyArgs {
    /// The group: its directory name under the catalog's `groups/` (`exp10-lr-schedule`).
    group: String,
    /// Print the study as the server's JSON (`GET /api/v1/groups/{name}/study`).
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    address: ServerAddress,
}

pub async fn study(args: StudyArgs) -> anyhow::Result<ExitCode> {
    let client = Client::connect(&args.address).await;
    let path = format!("/groups/{}/study", encode(&args.group));
    let study: GroupStudy = client.json(client.request(Method::GET, &path)).await?;
    if args.json {
        emit_line!("{}", serde_json::to_string_pretty(&study)?);
    } else {
        emit_text!("{}", describe(&study));
    }
    Ok(ExitCode::SUCCESS)
}

/// The metric a row is shown by: the rungs', else the first eval metric the group watches.
fn shown_metric(study: &GroupStudy) -> Option<&str> {
    study.rungs.as_ref().map(|r| r.metric.as_str()).or_else(|| {
        study
            .metrics_to_watch
            .iter()
            .find(|m| m.starts_with("eval/"))
            .or(study.metrics_to_watch.first())
            .map(String::as_str)
    })
}

fn describe(study: &GroupStudy) -> String {
    let mut out = format!("{}: {}\n", study.group, study.title);
    if !study.varies.is_empty() {
        out.push_str(&format!("varies      {}\n", study.varies));
    }
    if let Some(baseline) = &study.baseline_row {
        out.push_str(&format!("baseline    {baseline}\n"));
    }
    if let Some(rungs) = &study.rungs {
        let keep = if rungs.keep_auto {
            format!(" (keep: auto; the plan keeps {})", percent(rungs.keep))
        } else {
            String::new()
        };
        out.push_str(&format!("rungs       {}{keep}\n", rungs.description));
    } else {
        out.push_str("rungs       none\n");
    }
    out.push('\n');
    let metric = shown_metric(study);
    let mut header = vec![
        "EXPERIMENT".to_owned(),
        "STATE".to_owned(),
        "PARAMS".to_owned(),
    ];
    if let Some(m) = metric {
        header.push(format!("{m} FINAL"));
    }
    let at = study.rungs.as_ref().map_or(&[][..], |r| &r.at[..]);
    for (k, share) in at.iter().enumerate() {
        header.push(format!("RUNG {} ({})", k + 1, percent(*share)));
    }
    let header: Vec<&str> = header.iter().map(String::as_str).collect();
    let mut table = Table::new(&header);
    for row in &study.rows {
        let mut cells = vec![
            if row.baseline {
                format!("{} (baseline)", row.experiment)
            } else {
                row.experiment.clone()
            },
            row.state.to_string(),
            params(row),
        ];
        if let Some(m) = metric {
            cells.push(
                row.last
                    .get(m)
                    .map_or_else(|| "-".to_owned(), |v| number(v.value)),
            );
        }
        for k in 0..at.len() {
            let rung = row.rungs.iter().find(|r| r.rung == k as i64 + 1);
            cells.push(rung.map_or_else(|| "-".to_owned(), rung_cell));
        }
        table.row(cells);
    }
    out.push_str(&table.render());
    out
}

/// What differs from the baseline row: `lr=0.001, schedule=cosine`.
fn params(row: &StudyRow) -> String {
    if row.baseline {
        return "baseline".to_owned();
    }
    if row.params.is_empty() {
        return "= baseline".to_owned();
    }
    row.params
        .iter()
        .map(|(k, v)| {
            let key = k.rsplit('.').next().unwrap_or(k);
            match v {
                serde_json::Value::String(s) => format!("{key}={s}"),
                other => format!("{key}={other}"),
            }
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// A run at a rung: `0.3 4/5 pruned` (its value, its rank of the runs judged there, the
/// decision); `paused` reads `waiting`: its siblings have yet to decide it.
pub fn rung_cell(rung: &StudyRung) -> String {
    if rung.verdict.as_deref() == Some("no_value") {
        return "no value, not judged".to_owned();
    }
    let mut parts = vec![rung.value.map_or_else(|| "-".to_owned(), number)];
    if let (Some(rank), Some(of)) = (rung.rank, rung.of) {
        parts.push(format!("{rank}/{of}"));
    }
    parts.push(match rung.verdict.as_deref() {
        Some("paused") => "waiting".to_owned(),
        Some(verdict) => verdict.to_owned(),
        None => "judging".to_owned(),
    });
    parts.join(" ")
}

/// A value as a person reads it: at most 4 significant decimals, no trailing zeros.
fn number(v: f64) -> String {
    if !v.is_finite() {
        return v.to_string();
    }
    let text = if v.abs() >= 1000.0 || v == v.trunc() {
        format!("{v:.0}")
    } else {
        let digits = (4 - (v.abs().log10().floor() as i32 + 1)).clamp(0, 8) as usize;
        format!("{v:.digits$}")
    };
    if text.contains('.') {
        text.trim_end_matches('0').trim_end_matches('.').to_owned()
    } else {
        text
    }
}

fn percent(share: f64) -> String {
    let p = share * 100.0;
    if (p - p.round()).abs() < 1e-9 {
        format!("{}%", p.round() as i64)
    } else {
        format!("{}%", (p * 10.0).round() / 10.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(value: Option<f64>, rank: Option<i64>, verdict: &str) -> StudyRung {
        StudyRung {
            rung: 1,
            step: Some(250),
            value,
            verdict: Some(verdict.to_owned()),
            rank,
            of: rank.map(|_| 5),
            decided_at: None,
            decided_by: Some("podq".into()),
        }
    }

    #[test]
    fn a_rung_cell_says_value_rank_and_verdict() {
        assert_eq!(
            rung_cell(&at(Some(0.3), Some(4), "pruned")),
            "0.3 4/5 pruned"
        );
        assert_eq!(
            rung_cell(&at(Some(0.91234), Some(1), "promoted")),
            "0.9123 1/5 promoted"
        );
        assert_eq!(
            rung_cell(&at(Some(0.5), Some(3), "paused")),
            "0.5 3/5 waiting"
        );
        assert_eq!(
            rung_cell(&at(None, None, "no_value")),
            "no value, not judged"
        );
        assert_eq!(number(12.0), "12");
        assert_eq!(number(1.5), "1.5");
        assert_eq!(number(0.000123456), "0.0001235");
        assert_eq!(percent(0.25), "25%");
        assert_eq!(percent(1.0 / 3.0), "33.3%");
    }
}
