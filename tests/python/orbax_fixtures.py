"""Write real Orbax checkpoint trees for testing podq's checkpoint discovery against them.

    .venv/bin/python tests/python/orbax_fixtures.py OUTDIR

Makes four checkpoint roots under OUTDIR, each with two steps (9 and 10) of a small pytree,
written by orbax-checkpoint's CheckpointManager (default step names, async saving), and
prints a JSON manifest: per case, every step directory, whether it is committed, and the
committed steps podq should find (newest first), as Orbax itself lists them.

  local/              atomic-rename mode (the default on a local filesystem): 9 and 10 committed.
  interrupted/        atomic-rename mode; the writer was SIGKILLed while saving step 10, after
                      the data was written and before the renames: 10.orbax-checkpoint-tmp/
                      (with default.orbax-checkpoint-tmp/ inside) is left behind.
  commit_file/        commit-file mode (the default on gs://; forced here on a local path):
                      data goes straight into 10/, committed by 10/commit_success.txt. The
                      writer was SIGKILLed before step 10's commit file was written; the item's
                      own 10/default/commit_success.txt does exist.
  atomic_rename_gcs/  atomic-rename mode, SIGKILLed just before step 10's final rename: as a
                      gs:// save in this mode looks mid-rename, 10.orbax-checkpoint-tmp/ already
                      holds commit_success.txt. It is not committed.

The interrupted states are produced by pausing Orbax at the named point (a hook around
Orbax's own finalize/rename) and SIGKILLing the process there: every file is Orbax's.
"""

import json
import os
import shutil
import signal
import subprocess
import sys

STEPS = (9, 10)  # "10" sorts before "9" as text: discovery must compare numbers
CASES = {
    # case: (atomicity mode, where the writer is killed during the save of the last step)
    "local": ("atomic_rename", None),
    "interrupted": ("atomic_rename", "item_finalize"),
    "commit_file": ("commit_file", "step_finalize"),
    "atomic_rename_gcs": ("atomic_rename", "step_rename"),
}
TMP_MARKER = ".orbax-checkpoint-tmp"
COMMIT_FILE = "commit_success.txt"


def manager(directory, mode, read_only=False):
    import orbax.checkpoint as ocp

    return ocp.CheckpointManager(
        directory,
        options=ocp.CheckpointManagerOptions(
            enable_async_checkpointing=not read_only,
            read_only=read_only,
            create=not read_only,
            atomicity_options=ocp.options.AtomicityOptions(mode=ocp.options.AtomicityMode(mode)),
        ),
    )


def pytree(step):
    import jax.numpy as jnp  # jax.Arrays, as a trainer saves: they add _sharding and array_metadatas/

    return {
        "step": jnp.asarray(step, jnp.int32),
        "params": {"w": jnp.arange(12, dtype=jnp.float32).reshape(3, 4) * step, "b": jnp.full((4,), step, jnp.float32)},
    }


def write(directory, mode, kill_point):
    """Child process: save STEPS; pause (for SIGKILL) at kill_point in the last save."""
    import time

    import orbax.checkpoint as ocp
    from orbax.checkpoint._src.path import async_path, atomicity

    mngr = manager(directory, mode)
    last = STEPS[-1]

    def pause(where):
        print("PAUSED %s" % where, flush=True)
        time.sleep(3600)

    def hook_finalize(cls, is_step_level):
        original = cls.finalize

        async def finalize(self):
            final = self.get_final()
            if mngr_saving[0] == last and (final.parent == mngr.directory) == is_step_level:
                pause("%s.finalize(%s)" % (cls.__name__, final))
            return await original(self)

        cls.finalize = finalize

    mngr_saving = [None]
    if kill_point == "item_finalize":
        hook_finalize(atomicity.AtomicRenameTemporaryPath, is_step_level=False)
    elif kill_point == "step_finalize":
        hook_finalize(atomicity.CommitFileTemporaryPath, is_step_level=True)
    elif kill_point == "step_rename":
        original_rename = async_path.rename

        async def rename(src, dst, *args, **kwargs):
            if mngr_saving[0] == last and src.parent == mngr.directory:
                pause("rename(%s, %s)" % (src, dst))
            return await original_rename(src, dst, *args, **kwargs)

        async_path.rename = rename

    for step in STEPS:
        mngr_saving[0] = step
        mngr.save(step, args=ocp.args.StandardSave(pytree(step)))
        mngr.wait_until_finished()
    mngr.close()
    print("DONE", flush=True)


