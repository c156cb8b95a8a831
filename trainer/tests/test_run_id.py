"""run_id: one tracker run per podq job, the same in every attempt."""

import contextlib
import io
import os
import re
import unittest
from unittest import mock

import _util  # noqa: F401  (puts the working tree's package first on sys.path)
import podq_trainer

JOB = "0c9e6f4a-2b1d-4c3e-9f8a-7b6c5d4e3f21"


def attempt_env(attempt, lease, host=0):
    """What the worker gives a trainer (worker/src/attempt/launch.rs), for one attempt."""
    return {
        "PODQ_JOB_ID": JOB,
        "PODQ_ATTEMPT": str(attempt),
        "PODQ_LEASE_ID": lease,
        "PODQ_HOST_INDEX": str(host),
        "JAX_PROCESS_INDEX": str(host),
    }


class RunIdTest(unittest.TestCase):
    def run_id(self, env):
        err = io.StringIO()
        with mock.patch.dict(os.environ, env, clear=True), contextlib.redirect_stderr(err):
            return podq_trainer.run_id(), err.getvalue()

    def test_the_same_in_the_attempt_after_a_preemption(self):
        first, _ = self.run_id(attempt_env(1, "11111111-1111-4111-8111-111111111111"))
        resumed, _ = self.run_id(attempt_env(2, "22222222-2222-4222-8222-222222222222"))
        self.assertEqual(first, JOB)
        self.assertEqual(resumed, first)
        # Every host agrees, should more than one log.
        self.assertEqual(self.run_id(attempt_env(2, "x", host=3))[0], first)

    def test_an_id_w_and_b_accepts(self):
        run_id, err = self.run_id(attempt_env(1, "l"))
        self.assertEqual(err, "")
        self.assertLessEqual(len(run_id), 64)
        # W&B refuses / \ # ? % : in a run id.
        self.assertIsNone(re.search(r"[/\\#?%:]", run_id))
        self.assertEqual(self.run_id({"PODQ_JOB_ID": " %s\n" % JOB.upper()})[0], JOB)

    def test_outside_podq_none(self):
        self.assertEqual(self.run_id({}), (None, ""))
        self.assertEqual(self.run_id({"PODQ_JOB_ID": "  "}), (None, ""))

    def test_a_value_that_is_not_a_uuid_warns(self):
        for bad in ["exp01a", "a/b", JOB + "-x"]:
            run_id, err = self.run_id({"PODQ_JOB_ID": bad})
            self.assertIsNone(run_id, bad)
            self.assertIn("PODQ_JOB_ID", err, bad)


if __name__ == "__main__":
    unittest.main()
