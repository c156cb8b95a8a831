//! The plan and the grant: `podq plan` (the server's table), `podq plan apply`, `podq grant`
//! and `podq grant set`.

use std::collections::BTreeMap;
use std::process::ExitCode;

use chrono::{DateTime, NaiveDate, Utc};
use clap::{Args, Subcommand};
use podq_api::{Grant, GrantRequest, PlanApplied};
use reqwest::Method;

use super::{with_query, Client, ServerAddress};

#[derive(Args)]
pub struct PlanArgs {
    #[command(flatten)]
    address: ServerAddress,
    /// Measure against this deadline instead of the grant's end (RFC 3339, e.g.
    /// 2026-12-23T00:00:00Z, or a date, meaning its midnight UTC).
    #[arg(long, value_parser = parse_time, global = true)]
    deadline: Option<DateTime<Utc>>,
    /// Print the plan as JSON instead of the table.
    #[arg(long)]
    json: bool,
    #[command(subcommand)]
    action: Option<PlanAction>,
}

#[derive(Subcommand)]
enum PlanAction {
    /// Apply the recommended order: submit the experiments it includes that were never
    /// submitted, and set priorities so jobs lease in that order (admin).
    Apply,
}

#[derive(Args)]
pub struct GrantArgs {
    #[command(flatten)]
    address: ServerAddress,
    /// Print the grant as JSON.
    #[arg(long)]
    json: bool,
    #[command(subcommand)]
    action: Option<GrantAction>,
}

#[derive(Subcommand)]
enum GrantAction {
    /// Set the compute grant the plan measures against (admin).
    Set {
        /// When the grant ends: the plan's deadline (RFC 3339, or a date for its midnight UTC).
        #[arg(long, value_parser = parse_time)]
        end: DateTime<Utc>,
        /// When it began; pod time used since then counts against the budget [default: now].
        #[arg(long, value_parser = parse_time)]
        start: Option<DateTime<Utc>>,
        /// A pod-hour budget for an accelerator type, as TYPE=HOURS (repeatable), e.g.
        /// v4-64=720.
        #[arg(long, value_parser = parse_budget)]
        pod_hours: Vec<(String, f64)>,
    },
}

pub async fn plan(args: PlanArgs) -> anyhow::Result<ExitCode> {
    let client = Client::connect(&args.address).await;
    let query: Vec<(&str, String)> = args
        .deadline
        .map(|d| ("deadline", d.to_rfc3339()))
        .into_iter()
        .collect();
    match args.action {
        Some(PlanAction::Apply) => {
            let applied: PlanApplied = client
                .json(client.request(Method::POST, &with_query("/plan/apply", &query)))
                .await?;
            emit_text!("{}", describe_applied(&applied));
        }
        None if args.json => {
            let plan: serde_json::Value = client
                .json(client.request(Method::GET, &with_query("/plan", &query)))
                .await?;
            emit_line!("{}", serde_json::to_string_pretty(&plan)?);
        }
        None => emit_text!(
            "{}",
            client
                .text(client.request(Method::GET, &with_query("/plan", &query)))
                .await?
        ),
    }
    Ok(ExitCode::SUCCESS)
}

fn describe_applied(applied: &PlanApplied) -> String {
    let plan = &applied.plan;
    let mut out = String::from("applied the recommended order: ");
    if applied.submitted.is_empty() {
        out.push_str("nothing to submit");
    } else {
        const SHOWN: usize = 8;
        let more = applied.submitted.len().saturating_sub(SHOWN);
        let mut names = applied
            .submitted
            .iter()
            .take(SHOWN)
            .cloned()
            .collect::<Vec<_>>()
            .join(", ");
        if more > 0 {
            names.push_str(&format!(" and {more} more"));
        }
        out.push_str(&format!(
            "submitted {} experiments ({names})",
            applied.submitted.len()
        ));
    }
    out.push_str(&format!(", {} jobs reprioritised\n", applied.reprioritised));
    match (
        plan.deadline,
        plan.recommended.runs_fit,
        plan.recommended.groups_fit,
    ) {
        (Some(deadline), Some(runs), Some(groups)) => out.push_str(&format!(
            "before {}: {runs} of {} runs and {groups} of {} whole groups fit\n",
            deadline.format("%Y-%m-%d %H:%M UTC"),
            plan.recommended.runs.len(),
            plan.groups.len()
        )),
        _ => out.push_str("no deadline: set one with `podq grant set --end ...`\n"),
    }
    // Each group with rungs: what the plan expects of them.
    for group in &plan.groups {
        if let Some(rungs) = &group.rungs {
            out.push_str(&format!("rungs of {}: {}\n", group.name, rungs.describe()));
        }
    }
    out
}

