"""The one table of the plugin's settings: each key's check and where its default comes from (docs/development.md);
code reads a plugin setting through ``setting(config, key)``, never with a fallback of its own. ``RECBOLE_CHECKS``
types RecBole's own settings."""

from collections.abc import Callable
from typing import NamedTuple

import yaml

from recbole_fbsm.config.checks import (
    LEARNERS,
    SEED_MAX,
    STATES,
    choice,
    clip_grad_norm,
    encoding_name,
    field_names,
    flag,
    integer,
    intervals,
    mapping_of,
    metrics,
    neg_sample_args,
    number,
    optional,
    positive_integers,
    split_ratios,
    stop_words,
    text,
    thread_count,
    topk,
    unit_interval,
)
from recbole_fbsm.config.paths import PROPERTIES_DIR

OVERALL, MODEL = "overall", "model"
# feature_weighting's choices; an alias is resolved before use, so a fitted model (and its artifact) holds the target
WEIGHTINGS = ("tfidf", "bm25", "tf", "none", "binary")
WEIGHTING_ALIASES = {"none": "tf"}  # "none": raw term counts, which is "tf"
SIMILARITIES = ("cosine", "asymmetric", "jaccard", "tversky", "dot")  # ItemKNNCBF's similarity


class Setting(NamedTuple):
    check: Callable  # value -> what was expected, or None
    layer: str = OVERALL  # OVERALL: properties/overall.yaml sets the default; MODEL: the model files set it
    default: object = None  # a MODEL setting's value when no file sets it (OVERALL: overall.yaml's, filled below)
    per_model: dict = None  # {model: the value properties/model/MODEL.yaml sets instead of default}


S = Setting
BM25_MODELS = {"FBSM": "bm25", "UFSM": "bm25", "ItemKNNCBF": "bm25"}
PLUGIN_SETTINGS = {
    # item features
    "feature_fields": S(optional(field_names(nonempty=True))),
    "feature_weighting": S(choice(WEIGHTINGS, case=True), per_model=BM25_MODELS),
    "bm25_k1": S(number(0)),
    "bm25_b": S(unit_interval),
    "feature_normalize": S(flag),
    "feature_shrink": S(number(0), per_model={"FBSM": 1, "UFSM": 1, "ItemKNNCBF": 1}),
    "field_weights": S(optional(mapping_of(text, number(0), "{words: 1, tags: 2}"))),
    "stop_words": S(optional(stop_words)),
    # the protocol and the plugin's switches
    "split_seed": S(optional(integer(0, SEED_MAX))),
    "cold_start_scenario": S(choice(("item", "hybrid"))),
    "hybrid_cold_ratio": S(number(0, strict=True)),
    "hybrid_warm_split": S(split_ratios),
    "hybrid_valid_group": S(choice(("all", "cold", "warm"))),
    "identity_features": S(flag),
    "identity_weight": S(number(0, strict=True)),
    "identity_dropout": S(unit_interval),
    "warm_model": S(text),
    "content_model": S(text),
    "torch_threads": S(optional(thread_count)),
    "train_batch_by_user": S(flag, per_model={"FBSM": True, "UFSM": True}),
    "valid_before_training": S(flag, per_model={"FBSM": True, "UFSM": True}),
    "bpr_user_weighting": S(flag),
    "bpr_profile_alpha": S(number(0)),
    "context_distinct_tokens": S(flag),
    "context_use_item_id": S(flag),
    "context_eval_chunk": S(integer(1)),
    "eval_user_sample": S(optional(integer(1))),
    "use_tuned_properties": S(flag),
    "dist_backend": S(choice(("auto", "gloo", "nccl"))),
    "dist_timeout": S(number(0, strict=True)),
    "parallel_sync": S(choice(("average", "gradients"))),
    "parallel_average_every": S(integer(1)),
    "parallel_scale_learning_rate": S(flag),
    # the warm BPR-MF backbone (DropoutNet, Heater, ALDI; FBSM's alignment)
    "warm_checkpoint": S(optional(text)),
    "warm_embedding_size": S(integer(1)),
    "warm_epochs": S(integer(0)),
    "warm_batch_size": S(integer(1)),
    "warm_learning_rate": S(number(0, strict=True)),
    "warm_reg": S(number(0)),
    # FBSM and UFSM
    "rank": S(integer(1), MODEL, 64),
    "reg_V": S(number(0), MODEL, 0.0001),
    "reg_D": S(number(0), MODEL, 0.0001),
    "init_D": S(number(), MODEL, 1.0),
    "init_std": S(number(0), MODEL, 0.01),
    "learning_rate_D": S(optional(number(0)), MODEL, None, per_model={"FBSM": 0.003}),
    "align_weight": S(number(0), MODEL, 0),
    "align_temperature": S(number(0, strict=True), MODEL, 0.1),
    "fbsm_loss": S(choice(("bpr", "softmax")), MODEL, "softmax"),
    "softmax_temperature": S(number(0, strict=True), MODEL, 0.1),
    "learning_rate_identity": S(number(0), MODEL, 0.003),
    "n_functions": S(integer(1), MODEL, 1),
    "reg_M": S(number(0), MODEL, 0.0001),
    "reg_W": S(number(0), MODEL, 0.0001),
    "init_W": S(number(), MODEL, 1.0),
    # ItemKNNCBF
    "similarity": S(choice(SIMILARITIES), MODEL, "dot"),
    "shrink": S(number(0), MODEL, 0),
    "knn": S(optional(integer(1)), MODEL, None),
    "similarity_exponent": S(number(0, strict=True), MODEL, 1.0),
    "asymmetric_alpha": S(unit_interval, MODEL, 0.5),
    "tversky_alpha": S(number(0), MODEL, 1.0),
    "tversky_beta": S(number(0), MODEL, 1.0),
    # DropoutNet, Heater, ALDI (reg_weight: the authors' for Heater and ALDI; DropoutNet: none)
    "hidden_sizes": S(positive_integers, MODEL, [200, 100]),
    "output_size": S(optional(integer(1)), MODEL, None),
    "dropout_rate": S(unit_interval, MODEL, 0.5),
    "reg_weight": S(number(0), MODEL, 0, per_model={"Heater": 0.0001, "ALDI": 0.0001}),
    "n_experts": S(integer(1), MODEL, 5),
    "randomized_rate": S(unit_interval, MODEL, 0.5),
    "alignment_weight": S(number(0), MODEL, 0.0001),
    "teacher_weighting": S(flag, MODEL, True),
    "freq_coef_M": S(number(0), MODEL, 4),
}
_OVERALL_YAML = yaml.safe_load((PROPERTIES_DIR / "overall.yaml").read_text(encoding="utf-8"))
PLUGIN_SETTINGS.update(
    {key: spec._replace(default=_OVERALL_YAML[key]) for key, spec in PLUGIN_SETTINGS.items() if spec.layer == OVERALL}
)

