"""The wall between the plugin and RecBole's internals: every private behaviour of RecBole it overrides or
relies on, listed in one place, guarded by the supported version, pinned by a test.

RecBole 1.2.1 offers no public hook for what the item cold-start protocol must change (how the Config
resolves models and settings, how the Dataset reads and numbers tokens, how loaders cut batches, how the
trainer evaluates and saves). The plugin therefore overrides private methods; each is listed below with
what it relies on. The plugin's classes never define a private RecBole name themselves: they inherit a
*routes* mixin built here, which sends RecBole's call of ``_name`` to the plugin's ``plugin_name`` and
offers RecBole's own behaviour as ``recbole_name``. A plugin override continues the chain with
``super().plugin_name(...)``; the last link is RecBole's.

``tests/test_recbole_compat.py`` pins every listed RecBole function by a hash of its source: a RecBole
release that changes one fails that test, naming the function, before it can break a run silently.
"""

import warnings
from typing import NamedTuple

import numpy as np
import recbole
from recbole.evaluator.register import metric_information, metric_types, metrics_dict, smaller_metrics

SUPPORTED_RECBOLE = "1.2.1"


class Private(NamedTuple):
    owner: str  # where RecBole (or torch) defines it, as module.Class
    name: str  # the private attribute
    relies_on: str  # why the plugin needs it, and what of RecBole's behaviour it assumes
    digest: str  # sha256 prefix of the owner's source of it (tests/test_recbole_compat.py)
    is_property: bool = False


