"""benchmarks/lightfm_hybrid.py scores LightFM outside the plugin: its numpy Recall@k per group must be the plugin's
own hybrid evaluation, or LightFM's row beside ours would compare different metrics."""

import argparse

import lightfm_hybrid
import numpy as np
import pytest
import torch
from bench_lightfm import plugin_config
from helpers import dataset_config, write_dataset
from recbole.model.abstract_recommender import GeneralRecommender
from recbole.utils import InputType

from recbole_fbsm.quick_start import prepare
from recbole_fbsm.training.trainer import get_trainer

pytestmark = pytest.mark.usefixtures("workdir")

SETTINGS = {"cold_start_scenario": "hybrid", "metrics": ["Recall"], "topk": [5], "valid_metric": "recall@5"}


class FixedScores(GeneralRecommender):
    """Scores every item from a fixed users x items matrix, evaluated by the plugin's trainer."""

    input_type = InputType.POINTWISE
    scores_cold_items = True

    def __init__(self, config, dataset, scores):
        super().__init__(config, dataset)
        self.scores = torch.as_tensor(scores, dtype=torch.float64)
        self.unused = torch.nn.Parameter(torch.zeros(1))

    def full_sort_predict(self, interaction):
        return self.scores[interaction[self.USER_ID].long()].reshape(-1)


@pytest.mark.parametrize("phase", ["valid", "test"])
def test_the_benchmarks_group_recall_is_the_plugins(tmp_path, phase):
    data = write_dataset(tmp_path, "hyb", n_users=50, n_items=80, likes_per_user=(4, 14))
    config_dict = {**dataset_config(data), **SETTINGS, "seed": 2020, "split_seed": 2020}
    args = argparse.Namespace(
        data_path=None, threads=1, config_json="{}", seed=2020, dataset=data.name, config=config_dict
    )
    split = lightfm_hybrid.hybrid_split(args, 2020, plugin_config)
    # popularity plus noise: a ranking with signal, and no ties (the two break ties differently)
    popularity = np.bincount(split["train"][1], minlength=split["n_items"]).astype(np.float64)
    scores = popularity[None, :] + np.random.default_rng(0).normal(0, 2.0, size=(split["n_users"], split["n_items"]))
    ours = lightfm_hybrid.group_recall(lambda users: scores[users], split, phase, 5)

    config, _, (train_data, valid_data, test_data) = prepare(
        "ItemKNNCBF", data.name, config_dict=plugin_config(args, config_dict)
    )
    trainer = get_trainer(config["MODEL_TYPE"], "ItemKNNCBF")(config, FixedScores(config, train_data._dataset, scores))
    plugin_all = trainer.evaluate(valid_data if phase == "valid" else test_data, load_best_model=False)
    plugin = {"all": plugin_all["recall@5"], **{g: r["recall@5"] for g, r in trainer.group_results.items()}}
    assert set(plugin) == {"all", "cold", "warm"}
    for group in ("all", "cold", "warm"):
        assert ours[group] == pytest.approx(plugin[group], abs=1e-4), group  # the plugin rounds to 4 digits
    assert len({round(v, 4) for v in ours.values()}) == 3  # three different groups, not one figure three times
