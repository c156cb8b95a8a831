//! The simulated training loop: paced steps, lock-step barriers, metrics, evaluations and
//! checkpoints, with the injected faults.

use std::time::{Duration, Instant};

use anyhow::Context;

use crate::checkpoint::CheckpointDir;
use crate::coordination::Group;
use crate::curves::Curves;
use crate::env::JaxProcess;
use crate::fatal::Fatal;
use crate::faults::Faults;
use crate::report::{log, Edge, Phase, Reporter};
use crate::schedule::Schedule;

const MIN_CHECKPOINT_WRITE: Duration = Duration::from_millis(50);

pub struct Trainer {
    pub process: JaxProcess,
    pub group: Group,
    pub schedule: Schedule,
    pub curves: Curves,
    pub reporter: Reporter,
    pub checkpoints: CheckpointDir,
    /// Steps at or below it are not saved again (see `CheckpointDir::latest_committed_step`).
    pub latest_committed: Option<u64>,
    pub faults: Faults,
    pub run_secs: f64,
    /// `PODQ_SIM_SAVE_S`: how long a save blocks training. When set the time is really spent:
    /// the steps after a save do not catch up with the pace, so more saves make a longer run.
    /// `None` keeps the default write time, which the pace absorbs.
    pub save_time: Option<Duration>,
    /// Adds `sim/printed_ms` (when the line was printed) to each train report, so metric
    /// delivery can be measured as log delivery is (`PODQ_SIM_LOG_LINES_PER_S`).
    pub stamp_metrics: bool,
}

impl Trainer {
    pub fn run(mut self, start: u64) -> anyhow::Result<()> {
        let total = self.schedule.total_steps;
        if self.faults.no_progress() {
            self.reporter
                .metrics(start, &self.curves.train(start))
                .context("writing to stdout")?;
            log!("fault no-progress: staying at step {start}");
            park_forever();
        }
        // XLA compiles before the first step: the slow-start fault's sleep stands in for it;
        // without one the first step itself is the compilation, as JAX's first call is.
        let compile_in_first_step = match self.faults.slow_start() {
            Some(delay) => {
                self.report_phase(Phase::Compile, Edge::Start, None)?;
                log!("fault slow-start: compiling for {delay:?}");
                std::thread::sleep(delay);
                self.report_phase(Phase::Compile, Edge::End, None)?;
                false
            }
            None if start < total => {
                self.report_phase(Phase::Compile, Edge::Start, None)?;
                true
            }
            None => false,
        };

        let mut pace = Pace::new(start, total, self.run_secs);
        for step in start + 1..=total {
            let log_point = Schedule::is_log_point(step);
            let eval = self.schedule.is_eval(step);
            let checkpoint = self.schedule.is_checkpoint(step);
            let compiled = compile_in_first_step && step == start + 1;
            let faulty = self.faults.crash_at(step) || self.faults.hang_at(step);
            // Only steps somebody can observe are paced; sleeping on every one of thousands
            // of steps would cost more than the steps themselves.
            if !(log_point || eval || checkpoint || compiled || faulty) {
                continue;
            }
            pace.wait_for(step);
            if self.faults.crash_at(step) {
                return Err(injected_crash(
                    &format!("crash-at-step={step}"),
                    self.process.index,
                ));
            }
            if self.faults.hang_at(step) {
                log!("fault hang-at-step={step}: no longer advancing");
                park_forever();
            }

            // At log points and evaluations only, as before: whether a step ends the
            // compilation differs between processes under a per-host slow-start, and a save
            // has barriers of its own.
            if log_point || eval {
                self.group.barrier(&format!("step {step}"))?;
            }
            if compiled {
                self.report_phase(Phase::Compile, Edge::End, None)?;
            }
            if log_point {
                let mut values = self.curves.train(self.faults.plateaued(step));
                if self.faults.diverged_at(step) {
                    diverge(&mut values);
                }
                if self.stamp_metrics {
                    values.push(("sim/printed_ms", crate::now_ms() as f64));
                }
                self.report_metrics(step, &values)?;
            }
            if eval {
                let mut values = self.curves.eval(self.faults.plateaued(step));
                if self.faults.diverged_at(step) {
                    diverge(&mut values);
                }
                self.report_metrics(step, &values)?;
                if self.process.is_leader() {
                    log!("evaluated at step {step}/{total}");
                }
            }
            if checkpoint {
                let began = Instant::now();
                self.save_checkpoint(step)?;
                if self.save_time.is_some() {
                    pace.delay(began.elapsed());
                }
            }
        }
        if self.process.is_leader() {
            log!(
                "training finished: {total} steps (curve's final exact accuracy {:.3})",
                self.curves.final_exact_accuracy()
            );
        }
        Ok(())
    }