RECBOLE_CHECKS = {
    "learning_rate": number(0),
    "learner": choice(LEARNERS),
    "seed": integer(0, SEED_MAX),
    "epochs": integer(1),
    "eval_step": integer(1),
    "stopping_step": integer(1),
    "train_batch_size": integer(1),
    "eval_batch_size": integer(1),
    "topk": topk,
    "metrics": metrics,
    "valid_metric": text,
    "valid_metric_bigger": flag,
    "weight_decay": number(0),
    "state": optional(choice(STATES)),
    "use_gpu": flag,
    "show_progress": flag,
    "reproducibility": flag,
    "save_dataset": flag,
    "save_dataloaders": flag,
    "worker": integer(0),
    "shuffle": flag,
    "threshold": optional(mapping_of(text, number(), "{rating: 4}")),
    "load_col": optional(
        mapping_of(text, field_names(), "{inter: [user_id, item_id, rating], item: [item_id, genre]}")
    ),
    "unload_col": optional(mapping_of(text, field_names(), "{item: [plot]}")),
    "seq_len": optional(mapping_of(text, integer(1), "{words: 100}")),
    "train_neg_sample_args": neg_sample_args,
    "field_separator": text,
    "seq_separator": text,
    "USER_ID_FIELD": text,
    "ITEM_ID_FIELD": text,
    "data_path": text,
    "checkpoint_dir": text,
    "filter_inter_by_user_or_item": flag,
    "rm_dup_inter": optional(choice(("first", "last"), case=True)),
    "clip_grad_norm": optional(clip_grad_norm),
    "user_inter_num_interval": optional(intervals),
    "item_inter_num_interval": optional(intervals),
    "val_interval": optional(mapping_of(text, intervals, "{rating: '[3,inf)'}")),
    "encoding": optional(encoding_name),
    # RecBole models' sizes: 0 builds a model whose every score is 0 (the ranking is its tie breaking)
    "embedding_size": integer(1),
}
# every checked key: the plugin's settings and RecBole's
SPECS = {**{key: spec.check for key, spec in PLUGIN_SETTINGS.items()}, **RECBOLE_CHECKS}


def model_default(key, model):
    """The value ``properties/model/MODEL.yaml`` gives ``key``: its ``per_model`` entry, else the default."""
    spec = PLUGIN_SETTINGS[key]
    return (spec.per_model or {}).get(model, spec.default)


def setting(config, key):
    """``config[key]``, or the schema's default when the config does not set it."""
    try:
        value = config[key]
    except KeyError:
        value = None
    return PLUGIN_SETTINGS[key].default if value is None else value
