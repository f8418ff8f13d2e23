"""torch's intra-op threads, set once per run from ``torch_threads`` (docs/performance.md, "Threads", says what auto
chooses and why: on busy cores a team of threads waits at every small operation's join)."""

import os
from typing import NamedTuple

import torch

from recbole_fbsm.runtime.openmp import is_auto, usable_cores, waits_passively

# rows per process and training step from which the cores pay: below it two threads were no faster than one on
# FBSM (benchmarks/README.md, "Threads: the default")
TRAIN_ROWS_FOR_CORES = 4096


class Threads(NamedTuple):
    count: int
    why: str
    advice: bool = False  # ``why`` advises setting OpenMP's variables (shown on the console from the command line only)

    def describe(self):
        return f"torch threads: {self.count} ({self.why})"


def choose_threads(torch_threads, rows_per_step, processes=1, cores=None, passive=None):
    """The thread count for a ``torch_threads`` setting (checked: None, ``auto`` or 1..cores), training steps of
    ``rows_per_step`` rows per process, and ``processes`` data-parallel processes on this machine."""
    if not is_auto(torch_threads):
        return Threads(int(torch_threads), f"torch_threads: {int(torch_threads)}")
    share = " per process" if processes and processes > 1 else ""
    cores = max(1, (usable_cores() if cores is None else cores) // max(1, int(processes or 1)))
    if cores == 1:
        return Threads(1, f"torch_threads: auto, 1 usable core{share}")
    if not (waits_passively() if passive is None else passive):
        why = (
            f"torch_threads: auto; {cores} cores{share}, but OpenMP spin-waits in this process (OMP_WAIT_POLICY is "
            f"{os.environ.get('OMP_WAIT_POLICY', 'unset')}), and spinning threads on busy cores made epochs up to 40 "
            "times slower: set OMP_WAIT_POLICY=PASSIVE before Python starts to let large steps use the cores"
        )
        return Threads(1, why, advice=True)
    rows = int(rows_per_step or 0)
    count = cores if rows >= TRAIN_ROWS_FOR_CORES else 1
    bound = "at least" if count > 1 else "fewer than"
    return Threads(
        count,
        f"torch_threads: auto, {cores} cores{share}, OpenMP waits passively; steps of {rows} rows{share}: {bound} "
        f"{TRAIN_ROWS_FOR_CORES} for the cores",
    )


def set_torch_threads(config):
    """Set torch's thread count for the run of ``config`` (RecBole's Config or a dict), once; the ``Threads`` set."""
    values = getattr(config, "final_config_dict", config)
    processes, world_size = 1, 1
    if values.get("single_spec") is False:  # a rank of a data-parallel run (runtime.distributed)
        processes, world_size = int(values.get("nproc") or 1), int(values.get("world_size") or 1)
    rows = int(values.get("train_batch_size") or 0) // max(1, world_size)
    threads = choose_threads(values.get("torch_threads"), rows, processes)
    torch.set_num_threads(threads.count)
    return threads
