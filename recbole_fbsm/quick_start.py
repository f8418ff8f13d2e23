"""``run()``: one model, one dataset, the cold-start protocol, RecBole's result dict."""

import contextlib
import logging
import os
import sys
import time
from logging import getLogger

import torch
from recbole.utils import ModelType, init_seed, set_color

from recbole_fbsm.artifact.model_file import SUFFIX, build_artifact, dataset_analyzer, training_record, write_artifact
from recbole_fbsm.config.cold_start_config import ColdStartConfig
from recbole_fbsm.config.registry import get_model
from recbole_fbsm.config.schema import setting
from recbole_fbsm.data import create_dataset, data_preparation
from recbole_fbsm.data.preparation import check_dataset_files
from recbole_fbsm.errors import ColdStartError
from recbole_fbsm.evaluation.audience import audience_report
from recbole_fbsm.models.contract import BuiltFromFittedInputs
from recbole_fbsm.models.contract import reads_own_features as model_reads_own_features
from recbole_fbsm.models.hybrid_blend import BLEND_WEIGHTS, HybridBlend
from recbole_fbsm.models.inputs import fit_model_inputs, needs_warm_backbone
from recbole_fbsm.runtime import distributed
from recbole_fbsm.runtime.memory import release_free_memory
from recbole_fbsm.runtime.threads import set_torch_threads
from recbole_fbsm.storage.fingerprint import data_fingerprint
from recbole_fbsm.storage.run_records import run_record, settings_of, write_record
from recbole_fbsm.storage.safe_files import plain
from recbole_fbsm.training.run_log import (
    discard_run_log_on,
    end_run_log,
    last_run_log_file,
    on_console,
    result_file_for,
    start_run_log,
)
from recbole_fbsm.training.trainer import get_trainer

# settings that size a model's parameters, named when they do not fit in memory
SIZE_SETTINGS = ("rank", "n_functions", "embedding_size", "hidden_size", "hidden_sizes")


# longer than 60 lines: one straight preparation, as RecBole-GNN's: config, checks, log, data, split, inputs, model
def prepare(model, dataset, config_file_list=None, config_dict=None):
    """Config, dataloaders and an initialised model, ready for a trainer (also used by tools and tests)."""
    config = ColdStartConfig(model=model, dataset=dataset, config_file_list=config_file_list, config_dict=config_dict)
    threads = set_torch_threads(config)  # once, for the whole run
    reads_own_features = model_reads_own_features(config.model_class)
    report = check_dataset_files(config, reads_own_features)  # settings and files checked before any log file
    release_free_memory()  # the checks' parsing temporaries (their parsed columns stay, for the dataset)
    init_seed(config["seed"], config["reproducibility"])
    if distributed.is_main_process():
        start_run_log(config)
    else:  # ranks other than 0 of a data-parallel run: no log file, errors only (library warnings included)
        getLogger().setLevel(logging.ERROR)
        logging.captureWarnings(True)
    logger = getLogger()
    with discard_run_log_on(config, ColdStartError):  # an error found loading, splitting or building leaves no log
        # RecBole's defaults (use_gpu True, gpu_id '0') fall back to the CPU quietly; a GPU asked for by number does not
        if (
            config["use_gpu"]
            and str(config["gpu_id"]) not in ("0", "")
            and torch.device(config["device"]).type == "cpu"
        ):
            logger.warning(
                f"use_gpu is True, but torch sees no CUDA device for gpu_id {config['gpu_id']!r} "
                "(RecBole sets CUDA_VISIBLE_DEVICES to it): running on the CPU."
            )
        logger.info(sys.argv, extra=on_console(False))
        logger.info(config, extra=on_console(False))  # the config dump: in the log file, not on a quiet console
        logger.info(threads, extra=on_console(False))
        if config.tuned_files:  # values a search chose override the model's defaults: say from where
            logger.info(
                f"tuned settings loaded from {', '.join(map(str, config.tuned_files))} (written by recbole-fbsm "
                "hyper --write; --use_tuned_properties=False ignores them)",
                extra=on_console(),
            )
        data = create_dataset(config, report)
        data.data_fingerprint = data_fingerprint(config)  # once, of the files it read; its splits carry it
        release_free_memory()  # the parsing's temporaries, before the split and the features
        logger.info(data, extra=on_console())
        train_data, valid_data, test_data = data_preparation(config, data, reads_own_features=reads_own_features)
        # each rank its own random stream (negatives), by global rank: the same on one machine or several
        init_seed(config["seed"] + distributed.world()[0], config["reproducibility"])
        model_class, train_dataset = config.model_class, train_data._dataset
        if setting(config, "identity_features") and not getattr(model_class, "learns_identity", False):
            raise ColdStartError(
                f"identity_features: True is for FBSM (its V learns the identity columns' item-to-item "
                f"terms); model {config['model']} would ignore them."
            )
        if issubclass(model_class, BuiltFromFittedInputs):  # the content models' inputs, fitted once on training
            warm = needs_warm_backbone(model_class, config)
            train_dataset.model_inputs = fit_model_inputs(config, train_dataset, warm, model_class)
        release_free_memory()  # the feature fitting's temporaries, before the model's profiles
        # a context-aware model with item_id hidden (unless context_use_item_id): it embeds item features only and
        # scores items never seen in training
        hidden = model_class.type == ModelType.CONTEXT and config.item_split and not config["context_use_item_id"]
        try:
            with train_dataset.hidden_fields(train_dataset.iid_field) if hidden else contextlib.nullcontext():
                model = model_class(config, train_dataset).to(config["device"])
        except (RuntimeError, MemoryError) as error:
            if not isinstance(error, MemoryError) and "allocate" not in str(error):
                raise
            sizes = ", ".join(f"{key}={config[key]}" for key in SIZE_SETTINGS if config[key] is not None)
            raise ColdStartError(
                f"model {config['model']}: its parameters do not fit in memory ({str(error).splitlines()[0][:200]}); "
                f"lower the settings that size them ({sizes})."
            ) from None
        release_free_memory()
    # dynamic negative sampling scores its candidates with the model; RecBole's fit() hands the model to
    # the loader, callers that drive epochs themselves (benchmarks, tools) need it here
    train_data.get_model(model)
    logger.info(model, extra=on_console(False))
    return config, model, (train_data, valid_data, test_data)


