"""The plugin's settings: each key's check (its type), and the keys RecBole's runs know without a property file.
Defaults and their meanings live in the property files only: ``properties/overall.yaml``, and over it
``properties/model/MODEL.yaml``; code reads a plugin setting through ``setting(config, key)``, never with a fallback
of its own. ``RECBOLE_CHECKS`` types RecBole's own settings."""

import functools

import yaml

from recbole_fbsm.config.checks import (
    SEED_MAX,
    Problem,
    choice,
    encoding_name,
    field_names,
    flag,
    intervals,
    list_of,
    mapping_of,
    metric,
    number,
    optional,
    stop_words,
    text,
    thread_count,
    unchecked,
)
from recbole_fbsm.config.paths import PROPERTIES_DIR

# feature_weighting's choices; an alias is resolved before use, so a fitted model (and its artifact) holds the target
WEIGHTINGS = ("tfidf", "bm25", "tf", "none", "binary")
WEIGHTING_ALIASES = {"none": "tf"}  # "none": raw term counts, which is "tf"
SIMILARITIES = ("cosine", "asymmetric", "jaccard", "tversky", "dot")  # ItemKNNCBF's similarity
LEARNERS = ("adam", "adamw", "sgd", "adagrad", "rmsprop")  # RecBole's learner
STATES = ("info", "debug", "warning", "error", "critical")  # RecBole's logging level
unit_interval = number(0, 1)
positive, non_negative, above_zero = number(1, integer=True), number(0), number(0, strict=True)
_NEGATIVE_KEYS = mapping_of(
    None,
    "{distribution: uniform, sample_num: 1}",
    keys={
        "distribution": optional(choice(("uniform", "popularity", "none"))),
        "sample_num": positive,
        "alpha": number(),
        "dynamic": flag,
        "candidate_num": number(0, integer=True),
    },
)


def negative_sampling(value):
    """RecBole's negative sampling; dynamic sampling keeps the best of candidate_num draws, so it needs one."""
    problem = _NEGATIVE_KEYS(value)
    if problem is None and value.get("dynamic") and not value.get("candidate_num"):
        return Problem("candidate_num >= 1 with dynamic: True (the negative is the best of candidate_num draws)", 0)
    return problem


