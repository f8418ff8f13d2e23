"""How FBSM's training epoch time and peak memory grow with the data, from 10^5 to 10^7 interactions.

For each size N (interactions) the script generates data with ``scale_data.scale_dataset`` (benchmarks/scale_data.py)
(users, items and vocabulary scaled with N by the rule below), then trains FBSM in a fresh subprocess
through the plugin's pipeline and trainer, and records: seconds per epoch (median of up to ``--epochs``
epochs, fewer once ``--time-budget`` seconds of epochs are spent), the peak RSS of the setup (RecBole's
dataset, dataloaders, the model's F, F_U, R) and of training, nnz(F), nnz(F_U) and the interactions.
It prints a markdown table, the least-squares log-log slopes of epoch time vs training likes and of
peak-memory growth vs nnz(F) + nnz(F_U) + interactions, and the size at which the memory fit reaches
``--max-memory-gb`` (extrapolated, with the epoch time the time fit gives there).

Scaling rule (defaults anchored on citeulike-t: 17 likes per user, 5.3 per item, 16 distinct words per
item, 3,490 words for 25,584 items):

    items = N / --likes-per-item (5),  users = N / --likes-per-user (17),
    words per item = --words-per-item (16, fixed: documents do not get longer with more of them),
    vocabulary = --vocab-anchor (3500) * (items / --items-anchor (25600)) ** --heaps-beta (0.5)
                 (Heaps' law: the vocabulary grows as a power of the corpus), at least 2 x words per item.

``scale_dataset`` adds the long tails: Zipf-like item popularity (1/rank^0.8), log-normal user activity
(sigma 1), Zipf word frequencies (1/rank).

    python benchmarks/bench_scale.py --sizes 1e5 3e5                       # smoke test
    python benchmarks/bench_scale.py --sizes 1e5 3e5 1e6 3e6 1e7 --max-memory-gb 24 --json scale.json

With ``--max-memory-gb G`` a watchdog polls the RSS of each size's processes (data generation, then
training) every 0.2 s and stops them above G GiB. The sizes after the first one that fails (memory,
``--timeout`` or an error) are skipped; ``--keep-going`` runs them anyway.
"""

import argparse
import json
import math
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchlib import (  # noqa: E402
    QUIET_CONFIG,
    PhasePeaks,
    current_rss_mib,
    emit,
    ensure_generated,
    feature_sizes,
    fmt,
    loglog_slope,
    markdown,
    parse_config,
    parse_result,
    spread,
    thread_env,
)


# ------------------------------------------------------------------------------------ scaling rule
def dimensions(n, args):
    """(users, items, vocabulary, words per item) for ``n`` interactions (see the module docstring)."""
    items = max(1, round(n / args.likes_per_item))
    users = max(1, round(n / args.likes_per_user))
    words = args.words_per_item
    vocabulary = max(2 * words, round(args.vocab_anchor * (items / args.items_anchor) ** args.heaps_beta))
    if n > users * items // 2:
        raise SystemExit(f"size {n:,}: {users:,} users x {items:,} items cannot hold {n:,} distinct likes")
    return users, items, vocabulary, words


