//! `podq submit` and `podq status`.

use std::process::ExitCode;

use clap::Args;
use podq_api::{SubmitRequest, SubmitResponse};
use reqwest::Method;

use super::{Client, ServerAddress};

#[derive(Args)]
pub struct SubmitArgs {
    #[command(flatten)]
    address: ServerAddress,
    /// A group name, or `all` for the whole catalog.
    #[arg(long, conflicts_with = "experiment")]
    group: Option<String>,
    /// An experiment name (repeatable).
    #[arg(long)]
    experiment: Vec<String>,
    /// Higher runs first [server default: 0].
    #[arg(long, allow_negative_numbers = true)]
    priority: Option<i64>,
    /// The priority class (the suite's `priority_classes`, e.g. urgent, normal, sweep)
    /// [server default: the suite's default, normal].
    #[arg(long)]
    class: Option<String>,
    /// Failures (not preemptions) a job may spend before it fails for good, 0 to 100
    /// [server default: 3].
    #[arg(long)]
    max_failures: Option<u32>,
    /// Say what would happen and change nothing.
    #[arg(long)]
    dry_run: bool,
    /// Run even when the experiment or an identical config already has a job.
    #[arg(long)]
    force: bool,
}

#[derive(Args)]
pub struct StatusArgs {
    #[command(flatten)]
    address: ServerAddress,
}

pub async fn submit(args: SubmitArgs) -> anyhow::Result<ExitCode> {
    let mut req = SubmitRequest {
        priority: args.priority,
        priority_class: args.class,
        max_failures: args.max_failures,
        dry_run: args.dry_run,
        force: args.force,
        ..SubmitRequest::default()
    };
    match args.group.as_deref() {
        Some("all") => req.all = Some(true),
        Some(group) => req.group = Some(group.to_owned()),
        None if !args.experiment.is_empty() => req.experiments = Some(args.experiment),
        None => anyhow::bail!(
            "name what to submit: --group <name>, --group all, or --experiment <name>"
        ),
    }
    let client = Client::connect(&args.address).await;
    let answer: SubmitResponse = client
        .json(client.request(Method::POST, "/jobs").json(&req))
        .await?;
    emit_text!("{}", describe(&answer));
    Ok(ExitCode::SUCCESS)
}

/// What a submission did (or, on a dry run, would do), one line per experiment. A dry run
/// has no job ids to show.
fn describe(answer: &SubmitResponse) -> String {
    fn id(id: Option<impl std::fmt::Display>) -> String {
        id.map(|id| format!("{id} ")).unwrap_or_default()
    }
    let verb = if answer.dry_run {
        "would create"
    } else {
        "created"
    };
    let linked = if answer.dry_run {
        "would link"
    } else {
        "linked"
    };
    let mut out = format!(
        "{verb} {} jobs, {linked} {}, skipped {}\n",
        answer.created.len(),
        answer.linked.len(),
        answer.skipped.len()
    );
    for job in &answer.created {
        out.push_str(&format!("  + {}{}\n", id(job.job_id), job.experiment));
    }
    for job in &answer.linked {
        out.push_str(&format!(
            "  = {}{} (shares the run of {})\n",
            id(job.job_id),
            job.experiment,
            job.same_as_experiment
        ));
    }
    for skipped in &answer.skipped {
        out.push_str(&format!("  - {}: {}\n", skipped.experiment, skipped.reason));
    }
    out
}

pub async fn status(args: StatusArgs) -> anyhow::Result<ExitCode> {
    let client = Client::connect(&args.address).await;
    emit_text!(
        "{}",
        client.text(client.request(Method::GET, "/status")).await?
    );
    Ok(ExitCode::SUCCESS)
}