# longer than 60 lines: one straight run: launch, prepare, fit, test, result dict, outputs
def run(
    model,
    dataset,
    config_file_list=None,
    config_dict=None,
    saved=True,
    nproc=1,
    world_size=-1,
    ip="localhost",
    port=None,
    group_offset=0,
):
    """Train ``model`` on ``dataset`` under the item cold-start protocol, keep the best epoch on validation, test
    it; RecBole's result dict plus ``saved_model_file`` and ``result_file`` (the run's JSON record). ``nproc`` ...
    ``group_offset``: RecBole's data-parallel launch (docs/distributed.md); the result is rank 0's (None without)."""
    if nproc != 1 or (world_size is not None and world_size > 0):
        return distributed.launch(
            _run_rank,
            nproc,
            world_size,
            ip,
            port,
            group_offset,
            (model, dataset, config_file_list, dict(config_dict or {}), saved),
        )
    start, threads_before = time.perf_counter(), torch.get_num_threads()
    try:
        if model == "HybridBlend":
            return run_blend(dataset, config_file_list, config_dict, saved)
        config, model, loaders = prepare(model, dataset, config_file_list, config_dict)
        trainer = get_trainer(config["MODEL_TYPE"], config["model"])(config, model)
        best_valid_score, best_valid_result = trainer.fit(
            *loaders[:2], saved=saved, show_progress=config["show_progress"]
        )
        # the kept epoch tested: RecBole's result dict, with which epoch was kept and what it gained
        test_result = trainer.evaluate(loaders[2], load_best_model=saved, show_progress=config["show_progress"])
        getLogger().info(set_color("best valid ", "yellow") + f": {best_valid_result}", extra=on_console(False))
        getLogger().info(set_color("test result", "yellow") + f": {test_result}", extra=on_console(False))
        # the kept epoch -1 is the untrained start: for FBSM and UFSM a fixed similarity, said in words
        describe = getattr(config.model_class, "untrained_start", None)
        result = {  # plain Python numbers: {'recall@10': 0.0971}, not OrderedDict of np.float64
            "best_valid_score": plain(best_valid_score),
            "valid_score_bigger": config["valid_metric_bigger"],
            "best_valid_result": plain(best_valid_result),
            "test_result": plain(test_result),
            "saved_model_file": trainer.saved_model_file if saved else None,
            "eval_user_sample": config["eval_user_sample"],
            # which epoch was kept on validation (-1: the untrained start) and what it gained over that start
            "best_epoch": trainer.kept_epoch,
            "start_valid_score": trainer.start_valid_score,
            "kept_summary": trainer.kept_summary() if loaders[1] else None,
            "artifact_file": None,
            "untrained_start": describe(config) if describe is not None and trainer.kept_epoch == -1 else None,
        }
        if config.hybrid:  # the "all" group is test_result / best_valid_result; the groups beside it
            kept_valid = trainer.valid_group_history.get(trainer.kept_epoch, {})
            result.update(hybrid_group_results(kept_valid, trainer.group_results if test_result is not None else {}))
        given = (config_file_list, config_dict)
        return write_outputs(config, result, loaders, given, start, trainer.model, last_run_log_file())
    finally:  # the log file closed and the caller's thread count back, whatever happened
        end_run_log()
        torch.set_num_threads(threads_before)


