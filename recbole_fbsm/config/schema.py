"""The plugin's settings: each key's check (its type), and the keys RecBole's runs know without a property file.
Defaults and their meanings live in the property files only: ``properties/overall.yaml``, and over it
``properties/model/MODEL.yaml``; code reads a plugin setting through ``setting(config, key)``, never with a fallback
of its own. ``RECBOLE_CHECKS`` types RecBole's own settings."""

import functools

import yaml

from recbole_fbsm.config.checks import (
    SEED_MAX,
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

# feature_weighting's choices; an alias is resolved before use, so a fitted model (and its artifact) holds the target
WEIGHTINGS = ("tfidf", "bm25", "tf", "none", "binary")
WEIGHTING_ALIASES = {"none": "tf"}  # "none": raw term counts, which is "tf"
SIMILARITIES = ("cosine", "asymmetric", "jaccard", "tversky", "dot")  # ItemKNNCBF's similarity
LEARNERS = ("adam", "adamw", "sgd", "adagrad", "rmsprop", "sparse_adam")  # RecBole's learner
STATES = ("info", "debug", "warning", "error", "critical")  # RecBole's logging level


# {key: its check (value -> what was expected, or None)}
PLUGIN_SETTINGS = {
    # item features
    "feature_fields": optional(field_names(nonempty=True)),
    "feature_weighting": choice(WEIGHTINGS, case=True),
    "bm25_k1": number(0),
    "bm25_b": unit_interval,
    "feature_normalize": flag,
    "feature_shrink": number(0),
    "field_weights": optional(mapping_of(text, number(0), "{words: 1, tags: 2}")),
    "stop_words": optional(stop_words),
    # the protocol and the plugin's switches
    "split_seed": optional(integer(0, SEED_MAX)),
    "cold_start_scenario": choice(("item", "hybrid")),
    "hybrid_cold_ratio": number(0, strict=True),
    "hybrid_warm_split": split_ratios,
    "hybrid_valid_group": choice(("all", "cold", "warm")),
    "identity_features": flag,
    "identity_weight": number(0, strict=True),
    "identity_dropout": unit_interval,
    "warm_model": text,
    "content_model": text,
    "torch_threads": optional(thread_count),
    "train_batch_by_user": flag,
    "valid_before_training": flag,
    "bpr_user_weighting": flag,
    "bpr_profile_alpha": number(0),
    "context_distinct_tokens": flag,
    "context_use_item_id": flag,
    "context_eval_chunk": integer(1),
    "eval_user_sample": optional(integer(1)),
    "use_tuned_properties": flag,
    "dist_backend": choice(("auto", "gloo", "nccl")),
    "dist_timeout": number(0, strict=True),
    "parallel_sync": choice(("gradients",)),
    # the warm BPR-MF backbone (DropoutNet, Heater, ALDI; FBSM's alignment)
    "warm_checkpoint": optional(text),
    "warm_embedding_size": integer(1),
    "warm_epochs": integer(0),
    "warm_batch_size": integer(1),
    "warm_learning_rate": number(0, strict=True),
    "warm_reg": number(0),
    # the models' own settings (properties/model/*.yaml set them)
    # FBSM and UFSM
    "rank": integer(1),
    "reg_V": number(0),
    "reg_D": number(0),
    "init_D": number(),
    "init_std": number(0),
    "learning_rate_D": optional(number(0)),
    "align_weight": number(0),
    "align_temperature": number(0, strict=True),
    "fbsm_loss": choice(("bpr", "softmax")),
    "softmax_temperature": number(0, strict=True),
    "learning_rate_identity": number(0),
    "n_functions": integer(1),
    "reg_M": number(0),
    "reg_W": number(0),
    "init_W": number(),
    # ItemKNNCBF
    "similarity": choice(SIMILARITIES),
    "shrink": number(0),
    "knn": optional(integer(1)),
    "similarity_exponent": number(0, strict=True),
    "asymmetric_alpha": unit_interval,
    "tversky_alpha": number(0),
    "tversky_beta": number(0),
    # DropoutNet, Heater, ALDI (reg_weight: the authors' for Heater and ALDI; DropoutNet: none)
    "hidden_sizes": positive_integers,
    "output_size": optional(integer(1)),
    "dropout_rate": unit_interval,
    "reg_weight": number(0),
    "n_experts": integer(1),
    "randomized_rate": unit_interval,
    "alignment_weight": number(0),
    "teacher_weighting": flag,
    "freq_coef_M": number(0),
}
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
# Keys the plugin or RecBole sets at run time or accepts from the caller without a property file.
RUNTIME_KEYS = set(
    "model dataset config_files run_id local_rank world_size nproc offset ip port device "
    "MODEL_TYPE MODEL_INPUT_TYPE eval_type single_spec valid_neg_sample_args test_neg_sample_args encoding".split()
)
# Keys RecBole 1.2.1's code reads as config["key"] with no property file defining them, for the models a run
# accepts (general and context-aware) and its trainer, metrics and datasets.
RECBOLE_CODE_KEYS = set(
    "cin feature_num has_residual norm tail_ratio token_num_threshold xgb_early_stopping_rounds".split()
)
# every checked key: the plugin's settings and RecBole's
SPECS = {**PLUGIN_SETTINGS, **RECBOLE_CHECKS}


@functools.cache
def property_defaults(model=None):
    """A run's defaults: ``properties/overall.yaml``'s settings, and ``properties/model/MODEL.yaml``'s over them."""
    files = [PROPERTIES_DIR / "overall.yaml", PROPERTIES_DIR / "model" / f"{model}.yaml"]
    loaded = [yaml.safe_load(path.read_text(encoding="utf-8")) or {} for path in files if path.is_file()]
    return {key: value for values in loaded for key, value in values.items()}


def _value(config, key):
    try:
        return config[key]
    except KeyError:
        return None


def setting(config, key):
    """``config[key]``, or the property files' default for the config's model when the config does not set it."""
    if key not in PLUGIN_SETTINGS:
        raise KeyError(f"{key!r} is no plugin setting (config/schema.py)")
    value = _value(config, key)
    model = _value(config, "model")
    return property_defaults(model if isinstance(model, str) else None).get(key) if value is None else value
