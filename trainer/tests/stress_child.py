"""Child process of test_report_stress: PODQ lines from 4 threads while 4 threads log.

Writes REPORTS metrics lines (steps 0..REPORTS-1, split across the reporter threads) with
report_metrics while logger threads write to the same stdout through Python logging
handlers, as fast as they can, until the reporters are done.
"""

import logging
import sys
import threading

import podq_trainer

REPORTERS = 4
LOGGERS = 4


def main():
    total = int(sys.argv[1])
    sys.setswitchinterval(0.001)  # switch threads more often than the default 5 ms: more interleaving
    stop = threading.Event()
    handlers = [logging.StreamHandler(sys.stdout) for _ in range(LOGGERS)]
    try:  # absl's formatter, as Orbax's and JAX's log lines look
        from absl.logging import PythonFormatter

        absl_formatter = PythonFormatter()
    except ImportError:
        absl_formatter = logging.Formatter("I%(asctime)s %(thread)d %(filename)s:%(lineno)d] %(message)s")
    plain_formatter = logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s")
    loggers = []
    for i, handler in enumerate(handlers):
        handler.setFormatter(absl_formatter if i % 2 else plain_formatter)
        logger = logging.getLogger("stress.%d" % i)
        logger.propagate = False
        logger.addHandler(handler)
        logger.setLevel(logging.INFO)
        loggers.append(logger)

    def log_forever(logger, i):
        n = 0
        # Lines of varied length, some long, like Orbax's multi-path log lines.
        pad = "x" * (40 + 97 * i)
        while not stop.is_set():
            logger.info("logger %d line %d %s PODQ-lookalike text", i, n, pad[: n % len(pad)])
            n += 1

    def report(first, count):
        for step in range(first, first + count):
            podq_trainer.report_metrics(step, {"train/loss": step * 0.5, "train/accuracy": 0.25, "train/count": 6144})

    log_threads = [threading.Thread(target=log_forever, args=(lg, i)) for i, lg in enumerate(loggers)]
    share = total // REPORTERS
    report_threads = [
        threading.Thread(target=report, args=(r * share, share if r < REPORTERS - 1 else total - r * share))
        for r in range(REPORTERS)
    ]
    for t in log_threads + report_threads:
        t.start()
    for t in report_threads:
        t.join()
    stop.set()
    for t in log_threads:
        t.join()
    sys.stdout.flush()


if __name__ == "__main__":
    main()
