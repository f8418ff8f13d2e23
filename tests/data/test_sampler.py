"""The training sampler: no leak of validation/test items, explicit dislikes first, never hangs."""

import threading
from collections import defaultdict

import numpy as np
import pytest
import torch
from helpers import dataset_config, write_dataset
from recbole.utils import init_seed

from recbole_fbsm.config.cold_start_config import ColdStartConfig
from recbole_fbsm.data import create_dataset, data_preparation

pytestmark = pytest.mark.usefixtures("workdir")

N_DRAWS = 60  # draws per training like: ~10k (toy) sampled triplets per test


def prepare_data(data, model="BPR", distribution="uniform", **overrides):
    config_dict = dataset_config(
        data,
        train_neg_sample_args={
            "distribution": distribution,
            "sample_num": 1,
            "alpha": 1.0,
            "dynamic": False,
            "candidate_num": 0,
        },
        **overrides,
    )
    config = ColdStartConfig(model=model, dataset=data.name, config_dict=config_dict)
    init_seed(config["seed"], True)  # the sampler draws from numpy's global generator
    dataset = create_dataset(config)
    return config, data_preparation(config, dataset)


def by_user(feat, uid, iid):
    result = defaultdict(set)
    if feat is not None:
        for u, i in zip(feat[uid].numpy().tolist(), feat[iid].numpy().tolist()):
            result[u].add(i)
    return result


def with_timeout(function, seconds=30):
    """Run ``function`` in a daemon thread; fail (instead of hanging the suite) if it does not return."""
    outcome = {}

    def target():
        try:
            outcome["value"] = function()
        except BaseException as error:  # re-raised in the test thread
            outcome["error"] = error

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), f"sampling did not finish in {seconds}s (the sampler hangs)"
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]


def sample_many(train_data, draws=N_DRAWS):
    """(users, negatives): ``draws`` negatives for every training like, through the train sampler."""
    part = train_data._dataset
    users = part.inter_feat[part.uid_field].numpy()
    items = part.inter_feat[part.iid_field].numpy()
    negatives = train_data._sampler.sample_by_user_ids(users, items, draws).numpy()
    return np.tile(users, draws), negatives


def triplets_from_loader(train_data, epochs=3):
    """(users, positives, negatives) of the BPR batches the train dataloader really yields."""
    users, positives, negatives = [], [], []
    for _ in range(epochs):
        for batch in train_data:
            users.append(batch["user_id"].numpy())
            positives.append(batch["item_id"].numpy())
            negatives.append(batch["neg_item_id"].numpy())
    return np.concatenate(users), np.concatenate(positives), np.concatenate(negatives)


def check_negatives(train_data, valid_data, test_data, users, negatives):
    """The sampler's contract on the train split; returns per-user sets (dislike users, others)."""
    train, valid, test = train_data._dataset, valid_data._dataset, test_data._dataset
    pool = set(train.split_items.tolist())
    held_out = set(valid.split_items.tolist()) | set(test.split_items.tolist())
    uid, iid = train.uid_field, train.iid_field

    assert len(negatives) == len(users) >= 10000
    drawn = set(np.unique(negatives).tolist())
    assert not (drawn & held_out), "a validation/test item was drawn as a training negative"
    assert drawn <= pool, "negatives must be training items (never PAD, never an item without interactions)"

    likes = by_user(train.inter_feat, uid, iid)
    dislikes = by_user(train.dislike_feat, uid, iid)
    negatives_of = defaultdict(list)
    for u, n in zip(users.tolist(), negatives.tolist()):
        negatives_of[u].append(n)
    with_dislikes = [u for u in negatives_of if dislikes[u]]
    without = [u for u in negatives_of if not dislikes[u]]
    for u in with_dislikes:
        assert set(negatives_of[u]) <= dislikes[u], f"user {u}: negatives outside their training dislikes"
    for u in without:
        assert not (set(negatives_of[u]) & likes[u]), f"user {u}: a liked item was drawn as a negative"
    return negatives_of, likes, dislikes, with_dislikes, without


@pytest.mark.parametrize("distribution", ["uniform", "popularity"])
def test_negatives_are_training_items_and_dislikes_come_first(toy, distribution):
    _, (train_data, valid_data, test_data) = prepare_data(toy, distribution=distribution)
    users, negatives = sample_many(train_data)
    negatives_of, likes, dislikes, with_dislikes, without = check_negatives(
        train_data, valid_data, test_data, users, negatives
    )
    assert with_dislikes and without, "the toy data must have users with and without training dislikes"
    # with ~60 draws per like, every training dislike of a user shows up: "exactly among" them, all of them
    for u in with_dislikes:
        assert set(negatives_of[u]) == dislikes[u]

    if distribution == "uniform":
        # exactly uniform among the training items a user has not liked
        pool = set(train_data._dataset.split_items.tolist())
        u = max(without, key=lambda v: len(negatives_of[v]))
        counts = np.array([negatives_of[u].count(i) for i in sorted(pool - likes[u])])
        assert counts.sum() == len(negatives_of[u])
        expected = counts.sum() / len(counts)
        assert (counts > 0).all()
        chi2 = ((counts - expected) ** 2 / expected).sum()
        assert chi2 < len(counts) + 6 * np.sqrt(2 * len(counts)), (
            f"not uniform: chi2={chi2:.1f} for {len(counts)} items"
        )


