"""Checkpoint locations in the forms Orbax accepts.

podq gives the trainer ``PODQ_CHECKPOINT_DIR`` (the checkpoint root) and ``PODQ_RESUME_FROM``
(a committed step directory, or empty). Orbax reads paths through ``etils.epath``, which takes
``gs://...`` and plain paths but raises ``KeyError: 'file://'`` on a file URI, and
``CheckpointManager.restore`` wants a step number, not a directory. These helpers convert.
"""

import os
import re
from urllib.parse import unquote, urlsplit

__all__ = ["checkpoint_dir", "resume_point", "ResumePoint", "orbax_path", "TMP_MARKER"]

TMP_MARKER = ".orbax-checkpoint-tmp"  # in the name of a step directory Orbax has not committed
_NO_RESUME = {"", "null", "none", "~"}
_STEP_NAME = re.compile(r"^(?:(?P<prefix>.+)_)?(?P<step>[0-9]+)$")
_UNSET = object()


def orbax_path(uri):
    """Return ``uri`` as a path Orbax accepts.

    ``gs://...`` (and any other ``scheme://`` except ``file``) is returned unchanged; a plain
    absolute path is returned unchanged; ``file:///x`` becomes ``/x`` (percent-decoded); a
    relative path is made absolute against the current directory.
    """
    uri = str(uri).strip()
    if not uri:
        raise ValueError("empty checkpoint location")
    if uri.lower().startswith("file:"):
        parts = urlsplit(uri)
        if parts.netloc not in ("", "localhost"):
            raise ValueError("file URI %r names a remote host; only local file URIs are accepted" % uri)
        path = unquote(parts.path)
        if not path.startswith("/"):
            raise ValueError("file URI %r has no absolute path" % uri)
        return path
    if "://" in uri:
        return uri
    return uri if os.path.isabs(uri) else os.path.abspath(uri)


def checkpoint_dir(uri=None):
    """The checkpoint root for Orbax: ``uri`` if given, else ``PODQ_CHECKPOINT_DIR``.

    Raises ValueError when neither is set.
    """
    if uri is None:
        uri = os.environ.get("PODQ_CHECKPOINT_DIR", "")
        if not uri.strip():
            raise ValueError("no checkpoint directory: PODQ_CHECKPOINT_DIR is not set")
    return orbax_path(uri)


class ResumePoint:
    """A committed Orbax step directory to resume from.

    ``directory`` is the checkpoint root (give it to ``CheckpointManager``), ``step`` the step
    number (give it to ``CheckpointManager.restore``), ``step_prefix`` the name prefix
    (``step`` for ``step_4000``, ``None`` for ``4000``: Orbax's ``step_prefix`` option) and
    ``path`` the step directory itself.
    """

    __slots__ = ("directory", "step", "step_prefix", "path")

    def __init__(self, directory, step, step_prefix, path):
        self.directory = directory
        self.step = step
        self.step_prefix = step_prefix
        self.path = path

    def __eq__(self, other):
        return isinstance(other, ResumePoint) and all(getattr(self, a) == getattr(other, a) for a in self.__slots__)

    def __repr__(self):
        return "ResumePoint(directory=%r, step=%d, step_prefix=%r)" % (self.directory, self.step, self.step_prefix)


def resume_point(uri=_UNSET):
    """Where to resume from: ``None`` (fresh start) or a :class:`ResumePoint`.

    Reads ``uri`` when given (e.g. Hydra's ``load_checkpoint``; ``None`` counts as given and
    means no resume), else ``PODQ_RESUME_FROM``. Empty, ``null`` and ``None`` mean no resume.
    The value is a step directory: ``gs://b/ckpt/exp01a/4000``, ``/abs/ckpt/4000``,
    ``file:///abs/ckpt/step_4000``. Raises ValueError for a directory Orbax has not committed
    (``.orbax-checkpoint-tmp`` in its name) and for a name without a step number.
    """
    if uri is _UNSET:
        uri = os.environ.get("PODQ_RESUME_FROM")
    if uri is None or str(uri).strip().lower() in _NO_RESUME:
        return None
    path = orbax_path(uri).rstrip("/")
    parent, sep, name = path.rpartition("/")
    if TMP_MARKER in name:
        raise ValueError("refusing to resume from %r: it is an uncommitted Orbax directory" % str(uri))
    match = _STEP_NAME.match(name)
    if not sep or not parent or parent.endswith(":/") or match is None:
        raise ValueError("%r is not an Orbax step directory (<root>/<step> or <root>/<prefix>_<step>)" % str(uri))
    return ResumePoint(parent, int(match.group("step")), match.group("prefix"), path)
