"""FBSM, UFSM (and CoSim) next to LightFM: training epoch time, full-sort evaluation time, peak memory,
on the same item split, in one command.

Every model runs in its own worker subprocess (so each has its own peak RSS), started one after the
other and kept alive; the driver then sends the workers their epochs and evaluations in turn
(A B C A B C ...), so that machine noise hits every model alike instead of one model's whole run.

LightFM is set up as a content-only cold-start model: item features = the plugin's item x word matrix
of the training items (tf-idf, L2-normalised rows: the plugin's F; ``--lightfm-features binary`` for
0/1 rows scaled to sum 1, as LightFM's own ``Dataset`` does), no item identity features, user identity
features (LightFM's default), WARP loss, trained on the likes of the training split's items only (no
valid/test item is seen in training, not even as a negative). It scores the test items from their
features alone. The split, the features and the evaluated users come from the plugin's own pipeline
(``recbole_fbsm.quick_start.prepare``), exported once to a file the LightFM worker reads without
importing torch or RecBole.

    python benchmarks/bench_lightfm.py                                  # citeulike-t, threads 2
    python benchmarks/bench_lightfm.py --threads 2 1 --epochs 5 --repeats 3 --json out.json
    python benchmarks/bench_lightfm.py --generated --users 5000 --items 20000 --features 5000 \\
        --words-per-item 30 --interactions 200000
    python benchmarks/bench_lightfm.py --hybrid --dataset ml-100k --threads 1   # LightFM's hybrid, all/cold/warm

LightFM is optional (``pip install lightfm-next`` or ``pip install -e '.[bench]'``); without it the
LightFM rows are skipped with a message.
"""

import argparse
import importlib.util
import json
import os
import platform
import queue
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchlib import (  # noqa: E402
    QUIET_CONFIG,
    REPO_ROOT,
    PhasePeaks,
    emit,
    ensure_generated,
    feature_sizes,
    fingerprint,
    fmt,
    markdown,
    parse_config,
    parse_result,
    spread,
    thread_env,
)

DEFAULT_SPECS = [
    "FBSM:rank=10",
    "FBSM:rank=64",
    "UFSM",
    "CoSim",
    "LightFM:no_components=16",
    "LightFM:no_components=64",
]
DEFAULT_RATIOS = ["FBSM h=64/LightFM d=64", "FBSM h=10/LightFM d=16"]
LIGHTFM_MISSING = (
    "LightFM is not installed: its rows are skipped. Install it with `pip install lightfm-next` "
    "(or `pip install -e '.[bench]'`)."
)
TOPK = 10


# ------------------------------------------------------------------------------------------- specs
def parse_spec(text):
    """``NAME[:key=value[,key=value...]]`` -> (name, settings, label). ``LightFM:16`` means 16 components."""
    name, _, rest = text.partition(":")
    settings = {}
    for item in filter(None, rest.split(",")):
        if "=" not in item and name == "LightFM":
            item = f"no_components={item}"
        settings.update(parse_config([item]))
    label = name
    if name == "FBSM":
        label += f" h={settings.get('rank', 'default')}"
    elif name == "UFSM" and "n_functions" in settings:
        label += f" l={settings['n_functions']}"
    elif name == "LightFM":
        label += f" d={settings.get('no_components', 10)}"
    extra = {k: v for k, v in settings.items() if k not in ("rank", "n_functions", "no_components")}
    if extra:
        label += " " + ",".join(f"{k}={v}" for k, v in extra.items())
    return name, settings, label


def plugin_config(args, settings=None):
    config = dict(QUIET_CONFIG, checkpoint_dir=str(Path.cwd() / "saved"), seed=args.seed, use_gpu=False)
    if args.data_path:
        config["data_path"] = args.data_path
    if isinstance(args.threads, int) and args.threads:  # explicit: the same count in every phase
        config["torch_threads"] = args.threads
    config.update(json.loads(args.config_json))
    config.update(settings or {})
    return config


# --------------------------------------------------------------------------------- split export
def export_split(args):
    """Run the plugin's pipeline once and save what LightFM needs (split, likes, the plugin's F)."""
    import warnings

    warnings.filterwarnings("ignore")
    import numpy as np

    from recbole_fbsm.data.features import features_from_config
    from recbole_fbsm.quick_start import prepare

    config, _, (train_data, _, test_data) = prepare("CoSim", args.dataset, config_dict=plugin_config(args))
    train, test = train_data._dataset, test_data._dataset
    features = features_from_config(
        train,
        train.split_items,
        config,
        normalize=True if config["feature_normalize"] is None else bool(config["feature_normalize"]),
    ).matrix.tocsr()
    arrays = {
        "n_users": np.int64(train.user_num),
        "n_items": np.int64(train.item_num),
        "train_items": np.asarray(train.split_items, dtype=np.int64),
        "test_items": np.asarray(test.split_items, dtype=np.int64),
        "train_users_of_likes": train.inter_feat[train.uid_field].numpy().astype(np.int64),
        "train_items_of_likes": train.inter_feat[train.iid_field].numpy().astype(np.int64),
        "test_users_of_likes": test.inter_feat[test.uid_field].numpy().astype(np.int64),
        "test_items_of_likes": test.inter_feat[test.iid_field].numpy().astype(np.int64),
        "eval_users": np.asarray(test_data.uid_list, dtype=np.int64),
        "F_data": features.data.astype(np.float32),
        "F_indices": features.indices.astype(np.int32),
        "F_indptr": features.indptr.astype(np.int64),
        "F_shape": np.asarray(features.shape, dtype=np.int64),
    }
    np.savez(args.export, **arrays)
    emit(
        {
            "split": fingerprint(train.split_items, test.split_items, [len(train.inter_feat)]),
            "features": int(features.shape[1]),
            "nnz_F": int(features.nnz),
        }
    )


