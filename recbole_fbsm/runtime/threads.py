"""torch's intra-op threads per phase of a run under ``torch_threads: auto`` (docs/performance.md, "Threads", says
what it chooses and why: on busy cores a team of threads waits at every small operation's join)."""

import contextlib
import os
from dataclasses import dataclass

import torch

from recbole_fbsm.runtime.openmp import is_auto, usable_cores, waits_passively

# rows per process and training step from which training uses the cores: below it two threads were no faster
# than one on FBSM (benchmarks/README.md, "Threads: the default")
TRAIN_ROWS_FOR_CORES = 4096


@dataclass(frozen=True)
class ThreadPlan:
    """Threads per phase, and the one line that says why."""

    train: int
    evaluate: int
    load: int
    why: str
    advice: bool = False  # ``why`` advises setting OpenMP's variables (shown on the console from the command line only)

    @contextlib.contextmanager
    def phase(self, name):
        """torch's thread count for ``name`` (train, evaluate, load) inside the block, the previous one after."""
        wanted, before = getattr(self, name), torch.get_num_threads()
        if wanted != before:
            torch.set_num_threads(wanted)
        try:
            yield
        finally:
            if torch.get_num_threads() != before:
                torch.set_num_threads(before)

    def describe(self):
        if self.train == self.evaluate == self.load:
            counts = f"{self.train} in every phase"
        else:
            counts = f"training {self.train}, evaluation {self.evaluate}, loading {self.load}"
        return f"torch threads: {counts} ({self.why})"


def plan_threads(torch_threads, rows_per_step, processes=1, cores=None, passive=None):
    """The ``ThreadPlan`` for a ``torch_threads`` setting (checked: None, ``auto`` or 1..cores), training
    steps of ``rows_per_step`` rows per process, and ``processes`` data-parallel processes on this machine."""
    if not is_auto(torch_threads):
        count = int(torch_threads)
        return ThreadPlan(count, count, count, f"torch_threads: {count}")
    cores = max(1, (usable_cores() if cores is None else cores) // max(1, int(processes or 1)))
    passive = waits_passively() if passive is None else passive
    share = " per process" if processes and processes > 1 else ""
    if cores == 1:
        return ThreadPlan(1, 1, 1, f"torch_threads: auto, 1 usable core{share}")
    if not passive:
        why = (
            f"torch_threads: auto; {cores} cores{share}, but OpenMP spin-waits in this process (OMP_WAIT_POLICY is "
            f"{os.environ.get('OMP_WAIT_POLICY', 'unset')}), and spinning threads on busy cores made epochs up to 40 "
            "times slower: set OMP_WAIT_POLICY=PASSIVE before Python starts to let evaluation use the cores"
        )
        return ThreadPlan(1, 1, 1, why, advice=True)
    rows = int(rows_per_step or 0)
    train = cores if rows >= TRAIN_ROWS_FOR_CORES else 1
    step = (
        f"steps of {rows} rows{share}: {'at least' if train > 1 else 'fewer than'} {TRAIN_ROWS_FOR_CORES} "
        "for the cores in training"
    )
    return ThreadPlan(train, cores, 1, f"torch_threads: auto, {cores} cores{share}, OpenMP waits passively; {step}")


def plan_for_config(config):
    """The ``ThreadPlan`` of a run's config (RecBole's Config or a dict)."""
    values = getattr(config, "final_config_dict", config)
    processes, world_size = 1, 1
    if values.get("single_spec") is False:  # a rank of a data-parallel run (runtime.distributed)
        processes, world_size = int(values.get("nproc") or 1), int(values.get("world_size") or 1)
    rows = int(values.get("train_batch_size") or 0) // max(1, world_size)
    return plan_threads(values.get("torch_threads"), rows, processes)
