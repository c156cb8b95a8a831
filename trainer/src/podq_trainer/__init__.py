"""podq's trainer contract for JAX trainers.

    import podq_trainer

    ckpt_root = podq_trainer.checkpoint_dir(cfg.checkpoint_path)   # gs://... or /abs/path
    resume = podq_trainer.resume_point(cfg.load_checkpoint)        # None or .directory/.step
    stop = podq_trainer.watch_for_stop()                           # after jax.distributed.initialize
    where = podq_trainer.slice_info()                              # .accelerator .hosts .devices or None
    state = manager.restore(resume.step, args=podq_trainer.restore_args(state, shardings))  # from any TPU type
    ...
    with podq_trainer.phase("compile"): <first step>               # optional: timed anyway
                                                                   # also "restore", "save"
    podq_trainer.report_metrics(step, metrics)                     # only process 0 prints
    every = podq_trainer.checkpoint_interval(default=5000)         # podq's advice, if any
    podq_trainer.report_checkpoint(step, step_dir)                 # after the save is committed
    run = wandb.init(project=..., id=podq_trainer.run_id(), resume="allow")  # same in every attempt
    podq_trainer.report_link("wandb", run.url)                     # shown with the job
    if stop.reached(step): save, wait, report; sys.exit(podq_trainer.EXIT_STOPPED)

No dependencies beyond the standard library; JAX is imported only by ``watch_for_stop``
when it has already been imported by the trainer, and JAX and Orbax only inside
``abstract_state`` and ``restore_args``.
"""

from . import compile_time
from .interval import checkpoint_interval
from .paths import TMP_MARKER, ResumePoint, checkpoint_dir, orbax_path, resume_point
from .report import PHASES, phase, report_checkpoint, report_link, report_metrics, report_phase
from .run import run_id
from .slice import SliceInfo, abstract_state, restore_args, slice_info
from .stop import EXIT_STOPPED, StopSignal, watch_for_stop

# Every JAX trainer's compile time, unmarked (compile_time.py).
compile_time.install()

__all__ = [
    "EXIT_STOPPED",
    "PHASES",
    "ResumePoint",
    "SliceInfo",
    "StopSignal",
    "TMP_MARKER",
    "abstract_state",
    "checkpoint_dir",
    "checkpoint_interval",
    "orbax_path",
    "phase",
    "report_checkpoint",
    "report_link",
    "report_metrics",
    "report_phase",
    "restore_args",
    "resume_point",
    "run_id",
    "slice_info",
    "watch_for_stop",
]