# ----------------------------------------------------------------------------------------- worker
def worker(args):
    """One size: setup, timed epochs (within the budget), peaks and sizes, one result line."""
    import warnings

    warnings.filterwarnings("ignore")
    import torch

    import recbole_fbsm.quick_start as quick_start
    from recbole_fbsm.config.registry import get_model
    from recbole_fbsm.quick_start import prepare
    from recbole_fbsm.training.trainer import get_trainer

    # seconds of each step of prepare(): the files' checks and RecBole's dataset ("load"), the split and
    # dataloaders, the model's matrices (F, F_U, R: its constructor)
    steps = {}
    for owner, name, step in (
        (quick_start, "check_dataset_files", "load_s"),
        (quick_start, "create_dataset", "load_s"),
        (quick_start, "data_preparation", "dataloaders_s"),
        (get_model(args.model), "__init__", "model_s"),
    ):

        def timed(*a, _function=getattr(owner, name), _step=step, **k):  # noqa: B008 (binds this step)
            begin = time.perf_counter()
            try:
                return _function(*a, **k)
            finally:
                steps[_step] = steps.get(_step, 0.0) + time.perf_counter() - begin

        setattr(owner, name, timed)

    if args.threads:
        torch.set_num_threads(args.threads)
    peaks = PhasePeaks()
    config_dict = dict(
        QUIET_CONFIG,
        checkpoint_dir=str(Path.cwd() / "saved"),
        seed=args.seed,
        use_gpu=False,
        data_path=args.data_path,
        **json.loads(args.config_json),
    )
    if args.threads:  # explicit: the same count in every phase (0: the plugin's default, torch_threads auto)
        config_dict.setdefault("torch_threads", args.threads)
    start = time.perf_counter()
    config, model, (train_data, _, test_data) = prepare(args.model, args.dataset, config_dict=config_dict)
    trainer = get_trainer(config["MODEL_TYPE"], config["model"])(config, model)
    setup_s = time.perf_counter() - start
    peaks.end("setup")
    emit({"phase": "setup", "setup_s": setup_s, "peak_rss_mib": peaks.peaks["setup"], **steps})

    epoch_s = []
    for epoch in range(args.warmup + args.epochs):
        begin = time.perf_counter()
        trainer._train_epoch(train_data, epoch, show_progress=False)
        seconds = time.perf_counter() - begin
        if epoch >= args.warmup:
            epoch_s.append(seconds)
            emit({"phase": "epoch", "s": seconds})
            if sum(epoch_s) >= args.time_budget:
                break
    peaks.end("train")
    eval_s = None
    if args.eval:
        begin = time.perf_counter()
        trainer.evaluate(test_data, load_best_model=False, show_progress=False)
        eval_s = time.perf_counter() - begin
        peaks.end("eval")
    train = train_data._dataset
    n_features, nnz_f, nnz_fu = feature_sizes(model, train, config)  # after the peaks: may allocate
    emit(
        {
            "phase": "done",
            "model": args.model,
            "threads": torch.get_num_threads(),
            "setup_s": setup_s,
            **steps,
            "users": int(train.user_num - 1),
            "items": int(train.item_num - 1),
            "features": n_features,
            "nnz_F": nnz_f,
            "nnz_F_U": nnz_fu,
            "train_likes": int(len(train.inter_feat)),
            "batch": int(config["train_batch_size"]),
            "epoch_s": epoch_s,
            "eval_s": eval_s,
            "eval_users": len(test_data.uid_list) if args.eval else None,
            **peaks.report(),
        }
    )


def generate(args):
    """Internal: write one size's data (own process, so its memory is not the worker's)."""
    name = ensure_generated(
        args.data_path,
        args.users,
        args.items,
        args.features,
        args.words_per_item,
        args.interactions,
        args.seed,
        quiet=True,
    )
    emit({"dataset": name})


# ----------------------------------------------------------------------------------------- driver
def watch(command, env, workdir, limit_mib, timeout):
    """Run ``command``; kill it (only it) when its RSS passes ``limit_mib`` or it runs past ``timeout``.
    Returns (result lines, max RSS seen by the watchdog, status, stderr tail)."""
    log = Path(workdir) / "worker.log"
    with open(log, "w") as err, open(Path(workdir) / "worker.out", "w+") as out:
        process = subprocess.Popen(command, cwd=workdir, env=env, stdout=out, stderr=err, text=True)
        start, seen, status = time.monotonic(), 0.0, "ok"
        while process.poll() is None:
            rss = current_rss_mib(process.pid)
            seen = max(seen, rss or 0.0)
            if limit_mib and rss and rss > limit_mib:
                status = f"over {limit_mib / 1024:g} GiB (RSS {rss / 1024:.1f} GiB), stopped"
                process.kill()
            elif time.monotonic() - start > timeout:
                status = f"timed out after {timeout} s"
                process.kill()
            time.sleep(0.2)
        process.wait()
        out.seek(0)
        results = [r for r in map(parse_result, out) if r is not None]
    if status == "ok" and process.returncode != 0:
        status = f"exit {process.returncode}" + (" (killed: out of memory?)" if process.returncode == -9 else "")
    tail = " / ".join(line.strip() for line in log.read_text().strip().splitlines()[-3:])
    return results, seen, status, tail


