//! `podq-sim-trainer`: a faithful stand-in for the user's JAX trainer (`pretrain_jax.py`),
//! used by the `local` pod driver, the tests and demos. It keeps the trainer contract of
//! docs/architecture.md §3.3: Hydra-style command line, resolved config checked against its sha256, JAX
//! multi-host lock-step, `PODQ` report lines from process 0, Orbax-shaped checkpoints, the
//! libtpu lock file, SIGTERM as preemption, and injectable faults. See docs/trainer.md.

mod checkpoint;
mod cli;
mod config;
mod coordination;
mod curves;
mod env;
mod fatal;
mod faults;
mod lockfile;
mod report;
mod schedule;
mod signals;
mod train;

use anyhow::Context;
use clap::Parser;

use crate::checkpoint::{CheckpointDir, Location};
use crate::cli::{Args, Overrides};
use crate::coordination::Group;
use crate::curves::Curves;
use crate::env::Environment;
use crate::fatal::{Fatal, EXIT_FAILURE};
use crate::faults::Faults;
use crate::lockfile::TpuLock;
use crate::report::{log, Edge, Phase, Reporter};
use crate::schedule::Schedule;
use crate::signals::Termination;
use crate::train::Trainer;

/// A year: far beyond any test or demo.
const MAX_RUN_SECS: f64 = 365.0 * 24.0 * 3600.0;

/// Runs the sim trainer with `args` (the first being the program name) and exits the
/// process with the trainer's exit code. Call it before any other thread starts.
pub fn main_with_args(args: Vec<String>) -> ! {
    // Before clap or anything else can start a thread.
    let termination = match signals::block_termination() {
        Ok(termination) => termination,
        Err(e) => {
            eprintln!("podq-sim-trainer: cannot block SIGTERM/SIGINT: {e}");
            std::process::exit(EXIT_FAILURE);
        }
    };
    let args = Args::parse_from(args);
    let code = match run(args, termination) {
        Ok(()) => 0,
        Err(error) => match error.downcast_ref::<Fatal>() {
            // Printed bare so that messages the worker matches ("TPU in use: ...") stay exact.
            Some(fatal) => {
                eprintln!("{fatal}");
                fatal.code
            }
            None => {
                eprintln!("podq-sim-trainer: error: {error:#}");
                EXIT_FAILURE
            }
        },
    };
    std::process::exit(code);
}

