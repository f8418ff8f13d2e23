"""Who should see a new item, evaluated offline on a saved model: the users direction of every run
(``evaluation.audience``: for each cold item of a split, the training users ranked by the model's score of it,
Recall@k, NDCG@k and the heaviest 1%'s share of the top-k slots), alpha chosen on the validation split's cold items
(a run records the same and its artifact carries alpha for the service: ``serve.audience``).

``python -m recbole_fbsm.experiments.audience ARTIFACT.fbsm [--topk 20] [--split test]``
"""

import argparse
import sys

import numpy as np

from recbole_fbsm.errors import ColdStartError, exit_status
from recbole_fbsm.evaluation.audience import ALPHAS, audience_metrics
from recbole_fbsm.serve.loading import load_model


def evaluate(served, split="test", k=20, alphas=ALPHAS):
    """{alpha: {"recall", "ndcg", "heavy_share", "heavy_factor", "items"}} of ``split``'s audience rankings."""
    served = load_model(served)
    items = np.setdiff1d(served.split_items(split), served.training_items())  # the split's cold items
    likes = served.training_likes_per_user()
    seed = int(served.config["seed"] or 0)
    features = served.features.matrix.tocsr()
    report = audience_metrics(served.model, features, likes, (items, *served.split_likes(split)), [k], seed, alphas)
    if not report:
        raise ColdStartError(
            f"model {served.checkpoint}: no cold item of the {split} split is liked by a training user."
        )
    k = min(int(k), int(np.count_nonzero(likes)))
    names = ("recall", "ndcg", "heavy_share", "heavy_factor")
    return {
        alpha: {name: row[f"{name}@{k}"] for name in names} | {"items": row["items"]} for alpha, row in report.items()
    }


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
    print(f"alpha {alpha} (validation Recall@{k} by alpha: {recalls})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
