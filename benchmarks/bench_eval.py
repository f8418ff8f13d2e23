"""Where FBSM's full-sort evaluation spends its time, next to the floor of its two products.

FBSM scores s(u, i) = f_i^T (D + V V^T) f_u: a diagonal part (the candidates' sparse feature rows times the
users' profiles) and a rank-h part (V^T f_u . V^T f_i, the same product of h-dimensional vectors that
LightFM's scoring is made of). On one model prepared by the plugin's pipeline (``quick_start.prepare``,
optionally trained ``--epochs``), over the evaluated split's users and candidate items, this measures in turn
(each repeat runs every step once, so machine noise hits all of them alike; medians of wall seconds):

- ``rank-h product``: (V^T f_u) @ (V^T f_i)^T in blocks of users, the user and item factors precomputed;
- ``diagonal product``: the candidates' rows of F times the weighted profiles (``csr_times_dense``), the
  profiles built per block;
- ``both products, as FBSM adds them``: ``score_block`` over the blocks (the rank-h part folded into the
  profiles, or added item side), no transpose;
- ``score_candidates``: the model's scores per evaluation batch (blocks transposed into users x candidates,
  the estimation constraint);
- ``+ tie-fair top-k``: and the collector's ``random_tie_topk`` of every batch;
- ``trainer.evaluate``: the whole evaluation (loader, masks, collector, RecBole's metrics);
- ``numpy rank-h + top-k``: LightFM's dense scoring without its biases and metrics (float32 user x item
  products and ``argpartition`` top-k, batches of ``eval_batch_size`` cells), random factors of size h.

    python benchmarks/bench_eval.py --data-path dataset --dataset citeulike-t --threads 1
    python benchmarks/bench_eval.py --model UFSM --split valid --repeats 9 --json eval.json
"""

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchlib import QUIET_CONFIG, markdown, parse_config, spread  # noqa: E402


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="FBSM")
    parser.add_argument("--dataset", default="citeulike-t")
    parser.add_argument("--data-path", default=None)
    parser.add_argument("--split", choices=("valid", "test"), default="test")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--epochs", type=int, default=1, help="training epochs before the measurements")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--seed", type=int, default=2020)
    parser.add_argument("--config", nargs="*", default=["rank=64"], help="plugin settings key=value")
    parser.add_argument(
        "--block-cells",
        type=int,
        default=None,
        help="models.base.SCORE_BLOCK_CELLS for this run (cells of a block of users)",
    )
    parser.add_argument("--json", default=None, help="also write the medians to this file")
    return parser.parse_args(argv)


def prepare_model(args):
    import warnings

    warnings.filterwarnings("ignore")
    from recbole_fbsm.quick_start import prepare
    from recbole_fbsm.training.trainer import get_trainer

    config = dict(
        QUIET_CONFIG,
        checkpoint_dir=str(Path.cwd() / "saved"),
        seed=args.seed,
        use_gpu=False,
        torch_threads=args.threads,
    )
    if args.data_path:
        config["data_path"] = args.data_path
    config.update(parse_config(args.config))
    config, model, (train_data, valid_data, test_data) = prepare(args.model, args.dataset, config_dict=config)
    trainer = get_trainer(config["MODEL_TYPE"], config["model"])(config, model)
    for epoch in range(args.epochs):
        trainer._train_epoch(train_data, epoch, show_progress=False)
    model.eval()
    return config, model, trainer, valid_data if args.split == "valid" else test_data


def steps(config, model, trainer, data):
    """The measured steps: name -> function of no argument."""
    import numpy as np
    import torch

    from recbole_fbsm.kernels.sparse import csr_times_dense, rows_times_table

    users = torch.as_tensor(np.asarray(data.uid_list), dtype=torch.long)
    candidates = torch.as_tensor(data._dataset.split_items, dtype=torch.long)
    F_c = model.F.rows_matrix(candidates)
    factors = model.low_rank_factors()
    block = model.score_block_users(len(candidates))
    blocks = [users[start : start + block] for start in range(0, len(users), block)]
    h = 64 if factors is None else factors.shape[1]
    V = torch.randn(model.n_features, h) if factors is None else factors.detach()
    item_factors = csr_times_dense(F_c, V)
    user_factors = [rows_times_table(*model.F_U.gather_rows(b), V) for b in blocks]
    batches = list(data)
    collector = trainer.eval_collector
    rng = np.random.default_rng(0)
    U_np = rng.standard_normal((len(users), h), dtype=np.float32)
    I_np = rng.standard_normal((len(candidates), h), dtype=np.float32)
    per_batch = max(1, int(config["eval_batch_size"]) // len(candidates))

    def numpy_scoring():
        for start in range(0, len(U_np), per_batch):
            scores = U_np[start : start + per_batch] @ I_np.T
            np.argpartition(scores, scores.shape[1] - 10, axis=1)[:, -10:]

    def scored_batches(topk):
        score = model.candidate_scorer(candidates)  # as an evaluation: the candidates prepared once
        for interaction, *_ in batches:
            scores = score(interaction)
            if topk:
                collector.random_tie_topk(scores, 10, interaction[model.USER_ID], candidates)

    trainer.evaluate(data, load_best_model=False)  # sets the trainer's candidates
    side = None if model.folds_low_rank(len(candidates)) else item_factors

    def each(function, items):  # each result dropped before the next: memory reused, as in an evaluation
        for item in items:
            function(item)

    return {
        f"rank-{h} product": lambda: each(lambda u: u @ item_factors.T, user_factors),
        "diagonal product": lambda: each(lambda b: csr_times_dense(F_c, model.weighted_profiles_t(b)), blocks),
        "both products, as FBSM adds them": lambda: each(lambda b: model.score_block(b, F_c, factors, side), blocks),
        "score_candidates": lambda: scored_batches(False),
        "+ tie-fair top-k": lambda: scored_batches(True),
        "trainer.evaluate": lambda: trainer.evaluate(data, load_best_model=False),
        f"numpy rank-{h} + top-k (LightFM's dense scoring)": numpy_scoring,
    }, {
        "users": len(users),
        "candidates": len(candidates),
        "features": model.n_features,
        "block": block,
        "batch users": data.step,
    }


def main(argv=None):
    args = parse_args(argv)
    for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        os.environ[name] = str(args.threads)
    import torch

    torch.set_num_threads(args.threads)
    config, model, trainer, data = prepare_model(args)
    if args.block_cells:
        from recbole_fbsm.models import base

        base.SCORE_BLOCK_CELLS = args.block_cells
    with torch.no_grad():
        measured, sizes = steps(config, model, trainer, data)
        times = {name: [] for name in measured}
        for _ in range(args.repeats):
            for name, step in measured.items():
                begin = time.perf_counter()
                step()
                times[name].append(time.perf_counter() - begin)
    print(
        f"{args.model} on {args.dataset} ({args.split}): "
        f"{sizes['users']:,} users x {sizes['candidates']:,} candidates, "
        f"{sizes['features']:,} features; blocks of {sizes['block']} users, batches of {sizes['batch users']}; "
        f"{args.threads} thread(s), {args.repeats} repeats\n"
    )
    print(markdown(["step", "s median (min-max)"], [[name, spread(values)] for name, values in times.items()]))
    if args.json:
        medians = {name: statistics.median(values) for name, values in times.items()}
        Path(args.json).write_text(json.dumps({"sizes": sizes, "medians": medians, "times": times}, indent=1))


if __name__ == "__main__":
    main()
