"""Stopping at a step boundary when podq (or the cloud) sends SIGTERM.

Usage, on every process, after ``jax.distributed.initialize`` (if the run has several)::

    stop = podq_trainer.watch_for_stop()
    for step in range(start, total):
        ...train one step...
        if stop.reached(step):
            save a checkpoint of `step` (force), wait until it is committed, report it
            sys.exit(podq_trainer.EXIT_STOPPED)   # 143

Call ``reached`` at every step with the same step numbers on every process.

With ``jax.distributed`` initialized, ``reached`` is
``jax.experimental.multihost_utils.reached_preemption_sync_point``: JAX's preemption sync
manager (on by default, config ``jax_enable_preemption_service``) installs a SIGTERM handler
in every process during ``jax.distributed.initialize``. When any process gets SIGTERM, the
processes agree in the background on one step (the largest step any of them has reached,
plus one) and ``reached`` returns True at that step on all of them, so they all save the
same step. Without ``jax.distributed`` (one process), a Python SIGTERM handler sets a flag that
``reached`` returns at the next step boundary; a second SIGTERM kills the process at once.

Exit convention: after the final save the trainer exits with code 143 (128 + SIGTERM),
meaning "stopped, not finished", so a SIGTERM that podq did not send is never taken for a
finished run. Exit 0 only after the last training step.
"""

import os
import signal
import sys
import threading

__all__ = ["watch_for_stop", "StopSignal", "EXIT_STOPPED"]

EXIT_STOPPED = 128 + signal.SIGTERM  # 143


class StopSignal:
    """Answers "stop at this step?"; made by :func:`watch_for_stop`."""

    def __init__(self, distributed):
        self.distributed = distributed  # True: JAX's preemption sync manager decides
        self._requested = threading.Event()
        self._previous = None
        if distributed:
            _check_preemption_service()
        else:
            self._previous = signal.signal(signal.SIGTERM, self._on_sigterm)

    @property
    def requested(self):
        """True once this process has seen SIGTERM (single-process mode only)."""
        return self._requested.is_set()

    def reached(self, step):
        """True at the step where every process should save and stop."""
        if self.distributed:
            from jax.experimental import multihost_utils

            return bool(multihost_utils.reached_preemption_sync_point(int(step)))
        return self._requested.is_set()

    def close(self):
        """Put back the SIGTERM handler that was there before (single-process mode)."""
        if self._previous is not None:
            signal.signal(signal.SIGTERM, self._previous)
            self._previous = None

    def _on_sigterm(self, signum, frame):
        if self._requested.is_set():
            # Second SIGTERM: stop waiting for a step boundary and die from the signal.
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGTERM)
            return
        self._requested.set()
        try:
            sys.stderr.write("podq_trainer: SIGTERM received; stopping at the next step boundary\n")
            sys.stderr.flush()
        except (AttributeError, ValueError, OSError):
            pass


def watch_for_stop():
    """Start watching for a stop request; call once, from the main thread, on every process.

    Call it after ``jax.distributed.initialize`` when there are several processes.
    """
    distributed = _jax_distributed_initialized()
    if not distributed and _int_env("JAX_PROCESS_COUNT", 1) > 1:
        raise RuntimeError(
            "JAX_PROCESS_COUNT > 1 but jax.distributed is not initialized: call "
            "jax.distributed.initialize() before watch_for_stop(), or the processes "
            "cannot agree on the step to stop at"
        )
    return StopSignal(distributed)


def _jax_distributed_initialized():
    if "jax" not in sys.modules:  # nobody can have initialized it without importing jax
        return False
    import jax

    return bool(jax.distributed.is_initialized())


def _check_preemption_service():
    try:  # no public API tells whether the preemption sync manager exists
        from jax._src.distributed import global_state

        manager = global_state.preemption_sync_manager
    except (ImportError, AttributeError):
        manager = "unknown"
    if manager is None:
        raise RuntimeError(
            "JAX's preemption service is off, so SIGTERM would not stop the processes at "
            "a common step: run jax.config.update('jax_enable_preemption_service', True) "
            "before jax.distributed.initialize()"
        )
    handler = signal.getsignal(signal.SIGTERM)
    if callable(handler):
        raise RuntimeError(
            "a Python SIGTERM handler (%r) replaces JAX's preemption notifier; remove it" % (handler,)
        )
    if _sigterm_caught_by_process() is False:
        raise RuntimeError("JAX's preemption service is on but no SIGTERM handler is installed")


def _sigterm_caught_by_process():
    """Whether the kernel has a handler for SIGTERM in this process (Linux), else None."""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("SigCgt:"):
                    return bool(int(line.split()[1], 16) >> (signal.SIGTERM - 1) & 1)
    except OSError:
        pass
    return None


def _int_env(name, default):
    try:
        return int(os.environ.get(name, "").strip() or default)
    except ValueError:
        return default
