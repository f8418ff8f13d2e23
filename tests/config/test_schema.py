"""Settings declared once: recbole_fbsm/config/schema.py checks them, the property files hold their defaults, and
code reads plugin settings without fallback defaults of its own."""

import ast
import re

import pytest
import yaml
from helpers import REPO_ROOT

from recbole_fbsm.config.paths import PROPERTIES_DIR, recbole_dir
from recbole_fbsm.config.registry import PLUGIN_MODELS
from recbole_fbsm.config.schema import PLUGIN_SETTINGS, SPECS, setting

PACKAGE = REPO_ROOT / "recbole_fbsm"


def load(path):
    return yaml.safe_load(path.read_text()) or {}


def recbole_keys():
    keys = set()
    for path in (recbole_dir() / "properties").rglob("*.yaml"):
        keys |= set(load(path))
    return keys


MODEL_FILES = sorted((PROPERTIES_DIR / "model").glob("*.yaml"))


def test_every_plugin_setting_has_its_default_in_overall_yaml_or_in_the_model_files():
    overall = load(PROPERTIES_DIR / "overall.yaml")
    in_models = {key for path in MODEL_FILES for key in load(path)}
    for key in PLUGIN_SETTINGS:
        assert key in overall or key in in_models, f"{key}: no property file gives its default"


@pytest.mark.parametrize(
    "path", sorted(PROPERTIES_DIR.rglob("*.yaml")), ids=lambda p: str(p.relative_to(PROPERTIES_DIR))
)
def test_every_property_file_value_passes_the_table(path):
    values = load(path)
    grid = path.parent.name == "grids"
    declared = set(PLUGIN_SETTINGS) | recbole_keys()
    for key, value in values.items():
        assert key in declared, f"{path.name}: {key} is neither a RecBole setting nor in the plugin's table"
        for candidate in value if grid else [value]:
            problem = SPECS[key](candidate) if key in SPECS else None
            assert problem is None, f"{path.name}: {key}: expected {problem}; got {candidate!r}"


@pytest.mark.parametrize("path", MODEL_FILES, ids=lambda p: p.stem)
def test_model_files_belong_to_plugin_models(path):
    assert path.stem in PLUGIN_MODELS, f"{path.name}: no plugin model {path.stem}"


# RecBole's model files comment every key: `key: value  # (type) meaning`
TYPED_COMMENT = re.compile(r"#\s*\((int|float|str|bool|list|dict)( or ~)?\)\s+\S")
COMMENT_TYPES = {"int": (int,), "float": (int, float), "str": (str,), "bool": (bool,), "list": (list,), "dict": (dict,)}


@pytest.mark.parametrize("path", MODEL_FILES, ids=lambda p: p.stem)
def test_every_model_file_key_has_a_typed_comment_that_fits_its_value(path):
    lines = path.read_text(encoding="utf-8").splitlines()
    root = yaml.compose(path.read_text(encoding="utf-8"))
    for key_node, _ in root.value:
        key, line = key_node.value, lines[key_node.start_mark.line]
        comment = TYPED_COMMENT.search(line)
        assert comment, f"{path.name}:{key_node.start_mark.line + 1}: {key} needs a `# (type) meaning` comment"
        value, kind, optional = load(path)[key], comment.group(1), comment.group(2)
        if value is None:
            assert optional, f"{path.name}: {key} is ~: its comment's type says `({kind} or ~)`"
        else:
            fits = isinstance(value, COMMENT_TYPES[kind]) and (kind == "bool" or not isinstance(value, bool))
            assert fits, f"{path.name}: {key}: {value!r} is not ({kind})"


def fallbacks(tree):
    """``config["key"] or default`` and ``config.get("key", default)`` on plugin settings."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.BoolOp) and isinstance(node.op, ast.Or):
            first = node.values[0]
            if (
                isinstance(first, ast.Subscript)
                and isinstance(first.slice, ast.Constant)
                and first.slice.value in PLUGIN_SETTINGS
            ):
                found.append((node.lineno, first.slice.value))
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "get"
            and len(node.args) == 2
            and isinstance(node.args[0], ast.Constant)
            and node.args[0].value in PLUGIN_SETTINGS
        ):
            found.append((node.lineno, node.args[0].value))
    return found


def test_code_reads_plugin_settings_without_fallbacks_of_its_own():
    offenders = [
        f"{path.relative_to(PACKAGE.parent)}:{line} {key}"
        for path in sorted(PACKAGE.rglob("*.py"))
        if path.name != "schema.py"
        for line, key in fallbacks(ast.parse(path.read_text()))
    ]
    assert not offenders, "read these through config.schema.setting(config, key):\n" + "\n".join(offenders)


def test_setting_falls_back_on_the_property_files_only_when_the_config_lacks_the_key():
    class Config(dict):
        def __getitem__(self, key):  # RecBole's Config answers None for an unknown key
            return self.get(key)

    assert setting(Config(model="FBSM"), "align_temperature") == 0.1  # properties/model/FBSM.yaml
    assert setting(Config(model="FBSM", align_temperature=0.5), "align_temperature") == 0.5
    assert setting(Config(model="FBSM", align_weight=0), "align_weight") == 0
    assert setting(Config(), "feature_weighting") == "tfidf"  # properties/overall.yaml
    assert setting(Config(model="FBSM"), "feature_weighting") == "bm25"  # the model's file over it
    assert setting({"model": "Heater"}, "reg_weight") == 0.0001
    with pytest.raises(KeyError):
        setting(Config(), "no_such_setting")
