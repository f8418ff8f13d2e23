"""The one table of the plugin's settings: each key's check (type and range), default and meaning.

``PLUGIN_SETTINGS`` holds the settings the plugin defines. A ``default`` marked ``OVERALL`` must be the
value of ``properties/overall.yaml`` (``tests/config/test_schema.py`` compares them); ``MODEL`` settings are set by
the model files (``properties/model/*.yaml``), and their ``default`` is what a model reads when no file set
them (a RecBole Config built without the plugin's layers, an artifact of an older release): code reads a
plugin setting through ``setting(config, key)``, never with a fallback of its own. A model file that sets a
plugin setting to another value than ``default`` says so here, in ``per_model`` (``tests/config/test_schema.py`` holds
every model file equal to ``model_default``). ``RECBOLE_CHECKS`` adds
type checks to RecBole's own settings that the protocol relies on (their defaults are RecBole's).
"""

from collections.abc import Callable
from typing import NamedTuple

from recbole_fbsm.config.checks import (
    LEARNERS,
    SEED_MAX,
    STATES,
    choice,
    clip_grad_norm,
    distinct_nonempty_words,
    distinct_words,
    encoding_name,
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
    text,
    thread_count,
    topk,
    unit_interval,
)

OVERALL, MODEL = "overall", "model"
# feature_weighting's choices; an alias is resolved before use, so a fitted model (and its artifact) holds the target
WEIGHTINGS = ("tfidf", "bm25", "tf", "none", "binary")
WEIGHTING_ALIASES = {"none": "tf"}  # "none": raw term counts, which is "tf"
SIMILARITIES = ("cosine", "asymmetric", "jaccard", "tversky", "dot")  # ItemKNNCBF's similarity


class Setting(NamedTuple):
    check: Callable  # value -> what was expected, or None
    default: object  # the value when nothing sets it
    layer: str  # OVERALL: overall.yaml holds the default; MODEL: the model files set it
    doc: str
    per_model: dict = None  # {model: the value properties/model/MODEL.yaml sets instead of default}