# ------------------------------------------------------------------------------ ranking (numpy)
def top_k(scores, k=TOPK):
    """Column indices of the k largest scores of every row, best first."""
    import numpy as np

    k = min(k, scores.shape[1])
    part = np.argpartition(scores, scores.shape[1] - k, axis=1)[:, -k:]  # no negated copy of the scores
    order = np.argsort(-np.take_along_axis(scores, part, axis=1), axis=1, kind="stable")
    return np.take_along_axis(part, order, axis=1)


def ranking_metrics(top, users, n_candidates, truth, positives):
    """RecBole's Recall@k and NDCG@k: ``top`` (users x k candidate positions), ``truth`` the sorted keys
    user * n_candidates + position of the test likes, ``positives[user]`` the user's number of test likes."""
    import numpy as np

    keys = users[:, None] * n_candidates + top
    found = np.searchsorted(truth, keys).clip(max=len(truth) - 1)
    hits = truth[found] == keys
    n_pos = positives[users].astype(np.float64)
    discounts = 1.0 / np.log2(np.arange(2, top.shape[1] + 2))
    ideal = np.cumsum(discounts)[np.minimum(n_pos, top.shape[1]).astype(np.int64) - 1]
    k = top.shape[1]
    return {
        f"recall@{k}": float(np.mean(hits.sum(1) / n_pos)),
        f"ndcg@{k}": float(np.mean((hits * discounts).sum(1) / ideal)),
    }


# ------------------------------------------------------------------------------- worker protocol
def serve(handlers):
    """Read one command per line on stdin, answer with one result line; ``finish`` ends the loop."""
    for line in sys.stdin:
        command = json.loads(line)
        name = command.pop("cmd")
        try:
            emit(handlers[name](**command))
        except Exception as error:  # the driver records it and goes on with the other models
            import traceback

            traceback.print_exc()
            emit({"error": f"{name}: {type(error).__name__}: {error}"})
            return
        if name == "finish":
            return


def plugin_worker(args, name, settings):
    """One FBSM / UFSM / CoSim (or any plugin / RecBole model) under the plugin's trainer."""
    import warnings

    warnings.filterwarnings("ignore")
    import torch

    from recbole_fbsm.quick_start import prepare
    from recbole_fbsm.training.trainer import get_trainer

    if args.threads:
        torch.set_num_threads(args.threads)
    peaks = PhasePeaks()  # baseline: torch, RecBole and the plugin imported
    start = time.perf_counter()
    config, model, (train_data, _, test_data) = prepare(name, args.dataset, config_dict=plugin_config(args, settings))
    trainer = get_trainer(config["MODEL_TYPE"], config["model"])(config, model)
    prepare_s = time.perf_counter() - start
    train, test = train_data._dataset, test_data._dataset
    state = {"epoch": 0, "rows": 0, "epoch_s": [], "rows_per_epoch": [], "eval_s": [], "metrics": None}
    state.update(phases={}, epoch_cpu_s=[])
    calculate_loss = model.calculate_loss

    def counting_loss(interaction):
        state["rows"] += len(interaction)
        return calculate_loss(interaction)

    model.calculate_loss = counting_loss
    phases = watch_epoch_phases(model, trainer)
    peaks.end("setup")

    def epoch(timed=True):
        state["rows"] = 0
        phases.clear()
        begin, cpu = time.perf_counter(), time.process_time()
        trainer._train_epoch(train_data, state["epoch"], show_progress=False)
        seconds, cpu = time.perf_counter() - begin, time.process_time() - cpu
        state["epoch"] += 1
        if timed:
            state["epoch_s"].append(seconds)
            state["rows_per_epoch"].append(state["rows"])
            state["epoch_cpu_s"].append(cpu)
            rest = (seconds - sum(w for w, _ in phases.values()), cpu - sum(c for _, c in phases.values()))
            for name, spent in [*phases.items(), ("batches, negatives, rest", rest)]:
                state["phases"].setdefault(name, []).append(list(spent))
        return {"s": seconds}

    def evaluate():
        if "train" not in peaks.peaks:
            peaks.end("train")
        begin = time.perf_counter()
        result = trainer.evaluate(test_data, load_best_model=False, show_progress=False)
        seconds = time.perf_counter() - begin
        state["eval_s"].append(seconds)
        state["metrics"] = {key: float(value) for key, value in (result or {}).items()}
        state["metrics_epochs"] = state["epoch"]
        return {"s": seconds}

    def quality(epochs=0):  # plugin models: recall after the timed epochs only (see --lightfm-epochs)
        peaks.end("eval")
        return {}

    def finish():
        peaks.end("eval")
        state_mib = torch_state_mib(model, getattr(trainer, "optimizer", None))
        n_features, nnz_f, nnz_fu = feature_sizes(model, train, config)
        return {
            "kind": "plugin",
            "threads": torch.get_num_threads(),
            "prepare_s": prepare_s,
            "users": int(train.user_num - 1),
            "items": int(train.item_num - 1),
            "features": n_features,
            "nnz_F": nnz_f,
            "nnz_F_U": nnz_fu,
            "train_likes": int(len(train.inter_feat)),
            "train_items": len(train.split_items),
            "test_items": len(test.split_items),
            "eval_users": len(test_data.uid_list),
            "batch": int(config["train_batch_size"]),
            "epoch_s": state["epoch_s"],
            "rows_per_epoch": state["rows_per_epoch"],
            "eval_s": state["eval_s"],
            "metrics": state["metrics"],
            "metrics_epochs": state.get("metrics_epochs"),
            "state_mib": state_mib,
            "epoch_cpu_s": state["epoch_cpu_s"],
            "phases": state["phases"],
            **peaks.report(),
        }

    emit(
        {
            "ready": True,
            "split": fingerprint(train.split_items, test.split_items, [len(train.inter_feat)]),
            "prepare_s": prepare_s,
        }
    )
    serve({"epoch": epoch, "eval": evaluate, "quality": quality, "finish": finish})