def _run_rank(local_rank, model, dataset, config_file_list, config_dict, saved, launch_settings, queue):
    """One rank of a data-parallel run (started by ``distributed.launch``)."""
    try:
        result = run(
            model, dataset, config_file_list, {**config_dict, **launch_settings, "local_rank": local_rank}, saved
        )
    except BaseException as error:
        if isinstance(error, ColdStartError):
            queue.put(("error", str(error)))
        distributed.end_process_group()
        raise
    if distributed.is_main_process():
        queue.put(("result", result))
    queue.put(("done", local_rank))
    distributed.end_process_group(together=True)


def hybrid_group_results(valid_groups, test_groups):
    """The hybrid scenario's cold and warm metrics of the kept validation and of the test."""
    groups = {"valid": valid_groups, "test": test_groups}
    return {
        f"{phase}_result_{name}": plain(groups[phase].get(name) or {})
        for phase in ("valid", "test")
        for name in ("cold", "warm")
    }


def write_outputs(config, result, loaders, given, start, model=None, log_file=None, extra=None):
    """The run's one writer (rank 0): the ``.fbsm`` artifact beside the kept checkpoint, then the JSON record beside
    the log. ``given``: the run's (config_file_list, config_dict); ``extra``: the blend's fields."""
    if distributed.is_distributed(config):
        result["world_size"] = config["world_size"]
    if not distributed.is_main_process():
        return result
    logger = getLogger()
    train_dataset, valid_dataset, test_dataset = (loader._dataset for loader in loaders)
    checkpoint = result["saved_model_file"]
    audience = None if model is None else audience_report(model, config, train_dataset, valid_dataset, test_dataset)
    if audience:  # who should see a new item: the users direction, alpha chosen on validation (artifact: alpha)
        result["audience"] = audience  # the command line prints it, with the artifact's path
    if model is not None and checkpoint and getattr(train_dataset, "model_inputs", None) is not None:
        analyzer = dataset_analyzer(config, train_dataset.model_inputs.features.fields, train_dataset)
        artifact = build_artifact(
            model, config, train_dataset, valid_dataset, test_dataset, analyzer, training_record(config, result)
        )
        result["artifact_file"] = str(write_artifact(os.path.splitext(str(checkpoint))[0] + SUFFIX, artifact))
    data = train_dataset.data_fingerprint
    settings = settings_of(config["dataset"], *given, data["sha256"])
    record = run_record(config, result, settings, data, time.perf_counter() - start, log_file)
    audience = {"audience": audience} if audience else {}
    result["record"] = {**record, **audience, **(extra or {})}  # the JSON record of the run (compare stores it)
    path = result_file_for(log_file, config)
    try:
        result["result_file"] = str(write_record(path, result["record"]))
        logger.info(f"result file: {result['result_file']}", extra=on_console())
    except OSError as error:  # the results are still returned and printed; nothing half-written is left
        result["result_file"] = None
        logger.warning(
            f"the result file {path} could not be written ({error.strerror or error}); the results below are the run's."
        )
    return result


def _fitted(model, dataset, config_file_list, config_dict, saved):
    """(config, trainer, loaders) of one model trained (the blend's two parts)."""
    config, model, loaders = prepare(model, dataset, config_file_list, config_dict)
    trainer = get_trainer(config["MODEL_TYPE"], config["model"])(config, model)
    trainer.fit(*loaders[:2], saved=saved, show_progress=config["show_progress"])
    return config, trainer, loaders


