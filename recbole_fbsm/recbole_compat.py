"""The wall between the plugin and RecBole's internals: every RecBole method the plugin overrides, every private
name (of RecBole, torch or pandas) it calls or reads and every RecBole text it matches, each pinned by a hash of its
source. The plugin overrides directly, as RecBole-GNN does (a traceback names both); tests/test_recbole_compat.py
fails on a changed pin, on a private name the plugin uses unlisted, and on a listed one it no longer uses.
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
_LOADER = "recbole.data.dataloader.abstract_dataloader."
_GENERAL = "recbole.data.dataloader.general_dataloader."
_SAMPLER = "recbole.sampler.sampler."
_COLLECTOR = "recbole.evaluator.collector."
_TRAINER = "recbole.trainer.trainer."
_EASE = "recbole.model.general_recommender.ease.EASE."
_MODELS = "recbole.model.general_recommender."

# RecBole's private methods the plugin's classes define (and continue with super())
OVERRIDDEN = (
    Pin(_CONFIG + "_get_model_and_dataset", "8dac22b5bb63", "finds the model class: the plugin's models first"),
    Pin(_CONFIG + "_load_internal_config_dict", "0c02574bc56f", "the plugin's property files go on top of it"),
    Pin(_CONFIG + "_load_cmd_line", "9cad35cc9559", "Config parses sys.argv itself: the plugin reads none"),
    Pin(_CONFIG + "_convert_config_dict", "48152baf9a7a", "RecBole eval()s strings: the plugin parses strictly"),
    Pin(_CONFIG + "_get_final_config_dict", "047402aa887d", "merges eval_args key by key; checks the settings"),
    Pin(_CONFIG + "_set_train_neg_sample_args", "10e7e413f68a", "refuses a pairwise model without negatives"),
    Pin(_CONFIG + "_init_device", "d6b946b3b2e0", "NCCL, one GPU per process: the plugin joins its own group"),
    Pin(_DATASET + "_load_data", "9da47b33da9c", "reads the atomic files: the plugin then sorts rows canonically"),
    Pin(_DATASET + "_load_feat", "9948d02fed03", "reads one file (pandas): the plugin's reader, NA tokens kept"),
    Pin(_DATASET + "_remap", "51fd4947aa82", "numbers tokens by first appearance: the plugin in sorted order"),
    Pin(_DATASET + "_dataframe_to_interaction", "b27637d6edd1", "pads in one scatter; item token rows unpadded"),
    Pin(_SAMPLER + "AbstractSampler._build_alias_table", "84d6dc143e06", "one table: the plugin one per phase's split"),
    Pin("torch.utils.data.dataloader.DataLoader._index_sampler", "362bb4bb9d4b", "batches: whole users, rank shares"),
    Pin(_GENERAL + "TrainDataLoader._init_batch_size_and_step", "f59aca6cf0a3", "the whole step kept per rank"),
    Pin(_GENERAL + "FullSortEvalDataLoader._init_batch_size_and_step", "2570d50a7e78", "also bounded by profile width"),
    Pin(_TRAINER + "Trainer._build_optimizer", "81f2ebf61cca", "a model's own groups (FBSM's D and V rates)"),
    Pin(_TRAINER + "Trainer._train_epoch", "2ee67cb58ea7", "stops on a diverged loss"),
    Pin(_TRAINER + "Trainer._valid_epoch", "711ddf0c4623", "feeds callbacks; guards ties in early stopping"),
    Pin(_TRAINER + "Trainer._save_checkpoint", "59378042d807", "pickles the Config: the plugin writes plain data"),
    Pin(_TRAINER + "Trainer._full_sort_batch_eval", "82664fc5e5aa", "all items: the plugin the split's candidates"),
    Pin(_TRAINER + "Trainer._map_reduce", "c1831d5e24de", "averages per-rank metrics: the rows were gathered"),
)
# RecBole's public methods the plugin's classes override (RecBole's hooks that only raise are not listed)
PUBLIC_OVERRIDDEN = (
    Pin(_CONFIG + "compatibility_settings", "5030d75b2f92", "numpy aliases (fail on numpy 2): only missing ones"),
    Pin(_DATASET + "build", "23efe0363311", "splits interactions: the plugin splits items (eval_args.group_by)"),
    Pin(_DATASET + "fields", "d3a5a32ca71b", "every field: item_id hidden from a context model (content only)"),
    Pin(_SAMPLER + "Sampler.get_used_ids", "8658f8bd9b74", "a set per user and phase: the plugin's liked_keys"),
    Pin(_SAMPLER + "AbstractSampler.sample_by_key_ids", "2ab472d027ec", "negatives from the phase's split"),
    Pin(_COLLECTOR + "Collector.get_data_struct", "b8062da76dd8", "data-parallel: every rank's rows gathered"),
    Pin(_EASE + "full_sort_predict", "6fd2db8f3ce1", "X_u B in scipy on the CPU: the plugin's B is on the device"),
    Pin(_EASE + "predict", "8e10e974f827", "likewise, for (user, item) pairs"),
    Pin(_MODELS + "lightgcn.LightGCN.get_norm_adj_mat", "eb413da8e0de", "dok_matrix._update: gone from scipy"),
    Pin(_MODELS + "ngcf.NGCF.get_norm_adj_mat", "fb50944ec14d", "dok_matrix._update: gone from scipy"),
    Pin(_COLLECTOR + "Collector.eval_batch_collect", "e7ec500fc074", "rec.items/topk: the plugin's tie-fair top-k"),
    Pin(_MODELS + "random.Random.full_sort_predict", "22eb55d0aa8d", "one list per batch: the plugin's, one per user"),
    Pin(_LOADER + "AbstractDataLoader.set_batch_size", "9f46c2f6892b", "drops the planned whole-user batches"),
    Pin(_TRAINER + "Trainer.evaluate", "a24a9dde4db8", "the split's candidates only, ties broken at random"),
    Pin(_TRAINER + "Trainer.fit", "330c04de95ea", "validates the untrained model first, keeps the best epoch"),
)
# RecBole's methods overridden for speed only: the same results as RecBole's own, faster
SPEED_ONLY = (
    Pin(_DATASET + "join", "340437f53686", "joins feature columns per batch: skipped for models reading their own"),
    Pin(_DATASET + "_filter_by_inter_num", "39e513ebe9a9", "skipped when its intervals keep every id"),
    Pin(_GENERAL + "FullSortEvalDataLoader.collate_fn", "dec134094f25", "history and positives as CSR rows"),
)
# RecBole's private methods the plugin calls without overriding them
CALLED = (
    Pin(_CONFIG + "_update_internal_config_dict", "6f0582adfbb8", "reads a property file into the layers"),
    Pin(_DATASET + "_parse_intervals_str", "cd1077494e9b", "parses *_inter_num_interval as RecBole does"),
    Pin(_DATASET + "_get_load_and_unload_col", "2ed5985d0f05", "the columns load_col / unload_col keep"),
    Pin(_DATASET + "_change_feat_format", "9343965ca719", "turns the tables into Interactions before a split"),
)
# private attributes the plugin reads (pinned: where they are set)
READ = (
    Pin(_LOADER + "AbstractDataLoader.__init__", "03bc7d40b609", "a loader's dataset (its split)", "_dataset"),
    Pin(_LOADER + "AbstractDataLoader.__init__", "03bc7d40b609", "the dynamic negatives' sampler", "_sampler"),
    Pin(_COLLECTOR + "DataStruct.__init__", "80fcffea1b11", "the collector's tensors", "_data_dict"),
)

# RecBole's texts the plugin matches, each pinned below (TEXTS) to where RecBole writes it
NAN_LOSS = "Training loss is nan"  # the ValueError of Trainer._check_nan
STOP_LINE = "Finished training, best eval result in epoch"  # fit()'s early-stopping line
TRAINING_LINE = re.compile(r"^epoch (\d+) training \[time: ([\d.]+)s, (.+)\]$", re.S)
EVALUATING_LINE = re.compile(r"^epoch (\d+) evaluating \[time: ([\d.]+)s, valid_score: (\S+)\]$", re.S)
RECBOLE_LOG_ROOT = "./log"  # init_logger's folder, hard-coded
COLOR_CODES = re.compile(r"\x1B\[[0-?]*[ -/]*[@-~]")  # set_color's ANSI codes, stripped before matching
TEXTS = (
    Pin(_TRAINER + "Trainer._check_nan", "b5620efb18b6", "a diverged loss told apart", f'"{NAN_LOSS}"'),
    Pin(_TRAINER + "Trainer.fit", "330c04de95ea", "the kept epoch replaces this line", f'"{STOP_LINE} %d"'),
    Pin(_TRAINER + "Trainer._generate_train_loss_output", "9f39d9dca641", "the quiet console", '"epoch %d training"'),
    Pin(_TRAINER + "Trainer.fit", "330c04de95ea", "joined to its training line", '"epoch %d evaluating"'),
    Pin("recbole.utils.logger.init_logger", "548f4cebce48", "the run's folders are made first", '"./log/"'),
    Pin("recbole.utils.logger.set_color", "08557d3a818f", "stripped before matching", '"\\033["'),
)
# private behaviour relied on without overriding, calling or reading it
RELIED_ON = (
    # a score equal to the best counts as an improvement (`>=`): the tie guard nudges the kept best by one ulp
    Pin("recbole.utils.utils.early_stopping", "1890e39e7fb8", "a tie is an improvement (>=, <= when smaller)"),
    # Config and Evaluator read its module-level dicts: register_metric adds the plugin's metrics to them
    Pin("recbole.evaluator.register", "0c94706bfecc", "metrics_dict, metric_types, ... list every metric"),
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
    aliases = {"bool": np.bool_, "int": np.int64, "long": np.int64, "float": np.float64, "float_": np.float64}
    aliases |= {"complex": np.complex128, "complex_": np.complex128, "object": np.object_}
    aliases |= {"str": np.str_, "unicode": np.str_, "unicode_": np.str_}
    for name, target in aliases.items():
        # only what numpy lacks; looked up in the namespace, as getattr(np, "object") warns about the alias
        if name not in vars(np):
            setattr(np, name, target)


check_version()
