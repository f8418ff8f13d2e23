"""`run_hyper.py` / `recbole-fbsm hyper` in the hybrid scenario: trials are chosen on the valid metric of all items,
or of the group `hybrid_valid_group` names, and the output file shows the cold and warm groups."""

import optuna
import pytest
import yaml
from helpers import dataset_config, write_dataset
from optuna.trial import TrialState

from recbole_fbsm.cli.experiments import hyper
from recbole_fbsm.quick_start import run

# tune filters Optuna's "experimental heartbeat" warning once, at import; pytest restores every filter per test
EXPERIMENTAL = pytest.mark.filterwarnings("ignore::optuna.exceptions.ExperimentalWarning")
pytestmark = [pytest.mark.usefixtures("workdir"), EXPERIMENTAL]

HYBRID = {"cold_start_scenario": "hybrid", "metrics": ["Recall", "NDCG"], "topk": [5], "valid_metric": "recall@5"}


@pytest.fixture
def data(tmp_path):
    return write_dataset(tmp_path, "hyb", n_users=50, n_items=80, likes_per_user=(4, 14))


@pytest.mark.parametrize("group", ["all", "cold"])
def test_a_hybrid_search_scores_trials_on_the_chosen_group(data, tmp_path, group):
    settings = {**HYBRID, **({} if group == "all" else {"hybrid_valid_group": group})}
    config_file = tmp_path / "hyb.yaml"
    config_file.write_text(yaml.safe_dump(dataset_config(data, **settings)))
    params_file = tmp_path / "knn.hyper"
    params_file.write_text("feature_weighting choice ['tfidf', 'binary']\n")
    storage = f"sqlite:///{tmp_path}/tune.db"
    assert (
        hyper(
            [
                "--model=ItemKNNCBF",
                f"--dataset={data.name}",
                f"--config_files={config_file}",
                f"--params_file={params_file}",
                f"--storage={storage}",
                "--study_name=s",
                f"--output_file={tmp_path}/out.result",
            ]
        )
        == 0
    )
    trials = optuna.load_study(study_name="s", storage=storage).get_trials(states=(TrialState.COMPLETE,))
    assert len(trials) == 2
    for trial in trials:
        alone = run(
            "ItemKNNCBF",
            data.name,
            config_dict=dataset_config(
                data, **settings, feature_weighting=trial.params["feature_weighting"], seed=2020, split_seed=2020
            ),
        )
        chosen_on = alone["best_valid_result"] if group == "all" else alone[f"valid_result_{group}"]
        assert trial.value == pytest.approx(chosen_on["recall@5"])
        (stored,) = trial.user_attrs["runs"]
        assert stored["test_result_cold"] == pytest.approx(alone["test_result_cold"])
    # the groups differ here, so choosing on the cold items is not choosing on all of them
    assert alone["valid_result_cold"]["recall@5"] != pytest.approx(alone["best_valid_result"]["recall@5"])
    text = (tmp_path / "out.result").read_text()
    assert f"mean recall@5 on {group} items over split seeds" in text
    assert text.count("Test result, cold items:\n") == 2 and text.count("Valid result, warm items:\n") == 2
