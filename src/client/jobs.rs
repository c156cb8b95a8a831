//! Reading jobs: `podq jobs` (a table), `podq job` (one job in detail) and `podq logs` (an
//! attempt's log tail). A job is named by its id or by its experiment (the newest job of
//! that experiment); the server resolves the name.

use std::process::ExitCode;

use clap::Args;
use podq_api::{Attempt, Event, Job, JobDetail, JobList, JobLogs};
use reqwest::Method;

use super::table::{or_dash, short, time, Table};
use super::{emit, encode, with_query, Client, ServerAddress};

/// The largest page the server gives.
const MAX_PAGE: u32 = 1000;
/// Events `podq job` shows, the newest.
const LAST_EVENTS: usize = 10;

#[derive(Args)]
pub struct JobsArgs {
    #[command(flatten)]
    address: ServerAddress,
    /// Only jobs in this state: queued, leased, running, succeeded, failed, cancelled, held,
    /// stopped.
    #[arg(long)]
    state: Option<String>,
    /// Only jobs of this group.
    #[arg(long)]
    group: Option<String>,
    /// Only jobs of this experiment.
    #[arg(long)]
    experiment: Option<String>,
    /// Show at most this many jobs, oldest first (1 to 1000).
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u32).range(1..=1000))]
    limit: u32,
    /// Show every matching job, however many (reads them page by page).
    #[arg(long, conflicts_with = "limit")]
    all: bool,
    /// Print the jobs as JSON (one array) instead of a table.
    #[arg(long)]
    json: bool,
}

