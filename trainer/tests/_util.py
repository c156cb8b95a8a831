"""Helpers shared by the trainer SDK's tests."""

import os
import sys

TESTS_DIR = os.path.dirname(os.path.abspath(__file__))
SRC_DIR = os.path.join(os.path.dirname(TESTS_DIR), "src")

# Test the working tree's package even if an older copy is installed.
if SRC_DIR not in sys.path:
    sys.path.insert(0, SRC_DIR)


def child_env(**extra):
    """Environment for a child Python that imports podq_trainer from the working tree."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (SRC_DIR, env.get("PYTHONPATH", "")) if p)
    env["PYTHONUNBUFFERED"] = "0"
    for name in ("JAX_PROCESS_INDEX", "JAX_PROCESS_COUNT", "COORDINATOR_ADDRESS", "PODQ_RESUME_FROM", "PODQ_CHECKPOINT_DIR"):
        env.pop(name, None)
    env.update({k: str(v) for k, v in extra.items()})
    return env