# {key: its check (value -> what was expected, or None)}
PLUGIN_SETTINGS = {
    # item features
    "feature_fields": optional(field_names(nonempty=True)),
    "feature_weighting": choice(WEIGHTINGS, case=True),
    "bm25_k1": non_negative,
    "bm25_b": unit_interval,
    "feature_normalize": flag,
    "feature_shrink": non_negative,
    "field_weights": optional(mapping_of(non_negative, "{words: 1, tags: 2}")),
    "stop_words": optional(stop_words),
    # the protocol and the plugin's switches
    "split_seed": optional(number(0, SEED_MAX, integer=True)),
    "cold_start_scenario": choice(("item", "hybrid")),
    "hybrid_cold_ratio": number(0, 1, strict=True),
    "hybrid_warm_split": list_of(
        above_zero, "three positive ratios [train, valid, test] that sum to 1, e.g. [0.8, 0.1, 0.1]", length=3, total=1
    ),
    "hybrid_valid_group": choice(("all", "cold", "warm")),
    "identity_features": flag,
    "identity_weight": above_zero,
    "identity_dropout": unit_interval,
    "warm_model": text,
    "content_model": text,
    "torch_threads": optional(thread_count),
    "train_batch_by_user": flag,
    "valid_before_training": flag,
    "bpr_user_weighting": flag,
    "bpr_profile_alpha": non_negative,
    "context_distinct_tokens": flag,
    "context_use_item_id": flag,
    "context_eval_chunk": positive,
    "eval_user_sample": optional(positive),
    "use_tuned_properties": flag,
    "dist_backend": choice(("auto", "gloo", "nccl")),
    "dist_timeout": above_zero,
    "parallel_sync": choice(("gradients",)),
    # the warm BPR-MF backbone (DropoutNet, Heater, ALDI; FBSM's alignment)
    "warm_checkpoint": optional(text),
    "warm_embedding_size": positive,
    "warm_epochs": number(0, integer=True),
    "warm_batch_size": positive,
    "warm_learning_rate": above_zero,
    "warm_reg": non_negative,
    # the models' own settings (properties/model/*.yaml set them)
    # FBSM and UFSM
    "rank": positive,
    "reg_V": non_negative,
    "reg_D": non_negative,
    "init_D": number(),
    "init_std": non_negative,
    "learning_rate_D": optional(non_negative),
    "align_weight": non_negative,
    "align_temperature": above_zero,
    "fbsm_loss": choice(("bpr", "softmax")),
    "softmax_temperature": above_zero,
    "learning_rate_identity": non_negative,
    "n_functions": positive,
    "reg_M": non_negative,
    "reg_W": non_negative,
    "init_W": number(),
    # ItemKNNCBF
    "similarity": choice(SIMILARITIES),
    "shrink": non_negative,
    "knn": optional(positive),
    "similarity_exponent": above_zero,
    "asymmetric_alpha": unit_interval,
    "tversky_alpha": non_negative,
    "tversky_beta": non_negative,
    # DropoutNet, Heater, ALDI (reg_weight: the authors' for Heater and ALDI; DropoutNet: none)
    "hidden_sizes": list_of(positive, "a list of positive integers, e.g. [200, 100]"),
    "output_size": optional(positive),
    "dropout_rate": unit_interval,
    "reg_weight": non_negative,
    "n_experts": positive,
    "randomized_rate": unit_interval,
    "alignment_weight": non_negative,
    "teacher_weighting": flag,
    "freq_coef_M": non_negative,
}
RECBOLE_CHECKS = {
    "learning_rate": non_negative,
    "learner": choice(LEARNERS),
    "seed": number(0, SEED_MAX, integer=True),
    "epochs": positive,
    "eval_step": positive,
    "stopping_step": positive,
    "train_batch_size": positive,
    "eval_batch_size": positive,
    "topk": list_of(positive, "a positive integer or a list of them, e.g. [10, 20]", single=True),
    "metrics": list_of(metric, "a list of metric names, e.g. [Recall, NDCG]", single=True),
    "valid_metric": text,
    "valid_metric_bigger": flag,
    "weight_decay": non_negative,
    "state": optional(choice(STATES)),
    "use_gpu": flag,
    "show_progress": flag,
    "reproducibility": flag,
    "save_dataset": flag,
    "save_dataloaders": flag,
    "worker": number(0, integer=True),
    "shuffle": flag,
    "threshold": optional(mapping_of(number(), "{rating: 4}")),
    "load_col": optional(mapping_of(field_names(), "{inter: [user_id, item_id, rating], item: [item_id, genre]}")),
    "unload_col": optional(mapping_of(field_names(), "{item: [plot]}")),
    "seq_len": optional(mapping_of(positive, "{words: 100}")),
    "train_neg_sample_args": optional(negative_sampling),
    "field_separator": text,
    "seq_separator": text,
    "USER_ID_FIELD": text,
    "ITEM_ID_FIELD": text,
    "data_path": text,
    "checkpoint_dir": text,
    "filter_inter_by_user_or_item": flag,
    "rm_dup_inter": optional(choice(("first", "last"), case=True)),
    "clip_grad_norm": optional(
        mapping_of(
            None,
            "{max_norm: 5, norm_type: 2}",
            keys={
                "max_norm": above_zero,
                "norm_type": above_zero,
                "error_if_nonfinite": flag,
                "foreach": optional(flag),
            },
        )
    ),
    "user_inter_num_interval": optional(intervals),
    "item_inter_num_interval": optional(intervals),
    "val_interval": optional(mapping_of(intervals, "{rating: '[3,inf)'}")),
    "encoding": optional(encoding_name),
    # what RecBole reads of eval_args: it ignores any other key, silently
    "eval_args": mapping_of(
        None,
        "{split: {RS: [0.8, 0.1, 0.1]}, group_by: item, order: RO, mode: full}",
        keys={
            "split": unchecked,
            "group_by": optional(choice(("item", "user", "none"))),
            "order": text,
            "mode": unchecked,
        },
    ),
    # RecBole models' sizes: 0 builds a model whose every score is 0 (the ranking is its tie breaking)
    "embedding_size": positive,
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


def setting(config, key):
    """``config[key]``, or the property files' default for the config's model when the config does not set it
    (``config``: RecBole's Config, a dict or ``Settings``)."""
    if key not in PLUGIN_SETTINGS:
        raise KeyError(f"{key!r} is no plugin setting (config/schema.py)")
    value, model = (config[name] if name in config else None for name in (key, "model"))
    return property_defaults(model if isinstance(model, str) else None).get(key) if value is None else value
