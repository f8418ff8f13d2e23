"""Strict settings, checked before torch and RecBole are imported, so that ``--rnak=10`` fails at once
(docs/errors.md, "Which settings are known")."""

import ast
import functools
import itertools
import os
import re
from pathlib import Path

import yaml

from recbole_fbsm.config.checks import _is_number, as_list, metric_names
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
    seen = {}
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        if key in seen:
            lines = f"lines {seen[key] + 1} and {key_node.start_mark.line + 1}"
            problem = f"setting {key!r} is given twice ({lines})"
            raise yaml.constructor.ConstructorError(problem=problem, problem_mark=key_node.start_mark)
        seen[key] = key_node.start_mark.line
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
    if not isinstance(text, str):
        return text
    stripped = text.strip()
    try:
        return ast.literal_eval(stripped)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        lowered = stripped.lower()
        if lowered in ("true", "false"):
            return lowered == "true"
        if lowered in ("~", "null"):  # YAML's null, as the property files and the messages write it
            return None
        if stripped[:1] in "{[" and stripped[-1:] in "}]":
            try:
                loaded = yaml.safe_load(stripped)
            except yaml.YAMLError:
                return text
            if isinstance(loaded, (dict, list)):
                return loaded
        return text


def read_yaml(path):
    """A property or config file as a dict; a missing, unreadable or malformed file is a ColdStartError."""
    path = Path(path)
    if not path.is_file():
        raise ColdStartError(f"config file {path} not found" + ("" if not path.exists() else " (it is a folder)") + ".")
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise ColdStartError(f"config file {path} cannot be read: {error}.") from None
    try:
        loaded = yaml.load(text, Loader=_Loader)
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f" line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = getattr(error, "problem", None) or str(error).splitlines()[0]
        raise ColdStartError(
            f"config file {path}{where}: not valid YAML ({problem}); expected key: value lines."
        ) from None
    if loaded is None:
        return {}
    if not isinstance(loaded, dict):
        raise ColdStartError(f"config file {path}: expected key: value settings, found a {type(loaded).__name__}.")
    bad = [key for key in loaded if not isinstance(key, str)]
    if bad:
        raise ColdStartError(f"config file {path}: setting names must be words; found {bad[0]!r}.")
    return loaded


# ------------------------------------------------------------------------------ the known keys
@functools.lru_cache(maxsize=1)
def known_defaults():
    """{key: [default values found in property files]} over every property file: RecBole's, then this plugin's
    (its grids list values to try, not settings)."""
    files = sorted((recbole_dir() / "properties").rglob("*.yaml"))
    files += [p for p in sorted(PROPERTIES_DIR.rglob("*.yaml")) if "grids" not in p.relative_to(PROPERTIES_DIR).parts]
    defaults = {}
    for path in files:
        try:
            loaded = yaml.load(path.read_text(encoding="utf-8"), Loader=_Loader) or {}
        except (OSError, yaml.YAMLError):
            continue
        if isinstance(loaded, dict):
            for key, value in loaded.items():
                defaults.setdefault(str(key), []).append(value)
    return defaults


def value_problem(key, value):
    """What ``key`` expects when ``value`` does not fit, else None: its check in ``SPECS``, or else the kind of
    its defaults in the property files (a flag stays a flag, a number a number; None defaults say nothing)."""
    if key in SPECS:
        return SPECS[key](value)
    defaults = [d for d in known_defaults().get(key, []) if d is not None]
    if value is None or not defaults:
        return None
    if all(isinstance(d, bool) for d in defaults) and not isinstance(value, bool):
        return "True or False"
    if all(_is_number(d) for d in defaults) and not _is_number(value):
        return "a number"
    return None


def check_settings(settings, source, known_only=True):
    """Every key of ``settings`` known, every value of the expected type; ``source`` names where they came from
    (``config file x.yaml``, ``config_dict``; None: the command line, ``--key``)."""
    known = set(PLUGIN_SETTINGS) | set(known_defaults()) | RECBOLE_CODE_KEYS  # RUNTIME_KEYS: not suggested
    for key, value in settings.items():
        name = f"--{key}" if source is None else f"{key!r} in {source}"
        if known_only and key not in known and key not in RUNTIME_KEYS:
            hint = suggestion(key, known) or "; see properties/overall.yaml and RecBole's settings"
            raise ColdStartError(f"unknown setting {name}{hint}" + ("" if hint.endswith("?") else "."))
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
    for (where, settings), (key, value) in itertools.product(sources, (run or {}).items()):
        given = settings.get(key)
        if value is not None and given is not None and str(given) != str(value):
            raise ColdStartError(
                f"{where} sets {key}: {given}, but this run's {key} is {value!r} (--{key}); "
                f"the run's {key} is used: remove the {key} line, or run with --{key}={given}."
            )
    return merged


