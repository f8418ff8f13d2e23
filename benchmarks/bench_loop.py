"""FBSM (or UFSM) training epochs with batches cut on the model's device against RecBole's whole-user loader.

One process, one prepared dataset, one model and one trainer; two training loaders over the same training
split: ``device`` (``recbole_fbsm.data.device_batches``, the default) and ``recbole`` (the whole-user RecBole
loader, ``train_batches_on_device: False``). Both plan the same batches (same users, same order: they draw
their plans from generators seeded alike); their negatives come from different random streams. Epochs of
the real trainer's ``_train_epoch`` alternate between the two (A B, then B A, ...), so machine noise hits
both alike; then the loaders alone are iterated the same way (with dynamic negatives that includes the
model's scoring of the candidates). The table gives medians (min-max) and the ratio of the medians, for wall
time and for the process's CPU time (on a shared machine the CPU time leaves out the waits for a core).

    python benchmarks/bench_loop.py --dataset citeulike-t --data-path dataset
    python benchmarks/bench_loop.py --likes 1e6 --data-dir /tmp/loop-data
    python benchmarks/bench_loop.py --dataset ml-100k --model UFSM --config train_batch_size=1024
"""

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchlib import (  # noqa: E402
    QUIET_CONFIG,
    REPO_ROOT,
    count_loss_rows,
    device_sync,
    ensure_generated,
    fmt,
    markdown,
    parse_config,
    spread,
)

LOOPS = ("device", "recbole")


def dimensions(likes):
    """bench_scale.py's rule: items = N/5, users = N/17, 16 words per item, vocabulary 3500 (items/25600)^0.5."""
    items, users = round(likes / 5), round(likes / 17)
    return users, items, max(32, round(3500 * (items / 25600) ** 0.5)), 16


def build(args, workdir):
    """The prepared run and its two training loaders."""
    warnings.filterwarnings("ignore")
    import torch

    from recbole_fbsm.data.preparation import train_loader_class
    from recbole_fbsm.quick_start import prepare
    from recbole_fbsm.training.trainer import get_trainer

    torch.set_num_threads(args.threads)
    config_dict = {
        **QUIET_CONFIG,
        "checkpoint_dir": str(Path(workdir) / "saved"),
        "seed": args.seed,
        "torch_threads": args.threads,
        "use_gpu": args.device != "cpu",
        "train_batches_on_device": True,
    }
    if args.data_path:
        config_dict["data_path"] = str(args.data_path)
    config_dict.update(args.config)
    config, model, (train_data, _, _) = prepare(args.model, args.dataset, config_dict=config_dict)
    if not type(train_data).__name__.startswith("Device"):
        raise SystemExit(
            f"{args.model} with these settings does not train on device batches ({type(train_data).__name__})"
        )
    trainer = get_trainer(config["MODEL_TYPE"], config["model"])(config, model)
    config["train_batches_on_device"] = False
    recbole_class = train_loader_class(config, True, train_data._sampler)
    config["train_batches_on_device"] = True
    recbole_data = recbole_class(config, train_data._dataset, train_data._sampler, shuffle=config["shuffle"])
    recbole_data.get_model(model)
    return config, model, trainer, {"device": train_data, "recbole": recbole_data}


def measure(args, workdir):
    import torch

    config, model, trainer, loaders = build(args, workdir)
    sync = device_sync(torch, config["device"])
    rows = count_loss_rows(model)
    epochs = {name: [] for name in LOOPS}
    epochs_cpu = {name: [] for name in LOOPS}
    alone = {name: [] for name in LOOPS}
    steps = {name: [] for name in LOOPS}
    triplets = {name: [] for name in LOOPS}
    epoch_idx = 0
    for repeat in range(args.warmup + args.epochs):
        order = LOOPS if repeat % 2 == 0 else LOOPS[::-1]
        for name in order:
            rows[0] = 0
            sync()
            start, start_cpu = time.perf_counter(), time.process_time()
            trainer._train_epoch(loaders[name], epoch_idx)
            sync()
            elapsed, elapsed_cpu = time.perf_counter() - start, time.process_time() - start_cpu
            epoch_idx += 1
            if repeat >= args.warmup:
                epochs[name].append(elapsed)
                epochs_cpu[name].append(elapsed_cpu)
                triplets[name].append(rows[0])
        for name in order:
            sync()
            start = time.perf_counter()
            count = sum(1 for _ in loaders[name])
            sync()
            if repeat >= args.warmup:
                alone[name].append(time.perf_counter() - start)
                steps[name].append(count)
    dataset = loaders["device"]._dataset
    return {
        "model": args.model,
        "dataset": args.label or args.dataset,
        "device": str(config["device"]),
        "threads": torch.get_num_threads(),
        "train_likes": len(dataset.inter_feat),
        "users": int(dataset.user_num - 1),
        "items": int(dataset.item_num - 1),
        "features": int(model.n_features),
        "train_batch_size": int(config["train_batch_size"]),
        "neg_sample_args": dict(config["train_neg_sample_args"]),
        "epoch_s": epochs,
        "epoch_cpu_s": epochs_cpu,
        "loader_s": alone,
        "steps": steps,
        "triplets": triplets,
        "commit": _commit(),
    }


