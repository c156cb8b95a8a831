"""The checkpoint interval podq advises (issue 19).

With ``checkpoint_interval: auto`` podq starts each attempt with the interval that loses the
least pod time to saves and to work redone after preemptions (Young/Daly, from the save cost
and the pod's failure history) in ``PODQ_CHECKPOINT_INTERVAL_STEPS``. A trainer saves every
that many steps, decoupled from its evaluations::

    every = podq_trainer.checkpoint_interval(default=cfg.eval_interval_steps)
    if step % every == 0: save(step)
"""

import os

from .report import _warn

ENV = "PODQ_CHECKPOINT_INTERVAL_STEPS"


def checkpoint_interval(default):
    """podq's advised interval in steps when it set one, else ``default``.

    A value that is not a whole number of at least 1 is ignored with a warning: a trainer
    must not stop saving because of a bad environment.
    """
    raw = os.environ.get(ENV, "").strip()
    if not raw:
        return default
    try:
        steps = int(raw)
    except ValueError:
        steps = 0
    if steps < 1:
        _warn("%s=%r is not a whole number of steps of at least 1; keeping the trainer's own "
              "interval (%r)" % (ENV, raw, default))
        return default
    return steps
