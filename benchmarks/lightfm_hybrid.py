"""bench_lightfm.py --hybrid: LightFM's own hybrid (item identity + content features) in the plugin's hybrid scenario,
test Recall@k for all, cold and warm items beside the committed records of the plugin's models on the same splits.

Why: LightFM is what practitioners reach for when new and established items share one ranking; the issue asks how
the hybrid FBSM compares with it on the same split. Quality only (no timing): one process, no workers.

Protocol, as the plugin's (docs/models.md, "The hybrid scenario"): the split, the features (the plugin's F: tf-idf,
L2 rows, document frequencies from training items) and the users come from ``recbole_fbsm.quick_start.prepare``
with ``cold_start_scenario: hybrid``. LightFM trains on the training likes of warm items only, over the warm items
only (so no cold item is ever a WARP negative); each warm item's features are its content row plus an identity
column (weight 1, as the hybrid FBSM's ``identity_weight``), a cold item's its content row alone. Candidates are the
warm items plus the evaluated split's cold items, minus the user's earlier likes (training likes at validation,
training and validation likes at test); groups all / cold / warm, a user without a positive in a group left out of
its mean; Recall@k = hits / the user's positives in the group (RecBole's). The epoch is chosen on validation Recall@k
of all items (``--lightfm-epochs`` at most), and the test figures are that epoch's.
"""

import json
import time
from functools import partial
from pathlib import Path

GROUPS = ("all", "cold", "warm")
OURS = ("identity/FBSM", "EASE", "ItemKNNCBF", "blend-ease/HybridBlend")  # rows of the committed records shown beside
USER_BATCH = 1024


def hybrid_split(args, seed, plugin_config):
    """The plugin's hybrid split of ``args.dataset`` for one seed: likes per phase, warm/cold items, features."""
    import warnings

    warnings.filterwarnings("ignore")
    import numpy as np

    from recbole_fbsm.data.features import features_from_config
    from recbole_fbsm.quick_start import prepare

    settings = {"cold_start_scenario": "hybrid", "seed": seed, "split_seed": seed, **args.config}
    config, _, (train_data, valid_data, test_data) = prepare(
        "ItemKNNCBF", args.dataset, config_dict=plugin_config(args, settings)
    )
    train, valid, test = train_data._dataset, valid_data._dataset, test_data._dataset
    normalize = True if config["feature_normalize"] is None else bool(config["feature_normalize"])
    features = features_from_config(train, train.split_items, config, normalize=normalize).matrix.tocsr()

    def likes(part):
        return part.inter_feat[part.uid_field].numpy().astype(np.int64), part.inter_feat[part.iid_field].numpy().astype(
            np.int64
        )

    return {
        "n_users": train.user_num,
        "n_items": train.item_num,
        "warm": np.asarray(train.warm_items),
        "valid_cold": np.asarray(valid.cold_items),
        "test_cold": np.asarray(test.cold_items),
        "train": likes(train),
        "valid": likes(valid),
        "test": likes(test),
        "F": features.astype(np.float32),
    }


def group_recall(scores_of, split, phase, k):
    """Recall@k of all / cold / warm items for ``phase`` ("valid" or "test"), from ``scores_of(users)`` (users x
    items, every item). Vectorised over users in batches; a user's earlier likes are never candidates."""
    import numpy as np
    import scipy.sparse as sp

    n_users, n_items = split["n_users"], split["n_items"]

    def matrix(*phases):
        users = np.concatenate([split[p][0] for p in phases])
        items = np.concatenate([split[p][1] for p in phases])
        return sp.csr_matrix((np.ones(len(users), dtype=np.float32), (users, items)), shape=(n_users, n_items))

    seen = matrix("train") if phase == "valid" else matrix("train", "valid")
    truth = matrix(phase)
    cold = np.zeros(n_items, dtype=bool)
    cold[split[f"{phase}_cold"]] = True
    warm = np.zeros(n_items, dtype=bool)
    warm[split["warm"]] = True
    members = {"all": warm | cold, "cold": cold, "warm": warm}
    sums = {g: 0.0 for g in GROUPS}
    counts = {g: 0 for g in GROUPS}
    users = np.flatnonzero(np.diff(truth.indptr))  # users with a held-out like in this phase
    for start in range(0, len(users), USER_BATCH):
        batch = users[start : start + USER_BATCH]
        scores = np.asarray(scores_of(batch), dtype=np.float64)
        scores[seen[batch].toarray() > 0] = -np.inf
        liked = truth[batch].toarray() > 0
        for group, member in members.items():
            positives = (liked & member).sum(1)
            keep = positives > 0
            if not keep.any():
                continue
            ranked = np.where(member, scores, -np.inf)[keep]
            top = np.argpartition(-ranked, k - 1, axis=1)[:, :k]
            hits = np.take_along_axis((liked & member)[keep], top, axis=1).sum(1)
            sums[group] += float((hits / positives[keep]).sum())
            counts[group] += int(keep.sum())
    return {g: sums[g] / counts[g] if counts[g] else float("nan") for g in GROUPS}