def run_size(n, args, data_path, workdir):
    users, items, vocabulary, words = dimensions(n, args)
    row = {"interactions": n, "gen_users": users, "gen_items": items, "vocabulary": vocabulary, "words_per_item": words}
    script = str(Path(__file__).resolve())
    limit = args.max_memory_gb * 1024 if args.max_memory_gb else None
    begin = time.perf_counter()
    results, _, status, tail = watch(
        [
            sys.executable,
            script,
            "--generate",
            "--data-path",
            str(data_path),
            "--users",
            str(users),
            "--items",
            str(items),
            "--features",
            str(vocabulary),
            "--words-per-item",
            str(words),
            "--interactions",
            str(n),
            "--seed",
            str(args.seed),
        ],
        thread_env(args.threads),
        workdir,
        limit,
        args.timeout,
    )
    row["generate_s"] = time.perf_counter() - begin
    if status != "ok" or not results:
        row["status"] = f"generation failed: {status} {tail}"
        return row
    dataset = results[-1]["dataset"]
    command = [
        sys.executable,
        script,
        "--worker",
        "--dataset",
        dataset,
        "--data-path",
        str(data_path),
        "--model",
        args.model,
        "--epochs",
        str(args.epochs),
        "--warmup",
        str(args.warmup),
        "--time-budget",
        str(args.time_budget),
        "--threads",
        str(args.threads),
        "--seed",
        str(args.seed),
        "--config-json",
        json.dumps(args.config),
    ] + (["--eval"] if args.eval else [])
    begin = time.perf_counter()
    results, seen, status, tail = watch(command, thread_env(args.threads), workdir, limit, args.timeout)
    row["wall_s"] = time.perf_counter() - begin
    row["watchdog_max_rss_mib"] = seen
    for result in results:
        if result.get("phase") == "done":
            row.update(result)
    row["epoch_s"] = row.get("epoch_s") or [r["s"] for r in results if r.get("phase") == "epoch"]
    row["status"] = status if status != "ok" or "train_likes" in row else f"no result: {tail}"
    if status != "ok" and tail:
        row["status"] += f" ({tail})"
    return row


def size_arg(text):
    value = float(text)
    if value < 1 or value != int(value):
        raise argparse.ArgumentTypeError(f"not a positive whole number: {text}")
    return int(value)


