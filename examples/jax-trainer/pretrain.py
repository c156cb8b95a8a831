"""A small JAX trainer shaped like TinyRecursiveModels' pretrain.py, wired to podq.

podq runs it on every host as

    python pretrain.py --config-path {config_dir} --config-name {experiment} \
        checkpoint_path={checkpoint_dir} load_checkpoint={resume_from}

It reads a resolved TRM config, trains a tiny recursive MLP on synthetic Sudoku-like puzzles
(data-parallel over every process's devices), evaluates, saves with Orbax, resumes, and
stops cleanly on SIGTERM. What is podq-specific is marked "podq:".

Environment knobs for tests: PODQ_EXAMPLE_TOTAL_STEPS (replaces the config's step count),
PODQ_EXAMPLE_CHECKPOINT_EVERY (save every N steps instead of after each evaluation),
PODQ_EXAMPLE_STEP_SLEEP_S (sleep after each step, so a test can interrupt the run),
PODQ_EXAMPLE_NAN_AT_STEP (from that step the learning rate is NaN: the run diverges for real,
its parameters and then its losses NaN, as an exploding learning rate leaves them).
PODQ_CHECKPOINT_INTERVAL_STEPS, set by podq, wins over PODQ_EXAMPLE_CHECKPOINT_EVERY.

W&B is optional: with the `wandb` package installed, process 0 logs the metrics to one W&B
run per podq job (project WANDB_PROJECT, default "podq-jax-example"; WANDB_MODE=disabled turns
it off), resumed in every attempt, and reports its URL to podq. Without it, nothing changes.
"""

import time

_T0 = time.monotonic()

import logging  # noqa: E402
import math  # noqa: E402
import os  # noqa: E402
import re  # noqa: E402
import sys  # noqa: E402
from functools import partial  # noqa: E402

import hydra  # noqa: E402
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import orbax.checkpoint as ocp  # noqa: E402
from etils import epath  # noqa: E402
from jax.experimental import multihost_utils  # noqa: E402
from jax.flatten_util import ravel_pytree  # noqa: E402
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P  # noqa: E402
from omegaconf import DictConfig, OmegaConf  # noqa: E402

try:  # optional: without W&B the example logs to podq only
    import wandb  # noqa: E402
except ImportError:
    wandb = None

import podq_trainer  # noqa: E402

_T_IMPORTS = time.monotonic() - _T0

EMBED = 8  # width of a cell's state
FF = 16  # hidden width of the per-cell MLP
EXAMPLES_PER_DEVICE = 64  # the real batch is capped so that a step takes milliseconds on CPU
EVAL_EXAMPLES = 256


def log(message):
    print("[pretrain p%d] %s" % (jax.process_index(), message), file=sys.stderr, flush=True)


def env_number(name, default, kind=int):
    raw = os.environ.get(name, "").strip()
    return kind(raw) if raw else default


# --- distributed set-up ---------------------------------------------------------------------


def init_distributed():
    """jax.distributed.initialize from podq's environment when there are several processes."""
    count = int(os.environ.get("JAX_PROCESS_COUNT", "1") or 1)
    if count <= 1:
        return
    # podq: the preemption service (default on) is what makes every process stop at the same
    # step after SIGTERM; podq_trainer.watch_for_stop() checks that it is running.
    jax.config.update("jax_enable_preemption_service", True)
    # Cross-process collectives on CPU (tests, laptops) need gloo; JAX 0.10's default already
    # is gloo, older versions had none. TPUs ignore this setting.
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(
        coordinator_address=os.environ["COORDINATOR_ADDRESS"],
        num_processes=count,
        process_id=int(os.environ["JAX_PROCESS_INDEX"]),
    )


# --- data: Sudoku-like puzzles, generated from the seed ---------------------------------------