CONFIG = (
    Private(
        "recbole.config.configurator.Config",
        "_get_model_and_dataset",
        "called first by Config.__init__ to resolve the model class: the plugin's models come first, an "
        "unknown name is one error line",
        "8dac22b5bb63",
    ),
    Private(
        "recbole.config.configurator.Config",
        "_load_internal_config_dict",
        "called once with (model, model class, dataset) after RecBole's own property files: the plugin "
        "adds its layers (overall, dataset, model, tuned values) on top",
        "0c02574bc56f",
    ),
    Private(
        "recbole.config.configurator.Config",
        "_load_cmd_line",
        "Config parses sys.argv itself: the plugin's commands parse their own arguments, so it reads none",
        "9cad35cc9559",
    ),
    Private(
        "recbole.config.configurator.Config",
        "_convert_config_dict",
        "RecBole eval()s string values; the plugin parses them strictly (settings.convert_value), never eval",
        "48152baf9a7a",
    ),
    Private(
        "recbole.config.configurator.Config",
        "_get_final_config_dict",
        "merges the layers into final_config_dict: the plugin merges eval_args key by key and checks the "
        "final settings",
        "047402aa887d",
    ),
    Private(
        "recbole.config.configurator.Config",
        "_set_train_neg_sample_args",
        "derives train_neg_sample_args: the plugin refuses a pairwise model without negatives",
        "10e7e413f68a",
    ),
    Private(
        "recbole.config.configurator.Config",
        "_init_device",
        "picks the device and, for data-parallel runs, asks NCCL with one GPU per process: the plugin joins "
        "its own process group (gloo on CPUs)",
        "d6b946b3b2e0",
    ),
)
DATASET = (
    Private(
        "recbole.data.dataset.dataset.Dataset",
        "_load_data",
        "reads the atomic files into inter_feat / item_feat / user_feat: the plugin then puts rows in a "
        "canonical order",
        "9da47b33da9c",
    ),
    Private(
        "recbole.data.dataset.dataset.Dataset",
        "_load_feat",
        "reads one atomic file (pandas): the plugin reads it from its bytes (data.fast_load), once",
        "9948d02fed03",
    ),
    Private(
        "recbole.data.dataset.dataset.Dataset",
        "_remap",
        "numbers tokens in order of first appearance: the plugin numbers them in sorted order",
        "51fd4947aa82",
    ),
    Private(
        "recbole.data.dataset.dataset.Dataset",
        "_filter_inter_by_user_or_item",
        "drops interactions without a .user / .item row: the plugin does it by category codes and counts "
        "them in a warning",
        "ea9f7d3e88eb",
    ),
    Private(
        "recbole.data.dataset.dataset.Dataset",
        "_filter_by_inter_num",
        "filters by numbers of interactions: the plugin counts per id code",
        "39e513ebe9a9",
    ),
    Private(
        "recbole.data.dataset.dataset.Dataset",
        "_dataframe_to_interaction",
        "converts the tables to Interactions: the plugin pads sequence fields in one numpy scatter",
        "b27637d6edd1",
    ),
)
SAMPLER = (
    Private(
        "recbole.sampler.sampler.AbstractSampler",
        "_build_alias_table",
        "one popularity table over all items: the plugin draws each phase's negatives from its split only",
        "84d6dc143e06",
    ),
)
TRAIN_LOADER = (
    Private(
        "torch.utils.data.dataloader.DataLoader",
        "_index_sampler",
        "the batches' index lists: the plugin's batches hold whole users (and each rank its share)",
        "362bb4bb9d4b",
        is_property=True,
    ),
    Private(
        "recbole.data.dataloader.general_dataloader.TrainDataLoader",
        "_init_batch_size_and_step",
        "sets step from train_batch_size (divided by the world size): the plugin keeps the whole batch",
        "f59aca6cf0a3",
    ),
    Private(
        "recbole.data.dataloader.abstract_dataloader.NegSampleDataLoader",
        "_neg_sampling",
        "dynamic negatives: the plugin scores the candidates as pairs, without RecBole's copies and loop",
        "d46baeb70149",
    ),
)
EVAL_LOADER = (
    Private(
        "torch.utils.data.dataloader.DataLoader",
        "_index_sampler",
        "the batches' index lists: in a data-parallel run each rank evaluates its block (or its own) users",
        "362bb4bb9d4b",
        is_property=True,
    ),
    Private(
        "recbole.data.dataloader.general_dataloader.FullSortEvalDataLoader",
        "_init_batch_size_and_step",
        "users per batch from eval_batch_size / items: the plugin also bounds the profiles' width",
        "2570d50a7e78",
    ),
)
TRAINER = (
    Private(
        "recbole.trainer.trainer.Trainer",
        "_build_optimizer",
        "builds the optimizer from model.parameters(): the plugin passes a model's own groups (FBSM's "
        "separate learning rates for D and V)",
        "81f2ebf61cca",
    ),
    Private(
        "recbole.trainer.trainer.Trainer",
        "_train_epoch",
        "one epoch: the plugin weighs each rank's loss by its share and stops on a diverged loss",
        "2ee67cb58ea7",
    ),
    Private(
        "recbole.trainer.trainer.Trainer",
        "_valid_epoch",
        "one validation, whose score fit() compares with its best by utils.early_stopping: the plugin feeds "
        "callbacks and applies the paper's early stopping",
        "711ddf0c4623",
    ),
    Private(
        "recbole.trainer.trainer.Trainer",
        "_save_checkpoint",
        "pickles the Config in place: the plugin writes plain settings atomically",
        "59378042d807",
    ),
    Private(
        "recbole.trainer.trainer.Trainer",
        "_full_sort_batch_eval",
        "scores a batch against all items: the plugin scores the split's candidates only",
        "82664fc5e5aa",
    ),
    Private(
        "recbole.trainer.trainer.Trainer",
        "_map_reduce",
        "averages per-rank metrics: the plugin's collector already gathered every rank's rows",
        "c1831d5e24de",
    ),
)
# private behaviour relied on without overriding it
RELIED_ON = (
    Private(
        "recbole.utils.utils.early_stopping",
        "",
        "counts a score equal to the best as an improvement (`>=`, `<=` when smaller is better): the plugin's "
        "tie guard nudges the kept best by one ulp so that a later equal score does not replace it",
        "1890e39e7fb8",
    ),
    Private(
        "recbole.evaluator.collector.Collector",
        "eval_batch_collect",
        "asks self.register.need('rec.items' / 'rec.topk') before computing them: the plugin's collector "
        "supplies its own top-k and hides those keys meanwhile",
        "e7ec500fc074",
    ),
    Private(
        "recbole.evaluator.register",
        "",
        "Config and Evaluator read the module-level dicts metrics_dict, metric_types, metric_information "
        "and smaller_metrics: the plugin's metrics are added to them (register_metric)",
        "0c94706bfecc",
    ),
)
OVERRIDDEN = CONFIG + DATASET + SAMPLER + TRAIN_LOADER + EVAL_LOADER[1:] + TRAINER