pub async fn grant(args: GrantArgs) -> anyhow::Result<ExitCode> {
    let client = Client::connect(&args.address).await;
    let grant: Option<Grant> = match args.action {
        None => client.json(client.request(Method::GET, "/grant")).await?,
        Some(GrantAction::Set {
            end,
            start,
            pod_hours,
        }) => {
            let request = GrantRequest {
                start,
                end,
                pod_hours: pod_hours.into_iter().collect::<BTreeMap<_, _>>(),
            };
            Some(
                client
                    .json(client.request(Method::PUT, "/grant").json(&request))
                    .await?,
            )
        }
    };
    if args.json {
        emit_line!("{}", serde_json::to_string_pretty(&grant)?);
        return Ok(ExitCode::SUCCESS);
    }
    emit_text!("{}", describe_grant(grant.as_ref()));
    Ok(ExitCode::SUCCESS)
}

fn describe_grant(grant: Option<&Grant>) -> String {
    let Some(grant) = grant else {
        return "no grant set: `podq grant set --end 2026-12-23` sets one\n".to_owned();
    };
    let source = match grant.source.as_str() {
        "flag" => " (from the server's --deadline)",
        _ => "",
    };
    let mut out = format!(
        "grant {} to {}{source}\n",
        grant.start.format("%Y-%m-%d %H:%M UTC"),
        grant.end.format("%Y-%m-%d %H:%M UTC")
    );
    if grant.pod_hours.is_empty() {
        out.push_str("no pod-hour budget: the pods' time until the end is the limit\n");
    }
    for (accelerator, hours) in &grant.pod_hours {
        out.push_str(&format!("{accelerator}: {hours} pod-hours\n"));
    }
    out
}

/// RFC 3339, or a bare date meaning its midnight UTC.
fn parse_time(text: &str) -> Result<DateTime<Utc>, String> {
    if let Ok(t) = DateTime::parse_from_rfc3339(text) {
        return Ok(t.with_timezone(&Utc));
    }
    NaiveDate::parse_from_str(text, "%Y-%m-%d")
        .map(|d| d.and_time(chrono::NaiveTime::MIN).and_utc())
        .map_err(|_| {
            format!("`{text}` is not a time: give RFC 3339 (2026-12-23T00:00:00Z) or a date (2026-12-23)")
        })
}

/// `v4-64=720`.
fn parse_budget(text: &str) -> Result<(String, f64), String> {
    let (accelerator, hours) = text
        .split_once('=')
        .ok_or_else(|| format!("`{text}` is not TYPE=HOURS, e.g. v4-64=720"))?;
    let hours: f64 = hours
        .trim()
        .parse()
        .map_err(|_| format!("`{hours}` in `{text}` is not a number of hours"))?;
    Ok((accelerator.trim().to_owned(), hours))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_and_budgets_parse_as_typed() {
        assert_eq!(
            parse_time("2026-12-23").unwrap().to_rfc3339(),
            "2026-12-23T00:00:00+00:00"
        );
        assert_eq!(
            parse_time("2026-12-23T12:00:00+02:00")
                .unwrap()
                .to_rfc3339(),
            "2026-12-23T10:00:00+00:00"
        );
        assert!(parse_time("tomorrow").is_err());
        assert_eq!(parse_budget("v4-64=720").unwrap(), ("v4-64".into(), 720.0));
        assert!(parse_budget("v4-64").is_err());
        assert!(parse_budget("v4-64=lots").is_err());
    }
}
