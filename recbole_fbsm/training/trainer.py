"""RecBole trainers with the cold-start evaluation mixed in: candidates are exactly the evaluated split's items
(a users x candidates matrix, what depends on the candidates alone prepared once per evaluation), ties broken
at random, checkpoints uniquely named, plain data and written atomically, the untrained model a candidate
checkpoint (``valid_before_training``), the model's own optimizer groups, a callback on every validation (the
tuner's pruner) and DDP runs (``runtime.distributed``; rank 0 alone writes and reads checkpoints).
"""

import contextlib
import contextvars
import functools
import os
import uuid
import warnings

import numpy as np
import torch
import torch.distributed as dist
from recbole.data.dataloader import FullSortEvalDataLoader
from recbole.utils import ModelType, get_local_time
from recbole.utils import get_trainer as recbole_trainer_lookup
from torch.nn.parallel import DistributedDataParallel

from recbole_fbsm.config.schema import setting
from recbole_fbsm.errors import ColdStartError
from recbole_fbsm.evaluation.collector import TieBreakingCollector
from recbole_fbsm.models.contract import (
    HasOptimizerGroups,
    candidate_scorer_of,
    has_nothing_to_train,
)
from recbole_fbsm.recbole_compat import COLOR_CODES, EVALUATING_LINE, NAN_LOSS, STOP_LINE, TRAINING_LINE
from recbole_fbsm.runtime import distributed
from recbole_fbsm.storage.safe_files import Settings, encode_arrays, load_checkpoint, plain, save_tensors

_VALIDATION_CALLBACK = contextvars.ContextVar("validation_callback", default=None)


@contextlib.contextmanager
def validation_callback(callback):
    """Within this block every trainer calls ``callback(valid_score, valid_result)`` after each
    validation (the untrained one of ``valid_before_training`` included). The callback may raise to
    abandon the run: ``run_hyper.py`` raises ``optuna.TrialPruned`` when the curve falls behind."""
    token = _VALIDATION_CALLBACK.set(callback)
    try:
        yield
    finally:
        _VALIDATION_CALLBACK.reset(token)


