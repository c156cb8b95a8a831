"""Tests for podq_report: run with ``python3 -m unittest discover -s trainer``."""

import io
import json
import os
import unittest
from contextlib import redirect_stderr, redirect_stdout
from unittest import mock

import podq_report


class _Scalar:
    """Stands in for a 0-d numpy/jax array: convertible with float()."""

    def __init__(self, value):
        self.value = value

    def __float__(self):
        return float(self.value)


class _Int:
    """Stands in for a step counter held in an array: convertible with int()."""

    def __init__(self, value):
        self.value = value

    def __int__(self):
        return self.value


def capture(fn, *args, **kwargs):
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        fn(*args, **kwargs)
    return out.getvalue(), err.getvalue()


def parse(line):
    assert line.startswith("PODQ "), line
    return json.loads(line[len("PODQ "):])


@mock.patch.dict(os.environ, {}, clear=False)
class ReportTest(unittest.TestCase):
    def setUp(self):
        os.environ.pop("JAX_PROCESS_INDEX", None)

    def test_metrics_line_is_exact(self):
        out, err = capture(podq_report.report_metrics, 1200, {"train/lm_loss": 0.53, "train/accuracy": 0.61})
        self.assertEqual(
            out,
            'PODQ {"event":"metrics","step":1200,"values":{"train/lm_loss":0.53,"train/accuracy":0.61}}\n',
        )
        self.assertEqual(err, "")

    def test_checkpoint_line_is_exact(self):
        out, _ = capture(podq_report.report_checkpoint, 5000, "gs://b/run/step_5000")
        self.assertEqual(out, 'PODQ {"event":"checkpoint","step":5000,"uri":"gs://b/run/step_5000"}\n')

    def test_only_process_zero_reports(self):
        os.environ["JAX_PROCESS_INDEX"] = "3"
        self.assertEqual(capture(podq_report.report_metrics, 10, {"a": 1.0}), ("", ""))
        self.assertEqual(capture(podq_report.report_checkpoint, 10, "/c/step_10"), ("", ""))
        os.environ["JAX_PROCESS_INDEX"] = "0"
        self.assertNotEqual(capture(podq_report.report_metrics, 10, {"a": 1.0})[0], "")

    def test_explicit_process_index_wins(self):
        os.environ["JAX_PROCESS_INDEX"] = "0"
        self.assertEqual(capture(podq_report.report_metrics, 10, {"a": 1.0}, process_index=1)[0], "")
        os.environ["JAX_PROCESS_INDEX"] = "5"
        self.assertNotEqual(capture(podq_report.report_checkpoint, 10, "/c", process_index=0)[0], "")

    def test_non_finite_values_are_dropped_with_a_warning(self):
        values = {"train/loss": float("nan"), "train/lm_loss": float("inf"), "train/accuracy": 0.5, "note": "x"}
        out, err = capture(podq_report.report_metrics, 20, values)
        self.assertEqual(parse(out), {"event": "metrics", "step": 20, "values": {"train/accuracy": 0.5}})
        self.assertIn("WARNING", err)
        self.assertIn("train/loss", err)
        self.assertIn("train/lm_loss", err)
        self.assertNotIn("NaN", out)
        self.assertNotIn("Infinity", out)

    def test_array_scalars_and_ints_are_numbers(self):
        out, _ = capture(podq_report.report_metrics, _Int(30), {"train/count": 6144, "train/loss": _Scalar(0.25)})
        self.assertEqual(parse(out), {"event": "metrics", "step": 30, "values": {"train/count": 6144.0, "train/loss": 0.25}})

    def test_one_line_per_call(self):
        out, _ = capture(podq_report.report_metrics, 40, {"a": 1})
        self.assertEqual(out.count("\n"), 1)


if __name__ == "__main__":
    unittest.main()
