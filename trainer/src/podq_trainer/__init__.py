"""podq's trainer contract for JAX trainers.

    import podq_trainer

    ckpt_root = podq_trainer.checkpoint_dir(cfg.checkpoint_path)   # gs://... or /abs/path
    resume = podq_trainer.resume_point(cfg.load_checkpoint)        # None or .directory/.step
    stop = podq_trainer.watch_for_stop()                           # after jax.distributed.initialize
    ...
    with podq_trainer.phase("compile"): <first step>               # also "restore", "save"
    podq_trainer.report_metrics(step, metrics)                     # only process 0 prints
    every = podq_trainer.checkpoint_interval(default=5000)         # podq's advice, if any
    podq_trainer.report_checkpoint(step, step_dir)                 # after the save is committed
    run = wandb.init(project=..., id=podq_trainer.run_id(), resume="allow")  # same in every attempt
    podq_trainer.report_link("wandb", run.url)                     # shown with the job
    if stop.reached(step): save, wait, report; sys.exit(podq_trainer.EXIT_STOPPED)

No dependencies beyond the standard library; JAX is imported only by ``watch_for_stop``
when it has already been imported by the trainer.
"""

from .interval import checkpoint_interval
from .paths import TMP_MARKER, ResumePoint, checkpoint_dir, orbax_path, resume_point
from .report import PHASES, phase, report_checkpoint, report_link, report_metrics, report_phase
from .run import run_id
from .stop import EXIT_STOPPED, StopSignal, watch_for_stop

__all__ = [
    "EXIT_STOPPED",
    "PHASES",
    "ResumePoint",
    "StopSignal",
    "TMP_MARKER",
    "checkpoint_dir",
    "checkpoint_interval",
    "orbax_path",
    "phase",
    "report_checkpoint",
    "report_link",
    "report_metrics",
    "report_phase",
    "resume_point",
    "run_id",
    "watch_for_stop",
]
