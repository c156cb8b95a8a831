"""Resume the JAX example on fewer devices than saved its checkpoint, and compare the losses.

    JAX_PLATFORMS=cpu .venv/bin/python tests/python/resume_on_fewer_devices.py WORKDIR

A run preempted on one TPU type may resume on another with a different device count. This
runs the real examples/jax-trainer/pretrain.py twice, as subprocesses, on CPU devices made by
XLA_FLAGS=--xla_force_host_platform_device_count:

  reference/  8 devices (PODQ_ACCELERATOR=v5litepod-8), steps 1 to TOTAL uninterrupted,
              saving at CHECKPOINT and TOTAL. Its step-CHECKPOINT checkpoint is what a run
              preempted after that save leaves behind (the run is deterministic, so a separate
              run stopped there would save the same bytes).
  resumed/    4 devices (PODQ_ACCELERATOR=v6e-4), started with load_checkpoint=resumed/CHECKPOINT,
              a copy of the reference's step directory in its own root, as podq resumes an
              attempt in the job's root; it runs on to TOTAL.

Both runs see the same global batch at every step (global_batch_size=256: the example caps
the batch at 64 examples per device, so the config's 6144 would be 512 examples on 8 devices
and 256 on 4), and evaluate at every step (epochs=TOTAL eval_interval=1), so every step is
reported, K+1 included. The only difference left is the order of the reductions over 8 or 4
devices: after the restore the losses must match the reference's to float32 rounding.

Prints one JSON object on stdout:

  {"total_steps": 40, "checkpoint_step": 20, "wall_s": 9.8,
   "reference": {"accelerator": "v5litepod-8", "devices": 8, "restored_step": null,
                 "first_step": 1, "loss": {"1": 3.2499, ...}, "eval_loss": {...}, "wall_s": 5.1},
   "resumed":   {"accelerator": "v6e-4", "devices": 4, "restored_step": 20,
                 "first_step": 21, "loss": {"21": 3.2039, ...}, "eval_loss": {...}, "wall_s": 4.7},
   "max_loss_diff": 5e-07, "max_eval_loss_diff": 4e-07}

``devices`` is what JAX saw (the trainer's "JAX sees N devices" line), ``restored_step`` the
N of its "restored from step N" line (null if none), ``loss``/``eval_loss`` the
``train/loss``/``eval/loss`` of its PODQ metrics lines by step, ``max_*_diff`` the largest
absolute difference between the two runs over the steps both reported after the checkpoint.
A subprocess that fails (or prints no metrics, or leaves no checkpoint to resume from) makes
the script exit 1 with a message and the end of its log on stderr. The JAX compilation cache
is WORKDIR/jax-cache, kept between invocations; the run directories are made afresh.
"""

import json
import os
import re
import shutil
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PRETRAIN = os.path.join(REPO, "examples", "jax-trainer", "pretrain.py")
CONFIGS = os.path.join(REPO, "examples", "jax-trainer", "configs")

TOTAL_STEPS = 40
CHECKPOINT_STEP = 20  # checkpoint every 20 steps: at 20 and at 40
GLOBAL_BATCH = 256  # divides 8 and 4 devices, and is below the cap of 64 per device on both
RUN_TIMEOUT_S = 300

# (accelerator label, CPU devices): single-host slices with these chip counts.
REFERENCE = ("v5litepod-8", 8)
RESUMED = ("v6e-4", 4)


def fail(message, log_path=None):
    sys.stderr.write("resume_on_fewer_devices: %s\n" % message)
    if log_path and os.path.exists(log_path):
        with open(log_path, errors="replace") as f:
            tail = f.read()[-4000:]
        sys.stderr.write("--- end of %s ---\n%s\n" % (log_path, tail))
    sys.exit(1)


def trainer_env(workdir, accelerator, devices):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PODQ_", "JAX_PROCESS_"))}
    env.pop("COORDINATOR_ADDRESS", None)
    flags = [f for f in env.get("XLA_FLAGS", "").split() if not f.startswith("--xla_force_host_platform_device_count")]
    flags.append("--xla_force_host_platform_device_count=%d" % devices)
    pythonpath = [os.path.join(REPO, "tests", "python", "fake_wandb"), os.path.join(REPO, "trainer", "src")]
    if env.get("PYTHONPATH"):
        pythonpath.append(env["PYTHONPATH"])
    env.update(
        {
            "XLA_FLAGS": " ".join(flags),
            "JAX_PLATFORMS": "cpu",
            "JAX_COMPILATION_CACHE_DIR": os.path.join(workdir, "jax-cache"),
            "PYTHONPATH": os.pathsep.join(pythonpath),
            "PYTHONUNBUFFERED": "1",
            "WANDB_MODE": "disabled",
            # What podq's worker sets for the slice (the simulated one: one host, N devices).
            "PODQ_ACCELERATOR": accelerator,
            "PODQ_SLICE_HOSTS": "1",
            "PODQ_SLICE_DEVICES": str(devices),
            "PODQ_EXAMPLE_TOTAL_STEPS": str(TOTAL_STEPS),
            "PODQ_EXAMPLE_CHECKPOINT_EVERY": str(CHECKPOINT_STEP),
        }
    )
    return env


