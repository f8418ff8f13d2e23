"""RecBole's Config with the plugin's property files layered on RecBole's (``_load_internal_config_dict`` lists
them, lowest priority first), checked settings, and ``eval_args`` merged key by key (a user's ``eval_args: {mode:
uni100}`` keeps the item split)."""

import os
from pathlib import Path

import torch
from recbole.config import Config
from recbole.utils import InputType, ModelType

import recbole_fbsm.evaluation.metrics  # noqa: F401  (registers the paper's DCG and Rec metrics with RecBole)
from recbole_fbsm.config.checks import as_list
from recbole_fbsm.config.paths import LOCAL_PROPERTIES_DIR
from recbole_fbsm.config.registry import get_model
from recbole_fbsm.config.schema import setting
from recbole_fbsm.config.settings import (
    PROPERTIES_DIR,
    check_final,
    check_settings,
    check_user_settings,
    convert_value,
    read_yaml,
)
from recbole_fbsm.errors import ColdStartError
from recbole_fbsm.recbole_compat import restore_numpy_aliases
from recbole_fbsm.runtime.distributed import init_process_group


def tuned_properties_file(model, dataset, properties_dir=None):
    """A model's settings for one dataset (values ``hyper --write`` chose on validation, cost caps)."""
    return Path(properties_dir or PROPERTIES_DIR) / "dataset" / str(dataset) / f"{model}.yaml"


class ColdStartConfig(Config):
    """RecBole's Config that never reads ``sys.argv`` (a host program's arguments are not settings), checks the
    caller's settings first (``config.settings``) and converts strings without ``eval``."""

    def __init__(self, model=None, dataset=None, config_file_list=None, config_dict=None):
        own_model_class = isinstance(model, type) and not model.__module__.startswith(("recbole.", "recbole_fbsm."))
        run = {"model": model.__name__ if isinstance(model, type) else model, "dataset": dataset}
        checked = {"known_only": not own_model_class, "run": run}
        # each file read once, checked, and left out when empty: it holds no setting (RecBole's reader fails on it)
        config_file_list = [path for path in config_file_list or [] if check_user_settings([path], **checked)] or None
        check_user_settings(config_dict=config_dict, **checked)
        super().__init__(model=model, dataset=dataset, config_file_list=config_file_list, config_dict=config_dict)

    def _set_train_neg_sample_args(self):
        """A pairwise model, or a context-aware one on the item split (its data has likes only), needs negatives."""
        super()._set_train_neg_sample_args()
        final = self.final_config_dict
        pairwise = final.get("MODEL_INPUT_TYPE") == InputType.PAIRWISE
        if (final.get("train_neg_sample_args") or {}).get("distribution") == "none" and (
            pairwise or (final.get("MODEL_TYPE") == ModelType.CONTEXT and self.item_split)
        ):
            raise ColdStartError(
                f"train_neg_sample_args: model {self.model} learns likes against sampled negatives; expected e.g. "
                "{distribution: uniform, sample_num: 1}; got none."
            )

    def _init_device(self):
        """RecBole's, except in a data-parallel run: RecBole's asks for NCCL and GPUs, ``runtime.distributed`` for
        the backend the device needs."""
        if "local_rank" not in self.final_config_dict:
            super()._init_device()
            if not self.final_config_dict["use_gpu"]:  # RecBole 1.2.1 picks CUDA from gpu_id alone
                self.final_config_dict["device"] = torch.device("cpu")
            return
        init_process_group(self.final_config_dict)

    def _convert_config_dict(self, config_dict):
        return {key: convert_value(value) for key, value in config_dict.items()}

    def compatibility_settings(self):
        restore_numpy_aliases()

    def _load_cmd_line(self):
        return dict()

    def _get_model_and_dataset(self, model, dataset):
        model = self.external_config_dict.get("model") if model is None else model
        dataset = self.external_config_dict.get("dataset") if dataset is None else dataset
        if model is None or dataset is None:
            raise ColdStartError("no model or no dataset given: pass --model=NAME --dataset=NAME (model=, dataset=).")
        model_class = get_model(model) if isinstance(model, str) else model
        return model_class.__name__, model_class, dataset

    def _load_internal_config_dict(self, model, model_class, dataset):
        super()._load_internal_config_dict(model, model_class, dataset)
        self.property_files = []  # the plugin's property files applied, in order (compare's table lists them)
        # the tuned files: the plugin's, then the working directory's (`hyper --write` never writes into a package)
        self.tuned_files = []
        use_tuned = setting(self.external_config_dict, "use_tuned_properties")  # a flag: checked in __init__
        for folder in (PROPERTIES_DIR, LOCAL_PROPERTIES_DIR) if use_tuned else ():
            path = tuned_properties_file(model, dataset, folder)
            if path.is_file() and all(path.resolve() != other.resolve() for other in self.tuned_files):
                self.tuned_files.append(path)
        for path in (
            PROPERTIES_DIR / "overall.yaml",
            PROPERTIES_DIR / "dataset" / f"{dataset}.yaml",
            PROPERTIES_DIR / "model" / f"{model}.yaml",
            *self.tuned_files,
        ):
            if path.is_file():
                if path in self.tuned_files:  # a search wrote it, maybe in the working directory: a user's file
                    check_settings(read_yaml(path), f"tuned file {path}")
                self._update_internal_config_dict(str(path))
                # shown relative to the plugin's folder; a tuned file of the working directory as it is (relative)
                base = PROPERTIES_DIR.parent
                self.property_files.append(str(path.relative_to(base) if path.is_relative_to(base) else path))

    def _get_final_config_dict(self):
        final = super()._get_final_config_dict()
        internal_eval = self.internal_config_dict.get("eval_args") or {}
        external_eval = self.external_config_dict.get("eval_args")
        if isinstance(external_eval, dict):
            final["eval_args"] = {**internal_eval, **external_eval}
        follow_topk(final, self.external_config_dict)
        for key in ("data_path", "checkpoint_dir"):  # '--data_path=~/data': no shell expands a ~ after '='
            if isinstance(final.get(key), str) and final[key].startswith("~"):
                final[key] = os.path.expanduser(final[key])
        check_final(final)
        return final

    @property
    def item_split(self):
        """True when the item cold-start protocol (``eval_args.group_by: item``) is in force."""
        return str(self["eval_args"]["group_by"]).lower() == "item"

    @property
    def hybrid(self):
        """True in the hybrid scenario (``cold_start_scenario: hybrid``): warm and cold items ranked together."""
        return self.item_split and str(setting(self, "cold_start_scenario")).lower() == "hybrid"

    @property
    def split_seed(self):
        seed = setting(self, "split_seed")
        return self["seed"] if seed is None else seed


def follow_topk(final, user_settings):
    """A ``valid_metric`` the user did not set takes the first ``topk`` cut-off when its own is not among them
    (``--topk=[5]`` would otherwise stop at the default Recall@10, a cut-off the run does not compute)."""
    metric, cutoffs = final.get("valid_metric"), as_list(final.get("topk"))
    if "valid_metric" in (user_settings or {}) or not isinstance(metric, str) or "@" not in metric:
        return
    name, _, cutoff = metric.partition("@")
    if cutoffs and isinstance(cutoffs[0], int) and not (cutoff.isdigit() and int(cutoff) in cutoffs):
        final["valid_metric"] = f"{name}@{cutoffs[0]}"
