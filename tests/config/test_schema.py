"""One table of the plugin's settings (recbole_fbsm/config/schema.py): the YAML files agree with it, and
code reads plugin settings without fallback defaults of its own."""

import ast
import re

import pytest
import yaml
from helpers import REPO_ROOT

from recbole_fbsm.config.paths import PROPERTIES_DIR, recbole_dir
from recbole_fbsm.config.registry import PLUGIN_MODELS
from recbole_fbsm.config.schema import MODEL, OVERALL, PLUGIN_SETTINGS, SPECS, model_default, setting

PACKAGE = REPO_ROOT / "recbole_fbsm"


def load(path):
    return yaml.safe_load(path.read_text()) or {}


def recbole_keys():
    keys = set()
    for path in (recbole_dir() / "properties").rglob("*.yaml"):
        keys |= set(load(path))
    return keys


def test_overall_yaml_sets_every_overall_setting_and_no_model_setting():
    overall = load(PROPERTIES_DIR / "overall.yaml")
    for key, spec in PLUGIN_SETTINGS.items():
        if spec.layer == OVERALL:
            assert key in overall, f"{key}: an overall setting takes its default from overall.yaml, which lacks it"
        else:
            assert key not in overall, f"{key} is a model setting: set it in properties/model/*.yaml"


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


def test_model_defaults_of_the_table_pass_their_own_checks():
    for key, spec in PLUGIN_SETTINGS.items():
        assert spec.layer in (OVERALL, MODEL)
        assert spec.check(spec.default) is None, f"{key}: default {spec.default!r}"
        for model, value in (spec.per_model or {}).items():
            assert model in PLUGIN_MODELS, f"{key}: per_model names {model}, not a plugin model"
            assert spec.check(value) is None, f"{key}: {model}'s value {value!r}"
            assert value != spec.default, f"{key}: {model}'s per_model value is the default: drop it"


MODEL_FILES = sorted((PROPERTIES_DIR / "model").glob("*.yaml"))


@pytest.mark.parametrize("path", MODEL_FILES, ids=lambda p: p.stem)
def test_model_files_set_plugin_settings_to_the_tables_value_for_that_model(path):
    """A plugin setting in properties/model/MODEL.yaml has the table's value for MODEL (its default, or its
    ``per_model`` entry), and every ``per_model`` entry is set by that model's file: declared once, held equal."""
    model, values = path.stem, load(path)
    assert model in PLUGIN_MODELS, f"{path.name}: no plugin model {model}"
    for key in set(values) & set(PLUGIN_SETTINGS):
        assert values[key] == model_default(key, model), (
            f"{path.name}: {key}: {values[key]!r}, the table {model_default(key, model)!r} (schema.py: per_model)"
        )
    for key, spec in PLUGIN_SETTINGS.items():
        if model in (spec.per_model or {}):
            assert key in values, f"schema.py: {key}'s per_model gives {model} a value its file does not set"


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


def test_setting_falls_back_on_the_table_only_when_the_config_lacks_the_key():
    class Config(dict):
        def __getitem__(self, key):  # RecBole's Config answers None for an unknown key
            return self.get(key)

    assert setting(Config(), "align_temperature") == 0.1
    assert setting(Config(align_temperature=0.5), "align_temperature") == 0.5
    assert setting(Config(align_weight=0), "align_weight") == 0