def run_trainer(workdir, name, accelerator, devices, load_checkpoint):
    """Runs pretrain.py in WORKDIR/name-run/ with its checkpoints in WORKDIR/name/; returns its results."""
    root = os.path.join(workdir, name)
    rundir = os.path.join(workdir, name + "-run")  # Hydra writes outputs/ into the cwd
    os.makedirs(rundir, exist_ok=True)
    out_path, err_path = os.path.join(rundir, "stdout.txt"), os.path.join(rundir, "stderr.txt")
    command = [
        sys.executable,
        PRETRAIN,
        "--config-path", CONFIGS,
        "--config-name", "exp01a",
        "checkpoint_path=" + root,
        "load_checkpoint=" + (load_checkpoint or "null"),
        "global_batch_size=%d" % GLOBAL_BATCH,
        "epochs=%d" % TOTAL_STEPS,
        "eval_interval=1",
    ]
    started = time.monotonic()
    with open(out_path, "wb") as out, open(err_path, "wb") as err:
        try:
            code = subprocess.run(
                command, cwd=rundir, env=trainer_env(workdir, accelerator, devices),
                stdin=subprocess.DEVNULL, stdout=out, stderr=err, timeout=RUN_TIMEOUT_S,
            ).returncode
        except subprocess.TimeoutExpired:
            fail("the %s run did not finish within %d s" % (name, RUN_TIMEOUT_S), err_path)
    wall = time.monotonic() - started
    if code != 0:
        fail("the %s run exited with %d: %s" % (name, code, " ".join(command)), err_path)

    with open(out_path, errors="replace") as f:
        stdout = f.read()
    with open(err_path, errors="replace") as f:
        stderr = f.read()
    loss, eval_loss = {}, {}
    for line in stdout.splitlines():
        if not line.startswith("PODQ "):
            continue
        event = json.loads(line[len("PODQ "):])
        if event.get("event") != "metrics":
            continue
        values = event["values"]
        if "train/loss" in values:
            loss[event["step"]] = values["train/loss"]
        if "eval/loss" in values:
            eval_loss[event["step"]] = values["eval/loss"]
    if not loss:
        fail("the %s run printed no PODQ metrics lines with train/loss" % name, out_path)
    restored = re.search(r"^restored from step (\d+)$", stdout, re.M)
    seen = re.search(r"JAX sees (\d+) devices", stderr)
    return {
        "accelerator": accelerator,
        "devices": int(seen.group(1)) if seen else None,
        "restored_step": int(restored.group(1)) if restored else None,
        "first_step": min(loss),
        "loss": loss,
        "eval_loss": eval_loss,
        "wall_s": round(wall, 2),
    }


def max_diff(a, b, after):
    common = [s for s in a if s in b and s > after]
    if not common:
        return None
    return max(abs(a[s] - b[s]) for s in common)


def main():
    if len(sys.argv) != 2:
        sys.stderr.write("usage: %s WORKDIR\n" % sys.argv[0])
        sys.exit(2)
    workdir = os.path.abspath(sys.argv[1])
    started = time.monotonic()
    for name in ("reference", "reference-run", "resumed", "resumed-run"):
        shutil.rmtree(os.path.join(workdir, name), ignore_errors=True)
    os.makedirs(workdir, exist_ok=True)

    reference = run_trainer(workdir, "reference", *REFERENCE, load_checkpoint=None)
    saved = os.path.join(workdir, "reference", str(CHECKPOINT_STEP))
    if not os.path.isdir(saved):
        fail("the reference run left no committed checkpoint at %s" % saved)
    # podq resumes an attempt in the job's own root: copy the step there.
    resume_from = os.path.join(workdir, "resumed", str(CHECKPOINT_STEP))
    shutil.copytree(saved, resume_from)
    resumed = run_trainer(workdir, "resumed", *RESUMED, load_checkpoint=resume_from)

    result = {
        "total_steps": TOTAL_STEPS,
        "checkpoint_step": CHECKPOINT_STEP,
        "wall_s": round(time.monotonic() - started, 2),
        "reference": reference,
        "resumed": resumed,
        "max_loss_diff": max_diff(reference["loss"], resumed["loss"], CHECKPOINT_STEP),
        "max_eval_loss_diff": max_diff(reference["eval_loss"], resumed["eval_loss"], CHECKPOINT_STEP),
    }
    json.dump(result, sys.stdout, indent=1)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