def test_popularity_sampling_follows_training_popularity(toy):
    _, (train_data, _, _) = prepare_data(toy, distribution="popularity", seed=3)
    _, (uniform_data, _, _) = prepare_data(toy, distribution="uniform", seed=3)
    train = train_data._dataset
    pool = train.split_items
    popularity = np.bincount(train.inter_feat["item_id"].numpy(), minlength=train.item_num)[pool]
    dislikers = set(train.dislike_feat["user_id"].numpy().tolist())

    def negative_counts(data):
        users, negatives = sample_many(data)
        keep = ~np.isin(users, list(dislikers))  # dislikes are drawn uniformly in both modes
        return np.bincount(negatives[keep], minlength=train.item_num)[pool]

    def rank_correlation(a, b):
        return np.corrcoef(np.argsort(np.argsort(a)), np.argsort(np.argsort(b)))[0, 1]

    assert rank_correlation(negative_counts(train_data), popularity) > 0.6
    assert rank_correlation(negative_counts(uniform_data), popularity) < 0.3


def test_dataloader_triplets_obey_the_same_rules(toy):
    _, (train_data, valid_data, test_data) = prepare_data(toy)
    users, positives, negatives = triplets_from_loader(train_data, epochs=2)
    part = train_data._dataset
    assert len(users) == 2 * len(part.inter_feat)
    liked = set(zip(part.inter_feat["user_id"].numpy().tolist(), part.inter_feat["item_id"].numpy().tolist()))
    assert set(zip(users.tolist(), positives.tolist())) <= liked
    repeated = np.tile(users, 30)
    more = train_data._sampler.sample_by_user_ids(repeated, np.tile(positives, 30), 1).numpy()
    check_negatives(
        train_data, valid_data, test_data, np.concatenate([users, repeated]), np.concatenate([negatives, more])
    )


def test_implicit_data_negatives_are_unliked_training_items(tmp_path):
    data = write_dataset(tmp_path, "implicit", implicit=True)
    _, (train_data, valid_data, test_data) = prepare_data(data)
    users, negatives = sample_many(train_data)
    _, _, _, with_dislikes, without = check_negatives(train_data, valid_data, test_data, users, negatives)
    assert not with_dislikes and without


@pytest.mark.parametrize("distribution", ["uniform", "popularity"])
@pytest.mark.parametrize("implicit", [False, True])
def test_user_who_liked_every_training_item_does_not_hang(tmp_path, distribution, implicit):
    data = write_dataset(tmp_path, "greedy", implicit=implicit, user_liking_everything=True)
    _, (train_data, valid_data, test_data) = with_timeout(lambda: prepare_data(data, distribution=distribution))
    train = train_data._dataset
    greedy = int(train.field2token_id["user_id"]["u_all"])
    pool = set(train.split_items.tolist())
    liked = set(train.inter_feat["item_id"].numpy()[train.inter_feat["user_id"].numpy() == greedy].tolist())
    assert liked == pool, "u_all must have liked every training item"

    negatives = with_timeout(
        lambda: train_data._sampler.sample_by_user_ids(np.full(5000, greedy), np.ones(5000, dtype=np.int64), 1).numpy()
    )
    assert set(negatives.tolist()) <= pool  # no true negative exists: any training item, but never a held-out one
    # a whole epoch through the dataloader finishes too, and the other users keep their guarantees
    users, _, loader_negatives = with_timeout(lambda: triplets_from_loader(train_data, epochs=1))
    others = users != greedy
    more_users, more_negatives = sample_many(train_data)
    keep = more_users != greedy
    check_negatives(
        train_data,
        valid_data,
        test_data,
        np.concatenate([users[others], more_users[keep]]),
        np.concatenate([loader_negatives[others], more_negatives[keep]]),
    )


def test_used_ids_and_liked_keys_are_read_from_the_splits_when_asked(toy):
    """Each phase's used ids are the (user, item) likes of its split and the splits before it, read as sorted
    keys (the evaluation loaders); the keys of a phase's likes that only
    the popularity draw reads are not held for a uniform sampler, and equal the likes when derived."""
    from recbole_fbsm.data.sampler import DeviceNegativeSampler, liked_keys, sorted_unique

    _, (train_data, valid_data, test_data) = prepare_data(toy)
    parts = [d._dataset for d in (train_data, valid_data, test_data)]
    n_items = parts[0].item_num
    for k, loader in enumerate((train_data, valid_data, test_data)):
        sampler = loader._sampler
        expected = sorted_unique(
            np.concatenate(
                [
                    p.inter_feat["user_id"].numpy().astype(np.int64) * n_items + p.inter_feat["item_id"].numpy()
                    for p in parts[: k + 1]
                ]
            )
        )
        assert np.array_equal(liked_keys(sampler.datasets[: sampler.phases.index(sampler.phase) + 1]), expected)
    sampler = train_data._sampler
    likes = sampler._likes["train"]
    assert "liked_keys" not in vars(likes)  # a cached_property, not derived yet
    device = DeviceNegativeSampler(sampler, "cpu", torch.Generator().manual_seed(0))
    assert device.liked_keys is None and "liked_keys" not in vars(likes)  # uniform: never derived
    pool = sampler._pools["train"]
    train = parts[0].inter_feat
    in_pool = np.isin(train["item_id"].numpy(), pool)
    keys = sorted_unique(
        train["user_id"].numpy()[in_pool].astype(np.int64) * (len(pool) + 1)
        + np.searchsorted(pool, train["item_id"].numpy()[in_pool])
    )
    assert np.array_equal(likes.liked_keys, keys)
