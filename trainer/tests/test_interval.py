"""checkpoint_interval: podq's advised interval, or the trainer's own."""

import contextlib
import io
import os
import unittest
from unittest import mock

import _util  # noqa: F401  (puts the working tree's package first on sys.path)
import podq_trainer


class CheckpointIntervalTest(unittest.TestCase):
    def interval(self, value, default=5000):
        env = {} if value is None else {"PODQ_CHECKPOINT_INTERVAL_STEPS": value}
        err = io.StringIO()
        with mock.patch.dict(os.environ, env, clear=True), contextlib.redirect_stderr(err):
            return podq_trainer.checkpoint_interval(default), err.getvalue()

    def test_without_advice_the_trainers_own(self):
        self.assertEqual(self.interval(None), (5000, ""))
        self.assertEqual(self.interval(""), (5000, ""))

    def test_the_advised_interval(self):
        self.assertEqual(self.interval("457"), (457, ""))
        self.assertEqual(self.interval(" 457\n"), (457, ""))

    def test_a_bad_value_warns_and_keeps_saving(self):
        for bad in ["0", "-3", "1.5", "auto"]:
            steps, warning = self.interval(bad)
            self.assertEqual(steps, 5000, bad)
            self.assertIn("PODQ_CHECKPOINT_INTERVAL_STEPS", warning, bad)


if __name__ == "__main__":
    unittest.main()
