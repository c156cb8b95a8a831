"""The TPU slice an attempt runs on, and restoring a checkpoint saved on another one.

podq may resume a preempted run on another TPU type than the one it started on (a v4-64 run
resumed on a v6e-32, say), so the attempt that restores a checkpoint can have a different
number of hosts and devices than the attempt that saved it. The worker tells every trainer
process where it runs::

    PODQ_ACCELERATOR=v6e-32     the slice type (also the command's {accelerator} placeholder)
    PODQ_SLICE_HOSTS=8          host VMs in the slice
    PODQ_SLICE_DEVICES=32       JAX devices in the whole slice

and ``slice_info()`` reads them. To restore onto the mesh of *this* attempt, Orbax must be
given the target shardings: "If changing topologies, you MUST specify sharding when
restoring" (Orbax's guide, google/orbax docs/guides/checkpoint/checkpointing_pytrees.ipynb,
"Change sharding"). ``restore_args(state, shardings)`` builds the ``StandardRestore`` for
that: a ``jax.ShapeDtypeStruct`` per leaf with the leaf's shape and dtype and the sharding it
must have on the new mesh::

    mesh = Mesh(np.array(jax.devices()), ("data",))      # this attempt's devices
    state = manager.restore(step, args=podq_trainer.restore_args(state, NamedSharding(mesh, P())))

Why by hand: ``nnx.eval_shape`` drops shardings, and an abstract state made from the
checkpoint's own metadata carries the *saving* topology's shardings, which fail to build when
the new mesh has fewer devices. The live state's (or ``jax.eval_shape``'s) shapes and dtypes
plus the new shardings are what Orbax needs.

JAX and Orbax are imported inside the functions that need them, so importing this module
needs the standard library only.
"""

import dataclasses
import os
from typing import Optional

from .report import _warn

__all__ = ["SliceInfo", "abstract_state", "restore_args", "slice_info"]

ACCELERATOR_ENV = "PODQ_ACCELERATOR"
HOSTS_ENV = "PODQ_SLICE_HOSTS"
DEVICES_ENV = "PODQ_SLICE_DEVICES"


@dataclasses.dataclass(frozen=True)
class SliceInfo:
    """Where podq says this attempt runs; each field is ``None`` when podq did not say.

    ``accelerator`` is the slice type (``"v6e-32"``), ``hosts`` the host VMs in the slice,
    ``devices`` the JAX devices in the whole slice (``jax.device_count()`` should agree).
    """

    accelerator: Optional[str] = None
    hosts: Optional[int] = None
    devices: Optional[int] = None


def slice_info():
    """The slice podq launched this attempt on, from ``PODQ_ACCELERATOR``,
    ``PODQ_SLICE_HOSTS`` and ``PODQ_SLICE_DEVICES``.

    A variable that is unset or empty gives ``None`` (outside podq, or an older worker). A
    count that is not a positive integer is ignored with a warning on stderr: the trainer
    goes on, as it must not fail over a label.
    """
    accelerator = os.environ.get(ACCELERATOR_ENV, "").strip() or None
    return SliceInfo(accelerator, _positive_int(HOSTS_ENV), _positive_int(DEVICES_ENV))


def _positive_int(name):
    raw = os.environ.get(name, "").strip()
    if not raw:
        return None
    try:
        value = int(raw)
    except ValueError:
        value = 0
    if value <= 0:
        _warn("%s=%r is not a positive integer; ignored" % (name, raw))
        return None
    return value


def abstract_state(state, shardings):
    """``state`` as ``jax.ShapeDtypeStruct``s that carry the shardings to restore it with.

    ``state`` is a pytree whose leaves have ``.shape`` and ``.dtype``: the live, freshly
    initialised state (``jax.Array``s or NumPy arrays), or ``jax.eval_shape``'s output.
    ``shardings`` is one ``jax.sharding.Sharding`` for every leaf (``NamedSharding(mesh,
    P())`` for a replicated state), or a pytree of shardings with the structure of ``state``
    (``jax.tree.map(lambda x: x.sharding, state)`` for a state already placed on this
    attempt's mesh). Restoring onto another topology needs these shardings: Orbax does not
    choose them for you (google/orbax docs/guides/checkpoint/checkpointing_pytrees.ipynb).
    """
    import jax

    def leaf(path, x, sharding):
        shape, dtype = getattr(x, "shape", None), getattr(x, "dtype", None)
        if shape is None or dtype is None:
            raise TypeError(
                "state leaf %s is a %s without .shape and .dtype; make it an array first"
                % (jax.tree_util.keystr(path) or "(root)", type(x).__name__)
            )
        if not isinstance(sharding, jax.sharding.Sharding):
            raise TypeError(
                "the sharding for state leaf %s is %.80r, not a jax.sharding.Sharding%s"
                % (jax.tree_util.keystr(path) or "(root)", sharding, _spec_hint(jax, sharding))
            )
        return jax.ShapeDtypeStruct(shape, dtype, sharding=sharding)

    if isinstance(shardings, jax.sharding.PartitionSpec):
        raise TypeError("shardings is %.80r, not a jax.sharding.Sharding%s" % (shardings, _spec_hint(jax, shardings)))
    if isinstance(shardings, jax.sharding.Sharding):
        return jax.tree_util.tree_map_with_path(lambda path, x: leaf(path, x, shardings), state)
    return jax.tree_util.tree_map_with_path(leaf, state, shardings)


def _spec_hint(jax, value):
    if isinstance(value, jax.sharding.PartitionSpec):
        return " (a PartitionSpec needs its mesh: NamedSharding(mesh, spec))"
    return ""


def restore_args(state, shardings):
    """``orbax.checkpoint.args.StandardRestore`` of ``abstract_state(state, shardings)``.

    Restores a checkpoint saved on any topology onto the shardings given, e.g. one saved on
    a v4-64 onto this attempt's v6e-32 mesh::

        restored = manager.restore(step, args=podq_trainer.restore_args(state, shardings))

    "If changing topologies, you MUST specify sharding when restoring" (Orbax's guide,
    google/orbax docs/guides/checkpoint/checkpointing_pytrees.ipynb).
    """
    import orbax.checkpoint as ocp

    return ocp.args.StandardRestore(abstract_state(state, shardings))
