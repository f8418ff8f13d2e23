"""RecBole trainers with the cold-start evaluation mixed in.

What the mixin changes, and why:

- evaluation candidates are exactly the items of the evaluated split (every other item scores -inf);
  models without ``full_sort_predict`` (context-aware ones) are asked to score only those candidates;
- ties are broken at random (``TieBreakingCollector``), never by internal id;
- checkpoints get a unique name (RecBole's has one-second resolution) and are loaded with
  ``weights_only=False`` (torch >= 2.6 refuses RecBole's pickled Config otherwise);
- a model may supply its own optimizer parameter groups (``optimizer_param_groups``), e.g. the paper's
  separate learning rates for D and V.
"""

import os
import uuid

import numpy as np
import torch
from recbole.data.dataloader import FullSortEvalDataLoader
from recbole.utils import get_local_time

from recbole_fbsm.evaluation import TieBreakingCollector

_TRAINER_CACHE = {}


def load_checkpoint(path, device="cpu"):
    """Load a checkpoint written by this plugin's trainers (they pickle RecBole's Config)."""
    return torch.load(path, map_location=device, weights_only=False)


class ColdStartTrainerMixin:
    def __init__(self, config, model):
        super().__init__(config, model)
        name = f"{config['model']}-{get_local_time()}-{uuid.uuid4().hex[:8]}.pth"
        self.saved_model_file = os.path.join(self.checkpoint_dir, name)
        self.eval_collector = TieBreakingCollector(config)
        self.context_eval_chunk = int(config["context_eval_chunk"] or 65536)
        self._candidates = None

    def _build_optimizer(self, **kwargs):
        if "params" not in kwargs and hasattr(self.model, "optimizer_param_groups"):
            kwargs["params"] = self.model.optimizer_param_groups(self.learning_rate)
        return super()._build_optimizer(**kwargs)

    def resume_checkpoint(self, resume_file):
        checkpoint = load_checkpoint(resume_file, self.device)
        self.saved_model_file = str(resume_file)
        self.start_epoch = checkpoint["epoch"] + 1
        self.cur_step = checkpoint["cur_step"]
        self.best_valid_score = checkpoint["best_valid_score"]
        self.model.load_state_dict(checkpoint["state_dict"])
        self.model.load_other_parameter(checkpoint.get("other_parameter"))
        self.optimizer.load_state_dict(checkpoint["optimizer"])

    @torch.no_grad()
    def evaluate(self, eval_data, load_best_model=True, model_file=None, show_progress=False):
        if not eval_data:
            return None
        if load_best_model:
            checkpoint_file = model_file or self.saved_model_file
            checkpoint = load_checkpoint(checkpoint_file, self.device)
            self.model.load_state_dict(checkpoint["state_dict"])
            self.model.load_other_parameter(checkpoint.get("other_parameter"))
            self.logger.info(f"Loading model structure and parameters from {checkpoint_file}")
        split_items = getattr(eval_data._dataset, "split_items", None)
        if isinstance(eval_data, FullSortEvalDataLoader) and split_items is not None:
            self._candidates = torch.as_tensor(split_items, dtype=torch.long, device=self.device)
        else:
            self._candidates = None
        self.eval_collector.reset_ties()
        return super().evaluate(eval_data, load_best_model=False, show_progress=show_progress)

    def _full_sort_batch_eval(self, batched_data):
        interaction, history_index, positive_u, positive_i = batched_data
        candidates = self._candidates
        if candidates is None:
            return super()._full_sort_batch_eval(batched_data)
        interaction = interaction.to(self.device)
        try:
            full = self.model.full_sort_predict(interaction).view(-1, self.tot_item_num)
            scores = torch.full_like(full, -np.inf)
            scores[:, candidates] = full[:, candidates]
        except NotImplementedError:
            scores = torch.full((len(interaction), self.tot_item_num), -np.inf, device=self.device)
            scores[:, candidates] = self._predict_candidates(interaction, candidates)
        if history_index is not None:
            scores[history_index] = -np.inf
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


def cold_start_trainer_class(base):
    """``base`` (a RecBole trainer class) with ``ColdStartTrainerMixin`` in front."""
    if base not in _TRAINER_CACHE:
        _TRAINER_CACHE[base] = type(f"ColdStart{base.__name__}", (ColdStartTrainerMixin, base), {})
    return _TRAINER_CACHE[base]