fn run(args: Args, termination: Termination) -> anyhow::Result<()> {
    // The upper bound keeps the pacing arithmetic far from `Duration` overflow.
    if !(0.0..=MAX_RUN_SECS).contains(&args.run_secs) {
        return Err(Fatal::usage(format!(
            "--run-secs must be between 0 and {MAX_RUN_SECS}, got {}",
            args.run_secs
        ))
        .into());
    }
    let overrides = Overrides::parse(&args.overrides).map_err(Fatal::usage)?;
    let env = Environment::from_process_env()?;
    let process = env.jax.clone();
    report::set_process_index(process.index);
    for warning in &env.warnings {
        log!("warning: {warning}");
    }
    if process.count == 1 && env.host_count.as_deref().is_some_and(|n| n != "1") {
        log!("warning: PODQ_HOST_COUNT is {} but JAX_PROCESS_COUNT is unset or 1: running as a single process", env.host_count.as_deref().unwrap_or_default());
    }
    for ignored in &overrides.ignored {
        log!("ignoring override {ignored} (the sim trainer only acts on checkpoint_path and load_checkpoint)");
    }

    let config_file = args.config_file();
    let loaded = config::load(&config_file, env.config_sha256.as_deref())?;
    let config = &loaded.config;
    let schedule = Schedule::from_config(config)
        .map_err(|e| Fatal::usage(format!("invalid config {}: {e}", config_file.display())))?
        .with_checkpoint_interval(env.checkpoint_interval_steps);
    let total_groups = schedule::total_groups(&config.data_paths[0]).unwrap_or_default();
    let curves = Curves::new(&loaded.sha256, config, total_groups, schedule.total_steps);

    // Command line first, then the worker's environment, then the config file itself.
    let checkpoint_raw = pick(
        overrides.checkpoint_path.clone(),
        env.checkpoint_dir.clone(),
        config.checkpoint_path.clone(),
    )
    .ok_or_else(|| {
        Fatal::usage("no checkpoint location: pass checkpoint_path=URI or set PODQ_CHECKPOINT_DIR")
    })?;
    let checkpoints = CheckpointDir::new(Location::parse(&checkpoint_raw)?);
    let resume_raw = pick(
        overrides.load_checkpoint.clone(),
        env.resume_from.clone(),
        config.load_checkpoint.clone(),
    );
    let resume = resume_raw.as_deref().map(Location::parse).transpose()?;
    let faults = Faults::parse(env.fault.as_deref().unwrap_or(""), process.index)
        .map_err(|e| Fatal::usage(format!("PODQ_SIM_FAULT: {e}")))?;

    log!(
        "process {}/{} (host {} of {}), job {}, attempt {}, config {} (sha256 {}), {} steps, \
         evals at {:?}, checkpoints at {} to {}",
        process.index,
        process.count,
        env.host_index.as_deref().unwrap_or("?"),
        env.host_count.as_deref().unwrap_or("?"),
        env.job_id.as_deref().unwrap_or("-"),
        env.attempt.as_deref().unwrap_or("-"),
        config_file.display(),
        &loaded.sha256[..12],
        schedule.total_steps,
        schedule.evals,
        schedule.describe_checkpoints(),
        checkpoints.uri(),
    );
    if !faults.is_empty() {
        log!("injected faults for this process: {}", faults.describe());
    }

    let lock = TpuLock::acquire(&env.lockfile)?;
    termination.handle(lock.path().to_owned());

    // Listed before joining: no process writes a checkpoint until everyone has joined, so
    // every process sees the same directory and takes the same save decisions.
    let latest_committed = checkpoints.latest_committed_step();
    let reporter = Reporter::new(process.index);
    let restorable = match &resume {
        Some(location) => {
            let phase = |edge| {
                reporter
                    .phase(Phase::Restore, edge, None)
                    .map_err(|e| Fatal::failure(format!("cannot write to stdout: {e}")))
            };
            phase(Edge::Start)?;
            let step = restorable_step(location, process.index);
            phase(Edge::End)?;
            step
        }
        None => 0,
    };
    let (group, start) =
        Group::join(&process, restorable).context("joining the other processes")?;
    if start != restorable {
        warn_not_loaded(
            resume.as_ref().map_or("-", |l| l.uri.as_str()),
            "not every process could restore it",
        );
    }
    if let Ok(accelerator) = std::env::var("PODQ_ACCELERATOR") {
        let devices = std::env::var("PODQ_SLICE_DEVICES").unwrap_or_else(|_| "?".into());
        log!("on a {accelerator} slice of {devices} devices");
    }
    if start > 0 {
        log!("resuming from step {start}");
    }
    // As a trainer calls wandb.init and report_link once the processes have joined.
    for (name, url) in sim_links(&std::env::var("PODQ_SIM_LINK").unwrap_or_default(), &env)? {
        reporter
            .link(&name, &url)
            .map_err(|e| Fatal::failure(format!("cannot write to stdout: {e}")))?;
    }
    if faults.crash_on_start() {
        return Err(train::injected_crash("crash", process.index));
    }

    let chatty = chatter(std::env::var("PODQ_SIM_LOG_LINES_PER_S").ok());
    let trainer = Trainer {
        reporter,
        process,
        group,
        schedule,
        curves,
        checkpoints,
        latest_committed,
        faults,
        run_secs: run_secs_on_slice(
            args.run_secs,
            std::env::var("PODQ_ACCELERATOR").ok().as_deref(),
        ),
        save_time: env.save_time,
        stamp_metrics: chatty,
    };
    let result = trainer.run(start);
    // Released only once training is over, successful or not.
    drop(lock);
    result
}

/// `PODQ_SIM_LINK`: links to report at the start, separated by spaces, each `name=url`;
/// `{job_id}` and `{attempt}` in a URL become `PODQ_JOB_ID` and `PODQ_ATTEMPT`, as a trainer's
/// W&B run URL carries `podq_trainer.run_id()`. Printed as given, bad ones too: the worker
/// judges them.
fn sim_links(raw: &str, env: &Environment) -> Result<Vec<(String, String)>, Fatal> {
    raw.split_whitespace()
        .map(|entry| {
            let (name, url) = entry
                .split_once('=')
                .ok_or_else(|| Fatal::usage(format!("PODQ_SIM_LINK: {entry:?} is not name=url")))?;
            let url = url
                .replace("{job_id}", env.job_id.as_deref().unwrap_or(""))
                .replace("{attempt}", env.attempt.as_deref().unwrap_or(""));
            Ok((name.to_owned(), url))
        })
        .collect()
}

