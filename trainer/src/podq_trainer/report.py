"""PODQ report lines: how a trainer tells podq's worker about progress.

    PODQ {"event":"metrics","step":1200,"values":{"train/lm_loss":0.53}}
    PODQ {"event":"checkpoint","step":5000,"uri":"gs://bucket/run/5000"}
    PODQ {"event":"phase","phase":"save","edge":"start","step":5000}
    PODQ {"event":"link","name":"wandb","url":"https://wandb.ai/team/trm/runs/0c9e..."}

A link line points at the run elsewhere (its W&B run, say): podq shows the newest URL of each
name with the job, across attempts.

A phase line marks the start or end of something only the trainer can see: compiling the
first step, restoring a checkpoint, the blocking part of a save. The worker timestamps lines
as it reads them, so they carry no time.

Only process 0 prints. Each line is built completely and then written to file descriptor 1
with a single ``os.write`` call, under a lock, after flushing ``sys.stdout``. Orbax and JAX log
through absl from background threads into the same stdout; writing the line and its newline
separately (as ``print`` does) let those logs land in between and fuse two lines into one.
A single write of at most PIPE_BUF bytes (4096 on Linux) is atomic on a pipe, so other writers
can only come before or after the line, never inside it. Python logging handlers write each
record whole, so they cannot break a PODQ line; ``print()`` from another thread writes its text
and its newline separately and can still leave half a line in front of one.
"""

import contextlib
import json
import math
import os
import re
import select
import sys
import threading

from . import compile_time

__all__ = ["PHASES", "phase", "report_checkpoint", "report_link", "report_metrics", "report_phase"]

PHASES = ("compile", "restore", "save")
_EDGES = ("start", "end")

# The rules podq's worker and server apply to a link (api/src/links.rs): a short name, an
# http(s) URL of bounded length without spaces or control characters.
_LINK_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_.-]{0,31}")
_LINK_URL_MAX = 2048

_PREFIX = "PODQ "
_PIPE_BUF = 4096
_lock = threading.Lock()


def report_metrics(step, values, process_index=None):
    """Report the metrics of ``step``: a mapping of name to number.

    Values may be Python numbers or scalar arrays (anything ``float()`` accepts). NaN and
    infinite values, which JSON cannot carry, are reported as the strings ``"NaN"``,
    ``"Infinity"`` and ``"-Infinity"``: podq records where a run diverged, and its divergence
    guard stops a run whose loss stays non-finite (docs/trainer.md). Values that are not
    numbers are dropped with a warning on stderr; the line is still printed so podq sees the
    step advance.
    """
    if not _is_reporting_process(process_index):
        return
    step = int(step)
    compiled = compile_time.take_once()
    if compiled is not None:
        _emit({"event": "compiled", "seconds": round(compiled, 3)})
    reported = {}
    dropped = []
    for name, value in values.items():
        number = _as_float(value)
        if number is None:
            dropped.append("%s=%.40r" % (name, value))
        else:
            reported[str(name)] = _marker(number)
    if dropped:
        _warn("dropped non-numeric metric values at step %d: %s" % (step, ", ".join(dropped)))
    _emit({"event": "metrics", "step": step, "values": reported})


def _marker(number):
    """A finite number as it is; NaN and the infinities as podq's markers."""
    if math.isnan(number):
        return "NaN"
    if math.isinf(number):
        return "Infinity" if number > 0 else "-Infinity"
    return number


def report_checkpoint(step, uri, process_index=None):
    """Report that Orbax has finished saving ``step`` at ``uri`` (the step directory).

    podq lists the checkpoint store itself before it trusts a checkpoint, so this line is a
    hint that makes the checkpoint visible sooner, not a promise.
    """
    if not _is_reporting_process(process_index):
        return
    _emit({"event": "checkpoint", "step": int(step), "uri": str(uri)})