def watch_epoch_phases(model, trainer):
    """Time an epoch's phases (wall and CPU seconds: the loss's forward, backward, the optimizer's step; the
    rest is the loader's batches and negative sampling). Wrappers in this worker only; the code is unchanged."""
    import torch

    phases = {}

    def timed(name, function):
        def wrapper(*args, **kwargs):
            wall, cpu = time.perf_counter(), time.process_time()
            try:
                return function(*args, **kwargs)
            finally:
                before = phases.get(name, (0.0, 0.0))
                phases[name] = (before[0] + time.perf_counter() - wall, before[1] + time.process_time() - cpu)

        return wrapper

    model.calculate_loss = timed("loss (forward)", model.calculate_loss)
    torch.Tensor.backward = timed("backward", torch.Tensor.backward)
    if getattr(trainer, "optimizer", None) is not None:
        trainer.optimizer.step = timed("optimizer step", trainer.optimizer.step)
    return phases


def torch_state_mib(model, optimizer=None):
    """MiB of the model's parameters and buffers (the plugin's F, F_U, R live there) and optimizer state."""
    import torch

    tensors = list(model.parameters()) + list(model.buffers())
    for per_parameter in optimizer.state.values() if optimizer is not None else ():
        tensors += [value for value in per_parameter.values() if torch.is_tensor(value)]
    storages = {}
    for tensor in tensors:
        storage = tensor.untyped_storage()
        storages[storage.data_ptr()] = storage.nbytes()
    return sum(storages.values()) / 2**20


