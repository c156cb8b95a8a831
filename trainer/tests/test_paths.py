"""checkpoint_dir / resume_point: podq's locations in the forms Orbax accepts."""

import os
import unittest
from unittest import mock

import _util  # noqa: F401  (puts the working tree's package first on sys.path)
import podq_trainer
from podq_trainer import ResumePoint


class CheckpointDirTest(unittest.TestCase):
    def test_gcs_is_unchanged(self):
        self.assertEqual(podq_trainer.checkpoint_dir("gs://b/checkpoints/exp01a"), "gs://b/checkpoints/exp01a")

    def test_absolute_path_is_unchanged(self):
        self.assertEqual(podq_trainer.checkpoint_dir("/data/ckpt/exp01a"), "/data/ckpt/exp01a")

    def test_file_uri_becomes_a_path(self):
        self.assertEqual(podq_trainer.checkpoint_dir("file:///data/ckpt/exp01a"), "/data/ckpt/exp01a")
        self.assertEqual(podq_trainer.checkpoint_dir("file:///data/my%20ckpt/a%2Bb"), "/data/my ckpt/a+b")
        self.assertEqual(podq_trainer.checkpoint_dir("file://localhost/data/ckpt"), "/data/ckpt")

    def test_file_uri_of_another_host_is_refused(self):
        with self.assertRaises(ValueError):
            podq_trainer.checkpoint_dir("file://otherhost/data/ckpt")

    def test_relative_path_is_made_absolute(self):
        self.assertEqual(podq_trainer.checkpoint_dir("ckpt/a"), os.path.join(os.getcwd(), "ckpt/a"))

    @mock.patch.dict(os.environ, {"PODQ_CHECKPOINT_DIR": "file:///tmp/podq/ckpt"})
    def test_environment_is_the_default(self):
        self.assertEqual(podq_trainer.checkpoint_dir(), "/tmp/podq/ckpt")
        self.assertEqual(podq_trainer.checkpoint_dir("gs://b/x"), "gs://b/x")

    @mock.patch.dict(os.environ, {"PODQ_CHECKPOINT_DIR": ""})
    def test_unset_is_an_error(self):
        with self.assertRaises(ValueError):
            podq_trainer.checkpoint_dir()


class ResumePointTest(unittest.TestCase):
    def test_no_resume(self):
        for value in (None, "", "  ", "null", "None", "NULL", "none"):
            self.assertIsNone(podq_trainer.resume_point(value), value)

    def test_gcs_step_directory(self):
        self.assertEqual(
            podq_trainer.resume_point("gs://b/ckpt/exp01a/4000"),
            ResumePoint("gs://b/ckpt/exp01a", 4000, None, "gs://b/ckpt/exp01a/4000"),
        )

    def test_local_step_directory(self):
        point = podq_trainer.resume_point("/abs/ckpt/4000/")
        self.assertEqual((point.directory, point.step, point.step_prefix), ("/abs/ckpt", 4000, None))
        self.assertEqual(point.path, "/abs/ckpt/4000")

    def test_prefixed_step_names(self):
        point = podq_trainer.resume_point("gs://b/ckpt/exp01a/step_4000")
        self.assertEqual((point.directory, point.step, point.step_prefix), ("gs://b/ckpt/exp01a", 4000, "step"))
        point = podq_trainer.resume_point("/c/my_run_0000120")
        self.assertEqual((point.directory, point.step, point.step_prefix), ("/c", 120, "my_run"))

    def test_file_uri(self):
        point = podq_trainer.resume_point("file:///tmp/podq%20x/ckpt/step_10")
        self.assertEqual((point.directory, point.step), ("/tmp/podq x/ckpt", 10))

    def test_uncommitted_directory_is_refused(self):
        for value in (
            "/abs/ckpt/4000.orbax-checkpoint-tmp",
            "/abs/ckpt/4000.orbax-checkpoint-tmp-1712345678",
            "gs://b/ckpt/step_4000.orbax-checkpoint-tmp-3/",
        ):
            with self.assertRaisesRegex(ValueError, "uncommitted", msg=value):
                podq_trainer.resume_point(value)

    def test_names_without_a_step_are_refused(self):
        for value in ("/abs/ckpt/latest", "/abs/ckpt/step_", "gs://4000", "4000x", "/4000", "gs://b/ckpt/-5"):
            with self.assertRaises(ValueError, msg=value):
                podq_trainer.resume_point(value)

    @mock.patch.dict(os.environ, {"PODQ_RESUME_FROM": "gs://b/ckpt/exp01a/step_500"})
    def test_environment_is_the_default(self):
        self.assertEqual(podq_trainer.resume_point().step, 500)
        # An explicit value, even None (Hydra's load_checkpoint=null), wins over the environment.
        self.assertIsNone(podq_trainer.resume_point(None))
        self.assertEqual(podq_trainer.resume_point("/c/20").step, 20)

    @mock.patch.dict(os.environ, {"PODQ_RESUME_FROM": ""})
    def test_empty_environment_means_fresh_start(self):
        self.assertIsNone(podq_trainer.resume_point())


if __name__ == "__main__":
    unittest.main()
