"""The warm collaborative backbone of DropoutNet, Heater, ALDI (and FBSM's alignment): BPR-MF on the training
split only, trained here (``warm_*`` settings, in a forked RNG: the caller's random stream is untouched) or read
from ``warm_checkpoint``, which must come from the same dataset and item split (else it may have learned from this
run's validation or test items). Rows of non-training items and of users without likes are zero: a zero row
cannot carry an item's identity into a cold score.
"""

import os
import time
from logging import getLogger

import torch

from recbole_fbsm.config.schema import setting
from recbole_fbsm.data.features import training_items
from recbole_fbsm.errors import ColdStartError
from recbole_fbsm.storage.safe_files import PickledFileError, load_checkpoint

# keys of the two embedding tables in the checkpoints this module reads
CHECKPOINT_KEYS = (
    ("warm_user_embedding", "warm_item_embedding"),  # models built on this module
    ("user_embedding.weight", "item_embedding.weight"),  # RecBole's BPR and similar MF models
)


def training_item_mask(train_dataset):
    """Bool tensor (n_items,): True for the training split's items (items with training likes when the
    dataset carries no split)."""
    mask = torch.zeros(train_dataset.item_num, dtype=torch.bool)
    mask[torch.as_tensor(training_items(train_dataset))] = True
    return mask


def warm_embeddings(config, train_dataset):
    """(user_emb, item_emb) float32 tensors on ``config["device"]``; see the module docstring."""
    path = setting(config, "warm_checkpoint")
    if path:
        user_emb, item_emb = load_warm_checkpoint(str(path), config, train_dataset)
    else:
        user_emb, item_emb = train_bpr(config, train_dataset)
    user_emb, item_emb = user_emb.float(), item_emb.float()  # then zero where nothing was learned
    items = training_item_mask(train_dataset).to(item_emb.device)
    users = torch.zeros(train_dataset.user_num, dtype=torch.bool)
    users[torch.as_tensor(train_dataset.inter_feat[train_dataset.uid_field].numpy(), dtype=torch.long)] = True
    user_emb, item_emb = user_emb * users[:, None].to(user_emb), item_emb * items[:, None].to(item_emb.dtype)
    return user_emb.detach().to(config["device"]), item_emb.detach().to(config["device"])


# --------------------------------------------------------------------------------------- training
def train_bpr(config, train_dataset):
    """RecBole's BPR trained on ``train_dataset.inter_feat`` (the training likes) only."""
    from recbole.model.general_recommender.bpr import BPR

    size = int(setting(config, "warm_embedding_size"))
    epochs = int(setting(config, "warm_epochs"))
    batch_size = int(setting(config, "warm_batch_size"))
    learning_rate = float(setting(config, "warm_learning_rate"))
    reg = float(setting(config, "warm_reg"))
    device = config["device"]
    users = torch.as_tensor(train_dataset.inter_feat[train_dataset.uid_field].numpy(), dtype=torch.long)
    items = torch.as_tensor(train_dataset.inter_feat[train_dataset.iid_field].numpy(), dtype=torch.long)
    pool = torch.nonzero(training_item_mask(train_dataset)).squeeze(1)
    n_items = train_dataset.item_num
    liked_keys = torch.unique(users * n_items + items)  # sorted
    started = time.perf_counter()
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(int(config["seed"]))
        generator = torch.Generator().manual_seed(int(config["seed"]) + 1)
        # the few settings RecBole's BPR reads, from the run's config with the warm rank
        keys = ("USER_ID_FIELD", "ITEM_ID_FIELD", "NEG_PREFIX", "device")
        model = BPR({**{key: config[key] for key in keys}, "embedding_size": size}, train_dataset).to(device)
        optimizer = _adam(model.parameters(), learning_rate)
        model.train()
        for _ in range(epochs):
            order = torch.randperm(len(users), generator=generator)
            negatives = _draw_negatives(users, pool, liked_keys, n_items, generator)
            for start in range(0, len(order), batch_size):
                batch = order[start : start + batch_size]
                u, i, j = (t.index_select(0, batch).to(device) for t in (users, items, negatives))
                u_e, i_e, j_e = model.user_embedding(u), model.item_embedding(i), model.item_embedding(j)
                difference = (u_e * (i_e - j_e)).sum(-1)
                loss = -torch.nn.functional.logsigmoid(difference).mean()
                loss = loss + reg * (u_e.pow(2).sum() + i_e.pow(2).sum() + j_e.pow(2).sum()) / len(batch)
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
    getLogger().info(
        f"warm backbone: BPR-MF (d={size}) trained on {len(users)} training likes of {len(pool)} training items, "
        f"{epochs} epochs, {time.perf_counter() - started:.1f} s"
    )
    return model.user_embedding.weight.detach(), model.item_embedding.weight.detach()


