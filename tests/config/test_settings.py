"""Strict settings: where the known keys come from, and what is checked without importing RecBole."""

import shutil
import subprocess
import sys

import pytest

from recbole_fbsm.config import settings
from recbole_fbsm.errors import ColdStartError


@pytest.fixture
def extra_model_properties(tmp_path, monkeypatch):
    """A copy of the plugin's property folder with one more model file, as a new model would add."""
    copy = tmp_path / "properties"
    shutil.copytree(settings.PROPERTIES_DIR, copy)
    (copy / "model" / "NewModel.yaml").write_text("cold_mixing_weight: 0.5\nuse_item_bias: True\n")
    monkeypatch.setattr(settings, "PROPERTIES_DIR", copy)
    settings.known_defaults.cache_clear()
    yield
    settings.known_defaults.cache_clear()


def test_a_new_models_property_file_makes_its_keys_known_and_typed(extra_model_properties):
    settings.check_settings({"cold_mixing_weight": 0.2, "use_item_bias": False}, None)
    with pytest.raises(
        ColdStartError, match=r"unknown setting --cold_mixing_weigth; did you mean 'cold_mixing_weight'"
    ):
        settings.check_settings({"cold_mixing_weigth": 0.2}, None)
    with pytest.raises(ColdStartError, match=r"--use_item_bias: expected True or False; got 'sometimes'"):
        settings.check_settings({"use_item_bias": "sometimes"}, None)


def test_keys_of_recbole_models_and_datasets_are_known():
    settings.check_settings(
        {
            "embedding_size": 32,
            "mlp_hidden_size": [64, 32],
            "USER_ID_FIELD": "user_id",
            "benchmark_filename": None,
            "rank": 3,
            "feature_fields": ["words"],
        },
        None,
    )


def test_a_model_class_of_the_callers_own_may_read_unknown_settings():
    from recbole.model.general_recommender import BPR

    from recbole_fbsm.config.cold_start_config import ColdStartConfig

    class OwnBPR(BPR):
        pass

    config = ColdStartConfig(model=OwnBPR, dataset="ml-100k", config_dict={"own_weight": 3, "use_gpu": False})
    assert config["own_weight"] == 3
    with pytest.raises(ColdStartError, match="unknown setting 'own_weight'"):
        ColdStartConfig(model=BPR, dataset="ml-100k", config_dict={"own_weight": 3})


def test_command_line_values_are_read_like_recbole_but_without_eval():
    assert settings.convert_value("[10, 20]") == [10, 20]
    assert settings.convert_value("1e-3") == 0.001
    assert settings.convert_value("true") is True and settings.convert_value("False") is False
    assert settings.convert_value("adam") == "adam"
    assert (
        settings.convert_value("~") is None and settings.convert_value("null") is None
    )  # YAML's null, as messages say
    assert settings.convert_value("__import__('os').getcwd()") == "__import__('os').getcwd()"
    # a mapping written as in a property file, or as JSON, is the mapping (RecBole's literal reading refuses both)
    expected = {"distribution": "uniform", "sample_num": 1, "dynamic": False}
    assert settings.convert_value("{distribution: uniform, sample_num: 1, dynamic: false}") == expected
    assert settings.convert_value('{"distribution":"uniform","sample_num":1,"dynamic":false}') == expected
    assert settings.convert_value("[a, b]") == ["a", "b"]
    assert settings.convert_value("{unclosed: [}") == "{unclosed: [}"


def test_the_precheck_imports_neither_torch_nor_recbole():
    code = (
        "import sys; from recbole_fbsm.config.settings import precheck\n"
        "try:\n    precheck('FBMS', None, {})\nexcept Exception as e: print(e)\n"
        "print('torch' in sys.modules, 'recbole' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60).stdout
    assert "unknown model 'FBMS'; did you mean 'FBSM'" in out
    assert out.strip().endswith("False False")


@pytest.mark.parametrize(
    "typed, meant", [("FBMS", "FBSM"), ("BRP", "BPR"), ("ItemKNNCF", "ItemKNNCBF"), ("LightFM", None), ("Nope", None)]
)
def test_an_unknown_model_gets_a_near_typo_and_the_command_that_lists_them(typed, meant):
    """A suggestion only for a near typo (LightFM shares a prefix with LightGCN, not a model), and the list of every
    model on request (``recbole-fbsm models``), not 59 names on one line."""
    from recbole_fbsm.config.registry import check_model_name

    with pytest.raises(ColdStartError) as caught:
        check_model_name(typed)
    message = str(caught.value)
    assert ("did you mean" in message) == (meant is not None) and (meant is None or f"'{meant}'" in message), message
    assert "recbole-fbsm models" in message and "LightGCN" not in message and "ADMMSLIM" not in message


def test_config_adds_numpy_aliases_without_warnings_of_its_own():
    """RecBole needs numpy aliases removed in numpy 2; asking numpy for them printed two FutureWarnings."""
    code = (
        "import warnings\nwarnings.simplefilter('always')\n"
        "with warnings.catch_warnings(record=True) as caught:\n"
        "    from recbole_fbsm.config.cold_start_config import ColdStartConfig\n"
        "    ColdStartConfig(model='CoSim', dataset='ml-100k', config_dict={'use_gpu': False})\n"
        "print([str(w.message) for w in caught if 'recbole_fbsm' in w.filename])"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.stdout.strip().endswith("[]"), out.stdout + out.stderr[-2000:]