def run_writer(directory, mode, kill_point):
    child = subprocess.Popen(
        [sys.executable, os.path.abspath(__file__), "--write", directory, mode, kill_point or "none"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=dict(os.environ, JAX_PLATFORMS="cpu"),
    )
    return child


def finish_writer(child, kill_point):
    for line in child.stdout:
        if line.startswith("PAUSED") and kill_point:
            child.send_signal(signal.SIGKILL)
            child.wait()
            return line.split(" ", 1)[1].strip()
        if line.startswith("DONE") and not kill_point:
            child.wait()
            if child.returncode == 0:
                return None
    child.wait()
    raise RuntimeError("writer failed (exit %s): %s" % (child.returncode, child.stderr.read()[-3000:]))


def describe(root, mode):
    """What is on disk, and what Orbax itself lists as steps."""
    entries = []
    for name in sorted(os.listdir(root)):
        path = os.path.join(root, name)
        if not os.path.isdir(path):
            entries.append({"name": name, "kind": "file"})
            continue
        files = []
        for dirpath, dirnames, filenames in os.walk(path):
            dirnames.sort()
            rel = os.path.relpath(dirpath, path)
            if os.path.basename(dirpath) == "d" and filenames:  # content-addressed data files
                files.append(os.path.join(rel, "<%d data files>" % len(filenames)))
                continue
            files.extend(os.path.normpath(os.path.join(rel, f)) for f in sorted(filenames))
        step_text = name.split(TMP_MARKER)[0]
        committed = TMP_MARKER not in name and (mode != "commit_file" or os.path.exists(os.path.join(path, COMMIT_FILE)))
        entries.append(
            {
                "name": name,
                "step": int(step_text) if step_text.isdigit() else None,
                "committed": committed,
                "has_commit_success": os.path.exists(os.path.join(path, COMMIT_FILE)),
                "files": files,
            }
        )
    orbax_steps = sorted(manager(root, mode, read_only=True).all_steps(), reverse=True)
    return entries, orbax_steps


def main(outdir):
    import logging

    logging.getLogger("absl").setLevel(logging.ERROR)  # read-only managers warn about being read-only
    os.makedirs(outdir, exist_ok=True)
    writers = {}
    for case, (mode, kill_point) in CASES.items():
        root = os.path.join(os.path.abspath(outdir), case)
        shutil.rmtree(root, ignore_errors=True)
        writers[case] = (root, mode, kill_point, run_writer(root, mode, kill_point))
    manifest = {"orbax_checkpoint_version": None, "steps_written": list(STEPS), "cases": {}}
    for case, (root, mode, kill_point, child) in writers.items():
        killed_at = finish_writer(child, kill_point)
        entries, orbax_steps = describe(root, mode)
        expected = sorted((e["step"] for e in entries if e.get("committed")), reverse=True)
        if expected != orbax_steps:
            raise RuntimeError("%s: on-disk rule says %s, Orbax lists %s" % (case, expected, orbax_steps))
        manifest["cases"][case] = {
            "dir": case,
            "atomicity_mode": mode,
            "killed_at": killed_at,
            "committed_steps": expected,
            "newest_committed": expected[0] if expected else None,
            "entries": entries,
        }
    import orbax.checkpoint as ocp

    manifest["orbax_checkpoint_version"] = ocp.__version__
    print(json.dumps(manifest, indent=1))


if __name__ == "__main__":
    if len(sys.argv) == 5 and sys.argv[1] == "--write":
        write(sys.argv[2], sys.argv[3], None if sys.argv[4] == "none" else sys.argv[4])
    elif len(sys.argv) == 2 and not sys.argv[1].startswith("-"):
        main(sys.argv[1])
    else:
        sys.exit("usage: %s OUTDIR" % sys.argv[0])
