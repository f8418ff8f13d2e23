"""Strict settings, checked before torch and RecBole are imported, so that ``--rnak=10`` fails at once
(docs/errors.md, "Which settings are known")."""

import ast
import functools
import re

import yaml

from recbole_fbsm.config.checks import as_list, metric_names, number
from recbole_fbsm.config.paths import PROPERTIES_DIR, recbole_dir
from recbole_fbsm.config.registry import check_model_name
from recbole_fbsm.config.schema import PLUGIN_SETTINGS, RECBOLE_CODE_KEYS, RUNTIME_KEYS, SPECS, setting
from recbole_fbsm.config.suggestions import suggestion
from recbole_fbsm.errors import ColdStartError


# ------------------------------------------------------------------------------ reading values
class _Loader(yaml.SafeLoader):
    """RecBole's yaml reading: ``1e-4`` is a float (plain YAML 1.1 reads it as a string)."""


def _mapping_without_repeats(loader, node, deep=False):
    """A YAML mapping whose keys are all different: a repeated setting is an error, not the last one silently."""
    lines = {}
    for key_node, _ in node.value:
        line = key_node.start_mark.line + 1
        first = lines.setdefault(loader.construct_object(key_node, deep=deep), line)
        if first != line:
            problem = f"setting {key_node.value!r} is given twice (lines {first} and {line})"
            raise yaml.constructor.ConstructorError(problem=problem, problem_mark=key_node.start_mark)
    return loader.construct_mapping(node, deep=deep)


_Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _mapping_without_repeats)
# RecBole's float resolver, less what PyYAML's own already reads the same way: the exponent forms YAML 1.1 reads
# as text (1e-4, 1.5e3) and RecBole's looser '._5'
_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^(?:[-+]?[0-9][0-9_]*(?:\.[0-9_]*)?[eE][-+]?[0-9]+|\.[0-9_]+(?:[eE][-+][0-9]+)?)$"),
    list("-+0123456789."),
)


def convert_value(text):
    """A ``--key=value`` string as RecBole converts it (Python literal, ``true``/``false``, else the string), without
    ``eval``; a mapping or list that is no Python literal is read as YAML (``{distribution: uniform}``), as a
    property file would."""
    stripped = text.strip() if isinstance(text, str) else None
    words = {"true": True, "false": False, "~": None, "null": None}  # null: YAML's, as the property files write it
    try:
        return ast.literal_eval(stripped) if stripped is not None else text
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        if stripped.lower() in words:
            return words[stripped.lower()]
    try:
        loaded = yaml.safe_load(stripped) if stripped[:1] in "{[" and stripped[-1:] in "}]" else None
    except yaml.YAMLError:
        loaded = None
    return loaded if isinstance(loaded, (dict, list)) else text


def read_yaml(path):
    """A property or config file as a dict; a missing, unreadable or malformed file is a ColdStartError."""
    try:
        with open(path, encoding="utf-8") as file:
            loaded = yaml.load(file, Loader=_Loader)
    except (OSError, UnicodeError) as error:
        raise ColdStartError(f"config file {path} not found or unreadable ({error}).") from None
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f" line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = getattr(error, "problem", None) or str(error).splitlines()[0]
        raise ColdStartError(
            f"config file {path}{where}: not valid YAML ({problem}); expected key: value lines."
        ) from None
    if not isinstance(loaded or {}, dict):
        raise ColdStartError(f"config file {path}: expected key: value settings, found a {type(loaded).__name__}.")
    return loaded or {}


# ------------------------------------------------------------------------------ the known keys
@functools.lru_cache(maxsize=1)
def known_defaults():
    """{key: [default values found in property files]} over every property file: RecBole's, then this plugin's
    (its grids list values to try, not settings)."""
    files = sorted((recbole_dir() / "properties").rglob("*.yaml"))
    files += [p for p in sorted(PROPERTIES_DIR.rglob("*.yaml")) if "grids" not in p.relative_to(PROPERTIES_DIR).parts]
    defaults = {}
    for path in files:
        for key, value in (yaml.load(path.read_text(encoding="utf-8"), Loader=_Loader) or {}).items():
            defaults.setdefault(str(key), []).append(value)
    return defaults


def value_problem(key, value):
    """What ``key`` expects when ``value`` does not fit, else None: its check in ``SPECS``, or else the kind of
    its defaults in the property files (a flag stays a flag, a number a number; None defaults say nothing)."""
    if key in SPECS:
        return SPECS[key](value)
    defaults = [d for d in known_defaults().get(key, []) if d is not None]
    for expected, fits in (("True or False", lambda v: isinstance(v, bool)), ("a number", lambda v: not number()(v))):
        if value is not None and defaults and all(map(fits, defaults)) and not fits(value):
            return expected


