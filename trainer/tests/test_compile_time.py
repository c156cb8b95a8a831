"""compile_time: JAX's own compile events, summed up to the first step and reported once."""

import os
import subprocess
import sys
import unittest

import _util

CHILD = r'''
import sys
import podq_trainer          # before JAX, as most trainers import it
import jax, jax.numpy as jnp

@jax.jit
def step(x):
    for _ in range(60):
        x = jnp.sin(x) * 0.99 + 0.01
    return x

marked = sys.argv[1] == "marked"
if marked:
    with podq_trainer.phase("compile"):
        step(jnp.ones(8)).block_until_ready()
else:
    step(jnp.ones(8)).block_until_ready()
podq_trainer.report_metrics(1, {"loss": 0.5})
podq_trainer.report_metrics(2, {"loss": 0.4})
'''


def _has_jax():
    return subprocess.run([sys.executable, "-c", "import jax"], capture_output=True).returncode == 0


@unittest.skipUnless(_has_jax(), "needs JAX (scripts/venv installs it)")
class CompileTimeTest(unittest.TestCase):
    def run_child(self, mode):
        out = subprocess.run(
            [sys.executable, "-c", CHILD, mode],
            capture_output=True,
            text=True,
            env=_util.child_env(JAX_PLATFORMS="cpu"),
            timeout=300,
        )
        self.assertEqual(out.returncode, 0, out.stderr)
        return [line for line in out.stdout.splitlines() if line.startswith("PODQ ")]

    def test_an_unmarked_trainer_reports_its_compile_once_before_its_first_metrics(self):
        lines = self.run_child("unmarked")
        self.assertTrue(lines[0].startswith('PODQ {"event":"compiled","seconds":'), lines)
        seconds = float(lines[0].split('"seconds":')[1].rstrip("}"))
        self.assertGreater(seconds, 0.0)
        self.assertEqual(sum('"compiled"' in line for line in lines), 1, lines)
        self.assertIn('"step":1', lines[1])

    def test_a_trainer_that_times_its_compile_is_trusted_instead(self):
        lines = self.run_child("marked")
        self.assertFalse(any('"compiled"' in line for line in lines), lines)
        self.assertIn('"phase":"compile"', lines[0])


if __name__ == "__main__":
    unittest.main()
