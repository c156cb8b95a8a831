//! Client commands: talk to a running server over HTTP.

use std::process::ExitCode;

use anyhow::Context;
use clap::Args;
use podq_api::{SubmitRequest, SubmitResponse};

#[derive(Args)]
pub struct ServerAddress {
    /// The podq server.
    #[arg(long, env = "PODQ_SERVER", default_value = "http://127.0.0.1:8080")]
    pub server: String,
    #[arg(long, env = "PODQ_ADMIN_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
}

#[derive(Args)]
pub struct SubmitArgs {
    #[command(flatten)]
    address: ServerAddress,
    /// A group name, or `all`.
    #[arg(long, conflicts_with = "experiment")]
    group: Option<String>,
    /// An experiment name (repeatable).
    #[arg(long)]
    experiment: Vec<String>,
    #[arg(long)]
    priority: Option<i64>,
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
    let client = reqwest::Client::new();
    let mut request = client
        .post(format!(
            "{}/api/v1/jobs",
            args.address.server.trim_end_matches('/')
        ))
        .json(&req);
    if let Some(token) = &args.address.token {
        request = request.bearer_auth(token);
    }
    let response = request
        .send()
        .await
        .context("cannot reach the podq server")?;
    let status = response.status();
    let body = response.text().await?;
    if !status.is_success() {
        eprintln!("podq: the server answered {status}: {body}");
        return Ok(ExitCode::FAILURE);
    }
    let answer: SubmitResponse = serde_json::from_str(&body)?;
    let verb = if answer.dry_run {
        "would create"
    } else {
        "created"
    };
    println!(
        "{verb} {} jobs, linked {}, skipped {}",
        answer.created.len(),
        answer.linked.len(),
        answer.skipped.len()
    );
    fn id(id: Option<impl std::fmt::Display>) -> String {
        id.map(|id| format!("{id} ")).unwrap_or_default()
    }
    for job in &answer.created {
        println!("  + {}{}", id(job.job_id), job.experiment);
    }
    for job in &answer.linked {
        println!(
            "  = {}{} (shares the run of {})",
            id(job.job_id),
            job.experiment,
            job.same_as_experiment
        );
    }
    for skipped in &answer.skipped {
        println!("  - {}: {}", skipped.experiment, skipped.reason);
    }
    Ok(ExitCode::SUCCESS)
}

pub async fn status(args: StatusArgs) -> anyhow::Result<ExitCode> {
    let text = reqwest::Client::new()
        .get(format!(
            "{}/api/v1/status",
            args.address.server.trim_end_matches('/')
        ))
        .header("accept", "text/plain")
        .send()
        .await
        .context("cannot reach the podq server")?
        .error_for_status()?
        .text()
        .await?;
    print!("{text}");
    Ok(ExitCode::SUCCESS)
}
