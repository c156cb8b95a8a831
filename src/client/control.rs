//! Changing a job: `podq cancel`, `podq requeue`, `podq priority`, `podq suspend`, `podq
//! resume`. A submitter may change the jobs they submitted, an admin any.

use std::process::ExitCode;

use clap::Args;
use podq_api::{Job, PatchJobRequest};
use reqwest::Method;

use super::{encode, Client, ServerAddress};

/// A job, by id or experiment name.
#[derive(Args)]
pub struct JobArg {
    #[command(flatten)]
    address: ServerAddress,
    /// A job id, or an experiment name for that experiment's newest job.
    job: String,
}

#[derive(Args)]
pub struct RequeueArgs {
    #[command(flatten)]
    address: ServerAddress,
    /// A job id, or an experiment name for that experiment's newest job.
    job: String,
    /// Run a `stopped` job on from its checkpoint with its stop rules and divergence guard
    /// lifted, for good.
    #[arg(long)]
    ignore_stop_rules: bool,
}

#[derive(Args)]
pub struct PriorityArgs {
    #[command(flatten)]
    address: ServerAddress,
    /// A job id, or an experiment name for that experiment's newest job.
    job: String,
    /// The new priority: higher runs first; may be negative.
    #[arg(allow_negative_numbers = true, required_unless_present = "class")]
    priority: Option<i64>,
    /// Move the job to this priority class (the suite's `priority_classes`, e.g. urgent,
    /// normal, sweep).
    #[arg(long)]
    class: Option<String>,
}

pub async fn cancel(args: JobArg) -> anyhow::Result<ExitCode> {
    let client = Client::connect(&args.address).await;
    let job: Job = client
        .json(client.request(Method::POST, &format!("/jobs/{}/cancel", encode(&args.job))))
        .await?;
    let why = job
        .message
        .as_deref()
        .map(|m| format!(" ({m})"))
        .unwrap_or_default();
    emit_line!("{}: {}{why}", name(&job), job.state);
    Ok(ExitCode::SUCCESS)
}

pub async fn requeue(args: RequeueArgs) -> anyhow::Result<ExitCode> {
    let client = Client::connect(&args.address).await;
    let lift = if args.ignore_stop_rules {
        "?ignore_stop_rules=true"
    } else {
        ""
    };
    let job: Job = client
        .json(client.request(
            Method::POST,
            &format!("/jobs/{}/requeue{lift}", encode(&args.job)),
        ))
        .await?;
    let mut resume = job
        .resume_from
        .as_deref()
        .map(|r| format!("; it resumes from {r}"))
        .unwrap_or_default();
    if job.ignore_stop_rules {
        resume.push_str("; no stop rule judges it");
    }
    emit_line!("{}: requeued, now {}{resume}", name(&job), job.state);
    Ok(ExitCode::SUCCESS)
}

pub async fn priority(args: PriorityArgs) -> anyhow::Result<ExitCode> {
    let client = Client::connect(&args.address).await;
    let job: Job = client
        .json(
            client
                .request(Method::PATCH, &format!("/jobs/{}", encode(&args.job)))
                .json(&PatchJobRequest {
                    priority: args.priority,
                    priority_class: args.class,
                }),
        )
        .await?;
    emit_line!(
        "{}: priority {}, class {}",
        name(&job),
        job.priority,
        job.priority_class
    );
    Ok(ExitCode::SUCCESS)
}

pub async fn suspend(args: JobArg) -> anyhow::Result<ExitCode> {
    let client = Client::connect(&args.address).await;
    let job: Job = client
        .json(client.request(
            Method::POST,
            &format!("/jobs/{}/suspend", encode(&args.job)),
        ))
        .await?;
    let what = match job.state {
        podq_api::JobState::Held => "held".to_owned(),
        state => format!("{state}; its pod saves and stops it, then it is held"),
    };
    emit_line!("{}: suspended, {what}", name(&job));
    Ok(ExitCode::SUCCESS)
}

pub async fn resume(args: JobArg) -> anyhow::Result<ExitCode> {
    let client = Client::connect(&args.address).await;
    let job: Job = client
        .json(client.request(Method::POST, &format!("/jobs/{}/resume", encode(&args.job))))
        .await?;
    emit_line!("{}: resumed, now {}", name(&job), job.state);
    Ok(ExitCode::SUCCESS)
}

/// `exp07a (job 1b4e…)`: the experiment a person knows, and which job it turned out to be.
fn name(job: &Job) -> String {
    format!("{} (job {})", job.experiment, job.id)
}
