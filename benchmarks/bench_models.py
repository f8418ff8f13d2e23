"""Speed and memory of FBSM, UFSM, CoSim (and RecBole's BPR for reference), per dataset size.

For each model the script prints, as a markdown table: training seconds per epoch and BPR triplets per
second (median over ``--epochs`` timed epochs of the real trainer's ``_train_epoch``), the full-sort
evaluation time over all users of the test (or validation) split (median over ``--repeats`` calls of
``trainer.evaluate``), and the peak resident memory of the process. Each (model, dataset) runs in a
fresh subprocess, so one model's allocations never count in another's peak; logs and checkpoints go
to a temporary working directory, never into the repository.

    python benchmarks/bench_models.py --dataset ml-100k
    python benchmarks/bench_models.py --generated --users 5000 --items 20000 --features 5000 \\
        --words-per-item 30 --interactions 200000
    python benchmarks/bench_models.py --dataset ml-100k --models FBSM BPR --epochs 5 --repeats 5 --json out.json

Generated data come from ``scale_data.scale_dataset`` (benchmarks/scale_data.py) (long-tailed item popularity, user
activity and word frequencies; every item liked at least once), written once into ``--data-dir`` (a
temporary folder by default) and shared by the models.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchlib import (  # noqa: E402
    REPO_ROOT,
    count_loss_rows,
    current_rss_mib,
    device_sync,
    emit,
    fmt,
    parse_config,
    parse_result,
    peak_rss_mib,
    spread,
)

DEFAULT_MODELS = ["FBSM", "UFSM", "CoSim", "BPR"]


# ----------------------------------------------------------------------------------------- worker
def worker(args):
    """One (model, dataset): prepare, time epochs and evaluations, print one JSON line."""
    import warnings

    warnings.filterwarnings("ignore")
    import torch

    from recbole_fbsm.quick_start import prepare
    from recbole_fbsm.training.trainer import get_trainer

    if args.threads:
        torch.set_num_threads(args.threads)
    baseline_rss = current_rss_mib()  # torch, recbole and the plugin imported: what every model pays
    config_dict = {
        "state": "ERROR",
        "show_progress": False,
        "checkpoint_dir": str(Path.cwd() / "saved"),
        "save_dataset": False,
        "save_dataloaders": False,
        "seed": args.seed,
    }
    if args.data_path:
        config_dict["data_path"] = args.data_path
    if args.device == "cpu":
        config_dict["use_gpu"] = False
    if args.threads:  # explicit: the same count in every phase (0: the plugin's default, torch_threads auto)
        config_dict["torch_threads"] = args.threads
    config_dict.update(json.loads(args.config_json))

    start = time.perf_counter()
    config, model, (train_data, valid_data, test_data) = prepare(args.model, args.dataset, config_dict=config_dict)
    trainer = get_trainer(config["MODEL_TYPE"], config["model"])(config, model)
    prepare_s = time.perf_counter() - start
    peak_after_prepare = peak_rss_mib()
    sync = device_sync(torch, config["device"])
    triplets = count_loss_rows(model)  # the triplets the trainer feeds the model (user, positive, negative)

    epoch_s, epoch_triplets = [], []
    for epoch in range(args.warmup + args.epochs):
        triplets[0] = 0
        sync()
        start = time.perf_counter()
        trainer._train_epoch(train_data, epoch, show_progress=False)
        sync()
        if epoch >= args.warmup:
            epoch_s.append(time.perf_counter() - start)
            epoch_triplets.append(triplets[0])

    peak_after_train = peak_rss_mib()

    eval_data = test_data if args.split == "test" else valid_data
    eval_s, result = [], None
    for _ in range(args.repeats):
        sync()
        start = time.perf_counter()
        result = trainer.evaluate(eval_data, load_best_model=False, show_progress=False)
        sync()
        eval_s.append(time.perf_counter() - start)

    peak_rss = peak_rss_mib()  # before anything below allocates
    peak_gpu = torch.cuda.max_memory_allocated() / 2**20 if torch.device(config["device"]).type == "cuda" else None

    profile_text = None
    if args.profile:
        import cProfile
        import io
        import pstats

        profiler = cProfile.Profile()
        profiler.enable()
        trainer._train_epoch(train_data, args.warmup + args.epochs, show_progress=False)
        sync()
        profiler.disable()
        stream = io.StringIO()
        pstats.Stats(profiler, stream=stream).sort_stats("tottime").print_stats(args.profile)
        profile_text = stream.getvalue()

    train_dataset = train_data._dataset
    features = getattr(model, "F", None)
    if features is not None:
        n_features, nnz = features.shape[1], int(features.values.numel())
    else:  # BPR and other RecBole models: the plugin's feature matrix, for the dataset columns only
        from recbole_fbsm.data.features import features_from_config
        from recbole_fbsm.errors import ColdStartError

        try:
            matrix = features_from_config(train_dataset, train_dataset.split_items, config, normalize=True).matrix
            n_features, nnz = matrix.shape[1], int(matrix.nnz)
        except (ColdStartError, TypeError, ValueError):  # no item features, or no item split
            n_features, nnz = None, None

    eval_items = getattr(eval_data._dataset, "split_items", None)
    median_epoch = statistics.median(epoch_s)
    report = {
        "model": args.model,
        "dataset": args.label or args.dataset,
        "device": str(config["device"]),
        "threads": torch.get_num_threads(),
        "users": int(train_dataset.user_num - 1),
        "items": int(train_dataset.item_num - 1),
        "features": n_features,
        "nnz_F": nnz,
        "train_likes": int(len(train_dataset.inter_feat)),
        "train_batch_size": int(config["train_batch_size"]),
        "eval_split": args.split,
        "eval_users": len(getattr(eval_data, "uid_list", [])),
        "eval_candidates": len(eval_items) if eval_items is not None else None,
        "prepare_s": prepare_s,
        "epoch_s": epoch_s,
        "epoch_triplets": epoch_triplets,
        "epoch_s_median": median_epoch,
        "triplets_per_s": statistics.median(epoch_triplets) / median_epoch if median_epoch > 0 else None,
        "eval_s": eval_s,
        "eval_s_median": statistics.median(eval_s),
        "metric": {key: float(value) for key, value in (result or {}).items()},
        "baseline_rss_mib": baseline_rss,
        "peak_rss_mib": peak_rss,
        "peak_rss_after_prepare_mib": peak_after_prepare,
        "peak_rss_after_train_mib": peak_after_train,
        "rss_growth_mib": peak_rss - baseline_rss,
        "peak_gpu_mib": peak_gpu,
        "profile": profile_text,
    }
    emit(report)


# ----------------------------------------------------------------------------------------- driver
def run_one(model, dataset, label, data_path, args, workdir):
    command = [
        sys.executable,
        str(Path(__file__).resolve()),
        "--worker",
        "--model",
        model,
        "--dataset",
        dataset,
        "--label",
        label,
        "--epochs",
        str(args.epochs),
        "--warmup",
        str(args.warmup),
        "--repeats",
        str(args.repeats),
        "--split",
        args.split,
        "--seed",
        str(args.seed),
        "--device",
        args.device,
        "--config-json",
        json.dumps(args.config),
        "--profile",
        str(args.profile),
        "--threads",
        str(args.threads),
    ]
    if data_path:
        command += ["--data-path", str(data_path)]
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
    start = time.perf_counter()
    try:
        completed = subprocess.run(command, cwd=workdir, env=env, capture_output=True, text=True, timeout=args.timeout)
    except subprocess.TimeoutExpired:
        return {"model": model, "dataset": label, "error": f"timed out after {args.timeout} s"}
    for line in completed.stdout.splitlines():
        report = parse_result(line)
        if report is not None:
            report["wall_s"] = time.perf_counter() - start
            return report
    tail = (completed.stderr or completed.stdout or "no output").strip().splitlines()[-1:]
    return {"model": model, "dataset": label, "error": f"exit {completed.returncode}: " + " ".join(tail)}


COLUMNS = [
    ("model", "model", str),
    ("dataset", "dataset", str),
    ("users", "users", fmt),
    ("items", "items", fmt),
    ("features", "features", fmt),
    ("nnz(F)", "nnz_F", fmt),
    ("train likes", "train_likes", fmt),
    ("batch", "train_batch_size", fmt),
    ("s/epoch median (min-max)", "epoch_s", spread),
    ("triplets/s", "triplets_per_s", fmt),
    ("eval s, all {split} users, median (min-max)", "eval_s", spread),
    ("{split} users", "eval_users", fmt),
    ("peak RSS MiB", "peak_rss_mib", lambda v: fmt(v, 4)),
    ("RSS growth MiB", "rss_growth_mib", lambda v: fmt(v, 4)),
    ("prepare s", "prepare_s", fmt),
]


def markdown_table(reports, split):
    columns = list(COLUMNS)
    if any(r.get("peak_gpu_mib") is not None for r in reports):
        columns.append(("peak GPU MiB", "peak_gpu_mib", lambda v: fmt(v, 4)))
    header = [title.format(split=split) for title, _, _ in columns]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for report in reports:
        if "error" in report:
            lines.append(f"| {report['model']} | {report['dataset']} | error: {report['error']} |")
            continue
        lines.append("| " + " | ".join(render(report.get(key)) for _, key, render in columns) + " |")
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    source = parser.add_argument_group("dataset")
    source.add_argument("--dataset", default="ml-100k", help="RecBole dataset name (default: %(default)s)")
    source.add_argument("--data-path", help="RecBole data_path (folder holding DATASET/); ml-100k needs none")
    source.add_argument("--generated", action="store_true", help="benchmark on data from scale_data.scale_dataset")
    source.add_argument("--users", type=int, default=5000)
    source.add_argument("--items", type=int, default=20000)
    source.add_argument("--features", type=int, default=5000, help="vocabulary size")
    source.add_argument("--words-per-item", type=int, default=30, help="distinct words per item: nnz per row of F")
    source.add_argument("--interactions", type=int, default=200000)
    source.add_argument("--data-dir", help="where generated data are written (default: a temporary folder)")
    runs = parser.add_argument_group("measurement")
    runs.add_argument("--models", nargs="+", default=DEFAULT_MODELS)
    runs.add_argument("--epochs", type=int, default=3, help="timed training epochs (median reported)")
    runs.add_argument(
        "--warmup",
        type=int,
        default=0,
        help="untimed epochs before the timed ones (default: %(default)s: the median of 3 "
        "already discards one slow epoch)",
    )
    runs.add_argument("--repeats", type=int, default=3, help="timed evaluations (median reported)")
    runs.add_argument("--split", choices=("test", "valid"), default="test", help="split evaluated")
    runs.add_argument("--seed", type=int, default=2020)
    runs.add_argument(
        "--device",
        choices=("cpu", "auto"),
        default="cpu",
        help="cpu, or auto (RecBole's use_gpu default: CUDA when available)",
    )
    runs.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch intra-op threads in every phase (default %(default)s; 0: the plugin's default, "
        "torch_threads auto). On a "
        "shared machine 2 threads spin-wait for each other and epochs get 10-50x slower",
    )
    runs.add_argument(
        "--config",
        nargs="*",
        metavar="KEY=VALUE",
        help="extra RecBole settings for every model, e.g. train_batch_size=4096",
    )
    runs.add_argument("--timeout", type=int, default=1800, help="seconds per (model, dataset) subprocess")
    runs.add_argument(
        "--profile",
        type=int,
        default=0,
        metavar="N",
        help="also run one more epoch under cProfile and print its N costliest functions",
    )
    runs.add_argument("--json", help="also write every measurement (all epochs and repeats) to this file")
    internal = parser.add_argument_group("internal (one subprocess)")
    internal.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    internal.add_argument("--model", help=argparse.SUPPRESS)
    internal.add_argument("--label", help=argparse.SUPPRESS)
    internal.add_argument("--config-json", default="{}", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if min(args.epochs, args.repeats) < 1 or args.warmup < 0:
        parser.error("--epochs and --repeats must be >= 1, --warmup >= 0")
    if args.worker:
        return worker(args)
    args.config = parse_config(args.config)

    with tempfile.TemporaryDirectory(prefix="bench_models_") as workdir:
        dataset, data_path, label = args.dataset, args.data_path, args.dataset
        if args.generated:
            sys.path.insert(0, str(REPO_ROOT))
            from scale_data import scale_dataset

            dataset = f"gen_u{args.users}_i{args.items}_f{args.features}_w{args.words_per_item}_n{args.interactions}"
            label = f"generated {args.interactions:,} likes"
            data_path = Path(args.data_dir).resolve() if args.data_dir else Path(workdir) / "dataset"
            if not (data_path / dataset / f"{dataset}.inter").is_file():
                start = time.perf_counter()
                scale_dataset(
                    data_path,
                    dataset,
                    args.users,
                    args.items,
                    args.features,
                    args.words_per_item,
                    args.interactions,
                    seed=args.seed,
                )
                print(f"generated {dataset} in {time.perf_counter() - start:.1f} s", file=sys.stderr)
        elif data_path:
            data_path = Path(data_path).resolve()
        reports = []
        for model in args.models:
            report = run_one(model, dataset, label, data_path, args, workdir)
            status = report.get("error") or (
                f"{report['epoch_s_median']:.3g} s/epoch, eval {report['eval_s_median']:.3g} s, "
                f"peak {report['peak_rss_mib']:.0f} MiB, {report['wall_s']:.0f} s in all"
            )
            print(f"{model} on {label}: {status}", file=sys.stderr, flush=True)
            if report.get("profile"):
                print(f"--- cProfile of one {model} epoch on {label} ---\n{report['profile']}", file=sys.stderr)
            reports.append(report)
    first = next((r for r in reports if "error" not in r), {})
    print(
        f"\n{label}: {first.get('device', '?')}, {first.get('threads', '?')} torch threads, "
        f"{args.epochs} timed epochs after {args.warmup} warm-up, {args.repeats} evaluations\n"
    )
    print(markdown_table(reports, args.split))
    if args.json:
        Path(args.json).write_text(json.dumps(reports, indent=1))
    return 1 if any("error" in r for r in reports) else 0


if __name__ == "__main__":
    sys.exit(main())
