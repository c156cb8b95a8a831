"""Stress test: PODQ lines stay whole while other threads log to the same stdout pipe."""

import json
import os
import subprocess
import sys
import time
import unittest
from collections import Counter

from _util import TESTS_DIR, child_env

TOTAL = 100_000


class ReportStressTest(unittest.TestCase):
    def test_lines_survive_concurrent_logging(self):
        start = time.monotonic()
        seen = Counter()
        corrupted = []
        log_lines = 0
        with subprocess.Popen(
            [sys.executable, os.path.join(TESTS_DIR, "stress_child.py"), str(TOTAL)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=child_env(),
        ) as child:
            for raw in child.stdout:
                if b"PODQ {" not in raw:
                    log_lines += 1
                    continue
                try:
                    if not raw.startswith(b"PODQ {") or not raw.endswith(b"}\n"):
                        raise ValueError("not a whole line")
                    event = json.loads(raw[5:])
                    if event["event"] != "metrics" or event["values"]["train/loss"] != event["step"] * 0.5:
                        raise ValueError("wrong content")
                    seen[event["step"]] += 1
                except (ValueError, KeyError, TypeError):
                    corrupted.append(raw[:300] if len(corrupted) < 5 else None)
            stderr = child.stderr.read().decode(errors="replace")
        self.assertEqual(child.returncode, 0, stderr[-2000:])
        elapsed = time.monotonic() - start

        self.assertEqual(corrupted, [], "corrupted PODQ lines")
        missing = [s for s in range(TOTAL) if seen[s] == 0]
        repeated = [s for s, n in seen.items() if n != 1]
        self.assertEqual(missing[:10], [], "%d steps missing" % len(missing))
        self.assertEqual(repeated[:10], [], "%d steps repeated" % len(repeated))
        self.assertEqual(sum(seen.values()), TOTAL)
        self.assertGreater(log_lines, 1000, "the logger threads hardly ran")
        sys.stderr.write("\n  stress: %d PODQ lines among %d log lines in %.1f s\n" % (TOTAL, log_lines, elapsed))


if __name__ == "__main__":
    unittest.main()
