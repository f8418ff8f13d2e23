"""The item split: disjoint, complete, lossless, seeded, independent of file order."""

from collections import Counter

import numpy as np
import pytest
from helpers import dataset_config, split_by_token, tokens_of, write_dataset

from recbole_fbsm.config.cold_start_config import ColdStartConfig
from recbole_fbsm.data import create_dataset

pytestmark = pytest.mark.usefixtures("workdir")


def build(data, model="BPR", **overrides):
    config = ColdStartConfig(model=model, dataset=data.name, config_dict=dataset_config(data, **overrides))
    dataset = create_dataset(config)
    return dataset, dataset.build()


def rows_of(part, feat, label):
    users = tokens_of(part, part.uid_field, feat[part.uid_field].numpy())
    items = tokens_of(part, part.iid_field, feat[part.iid_field].numpy())
    return [(u, i, label) for u, i in zip(users, items)]


def test_splits_are_disjoint_cover_interacted_items_and_keep_every_interaction(toy):
    dataset, built = build(toy)
    assert [part.phase for part in built] == ["train", "valid", "test"]

    split_sets = [set(part.split_items.tolist()) for part in built]
    assert all(split_sets), "every split needs items"
    assert (
        not (split_sets[0] & split_sets[1])
        and not (split_sets[0] & split_sets[2])
        and not (split_sets[1] & split_sets[2])
    )

    # every item with an interaction is in exactly one split; items without interactions in none
    assignment = split_by_token(built)
    assert set(assignment) == toy.interacted_items
    without_inter = set(toy.item_tokens) - toy.interacted_items
    assert without_inter and not (without_inter & set(assignment))

    # every interaction of the files is kept, once, as a like or a dislike of its item's split
    kept = []
    for part, items in zip(built, split_sets):
        assert set(part.inter_feat[part.iid_field].numpy().tolist()) <= items
        assert (part.inter_feat[part.label_field].numpy() == 1).all(), "inter_feat holds likes only"
        kept += rows_of(part, part.inter_feat, "like")
        if part.dislike_feat is not None:
            assert set(part.dislike_feat[part.iid_field].numpy().tolist()) <= items
            assert (part.dislike_feat[part.label_field].numpy() == 0).all()
            kept += rows_of(part, part.dislike_feat, "dislike")
    expected = [(u, i, "like") for u, i in toy.likes()] + [(u, i, "dislike") for u, i in toy.dislikes()]
    assert Counter(kept) == Counter(expected)
    assert len(kept) == len(toy.rows)


def test_implicit_data_every_interaction_is_a_like(tmp_path):
    data = write_dataset(tmp_path, "implicit", implicit=True)
    _, built = build(data)
    kept = [row[:2] for part in built for row in rows_of(part, part.inter_feat, None)]
    assert Counter(kept) == Counter(data.likes())
    assert all(part.dislike_feat is None for part in built)


@pytest.mark.parametrize("ratios", [[0.6, 0.2, 0.2], [0.5, 0.3, 0.2]])
def test_split_sizes_follow_the_ratios(toy, ratios):
    _, built = build(toy, eval_args={"split": {"RS": ratios}})
    n = len(toy.interacted_items)
    sizes = [len(part.split_items) for part in built]
    assert sum(sizes) == n
    assert sizes[1] == round(ratios[1] * n) and sizes[2] == round(ratios[2] * n)


def test_partial_eval_args_keep_the_item_split(toy):
    """A user setting only eval_args.mode must not switch the item split off."""
    dataset, built = build(toy, eval_args={"mode": "full"})
    assert dataset.config.item_split
    assert set(split_by_token(built)) == toy.interacted_items


def test_same_seed_same_split_other_seed_other_split(toy):
    _, first = build(toy, seed=11)
    _, again = build(toy, seed=11)
    _, other = build(toy, seed=12)
    assert split_by_token(first) == split_by_token(again)
    assert split_by_token(first) != split_by_token(other)
    # split_seed, when given, decides alone (the training seed can change without moving items)
    _, pinned_a = build(toy, seed=11, split_seed=5)
    _, pinned_b = build(toy, seed=12, split_seed=5)
    assert split_by_token(pinned_a) == split_by_token(pinned_b)
    assert split_by_token(pinned_a) != split_by_token(first)


def test_split_does_not_depend_on_file_order(tmp_path):
    original = write_dataset(tmp_path, "ordered", seed=3)
    shuffled = write_dataset(tmp_path, "shuffled", seed=3, rows_order_seed=99)
    assert Counter(original.rows) == Counter(shuffled.rows) and original.rows != shuffled.rows

    dataset_a, built_a = build(original)
    dataset_b, built_b = build(shuffled)
    # the rows are put in a canonical order before RecBole numbers them: the ids agree too
    ids_a = dict(zip(dataset_a.field2id_token["item_id"][1:], range(1, dataset_a.item_num)))
    ids_b = dict(zip(dataset_b.field2id_token["item_id"][1:], range(1, dataset_b.item_num)))
    assert ids_a == ids_b
    assert split_by_token(built_a) == split_by_token(built_b)
    # and so are the likes of each split, by external token
    for part_a, part_b in zip(built_a, built_b):
        assert Counter(rows_of(part_a, part_a.inter_feat, 1)) == Counter(rows_of(part_b, part_b.inter_feat, 1))


def test_splits_share_vocabulary_and_item_features(toy):
    dataset, built = build(toy)
    for part in built:
        assert part.field2id_token is dataset.field2id_token or np.array_equal(
            part.field2id_token["item_id"], dataset.field2id_token["item_id"]
        )
        assert part.item_num == dataset.item_num
        assert part.item_feat is dataset.item_feat
