"""The run's identity across attempts, for experiment trackers such as W&B.

podq runs one job over any number of attempts (a preemption, a lost host, a retried failure
each start a new one). Every attempt of a job gets the same ``PODQ_JOB_ID``, the job's UUID,
so a tracker run keyed by it continues where the last attempt left off::

    run = wandb.init(project="trm", id=podq_trainer.run_id(), resume="allow")
    podq_trainer.report_link("wandb", run.url)
"""

import os
import re

from .report import _warn

ENV = "PODQ_JOB_ID"

# What podq puts there: a UUID. W&B's run ids must be unique within a project and may not
# contain / \ # ? % : (https://docs.wandb.ai/ref/python/init/); a UUID's hex digits and dashes
# are safe there and in the run's URL.
_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


def run_id():
    """The podq job's id, the same in every attempt of the job: a lowercase UUID.

    ``None`` outside podq (no ``PODQ_JOB_ID``), so ``wandb.init(id=podq_trainer.run_id(),
    resume="allow")`` still works there and W&B picks a random id. A value that is not a
    UUID is ignored with a warning on stderr (``None``): a trainer must not fail over its
    experiment tracker.
    """
    raw = os.environ.get(ENV, "").strip()
    if not raw:
        return None
    value = raw.lower()
    if not _UUID.fullmatch(value):
        _warn("%s=%r is not a UUID; run_id() is None, so each attempt gets a tracker run of "
              "its own" % (ENV, raw))
        return None
    return value