def lightfm_worker(args, settings):
    """LightFM (content-only item features, user identities, WARP) on the exported split."""
    import warnings

    warnings.filterwarnings("ignore")
    import numpy as np
    import scipy.sparse as sp

    try:
        from lightfm import LightFM
    except ImportError:
        emit({"error": LIGHTFM_MISSING})
        return
    threads = args.lightfm_threads or args.threads or os.cpu_count() or 1
    peaks = PhasePeaks()  # baseline: numpy, scipy and LightFM imported
    start = time.perf_counter()
    data = np.load(args.split_file)
    n_users = int(data["n_users"])
    train_items, test_items = data["train_items"], data["test_items"]
    F = sp.csr_matrix((data["F_data"], data["F_indices"], data["F_indptr"]), shape=tuple(data["F_shape"]))
    if args.lightfm_features == "binary":  # LightFM Dataset's convention: 0/1 weights, rows sum to 1
        F = F.copy()
        F.data[:] = 1.0
        lengths = np.maximum(np.diff(F.indptr), 1).astype(np.float32)
        F.data /= np.repeat(lengths, np.diff(F.indptr))
    F = F.astype(np.float32)
    F_train, F_test = F[train_items].tocsr(), F[test_items].tocsr()
    # training likes as (user, position among the training items): LightFM never sees another item
    train_position = np.full(int(data["n_items"]), -1, dtype=np.int64)
    train_position[train_items] = np.arange(len(train_items))
    rows, cols = data["train_users_of_likes"], train_position[data["train_items_of_likes"]]
    interactions = sp.coo_matrix(
        (np.ones(len(rows), dtype=np.float32), (rows.astype(np.int32), cols.astype(np.int32))),
        shape=(n_users, len(train_items)),
    )
    # test truth over the eval users x test items, as sorted keys user * n_test + position
    test_position = np.full(int(data["n_items"]), -1, dtype=np.int64)
    test_position[test_items] = np.arange(len(test_items))
    eval_users = data["eval_users"]
    truth = np.unique(data["test_users_of_likes"] * len(test_items) + test_position[data["test_items_of_likes"]])
    positives = np.bincount(data["test_users_of_likes"], minlength=n_users)
    lightfm_args = {"loss": "warp", "random_state": args.seed, **parse_config(args.lightfm_args), **settings}
    model = LightFM(**lightfm_args)
    prepare_s = time.perf_counter() - start
    peaks.end("setup")
    state = {"epoch": 0, "epoch_s": [], "epoch_cpu_s": [], "eval_s": [], "metrics": None, "quality": None}
    cells = max(1, args.lightfm_eval_cells // max(len(test_items), 1))  # users per scoring batch

    def epoch(timed=True):
        begin, cpu = time.perf_counter(), time.process_time()
        model.fit_partial(interactions, item_features=F_train, epochs=1, num_threads=threads)
        seconds = time.perf_counter() - begin
        state["epoch"] += 1
        if timed:
            state["epoch_s"].append(seconds)
            state["epoch_cpu_s"].append(time.process_time() - cpu)
        return {"s": seconds}

    def score_and_rank():
        """Top-10 test items of every eval user, scoring all eval users x all test items."""
        tops = []
        if args.lightfm_scoring == "predict":
            n_test = len(test_items)
            item_ids = np.arange(n_test, dtype=np.int32)
            for begin in range(0, len(eval_users), cells):
                users = eval_users[begin : begin + cells].astype(np.int32)
                scores = model.predict(
                    np.repeat(users, n_test), np.tile(item_ids, len(users)), item_features=F_test, num_threads=threads
                ).reshape(len(users), n_test)
                tops.append(top_k(scores))
        else:  # dense: the representations once, then batched user x item products (BLAS)
            item_bias, item_embedding = model.get_item_representations(F_test)
            user_bias, user_embedding = model.get_user_representations()
            for begin in range(0, len(eval_users), cells):
                users = eval_users[begin : begin + cells]
                scores = user_embedding[users] @ item_embedding.T
                scores += user_bias[users, None]
                scores += item_bias[None, :]
                tops.append(top_k(scores))
        return np.concatenate(tops)

    def metrics(top):
        return ranking_metrics(top, eval_users, len(test_items), truth, positives)

    def evaluate():
        if "train" not in peaks.peaks:
            peaks.end("train")
        begin = time.perf_counter()
        result = metrics(score_and_rank())
        seconds = time.perf_counter() - begin
        state["eval_s"].append(seconds)
        state["metrics"], state["metrics_epochs"] = result, state["epoch"]
        return {"s": seconds}

    def quality(epochs=0):
        """Untimed extra epochs up to ``epochs`` in all, then the test metrics (quality next to speed)."""
        peaks.end("eval")
        while state["epoch"] < epochs:
            epoch(timed=False)
        if epochs:
            state["quality"], state["quality_epochs"] = metrics(score_and_rank()), state["epoch"]
        return {}

    def finish():
        peaks.end("quality")
        import lightfm

        arrays = [value for value in vars(model).values() if isinstance(value, np.ndarray)]
        arrays += [F_train.data, F_train.indices, F_train.indptr, interactions.row, interactions.col, interactions.data]
        state_mib = sum(array.nbytes for array in arrays) / 2**20

        return {
            "kind": "lightfm",
            "threads": threads,
            "prepare_s": prepare_s,
            "lightfm_version": lightfm.__version__,
            "lightfm_args": lightfm_args,
            "features_weighting": args.lightfm_features,
            "scoring": args.lightfm_scoring,
            "users": n_users - 1,
            "items": int(data["n_items"]) - 1,
            "features": int(F.shape[1]),
            "nnz_F": int(F.nnz),
            "train_likes": int(interactions.nnz),
            "train_items": len(train_items),
            "test_items": len(test_items),
            "eval_users": len(eval_users),
            "epoch_s": state["epoch_s"],
            "epoch_cpu_s": state["epoch_cpu_s"],
            "rows_per_epoch": [int(interactions.nnz)] * len(state["epoch_s"]),
            "eval_s": state["eval_s"],
            "metrics": state["metrics"],
            "metrics_epochs": state.get("metrics_epochs"),
            "quality": state["quality"],
            "quality_epochs": state.get("quality_epochs"),
            "state_mib": state_mib,
            **peaks.report(),
        }

    emit(
        {
            "ready": True,
            "prepare_s": prepare_s,
            "split": fingerprint(train_items, test_items, [len(data["train_users_of_likes"])]),
        }
    )
    serve({"epoch": epoch, "eval": evaluate, "quality": quality, "finish": finish})


# ----------------------------------------------------------------------------------------- driver
class Worker:
    """A worker subprocess spoken to one command at a time (result lines read by a thread)."""

    def __init__(self, spec, command, env, workdir, timeout):
        self.spec, self.name, self.settings, self.label = spec, *parse_spec(spec)
        self.timeout, self.error = timeout, None
        self.log = Path(workdir) / f"worker_{abs(hash(spec))}.log"
        self.process = subprocess.Popen(
            command,
            cwd=workdir,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=open(self.log, "w"),
            text=True,
            bufsize=1,
        )
        self.results = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()
        self.ready = self._result()

    def _read(self):
        for line in self.process.stdout:
            result = parse_result(line)
            if result is not None:
                self.results.put(result)
        self.results.put(None)  # end of output: the process ended

    def _result(self):
        if self.error:
            return None
        try:
            result = self.results.get(timeout=self.timeout)
        except queue.Empty:
            self.fail(f"no answer within {self.timeout} s")
            return None
        if result is None:
            self.process.wait()
            self.fail(f"exit {self.process.returncode}: " + self.tail())
        elif "error" in result:
            self.fail(result["error"])
            return None
        return result

    def tail(self):
        try:
            lines = self.log.read_text().strip().splitlines()
        except OSError:
            return "no output"
        return " / ".join(line.strip() for line in lines[-3:]) or "no output"

    def fail(self, message):
        if not self.error:
            self.error = message
            print(f"{self.label}: error: {message}", file=sys.stderr, flush=True)
        if self.process.poll() is None:
            self.process.kill()  # only this worker, which the driver started
            self.process.wait()

    def send(self, cmd, **kwargs):
        if self.error:
            return None
        try:
            self.process.stdin.write(json.dumps({"cmd": cmd, **kwargs}) + "\n")
            self.process.stdin.flush()
        except OSError as error:
            self.fail(f"lost the worker: {error}")
            return None
        return self._result()

    def close(self):
        if self.process.poll() is None:
            try:
                self.process.stdin.close()
                self.process.wait(timeout=30)
            except (OSError, subprocess.TimeoutExpired):
                self.process.kill()
                self.process.wait()


def worker_command(args, spec, threads, split_file):
    command = [
        sys.executable,
        str(Path(__file__).resolve()),
        "--worker",
        spec,
        "--dataset",
        args.dataset,
        "--seed",
        str(args.seed),
        "--config-json",
        json.dumps(args.config),
        "--threads",
        str(threads),
        "--lightfm-threads",
        str(args.lightfm_threads or 0),
        "--lightfm-features",
        args.lightfm_features,
        "--lightfm-scoring",
        args.lightfm_scoring,
        "--lightfm-eval-cells",
        str(args.lightfm_eval_cells),
    ]
    if args.lightfm_args:
        command += ["--lightfm-args", *args.lightfm_args]
    if args.data_path:
        command += ["--data-path", str(args.data_path)]
    if split_file:
        command += ["--split-file", str(split_file)]
    return command


def run_suite(args, specs, threads, split_file, workdir):
    """Start the workers one by one, interleave their epochs and evaluations, collect their reports."""
    env = thread_env(threads)

    def start(spec):
        begin = time.perf_counter()
        worker = Worker(spec, worker_command(args, spec, threads, split_file), env, workdir, args.timeout)
        if worker.ready:
            print(f"{worker.label}: ready in {time.perf_counter() - begin:.1f} s", file=sys.stderr, flush=True)
        return worker

    def step(worker, cmd, **kwargs):
        result = worker.send(cmd, **kwargs)
        time.sleep(args.pause)  # let the worker's OpenMP threads stop spinning before the next one runs
        return result

    def measure(worker_list):
        for _ in range(args.warmup):
            for worker in worker_list:
                step(worker, "epoch", timed=False)
        for _ in range(args.epochs):
            for worker in worker_list:
                step(worker, "epoch")
        for _ in range(args.repeats):
            for worker in worker_list:
                step(worker, "eval")
        for worker in worker_list:
            step(worker, "quality", epochs=args.lightfm_epochs if worker.name == "LightFM" else 0)

    reports = []
    if args.order == "interleaved":
        workers = [start(spec) for spec in specs]
        measure(workers)
        for worker in workers:
            reports.append(finish(worker))
    else:  # one model after the other: only one worker in memory at a time
        for spec in specs:
            worker = start(spec)
            measure([worker])
            reports.append(finish(worker))
    split_ids = {r.get("split") for r in reports if "split" in r}
    if len(split_ids) > 1:
        print(f"warning: the workers saw different splits: {split_ids}", file=sys.stderr)
    return reports


def finish(worker):
    report = worker.send("finish")
    worker.close()
    if report is None:
        return {"label": worker.label, "error": worker.error or "no report"}
    report.update(label=worker.label, split=worker.ready.get("split"))
    return report


def quality_cell(report):
    metrics, epochs = report.get("metrics") or {}, report.get("metrics_epochs")
    recall = metrics.get(f"recall@{TOPK}")
    cell = f"{fmt(recall)} ({epochs} ep)" if recall is not None else "-"
    extra = report.get("quality")
    if extra:
        cell += f"; {fmt(extra[f'recall@{TOPK}'])} ({report['quality_epochs']} ep)"
    return cell


def phase(report, name):
    return (report.get("phase_peak_rss_mib") or {}).get(name)


def table(reports):
    header = [
        "model",
        "threads",
        "s/epoch median (min-max)",
        "samples/epoch",
        "samples/s",
        "eval s median (min-max)",
        "peak RSS MiB",
        "peak MiB setup / train / eval",
        "baseline MiB",
        "model state MiB",
        f"test Recall@{TOPK} (after epochs)",
        "setup s",
    ]
    rows = []
    for r in reports:
        if "error" in r:
            rows.append([r["label"], "error: " + r["error"].replace("|", "/")] + [""] * (len(header) - 2))
            continue
        median = statistics.median(r["epoch_s"]) if r["epoch_s"] else None
        samples = statistics.median(r["rows_per_epoch"]) if r["rows_per_epoch"] else None
        phases = " / ".join(fmt(phase(r, name), 4) for name in ("setup", "train", "eval"))
        rows.append(
            [
                r["label"],
                r["threads"],
                spread(r["epoch_s"]),
                fmt(int(samples)) if samples else "-",
                fmt(samples / median) if samples and median else "-",
                spread(r["eval_s"]),
                fmt(r["peak_rss_mib"], 4),
                phases,
                fmt(r["baseline_rss_mib"], 3),
                fmt(r.get("state_mib"), 3),
                quality_cell(r),
                fmt(r["prepare_s"]),
            ]
        )
    return markdown(header, rows)


def ratios(reports, pairs):
    by_label = {r["label"]: r for r in reports if "error" not in r}
    rows = []
    for pair in pairs:
        a, _, b = pair.partition("/")
        if a not in by_label or b not in by_label:
            continue
        ra, rb = by_label[a], by_label[b]

        def ratio(va, vb):
            return fmt(va / vb) if va and vb and vb > 0 else "-"

        def median(report, key):
            return statistics.median(report[key]) if report.get(key) else None

        def train_growth(report):
            peak = phase(report, "train")
            return peak - report["baseline_rss_mib"] if peak is not None else None

        rows.append(
            [
                f"{a} / {b}",
                ratio(median(ra, "epoch_s"), median(rb, "epoch_s")),
                ratio(median(ra, "epoch_cpu_s"), median(rb, "epoch_cpu_s")),
                ratio(median(ra, "eval_s"), median(rb, "eval_s")),
                ratio(ra["peak_rss_mib"], rb["peak_rss_mib"]),
                ratio(train_growth(ra), train_growth(rb)),
                ratio(ra.get("state_mib"), rb.get("state_mib")),
            ]
        )
    if not rows:
        return ""
    header = ["ratio", "s/epoch", "CPU s/epoch", "eval s", "peak RSS", "train peak above baseline", "model state"]
    return markdown(header, rows)


def machine_lines():
    """What makes this machine's timings differ from another's: the CPU, the vector extensions its kernels can
    use, its caches, torch's build (BLAS, oneDNN, OpenMP, the CPU capability its ATen kernels dispatch to), and
    the load (other processes' share of the cores). Read in the driver: the workers' threads are their own."""
    import numpy
    import torch

    def read(path):
        try:
            return Path(path).read_text(encoding="utf-8", errors="replace")
        except OSError:
            return ""

    cpuinfo = read("/proc/cpuinfo")
    model = re.search(r"^model name\s*:\s*(.+)$", cpuinfo, re.M)
    flags = set((re.search(r"^flags\s*:\s*(.+)$", cpuinfo, re.M) or [None, ""])[1].split())
    vector = [f for f in ("avx2", "fma", "avx512f", "avx512bw", "avx512_vnni", "avx512_bf16", "amx_tile") if f in flags]
    caches = []
    for index in sorted(Path("/sys/devices/system/cpu/cpu0/cache").glob("index*")):
        level, kind, size = (read(index / name).strip() for name in ("level", "type", "size"))
        if kind != "Instruction":
            caches.append(f"L{level} {size}")
    config = torch.__config__.show()
    found = {
        key: re.search(pattern, config)
        for key, pattern in (
            ("blas", r"BLAS_INFO=(\w+)"),
            ("mkl", r"Math Kernel Library Version (\S+)"),
            ("onednn", r"MKL-DNN (v[\d.]+)"),
            ("openmp", r"OpenMP (\d+)"),
        )
    }
    build = ", ".join(
        f"{name} {match[1]}" for name, match in zip(("BLAS", "MKL", "oneDNN", "OpenMP"), found.values()) if match
    )
    thp = re.search(r"\[(\w+)\]", read("/sys/kernel/mm/transparent_hugepage/enabled"))
    umath = getattr(getattr(numpy, "_core", None), "_multiarray_umath", None)  # numpy >= 2 (1.x: numpy.core)
    features = getattr(umath or numpy.core._multiarray_umath, "__cpu_features__", {})
    simd = [name for name, on in features.items() if on and "AVX" in name]
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    return [
        f"CPU: {model[1] if model else platform.processor() or '?'}, {os.cpu_count()} cores; vector extensions "
        f"{' '.join(vector) or 'none of avx2/avx512'}; caches (per core unless shared) {', '.join(caches) or '?'}; "
        f"transparent huge pages {thp[1] if thp else '?'}; load average {load}",
        f"torch {torch.__version__}: {build}; ATen CPU capability {torch.backends.cpu.get_cpu_capability()}; "
        f"numpy {numpy.__version__} (SIMD {' '.join(simd) or '-'})",
    ]


def phase_table(reports):
    """Median wall and CPU seconds of each phase of a plugin model's timed epochs."""
    rows = []
    for report in reports:
        if "error" in report or not report.get("phases"):
            continue
        total_cpu = statistics.median(report["epoch_cpu_s"]) or 1.0
        for name, spent in report["phases"].items():
            wall, cpu = statistics.median(w for w, _ in spent), statistics.median(c for _, c in spent)
            rows.append([report["label"], name, f"{wall:.3f}", f"{cpu:.3f}", f"{100 * cpu / total_cpu:.0f}%"])
        rows.append(
            [
                report["label"],
                "whole epoch",
                f"{statistics.median(report['epoch_s']):.3f}",
                f"{total_cpu:.3f}",
                "100%",
            ]
        )
    if not rows:
        return ""
    return markdown(["model", "epoch phase", "wall s", "CPU s", "share of CPU"], rows)


def describe(reports, args, label):
    first = next((r for r in reports if "error" not in r and r.get("kind") == "plugin"), None)
    first = first or next((r for r in reports if "error" not in r), {})
    lines = [
        f"{label}: {fmt(first.get('users'))} users, {fmt(first.get('items'))} items, {fmt(first.get('features'))} "
        f"features, nnz(F) {fmt(first.get('nnz_F'))}, {fmt(first.get('train_likes'))} training likes on "
        f"{fmt(first.get('train_items'))} training items; evaluation: {fmt(first.get('eval_users'))} test users x "
        f"{fmt(first.get('test_items'))} test items; split {first.get('split', '?')}",
        f"{args.epochs} timed epochs after {args.warmup} warm-up, {args.repeats} evaluations, order {args.order}; "
        f"LightFM: {args.lightfm_features} item features (no identity), user identities, "
        f"{'dense scoring (representations + BLAS)' if args.lightfm_scoring == 'dense' else 'LightFM.predict'}, "
        f"metrics after the timed epochs and after {args.lightfm_epochs} epochs in all",
    ]
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    source = parser.add_argument_group("dataset")
    source.add_argument("--dataset", default="citeulike-t", help="RecBole dataset name (default: %(default)s)")
    source.add_argument(
        "--data-path",
        default=None,
        help="RecBole data_path, the folder holding DATASET/ (default: REPO/dataset when it has "
        "DATASET/, else RecBole's default)",
    )
    source.add_argument("--generated", action="store_true", help="benchmark on data from scale_data.scale_dataset")
    source.add_argument("--users", type=int, default=5000)
    source.add_argument("--items", type=int, default=20000)
    source.add_argument("--features", type=int, default=5000, help="vocabulary size")
    source.add_argument("--words-per-item", type=int, default=30)
    source.add_argument("--interactions", type=int, default=200000)
    source.add_argument("--data-dir", help="where generated data are written (default: a temporary folder)")
    runs = parser.add_argument_group("measurement")
    runs.add_argument(
        "--models",
        nargs="+",
        default=DEFAULT_SPECS,
        metavar="SPEC",
        help="NAME[:key=value,...]; plugin settings for plugin models, LightFM constructor arguments "
        "for LightFM (default: %(default)s)",
    )
    runs.add_argument("--epochs", type=int, default=5, help="timed epochs per model (median reported)")
    runs.add_argument("--warmup", type=int, default=1, help="untimed epochs per model before the timed ones")
    runs.add_argument("--repeats", type=int, default=3, help="timed evaluations per model (median reported)")
    runs.add_argument(
        "--threads",
        type=int,
        nargs="+",
        default=[2],
        help="torch threads (and BLAS/OpenMP caps); several values run the whole set once per value "
        "(default: %(default)s; 0: torch's choice)",
    )
    runs.add_argument(
        "--order",
        choices=("interleaved", "sequential"),
        default="interleaved",
        help="interleaved: all workers alive, epochs and evaluations in turns (A B A B); sequential: "
        "one model after the other, one worker in memory at a time",
    )
    runs.add_argument("--pause", type=float, default=0.2, help="seconds between two workers' commands")
    runs.add_argument("--seed", type=int, default=2020)
    runs.add_argument("--config", nargs="*", metavar="KEY=VALUE", help="extra RecBole settings for the plugin models")
    runs.add_argument("--timeout", type=int, default=3600, help="seconds a worker may take for one command")
    runs.add_argument("--ratio", nargs="*", default=DEFAULT_RATIOS, metavar="A/B", help="labels of the ratio pairs")
    runs.add_argument("--json", help="also write every measurement to this file")
    light = parser.add_argument_group("LightFM")
    light.add_argument("--lightfm-threads", type=int, default=0, help="LightFM num_threads (default: --threads)")
    light.add_argument(
        "--lightfm-features",
        choices=("tfidf", "binary"),
        default="tfidf",
        help="tfidf: the plugin's F (tf-idf, L2 rows); binary: 0/1 rows scaled to sum 1",
    )
    light.add_argument(
        "--lightfm-scoring",
        choices=("dense", "predict"),
        default="dense",
        help="evaluation scoring: dense (representations, then user x item products) or predict "
        "(LightFM.predict over every (user, test item) pair)",
    )
    light.add_argument(
        "--lightfm-eval-cells",
        type=int,
        default=2**22,
        help="user x item cells per scoring batch (the plugin's eval_batch_size)",
    )
    light.add_argument(
        "--lightfm-epochs",
        type=int,
        default=30,
        help="LightFM's quality: untimed epochs up to this total, then test Recall@10 (0: off)",
    )
    light.add_argument(
        "--lightfm-args",
        nargs="*",
        metavar="KEY=VALUE",
        help="LightFM constructor arguments for every LightFM, e.g. learning_rate=0.05 max_sampled=10",
    )
    hybrid = parser.add_argument_group("hybrid scenario (LightFM with item identity + content features; quality only)")
    hybrid.add_argument(
        "--hybrid",
        action="store_true",
        help="run LightFM's hybrid on the plugin's hybrid split and print test Recall@k of all / cold / "
        "warm items beside the committed records (benchmarks/lightfm_hybrid.py)",
    )
    hybrid.add_argument(
        "--hybrid-seeds",
        type=int,
        nargs="+",
        default=[2020, 2021, 2022],
        metavar="SEED",
        help="one hybrid split per seed (default: %(default)s)",
    )
    hybrid.add_argument("--hybrid-topk", type=int, default=20, help="k of Recall@k (default: %(default)s)")
    hybrid.add_argument(
        "--hybrid-records",
        default=str(REPO_ROOT / "docs" / "results" / "ml-100k-hybrid"),
        help="compare records shown beside LightFM (default: the committed ml-100k ones)",
    )
    internal = parser.add_argument_group("internal")
    internal.add_argument("--worker", help=argparse.SUPPRESS)
    internal.add_argument("--export", help=argparse.SUPPRESS)
    internal.add_argument("--split-file", help=argparse.SUPPRESS)
    internal.add_argument("--config-json", default="{}", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker or args.export:
        args.threads = args.threads[0]
        if args.export:
            return export_split(args)
        name, settings, _ = parse_spec(args.worker)
        return lightfm_worker(args, settings) if name == "LightFM" else plugin_worker(args, name, settings)
    if args.hybrid:
        if importlib.util.find_spec("lightfm") is None:
            print(LIGHTFM_MISSING, file=sys.stderr)
            return 2
        from lightfm_hybrid import main_hybrid

        args.threads = args.threads[0]
        args.config = parse_config(args.config)
        if args.data_path:
            args.data_path = str(Path(args.data_path).resolve())
        elif (REPO_ROOT / "dataset" / args.dataset).is_dir():
            args.data_path = str(REPO_ROOT / "dataset")
        return main_hybrid(args, plugin_config, parse_config(args.lightfm_args))
    if min(args.epochs, args.repeats) < 1 or args.warmup < 0:
        parser.error("--epochs and --repeats must be >= 1, --warmup >= 0")
    args.config = parse_config(args.config)
    for spec in args.models:
        parse_spec(spec)

    specs, notes = list(args.models), []
    has_lightfm = importlib.util.find_spec("lightfm") is not None
    if not has_lightfm and any(parse_spec(s)[0] == "LightFM" for s in specs):
        notes.append(LIGHTFM_MISSING)
        print(LIGHTFM_MISSING, file=sys.stderr)
        specs = [s for s in specs if parse_spec(s)[0] != "LightFM"]

    all_reports = []
    machine = machine_lines()
    print("\n".join(machine))
    with tempfile.TemporaryDirectory(prefix="bench_lightfm_") as workdir:
        label = args.dataset
        if args.generated:
            sys.path.insert(0, str(REPO_ROOT))
            data_path = Path(args.data_dir).resolve() if args.data_dir else Path(workdir) / "dataset"
            args.dataset = ensure_generated(
                data_path, args.users, args.items, args.features, args.words_per_item, args.interactions, args.seed
            )
            args.data_path = str(data_path)
            label = (
                f"generated {args.interactions:,} likes ({args.users:,} users, {args.items:,} items, "
                f"{args.features:,} words, {args.words_per_item} per item)"
            )
        elif args.data_path:
            args.data_path = str(Path(args.data_path).resolve())
        elif (REPO_ROOT / "dataset" / args.dataset).is_dir():
            args.data_path = str(REPO_ROOT / "dataset")
        split_file = None
        if any(parse_spec(s)[0] == "LightFM" for s in specs):
            split_file = Path(workdir) / "split.npz"
            command = [
                sys.executable,
                str(Path(__file__).resolve()),
                "--export",
                str(split_file),
                "--dataset",
                args.dataset,
                "--seed",
                str(args.seed),
                "--config-json",
                json.dumps(args.config),
            ]
            if args.data_path:
                command += ["--data-path", args.data_path]
            done = subprocess.run(command, cwd=workdir, env=thread_env(1), capture_output=True, text=True)
            if done.returncode != 0 or not split_file.is_file():
                tail = (done.stderr or done.stdout or "no output").strip().splitlines()[-3:]
                notes.append("split export failed, LightFM skipped: " + " / ".join(tail))
                print(notes[-1], file=sys.stderr)
                specs = [s for s in specs if parse_spec(s)[0] != "LightFM"]
        for threads in args.threads:
            begin = time.perf_counter()
            reports = run_suite(args, specs, threads, split_file, workdir)
            for report in reports:
                report["threads_setting"] = threads
            print(f"\n## {label}, --threads {threads} ({time.perf_counter() - begin:.0f} s)\n")
            print(describe(reports, args, label) + "\n")
            for note in notes:
                print(f"Note: {note}\n")
            print(table(reports))
            phases = phase_table(reports)
            if phases:
                print("\nEpoch phases (medians over the timed epochs; CPU s = this process's CPU time):\n")
                print(phases)
            ratio_table = ratios(reports, args.ratio)
            if ratio_table:
                print(
                    "\nRatios (plugin model / LightFM; h=10 vs 16 components is not like-for-like, and neither "
                    "is h=64 vs 64: FBSM also learns a per-feature diagonal D, LightFM per-user embeddings and "
                    "biases):\n"
                )
                print(ratio_table)
            all_reports += reports
            sys.stdout.flush()
    if args.json:
        Path(args.json).write_text(json.dumps({"machine": machine, "reports": all_reports}, indent=1))
    return 1 if any("error" in r for r in all_reports) else 0


if __name__ == "__main__":
    sys.exit(main())
