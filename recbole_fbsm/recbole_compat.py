"""The wall between the plugin and RecBole's internals: every RecBole method the plugin overrides (private or
public), every private name of RecBole (or torch, or pandas) it calls or reads, and every RecBole text it
matches, listed in one place with what it relies on, guarded by the supported version, pinned by a test.

RecBole 1.2.1 offers no public hook for what the item cold-start protocol must change (how the Config
resolves models and settings, how the Dataset reads and numbers tokens, how loaders cut batches, how the
trainer evaluates and saves). The plugin's classes override RecBole's methods directly, as RecBole's own
plugins do (RecBole-GNN): ``ColdStartDataset._load_data`` calls ``super()._load_data``, and a traceback names
both. ``tests/test_recbole_compat.py`` pins every function listed here by a hash of its source (a RecBole
release that changes one fails there, naming it), finds every override and every private name of RecBole's
in the plugin's source, and fails on one not listed here or on a listed one the plugin no longer uses.
"""

import re
import warnings
from typing import NamedTuple

import numpy as np
import recbole
from recbole.evaluator.register import metric_information, metric_types, metrics_dict, smaller_metrics

SUPPORTED_RECBOLE = "1.2.1"


class Pin(NamedTuple):
    source: str  # RecBole's (torch's, pandas') function or object the plugin relies on, as module.Class.attribute
    digest: str  # sha256 prefix of its source (tests/test_recbole_compat.py)
    relies_on: str  # what the plugin assumes of it, and why it needs it
    name: str = ""  # the private attribute read, or RecBole's text matched, when not the source's own name


_CONFIG = "recbole.config.configurator.Config."
_DATASET = "recbole.data.dataset.dataset.Dataset."
_LOADERS = "recbole.data.dataloader."
_TRAINER = "recbole.trainer.trainer.Trainer."