def _commit():
    try:
        return subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=REPO_ROOT, capture_output=True, text=True, check=True
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "?"


def report_table(result):
    keys = ("epoch_s", "epoch_cpu_s", "loader_s")
    median = {key: {name: statistics.median(result[key][name]) for name in LOOPS} for key in keys}
    rows = []
    for name in LOOPS:
        step_count = statistics.median(result["steps"][name])
        rows.append(
            [
                name,
                fmt(step_count),
                fmt(statistics.median(result["triplets"][name])),
                spread(result["epoch_s"][name]),
                fmt(1000 * median["epoch_s"][name] / step_count),
                spread(result["epoch_cpu_s"][name]),
                spread(result["loader_s"][name]),
                fmt(1000 * median["loader_s"][name] / step_count),
            ]
        )
    header = [
        "loop",
        "steps/epoch",
        "triplets/epoch",
        "s/epoch median (min-max)",
        "ms/step",
        "CPU s/epoch median (min-max)",
        "loader alone s median (min-max)",
        "loader ms/step",
    ]
    ratio = {key: median[key]["device"] / median[key]["recbole"] for key in keys}
    negatives = result["neg_sample_args"]
    kind = (
        f"dynamic, best of {negatives.get('candidate_num')}"
        if negatives.get("dynamic")
        else negatives.get("distribution")
    )
    title = (
        f"{result['model']} on {result['dataset']} ({fmt(result['train_likes'])} training likes, "
        f"{fmt(result['users'])} users, {fmt(result['items'])} items, {fmt(result['features'])} features), "
        f"batch {result['train_batch_size']}, negatives {kind}, {result['device']}, {result['threads']} torch "
        f"thread(s), commit {result['commit']}, {len(result['epoch_s']['device'])} epochs per loop"
    )
    return (
        f"{title}\n\n{markdown(header, rows)}\n\nratio device / recbole of the medians: epoch "
        f"**{ratio['epoch_s']:.3g}** (CPU time {ratio['epoch_cpu_s']:.3g}), loader alone {ratio['loader_s']:.3g}"
    )


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="FBSM")
    parser.add_argument("--dataset", default="ml-100k")
    parser.add_argument("--data-path", type=Path)
    parser.add_argument("--likes", type=float, help="generated data of this many likes (bench_scale.py's rule)")
    parser.add_argument("--data-dir", type=Path, help="where generated data are written and reused")
    parser.add_argument("--data-seed", type=int, default=0)
    parser.add_argument("--label")
    parser.add_argument("--epochs", type=int, default=5, help="timed epochs per loop (median reported)")
    parser.add_argument("--warmup", type=int, default=1, help="untimed epochs per loop first")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--device", choices=("cpu", "auto"), default="cpu")
    parser.add_argument("--seed", type=int, default=2020)
    parser.add_argument("--config", nargs="*", metavar="KEY=VALUE", help="extra settings, e.g. train_batch_size=1024")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    args.config = parse_config(args.config)
    with tempfile.TemporaryDirectory(prefix="bench_loop_") as workdir:
        if args.likes:
            sys.path.insert(0, str(REPO_ROOT))
            likes = int(args.likes)
            folder = args.data_dir or Path(workdir) / "dataset"
            args.dataset = ensure_generated(folder, *dimensions(likes), likes, seed=args.data_seed)
            args.data_path, args.label = folder, args.label or f"generated {likes:,} likes"
        result = measure(args, workdir)
    print(report_table(result))
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