# longer than 60 lines: the blend's run in order: both models trained, each tested alone, w searched, tested, recorded
def run_blend(dataset, config_file_list=None, config_dict=None, saved=True):
    """``--model=HybridBlend``: the warm and the content model trained on the same split, blended per user with the
    first best weight of ``BLEND_WEIGHTS`` on validation (``hybrid_valid_group``), then tested once."""
    start = time.perf_counter()
    settings = dict(config_dict or {})
    probe = ColdStartConfig(model="BPR", dataset=dataset, config_file_list=config_file_list, config_dict=settings)
    names = {part: str(setting(probe, part)) for part in ("warm_model", "content_model")}
    if not probe.hybrid:
        raise ColdStartError(
            "model HybridBlend blends a warm model with a content model over warm and cold items: "
            "it needs cold_start_scenario: hybrid."
        )
    # neither part is a blend, and the content model gives cold items scores of their own (a general model such as
    # BPR knows warm items only)
    for part, name in names.items():
        if name == "HybridBlend":
            raise ColdStartError(f"{part}: HybridBlend cannot be a part of itself; expected a model name such as BPR.")
    content = get_model(names["content_model"])
    if content.type in (ModelType.GENERAL, ModelType.TRADITIONAL) and not (
        model_reads_own_features(content) or getattr(content, "scores_cold_items", False)
    ):
        raise ColdStartError(
            f"content_model: {names['content_model']} knows warm items only (a cold item gets no score of its own); "
            "expected a model that reads item features: FBSM, UFSM, CoSim, ItemKNNCBF, DropoutNet, Heater, ALDI or "
            "one of RecBole's context-aware models."
        )
    given = (dataset, config_file_list, settings, saved)
    _, warm_trainer, warm_loaders = _fitted(names["warm_model"], *given)
    config, trainer, loaders = _fitted(names["content_model"], *given)
    train_data, valid_data, test_data = loaders
    warm_model, content_model = warm_trainer.model, trainer.model
    parts = {}  # each model alone on the test split, beside the blend (the same split, the same training)
    for part, part_trainer, part_test in (
        ("warm_model", warm_trainer, warm_loaders[2]),
        ("content_model", trainer, test_data),
    ):
        alone = part_trainer.evaluate(part_test, load_best_model=saved)  # the kept epoch, kept for the blend
        parts[f"{part}_test_result"] = {
            "all": plain(alone),
            **{name: plain(groups) for name, groups in part_trainer.group_results.items()},
        }
    blend = HybridBlend(config, train_data._dataset, warm_model, content_model).to(config["device"])
    trainer.model = blend
    group = str(setting(config, "hybrid_valid_group"))
    searched = {}
    for weight in BLEND_WEIGHTS:
        blend.weight = weight
        result = trainer.evaluate(valid_data, load_best_model=False)
        groups = {"all": result, **trainer.group_results}
        searched[weight] = (float(groups[group].get(trainer.valid_metric, 0.0)), result, dict(trainer.group_results))
    best = max(BLEND_WEIGHTS, key=lambda w: (searched[w][0], -BLEND_WEIGHTS.index(w)))
    blend.weight = best
    test_result = trainer.evaluate(test_data, load_best_model=False)
    blended = {"blend_weight": best, **names, "blend_search": {str(w): searched[w][0] for w in BLEND_WEIGHTS}}
    result = {
        "best_valid_score": searched[best][0],
        "valid_score_bigger": True,
        "best_valid_result": plain(searched[best][1]),
        "test_result": plain(test_result),
        "saved_model_file": None,
        "artifact_file": None,
        "eval_user_sample": config["eval_user_sample"],
        **blended,
        **hybrid_group_results(searched[best][2], trainer.group_results),
        **parts,
    }
    getLogger().info(
        f"HybridBlend: w = {best} of {list(BLEND_WEIGHTS)} on valid {group} {trainer.valid_metric} "
        f"({searched[best][0]:.4f})",
        extra=on_console(),
    )
    config["model"] = "HybridBlend"
    return write_outputs(config, result, loaders, (config_file_list, config_dict), start, extra={**blended, **parts})


def planned_settings(model, dataset, config_file_list=None, overrides=None):
    """The ``settings_of`` a run will have (its files' fingerprint included): ``compare`` decides reuse with it."""
    overrides = dict(overrides or {})
    config = ColdStartConfig(model=model, dataset=dataset, config_file_list=config_file_list, config_dict=overrides)
    return settings_of(dataset, config_file_list, overrides, data_fingerprint(config)["sha256"])
