"""An FBSM epoch (training and validation) against the arithmetic it needs, measured in one process.

The reference is the plain-torch full-softmax pass over the same batches of users: random user and class
embeddings (h = ``rank``), scores = Q E^T over every training item, log_softmax, the positives' mean, backward.
FBSM's epoch computes that GEMM plus its sparse parts (the diagonal, V f_u, V f_c) and evaluates validation.

    python benchmarks/bench_epoch.py --dataset=citeulike-t --threads 1 --epochs 3 -- \\
        --cold_start_scenario=hybrid --identity_features=True --eval_user_sample=2000
"""

import argparse
import platform
import statistics
import time

import torch

from recbole_fbsm.quick_start import prepare
from recbole_fbsm.training.trainer import get_trainer


def settings(pairs):
    """``--key=value`` pairs as a config dict (values read as YAML)."""
    import yaml

    return {key.lstrip("-"): yaml.safe_load(value) for key, value in (pair.split("=", 1) for pair in pairs)}


def reference_pass(batches, user_field, item_field, classes, rank):
    """Seconds of one forward and backward full-softmax pass over the users of ``batches``, plain torch."""
    class_embeddings = torch.randn(len(classes), rank, requires_grad=True)
    start = time.perf_counter()
    for batch in batches:
        users, slot = torch.unique(batch[user_field], return_inverse=True)
        user_embeddings = torch.randn(len(users), rank, requires_grad=True)
        scores = user_embeddings @ class_embeddings.T
        log_probability = torch.log_softmax(scores, dim=1)
        loss = -log_probability[slot, torch.searchsorted(classes, batch[item_field])].mean()
        loss.backward()
    return time.perf_counter() - start


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="FBSM")
    parser.add_argument("--dataset", default="citeulike-t")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("settings", nargs="*", help="--key=value settings of the run")
    args = parser.parse_args()
    config, model, (train_data, valid_data, _) = prepare(
        args.model, args.dataset, config_dict={**settings(args.settings), "torch_threads": args.threads}
    )
    torch.set_num_threads(args.threads)
    trainer = get_trainer(config["MODEL_TYPE"], config["model"])(config, model)
    trainer.valid_history, trainer._epoch_in_progress = [], -1  # what fit() sets up
    batches = list(train_data)
    epochs, references = [], []
    for epoch in range(args.epochs):
        start = time.perf_counter()
        trainer._train_epoch(train_data, epoch)
        trainer._valid_epoch(valid_data)
        epochs.append(time.perf_counter() - start)
        references.append(reference_pass(batches, model.USER_ID, model.ITEM_ID, model.training_items, model.rank))
    epoch, reference = statistics.median(epochs), statistics.median(references)
    print(f"cpu: {platform.processor() or platform.machine()}, threads {args.threads}, torch {torch.__version__}")
    print(f"batches {len(batches)}, classes {len(model.training_items)}, features {model.n_features}, h {model.rank}")
    print(f"epoch (training + validation): median {epoch:.2f} s of {[round(e, 2) for e in epochs]}")
    print(f"plain-torch full-softmax pass: median {reference:.2f} s of {[round(r, 2) for r in references]}")
    print(f"ratio: {epoch / reference:.2f}")


if __name__ == "__main__":
    main()
