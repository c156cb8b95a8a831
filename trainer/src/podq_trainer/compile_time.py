"""The compile time of every JAX trainer, without the trainer marking it.

On import, podq_trainer listens to JAX's own monitoring events (``jax.monitoring``): the
backend compile of each program (``/jax/core/compile/backend_compile_duration``) and each load
from the persistent compilation cache (``/jax/compilation_cache/cache_retrieval_time_sec``).
Their sum up to the first step is reported once, with the first metrics line, as::

    PODQ {"event":"compiled","seconds":3.2}

so podq's ``compile_s`` is there for every JAX trainer, and shows what the cache saved on a
resumed attempt. A trainer that times its compile itself (``podq_trainer.phase("compile")``)
is trusted instead, and nothing is sent.

JAX is never imported here: when the trainer imports it after podq_trainer, a finder on
``sys.meta_path`` installs the listener once JAX's module has run.
"""

import importlib.abc
import sys
import threading

EVENTS = (
    "/jax/core/compile/backend_compile_duration",
    "/jax/compilation_cache/cache_retrieval_time_sec",
)

_lock = threading.Lock()
_state = {"seconds": 0.0, "listening": False, "done": False}


def _on_duration(event, duration, **_kwargs):
    if event in EVENTS:
        with _lock:
            if not _state["done"]:
                _state["seconds"] += float(duration)


def _listen(jax_module):
    with _lock:
        if _state["listening"]:
            return
        _state["listening"] = True
    try:
        jax_module.monitoring.register_event_duration_secs_listener(_on_duration)
    except AttributeError:
        pass  # a JAX without monitoring: nothing to count


class _AfterJax(importlib.abc.MetaPathFinder):
    """Finds nothing itself: wraps the loader of ``jax`` to listen once it has loaded."""

    def find_spec(self, name, path, target=None):
        if name != "jax" or _state["listening"]:
            return None
        for finder in sys.meta_path:
            if finder is self:
                continue
            find = getattr(finder, "find_spec", None)
            spec = find(name, path, target) if find else None
            if spec is not None and spec.loader is not None:
                exec_module = spec.loader.exec_module

                def exec_then_listen(module, _exec=exec_module):
                    _exec(module)
                    _listen(module)

                spec.loader.exec_module = exec_then_listen
                return spec
        return None


def install():
    """Listens now if JAX is loaded, else once it is."""
    jax_module = sys.modules.get("jax")
    if jax_module is not None and hasattr(jax_module, "monitoring"):
        _listen(jax_module)
    elif not any(isinstance(f, _AfterJax) for f in sys.meta_path):
        sys.meta_path.insert(0, _AfterJax())


def phase_timed():
    """The trainer timed its compile itself: its figure wins."""
    with _lock:
        _state["done"] = True


def take_once():
    """The seconds counted so far, the first time only; None after, or when nothing was."""
    with _lock:
        if _state["done"]:
            return None
        _state["done"] = True
        seconds = _state["seconds"]
    return seconds if seconds > 0 else None