/// A job, by id or experiment name.
#[derive(Args)]
pub struct JobArgs {
    #[command(flatten)]
    address: ServerAddress,
    /// A job id, or an experiment name for that experiment's newest job.
    job: String,
    /// Print the server's JSON detail instead of the summary.
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
pub struct LogsArgs {
    #[command(flatten)]
    address: ServerAddress,
    /// A job id, or an experiment name for that experiment's newest job.
    job: String,
    /// Only this attempt (1 is the first) [default: every attempt].
    #[arg(long)]
    attempt: Option<i64>,
    /// Only this host (0 is the first), or `all`.
    #[arg(long, default_value = "all")]
    host: String,
    /// Keep printing lines as they arrive, across attempts, until the job succeeds, fails,
    /// is cancelled, held or stopped.
    #[arg(long, short = 'f')]
    follow: bool,
    /// Only lines since an RFC 3339 time or an age (`90s`, `10m`, `2h`, `1d`).
    #[arg(long)]
    since: Option<String>,
    /// Only lines matching this regular expression.
    #[arg(long)]
    grep: Option<String>,
    /// Only the newest N lines (then, with --follow, every new one).
    #[arg(long)]
    tail: Option<i64>,
}

pub async fn jobs(args: JobsArgs) -> anyhow::Result<ExitCode> {
    let client = Client::connect(&args.address).await;
    let mut query: Vec<(&str, String)> = Vec::new();
    for (key, value) in [
        ("state", &args.state),
        ("group", &args.group),
        ("experiment", &args.experiment),
    ] {
        if let Some(value) = value {
            query.push((key, value.clone()));
        }
    }
    let wanted = if args.all {
        usize::MAX
    } else {
        args.limit as usize
    };
    let page_size = if args.all { MAX_PAGE } else { args.limit };
    let mut jobs: Vec<Job> = Vec::new();
    let mut after: Option<i64> = None;
    let total = loop {
        let mut page_query = query.clone();
        page_query.push(("limit", page_size.to_string()));
        if let Some(after) = after {
            page_query.push(("after", after.to_string()));
        }
        let page: JobList = client
            .json(client.request(Method::GET, &with_query("/jobs", &page_query)))
            .await?;
        jobs.extend(page.jobs);
        match page.next_after {
            Some(next) if jobs.len() < wanted => after = Some(next),
            _ => break page.total,
        }
    };
    if args.json {
        emit_line!("{}", serde_json::to_string_pretty(&jobs)?);
        return Ok(ExitCode::SUCCESS);
    }
    let mut table = Table::new(&[
        "ID",
        "EXPERIMENT",
        "GROUP",
        "STATE",
        "PRI",
        "STEP",
        "ATTEMPTS",
        "FAILURES",
        "SUBMITTED",
        "NOTE",
    ]);
    for job in &jobs {
        table.row(vec![
            job.id.to_string(),
            job.experiment.clone(),
            job.group.clone(),
            job.state.to_string(),
            job.priority.to_string(),
            progress(job),
            job.attempt_count.to_string(),
            format!("{}/{}", job.failures, job.max_failures),
            time(job.submitted_at),
            note(job),
        ]);
    }
    if table.is_empty() {
        emit_line!("no jobs match");
    } else {
        emit_text!("{}", table.render());
        if (jobs.len() as i64) < total {
            emit_line!(
                "{} of {total} jobs; --all shows every one, --limit more",
                jobs.len()
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// `1200/5000`, `1200`, or `-`.
fn progress(job: &Job) -> String {
    match (job.last_step, job.total_steps) {
        (Some(step), Some(total)) => format!("{step}/{total}"),
        (Some(step), None) => step.to_string(),
        (None, Some(total)) => format!("-/{total}"),
        (None, None) => "-".to_owned(),
    }
}

/// Why the job is where it is, in a few words.
fn note(job: &Job) -> String {
    if let Some(message) = &job.message {
        return short(message, 60);
    }
    if let Some(run) = &job.same_as {
        return format!("shares the run of job {run}");
    }
    if let Some(at) = job.not_before {
        return format!("backing off until {}", time(at));
    }
    String::new()
}

async fn detail(client: &Client, job: &str) -> anyhow::Result<JobDetail> {
    client
        .json(client.request(Method::GET, &format!("/jobs/{}", encode(job))))
        .await
}

pub async fn job(args: JobArgs) -> anyhow::Result<ExitCode> {
    let client = Client::connect(&args.address).await;
    let detail = detail(&client, &args.job).await?;
    if args.json {
        emit_line!("{}", serde_json::to_string_pretty(&detail)?);
        return Ok(ExitCode::SUCCESS);
    }
    let events = last_events(&client, &detail.job).await?;
    emit_text!("{}", describe(&detail, &events));
    Ok(ExitCode::SUCCESS)
}

/// The newest events of a job's timeline, reading it page by page from the start.
async fn last_events(client: &Client, job: &Job) -> anyhow::Result<Vec<Event>> {
    const PAGE: usize = 500;
    let mut kept: Vec<Event> = Vec::new();
    let mut after = 0;
    loop {
        let page: Vec<Event> = client
            .json(client.request(
                Method::GET,
                &with_query(
                    &format!("/jobs/{}/events", job.id),
                    &[("after", after.to_string()), ("limit", PAGE.to_string())],
                ),
            ))
            .await?;
        let full = page.len() == PAGE;
        if let Some(last) = page.last() {
            after = last.id;
        }
        kept.extend(page);
        let drop = kept.len().saturating_sub(LAST_EVENTS);
        kept.drain(..drop);
        if !full {
            return Ok(kept);
        }
    }
}

fn describe(detail: &JobDetail, events: &[Event]) -> String {
    let job = &detail.job;
    let mut out = String::new();
    let mut line = |label: &str, value: String| {
        out.push_str(&format!("{label:<12}{value}\n"));
    };
    line("job", job.id.to_string());
    line("experiment", format!("{} ({})", job.experiment, job.group));
    line("state", job.state.to_string());
    if let Some(message) = &job.message {
        line("why", message.clone());
    }
    if let Some(fired) = &job.stopped_by {
        let value = podq_api::nonfinite::marker(fired.value)
            .map(str::to_owned)
            .unwrap_or_else(|| fired.value.to_string());
        line(
            "stop rule",
            format!(
                "`{}` fired at step {} ({} = {value})",
                fired.rule, fired.step, fired.metric
            ),
        );
    }
    if job.ignore_stop_rules {
        line("stop rules", "lifted (requeue --ignore-stop-rules)".into());
    }
    for r in &detail.rungs {
        let verdict = match r.verdict.as_str() {
            "paused" => "paused, waiting for its siblings",
            "no_value" => "not judged: its metric never reported there",
            other => other,
        };
        let rank = match (r.rank, r.of) {
            (Some(rank), Some(of)) => format!(", rank {rank} of {of}"),
            _ => String::new(),
        };
        let value = r.value.map(|v| format!(", value {v}")).unwrap_or_default();
        line(
            "rung",
            format!(
                "{}: {verdict}{rank}{value} ({}, {})",
                r.rung,
                r.decided_by,
                time(r.decided_at)
            ),
        );
    }
    line("priority", job.priority.to_string());
    line("step", progress(job));
    line(
        "attempts",
        format!(
            "{} (failures {} of {}, preemptions {})",
            job.attempt_count, job.failures, job.max_failures, job.preemptions
        ),
    );
    if let Some(run) = &job.same_as {
        line(
            "shares",
            format!("the run of job {run} (same training config)"),
        );
    }
    if let Some(at) = job.not_before {
        line("backoff", format!("until {}", time(at)));
    }
    line("checkpoints", job.checkpoint_dir.clone());
    line("resume", or_dash(job.resume_from.as_ref()));
    for link in &detail.links {
        line("link", format!("{} {}", link.name, link.url));
    }
    let g = &detail.goodput;
    line(
        "goodput",
        match g.ratio {
            Some(ratio) => format!(
                "{:.0}% kept: {} kept, {} lost after the last checkpoint, {} overhead",
                ratio * 100.0,
                hours(g.kept_s),
                hours(g.lost_s),
                hours(g.overhead_s)
            ),
            None => "no pod time spent yet".to_owned(),
        },
    );
    line("pod time", pod_time(&detail.pod_time));
    if let Some(a) = &detail.checkpoint_advice {
        let auto = if a.auto {
            " (checkpoint_interval: auto, so it follows the advice)"
        } else {
            ""
        };
        line(
            "checkpoint",
            format!(
                "every {} steps; advised {} (save {:.1} s {}, MTBF {}){auto}: saves {:.1} pod-hours",
                a.interval_steps_now,
                a.interval_steps_advised,
                a.save_cost_s,
                a.save_cost_source,
                hours(a.mtbf_s),
                a.pod_hours_saved
            ),
        );
    }
    if !detail.latest_metrics.is_empty() {
        let metrics: Vec<String> = detail
            .latest_metrics
            .iter()
            .map(|(name, v)| format!("{name} {} (step {})", v.value, v.step))
            .collect();
        line("metrics", metrics.join(", "));
    }
    if !detail.attempts.is_empty() {
        out.push('\n');
        let mut table = Table::new(&[
            "ATTEMPT", "POD", "STARTED", "ENDED", "OUTCOME", "STEPS", "POD TIME", "MESSAGE",
        ]);
        for a in &detail.attempts {
            table.row(vec![
                a.attempt.to_string(),
                a.pod.clone(),
                time(a.started_at),
                a.ended_at.map_or_else(|| "-".to_owned(), time),
                a.outcome
                    .map_or_else(|| "(running)".to_owned(), |o| o.to_string()),
                format!("{}..{}", or_dash(a.start_step), or_dash(a.end_step)),
                pod_time(&a.pod_time),
                a.message
                    .as_deref()
                    .map(|m| short(m, 80))
                    .unwrap_or_default(),
            ]);
        }
        out.push_str(&table.render());
    }
    if !detail.checkpoints.is_empty() {
        out.push('\n');
        let mut table = Table::new(&["CHECKPOINT", "COMMITTED", "ATTEMPT", "URI"]);
        for c in &detail.checkpoints {
            table.row(vec![
                c.step.to_string(),
                if c.committed { "yes" } else { "no" }.to_owned(),
                c.attempt.to_string(),
                c.uri.clone(),
            ]);
        }
        out.push_str(&table.render());
    }
    if !events.is_empty() {
        out.push('\n');
        let mut table = Table::new(&["EVENT AT", "KIND", "MESSAGE"]);
        for e in events {
            table.row(vec![time(e.at), e.kind.clone(), short(&e.message, 100)]);
        }
        out.push_str(&table.render());
    }
    out
}

/// The causes that took any time, largest first: "2.1 h: 80% productive, 12% wasted, ...".
fn pod_time(time: &podq_api::PodTime) -> String {
    if time.total_s <= 0.0 {
        return "none yet".to_owned();
    }
    let mut causes: Vec<(&str, f64)> = time
        .causes()
        .into_iter()
        .filter(|(_, s)| *s / time.total_s >= 0.005)
        .collect();
    causes.sort_by(|a, b| b.1.total_cmp(&a.1));
    let parts: Vec<String> = causes
        .iter()
        .map(|(name, s)| format!("{:.0}% {name}", 100.0 * s / time.total_s))
        .collect();
    format!("{}: {}", hours(time.total_s), parts.join(", "))
}

fn hours(seconds: f64) -> String {
    if seconds < 3600.0 {
        format!("{:.0} min", seconds / 60.0)
    } else {
        format!("{:.1} h", seconds / 3600.0)
    }
}

pub async fn logs(args: LogsArgs) -> anyhow::Result<ExitCode> {
    let client = Client::connect(&args.address).await;
    let mut query: Vec<(&str, String)> = vec![("host", args.host.clone())];
    for (key, value) in [("since", &args.since), ("grep", &args.grep)] {
        if let Some(value) = value {
            query.push((key, value.clone()));
        }
    }
    if let Some(attempt) = args.attempt {
        query.push(("attempt", attempt.to_string()));
    }
    if let Some(tail) = args.tail {
        query.push(("tail", "true".into()));
        query.push(("limit", tail.to_string()));
    }
    let path = format!("/jobs/{}/logs", encode(&args.job));
    if args.follow {
        let request = client.request(Method::GET, &with_query(&format!("{path}/follow"), &query));
        let mut response = client
            .stream(request.header("accept", "text/plain"))
            .await?;
        while let Some(chunk) = response.chunk().await? {
            emit(&String::from_utf8_lossy(&chunk))?;
        }
        return Ok(ExitCode::SUCCESS);
    }
    if args.tail.is_none() {
        query.push(("limit", "10000".into()));
    }
    let mut printed_drops = false;
    let mut printed_any = false;
    loop {
        let page: JobLogs = client
            .json(client.request(Method::GET, &with_query(&path, &query)))
            .await?;
        if !printed_drops {
            // Said once, on stderr, so stdout is the log alone.
            for dropped in &page.dropped {
                eprintln!(
                    "podq: attempt {} host {}: {} older lines dropped (the server keeps the newest {} per attempt and host)",
                    dropped.attempt, dropped.host, dropped.lines, page.kept_per_host
                );
            }
            printed_drops = true;
        }
        let mut text = String::new();
        for line in &page.lines {
            text.push_str(&format!(
                "[attempt {} host {}] {}\n",
                line.attempt, line.host, line.text
            ));
        }
        emit(&text)?;
        printed_any |= !page.lines.is_empty() || !page.dropped.is_empty();
        if !page.more || args.tail.is_some() {
            break;
        }
        query.retain(|(key, _)| *key != "after");
        query.push(("after", page.next_after.to_string()));
    }
    if !printed_any && args.host == "all" && args.grep.is_none() && args.since.is_none() {
        // No line was forwarded (a worker older than live logs): the tail each attempt
        // kept when it ended.
        return log_tail(&client, &args).await;
    }
    Ok(ExitCode::SUCCESS)
}

async fn log_tail(client: &Client, args: &LogsArgs) -> anyhow::Result<ExitCode> {
    let detail = detail(client, &args.job).await?;
    let job = &detail.job;
    let attempt = choose_attempt(&detail.attempts, args.attempt)
        .map_err(|why| anyhow::anyhow!("{} (job {}): {why}", job.experiment, job.id))?;
    let Some(tail) = attempt.log_tail.as_deref().filter(|t| !t.is_empty()) else {
        let why = if attempt.ended_at.is_none() {
            "has printed nothing yet"
        } else {
            "ended with no log lines"
        };
        eprintln!(
            "podq: {} (job {}): attempt {} {why}",
            job.experiment, job.id, attempt.attempt
        );
        return Ok(ExitCode::SUCCESS);
    };
    // The header on stderr, so stdout is the log alone.
    eprintln!(
        "== {} (job {}) attempt {} on {}: {} (its last lines, kept when it ended) ==",
        job.experiment,
        job.id,
        attempt.attempt,
        attempt.pod,
        attempt
            .outcome
            .map_or_else(|| "running".to_owned(), |o| o.to_string())
    );
    emit_text!("{tail}");
    if !tail.ends_with('\n') {
        emit_line!();
    }
    Ok(ExitCode::SUCCESS)
}

/// The attempt asked for, or the newest one that has a log tail (else the newest).
fn choose_attempt(attempts: &[Attempt], wanted: Option<i64>) -> Result<&Attempt, String> {
    if attempts.is_empty() {
        return Err("no attempt has started yet, so there is no log".to_owned());
    }
    match wanted {
        Some(n) => attempts.iter().find(|a| a.attempt == n).ok_or_else(|| {
            let numbers: Vec<String> = attempts.iter().map(|a| a.attempt.to_string()).collect();
            format!("no attempt {n}; its attempts are {}", numbers.join(", "))
        }),
        None => Ok(attempts
            .iter()
            .rev()
            .find(|a| a.log_tail.as_deref().is_some_and(|t| !t.is_empty()))
            .unwrap_or(&attempts[attempts.len() - 1])),
    }
}
