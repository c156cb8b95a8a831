"""report_metrics / report_checkpoint / report_phase / phase: the exact PODQ lines."""

import io
import json
import os
import sys
import tempfile
import unittest
from contextlib import redirect_stderr
from unittest import mock

import _util  # noqa: F401  (puts the working tree's package first on sys.path)
import podq_trainer
from podq_trainer import report


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
    """Run fn with file descriptor 1 and sys.stdout going to a temporary file.

    Returns (what reached fd 1, what went to sys.stderr, how many os.write calls went to fd 1).
    """
    err = io.StringIO()
    writes = []
    real_write = os.write

    def counting_write(fd, data):
        if fd == 1:
            writes.append(bytes(data))
        return real_write(fd, data)

    with tempfile.TemporaryFile() as sink:
        sys.stdout.flush()
        saved_fd = os.dup(1)
        saved_stdout = sys.stdout
        os.dup2(sink.fileno(), 1)
        sys.stdout = open(1, "w", closefd=False)  # buffered, like a real stdout on a pipe
        try:
            with redirect_stderr(err), mock.patch.object(report.os, "write", counting_write):
                fn(*args, **kwargs)
            sys.stdout.flush()
        finally:
            sys.stdout = saved_stdout
            os.dup2(saved_fd, 1)
            os.close(saved_fd)
        sink.seek(0)
        return sink.read().decode(), err.getvalue(), len(writes)


def parse(line):
    assert line.startswith("PODQ "), line
    return json.loads(line[len("PODQ "):])


class ReportTest(unittest.TestCase):
    def setUp(self):
        patcher = mock.patch.dict(os.environ)
        patcher.start()
        self.addCleanup(patcher.stop)
        os.environ.pop("JAX_PROCESS_INDEX", None)

    def test_metrics_line_is_exact(self):
        out, err, _ = capture(podq_trainer.report_metrics, 1200, {"train/lm_loss": 0.53, "train/accuracy": 0.61})
        self.assertEqual(
            out,
            'PODQ {"event":"metrics","step":1200,"values":{"train/lm_loss":0.53,"train/accuracy":0.61}}\n',
        )
        self.assertEqual(err, "")

    def test_checkpoint_line_is_exact(self):
        out, _, _ = capture(podq_trainer.report_checkpoint, 5000, "gs://b/run/5000")
        self.assertEqual(out, 'PODQ {"event":"checkpoint","step":5000,"uri":"gs://b/run/5000"}\n')

    def test_one_write_call_per_line(self):
        _, _, writes = capture(podq_trainer.report_metrics, 40, {"a": 1})
        self.assertEqual(writes, 1)
        _, _, writes = capture(podq_trainer.report_checkpoint, 40, "/c/40")
        self.assertEqual(writes, 1)

    def test_partial_writes_are_completed(self):
        real_write = os.write

        def two_bytes_at_a_time(fd, data):
            return real_write(fd, bytes(data[:2]))

        def run():
            with mock.patch.object(report.os, "write", two_bytes_at_a_time):
                podq_trainer.report_metrics(7, {"a": 0.5})

        out, _, _ = capture(run)
        self.assertEqual(out, 'PODQ {"event":"metrics","step":7,"values":{"a":0.5}}\n')

    def test_earlier_prints_come_first(self):
        def run():
            print("before", end="")  # no newline, no flush: still in sys.stdout's buffer
            print()
            podq_trainer.report_metrics(10, {"a": 1.0})
            print("after")

        out, _, _ = capture(run)
        self.assertEqual(out, 'before\nPODQ {"event":"metrics","step":10,"values":{"a":1.0}}\nafter\n')

    def test_only_process_zero_reports(self):
        os.environ["JAX_PROCESS_INDEX"] = "3"
        self.assertEqual(capture(podq_trainer.report_metrics, 10, {"a": 1.0})[:2], ("", ""))
        self.assertEqual(capture(podq_trainer.report_checkpoint, 10, "/c/10")[:2], ("", ""))
        os.environ["JAX_PROCESS_INDEX"] = "0"
        self.assertNotEqual(capture(podq_trainer.report_metrics, 10, {"a": 1.0})[0], "")

    def test_explicit_process_index_wins(self):
        os.environ["JAX_PROCESS_INDEX"] = "0"
        self.assertEqual(capture(podq_trainer.report_metrics, 10, {"a": 1.0}, process_index=1)[0], "")
        os.environ["JAX_PROCESS_INDEX"] = "5"
        self.assertNotEqual(capture(podq_trainer.report_checkpoint, 10, "/c", process_index=0)[0], "")

    def test_bad_process_index_reports_with_a_warning(self):
        os.environ["JAX_PROCESS_INDEX"] = "zero"
        out, err, _ = capture(podq_trainer.report_metrics, 10, {"a": 1.0})
        self.assertEqual(parse(out)["step"], 10)
        self.assertIn("JAX_PROCESS_INDEX", err)

    def test_non_finite_values_are_reported_as_markers_and_non_numbers_dropped(self):
        # Issue 28: a diverged loss is reported as what it is, not dropped.
        values = {
            "train/loss": float("nan"),
            "train/lm_loss": float("inf"),
            "train/q_halt_loss": float("-inf"),
            "train/accuracy": 0.5,
            "note": "x",
        }
        out, err, _ = capture(podq_trainer.report_metrics, 20, values)
        self.assertEqual(
            parse(out),
            {
                "event": "metrics",
                "step": 20,
                "values": {
                    "train/loss": "NaN",
                    "train/lm_loss": "Infinity",
                    "train/q_halt_loss": "-Infinity",
                    "train/accuracy": 0.5,
                },
            },
        )
        self.assertIn("WARNING", err)
        self.assertIn("note", err)
        self.assertNotIn("train/loss", err)

    def test_array_scalars_and_ints_are_numbers(self):
        out, _, _ = capture(podq_trainer.report_metrics, _Int(30), {"train/count": 6144, "train/loss": _Scalar(0.25)})
        self.assertEqual(
            parse(out), {"event": "metrics", "step": 30, "values": {"train/count": 6144.0, "train/loss": 0.25}}
        )


