"""Training batches cut on the model's device (data/device_batches.py): whole users, every like once, leak-free
negatives, the same batches run to run."""

import pytest
import torch
from helpers import dataset_config

from recbole_fbsm.data.preparation import train_loader_class
from recbole_fbsm.quick_start import prepare
from recbole_fbsm.runtime import distributed
from recbole_fbsm.training.trainer import get_trainer

DYNAMIC = {"distribution": "uniform", "sample_num": 1, "alpha": 1.0, "dynamic": True, "candidate_num": 5}
UNIFORM = {"distribution": "uniform", "sample_num": 1, "alpha": 1.0, "dynamic": False, "candidate_num": 0}
WARM = {"warm_embedding_size": 8, "warm_epochs": 3, "hidden_sizes": [16, 8]}  # DropoutNet, small and quick


def prepared(data, model="FBSM", **overrides):
    settings = dict(train_batch_size=64, rank=3, init_std=0.3)
    settings.update(overrides)
    return prepare(model, data.name, config_dict=dataset_config(data, **settings))


def test_the_device_loader_serves_the_plugins_models(toy):
    for model in ("FBSM", "UFSM"):
        _, _, (train_data, _, _) = prepared(toy, model)
        assert type(train_data).__name__ == "DeviceUserGroupedTrainDataLoader", model
    _, _, (train_data, _, _) = prepared(toy, train_batch_by_user=False)
    assert type(train_data).__name__ == "DeviceTrainDataLoader"
    _, _, (train_data, _, _) = prepared(toy, "DropoutNet", **WARM)
    assert type(train_data).__name__ == "DeviceTrainDataLoader"
    _, _, (train_data, _, _) = prepare("BPR", toy.name, config_dict=dataset_config(toy, train_batch_by_user=True))
    assert type(train_data).__name__ == "UserGroupedTrainDataLoader", "RecBole's models read more than three columns"


@pytest.mark.parametrize(
    "negatives, by_user",
    [
        (DYNAMIC, True),
        (UNIFORM, True),
        ({**UNIFORM, "sample_num": 2}, True),
        ({**UNIFORM, "distribution": "popularity"}, True),
        (DYNAMIC, False),
        ({**UNIFORM, "sample_num": 2}, False),
    ],
)
def test_batches_cover_every_like_once_and_never_leave_the_training_split(toy, negatives, by_user):
    config, model, (train_data, valid_data, test_data) = prepared(
        toy, train_neg_sample_args=negatives, train_batch_by_user=by_user
    )
    dataset = train_data._dataset
    likes = sorted(zip(dataset.inter_feat[dataset.uid_field].tolist(), dataset.inter_feat[dataset.iid_field].tolist()))
    train_items = set(dataset.split_items.tolist())
    other_items = set(valid_data._dataset.split_items.tolist()) | set(test_data._dataset.split_items.tolist())
    times = int(negatives["sample_num"])
    plans = []
    for _ in range(2):
        seen, plan = [], []
        batches = list(train_data)
        assert len(batches) == len(train_data)
        for batch in batches:
            users, positives, negative_items = batch[model.USER_ID], batch[model.ITEM_ID], batch[model.NEG_ITEM_ID]
            n = len(users) // times
            assert torch.equal(users, users[:n].repeat(times)) and torch.equal(positives, positives[:n].repeat(times))
            if times == 1 and by_user:
                distinct = torch.unique(users)
                in_batch = torch.bincount(users, minlength=model.n_users).index_select(0, distinct)
                all_likes = (model.R.indptr[distinct + 1] - model.R.indptr[distinct]).long()
                assert torch.equal(in_batch, all_likes), "a user's likes split over two batches"
            if negatives["dynamic"]:  # the model picks the best scored of each like's candidates
                assert negative_items.shape == (len(users), negatives["candidate_num"])
                users, negative_items = users[:, None].expand_as(negative_items).reshape(-1), negative_items.reshape(-1)
            assert set(negative_items.tolist()) <= train_items and not set(negative_items.tolist()) & other_items
            assert not set(positives.tolist()) & other_items
            assert not bool(model.R.contains(users, negative_items).any()), "a negative the user liked"
            seen += zip(batch[model.USER_ID][:n].tolist(), positives[:n].tolist())
            plan.append(tuple(batch[model.USER_ID][:n].tolist()))
        assert sorted(seen) == likes, "every training like exactly once per epoch"
        plans.append(plan)
    assert plans[0] != plans[1], "reshuffled every epoch"


def test_negatives_of_users_with_dislikes_are_their_dislikes(toy):
    _, model, (train_data, _, _) = prepared(toy, train_neg_sample_args=UNIFORM)
    dataset = train_data._dataset
    disliked = {}
    dislikes = dataset.dislike_feat
    for user, item in zip(dislikes[dataset.uid_field].tolist(), dislikes[dataset.iid_field].tolist()):
        disliked.setdefault(user, set()).add(item)
    checked = 0
    for batch in train_data:
        for user, negative in zip(batch[model.USER_ID].tolist(), batch[model.NEG_ITEM_ID].tolist()):
            if user in disliked:
                assert negative in disliked[user]
                checked += 1
    assert checked > 20


@pytest.mark.parametrize("model_name, negatives", [("FBSM", DYNAMIC), ("UFSM", UNIFORM)])
def test_a_seeded_epoch_is_the_same_run_to_run(toy, model_name, negatives):
    """Two runs with the same seed cut the same batches (users, positives and negatives), and the same
    training steps from them give the same bits."""
    epochs = []
    for _ in range(2):
        config, model, (train_data, _, _) = prepared(toy, model_name, train_neg_sample_args=negatives)
        trainer = get_trainer(config["MODEL_TYPE"], config["model"])(config, model)
        batches = [(b[model.USER_ID], b[model.ITEM_ID], b[model.NEG_ITEM_ID]) for b in train_data]
        trainer._train_epoch(train_data, 0)
        epochs.append((batches, [p.detach().clone() for p in model.parameters()]))
    (first, first_params), (second, second_params) = epochs
    assert len(first) == len(second) > 1
    for ours, theirs in zip(first, second):
        assert all(torch.equal(a, b) for a, b in zip(ours, theirs))
    assert all(torch.equal(a, b) for a, b in zip(first_params, second_params))


def test_each_rank_cuts_its_share_of_every_batch(toy, monkeypatch):
    """With two ranks, each rank's device batches are its users' share of every batch of the one-process plan:
    the same number of steps on both ranks, disjoint users, and every like once across the ranks."""
    config, model, (train_data, _, _) = prepared(toy, train_neg_sample_args=UNIFORM, train_batch_size=32)
    dataset = train_data._dataset
    likes = sorted(zip(dataset.inter_feat[dataset.uid_field].tolist(), dataset.inter_feat[dataset.iid_field].tolist()))
    shares = []
    for rank in range(2):
        monkeypatch.setattr(distributed, "world", lambda rank=rank: (rank, 2))
        loader_class = train_loader_class(config, True, train_data._sampler)
        loader = loader_class(config, dataset, train_data._sampler, shuffle=True)
        loader.get_model(model)
        shares.append([(b[model.USER_ID].tolist(), b[model.ITEM_ID].tolist()) for b in loader])
    assert len(shares[0]) == len(shares[1]) > 1
    seen = []
    for (users_0, items_0), (users_1, items_1) in zip(*shares):
        assert users_0 and users_1 and not set(users_0) & set(users_1)
        seen += zip(users_0 + users_1, items_0 + items_1)
    assert sorted(seen) == likes
