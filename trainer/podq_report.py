"""Report training progress to podq from a JAX trainer.

podq's worker reads the trainer's stdout on every host and acts on two kinds of line, which
only process 0 prints:

    PODQ {"event":"metrics","step":1200,"values":{"train/lm_loss":0.53}}
    PODQ {"event":"checkpoint","step":5000,"uri":"gs://bucket/run/step_5000"}

Usage in pretrain_jax.py::

    from podq_report import report_metrics, report_checkpoint

    report_metrics(step, metrics)            # after logging metrics
    report_checkpoint(step, checkpoint_uri)  # after Orbax has saved a step

Both functions may be called on every process: they print only on process 0 (from
``JAX_PROCESS_INDEX``, or the ``process_index=`` argument, e.g. ``jax.process_index()``).
No dependencies beyond the standard library.
"""

import json
import math
import os
import sys

__all__ = ["report_metrics", "report_checkpoint"]

_PREFIX = "PODQ "


def report_metrics(step, values, process_index=None):
    """Print a metrics line for ``step`` with the name -> number mapping ``values``.

    Values may be Python numbers or scalar arrays (anything ``float()`` accepts). NaN and
    infinite values, which JSON cannot carry, and values that are not numbers are dropped
    with a warning on stderr; the line is still printed so podq sees the step advance.
    """
    if not _is_reporting_process(process_index):
        return
    step = int(step)
    clean = {}
    dropped = []
    for name, value in values.items():
        number = _as_float(value)
        if number is None or not math.isfinite(number):
            dropped.append("%s=%.40r" % (name, value))
        else:
            clean[str(name)] = number
    if dropped:
        _warn("dropped non-finite or non-numeric metric values at step %d: %s" % (step, ", ".join(dropped)))
    _emit({"event": "metrics", "step": step, "values": clean})


def report_checkpoint(step, uri, process_index=None):
    """Print a checkpoint line: Orbax has finished saving ``step`` at ``uri``.

    podq checks the checkpoint store itself before it trusts a checkpoint, so this line is a
    hint that makes the checkpoint visible sooner, not a promise.
    """
    if not _is_reporting_process(process_index):
        return
    _emit({"event": "checkpoint", "step": int(step), "uri": str(uri)})


def _is_reporting_process(process_index):
    if process_index is None:
        raw = os.environ.get("JAX_PROCESS_INDEX", "").strip()
        if not raw:
            return True
        try:
            process_index = int(raw)
        except ValueError:
            _warn("JAX_PROCESS_INDEX=%r is not an integer; reporting as process 0" % raw)
            return True
    return int(process_index) == 0


def _as_float(value):
    if isinstance(value, (str, bytes)):
        return None
    try:
        return float(value)
    except (TypeError, ValueError, OverflowError):
        return None


def _emit(event):
    # allow_nan=False: an invalid line would be silently lost by the worker's parser.
    line = _PREFIX + json.dumps(event, separators=(",", ":"), allow_nan=False)
    print(line, flush=True)


def _warn(message):
    print("podq_report: WARNING: " + message, file=sys.stderr, flush=True)