class ColdStartTrainerMixin:
    _announced_checkpoint = None  # the checkpoint file "Saving current" named: each improvement rewrites it

    def __init__(self, config, model):
        parallel = distributed.is_distributed(config)
        if parallel:  # RecBole's wrapper would pass device_ids=[local_rank], which fails on the CPU
            config["single_spec"] = True
        try:
            super().__init__(config, model)
        finally:
            config["single_spec"] = not parallel
        # the paper's early stopping: stopping_step evaluations without a strictly better score (RecBole stops when its
        # counter exceeds stopping_step, and counts a tie as better: a tie is judged against the next float, below)
        self.stopping_step = max(int(config["stopping_step"]) - 1, 0)
        self._tie_guard = None  # (true best, the guarded value RecBole compared against)
        if parallel:  # DDP on the device the config chose; broadcast_buffers off: F and the profiles are constant and
            # alike on every rank, batch-norm statistics are taken from rank 0 before each evaluation instead
            device = torch.device(config["device"])
            with warnings.catch_warnings():  # torch deprecates the flag, but its successor still syncs at init
                warnings.filterwarnings("ignore", message=".*broadcast_buffers", category=FutureWarning)
                self.distributed_model = DistributedDataParallel(
                    self.model, device_ids=[device.index] if device.type == "cuda" else None, broadcast_buffers=False
                )
        name = f"{config['model']}-{get_local_time()}-{uuid.uuid4().hex[:8]}.pth"
        self.saved_model_file = os.path.join(self.checkpoint_dir, distributed.broadcast_object(name))
        self.eval_collector = TieBreakingCollector(config)
        self.context_eval_chunk = int(setting(config, "context_eval_chunk"))
        self.group_results = {}  # hybrid scenario: {"cold": metrics, "warm": metrics} of the last evaluation
        self.valid_group_history = {}  # hybrid scenario: epoch -> the validation's group_results
        hybrid = bool(getattr(config, "hybrid", False))
        self.valid_group = str(setting(config, "hybrid_valid_group")).lower() if hybrid else "all"
        # RecBole's general models (EASE, ItemKNN, ... among them, typed TRADITIONAL) know warm items only: a cold
        # candidate gets their lowest score (hybrid scenario), not EASE's 0 above its negative warm scores
        self.warm_only_scores = (
            hybrid
            and model.type in (ModelType.GENERAL, ModelType.TRADITIONAL)
            and not getattr(model, "reads_own_features", False)
            and not getattr(model, "scores_cold_items", False)
        )

    def _build_optimizer(self, **kwargs):
        if "params" not in kwargs and isinstance(self.model, HasOptimizerGroups):
            kwargs["params"] = self.model.optimizer_param_groups(self.learning_rate)
        return fused_if_possible(super()._build_optimizer(**kwargs))

    def fit(self, train_data, valid_data=None, *args, **kwargs):
        """RecBole's ``fit``; with ``valid_before_training`` the untrained model (FBSM's and UFSM's fixed similarity)
        is validated first and kept until an epoch beats it. Afterwards ``kept_epoch``, ``start_valid_score`` and
        ``kept_summary()`` say which epoch was kept and what it gained.

        Returns:
            (best valid score, best valid result), the tie guard of the paper's early stopping taken off."""
        self.kept_epoch, self.start_valid_score, self.epochs_trained = None, None, 0
        self.valid_history, self._epoch_in_progress = [], -1
        verbose, saved = kwargs.get("verbose", True), kwargs.get("saved", True)
        try:
            if valid_data and self.config["valid_before_training"] and self.start_epoch == 0:
                valid_score, valid_result = self._valid_epoch(
                    valid_data, show_progress=kwargs.get("show_progress", False)
                )
                self.best_valid_score, self.best_valid_result = valid_score, valid_result
                self.start_valid_score, self.kept_epoch = valid_score, -1
                if verbose:
                    self.logger.info(f"before training: valid_score {valid_score:.6f}")
                if saved:
                    self._save_checkpoint(-1, verbose=verbose)
            nothing = has_nothing_to_train(self.model)  # RecBole's one epoch, without the pass over the data

            # RecBole's "Finished training, best eval result in epoch N" counts back from the stop by stopping_step
            # (with the untrained start kept it says -1, with ties an epoch not kept): kept_summary() says it instead,
            # and for a model with nothing to train its epoch lines too
            def keep(record):
                text = COLOR_CODES.sub("", str(record.msg))
                epoch_line = nothing and (TRAINING_LINE.match(text) or EVALUATING_LINE.match(text))
                return not (epoch_line or text.startswith(STOP_LINE))

            self.logger.addFilter(keep)
            try:
                super().fit(train_data, valid_data, *args, **kwargs)
            except ValueError as error:  # RecBole's _check_nan
                if str(error) != NAN_LOSS:
                    raise
                self._stop_on_diverged_loss(saved)
            finally:
                self.logger.removeFilter(keep)
            if nothing:
                self.kept_epoch = 0 if valid_data else None
            elif not saved:  # no checkpoint was written: the kept epoch is the first best one
                best = [epoch for epoch, score in self.valid_history if score == self.best_valid_score]
                self.kept_epoch = best[0] if best else None
            if (valid_data or nothing) and verbose:
                self.logger.info(self.kept_summary())
        finally:
            self._restore_best()
        return self.best_valid_score, self.best_valid_result

    def _restore_best(self):
        """The best score as it was, where a tie guard stood in for it."""
        if self._tie_guard is not None:
            best, guarded = self._tie_guard
            if self.best_valid_score == guarded:
                self.best_valid_score = best
            self._tie_guard = None

    def _stop_on_diverged_loss(self, saved):
        """A NaN loss ends training, not the run: the best checkpoint so far is kept and tested."""
        clip = self.config["clip_grad_norm"]
        cause = f"learning_rate={self.config['learning_rate']} is too high for this data" + (
            "" if clip else ", and the gradient norm is not clipped (e.g. clip_grad_norm: {max_norm: 5})"
        )
        kept = self.kept_epoch is not None and (not saved or os.path.isfile(self.saved_model_file))
        message = (
            f"training stopped at epoch {self._epoch_in_progress}: the training loss became NaN (diverged); "
            f"likely {cause}."
        )
        if not kept:
            raise ColdStartError(message + " No epoch was validated before it, so there is no model to keep.")
        self.logger.warning(message + f" The best epoch so far on validation ({self.kept_epoch}) is kept and tested.")

    def _train_epoch(self, train_data, epoch_idx, loss_func=None, *args, **kwargs):
        self._epoch_in_progress = epoch_idx  # its validation is that epoch's (the hybrid groups' history)
        if has_nothing_to_train(self.model):  # no parameter to learn: no pass over the training data
            return 0.0
        self.epochs_trained = epoch_idx + 1 - self.start_epoch
        return super()._train_epoch(train_data, epoch_idx, loss_func, *args, **kwargs)

    def _map_reduce(self, result, num_sample):
        """The collector already gathered every rank's rows: the result is the whole evaluation's
        (RecBole's version averages per-rank metrics, which is not the metric over all users)."""
        return result

    def _valid_epoch(self, *args, **kwargs):
        self._restore_best()
        valid_score, valid_result = super()._valid_epoch(*args, **kwargs)
        if self.group_results:
            self.valid_group_history[self._epoch_in_progress] = self.group_results
            if self.valid_group != "all":  # valid_metric read on that group (hybrid_valid_group)
                valid_score = float(self.group_results[self.valid_group].get(self.valid_metric, 0.0))
        self.valid_history.append((self._epoch_in_progress, valid_score))
        callback = _VALIDATION_CALLBACK.get()
        if callback is not None:
            callback(valid_score, valid_result)
        best = self.best_valid_score  # a tie with the best is judged against the next float: the earlier epoch stays
        if valid_score == best and np.isfinite(best):
            guarded = np.nextafter(best, np.inf if self.valid_metric_bigger else -np.inf)
            self.best_valid_score, self._tie_guard = guarded, (best, guarded)
        return valid_score, valid_result

    def _save_checkpoint(self, epoch, verbose=True, **kwargs):
        """RecBole's checkpoint content, with the settings as plain data instead of the pickled Config, in the one
        model file format (``storage.safe_files.save_tensors``: safetensors and JSON, written atomically): loading
        runs no code, and a killed process or a full disk never leaves a truncated file where a good one was."""
        self.kept_epoch = epoch
        if not distributed.is_main_process():  # RecBole asks local_rank, which is 0 on every machine
            return
        path = kwargs.pop("saved_model_file", self.saved_model_file)
        state = {
            "config": dict(Settings.of(self.config)),
            "epoch": int(epoch),
            "cur_step": int(self.cur_step),
            "best_valid_score": plain(self.best_valid_score),
            "state_dict": self.model.state_dict(),
            "other_parameter": encode_arrays(self.model.other_parameter()),
            "optimizer": self.optimizer.state_dict(),
        }
        if hasattr(self.model, "feature_names"):  # so that an export can check the data still has the same columns
            state["feature_names"] = [str(name) for name in self.model.feature_names]
        try:
            save_tensors(state, path)
        except OSError as error:
            raise ColdStartError(
                f"checkpoint {path} could not be written ({error.strerror or error}); the last one written, if any, is "
                "unchanged. Free space there or give another checkpoint_dir."
            ) from None
        if verbose and path != self._announced_checkpoint:  # named once, not once per improving epoch
            self.logger.info(f"Saving current: {path}")
            self._announced_checkpoint = path

    def kept_summary(self):
        """One line: the epoch kept on validation and its gain over the untrained start, e.g.
        ``kept epoch 14 of 25: valid recall@10 0.1985 (untrained start 0.1772, +12.0%)``."""
        metric = self.valid_metric
        best = float(self.best_valid_score)
        if has_nothing_to_train(self.model):
            what = self.model.nothing_to_train  # True, or the model's own words
            what = what if isinstance(what, str) else "a fixed similarity of the item features"
            return f"nothing to train: {type(self.model).__name__} is {what}: valid {metric} {best:.4f}"
        trained = f"{self.epochs_trained} epoch{'s' if self.epochs_trained != 1 else ''} trained"
        if self.start_valid_score is None:
            return f"kept epoch {self.kept_epoch} ({trained}): valid {metric} {best:.4f}"
        start = float(self.start_valid_score)
        if self.kept_epoch is None or self.kept_epoch < 0:
            return (
                f"kept the untrained start: no epoch beat its valid {metric} {start:.4f} ({trained}); "
                "the result is the untrained model (for FBSM and UFSM: the fixed similarity of their features)"
            )
        gain = f"{100 * (best - start) / start:+.1f}%" if start else "n/a"
        return (
            f"kept epoch {self.kept_epoch} ({trained}): valid {metric} {best:.4f} (untrained start {start:.4f}, {gain})"
        )

    @torch.no_grad()
    def evaluate(self, eval_data, load_best_model=True, model_file=None, show_progress=False):
        if not eval_data:
            return None
        if load_best_model:
            checkpoint_file = model_file or self.saved_model_file
            self._load_kept_model(checkpoint_file)
            self.logger.info(f"Loading model structure and parameters from {checkpoint_file}")
        distributed.broadcast_batchnorm_stats(self.model)
        split_items = getattr(eval_data._dataset, "split_items", None)
        self._candidates = self._candidate_position = self._score_batch = None
        if isinstance(eval_data, FullSortEvalDataLoader) and split_items is not None:
            # the split's items, and each item's column among them (-1 for items of other splits)
            self._candidates = torch.as_tensor(split_items, dtype=torch.long, device=self.device)
            self._candidate_position = torch.full((eval_data._dataset.item_num,), -1, device=self.device)
            self._candidate_position[self._candidates] = torch.arange(len(self._candidates), device=self.device)
        self.eval_collector.candidates = self._candidates
        cold = getattr(eval_data._dataset, "cold_items", None)
        self._cold_columns = None
        if self._candidates is not None and cold is not None:  # the hybrid scenario's cold candidate columns
            is_cold = torch.zeros(eval_data._dataset.item_num, dtype=torch.bool, device=self.device)
            is_cold[torch.as_tensor(np.asarray(cold, dtype=np.int64), device=self.device)] = True
            self._cold_columns = is_cold.index_select(0, self._candidates)
        self.eval_collector.set_groups(
            None if self._cold_columns is None else {"cold": self._cold_columns, "warm": ~self._cold_columns}
        )
        if self._candidates is not None:
            self.model.eval()  # as RecBole's evaluate does, before the candidates' vectors (batch norm)
            self._score_batch = candidate_scorer_of(self.model, self._candidates)
        result = super().evaluate(eval_data, load_best_model=False, show_progress=show_progress)
        self._score_batch = None  # what the model prepared for these candidates goes with the evaluation
        self.group_results = {
            name: (self.evaluator.evaluate(struct) if "rec.topk" in struct else {})
            for name, struct in self.eval_collector.group_structs().items()
        }
        return result

    def _load_kept_model(self, checkpoint_file):
        """The checkpoint's model; in a data-parallel run rank 0 reads it (only rank 0 wrote it, maybe on
        another machine) and sends its state to the other ranks."""
        parallel = distributed.is_distributed(self.config)
        if parallel:
            dist.barrier()  # rank 0 has written the last checkpoint
        device = "cpu" if parallel else self.device
        checkpoint = load_checkpoint(checkpoint_file, device) if distributed.is_main_process() else None
        state = None if checkpoint is None else {key: checkpoint.get(key) for key in ("state_dict", "other_parameter")}
        state = distributed.broadcast_object(state)  # itself outside a data-parallel run
        self.model.load_state_dict(state["state_dict"])
        self.model.load_other_parameter(state["other_parameter"])

    def _full_sort_batch_eval(self, batched_data):
        """Scores of the batch's users over the split's items only: a (users x candidates) matrix, the
        positives and history mapped to candidate columns (the collector maps top-k back to item ids)."""
        interaction, history_index, positive_u, positive_i = batched_data
        candidates = self._candidates
        if candidates is None:
            return super()._full_sort_batch_eval(batched_data)
        interaction = interaction.to(self.device)
        try:
            scores = self._score_batch(interaction)
        except NotImplementedError:  # no full_sort_predict (context-aware models): every pair predicted
            scores = self._predict_candidates(interaction, candidates)
        if self.warm_only_scores and self._cold_columns is not None and bool(self._cold_columns.any()):
            scores = lowest_for_cold(scores, self._cold_columns)
        position = self._candidate_position
        if history_index is not None:
            rows, items = (index.to(self.device) for index in history_index)
            columns = position[items]
            seen = columns >= 0
            scores[rows[seen], columns[seen]] = -np.inf
        positive_u, positive_i = positive_u.to(self.device), position[positive_i.to(self.device)]
        if bool((positive_i < 0).any()):
            raise ColdStartError("evaluation: a positive item of the evaluated split is not among its candidate items.")
        return interaction, scores, positive_u, positive_i

    def _predict_candidates(self, interaction, candidates):
        """Score every (user, candidate) pair with ``predict``, ``context_eval_chunk`` pairs at a time
        (the pairs are built per chunk: item features can be long token sequences)."""
        n_users, n_candidates = len(interaction), len(candidates)
        total = n_users * n_candidates
        scores = []
        for start in range(0, total, self.context_eval_chunk):
            cells = torch.arange(start, min(start + self.context_eval_chunk, total), device=self.device)
            pairs = interaction[cells // n_candidates]
            pairs.update(self.item_tensor[candidates[cells % n_candidates]])
            scores.append(self.model.predict(pairs))
        return torch.cat(scores).view(n_users, n_candidates)


def lowest_for_cold(scores, cold_columns):
    """``scores`` with every cold column set to its row's lowest warm score: a model that knows warm items only
    ranks cold items last (ties among them, and with the lowest warm item, broken fairly by the collector)."""
    warm = scores[:, ~cold_columns]
    lowest = warm.masked_fill(~torch.isfinite(warm), torch.inf).min(dim=1, keepdim=True).values
    scores = scores.clone()
    scores[:, cold_columns] = lowest.expand(-1, int(cold_columns.sum()))
    return scores


def fused_if_possible(optimizer):
    """RecBole's Adam/AdamW rebuilt with torch's fused kernel: the same update, measured 6 times faster per step on
    FBSM's V, which Adam updates whole at every batch. Anything else, or a failure to fuse, is kept."""
    if type(optimizer) not in (torch.optim.Adam, torch.optim.AdamW):
        return optimizer
    params = [p for group in optimizer.param_groups for p in group["params"]]
    if not params or any(not p.is_floating_point() or p.device.type not in ("cpu", "cuda") for p in params):
        return optimizer
    groups = [{**group, "fused": True, "foreach": None} for group in optimizer.param_groups]
    try:
        return type(optimizer)(groups, **{**optimizer.defaults, "fused": True, "foreach": None})
    except (RuntimeError, ValueError, TypeError):
        return optimizer


@functools.cache
def get_trainer(model_type, model_name):
    """RecBole's trainer for this model with ``ColdStartTrainerMixin`` in front."""
    base = recbole_trainer_lookup(model_type, model_name)
    return type(f"ColdStart{base.__name__}", (ColdStartTrainerMixin, base), {})