def report_link(name, url, process_index=None):
    """Report where the run lives elsewhere: ``name`` (e.g. ``"wandb"``) and its ``url``.

    podq shows the newest URL of each name with the job (its JSON, ``podq job``, the
    dashboard), across attempts. ``name`` is 1 to 32 letters, digits, ``_``, ``.`` or ``-``,
    starting with a letter; ``url`` is ``http://`` or ``https://``, at most 2048 characters,
    without spaces. A link that breaks these rules (``run.url`` is ``None`` for an offline W&B
    run) is not reported: a warning goes to stderr and the trainer goes on.
    """
    if not _is_reporting_process(process_index):
        return
    problem = _link_problem(name, url)
    if problem:
        _warn("link not reported: %s" % problem)
        return
    _emit({"event": "link", "name": name, "url": url})


def _link_problem(name, url):
    if not isinstance(name, str) or not _LINK_NAME.fullmatch(name):
        return ("name %.60r is not 1 to 32 letters, digits, '_', '.' or '-' starting with a "
                "letter" % (name,))
    if not isinstance(url, str):
        return "the url of %s is %.60r, not a string" % (name, url)
    if not (url.startswith("https://") or url.startswith("http://")) or len(url) <= len("https://"):
        return "the url of %s, %.80r, is not http:// or https://" % (name, url)
    if len(url) > _LINK_URL_MAX:
        return "the url of %s is %d characters long, more than %d" % (name, len(url), _LINK_URL_MAX)
    if any(c.isspace() or ord(c) < 0x20 or ord(c) == 0x7F for c in url):
        return "the url of %s, %.80r, holds a space or a control character" % (name, url)
    return None


def report_phase(phase, edge, step=None, process_index=None):
    """Report the ``edge`` ("start" or "end") of ``phase``: "compile", "restore" or "save".

    ``step`` (optional) is the step saved or restored. Raises ``ValueError`` for another
    phase or edge, on every process, so a typo shows up in a one-process run too.
    """
    if phase not in PHASES:
        raise ValueError("phase %r is not one of %s" % (phase, ", ".join(PHASES)))
    if edge not in _EDGES:
        raise ValueError("edge %r is not one of %s" % (edge, ", ".join(_EDGES)))
    if step is not None:
        step = int(step)
    if phase == "compile":
        compile_time.phase_timed()
    if not _is_reporting_process(process_index):
        return
    event = {"event": "phase", "phase": phase, "edge": edge}
    if step is not None:
        event["step"] = step
    _emit(event)


@contextlib.contextmanager
def phase(name, step=None, process_index=None):
    """Report the start of phase ``name`` on entry and its end on exit, also on an exception::

        with podq_trainer.phase("save", step=step):
            manager.save(step, args=ocp.args.StandardSave(state))  # async: the blocking part
    """
    report_phase(name, "start", step, process_index)
    try:
        yield
    finally:
        report_phase(name, "end", step, process_index)


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
    line = (_PREFIX + json.dumps(event, separators=(",", ":"), allow_nan=False) + "\n").encode("utf-8")
    if len(line) > _PIPE_BUF:
        _warn("PODQ line of %d bytes is longer than PIPE_BUF (%d): other writers may split it" % (len(line), _PIPE_BUF))
    with _lock:
        # Whatever this process has print()ed so far goes out first, in order.
        try:
            sys.stdout.flush()
        except (AttributeError, ValueError, OSError):
            pass  # stdout replaced by something without flush(), or closed
        _write_all(1, line)


def _write_all(fd, data):
    view = memoryview(data)
    while view:
        try:
            written = os.write(fd, view)
        except BlockingIOError:  # stdout set non-blocking by someone else: wait until writable
            select.select([], [fd], [])
            continue
        view = view[written:]


def _warn(message):
    try:
        sys.stderr.write("podq_trainer: WARNING: " + message + "\n")
        sys.stderr.flush()
    except (AttributeError, ValueError, OSError):
        pass