def summary(rows, args):
    ok = [r for r in rows if r.get("status") == "ok" and r.get("epoch_s")]
    header = [
        "interactions",
        "users",
        "items",
        "vocabulary",
        "train likes",
        "nnz(F)",
        "nnz(F_U)",
        "s/epoch median (min-max)",
        "epochs",
        "train likes/s",
        "peak RSS MiB",
        "peak MiB setup / train",
        "RSS growth MiB",
        "setup s (load / dataloaders / model)",
        "status",
    ]
    table_rows = []
    for r in rows:
        median = statistics.median(r["epoch_s"]) if r.get("epoch_s") else None
        phases = r.get("phase_peak_rss_mib") or {}
        growth = r["peak_rss_mib"] - r["baseline_rss_mib"] if r.get("peak_rss_mib") else None
        table_rows.append(
            [
                fmt(r["interactions"]),
                fmt(r.get("users", r.get("gen_users"))),
                fmt(r.get("items", r.get("gen_items"))),
                fmt(r.get("features", r["vocabulary"])),
                fmt(r.get("train_likes")),
                fmt(r.get("nnz_F")),
                fmt(r.get("nnz_F_U")),
                spread(r.get("epoch_s")),
                len(r.get("epoch_s") or []),
                fmt(r["train_likes"] / median) if median and r.get("train_likes") else "-",
                fmt(r.get("peak_rss_mib") or r.get("watchdog_max_rss_mib"), 4),
                " / ".join(fmt(phases.get(p), 4) for p in ("setup", "train")),
                fmt(growth, 4),
                fmt(r.get("setup_s"))
                + (
                    " (" + " / ".join(fmt(r.get(k)) for k in ("load_s", "dataloaders_s", "model_s")) + ")"
                    if r.get("load_s") is not None
                    else ""
                ),
                r.get("status", "?"),
            ]
        )
    lines = [markdown(header, table_rows), ""]
    times = [statistics.median(r["epoch_s"]) for r in ok]
    likes = [r["train_likes"] for r in ok]
    slope_t, intercept_t, n_t = loglog_slope(likes, times)
    entries = [r["nnz_F"] + r["nnz_F_U"] + r["interactions"] for r in ok if r.get("nnz_F_U") is not None]
    growths = [r["peak_rss_mib"] - r["baseline_rss_mib"] for r in ok if r.get("nnz_F_U") is not None]
    slope_m, _, n_m = loglog_slope(entries, growths)
    if slope_t is None:
        lines.append("log-log slopes: need at least 2 sizes that trained")
        return "\n".join(lines)
    lines.append(f"- epoch time ~ train likes^{slope_t:.2f} (least squares in log space, {n_t} sizes)")
    if slope_m is not None:
        per_entry = statistics.median(g * 2**20 / e for g, e in zip(growths, entries))
        lines.append(
            f"- peak RSS growth (peak - RSS after imports) ~ (nnz(F) + nnz(F_U) + interactions)^{slope_m:.2f} "
            f"({n_m} sizes); median {per_entry:.0f} bytes per such entry"
        )
    if args.max_memory_gb:
        limit = args.max_memory_gb * 1024
        within = [r for r in ok if r["peak_rss_mib"] <= limit]
        if within:
            best = max(within, key=lambda r: r["interactions"])
            lines.append(
                f"- largest measured size within {args.max_memory_gb:g} GiB: {best['interactions']:,} "
                f"interactions, peak {best['peak_rss_mib'] / 1024:.1f} GiB, "
                f"{statistics.median(best['epoch_s']):.3g} s/epoch"
            )
        slope_n, intercept_n, _ = loglog_slope(
            [r["interactions"] for r in ok], [r["peak_rss_mib"] - r["baseline_rss_mib"] for r in ok]
        )
        baseline = statistics.median(r["baseline_rss_mib"] for r in ok)
        if slope_n and slope_n > 0 and limit > baseline:
            n_star = math.exp((math.log(limit - baseline) - intercept_n) / slope_n)
            train_fraction = statistics.median(r["train_likes"] / r["interactions"] for r in ok)
            epoch_star = math.exp(intercept_t) * (n_star * train_fraction) ** slope_t
            lines.append(
                f"- extrapolated from the fits (peak growth ~ interactions^{slope_n:.2f}): "
                f"{args.max_memory_gb:g} GiB is reached near {n_star:,.0f} interactions, where an epoch "
                f"would take about {epoch_star:,.0f} s (an extrapolation, not a measurement)"
            )
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sizes = parser.add_argument_group("sizes and scaling rule")
    sizes.add_argument(
        "--sizes",
        type=size_arg,
        nargs="+",
        default=[100_000, 300_000],
        help="interactions per size, e.g. 1e5 3e5 1e6 3e6 1e7 (default: %(default)s)",
    )
    sizes.add_argument("--likes-per-item", type=float, default=5.0)
    sizes.add_argument("--likes-per-user", type=float, default=17.0)
    sizes.add_argument("--words-per-item", type=int, default=16)
    sizes.add_argument("--vocab-anchor", type=float, default=3500, help="vocabulary at --items-anchor items")
    sizes.add_argument("--items-anchor", type=float, default=25600)
    sizes.add_argument("--heaps-beta", type=float, default=0.5, help="vocabulary ~ items^beta")
    sizes.add_argument("--data-dir", help="keep the generated data here and reuse them (default: temporary)")
    runs = parser.add_argument_group("measurement")
    runs.add_argument("--model", default="FBSM", help="plugin model (default: %(default)s)")
    runs.add_argument("--config", nargs="*", metavar="KEY=VALUE", help="extra RecBole settings, e.g. rank=10")
    runs.add_argument("--epochs", type=int, default=3, help="at most this many timed epochs per size")
    runs.add_argument("--warmup", type=int, default=0, help="untimed epochs before the timed ones")
    runs.add_argument(
        "--time-budget",
        type=float,
        default=1200,
        help="stop timing epochs once they add up to this many seconds (at least one epoch)",
    )
    runs.add_argument(
        "--threads", type=int, default=1, help="torch threads in every phase (0: the plugin's default, auto)"
    )
    runs.add_argument(
        "--eval", action="store_true", help="also time one full-sort test evaluation (grows as test users x test items)"
    )
    runs.add_argument("--max-memory-gb", type=float, help="stop a size whose RSS passes this many GiB")
    runs.add_argument("--keep-going", action="store_true", help="run the larger sizes after one exceeded")
    runs.add_argument("--timeout", type=int, default=4 * 3600, help="seconds per size (generation or training)")
    runs.add_argument("--seed", type=int, default=2020)
    runs.add_argument("--json", help="also write every measurement to this file")
    internal = parser.add_argument_group("internal")
    for flag in ("--worker", "--generate"):
        internal.add_argument(flag, action="store_true", help=argparse.SUPPRESS)
    for flag in ("--dataset", "--data-path", "--users", "--items", "--features", "--interactions"):
        internal.add_argument(flag, help=argparse.SUPPRESS)
    internal.add_argument("--config-json", default="{}", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.generate:
        for name in ("users", "items", "features", "interactions"):
            setattr(args, name, int(getattr(args, name)))
        return generate(args)
    if args.worker:
        return worker(args)
    if args.epochs < 1 or args.warmup < 0:
        parser.error("--epochs must be >= 1, --warmup >= 0")
    args.config = parse_config(args.config)
    for n in args.sizes:
        dimensions(n, args)

    rows = []
    with tempfile.TemporaryDirectory(prefix="bench_scale_") as workdir:
        data_path = Path(args.data_dir).resolve() if args.data_dir else Path(workdir) / "dataset"
        data_path.mkdir(parents=True, exist_ok=True)
        for n in sorted(args.sizes):
            if rows and rows[-1]["status"] != "ok" and not args.keep_going:
                users, items, vocabulary, _ = dimensions(n, args)
                rows.append(
                    {
                        "interactions": n,
                        "gen_users": users,
                        "gen_items": items,
                        "vocabulary": vocabulary,
                        "status": "skipped (a smaller size failed; --keep-going runs it)",
                    }
                )
                continue
            row = run_size(n, args, data_path, workdir)
            rows.append(row)
            median = statistics.median(row["epoch_s"]) if row.get("epoch_s") else float("nan")
            print(
                f"{n:,} interactions: {row['status']}, {median:.3g} s/epoch, peak "
                f"{(row.get('peak_rss_mib') or row.get('watchdog_max_rss_mib') or 0):.0f} MiB, setup "
                f"{row.get('setup_s', float('nan')):.1f} s, generated in {row['generate_s']:.0f} s, "
                f"{row.get('wall_s', 0):.0f} s in all",
                file=sys.stderr,
                flush=True,
            )
            if not args.data_dir:  # the temporary data of a size are not needed any more
                import shutil

                shutil.rmtree(data_path, ignore_errors=True)
                data_path.mkdir(parents=True, exist_ok=True)
    config_text = " ".join(f"{k}={v}" for k, v in args.config.items()) or "plugin defaults"
    print(
        f"\n{args.model} ({config_text}), {args.threads} torch threads, up to {args.epochs} timed epochs "
        f"(budget {args.time_budget:g} s) after {args.warmup} warm-up; scaling: items = N/{args.likes_per_item:g}, "
        f"users = N/{args.likes_per_user:g}, {args.words_per_item} words per item, vocabulary = "
        f"{args.vocab_anchor:g} * (items/{args.items_anchor:g})^{args.heaps_beta:g}\n"
    )
    print(summary(rows, args))
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return 0 if all(r.get("status") == "ok" for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
