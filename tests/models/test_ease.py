"""The plugin's EASE: Steck's closed form as RecBole computes it, in float32 on the run's device."""

import numpy as np
import pytest
import scipy.sparse as sp
import torch
from helpers import dataset_config, write_dataset

from recbole_fbsm.models.ease import ease_weights
from recbole_fbsm.quick_start import prepare

pytestmark = pytest.mark.usefixtures("workdir")


def steck_weights(interactions, reg_weight):
    """The paper's B in float64, computed as RecBole does: a dense inverse, B = P / -diag(P), diag(B) = 0."""
    gram = (interactions.T @ interactions).toarray().astype(np.float64) + reg_weight * np.eye(interactions.shape[1])
    inverse = np.linalg.inv(gram)
    weights = inverse / -np.diag(inverse)
    np.fill_diagonal(weights, 0.0)
    return weights


def test_the_weights_equal_the_closed_form_of_the_paper():
    rng = np.random.default_rng(0)
    interactions = sp.random(60, 40, density=0.15, random_state=rng, format="lil", dtype=np.float32)
    interactions[:, 7] = 0  # an item nobody liked: its column of B is 0
    interactions = interactions.tocsr()
    interactions.data[:] = 1.0
    got = ease_weights(interactions, 5.0, torch.device("cpu")).double().numpy()
    expected = steck_weights(interactions, 5.0)
    assert np.allclose(got, expected, atol=1e-5)
    assert np.all(np.diag(got) == 0) and np.all(got[:, 7] == 0)


def test_full_ranking_and_pairwise_scores_agree_and_equal_the_likes_times_b(tmp_path, quiet):
    data = write_dataset(tmp_path, "ease", n_users=40, n_items=80, likes_per_user=(3, 9))
    _, model, (train, _, _) = prepare("EASE", data.name, config_dict=dataset_config(data, quiet, reg_weight=10.0))
    users = torch.arange(1, train._dataset.user_num)
    full = model.full_sort_predict({model.USER_ID: users}).view(len(users), -1)
    expected = model.interaction_matrix[users.numpy()] @ steck_weights(model.interaction_matrix, 10.0)
    assert np.allclose(full.double().numpy(), expected, atol=1e-4)
    items = torch.randint(0, model.n_items, (len(users),), generator=torch.Generator().manual_seed(0))
    pairs = model.predict({model.USER_ID: users, model.ITEM_ID: items})
    assert torch.allclose(pairs, full[torch.arange(len(users)), items], atol=1e-5)


def test_weights_loaded_from_a_checkpoint_are_the_ones_scored(tmp_path, quiet):
    data = write_dataset(tmp_path, "ease", n_users=40, n_items=80, likes_per_user=(3, 9))
    _, model, _ = prepare("EASE", data.name, config_dict=dataset_config(data, quiet, reg_weight=10.0))
    users = {model.USER_ID: torch.arange(1, 6)}
    before = model.full_sort_predict(users)
    model.load_other_parameter({"item_similarity": model.item_similarity * 2})  # what a checkpoint's loading does
    assert torch.allclose(model.full_sort_predict(users), 2 * before)