# RecBole's private methods the plugin's classes define (and continue with super())
OVERRIDDEN = (
    Pin(_CONFIG + "_get_model_and_dataset", "8dac22b5bb63", "resolves the model class: the plugin's come first"),
    Pin(
        _CONFIG + "_load_internal_config_dict",
        "0c02574bc56f",
        "called once after RecBole's property files: the plugin adds overall, dataset, model and tuned files",
    ),
    Pin(_CONFIG + "_load_cmd_line", "9cad35cc9559", "Config parses sys.argv itself: the plugin reads none"),
    Pin(_CONFIG + "_convert_config_dict", "48152baf9a7a", "RecBole eval()s strings: the plugin parses strictly"),
    Pin(
        _CONFIG + "_get_final_config_dict",
        "047402aa887d",
        "merges the layers: the plugin merges eval_args key by key and checks the final settings",
    ),
    Pin(
        _CONFIG + "_set_train_neg_sample_args",
        "10e7e413f68a",
        "derives train_neg_sample_args: the plugin refuses a pairwise model without negatives",
    ),
    Pin(
        _CONFIG + "_init_device",
        "d6b946b3b2e0",
        "asks NCCL with one GPU per process for data-parallel runs: the plugin joins its own group (gloo on CPUs)",
    ),
    Pin(_DATASET + "_load_data", "9da47b33da9c", "reads the atomic files: the plugin then sorts rows canonically"),
    Pin(_DATASET + "_load_feat", "9948d02fed03", "reads one atomic file (pandas): the plugin reads it once, fast"),
    Pin(_DATASET + "_remap", "51fd4947aa82", "numbers tokens by first appearance: the plugin in sorted order"),
    Pin(
        _DATASET + "_dataframe_to_interaction",
        "b27637d6edd1",
        "converts tables to Interactions: the plugin pads sequences in one scatter, or keeps item rows unpadded",
    ),
    Pin(
        "recbole.sampler.sampler.AbstractSampler._build_alias_table",
        "84d6dc143e06",
        "one popularity table over all items: the plugin draws each phase's negatives from its split only",
    ),
    Pin(
        "torch.utils.data.dataloader.DataLoader._index_sampler",
        "362bb4bb9d4b",
        "the batches' index lists: training batches hold whole users; each rank takes its share or block",
    ),
    Pin(
        _LOADERS + "general_dataloader.TrainDataLoader._init_batch_size_and_step",
        "f59aca6cf0a3",
        "sets step from train_batch_size (divided by the world size): the plugin keeps the whole batch",
    ),
    Pin(
        _LOADERS + "general_dataloader.FullSortEvalDataLoader._init_batch_size_and_step",
        "2570d50a7e78",
        "users per batch from eval_batch_size / items: the plugin also bounds the profiles' width",
    ),
    Pin(
        "recbole.trainer.trainer.Trainer._build_optimizer",
        "81f2ebf61cca",
        "builds the optimizer from model.parameters(): the plugin passes a model's groups (FBSM's D and V)",
    ),
    Pin(_TRAINER + "_train_epoch", "2ee67cb58ea7", "the plugin weighs each rank's loss, stops on a diverged loss"),
    Pin(
        _TRAINER + "_valid_epoch",
        "711ddf0c4623",
        "one validation, compared by fit() with utils.early_stopping: the plugin feeds callbacks, guards ties",
    ),
    Pin(_TRAINER + "_save_checkpoint", "59378042d807", "pickles the Config: the plugin writes plain settings"),
    Pin(_TRAINER + "_full_sort_batch_eval", "82664fc5e5aa", "scores all items: the plugin the split's candidates"),
    Pin(_TRAINER + "_map_reduce", "c1831d5e24de", "averages per-rank metrics: the collector gathered the rows"),
)
# RecBole's public methods the plugin's classes override (RecBole's hooks that only raise are not listed)
PUBLIC_OVERRIDDEN = (
    Pin(
        _CONFIG + "compatibility_settings",
        "5030d75b2f92",
        "aliases from names numpy 2 removed (np.float_): the plugin fills the missing ones",
    ),
    Pin(_DATASET + "build", "23efe0363311", "splits interactions: the plugin splits items (eval_args.group_by)"),
    Pin(
        _DATASET + "fields",
        "d3a5a32ca71b",
        "every field: the plugin hides item_id from a context model (a content model)",
    ),
    Pin(
        "recbole.sampler.sampler.Sampler.get_used_ids",
        "8658f8bd9b74",
        "a set per user and phase: the plugin's UsedIds arrays answer the same lookups",
    ),
    Pin(
        "recbole.sampler.sampler.AbstractSampler.sample_by_key_ids",
        "2ab472d027ec",
        "draws negatives per user id: the plugin from the phase's split",
    ),
    Pin(
        "recbole.evaluator.collector.Collector.get_data_struct",
        "b8062da76dd8",
        "the collected rows: in a data-parallel run the plugin gathers every rank's block",
    ),
    Pin(
        "recbole.evaluator.collector.Collector.eval_batch_collect",
        "e7ec500fc074",
        "asks register.need('rec.items' / 'rec.topk'): the plugin supplies its tie-fair top-k and hides those keys",
    ),
    Pin(
        "recbole.model.general_recommender.random.Random.full_sort_predict",
        "22eb55d0aa8d",
        "one random list for a whole batch: the plugin's Random scores every user independently",
    ),
    Pin(
        "recbole.trainer.trainer.AbstractTrainer.set_reduce_hook",
        "4c6644379cef",
        "hooks DDP's gradients: only with parallel_sync: gradients",
    ),
    Pin(
        "recbole.trainer.trainer.AbstractTrainer.sync_grad_loss",
        "1654005880a7",
        "a zero loss that touches every parameter: only with parallel_sync: gradients",
    ),
    Pin(
        _LOADERS + "abstract_dataloader.AbstractDataLoader.set_batch_size",
        "9f46c2f6892b",
        "sets the batch size: the plugin also drops its planned whole-user batches",
    ),
    Pin(_TRAINER + "resume_checkpoint", "fe7521a84a5c", "unpickles a Config: the plugin loads weights only"),
    Pin(_TRAINER + "evaluate", "a24a9dde4db8", "all items as candidates: the plugin the split's, ties at random"),
    Pin(_TRAINER + "fit", "330c04de95ea", "the plugin validates the untrained model first and keeps the best epoch"),
)
# RecBole's methods overridden for speed only: the same results as RecBole's own, faster
SPEED_ONLY = (
    Pin(_DATASET + "join", "340437f53686", "joins feature columns per batch: skipped for models reading their own"),
    Pin(
        _DATASET + "_filter_inter_by_user_or_item",
        "ea9f7d3e88eb",
        "drops interactions without a .user / .item row: the plugin compares category codes",
    ),
    Pin(_DATASET + "_filter_by_inter_num", "39e513ebe9a9", "filters by interaction counts: the plugin per id code"),
    Pin(
        _LOADERS + "abstract_dataloader.NegSampleDataLoader._neg_sampling",
        "d46baeb70149",
        "dynamic negatives: the plugin scores the candidates as pairs, without RecBole's copies and loop",
    ),
    Pin(
        _LOADERS + "general_dataloader.TrainDataLoader.collate_fn",
        "a7f18995d2de",
        "indexes every column with a numpy array: the plugin takes the rows by index_select",
    ),
    Pin(
        _LOADERS + "general_dataloader.FullSortEvalDataLoader.collate_fn",
        "dec134094f25",
        "one full_like per user for history and positives: the plugin gathers rows of two CSR matrices",
    ),
)
# RecBole's private methods the plugin calls without overriding them
CALLED = (
    Pin(_CONFIG + "_update_internal_config_dict", "6f0582adfbb8", "reads a property file into the layers"),
    Pin(_DATASET + "_parse_intervals_str", "cd1077494e9b", "parses *_inter_num_interval as RecBole does"),
    Pin(_DATASET + "_within_intervals", "9eac5a7392ea", "tests counts against those intervals"),
    Pin(_DATASET + "_get_load_and_unload_col", "2ed5985d0f05", "the columns load_col / unload_col keep"),
    Pin(_DATASET + "_change_feat_format", "9343965ca719", "turns the tables into Interactions before a split"),
)
# private attributes the plugin reads (pinned: where they are set), and pandas' NA strings
READ = (
    Pin(
        _LOADERS + "abstract_dataloader.AbstractDataLoader.__init__",
        "03bc7d40b609",
        "a loader's dataset: the split whose items, users and features the plugin's code needs",
        "_dataset",
    ),
    Pin(
        _LOADERS + "abstract_dataloader.AbstractDataLoader.__init__",
        "03bc7d40b609",
        "a loader's sampler: the plugin's dynamic negatives draw from it",
        "_sampler",
    ),
    Pin(
        "recbole.evaluator.collector.DataStruct.__init__",
        "80fcffea1b11",
        "the collected tensors by key: the plugin gathers and hides keys in it",
        "_data_dict",
    ),
    Pin(
        "pandas._libs.parsers.STR_NA_VALUES",
        "20b7e48a67f7",
        "pandas' NA strings: float cells RecBole reads as missing",
    ),
)

