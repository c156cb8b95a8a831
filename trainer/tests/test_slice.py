"""slice_info / abstract_state / restore_args: resuming on another TPU type."""

import contextlib
import dataclasses
import importlib.util
import io
import os
import subprocess
import sys
import tempfile
import textwrap
import unittest
from unittest import mock

import _util  # noqa: F401  (puts the working tree's package first on sys.path)
import podq_trainer
from podq_trainer import SliceInfo

HAVE_JAX = importlib.util.find_spec("jax") is not None
HAVE_ORBAX = HAVE_JAX and importlib.util.find_spec("orbax") is not None


class SliceInfoTest(unittest.TestCase):
    def slice_info(self, env):
        err = io.StringIO()
        with mock.patch.dict(os.environ, env, clear=True), contextlib.redirect_stderr(err):
            return podq_trainer.slice_info(), err.getvalue()

    def test_what_the_worker_sets(self):
        env = {"PODQ_ACCELERATOR": "v6e-32", "PODQ_SLICE_HOSTS": "8", "PODQ_SLICE_DEVICES": "32"}
        self.assertEqual(self.slice_info(env), (SliceInfo("v6e-32", 8, 32), ""))

    def test_outside_podq_all_none(self):
        self.assertEqual(self.slice_info({}), (SliceInfo(None, None, None), ""))
        blank = {"PODQ_ACCELERATOR": " ", "PODQ_SLICE_HOSTS": "", "PODQ_SLICE_DEVICES": "\n"}
        self.assertEqual(self.slice_info(blank), (SliceInfo(None, None, None), ""))

    def test_surrounding_space_is_ignored(self):
        env = {"PODQ_ACCELERATOR": " v4-64\n", "PODQ_SLICE_HOSTS": " 8 ", "PODQ_SLICE_DEVICES": "32\n"}
        self.assertEqual(self.slice_info(env)[0], SliceInfo("v4-64", 8, 32))

    def test_a_malformed_count_warns_and_is_none(self):
        for bad in ("eight", "8.0", "0", "-4", "0x20"):
            info, err = self.slice_info({"PODQ_ACCELERATOR": "v4-64", "PODQ_SLICE_HOSTS": bad, "PODQ_SLICE_DEVICES": "32"})
            self.assertEqual(info, SliceInfo("v4-64", None, 32), bad)
            self.assertIn("PODQ_SLICE_HOSTS", err, bad)
            info, err = self.slice_info({"PODQ_SLICE_DEVICES": bad})
            self.assertEqual(info, SliceInfo(None, None, None), bad)
            self.assertIn("PODQ_SLICE_DEVICES", err, bad)

    def test_frozen(self):
        info = SliceInfo("v6e-32", 8, 32)
        with self.assertRaises(dataclasses.FrozenInstanceError):
            info.hosts = 4


class StandardLibraryOnlyTest(unittest.TestCase):
    def test_importing_the_package_imports_neither_jax_nor_orbax(self):
        code = (
            "import sys, podq_trainer\n"
            "podq_trainer.slice_info()\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('jax', 'jaxlib', 'orbax', 'numpy')))\n"
        )
        out = subprocess.run(
            [sys.executable, "-c", code], env=_util.child_env(), capture_output=True, text=True, timeout=60
        )
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertEqual(out.stdout.strip(), "[]")


