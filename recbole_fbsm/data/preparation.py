"""Dataset creation and the train/valid/test dataloaders, always from the atomic files: RecBole's versions
reload any ``checkpoint_dir`` pickle of the expected name, even with ``save_dataset: False``, so a run with
another split or config would silently reuse them."""

import os
from logging import getLogger

import numpy as np
import torch
from recbole.data.utils import create_samplers, get_dataloader
from recbole.utils import set_color

from recbole_fbsm.config.datasets import missing_dataset_message
from recbole_fbsm.data.atomic_files import check_dataset, read_header
from recbole_fbsm.data.dataset import ColdStartDataset
from recbole_fbsm.data.device_batches import device_batches, device_batches_apply
from recbole_fbsm.data.eval_loader import vectorised_eval_loader
from recbole_fbsm.data.sampler import ColdStartSampler
from recbole_fbsm.data.user_batches import user_grouped
from recbole_fbsm.errors import ColdStartError


def create_dataset(config, report=None):
    """Check the dataset files against the config (unless ``report``, an earlier ``check_dataset_files``, is
    given), log its warnings, then load them into a ``ColdStartDataset``."""
    if report is None:
        report = check_dataset_files(config, getattr(config.model_class, "reads_own_features", False))
    for warning in report.warnings:
        getLogger().warning(warning)
    ColdStartDataset.preread = report.parsed  # the token columns the checks parsed: each file is parsed once
    try:
        return ColdStartDataset(config)
    except ValueError as error:
        if "Some feat is empty" not in str(error):
            raise
        raise ColdStartError(
            f"dataset {config['dataset']!r}: the filters leave no data (user_inter_num_interval="
            f"{config['user_inter_num_interval']!r}, item_inter_num_interval={config['item_inter_num_interval']!r}, "
            f"val_interval={config['val_interval']!r}); loosen them."
        ) from None
    finally:
        ColdStartDataset.preread = None
        report.parsed.clear()


def data_preparation(config, dataset, reads_own_features=False):
    """Split ``dataset`` and return (train, valid, test) dataloaders; on an item split (``eval_args.group_by:
    item``) with ``ColdStartSampler`` (negatives only from the phase's own split). ``reads_own_features``: a model
    holding its own feature matrices: no per-batch feature join, unpadded token rows
    (``ColdStartDataset.item_token_rows``), training batches cut on its device (``device_batches``)."""
    dataset._skip_feature_join = reads_own_features
    dataset.item_token_rows_only = reads_own_features  # their F is built from unpadded token rows
    built = dataset.build()
    if config["eval_user_sample"]:
        seed = config.split_seed if config.item_split else config["seed"]
        sample_evaluated_users(built[1:], int(config["eval_user_sample"]), seed)
    if config.item_split:
        samplers = _cold_start_samplers(config, built)
    else:
        samplers = create_samplers(config, dataset, built)
    train_sampler, valid_sampler, test_sampler = samplers
    train_data = train_loader_class(config, reads_own_features, train_sampler)(
        config, built[0], train_sampler, shuffle=config["shuffle"]
    )
    valid_data = vectorised_eval_loader(get_dataloader(config, "valid"))(config, built[1], valid_sampler, shuffle=False)
    test_data = vectorised_eval_loader(get_dataloader(config, "test"))(config, built[2], test_sampler, shuffle=False)
    likes = _slashed(len(d.inter_feat) for d in built)
    if config.hybrid:
        cold_likes = [0] + [int(np.isin(d.inter_feat[d.iid_field].numpy(), d.cold_items).sum()) for d in built[1:]]
        getLogger().info(
            set_color("[Hybrid split]", "pink") + f" warm items {len(built[0].warm_items)}, cold items valid/test = "
            f"{_slashed(len(d.cold_items) for d in built[1:])}, likes train/valid/test = {likes} "
            f"(of them on cold items: {_slashed(cold_likes)})"
        )
    elif config.item_split:
        dislikes = _slashed(0 if d.dislike_feat is None else len(d.dislike_feat) for d in built)
        getLogger().info(
            set_color("[Item split]", "pink") + " items train/valid/test = "
            f"{_slashed(len(d.split_items) for d in built)}, likes = {likes}, dislikes = {dislikes}"
        )
    return train_data, valid_data, test_data


def _slashed(counts):
    return "/".join(map(str, counts))


