"""RecBole's full-sort evaluation loader with its per-batch work vectorised: history and positives are CSR
matrices (users x items) built once and a batch's pairs one row gather (RecBole's collate builds a tensor per
user: a sixth of a whole evaluation on citeulike-t). The batches, users, history and positives are RecBole's.

In a data-parallel run each rank evaluates one contiguous block of the users (RecBole's ``DistributedSampler``
pads the shards with repeated users, counted twice); the trainer gathers the blocks back in rank order.
"""

from functools import cache
from logging import getLogger

import numpy as np
import scipy.sparse as sp
import torch
from recbole.data.dataloader import FullSortEvalDataLoader
from recbole.data.dataloader.abstract_dataloader import AbstractDataLoader
from recbole.data.interaction import Interaction
from torch.utils.data import BatchSampler

from recbole_fbsm.data.features import feature_fields
from recbole_fbsm.data.sampler import liked_keys, sorted_unique
from recbole_fbsm.kernels.sparse import TorchCsr
from recbole_fbsm.runtime import distributed


def _keys_as_csr(keys, n_users, n_items):
    """Sorted distinct ``user * n_items + item`` keys as a (users x items) CSR matrix of ones."""
    indptr = np.concatenate(([0], np.cumsum(np.bincount(keys // n_items, minlength=n_users))))
    return sp.csr_matrix((np.ones(len(keys), dtype=np.float32), keys % n_items, indptr), shape=(n_users, n_items))


def feature_columns(config, dataset):
    """Upper bound of the feature columns of a model that reads its own item features (the feature fields'
    vocabularies); 0 for other models."""
    if not getattr(config.model_class, "reads_own_features", False) or dataset.item_feat is None:
        return 0
    return sum(dataset.num(f) for f in feature_fields(dataset, config["feature_fields"]) if f in dataset.field2id_token)


class ShardedEvalMixin:
    """Evaluation batches of this rank's contiguous block of users only (all of them in one process)."""

    @property
    def _index_sampler(self):
        rank, size = distributed.world()
        if size == 1 or self.config["single_spec"]:
            return super()._index_sampler
        rows = range(*distributed.shard_bounds(self.sample_size, rank, size))
        return BatchSampler(rows, max(1, int(self.step)), drop_last=False)


class ColdStartFullSortEvalDataLoader(ShardedEvalMixin, FullSortEvalDataLoader):
    """RecBole's full-sort loader; batches hold at most ``eval_batch_size`` cells of the widest block an
    evaluation batch builds: (users x items) scores, or (users x features) dense profiles of FBSM, UFSM
    and CoSim. RecBole counts items only: 300 items, a 24,000-word vocabulary and 40,000 users made one
    batch of every user and a 3.8 GB profile block."""

    def _init_batch_size_and_step(self):
        super()._init_batch_size_and_step()
        width = max(self._dataset.item_num, feature_columns(self.config, self._dataset), 1)
        users = max(int(self.config["eval_batch_size"]) // width, 1)
        if users < self.step:
            self.step = users
            self.set_batch_size(users * self._dataset.item_num)

    def __init__(self, config, dataset, sampler, shuffle=False):
        """What RecBole's ``FullSortEvalDataLoader.__init__`` sets up (evaluated users, their positives and
        history), from sorted keys instead of a Python loop over the interactions with a set and two
        tensors per user (21 s and 1.7 GB for the two loaders at 10^7 likes): CSR matrices, without RecBole's
        per-user tensors ``uid2positive_item`` / ``uid2history_item`` (read only by ``recbole.utils.case_study``)."""
        self.logger = getLogger()
        self.uid_field, self.iid_field = dataset.uid_field, dataset.iid_field
        self.is_sequential = False
        n_users, n_items = dataset.user_num, dataset.item_num
        dataset.sort(by=self.uid_field, ascending=True)  # as RecBole does
        users = dataset.inter_feat[self.uid_field].numpy().astype(np.int64)
        items = dataset.inter_feat[self.iid_field].numpy().astype(np.int64)
        positive = sorted_unique(users * n_items + items)
        evaluated = np.zeros(n_users, dtype=bool)
        evaluated[users] = True
        # the phase's used ids (RecBole's ``Sampler``: every split's likes up to this phase's), as sorted keys
        phase_and_before = sampler.datasets[: sampler.phases.index(sampler.phase) + 1]
        history = liked_keys(phase_and_before)
        found = np.searchsorted(positive, history).clip(max=max(len(positive) - 1, 0))
        in_positive = positive[found] == history if len(positive) else np.zeros(len(history), dtype=bool)
        history = history[~in_positive & evaluated[history // n_items]]
        positives = _keys_as_csr(positive, n_users, n_items)
        self._positives = TorchCsr(positives)
        self._history = TorchCsr(_keys_as_csr(history, n_users, n_items))
        self.uid2items_num = np.diff(positives.indptr).astype(np.int64)
        self.uid_list = torch.from_numpy(np.flatnonzero(evaluated).astype(np.int64))
        self.user_df = dataset.join(Interaction({self.uid_field: self.uid_list}))
        self.sample_size = len(self.user_df)
        AbstractDataLoader.__init__(self, config, dataset, sampler, shuffle=False)

    def collate_fn(self, index):
        user_df = self.user_df[np.array(index)]
        users = user_df[self.uid_field]
        history_u, history_i, _, _ = self._history.gather_rows(users)
        positive_u, positive_i, _, _ = self._positives.gather_rows(users)
        return user_df, (history_u, history_i), positive_u, positive_i


@cache
def vectorised_eval_loader(loader_class):
    """The vectorised loader in place of RecBole's full-sort one; any other loader class sharded by
    user blocks in data-parallel runs and otherwise unchanged."""
    if loader_class is FullSortEvalDataLoader:
        return ColdStartFullSortEvalDataLoader
    return type(f"Sharded{loader_class.__name__}", (ShardedEvalMixin, loader_class), {})
