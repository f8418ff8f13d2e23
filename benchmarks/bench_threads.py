"""Thread defaults, quiet and under contention: the main job with the default threads against one thread.

The main job is the command a new user types, ``run_recbole.py --model=FBSM --dataset=ml-100k --epochs=3``
(load, the untrained validation, 3 epochs each validated, the test), each run a fresh process in its own
temporary folder. Variants (``--variants``):

- ``auto``: the default (no ``torch_threads`` given): ``torch_threads: auto``, OpenMP's passive waits set by
  the command line (recbole_fbsm/runtime/threads.py, runtime/openmp.py);
- ``one``: ``--torch_threads=1``;
- ``torch``: torch's own default, one thread per core in every phase with OpenMP's spinning waits (the
  plugin's default before ``auto``): ``--torch_threads=<cores>``;
- ``cores-passive``: one thread per core in every phase with ``OMP_WAIT_POLICY=PASSIVE`` (the
  alternative of passive waits alone).

Every child gets this environment without ``OMP_WAIT_POLICY``, ``GOMP_SPINCOUNT``, ``KMP_BLOCKTIME``,
``OMP_NUM_THREADS`` and ``MKL_NUM_THREADS``, as a new user's shell has them. Conditions: ``quiet`` (no
process started by the benchmark) and ``busy`` (``--busy-per-core`` processes spinning ``while True:
pass`` per usable core, started before the run and killed after it). Order: for each repeat, quiet then
busy, the variants in turn, rotated by one each repeat (A B C, B C A, ...), so drift hits every variant.

Printed: per condition and variant the median (min-max) of the command's wall seconds, its CPU seconds
(user + sys of the child), the seconds per training epoch and per validation (the console's epoch lines);
what ``auto`` chose (its log line); whether every variant ended with the same training losses; then the
ratios of the medians: default (auto) / one thread, quiet and busy, and default / torch's default.

    python benchmarks/bench_threads.py                       # FBSM, ml-100k, 3 epochs, 5 repeats
    python benchmarks/bench_threads.py --repeats 3 --variants auto one --json threads.json
    python benchmarks/bench_threads.py --dataset citeulike-t --data_path /tmp/data --config train_batch_size=4096
"""

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchlib import REPO_ROOT, fmt, markdown, parse_config, spread, thread_env  # noqa: E402

from recbole_fbsm.runtime.openmp import usable_cores  # noqa: E402

# the console's epoch line: "epoch 0: train loss: 118.0300 (0.25s), valid recall@10: 0.067000 (0.02s)"
EPOCH_LINE = re.compile(r"epoch (\d+): train loss: (\S+) \(([\d.]+)s\)(?:, valid \S+: \S+ \(([\d.]+)s\))?")
THREADS_LINE = re.compile(r"torch threads: (.*)$", re.M)
USER_CHOICES = ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "KMP_BLOCKTIME", "OMP_NUM_THREADS", "MKL_NUM_THREADS")
VARIANTS = ("auto", "one", "torch", "cores-passive")


def variant_command(variant, cores):
    """(extra arguments, extra environment) of a variant."""
    return {
        "auto": ([], {}),
        "one": (["--torch_threads=1"], {}),
        "torch": ([f"--torch_threads={cores}"], {}),
        "cores-passive": ([f"--torch_threads={cores}"], {"OMP_WAIT_POLICY": "PASSIVE"}),
    }[variant]


def clean_env():
    env = thread_env(0)
    for name in USER_CHOICES:
        env.pop(name, None)
    return env


def run_once(variant, args, cores, timeout):
    extra_args, extra_env = variant_command(variant, cores)
    with tempfile.TemporaryDirectory(prefix="bench_threads_") as workdir:
        command = [
            sys.executable,
            str(REPO_ROOT / "run_recbole.py"),
            f"--model={args.model}",
            f"--dataset={args.dataset}",
            f"--epochs={args.epochs}",
            f"--checkpoint_dir={Path(workdir) / 'saved'}",
            *extra_args,
        ]
        if args.data_path:
            command.append(f"--data_path={args.data_path}")
        command += [f"--{key}={value}" for key, value in args.config.items()]
        start = time.perf_counter()
        child = subprocess.Popen(
            command,
            cwd=workdir,
            env={**clean_env(), **extra_env},
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        try:
            output, _ = child.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            child.kill()
            output, _ = child.communicate()
            return {
                "wall_s": time.perf_counter() - start,
                "timed_out": True,
                "cpu_s": None,
                "epochs": [],
                "threads": None,
                "losses": None,
            }
        wall = time.perf_counter() - start
    if child.returncode != 0:
        raise SystemExit(f"{variant}: the run failed ({' '.join(command)}):\n{output[-3000:]}")
    epochs = [(float(train), float(valid) if valid else None) for _, _, train, valid in EPOCH_LINE.findall(output)]
    losses = [loss for _, loss, _, _ in EPOCH_LINE.findall(output)]
    threads = THREADS_LINE.search(output)
    return {
        "wall_s": wall,
        "timed_out": False,
        "cpu_s": None,
        "epochs": epochs,
        "threads": threads.group(1).strip() if threads else None,
        "losses": losses,
    }


class Busy:
    """``count`` processes spinning in Python, for the length of a ``with`` block."""

    def __init__(self, count):
        self.count, self.children = count, []

    def __enter__(self):
        self.children = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(self.count)]
        time.sleep(0.5)  # they have the cores before the run starts
        return self

    def __exit__(self, *exc):
        for child in self.children:
            child.kill()
        for child in self.children:
            child.wait()
        return False


