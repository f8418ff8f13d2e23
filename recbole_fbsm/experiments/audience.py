"""Who should see a new item, evaluated offline: for each cold item of a split, the training users ranked by the
model's score of it, Recall@k and NDCG@k over the users who liked it in the split (RecBole's definitions; items no
training user liked there are skipped), and the share of the top-k slots held by the heaviest 1% of users (by
training likes). The calibrated ranking divides each score by |I_u|^alpha (``serve.audience``), alpha chosen on the
validation split's cold items and written beside the artifact for the service.

``python -m recbole_fbsm.experiments.audience ARTIFACT.fbsm [--topk 20] [--split test]``
"""

import argparse
import sys

import numpy as np
import scipy.sparse as sp
import torch

from recbole_fbsm.errors import ColdStartError, exit_status
from recbole_fbsm.evaluation.collector import TieBreakingCollector
from recbole_fbsm.serve.audience import calibration, write_alpha
from recbole_fbsm.serve.loading import load_model

ALPHAS = (0.0, 0.25, 0.5, 0.75, 1.0)
HEAVY = 0.01  # the heaviest users' share of all users
BLOCK_CELLS = 1 << 24  # items x users scores per block


def split_truth(served, split, users):
    """(the split's cold items liked by one of ``users``, items x users CSR of those likes)."""
    items = np.setdiff1d(served.split_items(split), served.training_items())
    like_users, like_items = served.split_likes(split)
    row, column = np.full(served.dataset.item_num, -1), np.full(served.dataset.user_num, -1)
    row[items], column[users] = np.arange(len(items)), np.arange(len(users))
    keep = (row[like_items] >= 0) & (column[like_users] >= 0)
    truth = sp.csr_matrix(
        (np.ones(int(keep.sum())), (row[like_items[keep]], column[like_users[keep]])), shape=(len(items), len(users))
    )
    truth.data[:] = 1.0  # a like recorded twice counts once
    liked = np.diff(truth.indptr) > 0
    return items[liked], truth[liked]


@torch.no_grad()
def evaluate(served, split="test", k=20, alphas=ALPHAS):
    """{alpha: {"recall", "ndcg", "heavy_share", "heavy_factor", "items"}} of ``split``'s audience rankings."""
    served = load_model(served)
    likes = served.training_likes_per_user()
    users = np.flatnonzero(likes > 0)
    items, truth = split_truth(served, split, users)
    if not len(items):
        raise ColdStartError(
            f"model {served.checkpoint}: no cold item of the {split} split is liked by a training user."
        )
    k = min(int(k), len(users))
    heavy = np.zeros(len(users), dtype=bool)
    heavy[np.argsort(-likes[users], kind="stable")[: max(1, round(HEAVY * len(users)))]] = True
    weights = {alpha: torch.as_tensor(calibration(likes[users], alpha), dtype=torch.float32) for alpha in alphas}
    candidates = torch.as_tensor(users, device=served.device)
    matrix = served.features.matrix.tocsr()[items]
    collector = TieBreakingCollector(
        served.config
    )  # evaluation's top-k: ties by a seeded hash, the same for every alpha
    hits, heavy_slots = {alpha: [] for alpha in alphas}, dict.fromkeys(alphas, 0)
    step = max(1, BLOCK_CELLS // len(users))
    for start in range(0, len(items), step):
        block = served.feature_rows(matrix[start : start + step])
        scores = served.model.score_feature_rows(candidates, block).T.float().cpu()
        rows = torch.arange(start, start + len(scores))
        relevant = truth[start : start + step].toarray() > 0
        for alpha in alphas:
            top = collector.random_tie_topk(scores * weights[alpha], k, rows, candidates.cpu()).numpy()
            hits[alpha].append(np.take_along_axis(relevant, top, axis=1))
            heavy_slots[alpha] += int(heavy[top].sum())
    n_relevant = np.diff(truth.indptr)
    discount = 1.0 / np.log2(np.arange(2, k + 2))
    ideal = np.cumsum(discount)[np.minimum(n_relevant, k) - 1]
    report = {}
    for alpha in alphas:
        found = np.concatenate(hits[alpha])
        share = heavy_slots[alpha] / found.size
        report[alpha] = {
            "recall": float(np.mean(found.sum(1) / n_relevant)),
            "ndcg": float(np.mean(found @ discount / ideal)),
            "heavy_share": share,
            "heavy_factor": share / (heavy.sum() / len(users)),
            "items": len(items),
        }
    return report


def audience_report(served, split="test", k=20):
    """Raw (alpha 0) and calibrated audience rankings of ``split``, alpha the one with the best validation
    Recall@k (the smallest of equals)."""
    served = load_model(served)
    valid = evaluate(served, "valid", k)
    alpha = max(ALPHAS, key=lambda a: (valid[a]["recall"], -a))
    result = valid if split == "valid" else evaluate(served, split, k, sorted({0.0, alpha}))
    return {"alpha": alpha, "k": k, "split": split, "raw": result[0.0], "calibrated": result[alpha], "valid": valid}


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog="python -m recbole_fbsm.experiments.audience", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("artifact", help="model artifact (.fbsm) of a run")
    parser.add_argument(
        "--topk", type=int, default=20, help="k of Recall@k, NDCG@k and the slots (default: %(default)s)"
    )
    parser.add_argument("--split", choices=("valid", "test"), default="test", help="split reported (default: test)")
    args = parser.parse_args(argv)
    if args.topk < 1:
        parser.error(f"--topk: expected a positive number; got {args.topk}")
    return exit_status(lambda: _main(args), "interrupted")


def _main(args):
    report = audience_report(args.artifact, args.split, args.topk)
    k, alpha, items = report["k"], report["alpha"], report["raw"]["items"]
    print(f"| {args.split} split, {items} cold items | Recall@{k} | NDCG@{k} | heaviest 1%'s share of top-{k} |")
    print("|---|---:|---:|---:|")
    for name, row in (("raw sum", report["raw"]), (f"calibrated, alpha {alpha}", report["calibrated"])):
        share = f"{row['heavy_share']:.1%} ({row['heavy_factor']:.1f} x)"
        print(f"| {name} | {row['recall']:.4f} | {row['ndcg']:.4f} | {share} |")
    recalls = {a: round(v["recall"], 4) for a, v in report["valid"].items()}
    written = write_alpha(args.artifact, alpha, {"split": "valid", "k": k, "recall": recalls})
    print(f"alpha {alpha} (validation Recall@{k} by alpha: {recalls}) written to {written}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