S = Setting
PLUGIN_SETTINGS = {
    # item features
    "feature_fields": S(
        optional(distinct_nonempty_words), None, OVERALL, "the .item token fields used as features (~: all)"
    ),
    "feature_weighting": S(
        choice(WEIGHTINGS, case=True),
        "tfidf",
        OVERALL,
        "term weighting, statistics from training items only",
        per_model={"FBSM": "bm25", "UFSM": "bm25", "ItemKNNCBF": "bm25"},
    ),
    "bm25_k1": S(number(0), 1.2, OVERALL, "BM25's term-frequency saturation"),
    "bm25_b": S(unit_interval, 0.3, OVERALL, "BM25's length normalisation, 0 (none) to 1 (full)"),
    "feature_normalize": S(flag, True, OVERALL, "L2-normalise item feature rows"),
    "feature_shrink": S(
        number(0),
        0,
        OVERALL,
        "row shrink s, in units of the training rows' mean squared norm",
        per_model={"FBSM": 1, "UFSM": 1, "ItemKNNCBF": 1},
    ),
    "field_weights": S(
        optional(mapping_of(text, number(0), "{words: 1, tags: 2}")),
        None,
        OVERALL,
        "per-field weights of the cosine (~: one joint L2 norm)",
    ),
    # the protocol and the plugin's switches
    "split_seed": S(optional(integer(0, SEED_MAX)), None, OVERALL, "seed of the item split (~: seed)"),
    "cold_start_scenario": S(
        choice(("item", "hybrid")),
        "item",
        OVERALL,
        "item: cold items ranked among cold items (the paper); hybrid: warm and cold items together",
    ),
    "hybrid_cold_ratio": S(
        number(0, strict=True),
        0.2,
        OVERALL,
        "hybrid: share of the items held out as cold items (half validation, half test)",
    ),
    "hybrid_warm_split": S(
        split_ratios,
        [0.8, 0.1, 0.1],
        OVERALL,
        "hybrid: each user's likes of warm items split train/valid/test at random",
    ),
    "hybrid_valid_group": S(
        choice(("all", "cold", "warm")), "all", OVERALL, "hybrid: the group whose valid_metric picks the epoch"
    ),
    "identity_features": S(flag, False, OVERALL, "FBSM (hybrid scenario): an identity feature per training item"),
    "identity_weight": S(
        number(0, strict=True),
        1.0,
        OVERALL,
        "FBSM: value of an item's identity column beside its L2-normalised content row",
    ),
    "identity_dropout": S(
        unit_interval, 0.3, OVERALL, "FBSM: share of the training items whose identity is dropped in each batch"
    ),
    "warm_model": S(text, "BPR", OVERALL, "HybridBlend: the RecBole general model for warm items"),
    "content_model": S(text, "ItemKNNCBF", OVERALL, "HybridBlend: the content model for every item"),
    "torch_threads": S(
        optional(thread_count),
        "auto",
        OVERALL,
        "torch's CPU threads: auto (per phase, safe on busy cores) or N in every phase",
    ),
    "train_batch_by_user": S(
        flag, False, OVERALL, "training batches of whole users", per_model={"FBSM": True, "UFSM": True}
    ),
    "valid_before_training": S(
        flag, False, OVERALL, "the untrained model is a candidate checkpoint", per_model={"FBSM": True, "UFSM": True}
    ),
    "bpr_user_weighting": S(flag, False, OVERALL, "every user weighs the same in the BPR loss"),
    "bpr_profile_alpha": S(number(0), 0, OVERALL, "BPR differences scaled by (user's likes)^-alpha"),
    "context_distinct_tokens": S(flag, True, OVERALL, "context-aware models: a token_seq token counts once"),
    "context_use_item_id": S(flag, False, OVERALL, "context-aware models may embed the item id"),
    "context_eval_chunk": S(integer(1), 65536, OVERALL, "pairs per predict() call of context-aware evaluation"),
    "eval_user_sample": S(optional(integer(1)), None, OVERALL, "evaluate this many sampled users (~: all)"),
    "use_tuned_properties": S(flag, True, OVERALL, "apply properties/dataset/DATASET/MODEL.yaml"),
    "dist_backend": S(choice(("auto", "gloo", "nccl")), "auto", OVERALL, "torch.distributed backend"),
    "dist_timeout": S(number(0, strict=True), 1800, OVERALL, "seconds a data-parallel rank waits for the others"),
    "parallel_sync": S(
        choice(("average", "gradients")),
        "average",
        OVERALL,
        "data-parallel exchange: average the parameters every few steps, or the gradients every step",
    ),
    "parallel_average_every": S(integer(1), 16, OVERALL, "parallel_sync average: steps between two averages"),
    "parallel_scale_learning_rate": S(
        flag, True, OVERALL, "parallel_sync average: an SGD learning rate times the number of processes"
    ),
    # the warm BPR-MF backbone (DropoutNet, Heater, ALDI; FBSM's alignment)
    "warm_checkpoint": S(optional(text), None, OVERALL, "a BPR checkpoint of the same split, instead of training"),
    "warm_embedding_size": S(integer(1), 200, OVERALL, "rank of the warm embeddings"),
    "warm_epochs": S(integer(0), 100, OVERALL, "epochs of the warm BPR-MF"),
    "warm_batch_size": S(integer(1), 8192, OVERALL, "batch of the warm BPR-MF"),
    "warm_learning_rate": S(number(0, strict=True), 0.01, OVERALL, "Adam's learning rate of the warm BPR-MF"),
    "warm_reg": S(number(0), 0.0001, OVERALL, "L2 of the warm BPR-MF"),
    # FBSM and UFSM
    "rank": S(integer(1), 64, MODEL, "FBSM: h, the rank of V"),
    "reg_V": S(number(0), 0.0001, MODEL, "FBSM: lambda on ||V||^2"),
    "reg_D": S(number(0), 0.0001, MODEL, "FBSM: beta on ||D||^2"),
    "init_D": S(number(), 1.0, MODEL, "FBSM: initial D"),
    "init_std": S(number(0), 0.01, MODEL, "FBSM, UFSM: std of the random initial values"),
    "learning_rate_D": S(optional(number(0)), None, MODEL, "FBSM: D's learning rate (~: learning_rate)"),
    "align_weight": S(number(0), 0, MODEL, "FBSM: weight of the alignment to the warm model (0: off)"),
    "align_temperature": S(number(0, strict=True), 0.1, MODEL, "FBSM: temperature of that alignment"),
    "fbsm_loss": S(
        choice(("auto", "bpr", "softmax")),
        "auto",
        MODEL,
        "FBSM: bpr (sampled triplets, the paper), softmax (every training item a class); auto: softmax "
        "with identity_features, else bpr",
    ),
    "softmax_temperature": S(number(0, strict=True), 0.1, MODEL, "FBSM: temperature of fbsm_loss: softmax"),
    "softmax_negatives": S(
        optional(integer(1)),
        2000,
        MODEL,
        "FBSM: fbsm_loss: softmax over the batch's positives and N sampled training items (~: all)",
    ),
    "n_functions": S(integer(1), 1, MODEL, "UFSM: l, the number of global similarity functions"),
    "reg_M": S(number(0), 0.0001, MODEL, "UFSM: L2 on the users' mixture weights"),
    "reg_W": S(number(0), 0.0001, MODEL, "UFSM: L2 on the functions' weights"),
    "init_W": S(number(), 1.0, MODEL, "UFSM: initial W"),
    # ItemKNNCBF
    "similarity": S(choice(SIMILARITIES), "dot", MODEL, "ItemKNNCBF: the similarity"),
    "shrink": S(number(0), 0, MODEL, "ItemKNNCBF: added to the similarity's denominator"),
    "knn": S(optional(integer(1)), None, MODEL, "ItemKNNCBF: neighbours kept per item (~: all)"),
    "similarity_exponent": S(number(0, strict=True), 1.0, MODEL, "ItemKNNCBF: sim^p"),
    "asymmetric_alpha": S(unit_interval, 0.5, MODEL, "ItemKNNCBF: the asymmetric cosine's a"),
    "tversky_alpha": S(number(0), 1.0, MODEL, "ItemKNNCBF: Tversky's a"),
    "tversky_beta": S(number(0), 1.0, MODEL, "ItemKNNCBF: Tversky's b"),
    # DropoutNet, Heater, ALDI
    "hidden_sizes": S(positive_integers, [200, 100], MODEL, "DropoutNet: hidden layer sizes"),
    "output_size": S(optional(integer(1)), None, MODEL, "DropoutNet, Heater: output size (~: the warm rank)"),
    "dropout_rate": S(unit_interval, 0.5, MODEL, "DropoutNet: item preference dropout"),
    "reg_weight": S(
        number(0),
        0,
        MODEL,
        "DropoutNet, Heater, ALDI: L2 (weight decay) on the layers",
        per_model={"Heater": 0.0001, "ALDI": 0.0001},
    ),  # the authors' reg; DropoutNet: none
    "n_experts": S(integer(1), 5, MODEL, "Heater: mixture-of-experts size"),
    "randomized_rate": S(unit_interval, 0.5, MODEL, "Heater: randomized training rate"),
    "alignment_weight": S(number(0), 0.0001, MODEL, "Heater: weight of the alignment loss"),
    "teacher_weighting": S(flag, True, MODEL, "ALDI: weigh the distillation by item popularity"),
    "freq_coef_M": S(number(0), 4, MODEL, "ALDI: the popularity coefficient M"),
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
        mapping_of(text, distinct_words, "{inter: [user_id, item_id, rating], item: [item_id, genre]}")
    ),
    "unload_col": optional(mapping_of(text, distinct_words, "{item: [plot]}")),
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