# RecBole's texts the plugin matches, each pinned below (TEXTS) to where RecBole writes it
NAN_LOSS = "Training loss is nan"  # the ValueError of Trainer._check_nan
STOP_LINE = "Finished training, best eval result in epoch"  # fit()'s early-stopping line
TRAINING_LINE = re.compile(r"^epoch (\d+) training \[time: ([\d.]+)s, (.+)\]$", re.S)
EVALUATING_LINE = re.compile(r"^epoch (\d+) evaluating \[time: ([\d.]+)s, valid_score: (\S+)\]$", re.S)
RECBOLE_LOG_ROOT = "./log"  # init_logger's folder, hard-coded
TEXTS = (
    Pin(_TRAINER + "_check_nan", "b5620efb18b6", "a diverged loss is told apart from other errors", f'"{NAN_LOSS}"'),
    Pin(_TRAINER + "fit", "330c04de95ea", "the plugin's kept epoch replaces this line", f'"{STOP_LINE} %d"'),
    Pin(
        _TRAINER + "_generate_train_loss_output",
        "9f39d9dca641",
        "the quiet console joins an epoch's training and evaluation lines",
        '"epoch %d training"',
    ),
    Pin(_TRAINER + "fit", "330c04de95ea", "the same", '"epoch %d evaluating"'),
    Pin("recbole.utils.logger.init_logger", "548f4cebce48", "the run's folders are made there first", '"./log/"'),
)
# private behaviour relied on without overriding, calling or reading it
RELIED_ON = (
    Pin(
        "recbole.utils.utils.early_stopping",
        "1890e39e7fb8",
        "counts a score equal to the best as an improvement (`>=`, `<=` when smaller is better): the plugin's "
        "tie guard nudges the kept best by one ulp so that a later equal score does not replace it",
    ),
    Pin(
        "recbole.evaluator.register",
        "0c94706bfecc",
        "Config and Evaluator read the module-level dicts metrics_dict, metric_types, metric_information "
        "and smaller_metrics: the plugin's metrics are added to them (register_metric)",
    ),
)
WALL = OVERRIDDEN + PUBLIC_OVERRIDDEN + SPEED_ONLY + CALLED + READ + TEXTS + RELIED_ON


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
