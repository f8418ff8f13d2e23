"""torch's intra-op threads, set once per run from ``torch_threads`` (docs/performance.md, "Threads", says what auto
chooses and why: on busy cores a team of threads waits at every small operation's join)."""

import torch

from recbole_fbsm.runtime.openmp import is_auto, usable_cores, waits_passively

# rows per process and training step from which the cores pay: below it two threads were no faster than one on
# FBSM (benchmarks/README.md, "Threads: the default")
TRAIN_ROWS_FOR_CORES = 4096


def set_torch_threads(config):
    """Set torch's thread count for the run of ``config`` (RecBole's Config or a dict), once: ``torch_threads`` N, or
    under auto each process's share of the usable cores when OpenMP waits passively and a step has at least
    ``TRAIN_ROWS_FOR_CORES`` rows per process, else 1. Returns the line that says what was chosen and why."""
    values = getattr(config, "final_config_dict", config)
    ranks = values.get("single_spec") is False  # a rank of a data-parallel run (runtime.distributed)
    processes, world_size = (int(values.get("nproc") or 1), int(values.get("world_size") or 1)) if ranks else (1, 1)
    asked = values.get("torch_threads")
    cores = max(1, usable_cores() // processes)
    rows = int(values.get("train_batch_size") or 0) // max(1, world_size)
    passive = waits_passively()
    count = int(asked) if not is_auto(asked) else cores if passive and rows >= TRAIN_ROWS_FOR_CORES else 1
    why = (
        f"torch_threads: {int(asked)}"
        if not is_auto(asked)
        else (
            f"torch_threads: auto, {cores} core{'s' if cores > 1 else ''} per process, OpenMP "
            f"{'waits passively' if passive else 'spin-waits'}, steps of {rows} rows per process (the cores from "
            f"{TRAIN_ROWS_FOR_CORES}, waiting passively)"
        )
    )
    torch.set_num_threads(count)
    return f"torch threads: {count} ({why})"