def check_settings(settings, source, known_only=True):
    """Every key of ``settings`` known, every value of the expected type; ``source`` names where they came from
    (``config file x.yaml``, ``config_dict``; None: the command line, ``--key``)."""
    known = set(PLUGIN_SETTINGS) | set(known_defaults()) | RECBOLE_CODE_KEYS  # RUNTIME_KEYS: not suggested
    for key, value in settings.items():
        name = f"--{key}" if source is None else f"{key!r} in {source}"
        if known_only and key not in known | RUNTIME_KEYS:
            hint = suggestion(key, known) or "; see properties/overall.yaml and RecBole's settings."
            raise ColdStartError(f"unknown setting {name}{hint}")
        problem = value_problem(key, value)
        if problem:
            got = value if getattr(problem, "got", None) is None else problem.got
            raise ColdStartError(
                f"setting {name}: expected {problem}; got {got!r}{getattr(problem, 'hint', '') or '.'}"
            )


def check_user_settings(config_file_list=None, config_dict=None, source="config_dict", known_only=True, run=None):
    """The caller's config files and ``config_dict``, each checked, merged (later ones win). ``known_only=False``: a
    model class of the caller's own may read keys no property file names. ``run``: the run's model and dataset,
    which a file may not contradict (RecBole would ignore it silently)."""
    sources = [(f"config file {path}", read_yaml(path)) for path in config_file_list or []]
    sources.append((source, {key: convert_value(value) for key, value in (config_dict or {}).items()}))
    merged = {}
    for where, settings in sources:
        check_settings(settings, where, known_only)
        merged.update(settings)
        for key, value in (run or {}).items():
            if value is not None and settings.get(key) is not None and str(settings[key]) != str(value):
                raise ColdStartError(
                    f"{where} sets {key}: {settings[key]}, but this run's {key} is {value!r} (--{key}); "
                    f"the run's {key} is used: remove the {key} line, or run with --{key}={settings[key]}."
                )
    return merged


def check_final(config):
    """Checks across settings, on the final (merged) configuration; each message names the settings."""
    scenario = str(setting(config, "cold_start_scenario")).lower()
    eval_args = config["eval_args"]
    group_by = str(eval_args.get("group_by")).lower()
    if scenario == "hybrid" and group_by != "item":
        raise ColdStartError(
            f"cold_start_scenario: hybrid splits items itself (eval_args.group_by: item); got "
            f"eval_args.group_by: {group_by}."
        )
    if config.get("identity_features") is True and scenario != "hybrid":
        raise ColdStartError(
            "identity_features: True needs cold_start_scenario: hybrid (in the item scenario no "
            "candidate is a training item, so no candidate has an identity)."
        )
    if group_by == "item":
        _check_item_split(eval_args)
    metrics, cutoffs, valid_metric = as_list(config["metrics"]), as_list(config["topk"]), config["valid_metric"]
    topk_metric = {m.lower(): metric_names().get(m.lower(), (m, True))[1] for m in metrics}
    computed = {f"{m}@{k}" if topk_metric[m] else m for m in topk_metric for k in cutoffs}
    if isinstance(valid_metric, str) and valid_metric.lower() not in computed:
        raise ColdStartError(
            f"valid_metric {valid_metric!r}: expected one of the metrics computed ({', '.join(map(str, metrics))}) "
            f"at a cut-off of topk {cutoffs}."
        )


def precheck(model, config_file_list=None, config_dict=None):
    """The command line's check before torch loads: the model name, then the settings, returned merged."""
    if isinstance(model, str):
        check_model_name(model)
    return check_user_settings(config_file_list, config_dict, source=None)


def _check_item_split(eval_args):
    """The item split ranks every item (mode: full) of items split at random (order: RO) by three ratios (RS)."""
    mode, order, split = eval_args.get("mode", "full"), eval_args.get("order", "RO"), eval_args.get("split")
    if any(str(m).lower() != "full" for m in (mode.values() if isinstance(mode, dict) else [mode])):
        raise ColdStartError(
            f"eval_args.mode: the item split ranks every item of the evaluated split (mode: full); got {mode!r} "
            "(sampled candidates such as uni100 are for RecBole's user split, eval_args.group_by: user)."
        )
    if str(order).upper() != "RO":
        raise ColdStartError(
            f"eval_args.order: the item split partitions items at random (order: RO), seeded by split_seed; got "
            f"{order!r} (a temporal order, TO, applies to RecBole's interaction splits, eval_args.group_by: user)."
        )
    if not isinstance(split, dict) or list(split) != ["RS"]:
        raise ColdStartError(
            f"eval_args.split: the item split needs {{RS: [train, valid, test]}} ratios; got {split!r}."
        )
    if SPECS["hybrid_warm_split"](split["RS"]):
        numbers = all(isinstance(r, (int, float)) for r in as_list(split["RS"]))
        raise ColdStartError(
            f"eval_args.split.RS: expected three positive ratios [train, valid, test] that sum to 1; got "
            f"{split['RS']!r}" + (f", which sum to {sum(split['RS']):g}, expected 1." if numbers else ".")
        )
