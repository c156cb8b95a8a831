"""Check that the configs podq stages load in Hydra the way the trainer command loads them.

    .venv/bin/python tests/python/compose_staged.py DIR

For every DIR/*.yaml (resolved configs, as podq writes them to {config_dir}), composes it with
Hydra's compose API and the overrides the trainer command line carries
(checkpoint_path=..., load_checkpoint=null), and checks that the result has `arch` with
`name`. Prints one JSON line {"composed": N, "failed": [{"file": ..., "error": ...}]} and exits
1 if any file failed (or DIR has no *.yaml).
"""

import json
import os
import sys

OVERRIDES = ["checkpoint_path=/x", "load_checkpoint=null"]


def check(directory, stem):
    from hydra import compose, initialize_config_dir
    from omegaconf import DictConfig

    with initialize_config_dir(config_dir=directory, version_base=None):
        cfg = compose(config_name=stem, overrides=OVERRIDES)
    arch = cfg.get("arch")
    if not isinstance(arch, DictConfig):
        raise ValueError("no `arch` mapping")
    if not arch.get("name"):
        raise ValueError("`arch` has no `name`")
    if cfg.checkpoint_path != "/x" or cfg.load_checkpoint is not None:
        raise ValueError("the command-line overrides did not apply")


def main(directory):
    directory = os.path.abspath(directory)
    stems = sorted(name[: -len(".yaml")] for name in os.listdir(directory) if name.endswith(".yaml"))
    failed = []
    for stem in stems:
        try:
            check(directory, stem)
        except Exception as e:  # noqa: BLE001 - every failure is reported, whatever it is
            failed.append({"file": stem + ".yaml", "error": "%s: %s" % (type(e).__name__, " ".join(str(e).split()))})
    if not stems:
        failed.append({"file": None, "error": "no *.yaml in %s" % directory})
    print(json.dumps({"composed": len(stems) - len([f for f in failed if f["file"]]), "failed": failed}))
    return 1 if failed else 0


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: %s DIR" % sys.argv[0])
    sys.exit(main(sys.argv[1]))