# Metrics that need scored (user, item, label) pairs or every item's rank, not a top-k over candidates.
NOT_TOPK_ON_CANDIDATES = {"auc", "gauc", "logloss", "mae", "rmse"}


def check_writable(path, setting):
    """``path`` exists as a writable folder, or can be made inside one."""
    existing = Path(path).absolute()
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir() or not os.access(existing, os.W_OK | os.X_OK):
        raise ColdStartError(
            f"{setting}: cannot write to {path} ({existing} is not a writable folder); "
            "expected a folder the run can create and write."
        )


def check_scenario(config):
    """``cold_start_scenario: hybrid`` builds on the item split; ``identity_features`` needs training items
    among the candidates, which only the hybrid scenario has."""
    scenario = str(setting(config, "cold_start_scenario")).lower()
    group_by = str((config.get("eval_args") or {}).get("group_by")).lower()
    if scenario == "hybrid" and group_by != "item":
        raise ColdStartError(
            f"cold_start_scenario: hybrid splits items itself (eval_args.group_by: item); got "
            f"eval_args.group_by: {group_by}."
        )
    ratio = config.get("hybrid_cold_ratio")
    if scenario == "hybrid" and isinstance(ratio, (int, float)) and not 0 < ratio < 1:
        raise ColdStartError(
            f"hybrid_cold_ratio: expected the share of items held out as cold, between 0 and 1 "
            f"(exclusive); got {ratio!r}."
        )
    if config.get("identity_features") is True and scenario != "hybrid":
        raise ColdStartError(
            "identity_features: True needs cold_start_scenario: hybrid (in the item scenario no "
            "candidate is a training item, so no candidate has an identity)."
        )


def check_final(config):
    """Checks across settings, on the final (merged) configuration; each message names the settings."""
    metrics, cutoffs = as_list(config.get("metrics")), as_list(config.get("topk"))
    eval_args = config.get("eval_args") or {}
    if str(eval_args.get("group_by")).lower() == "item":
        for metric in metrics:
            if isinstance(metric, str) and metric.lower() in NOT_TOPK_ON_CANDIDATES:
                raise ColdStartError(
                    f"metrics: {metric} needs labelled pairs or full ranks; the item split ranks the split's "
                    "items and reports top-k metrics (Recall, NDCG, Precision, Hit, MRR, MAP, Rec, DCG, ...)."
                )
        if config.get("valid_metric_bigger") is False:
            raise ColdStartError(
                f"valid_metric_bigger: False keeps the epoch (and makes run_hyper pick the settings) with the lowest "
                f"{config.get('valid_metric')}, but the item split's top-k metrics are better when bigger; "
                "expected True (or leave it out)."
            )
    check_scenario(config)
    field_separator, seq_separator = config.get("field_separator"), config.get("seq_separator")
    if isinstance(seq_separator, str) and seq_separator and seq_separator == field_separator:
        raise ColdStartError(
            f"seq_separator {seq_separator!r} is also the field_separator: no token_seq cell can hold it, so every "
            "cell would be read as one token; expected another character (RecBole's default: ' ')."
        )
    if config.get("USER_ID_FIELD") is not None and config.get("USER_ID_FIELD") == config.get("ITEM_ID_FIELD"):
        raise ColdStartError(
            f"USER_ID_FIELD and ITEM_ID_FIELD are both {config['USER_ID_FIELD']!r}; expected two different columns "
            "of the .inter file (e.g. user_id and item_id)."
        )
    both = set(config.get("load_col") or {}) & set(config.get("unload_col") or {})
    if both:
        raise ColdStartError(
            f"load_col and unload_col both name the {sorted(both)} file(s); expected one of them "
            "per file (load_col lists what to read, unload_col what to skip)."
        )
    if config.get("checkpoint_dir"):
        check_writable(config["checkpoint_dir"], "checkpoint_dir")
    check_writable("log", "the working directory (RecBole writes ./log there)")
    valid_metric = config.get("valid_metric")
    listed = [m.lower() for m in metrics if isinstance(m, str)]
    if isinstance(valid_metric, str) and listed:
        name, _, cutoff = valid_metric.partition("@")
        if name.lower() not in listed:
            raise ColdStartError(
                f"valid_metric {valid_metric!r}: expected one of the metrics computed "
                f"({', '.join(map(str, metrics))}), at a topk cut-off."
            )
        topk_metric = metric_names().get(name.lower(), (name, False))[1]
        if topk_metric and (not cutoff.isdigit() or int(cutoff) not in cutoffs):
            raise ColdStartError(f"valid_metric {valid_metric!r}: expected NAME@K with K in topk {list(cutoffs)}.")


def precheck(model, config_file_list=None, config_dict=None):
    """The command line's check before torch loads: the model name, then the settings, returned merged."""
    if isinstance(model, str):
        check_model_name(model)
    return check_user_settings(config_file_list, config_dict, source=None)
