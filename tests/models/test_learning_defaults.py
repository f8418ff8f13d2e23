"""FBSM and UFSM learn with their defaults (no dataset property file, no tuning), and a run says which epoch it
kept and what that gained over the untrained (CoSim) start."""

import pytest
from synthetic import topic_text

from recbole_fbsm.quick_start import run

QUIET = {"state": "ERROR", "show_progress": False}


@pytest.fixture(scope="module")
def topics(tmp_path_factory):
    """Generated text whose signal lies in word weights (noise words shared by all topics) and word pairs
    (synonyms of a topic that items rarely share)."""
    folder = tmp_path_factory.mktemp("topics")
    topic_text(folder / "data", "topics", seed=0)
    return {"data_path": str(folder / "data"), "checkpoint_dir": str(folder / "saved"), **QUIET}


@pytest.fixture(scope="module")
def results(topics):
    return {model: run(model, "topics", config_dict={**topics, "seed": 2020}) for model in ("CoSim", "FBSM", "UFSM")}


def test_defaults_beat_cosim_on_text_with_signal_in_weights_and_pairs(results):
    recall = {model: result["test_result"]["recall@10"] for model, result in results.items()}
    assert recall["FBSM"] >= 1.10 * recall["CoSim"], recall
    assert recall["UFSM"] >= 1.05 * recall["CoSim"], recall
    assert recall["FBSM"] > recall["UFSM"], recall  # only FBSM can learn the word pairs


@pytest.mark.parametrize("model", ["FBSM", "UFSM"])
def test_the_run_reports_the_kept_epoch_and_its_gain(results, model):
    result = results[model]
    assert result["best_epoch"] >= 0
    start, best = result["start_valid_score"], result["best_valid_score"]
    assert best > start
    gain = 100 * (best - start) / start
    assert result["kept_summary"] == (
        f"kept epoch {result['best_epoch']} ({result['kept_summary'].split('(')[1].split(')')[0]}): "
        f"valid recall@10 {best:.4f} (untrained start {start:.4f}, {gain:+.1f}%)"
    )


def test_the_run_says_plainly_when_nothing_beat_the_start(topics):
    """A penalty on D so strong that every step shrinks it towards 0: the model only gets worse than its
    untrained start, which is kept, and the run says so."""
    result = run("FBSM", "topics", config_dict={**topics, "seed": 2020, "reg_D": 1.0, "epochs": 3})
    assert result["best_epoch"] == -1
    assert result["kept_summary"].startswith("kept the untrained start: no epoch beat its valid recall@10")
    assert result["best_valid_score"] == result["start_valid_score"]


@pytest.mark.parametrize(
    "setting, value, expected",
    [
        ("align_weight", -1, "expected a number >= 0"),
        ("align_temperature", 0, "expected a number > 0"),
        ("bpr_profile_alpha", -0.5, "expected a number >= 0"),
        ("field_weights", {"words": -1}, "expected 'words' to be a number >= 0"),
        ("warm_learning_rate", 0, "expected a number > 0"),
    ],
)
def test_the_new_options_are_checked_before_anything_runs(setting, value, expected):
    from recbole_fbsm.config.settings import precheck
    from recbole_fbsm.errors import ColdStartError

    with pytest.raises(ColdStartError, match=expected):
        precheck("FBSM", None, {setting: value})