def timed_run(variant, args, cores):
    """``run_once`` with the child's CPU seconds (user + sys of the waited-for child; the busy processes are
    reaped only after their block)."""
    before = os.times()
    result = run_once(variant, args, cores, args.timeout)
    after = os.times()
    if not result["timed_out"]:
        result["cpu_s"] = (after.children_user - before.children_user) + (
            after.children_system - before.children_system
        )
    return result


def median_or_none(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="FBSM")
    parser.add_argument("--dataset", default="ml-100k")
    parser.add_argument("--data_path", default=None, help="folder of the dataset (default: RecBole's / the plugin's)")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--variants", nargs="+", choices=VARIANTS, default=["auto", "one", "torch"])
    parser.add_argument("--conditions", nargs="+", choices=("quiet", "busy"), default=["quiet", "busy"])
    parser.add_argument("--busy-per-core", type=int, default=1, help="spinning processes per usable core (busy)")
    parser.add_argument(
        "--timeout", type=float, default=600, help="seconds per run; a run past it counts as its timeout"
    )
    parser.add_argument("--config", nargs="*", default=[], help="more settings, key=value")
    parser.add_argument("--json", default=None, help="write every run's numbers here")
    args = parser.parse_args(argv)
    args.config = parse_config(args.config)
    cores = usable_cores(environ={})  # the affinity's cores, whatever OMP_NUM_THREADS says
    overridden = [name for name in USER_CHOICES if name in os.environ]
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=REPO_ROOT, capture_output=True, text=True
    ).stdout.strip()
    print(
        f"# {args.model} on {args.dataset}, {args.epochs} epochs, {args.repeats} repeats; {cores} usable cores; "
        f"busy: {args.busy_per_core} spinning process(es) per core; commit {commit or '?'}; load average at start "
        f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}"
        + (f"; removed from the children's environment: {', '.join(overridden)}" if overridden else ""),
        flush=True,
    )
    runs = []
    started = time.perf_counter()
    for repeat in range(args.repeats):
        order = args.variants[repeat % len(args.variants) :] + args.variants[: repeat % len(args.variants)]
        for condition in args.conditions:
            with Busy(cores * args.busy_per_core if condition == "busy" else 0):
                for variant in order:
                    result = timed_run(variant, args, cores)
                    result.update(repeat=repeat, condition=condition, variant=variant)
                    runs.append(result)
                    print(
                        f"repeat {repeat} {condition:5} {variant:13} wall {result['wall_s']:.2f} s"
                        + (" (timed out)" if result["timed_out"] else f", cpu {result['cpu_s']:.2f} s"),
                        flush=True,
                    )
    load_end = os.getloadavg()

    rows, medians = [], {}
    for condition in args.conditions:
        for variant in args.variants:
            mine = [r for r in runs if r["condition"] == condition and r["variant"] == variant]
            walls = [r["wall_s"] for r in mine]
            train = [e[0] for r in mine for e in r["epochs"]]
            valid = [e[1] for r in mine for e in r["epochs"] if e[1] is not None]
            timed_out = sum(r["timed_out"] for r in mine)
            medians[condition, variant] = statistics.median(walls)
            rows.append(
                [
                    condition,
                    variant,
                    spread(walls)
                    + (f", {timed_out} timed out (counted as {fmt(args.timeout)} s)" if timed_out else ""),
                    fmt(median_or_none([r["cpu_s"] for r in mine])),
                    spread(train),
                    spread(valid),
                ]
            )
    print()
    print(
        markdown(
            ["condition", "threads", "wall s, median (min-max)", "CPU s (user+sys)", "train s/epoch", "valid s"], rows
        )
    )
    chosen = {r["threads"] for r in runs if r["variant"] == "auto" and r["threads"]}
    if chosen:
        print()
        print("auto chose: " + "; ".join(sorted(chosen)))
    finals = {tuple(r["losses"]) for r in runs if r["losses"]}
    print(
        f"training losses: {'the same in every run' if len(finals) == 1 else f'{len(finals)} different sequences'}"
        + (f" ({', '.join(next(iter(finals)))})" if len(finals) == 1 else "")
    )
    ratios = []
    for condition in args.conditions:
        if ("auto" in args.variants) and ("one" in args.variants):
            ratios.append(
                [
                    f"default (auto) / one thread, {condition}",
                    f"{medians[condition, 'auto'] / medians[condition, 'one']:.2f}",
                ]
            )
        if ("auto" in args.variants) and ("torch" in args.variants):
            ratios.append(
                [
                    f"default (auto) / torch's default, {condition}",
                    f"{medians[condition, 'auto'] / medians[condition, 'torch']:.2f}",
                ]
            )
        if ("torch" in args.variants) and ("one" in args.variants):
            ratios.append(
                [
                    f"torch's default / one thread, {condition}",
                    f"{medians[condition, 'torch'] / medians[condition, 'one']:.2f}",
                ]
            )
        if ("cores-passive" in args.variants) and ("one" in args.variants):
            ratios.append(
                [
                    f"cores, passive waits / one thread, {condition}",
                    f"{medians[condition, 'cores-passive'] / medians[condition, 'one']:.2f}",
                ]
            )
    print()
    print(markdown(["ratio of median wall times", "ratio"], ratios))
    print(
        f"\n{len(runs)} runs in {time.perf_counter() - started:.0f} s; load average at the end "
        f"{' '.join(f'{x:.2f}' for x in load_end)}"
    )
    if args.json:
        Path(args.json).write_text(
            json.dumps(
                {
                    "args": vars(args),
                    "cores": cores,
                    "commit": commit,
                    "runs": runs,
                    "medians": {f"{c}/{v}": m for (c, v), m in medians.items()},
                },
                indent=1,
            )
        )


if __name__ == "__main__":
    main()