@unittest.skipUnless(HAVE_JAX, "jax is not installed")
class AbstractStateTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        import jax
        import numpy as np
        from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

        cls.jax, cls.np = jax, np
        mesh = Mesh(np.array(jax.devices()), ("data",))
        cls.replicated = NamedSharding(mesh, P())
        cls.sharded = NamedSharding(mesh, P("data"))
        cls.state = {
            "step": np.zeros((), np.int32),
            "params": {"w": np.ones((4, 3), np.float32), "b": np.zeros((3,), np.float32)},
        }

    def assertStruct(self, leaf, shape, dtype, sharding):
        self.assertIsInstance(leaf, self.jax.ShapeDtypeStruct)
        self.assertEqual((leaf.shape, leaf.dtype, leaf.sharding), (shape, self.np.dtype(dtype), sharding))

    def test_one_sharding_for_every_leaf(self):
        abstract = podq_trainer.abstract_state(self.state, self.replicated)
        self.assertStruct(abstract["step"], (), "int32", self.replicated)
        self.assertStruct(abstract["params"]["w"], (4, 3), "float32", self.replicated)
        self.assertStruct(abstract["params"]["b"], (3,), "float32", self.replicated)

    def test_a_tree_of_shardings(self):
        shardings = {"step": self.replicated, "params": {"w": self.sharded, "b": self.replicated}}
        abstract = podq_trainer.abstract_state(self.state, shardings)
        self.assertStruct(abstract["params"]["w"], (4, 3), "float32", self.sharded)
        self.assertStruct(abstract["params"]["b"], (3,), "float32", self.replicated)

    def test_live_jax_arrays_and_eval_shape_output(self):
        jax = self.jax
        live = jax.device_put(self.state, self.replicated)
        shardings = jax.tree.map(lambda x: x.sharding, live)
        from_live = podq_trainer.abstract_state(live, shardings)
        from_shapes = podq_trainer.abstract_state(jax.eval_shape(lambda: live), self.replicated)
        self.assertEqual(from_live, from_shapes)
        self.assertStruct(from_shapes["params"]["w"], (4, 3), "float32", self.replicated)

    def test_a_leaf_without_shape_is_named(self):
        with self.assertRaisesRegex(TypeError, r"\['step'\].*int"):
            podq_trainer.abstract_state({"step": 3}, self.replicated)

    def test_a_sharding_that_is_not_one_is_named(self):
        P = self.jax.sharding.PartitionSpec
        with self.assertRaisesRegex(TypeError, r"\['params'\]\['w'\] is P\('data',\).*NamedSharding\(mesh, spec\)"):
            podq_trainer.abstract_state(
                self.state, {"step": self.replicated, "params": {"w": P("data"), "b": self.replicated}}
            )
        with self.assertRaisesRegex(TypeError, r"NamedSharding\(mesh, spec\)"):
            podq_trainer.abstract_state(self.state, P())
        with self.assertRaisesRegex(TypeError, r"\['step'\] is 'replicated', not a jax.sharding.Sharding"):
            podq_trainer.abstract_state(
                self.state, {"step": "replicated", "params": {"w": self.replicated, "b": self.replicated}}
            )

    def test_a_tree_of_another_structure_is_refused(self):
        with self.assertRaises(ValueError):
            podq_trainer.abstract_state(self.state, {"step": self.replicated})

    @unittest.skipUnless(HAVE_ORBAX, "orbax-checkpoint is not installed")
    def test_restore_args_is_a_standard_restore_of_the_abstract_state(self):
        import orbax.checkpoint as ocp

        args = podq_trainer.restore_args(self.state, self.replicated)
        self.assertIsInstance(args, ocp.args.StandardRestore)
        self.assertEqual(args.item, podq_trainer.abstract_state(self.state, self.replicated))


# Saves a state sharded over DEVICES CPU devices, or restores it onto DEVICES devices with
# restore_args and prints what it got. Run as a child: the device count is fixed at JAX's import.
CHILD = textwrap.dedent(
    """
    import json, sys
    import jax, numpy as np, orbax.checkpoint as ocp
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
    import podq_trainer

    mode, directory = sys.argv[1], sys.argv[2]
    mesh = Mesh(np.array(jax.devices()), ("data",))
    shardings = {"w": NamedSharding(mesh, P("data")), "step": NamedSharding(mesh, P())}
    state = jax.device_put({"w": np.zeros((8, 2), np.float32), "step": np.zeros((), np.int32)}, shardings)
    manager = ocp.CheckpointManager(directory)
    if mode == "save":
        state = jax.device_put({"w": np.arange(16, dtype=np.float32).reshape(8, 2), "step": np.int32(7)}, shardings)
        manager.save(7, args=ocp.args.StandardSave(state))
        manager.wait_until_finished()
    else:
        restored = manager.restore(7, args=podq_trainer.restore_args(state, shardings))
        w = restored["w"]
        print(json.dumps({
            "devices": jax.device_count(),
            "w": np.asarray(w).tolist(),
            "step": int(restored["step"]),
            "w_shards": len(w.addressable_shards),
            "w_sharding_is_this_mesh": w.sharding == shardings["w"],
        }))
    manager.close()
    """
)


@unittest.skipUnless(HAVE_ORBAX, "jax or orbax-checkpoint is not installed")
class RestoreOnFewerDevicesTest(unittest.TestCase):
    def child(self, mode, directory, devices):
        env = _util.child_env(JAX_PLATFORMS="cpu", XLA_FLAGS="--xla_force_host_platform_device_count=%d" % devices)
        out = subprocess.run(
            [sys.executable, "-c", CHILD, mode, directory], env=env, capture_output=True, text=True, timeout=120
        )
        self.assertEqual(out.returncode, 0, out.stderr[-3000:])
        return out.stdout

    def test_a_checkpoint_saved_on_4_devices_restores_onto_2(self):
        import json

        with tempfile.TemporaryDirectory() as tmp:
            directory = os.path.join(tmp, "ckpt")
            self.child("save", directory, 4)
            got = json.loads(self.child("restore", directory, 2).strip().splitlines()[-1])
        self.assertEqual(got["devices"], 2)
        self.assertEqual(got["w"], [[2 * i, 2 * i + 1] for i in range(8)])
        self.assertEqual(got["step"], 7)
        self.assertEqual(got["w_shards"], 2)
        self.assertTrue(got["w_sharding_is_this_mesh"])


if __name__ == "__main__":
    unittest.main()
