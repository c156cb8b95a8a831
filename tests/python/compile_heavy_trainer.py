"""A real JAX trainer whose step takes seconds to compile and little to load.

tests/recovery.rs runs it under `podq worker --driver local` to show JAX's persistent
compilation cache (the worker's `JAX_COMPILATION_CACHE_DIR`) carrying a compiled step from one
attempt to the next. A long chain of elementwise ops is what makes XLA's compile slow (fusion
and code generation of one large kernel) while the executable it writes stays small: a chain of
matmuls instead compiles fast, and a large CPU executable costs nearly as much to load from the
cache as to compile.

Environment: PODQ_CHECKPOINT_DIR, PODQ_RESUME_FROM (set by the worker); COMPILE_TRAINER_OPS
(the chain's length, default 400), COMPILE_TRAINER_STEPS (default 60),
COMPILE_TRAINER_SAVE_EVERY (default 10), COMPILE_TRAINER_STEP_SLEEP_S (default 0.1).
Checkpoints are directories `<step>` written under a temporary name and renamed, with the
`_CHECKPOINT_METADATA` file Orbax writes: on a local filesystem the rename is the commit, as
podq's worker reads it (worker/src/checkpoints.rs).
"""

import os
import time

import jax
import jax.numpy as jnp
import numpy as np

import podq_trainer

OPS = int(os.environ.get("COMPILE_TRAINER_OPS", "400"))
STEPS = int(os.environ.get("COMPILE_TRAINER_STEPS", "60"))
SAVE_EVERY = int(os.environ.get("COMPILE_TRAINER_SAVE_EVERY", "10"))
STEP_SLEEP_S = float(os.environ.get("COMPILE_TRAINER_STEP_SLEEP_S", "0.1"))


@jax.jit
def step(x):
    for _ in range(OPS):
        x = jnp.sin(x) * 0.999 + jnp.cos(x * 0.5) * 0.001
    return x, jnp.mean(x)


def save(checkpoint_dir, step_no, x):
    final = os.path.join(checkpoint_dir, str(step_no))
    tmp = final + ".orbax-checkpoint-tmp-0"
    os.makedirs(tmp, exist_ok=True)
    np.save(os.path.join(tmp, "x.npy"), np.asarray(x))
    # Orbax writes this file in every step directory; podq's worker looks for it before it
    # resumes from one.
    with open(os.path.join(tmp, "_CHECKPOINT_METADATA"), "w") as f:
        f.write("{}")
    os.rename(tmp, final)
    podq_trainer.report_checkpoint(step_no, final)


def main():
    checkpoint_dir = os.environ["PODQ_CHECKPOINT_DIR"]
    os.makedirs(checkpoint_dir, exist_ok=True)
    resume = os.environ.get("PODQ_RESUME_FROM") or ""
    x = np.ones((64,), np.float32)
    start = 0
    if resume and resume != "null":
        with podq_trainer.phase("restore"):
            x = np.load(os.path.join(resume, "x.npy"))
            start = int(os.path.basename(resume.rstrip("/")))
    with podq_trainer.phase("compile", step=start):
        compiled = step.lower(jnp.asarray(x)).compile()
    x = jnp.asarray(x)
    for step_no in range(start + 1, STEPS + 1):
        x, loss = compiled(x)
        podq_trainer.report_metrics(step_no, {"train/loss": float(loss)})
        if step_no % SAVE_EVERY == 0 or step_no == STEPS:
            save(checkpoint_dir, step_no, x)
        time.sleep(STEP_SLEEP_S)


if __name__ == "__main__":
    main()