class PhaseReportTest(unittest.TestCase):
    def setUp(self):
        patcher = mock.patch.dict(os.environ)
        patcher.start()
        self.addCleanup(patcher.stop)
        os.environ.pop("JAX_PROCESS_INDEX", None)

    def test_phase_lines_are_exact(self):
        out, err, _ = capture(podq_trainer.report_phase, "compile", "start")
        self.assertEqual(out, 'PODQ {"event":"phase","phase":"compile","edge":"start"}\n')
        self.assertEqual(err, "")
        out, _, _ = capture(podq_trainer.report_phase, "save", "end", step=5000)
        self.assertEqual(out, 'PODQ {"event":"phase","phase":"save","edge":"end","step":5000}\n')
        out, _, _ = capture(podq_trainer.report_phase, "restore", "start", _Int(300))
        self.assertEqual(parse(out), {"event": "phase", "phase": "restore", "edge": "start", "step": 300})

    def test_context_manager_reports_start_then_end_in_one_write_each(self):
        def run():
            with podq_trainer.phase("save", step=40):
                print("saving")  # buffered in sys.stdout: goes out before the end line

        out, err, writes = capture(run)
        lines = out.splitlines()
        self.assertEqual(len(lines), 3, out)
        self.assertEqual(parse(lines[0]), {"event": "phase", "phase": "save", "edge": "start", "step": 40})
        self.assertEqual(lines[1], "saving")
        self.assertEqual(parse(lines[2]), {"event": "phase", "phase": "save", "edge": "end", "step": 40})
        self.assertEqual(err, "")
        self.assertEqual(writes, 2)  # one os.write per PODQ line (the print goes through sys.stdout)

        def quiet():
            with podq_trainer.phase("compile"):
                pass

        out, _, writes = capture(quiet)
        self.assertEqual(
            out,
            'PODQ {"event":"phase","phase":"compile","edge":"start"}\n'
            'PODQ {"event":"phase","phase":"compile","edge":"end"}\n',
        )
        self.assertEqual(writes, 2)

    def test_the_end_is_reported_on_an_exception(self):
        def run():
            with self.assertRaises(RuntimeError):
                with podq_trainer.phase("restore", step=7):
                    raise RuntimeError("no checkpoint")

        out, _, writes = capture(run)
        self.assertEqual(
            [parse(line) for line in out.splitlines()],
            [
                {"event": "phase", "phase": "restore", "edge": "start", "step": 7},
                {"event": "phase", "phase": "restore", "edge": "end", "step": 7},
            ],
        )
        self.assertEqual(writes, 2)

    def test_bad_phase_or_edge_raises_and_prints_nothing(self):
        def run(args):
            with self.assertRaises(ValueError):
                podq_trainer.report_phase(*args)

        for args in [("eval", "start"), ("Compile", "start"), ("save", "begin"), ("save", None)]:
            self.assertEqual(capture(run, args)[:2], ("", ""), args)

        def bad_context():
            with self.assertRaises(ValueError):
                with podq_trainer.phase("checkpoint"):
                    self.fail("the body ran")

        self.assertEqual(capture(bad_context)[:2], ("", ""))

    def test_only_process_zero_reports_phases(self):
        ran = []

        def run():
            podq_trainer.report_phase("compile", "start")
            with podq_trainer.phase("save", step=10):
                ran.append(True)

        os.environ["JAX_PROCESS_INDEX"] = "1"
        self.assertEqual(capture(run), ("", "", 0))
        self.assertEqual(ran, [True])
        # Validation does not depend on the process: a typo fails everywhere.
        with self.assertRaises(ValueError):
            podq_trainer.report_phase("compil", "start")
        os.environ["JAX_PROCESS_INDEX"] = "0"
        self.assertEqual(capture(podq_trainer.report_phase, "save", "start", process_index=1), ("", "", 0))
        os.environ["JAX_PROCESS_INDEX"] = "1"
        out, _, _ = capture(podq_trainer.report_phase, "save", "start", process_index=0)
        self.assertEqual(parse(out)["phase"], "save")



