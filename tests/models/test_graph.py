"""LightGCN and NGCF: RecBole's models, with the normalised adjacency that RecBole 1.2.1 builds through a scipy
private (``dok_matrix._update``) built by public constructors instead."""

import numpy as np
import pytest
import scipy.sparse as sp
from helpers import dataset_config, write_dataset

from recbole_fbsm.models.graph import normalized_adjacency
from recbole_fbsm.quick_start import run

pytestmark = pytest.mark.usefixtures("workdir")


def test_the_adjacency_is_the_symmetric_normalisation_of_the_user_item_graph():
    likes = sp.coo_matrix(np.array([[1, 0, 1], [0, 0, 1]], dtype=np.float32))  # 2 users, 3 items (item 1: no like)
    got = normalized_adjacency(likes, 2, 3).to_dense().numpy()
    adjacency = np.zeros((5, 5))
    adjacency[:2, 2:] = likes.toarray()
    adjacency[2:, :2] = likes.toarray().T
    degree = adjacency.sum(1) + 1e-7
    assert np.allclose(got, adjacency / np.sqrt(np.outer(degree, degree)), atol=1e-6)
    assert np.allclose(got, got.T) and np.all(got[3] == 0)


@pytest.mark.parametrize("model", ["LightGCN", "NGCF"])
def test_the_graph_models_train_and_evaluate(tmp_path, quiet, model):
    data = write_dataset(tmp_path, "graph", n_users=40, n_items=80, likes_per_user=(3, 9))
    result = run(model, data.name, config_dict=dataset_config(data, quiet, epochs=2, embedding_size=8))
    assert 0 <= result["test_result"]["recall@10"] <= 1