    fn report_metrics(&self, step: u64, values: &[(&str, f64)]) -> anyhow::Result<()> {
        self.reporter
            .metrics(step, values)
            .map_err(|e| Fatal::failure(format!("cannot write metrics to stdout: {e}")).into())
    }

    fn report_phase(&self, phase: Phase, edge: Edge, step: Option<u64>) -> anyhow::Result<()> {
        self.reporter
            .phase(phase, edge, step)
            .map_err(|e| Fatal::failure(format!("cannot write to stdout: {e}")).into())
    }

    /// Orbax's multi-host save: process 0 makes the temporary directory, every process writes
    /// its shard, process 0 writes the metadata, and after a barrier process 0 commits by
    /// renaming. Only then is the checkpoint reported. Training is blocked from the first
    /// barrier to the last, which the `save` phase lines bracket.
    fn save_checkpoint(&mut self, step: u64) -> anyhow::Result<()> {
        if self.latest_committed.is_some_and(|latest| latest >= step) {
            log!("skipping checkpoint at step {step}: the directory already holds a committed step >= {step}");
            return Ok(());
        }
        self.report_phase(Phase::Save, Edge::Start, Some(step))?;
        let leader = self.process.is_leader();
        let failed = |what: &str, e: std::io::Error| {
            Fatal::failure(format!("checkpoint step {step}: cannot {what}: {e}"))
        };
        if leader {
            self.checkpoints
                .prepare(step)
                .map_err(|e| failed("create the temporary directory", e))?;
        }
        self.group.barrier(&format!("checkpoint-begin {step}"))?;
        self.checkpoints
            .write_shard(step, self.process.index)
            .map_err(|e| failed("write this process's shard", e))?;
        if leader {
            self.checkpoints
                .write_metadata(step, self.process.count)
                .map_err(|e| failed("write the metadata", e))?;
        }
        self.group.barrier(&format!("checkpoint-written {step}"))?;
        if leader {
            // Long enough that a test can preempt a save half-way and find it uncommitted.
            std::thread::sleep(self.checkpoint_write_time());
            self.checkpoints
                .commit(step)
                .map_err(|e| failed("commit (rename)", e))?;
            let uri = self.checkpoints.step_uri(step);
            self.reporter
                .checkpoint(step, &uri)
                .map_err(|e| Fatal::failure(format!("cannot write to stdout: {e}")))?;
            log!("saved checkpoint {uri}");
        }
        // Orbax waits for the commit on every host before training on.
        self.group
            .barrier(&format!("checkpoint-committed {step}"))?;
        self.report_phase(Phase::Save, Edge::End, Some(step))?;
        Ok(())
    }

    fn checkpoint_write_time(&self) -> Duration {
        self.save_time.unwrap_or_else(|| {
            Duration::from_secs_f64(self.run_secs * 0.02).max(MIN_CHECKPOINT_WRITE)
        })
    }
}

/// Spreads the remaining steps of the run over its share of `--run-secs`.
struct Pace {
    origin: Instant,
    start: u64,
    step_time: Duration,
}

impl Pace {
    fn new(start: u64, total: u64, run_secs: f64) -> Self {
        Self {
            origin: Instant::now(),
            start,
            step_time: Duration::from_secs_f64(run_secs / total.max(1) as f64),
        }
    }

    /// Moves the rest of the run later by `by`: time the steps could not use.
    fn delay(&mut self, by: Duration) {
        self.origin += by;
    }

    fn wait_for(&self, step: u64) {
        let steps = u32::try_from(step - self.start).unwrap_or(u32::MAX);
        let due = self.origin + self.step_time * steps;
        if let Some(wait) = due.checked_duration_since(Instant::now()) {
            std::thread::sleep(wait);
        }
    }
}

/// Mimics an uncaught Python exception: a traceback on stderr and exit 1.
pub fn injected_crash(fault: &str, process_index: usize) -> anyhow::Error {
    Fatal::failure(format!(
        "Traceback (most recent call last):\n  \
         File \"pretrain_jax.py\", line 612, in <module>\n    launch()\n  \
         File \"pretrain_jax.py\", line 571, in launch\n    \
         train_state, metrics = train_batch(config, train_state, batch)\n\
         RuntimeError: injected fault {fault} on process {process_index} (PODQ_SIM_FAULT)"
    ))
    .into()
}

/// A trainer that stops advancing but stays alive; only a signal ends it.
fn park_forever() -> ! {
    loop {
        std::thread::park();
    }
}

/// What a diverged TRM run reports (fault `diverge-at-step`): NaN losses, and its own
/// `train/diverged` flag set.
fn diverge(values: &mut [(&str, f64)]) {
    for (name, value) in values.iter_mut() {
        if name.ends_with("loss") {
            *value = f64::NAN;
        } else if *name == "train/diverged" {
            *value = 1.0;
        }
    }
}