/// The first source that says anything wins, even when what it says is "nothing".
fn pick(
    cli: Option<Option<String>>,
    env: Option<Option<String>>,
    file: Option<String>,
) -> Option<String> {
    cli.or(env)
        .unwrap_or_else(|| file.as_deref().and_then(cli::optional_value))
}

/// The step this process can restore from `location`, or 0 after the real trainer's warning.
fn restorable_step(location: &Location, process_index: usize) -> u64 {
    checkpoint::loadable_step(location, process_index).unwrap_or_else(|reason| {
        warn_not_loaded(&location.uri, &reason);
        0
    })
}

/// What the real trainer does when it cannot load its checkpoint: warn and start over.
fn warn_not_loaded(uri: &str, reason: &str) {
    log!("WARNING: could not load checkpoint {uri}: {reason}; starting from step 0");
}

/// With `PODQ_SIM_LOG_LINES_PER_S=N`, prints N numbered log lines a second on stderr for as
/// long as the process lives, as a chatty real trainer does (tqdm, per-batch losses): what
/// live logs are tested and measured with. Each line carries the time it was printed
/// (`printed_ms=`), so a reader can measure delivery. Answers whether it chatters.
fn chatter(rate: Option<String>) -> bool {
    let Some(rate) = rate
        .and_then(|r| r.trim().parse::<f64>().ok())
        .filter(|r| *r > 0.0)
    else {
        return false;
    };
    let period = std::time::Duration::from_secs_f64(1.0 / rate);
    std::thread::spawn(move || {
        let origin = std::time::Instant::now();
        for n in 1u64.. {
            let due = origin + period.mul_f64(n as f64);
            if let Some(wait) = due.checked_duration_since(std::time::Instant::now()) {
                std::thread::sleep(wait);
            }
            log!("chatter line {n} printed_ms={}", now_ms());
        }
    });
    true
}

/// Milliseconds since the epoch.
pub(crate) fn now_ms() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis())
}

#[cfg(test)]
mod tests {
    use super::pick;

    fn some(s: &str) -> Option<Option<String>> {
        Some(Some(s.to_owned()))
    }

    #[test]
    fn command_line_beats_environment_beats_config() {
        let file = Some("gs://bucket/ckpt".to_owned());
        assert_eq!(
            pick(some("/cli"), some("/env"), file.clone()),
            Some("/cli".into())
        );
        assert_eq!(pick(None, some("/env"), file.clone()), Some("/env".into()));
        assert_eq!(pick(None, None, file.clone()), file);
    }

    #[test]
    fn an_explicit_null_wins_too() {
        assert_eq!(pick(Some(None), some("file:///env/step_10"), None), None);
        assert_eq!(pick(None, Some(None), Some("/file/step_10".into())), None);
        assert_eq!(pick(None, None, Some("null".into())), None);
    }
}

/// The slice type `--run-secs` is measured on: the study's.
const REFERENCE_SLICE: &str = "v4-64";

/// How long the run takes on the slice podq says it runs on (`PODQ_ACCELERATOR`): `run_secs`
/// is its length on a v4-64, and a slice of more peak bf16 FLOPs runs it faster in
/// proportion, as the plan's prior assumes. An unknown or absent type keeps `run_secs`.
/// Public so that a test can ask for a run of a given length on the slice it runs on.
pub fn run_secs_on_slice(run_secs: f64, accelerator: Option<&str>) -> f64 {
    let peak = |name: &str| {
        podq_api::slice_type(name)
            .ok()
            .map(|t| t.peak_bf16_tflops())
    };
    match (accelerator.and_then(peak), peak(REFERENCE_SLICE)) {
        (Some(here), Some(reference)) if here > 0.0 => run_secs * reference / here,
        _ => run_secs,
    }
}

#[cfg(test)]
mod slice_speed {
    use super::run_secs_on_slice;

    #[test]
    fn a_faster_generation_runs_the_same_steps_sooner() {
        assert_eq!(run_secs_on_slice(60.0, Some("v4-64")), 60.0);
        let v6e = run_secs_on_slice(60.0, Some("v6e-32"));
        assert!((v6e - 60.0 * 275.0 / 918.0).abs() < 1e-9, "{v6e}");
        assert_eq!(run_secs_on_slice(60.0, Some("gpu-8")), 60.0);
        assert_eq!(run_secs_on_slice(60.0, None), 60.0);
    }
}