class LinkReportTest(unittest.TestCase):
    def setUp(self):
        patcher = mock.patch.dict(os.environ)
        patcher.start()
        self.addCleanup(patcher.stop)
        os.environ.pop("JAX_PROCESS_INDEX", None)

    def test_link_line_is_exact_and_one_write(self):
        url = "https://wandb.ai/team/trm/runs/0c9e6f4a-2b1d-4c3e-9f8a-7b6c5d4e3f21"
        out, err, writes = capture(podq_trainer.report_link, "wandb", url)
        self.assertEqual(out, 'PODQ {"event":"link","name":"wandb","url":"%s"}\n' % url)
        self.assertEqual((err, writes), ("", 1))

    def test_only_process_zero_reports_links(self):
        os.environ["JAX_PROCESS_INDEX"] = "2"
        self.assertEqual(capture(podq_trainer.report_link, "wandb", "https://wandb.ai/x"), ("", "", 0))
        out, _, _ = capture(podq_trainer.report_link, "wandb", "https://wandb.ai/x", process_index=0)
        self.assertEqual(parse(out), {"event": "link", "name": "wandb", "url": "https://wandb.ai/x"})
        os.environ["JAX_PROCESS_INDEX"] = "0"
        self.assertEqual(capture(podq_trainer.report_link, "wandb", "https://wandb.ai/x", process_index=1)[0], "")

    def test_a_bad_link_warns_and_prints_nothing(self):
        for name, url in [
            ("wandb", None),  # run.url of an offline W&B run
            ("wandb", "javascript:alert(1)"),
            ("wandb", "ftp://example.com/run"),
            ("wandb", "https://"),
            ("wandb", "https://wandb.ai/a b"),
            ("wandb", "https://wandb.ai/a\nPODQ {}"),
            ("wandb", "https://wandb.ai/" + "x" * 2100),
            ("", "https://wandb.ai/x"),
            ("my tracker", "https://wandb.ai/x"),
            ("wandb\n", "https://wandb.ai/x"),
            ("x" * 33, "https://wandb.ai/x"),
            (None, "https://wandb.ai/x"),
        ]:
            out, err, writes = capture(podq_trainer.report_link, name, url)
            self.assertEqual((out, writes), ("", 0), (name, url))
            self.assertIn("link not reported", err, (name, url))

    def test_names_and_urls_at_their_bounds(self):
        url = "http://tracker.local/" + "x" * (2048 - len("http://tracker.local/"))
        out, err, _ = capture(podq_trainer.report_link, "a" * 32, url)
        self.assertEqual(parse(out)["url"], url)
        self.assertEqual(err, "")
        out, _, _ = capture(podq_trainer.report_link, "tb.run-1_x", "https://e.com/?q=a%20b#c")
        self.assertEqual(parse(out)["name"], "tb.run-1_x")


if __name__ == "__main__":
    unittest.main()
