"""Grid search on validation (`python -m recbole_fbsm.tune`), the tuned property layer, and the
selection of the untrained model (`valid_before_training`)."""

import json

import pytest
import torch

from recbole_fbsm import config as config_module
from recbole_fbsm import tune
from recbole_fbsm.config import ColdStartConfig
from recbole_fbsm.errors import ColdStartError
from recbole_fbsm.quick_start import prepare, run
from recbole_fbsm.registry import get_trainer

from helpers import dataset_config


def test_grid_parsing_and_combinations():
    grid = tune.parse_grid(["reg_V=[0.01, 0.1]", "rank=5", "learner=[sgd, adam]"])
    assert grid == {"reg_V": [0.01, 0.1], "rank": [5], "learner": ["sgd", "adam"]}
    combos = tune.combinations(grid)
    assert len(combos) == 4 and {"reg_V": 0.1, "rank": 5, "learner": "adam"} in combos
    with pytest.raises(ColdStartError, match="KEY=VALUE"):
        tune.parse_grid(["reg_V"])
    with pytest.raises(ColdStartError, match="empty"):
        tune.parse_grid(["reg_V=[]"])


def test_every_shipped_grid_names_real_settings_of_its_model():
    shipped = sorted(path.stem for path in config_module.PROPERTIES_DIR.joinpath("grids").glob("*.yaml"))
    assert {"FBSM", "UFSM", "FM"} <= set(shipped)
    for model in shipped:
        grid = tune.load_grid(model)
        config = ColdStartConfig(model=model, dataset="ml-100k", config_dict={"use_gpu": False})
        for key in grid:  # a setting of the model or of RecBole (some, like clip_grad_norm, default to None)
            assert key in config.final_config_dict, f"recbole_fbsm/properties/grids/{model}.yaml: {key} is no setting of {model}"


@pytest.fixture
def tuned_dir(tmp_path, monkeypatch):
    """recbole_fbsm/properties/tuned/ redirected to a temporary folder."""
    def tuned_file(model, dataset):
        return tmp_path / "tuned" / str(dataset) / f"{model}.yaml"
    monkeypatch.setattr(config_module, "tuned_properties_file", tuned_file)
    monkeypatch.setattr(tune, "tuned_properties_file", tuned_file)
    return tmp_path / "tuned"


def test_search_picks_by_validation_resumes_and_writes_the_tuned_layer(toy, tuned_dir, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    results = tmp_path / "results"
    overrides = {k: v for k, v in dataset_config(toy).items() if k not in ("seed",)}
    grid = {"rank": [1, 2], "learning_rate": [0.01]}
    rows = tune.tune("FBSM", toy.name, grid, seeds=(2020,), results_dir=results, overrides=overrides, log=lambda *_: None)
    assert len(rows) == 2 and len(list(results.glob("trial-*.json"))) == 2
    assert rows[0]["valid"] >= rows[1]["valid"], "ranked by validation score"
    # a second call reuses the stored trials (their files are not rewritten)
    stamps = {p: p.stat().st_mtime_ns for p in results.glob("trial-*.json")}
    again = tune.tune("FBSM", toy.name, grid, seeds=(2020,), results_dir=results, overrides=overrides, log=lambda *_: None)
    assert [r["params"] for r in again] == [r["params"] for r in rows]
    assert stamps == {p: p.stat().st_mtime_ns for p in results.glob("trial-*.json")}

    path = tuned_dir / toy.name / "FBSM.yaml"
    path.parent.mkdir(parents=True)
    path.write_text("seq_len: {words: 7}\nrank: 9\n")
    tune.write_tuned("FBSM", toy.name, rows[0], (2020,), grid, "python -m recbole_fbsm.tune ...")
    text = path.read_text()
    assert text.startswith("# FBSM on") and "seq_len" in text  # hand-set keys are kept
    loaded = ColdStartConfig(model="FBSM", dataset=toy.name, config_dict=dataset_config(toy))
    assert loaded["rank"] == rows[0]["params"]["rank"]
    # the user's settings still win over tuned values, and the layer can be switched off
    assert ColdStartConfig(model="FBSM", dataset=toy.name, config_dict=dataset_config(toy, rank=4))["rank"] == 4
    plain = ColdStartConfig(model="FBSM", dataset=toy.name, config_dict=dataset_config(toy, use_tuned_properties=False))
    assert plain["rank"] == 5  # recbole_fbsm/properties/model/FBSM.yaml


def test_cli_reports_a_bad_grid_and_an_unknown_setting_clearly(capsys):
    assert tune.main(["--model=FBSM", "--grid", "reg_V"]) == 2
    assert "KEY=VALUE" in capsys.readouterr().err
    assert tune.main(["--model=NoSuchModel", "--grid", "reg_V=1"]) == 2
    assert "unknown model" in capsys.readouterr().err


def test_the_untrained_model_is_kept_when_training_only_hurts_validation(toy, monkeypatch, tmp_path):
    """FBSM starts as CoSim; an epoch that makes it worse must not be chosen over the start."""
    monkeypatch.chdir(tmp_path)
    settings = dataset_config(toy, epochs=3, stopping_step=5, valid_before_training=True, init_std=0.0)  # start = CoSim exactly
    config, model, (train_data, valid_data, test_data) = prepare("FBSM", toy.name, config_dict=settings)
    trainer = get_trainer(config["MODEL_TYPE"], "FBSM")(config, model)
    initial = trainer.evaluate(valid_data, load_best_model=False)

    def sabotaging_epoch(train_data, epoch_idx, loss_func=None, show_progress=False):
        with torch.no_grad():
            model.D.mul_(-1.0)  # reversed similarity: the worst ranking there is
        return 0.0

    monkeypatch.setattr(trainer, "_train_epoch", sabotaging_epoch)
    best_score, best_result = trainer.fit(train_data, valid_data, saved=True)
    assert best_result == initial and best_score == initial[config["valid_metric"].lower()]
    cosim = run("CoSim", toy.name, config_dict=dataset_config(toy))["test_result"]
    assert trainer.evaluate(test_data, load_best_model=True) == cosim


def test_user_weighted_bpr_counts_every_user_the_same(toy):
    _, model, (train_data, _, _) = prepare("FBSM", toy.name, config_dict=dataset_config(toy, bpr_user_weighting=True))
    batch = next(iter(train_data))
    difference = model.bpr_difference(batch)
    users = batch[model.USER_ID]
    likes = (model.R.indptr[users + 1] - model.R.indptr[users]).double()
    mean_likes = len(model.R.indices) / int((model.R.indptr[1:] > model.R.indptr[:-1]).sum())
    expected = (-torch.nn.functional.logsigmoid(difference).double() * mean_likes / likes).mean()
    assert model.bpr_loss(batch, difference).item() == pytest.approx(expected.item(), rel=1e-6)
    model.user_weighting = False
    assert model.bpr_loss(batch, difference).item() == pytest.approx(
        -torch.nn.functional.logsigmoid(difference).mean().item(), rel=1e-6)
