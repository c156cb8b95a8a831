"""A stand-in for the `wandb` package in the JAX example's tests (tests/jax_trainer.rs).

It records what the trainer asked for on stderr, which podq keeps as the job's log, and gives
the run a URL made of the id, as W&B does (https://wandb.ai/<entity>/<project>/runs/<id>).
No network, no account.
"""

import sys


class _Run:
    def __init__(self, project, run_id):
        self.id = run_id
        self.url = "https://wandb.ai/fake/%s/runs/%s" % (project, run_id)

    def log(self, values, step=None):
        pass


def init(project=None, id=None, resume=None, config=None, **_):
    print("fake wandb.init project=%s id=%s resume=%s" % (project, id, resume), file=sys.stderr, flush=True)
    return _Run(project, id)