def dataset_groups(data_paths):
    """Puzzles ("groups") in the named datasets: sudoku-extreme-1k-aug-1000 has 1000."""
    total = 0
    for path in data_paths:
        match = re.search(r"sudoku-extreme-([0-9]+)(k?)-aug-[0-9]+", str(path))
        if match is None:
            raise ValueError("cannot tell the size of dataset %r" % (path,))
        total += int(match.group(1)) * (1000 if match.group(2) else 1)
    return total


def solved_grids(rng, count):
    """`count` valid solved 9x9 Sudoku grids (digits 1-9), as [count, 81] int32."""
    base = np.array([[(3 * (r % 3) + r // 3 + c) % 9 for c in range(9)] for r in range(9)])
    grids = np.empty((count, 81), np.int32)
    for i in range(count):
        bands = rng.permutation(3)
        rows = np.concatenate([3 * b + rng.permutation(3) for b in bands])
        stacks = rng.permutation(3)
        cols = np.concatenate([3 * s + rng.permutation(3) for s in stacks])
        digits = rng.permutation(9) + 1
        grids[i] = digits[base[rows][:, cols]].reshape(81)
    return grids


class Puzzles:
    """Puzzles with about half the cells blank; augmented by relabelling the digits."""

    def __init__(self, seed, groups):
        rng = np.random.default_rng([seed, 1])
        self.solutions = solved_grids(rng, groups)
        self.blanks = rng.random((groups, 81)) < 0.5

    def batch(self, rng, size):
        idx = rng.integers(len(self.solutions), size=size)
        relabel = np.concatenate([np.zeros((size, 1), np.int32), np.argsort(rng.random((size, 9)), axis=1) + 1], axis=1)
        solution = np.take_along_axis(relabel, self.solutions[idx], axis=1).astype(np.int32)
        puzzle = np.where(self.blanks[idx], 0, solution).astype(np.int32)
        return puzzle, solution


# --- model: a recursive MLP over cells (TRM's mlp_t), with a halting head ----------------------


def init_params(seed):
    """Initial weights, made with NumPy: op-by-op JAX would compile a dozen tiny programs."""
    rng = np.random.default_rng([seed, 0])

    def dense(fan_in, shape):
        return (rng.standard_normal(shape) / math.sqrt(fan_in)).astype(np.float32)

    return {
        "embed": dense(4, (10, EMBED)),
        "mix_w": dense(81, (81, 81)),
        "mix_b": np.zeros((81,), np.float32),
        "ff_w1": dense(EMBED, (EMBED, FF)),
        "ff_b1": np.zeros((FF,), np.float32),
        "ff_w2": dense(FF, (FF, EMBED)),
        "ff_b2": np.zeros((EMBED,), np.float32),
        "head_w": dense(EMBED, (EMBED, 10)),
        "head_b": np.zeros((10,), np.float32),
        "q_w": dense(EMBED, (EMBED, 1)),
        "q_b": np.zeros((1,), np.float32),
    }


def rms_norm(x):
    return x * jax.lax.rsqrt(jnp.mean(x * x, axis=-1, keepdims=True) + 1e-6)


def forward(params, puzzle, cycles):
    h = params["embed"][puzzle]  # [batch, 81, EMBED]
    z = jnp.zeros_like(h)
    for _ in range(cycles):  # the same block applied again and again, as TRM recurses
        u = h + z
        u = rms_norm(u + jnp.einsum("bpe,pq->bqe", u, params["mix_w"]) + params["mix_b"][None, :, None])
        u = rms_norm(u + jax.nn.gelu(u @ params["ff_w1"] + params["ff_b1"]) @ params["ff_w2"] + params["ff_b2"])
        z = u
    logits = z @ params["head_w"] + params["head_b"]  # [batch, 81, 10]
    q_halt = (jnp.mean(z, axis=1) @ params["q_w"] + params["q_b"])[:, 0]  # [batch]
    return logits, q_halt


def losses(params, puzzle, solution, cycles, halt_max_steps):
    logits, q_halt = forward(params, puzzle, cycles)
    lm_loss = jnp.mean(-jnp.take_along_axis(jax.nn.log_softmax(logits), solution[..., None], axis=-1))
    correct = jnp.argmax(logits, axis=-1) == solution
    exact = jnp.all(correct, axis=-1)
    q_halt_loss = jnp.mean(
        jnp.maximum(q_halt, 0) - q_halt * exact + jnp.log1p(jnp.exp(-jnp.abs(q_halt)))
    )  # binary cross-entropy with logits: should the model halt (is it right)?
    loss = lm_loss + 0.5 * q_halt_loss
    halt = jax.nn.sigmoid(q_halt)
    metrics = {
        "loss": loss,
        "lm_loss": lm_loss,
        "q_halt_loss": q_halt_loss,
        "accuracy": jnp.mean(correct),
        "exact_accuracy": jnp.mean(exact),
        "q_halt_accuracy": jnp.mean((q_halt > 0) == exact),
        "avg_steps": jnp.mean(1 + (halt_max_steps - 1) * (1 - halt)),
    }
    return loss, metrics


def learning_rate(cfg, step, total_steps):
    """TRM's schedule: linear warm-up, then cosine down to lr * lr_min_ratio."""
    warmup = max(1, min(int(cfg.lr_warmup_steps), total_steps // 4))
    if step < warmup:
        return cfg.lr * step / warmup
    progress = (step - warmup) / max(1, total_steps - warmup)
    return cfg.lr * (cfg.lr_min_ratio + (1 - cfg.lr_min_ratio) * 0.5 * (1 + math.cos(math.pi * progress)))


def train_step(state, puzzle, solution, lr, *, mesh, cycles, halt_max_steps, beta1, beta2, weight_decay):
    def local_gradients(params, puzzle, solution):
        # Runs on each device with its shard of the batch; returns the mean over all shards.
        # The replicated params are cast to per-device ("varying") values first: the gradient
        # with respect to a replicated input is otherwise already summed over the devices by
        # shard_map's transpose, and the pmean below averages nothing, leaving gradients (and
        # Adam's m and v) proportional to the device count. A run resumed on another TPU type
        # would then mix optimizer state of one scale with gradients of another.
        params = jax.lax.pcast(params, "data", to="varying")
        (_, metrics), grads = jax.value_and_grad(losses, has_aux=True)(
            params, puzzle, solution, cycles, halt_max_steps
        )
        # One all-reduce of one flat vector. Left to itself XLA all-reduces every array
        # separately, which costs a round trip each across CPU processes (gloo).
        flat, unravel = ravel_pytree((grads, metrics))
        return unravel(jax.lax.pmean(flat, "data"))

    grads, metrics = jax.shard_map(
        local_gradients, mesh=mesh, in_specs=(P(), P("data"), P("data")), out_specs=P()
    )(state["params"], puzzle, solution)
    metrics["count"] = jnp.asarray(puzzle.shape[0], jnp.float32)
    metrics["diverged"] = (~jnp.isfinite(metrics["loss"])).astype(jnp.float32)

    # AdamW, identical on every device.
    step = state["step"] + 1
    t = step.astype(jnp.float32)
    m = jax.tree.map(lambda m, g: beta1 * m + (1 - beta1) * g, state["m"], grads)
    v = jax.tree.map(lambda v, g: beta2 * v + (1 - beta2) * g * g, state["v"], grads)
    params = jax.tree.map(
        lambda p, m, v: p
        - lr * ((m / (1 - beta1**t)) / (jnp.sqrt(v / (1 - beta2**t)) + 1e-8) + weight_decay * p),
        state["params"],
        m,
        v,
    )
    return {"step": step, "params": params, "m": m, "v": v}, metrics


def eval_step(params, puzzle, solution, *, cycles, halt_max_steps):
    _, metrics = losses(params, puzzle, solution, cycles, halt_max_steps)
    return {k: metrics[k] for k in ("loss", "accuracy", "exact_accuracy")}


# --- the run ----------------------------------------------------------------------------------


@hydra.main(version_base=None, config_path=None, config_name=None)
def main(cfg: DictConfig):
    # Hydra sets logging to INFO, which makes Orbax log ~40 lines per checkpoint.
    logging.getLogger("absl").setLevel(logging.WARNING)
    t_init = time.monotonic()
    init_distributed()
    t_init = time.monotonic() - t_init
    process, processes = jax.process_index(), jax.process_count()
    # podq: on every process, after jax.distributed.initialize (a SIGTERM from now on stops the
    # run at a step boundary, even one that arrives during compilation).
    stop = podq_trainer.watch_for_stop()
    run = start_wandb(cfg)

    # Length of training, as TRM computes it (Sudoku sets have one example per group).
    groups = dataset_groups(cfg.data_paths)
    total_steps = int(cfg.epochs * groups * 1 / cfg.global_batch_size)
    total_steps = env_number("PODQ_EXAMPLE_TOTAL_STEPS", total_steps)
    evals = max(1, int(cfg.epochs // cfg.eval_interval))
    eval_steps = {max(1, round(i * total_steps / evals)) for i in range(1, evals + 1)}
    every = env_number("PODQ_EXAMPLE_CHECKPOINT_EVERY", 0)  # 0: at evaluations
    # podq: the interval podq gives this attempt (PODQ_CHECKPOINT_INTERVAL_STEPS), if any,
    # replaces the trainer's own; saves then no longer wait for evaluations.
    every = podq_trainer.checkpoint_interval(every)
    if every > 0:
        save_steps = set(range(every, total_steps + 1, every))
    else:
        save_steps = set(eval_steps) if cfg.checkpoint_every_eval else set()
    save_steps.add(total_steps)
    step_sleep = env_number("PODQ_EXAMPLE_STEP_SLEEP_S", 0.0, float)
    nan_at = env_number("PODQ_EXAMPLE_NAN_AT_STEP", 0)

    # podq: the slice this attempt runs on, which may not be the one that saved the checkpoint
    # it resumes from (a run preempted on one TPU type can resume on another).
    where = podq_trainer.slice_info()
    log(
        "podq slice: accelerator=%s hosts=%s devices=%s; JAX sees %d devices (%d local) in %d processes"
        % (where.accelerator, where.hosts, where.devices, jax.device_count(), jax.local_device_count(), processes)
    )

    # Every process's devices in one data-parallel mesh.
    mesh = Mesh(np.array(jax.devices()), ("data",))
    replicated = NamedSharding(mesh, P())
    sharded = NamedSharding(mesh, P("data"))
    batch = min(int(cfg.global_batch_size), EXAMPLES_PER_DEVICE * jax.device_count())
    batch -= batch % jax.device_count()
    local_batch = batch // processes
    log(
        "%d groups, %d steps (evaluations at %s), checkpoints at %d steps, batch %d on %d devices in %d processes"
        % (groups, total_steps, sorted(eval_steps), len(save_steps), batch, jax.device_count(), processes)
    )

    arch = cfg.arch
    cycles = int(arch.H_cycles)
    step_fn = jax.jit(
        partial(
            train_step,
            mesh=mesh,
            cycles=cycles,
            halt_max_steps=int(arch.halt_max_steps),
            beta1=float(cfg.beta1),
            beta2=float(cfg.beta2),
            weight_decay=float(cfg.weight_decay),
        ),
        out_shardings=replicated,
    )
    eval_fn = jax.jit(
        partial(eval_step, cycles=cycles, halt_max_steps=int(arch.halt_max_steps)), out_shardings=replicated
    )

    params = init_params(int(cfg.seed))
    state = {
        "step": np.zeros((), np.int32),
        "params": params,
        "m": jax.tree.map(np.zeros_like, params),
        "v": jax.tree.map(np.zeros_like, params),
    }
    state = jax.device_put(state, replicated)
    log("model: %d parameters" % sum(x.size for x in jax.tree.leaves(params)))

    puzzles = Puzzles(int(cfg.seed), groups)
    eval_rng = np.random.default_rng([int(cfg.seed), 2])
    eval_puzzle, eval_solution = puzzles.batch(eval_rng, EVAL_EXAMPLES)
    eval_slice = slice(process * EVAL_EXAMPLES // processes, (process + 1) * EVAL_EXAMPLES // processes)

    def global_batch(puzzle, solution):
        return (
            jax.make_array_from_process_local_data(sharded, puzzle),
            jax.make_array_from_process_local_data(sharded, solution),
        )

    eval_batch = global_batch(eval_puzzle[eval_slice], eval_solution[eval_slice])

    # podq: checkpoint_path is gs://... or a plain path (a legacy file:// URI is converted).
    checkpoint_root = podq_trainer.checkpoint_dir(cfg.checkpoint_path)
    manager = ocp.CheckpointManager(
        checkpoint_root, options=ocp.CheckpointManagerOptions(enable_async_checkpointing=True)
    )

    start = restore(cfg, manager, state, checkpoint_root)
    if start is not None:
        state, start_step = start
    else:
        start_step = 0

    pending = []  # saved steps not yet reported: reported once Orbax has committed them

    def report_committed(wait):
        if not pending:
            return
        if wait:
            manager.wait_until_finished()
        elif manager.is_saving_in_progress():
            return
        for saved in pending:
            path = epath.Path(checkpoint_root) / str(saved)  # Orbax's default step name
            if process == 0 and path.exists():
                podq_trainer.report_checkpoint(saved, str(path))
        pending.clear()

    newest_saved = [manager.latest_step() or 0]

    def save(step, state):
        if step <= newest_saved[0]:
            return  # like Orbax's should_save: never a step at or below the newest one
        # podq: times the blocking part of the save; Orbax commits it in the background.
        with podq_trainer.phase("save", step=step):
            manager.save(step, args=ocp.args.StandardSave(state), force=True)
        newest_saved[0] = step
        pending.append(step)

    def report(step, metrics, eval_metrics=None):
        if process != 0:
            return
        values = {"train/" + k: v for k, v in jax.device_get(metrics).items()}
        values["train/act_steps"] = cycles
        if eval_metrics is not None:
            values.update({"eval/" + k: v for k, v in jax.device_get(eval_metrics).items()})
        podq_trainer.report_metrics(step, values)
        if run is not None:
            run.log({k: float(v) for k, v in values.items()}, step=step)

    for step in range(start_step + 1, total_steps + 1):
        rng = np.random.default_rng([int(cfg.seed), 3, step, process])
        puzzle, solution = global_batch(*puzzles.batch(rng, local_batch))
        lr = learning_rate(cfg, step, total_steps)
        if nan_at and step >= nan_at:
            lr = float("nan")
        if step == start_step + 1:
            with podq_trainer.phase("compile"):  # podq: the first step compiles
                state, metrics = step_fn(state, puzzle, solution, jnp.float32(lr))
                jax.block_until_ready(metrics)
            log(
                "first step done %.1f s after start (imports %.1f s, distributed init %.1f s)"
                % (time.monotonic() - _T0, _T_IMPORTS, t_init)
            )
        else:
            state, metrics = step_fn(state, puzzle, solution, jnp.float32(lr))

        eval_metrics = eval_fn(state["params"], *eval_batch) if step in eval_steps else None
        # The first step of an attempt is reported at once, then every 10 steps and at evaluations.
        reported = step == start_step + 1 or step % 10 == 0 or eval_metrics is not None
        if reported:
            report(step, metrics, eval_metrics)
        if step in save_steps:
            save(step, state)
        report_committed(wait=False)

        # podq: every process asks at every step; all get True at the same step after SIGTERM.
        if stop.reached(step):
            if not reported:
                report(step, metrics)
            save(step, state)
            report_committed(wait=True)
            manager.close()
            log("stopped at step %d after SIGTERM: exit %d" % (step, podq_trainer.EXIT_STOPPED))
            sys.exit(podq_trainer.EXIT_STOPPED)
        if step_sleep:
            time.sleep(step_sleep)

    report_committed(wait=True)
    manager.close()
    log("finished: %d steps" % total_steps)


def start_wandb(cfg):
    """The W&B run of this podq job on process 0, or None (no wandb package, another process).

    podq: run_id() is the podq job's id, the same in every attempt, so resume="allow" makes
    each attempt after a preemption continue the job's one W&B run; report_link shows it
    with the job in podq. A W&B that cannot start (no login, no network) costs the run
    nothing but its W&B logging.
    """
    if wandb is None or jax.process_index() != 0:
        return None
    try:
        run = wandb.init(
            project=os.environ.get("WANDB_PROJECT", "podq-jax-example"),
            id=podq_trainer.run_id(),
            resume="allow",
            config=OmegaConf.to_container(cfg, resolve=True),
        )
    except Exception as e:  # noqa: BLE001 - W&B is optional; training is not
        log("WARNING: W&B did not start (%s: %s); not logging to W&B" % (type(e).__name__, e))
        return None
    if run is not None and run.url:  # no URL for an offline or disabled run
        podq_trainer.report_link("wandb", run.url)
    return run


def restore(cfg, manager, state, checkpoint_root):
    """(state, step) from load_checkpoint, or None: start from step 0 (with a warning if one was given).

    The restored arrays have the shardings of ``state`` (this process's mesh), whatever mesh
    saved them: a checkpoint saved on N devices restores onto M.
    """
    requested = cfg.get("load_checkpoint")
    try:
        point = podq_trainer.resume_point(requested)  # podq: a step directory -> root and step
    except ValueError as e:
        log("WARNING: could not load checkpoint %s (%s), starting from step 0" % (requested, e))
        return None
    if point is None:
        return None
    same_root = point.directory.rstrip("/") == str(checkpoint_root).rstrip("/") and point.step_prefix is None
    reader = manager
    if not same_root:  # another run's checkpoints, or step names with a prefix
        options = ocp.CheckpointManagerOptions(
            step_prefix=point.step_prefix, read_only=True, create=False, save_interval_steps=0
        )
        reader = ocp.CheckpointManager(point.directory, options=options)
    # Every process must agree, or they would run different programs and hang.
    ok = epath.Path(point.path).is_dir()
    ok = bool(np.all(multihost_utils.process_allgather(np.array(ok))))
    error = "it is not a directory on every host"
    restored = None
    if ok:
        try:
            # podq: the checkpoint may come from another TPU type with another device count;
            # restore_args gives Orbax this mesh's shardings, which it needs to reshard.
            shardings = jax.tree.map(lambda x: x.sharding, state)
            with podq_trainer.phase("restore", step=point.step):  # podq: times the restore
                restored = reader.restore(point.step, args=podq_trainer.restore_args(state, shardings))
            error = "another host could not load it"
        except Exception as e:  # noqa: BLE001 - TRM also carries on from step 0
            error = "%s: %s" % (type(e).__name__, e)
        ok = bool(np.all(multihost_utils.process_allgather(np.array(restored is not None))))
    if not ok:
        log("WARNING: could not load checkpoint %s (%s), starting from step 0" % (point.path, error))
        return None
    step = int(jax.device_get(restored["step"]))
    if step != point.step:
        log("WARNING: checkpoint %s holds step %d" % (point.path, step))
    print("restored from step %d" % point.step, flush=True)
    return restored, point.step


if __name__ == "__main__":
    main()
