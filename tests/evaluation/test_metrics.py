"""The paper's DCG@n and Rec@n against hand-computed values, and their use through RecBole."""

import math

import pytest
import torch
from recbole.evaluator.collector import DataStruct

from recbole_fbsm.evaluation.metrics import DCG, Rec
from recbole_fbsm.quick_start import run


def struct(hits, n_likes):
    data = DataStruct()
    data.set("rec.topk", torch.cat([torch.tensor(hits, dtype=torch.int), torch.tensor(n_likes)[:, None]], dim=1))
    return data


def test_dcg_and_rec_by_hand():
    config = {"topk": [1, 3], "metric_decimal_place": 6}
    # user 0: hits at ranks 1 and 3, 5 likes; user 1: hit at rank 2, 1 like
    data = struct([[1, 0, 1], [0, 1, 0]], [5, 1])
    dcg = DCG(config).calculate_metric(data)
    assert dcg["dcg@1"] == pytest.approx((1.0 + 0.0) / 2)
    user0 = (1 + 1 / math.log2(3)) / 3
    user1 = (1 / math.log2(2)) / 3
    assert dcg["dcg@3"] == pytest.approx(round((user0 + user1) / 2, 6))
    rec = Rec(config).calculate_metric(data)
    assert rec["rec@1"] == pytest.approx((1 / 1 + 0 / 1) / 2)
    assert rec["rec@3"] == pytest.approx(round((2 / 3 + 1 / 1) / 2, 6))  # min(3, 5) = 3; min(3, 1) = 1


def test_paper_metrics_work_as_valid_metric(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = run(
        "Pop",
        "ml-100k",
        config_dict={
            "metrics": ["Rec", "DCG", "Recall"],
            "valid_metric": "Rec@10",
            "checkpoint_dir": str(tmp_path),
            "state": "ERROR",
        },
    )
    assert set(result["test_result"]) == {"rec@10", "dcg@10", "recall@10"}
    assert result["best_valid_score"] == result["best_valid_result"]["rec@10"]
    assert result["test_result"]["rec@10"] >= result["test_result"]["recall@10"] - 1e-9