def check_version():
    """A warning when the installed RecBole is not the release these overrides were written and pinned for."""
    if recbole.__version__ != SUPPORTED_RECBOLE:
        warnings.warn(
            f"recbole-fbsm was written for RecBole {SUPPORTED_RECBOLE} and overrides some of its private "
            f"methods (recbole_fbsm/recbole_compat.py); RecBole {recbole.__version__} is installed: run "
            "tests/test_recbole_compat.py to see which of them changed.",
            RuntimeWarning,
            stacklevel=2,
        )


def routes(mixin_name, privates):
    """A mixin class routing each private name of ``privates`` to ``plugin_<name>`` (default: RecBole's own,
    ``recbole_<name>``); put it right before the RecBole class in the bases."""
    mixin = type(
        mixin_name, (), {"__doc__": "Routes RecBole's private calls: " + ", ".join(p.name for p in privates) + "."}
    )
    for private in privates:
        public = private.name.lstrip("_")
        if private.is_property:
            setattr(mixin, private.name, property(lambda self, p=public: getattr(self, "plugin_" + p)()))
            setattr(mixin, "recbole_" + public, lambda self, n=private.name: getattr(super(mixin, self), n))
            setattr(mixin, "plugin_" + public, lambda self, p=public: getattr(self, "recbole_" + p)())
            continue
        setattr(
            mixin, private.name, lambda self, *args, p=public, **kwargs: getattr(self, "plugin_" + p)(*args, **kwargs)
        )
        setattr(
            mixin,
            "recbole_" + public,
            lambda self, *args, n=private.name, **kwargs: getattr(super(mixin, self), n)(*args, **kwargs),
        )
        setattr(
            mixin,
            "plugin_" + public,
            lambda self, *args, p=public, **kwargs: getattr(self, "recbole_" + p)(*args, **kwargs),
        )
    return mixin


ConfigRoutes = routes("ConfigRoutes", CONFIG)
DatasetRoutes = routes("DatasetRoutes", DATASET)
SamplerRoutes = routes("SamplerRoutes", SAMPLER)
TrainLoaderRoutes = routes("TrainLoaderRoutes", TRAIN_LOADER)
EvalLoaderRoutes = routes("EvalLoaderRoutes", EVAL_LOADER)
TrainerRoutes = routes("TrainerRoutes", TRAINER)


def register_metric(metric_class):
    """Add a metric class to RecBole's registries (the dicts its Config and Evaluator read)."""
    name = metric_class.__name__.lower()
    metrics_dict[name] = metric_class
    metric_types[name] = metric_class.metric_type
    metric_information[name] = metric_class.metric_need
    if metric_class.smaller and name not in smaller_metrics:
        smaller_metrics.append(name)


def restore_numpy_aliases():
    """RecBole 1.2.1 uses the aliases numpy 2 removed (np.float_, np.bool, np.long, ...): fill the missing ones."""
    aliases = {
        "bool": np.bool_,
        "int": np.int64,
        "float": np.float64,
        "complex": np.complex128,
        "object": np.object_,
        "str": np.str_,
        "long": np.int64,
        "unicode": np.str_,
        "float_": np.float64,
        "complex_": np.complex128,
        "unicode_": np.str_,
    }
    for name, target in aliases.items():
        # only what numpy lacks; looked up in the namespace, as getattr(np, "object") warns about the alias
        if name not in vars(np):
            setattr(np, name, target)


check_version()
