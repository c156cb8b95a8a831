"""watch_for_stop: SIGTERM stops the trainer at a step boundary with exit code 143."""

import importlib.util
import os
import signal
import socket
import subprocess
import sys
import time
import unittest

from _util import TESTS_DIR, child_env

CHILD = os.path.join(TESTS_DIR, "stop_child.py")

HAVE_JAX = importlib.util.find_spec("jax") is not None


def start(*args, **env):
    return subprocess.Popen(
        [sys.executable, CHILD, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=child_env(**env),
    )


def wait_ready(proc):
    line = proc.stdout.readline()
    if not line.startswith("READY"):
        proc.kill()
        raise AssertionError("child did not start: %r %s" % (line, proc.stderr.read()[-2000:]))
    return line.split()[1]


def finish(proc, timeout=30):
    out, err = proc.communicate(timeout=timeout)
    return proc.returncode, out, err


class SingleProcessStopTest(unittest.TestCase):
    def test_sigterm_stops_at_the_next_step_with_143(self):
        proc = start("single")
        self.assertEqual(wait_ready(proc), "distributed=False")
        time.sleep(0.2)
        sent = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        code, out, err = finish(proc)
        self.assertEqual(code, 143, err)
        self.assertRegex(out, r"^STOP [0-9]+\n$")
        self.assertIn("SIGTERM received", err)
        self.assertLess(time.monotonic() - sent, 5)

    def test_second_sigterm_kills_at_once(self):
        proc = start("single", "--ignore-stop")
        wait_ready(proc)
        proc.send_signal(signal.SIGTERM)
        time.sleep(0.3)
        self.assertIsNone(proc.poll(), "the first SIGTERM must only request a stop")
        proc.send_signal(signal.SIGTERM)
        code, _, _ = finish(proc)
        self.assertEqual(code, -signal.SIGTERM)

    def test_several_processes_without_jax_distributed_is_an_error(self):
        proc = start("single", JAX_PROCESS_COUNT=2, JAX_PROCESS_INDEX=0)
        code, _, err = finish(proc)
        self.assertEqual(code, 1)
        self.assertIn("jax.distributed is not initialized", err)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@unittest.skipUnless(HAVE_JAX, "jax is not installed")
class DistributedStopTest(unittest.TestCase):
    def test_sigterm_to_one_process_stops_all_at_the_same_step(self):
        coordinator = "127.0.0.1:%d" % free_port()
        procs = [start("jax", coordinator, "2", str(i), JAX_PLATFORMS="cpu") for i in range(2)]
        try:
            for proc in procs:
                self.assertEqual(wait_ready(proc), "distributed=True")
            time.sleep(0.3)
            procs[1].send_signal(signal.SIGTERM)  # the preemption notice reaches one host only
            results = [finish(proc, timeout=60) for proc in procs]
        finally:
            for proc in procs:
                if proc.poll() is None:
                    proc.kill()
        for code, _, err in results:
            self.assertEqual(code, 143, err[-2000:])
        steps = [out.strip() for _, out, _ in results]
        self.assertRegex(steps[0], r"^STOP [0-9]+$")
        self.assertEqual(steps[0], steps[1])

    def test_preemption_service_turned_off_is_an_error(self):
        proc = start("jax", "127.0.0.1:%d" % free_port(), "1", "0", "--no-preemption-service", JAX_PLATFORMS="cpu")
        code, _, err = finish(proc, timeout=60)
        self.assertEqual(code, 1)
        self.assertIn("preemption service is off", err)


if __name__ == "__main__":
    unittest.main()
