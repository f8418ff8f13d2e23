"""Params files in RecBole's format (``run_hyper.py --params_file``) and the plugin's yaml grids."""

import math

import optuna
import pytest

from recbole_fbsm.config import cold_start_config as config_module
from recbole_fbsm.config.cold_start_config import ColdStartConfig
from recbole_fbsm.errors import ColdStartError
from recbole_fbsm.experiments import search_space

# Every line of every version of RecBole's hyper.test (RUCAIBox/RecBole, hyper.test history).
RECBOLE_HYPER_TEST = """\
learning_rate loguniform -8,0
embedding_size choice [64,96,128]
train_batch_size choice [512,1024,2048]
mlp_hidden_size choice ['[64,64,64]','[128,128]']
"""
RECBOLE_HISTORIC_LINES = """\
learning_rate choice [0.003,0.002,0.001,]
learning_rate choice [0.01,0.005,0.001,0.0005,0.0001]
dropout_prob choice [0.5]
anneal_cap choice [0.2,0.4,0.5,0.6,0.8]
total_anneal_steps choice [1000,10000,100000,200000]
kl_loss_weight choice [0.2,0.4,0.5,0.6,0.8]
"""


def test_recbole_hyper_test_parses_with_recbole_meaning():
    params = {p.name: p for p in search_space.parse_params_text(RECBOLE_HYPER_TEST)}
    assert list(params) == ["learning_rate", "embedding_size", "train_batch_size", "mlp_hidden_size"]
    lr = params["learning_rate"].distribution()  # RecBole: exp(uniform(-8, 0))
    assert isinstance(lr, optuna.distributions.FloatDistribution) and lr.log
    assert lr.low == pytest.approx(math.exp(-8)) and lr.high == pytest.approx(1.0)
    assert params["embedding_size"].values == (64, 96, 128)
    # quoted lists stay strings, which RecBole's Config evaluates, as with RecBole's own run_hyper
    assert params["mlp_hidden_size"].values == ("[64,64,64]", "[128,128]")
    assert search_space.is_grid(list(params.values())) is False
    historic = search_space.parse_params_text(
        RECBOLE_HISTORIC_LINES.replace("learning_rate choice [0.01", "lr2 choice [0.01")
    )
    assert historic[0].values == (0.003, 0.002, 0.001) and historic[2].values == (0.5,)


def test_ranges_become_optuna_distributions():
    uniform, qint, qfloat = search_space.parse_params_text(
        "dropout_prob uniform 0.1,0.5\nembedding_size quniform 16,64,16\nreg quniform 0.0,1.0,0.25\n"
    )
    assert uniform.distribution() == optuna.distributions.FloatDistribution(0.1, 0.5)
    assert qint.distribution() == optuna.distributions.IntDistribution(16, 64, step=16)  # integers, not 64.0
    assert qfloat.distribution() == optuna.distributions.FloatDistribution(0.0, 1.0, step=0.25)
    assert [p.line() for p in (uniform, qint)] == ["dropout_prob uniform 0.1,0.5", "embedding_size quniform 16,64,16"]


def test_choices_of_lists_and_dicts_round_trip_through_optuna_labels():
    text = (
        "# comment lines and blank lines are skipped\n\n"
        "learner choice [sgd, adam]\n"  # YAML flow list
        "clip_grad_norm choice [{'max_norm': 5, 'norm_type': 2}, None]\n"
        "train_neg_sample_args choice [{distribution: uniform, sample_num: 1, dynamic: True, candidate_num: 10}]\n"
    )
    learner, clip, negatives = search_space.parse_params_text(text)
    assert learner.values == ("sgd", "adam")
    assert clip.labels == ("{'max_norm': 5, 'norm_type': 2}", None)  # what Optuna's storage can hold
    assert clip.value_of(clip.labels[0]) == {"max_norm": 5, "norm_type": 2}
    assert negatives.values[0]["candidate_num"] == 10
    assert search_space.grid_size([learner, clip]) == 4
    stored = {"learner": "sgd", "clip_grad_norm": None}
    assert search_space.settings_of_trial([learner, clip], stored) == {"learner": "sgd", "clip_grad_norm": None}


@pytest.mark.parametrize(
    "line, message",
    [
        ("rank range [1, 2]", "expected NAME TYPE RANGE"),
        (
            "reg_weight ['[0.0,0.0]','[0.01,0.0001]']",
            "expected NAME TYPE RANGE",
        ),  # RecBole's hrm_hyper.test: skipped there
        ("lr loguniform -8", "expected 2 numbers LOW,HIGH"),
        ("lr uniform 1,0", "LOW < HIGH"),
        ("k quniform 1,9,0", "step Q > 0"),
        ("rank choice []", "non-empty list"),
        ("rank choice 5", "non-empty list"),
        ("rank choice [1, 1]", "twice"),
    ],
)
def test_bad_lines_name_file_line_and_what_was_expected(tmp_path, line, message):
    path = tmp_path / "model.hyper"
    path.write_text(f"reg_V choice [0.1]\n{line}\n")
    with pytest.raises(ColdStartError, match=rf"model.hyper line 2: .*{message}"):
        search_space.read_search_space(path)


def test_a_yaml_grid_is_a_params_file_of_choices(tmp_path):
    path = tmp_path / "grid.yaml"
    path.write_text("rank: [10, 64]\nlearner: sgd\nclip_grad_norm:\n  - {max_norm: 5}\n")
    params = search_space.read_search_space(path)
    assert [p.line() for p in params] == [
        "rank choice [10, 64]",
        "learner choice ['sgd']",
        "clip_grad_norm choice [{'max_norm': 5}]",
    ]
    assert search_space.is_grid(params)
    with pytest.raises(ColdStartError, match="cannot be read"):
        search_space.read_search_space(tmp_path / "missing.hyper")


def test_every_shipped_grid_names_real_settings_of_its_model():
    grids = config_module.PROPERTIES_DIR / "grids"
    shipped = sorted({path.stem for path in grids.iterdir() if path.suffix in (".hyper", ".yaml")})
    assert {"FBSM", "UFSM", "FM"} <= set(shipped)
    for model in shipped:
        path = search_space.default_params_file(model)
        assert path.suffix == ".hyper" or not (grids / f"{model}.hyper").exists()
        config = ColdStartConfig(model=model, dataset="ml-100k", config_dict={"use_gpu": False})
        for param in search_space.read_search_space(path):  # some settings, like clip_grad_norm, default to None
            assert param.name in config.final_config_dict, f"{path.name}: {param.name} is no setting of {model}"