def _scores(user_emb, item_emb, item_bias, users):
    return user_emb[users] @ item_emb.T + item_bias[None, :]


def lightfm_hybrid(args, split, k, lightfm_args):
    """Train LightFM (identity + content) and return the test Recall@k per group at the best validation epoch."""
    import numpy as np
    import scipy.sparse as sp
    from lightfm import LightFM

    warm, n_items = split["warm"], split["n_items"]
    identity = sp.csr_matrix(
        (np.ones(len(warm), dtype=np.float32), (warm, np.arange(len(warm)))), shape=(n_items, len(warm))
    )
    item_features = sp.hstack([split["F"], identity]).tocsr()  # a cold item's identity columns stay empty
    position = np.full(n_items, -1, dtype=np.int64)
    position[warm] = np.arange(len(warm))
    users, items = split["train"]
    interactions = sp.coo_matrix(
        (np.ones(len(users), dtype=np.float32), (users, position[items])), shape=(split["n_users"], len(warm))
    )
    model = LightFM(**{"loss": "warp", "no_components": 64, "random_state": args.seed, **lightfm_args})
    threads = args.lightfm_threads or args.threads or 1
    best = None
    start = time.perf_counter()
    for epoch in range(1, args.lightfm_epochs + 1):
        model.fit_partial(interactions, item_features=item_features[warm], epochs=1, num_threads=threads)
        item_bias, item_emb = model.get_item_representations(item_features)
        _, user_emb = model.get_user_representations()  # a user's bias does not change the user's ranking
        scores_of = partial(_scores, user_emb, item_emb, item_bias)
        valid = group_recall(scores_of, split, "valid", k)
        if best is None or valid["all"] > best["valid"]["all"]:
            best = {"epoch": epoch, "valid": valid, "test": group_recall(scores_of, split, "test", k)}
    best["seconds"] = time.perf_counter() - start
    return best


def ours(seed, k, records_dir):
    """The committed records' test Recall@k per group for one split (seed), by row."""
    rows = {}
    for name in OURS:
        sub, _, model = name.rpartition("/")
        path = Path(records_dir) / sub / f"{model}-{seed}.json"
        if not path.is_file():
            continue
        record = json.loads(path.read_text())
        rows[name] = {
            g: (record["test_result"] if g == "all" else record[f"test_result_{g}"]).get(f"recall@{k}") for g in GROUPS
        }
    return rows


def main_hybrid(args, plugin_config, lightfm_args):
    """The hybrid mode's command: every seed's split, LightFM on it, and the table beside the committed records."""
    k = args.hybrid_topk
    records_dir = Path(args.hybrid_records)
    table = {}
    for seed in args.hybrid_seeds:
        split = hybrid_split(args, seed, plugin_config)
        result = lightfm_hybrid(args, split, k, lightfm_args)
        print(
            f"seed {seed}: LightFM kept epoch {result['epoch']} of {args.lightfm_epochs} on valid Recall@{k} (all "
            f"{result['valid']['all']:.4f}), {result['seconds']:.0f} s",
            flush=True,
        )
        table.setdefault("LightFM (identity + content)", {})[seed] = result["test"]
        for name, values in ours(seed, k, records_dir).items():
            table.setdefault(name, {})[seed] = values
    seeds = list(args.hybrid_seeds)
    print(
        f"\n{args.dataset}, hybrid scenario, test Recall@{k}, mean over splits {seeds} (LightFM run now; the other "
        f"rows read from {records_dir}):\n"
    )
    print(f"| model | splits | Recall@{k} all | Recall@{k} cold | Recall@{k} warm |")
    print("|---|---:|---:|---:|---:|")
    for name, by_seed in table.items():
        cells = [sum(v[g] for v in by_seed.values()) / len(by_seed) for g in GROUPS]
        print(f"| {name} | {len(by_seed)} | " + " | ".join(f"{c:.4f}" for c in cells) + " |")
    if args.json:
        Path(args.json).write_text(
            json.dumps({n: {str(s): v for s, v in t.items()} for n, t in table.items()}, indent=1)
        )
    return 0