def _adam(parameters, learning_rate):
    """Torch's fused Adam where it exists (measured 4 times faster than the default loop and than SparseAdam on
    citeulike-t's tables), the plain one otherwise."""
    parameters = list(parameters)
    try:
        return torch.optim.Adam(parameters, lr=learning_rate, fused=True)
    except (RuntimeError, ValueError, TypeError):
        return torch.optim.Adam(parameters, lr=learning_rate)


def _draw_negatives(users, pool, liked_keys, n_items, generator, rounds=8):
    """One negative per like, uniform among training items, redrawn (a few rounds) where the user liked it."""
    negatives = pool[torch.randint(len(pool), (len(users),), generator=generator)]
    for _ in range(rounds):
        keys = users * n_items + negatives
        found = torch.searchsorted(liked_keys, keys).clamp_(max=len(liked_keys) - 1)
        clash = liked_keys[found] == keys
        if not bool(clash.any()):
            break
        redraw = pool[torch.randint(len(pool), (int(clash.sum()),), generator=generator)]
        negatives = negatives.masked_scatter(clash, redraw)
    return negatives


# -------------------------------------------------------------------------------------- checkpoint
def load_warm_checkpoint(path, config, train_dataset):
    """The two embedding tables of a saved checkpoint, after checking it shares this run's item split."""
    if not os.path.isfile(path):
        raise ColdStartError(f"warm_checkpoint: {path} not found (expected a .pth checkpoint, e.g. of BPR).")
    try:
        state = load_checkpoint(path)
    except PickledFileError:
        raise ColdStartError(
            f"warm_checkpoint: {path} holds pickled Python objects (a checkpoint of RecBole itself, or of recbole-fbsm "
            "before 0.2): loading it could run any code, so it is not loaded. Train the warm model with this plugin "
            "(run_recbole.py --model=BPR --dataset=... --seed=...), whose checkpoints hold tensors and plain values "
            "only."
        ) from None
    except ColdStartError as error:
        raise ColdStartError(f"warm_checkpoint: {error}") from None
    if not isinstance(state, dict) or "state_dict" not in state:
        raise ColdStartError(f"warm_checkpoint: {path} is not a RecBole checkpoint (no state_dict).")
    weights = state["state_dict"]
    for user_key, item_key in CHECKPOINT_KEYS:
        if user_key in weights and item_key in weights:
            user_emb, item_emb = weights[user_key], weights[item_key]
            break
    else:
        raise ColdStartError(
            f"warm_checkpoint: {path} has no user/item embedding tables; expected "
            + " or ".join(f"{u!r} and {i!r}" for u, i in CHECKPOINT_KEYS)
            + " (e.g. a BPR checkpoint)."
        )
    expected = (train_dataset.user_num, train_dataset.item_num)
    if (user_emb.shape[0], item_emb.shape[0]) != expected or user_emb.shape[1] != item_emb.shape[1]:
        raise ColdStartError(
            f"warm_checkpoint: {path} has {user_emb.shape[0]} users x {item_emb.shape[0]} items; this run's dataset "
            f"has {expected[0]} x {expected[1]} (another dataset or other filters?)."
        )
    _check_same_split(state.get("config"), config, path)
    return user_emb.float().cpu(), item_emb.float().cpu()


def _check_same_split(saved, config, path):
    """The checkpoint must be trained on this run's training split: same dataset, item split, seed, ratios."""
    if saved is None:
        raise ColdStartError(f"warm_checkpoint: {path} has no config, so its item split cannot be checked.")

    def describe(c):
        args = c["eval_args"] or {}
        group_by = str(args.get("group_by", "")).lower()
        seed = c["split_seed"] if c["split_seed"] is not None else c["seed"]
        ratios = (args.get("split") or {}).get("RS")
        return c["dataset"], group_by, seed, list(ratios) if ratios else None

    ours, theirs = describe(config), describe(saved)
    if theirs != ours or theirs[1] != "item":
        raise ColdStartError(
            f"warm_checkpoint: {path} was trained on (dataset, group_by, split seed, ratios) = {theirs}, this run "
            f"uses {ours}; a warm model from another split may have learned from this run's validation/test items. "
            "Train it with the same dataset, eval_args and seed (or split_seed), e.g. "
            "run_recbole.py --model=BPR --dataset=... --seed=..."
        )