def train_loader_class(config, reads_own_features, sampler):
    """RecBole's training loader for the model type; whole users per batch with ``train_batch_by_user``; cut
    on the model's device when ``device_batches_apply``."""
    loader = get_dataloader(config, "train")
    if config["train_batch_by_user"]:
        loader = user_grouped(loader)
    if device_batches_apply(config, reads_own_features, sampler):
        loader = device_batches(loader)
    return loader


def sample_evaluated_users(parts, size, seed):
    """Keep the interactions of ``size`` users drawn at random (seeded) in each evaluation split: an unbiased
    estimate of the metrics, with more variance, for models whose full-sort evaluation is slow (context-aware
    models ``predict`` every user x candidate pair: 30 million on citeulike-t's validation split)."""
    for index, part in enumerate(parts):
        users = part.inter_feat[part.uid_field].numpy()
        distinct = np.unique(users)
        if size <= 0 or len(distinct) <= size:
            continue
        chosen = np.random.default_rng([int(seed), index]).choice(distinct, size=size, replace=False)
        part.inter_feat = part.inter_feat[torch.from_numpy(np.isin(users, chosen))]
        getLogger().info(
            set_color("[Evaluated users]", "pink")
            + f" {getattr(part, 'phase', 'eval')}: {size} of {len(distinct)} users, drawn at random (eval_user_sample)"
        )


def _cold_start_samplers(config, built):
    phases = ["train", "valid", "test"]
    train_args = config["train_neg_sample_args"]
    base = ColdStartSampler(phases, built, distribution=_distribution(train_args), alpha=train_args.get("alpha") or 1.0)
    samplers = [base.set_phase("train")]
    for phase in ("valid", "test"):
        base.set_distribution(_distribution(config[f"{phase}_neg_sample_args"]))
        samplers.append(base.set_phase(phase))
    return samplers


def _distribution(args):
    distribution = args.get("distribution", "none") if args else "none"
    return "uniform" if distribution in (None, "none") else distribution


def check_dataset_files(config, reads_own_features=False):
    """Fail early, naming the file and field, instead of deep inside RecBole; return the warnings
    (``atomic_files.DatasetReport``) about what the run can go on with."""
    name, folder = config["dataset"], config["data_path"]
    if not os.path.isdir(folder):
        # ours (citeulike-t, citeulike-tags): the download command; a near miss of a known name: did you mean
        hint = missing_dataset_message(name, os.path.dirname(os.path.normpath(folder)))
        if hint:
            raise ColdStartError(hint)
        raise ColdStartError(
            f"dataset {name!r}: folder {folder} not found (data_path={config['data_path']!r}); "
            f"expected it to hold {name}.inter."
        )
    inter_file = os.path.join(folder, f"{name}.inter")
    if not os.path.isfile(inter_file):
        raise ColdStartError(f"dataset {name!r}: interaction file {inter_file} not found.")
    load_col = config["load_col"] or {}
    for suffix, wanted in load_col.items():
        path = os.path.join(folder, f"{name}.{suffix}")
        if not os.path.isfile(path):
            raise ColdStartError(f"load_col names the {suffix!r} file, but {path} was not found.")
        _check_fields(path, wanted, config["field_separator"], "load_col." + suffix)
    feature_fields = config["feature_fields"]
    item_file = os.path.join(folder, f"{name}.item")
    if (feature_fields or reads_own_features) and not os.path.isfile(item_file):
        reader = f"feature_fields {list(feature_fields)}" if feature_fields else f"model {config['model']}"
        raise ColdStartError(
            f"dataset {name!r}: item file {item_file} not found; {reader} read(s) the item features from it "
            "(item_id:token and token/token_seq columns)."
        )
    if feature_fields:
        _check_fields(item_file, feature_fields, config["field_separator"], "feature_fields")
        loaded_items = (load_col or {}).get("item")
        missing = [f for f in feature_fields if loaded_items is not None and f not in loaded_items]
        if missing:
            raise ColdStartError(
                f"feature_fields {missing} are not loaded: add them to load_col.item ({loaded_items})."
            )
    return check_dataset(config, reads_own_features)


def _check_fields(path, wanted, separator, setting):
    present = read_header(path, separator)
    missing = [field for field in wanted if field not in present]
    if missing:
        raise ColdStartError(f"{setting} names field(s) {missing} that {path} lacks; its header has {sorted(present)}.")
