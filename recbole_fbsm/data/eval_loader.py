"""RecBole's full-sort evaluation loader with its per-batch work vectorised.

``FullSortEvalDataLoader.collate_fn`` builds each batch's (row, item) pairs of history and positives
with one ``torch.full_like`` per user: about 1,300 small tensors per batch of 655 users on citeulike-t,
a sixth of a whole evaluation. Here both are CSR matrices (users x items) built once, and a batch's
pairs are one row gather. The batches, users, history and positives are exactly RecBole's.

In a data-parallel run every evaluation loader serves its rank one contiguous block of the evaluated
users (RecBole's ``DistributedSampler`` pads the shards with repeated users, which counts them twice);
the trainer gathers the blocks back in rank order.
"""

import numpy as np
import scipy.sparse as sp
import torch
from recbole.data.dataloader import FullSortEvalDataLoader
from recbole.utils import FeatureSource, FeatureType
from torch.utils.data import BatchSampler

from recbole_fbsm import distributed
from recbole_fbsm.models.sparse import TorchCsr


def _rows_as_csr(per_user, n_items):
    """An object array of item-id tensors (None: no row) as a (users x items) CSR matrix."""
    lengths = np.array([0 if items is None else len(items) for items in per_user], dtype=np.int64)
    filled = [items for items in per_user if items is not None and len(items)]
    columns = torch.cat(filled).numpy() if filled else np.zeros(0, dtype=np.int64)
    indptr = np.r_[0, np.cumsum(lengths)]
    return sp.csr_matrix((np.ones(len(columns), dtype=np.float32), columns, indptr), shape=(len(per_user), n_items))


def feature_columns(config, dataset):
    """Upper bound of the feature columns (vocabulary) of a model that reads its own item features:
    the sizes of the feature fields' vocabularies; 0 for other models."""
    if not getattr(config.model_class, "reads_own_features", False) or dataset.item_feat is None:
        return 0
    fields = config["feature_fields"] or [
        f for f in dataset.fields(ftype=[FeatureType.TOKEN, FeatureType.TOKEN_SEQ], source=[FeatureSource.ITEM])
        if f != dataset.iid_field
    ]
    return sum(dataset.num(f) for f in fields if f in dataset.field2id_token)


class ShardedEvalMixin:
    """Evaluation batches of this rank's contiguous block of users only (all of them in one process)."""

    @property
    def _index_sampler(self):
        rank, size = distributed.world()
        if size == 1 or self.config["single_spec"]:
            return super()._index_sampler
        start, stop = distributed.shard_bounds(self.sample_size, rank, size)
        return BatchSampler(range(start, stop), max(1, int(self.step)), drop_last=False)


class ColdStartFullSortEvalDataLoader(ShardedEvalMixin, FullSortEvalDataLoader):
    """RecBole's full-sort loader; batches hold at most ``eval_batch_size`` cells of the widest block an
    evaluation batch builds: (users x items) scores, or (users x features) dense profiles of FBSM, UFSM
    and CoSim. RecBole counts items only: 300 items, a 24,000-word vocabulary and 40,000 users made one
    batch of every user and a 3.8 GB profile block."""

    def _init_batch_size_and_step(self):
        super()._init_batch_size_and_step()
        if self.is_sequential:
            return
        width = max(self._dataset.item_num, feature_columns(self.config, self._dataset), 1)
        users = max(int(self.config["eval_batch_size"]) // width, 1)
        if users < self.step:
            self.step = users
            self.set_batch_size(users * self._dataset.item_num)

    def __init__(self, config, dataset, sampler, shuffle=False):
        super().__init__(config, dataset, sampler, shuffle=shuffle)
        if not self.is_sequential:
            self._history = TorchCsr(_rows_as_csr(self.uid2history_item, dataset.item_num))
            self._positives = TorchCsr(_rows_as_csr(self.uid2positive_item, dataset.item_num))

    def collate_fn(self, index):
        if self.is_sequential:
            return super().collate_fn(index)
        user_df = self.user_df[np.array(index)]
        users = user_df[self.uid_field]
        history_u, history_i, _, _ = self._history.gather_rows(users)
        positive_u, positive_i, _, _ = self._positives.gather_rows(users)
        return user_df, (history_u, history_i), positive_u, positive_i


_SHARDED = {}


def vectorised_eval_loader(loader_class):
    """The vectorised loader in place of RecBole's full-sort one; any other loader class sharded by
    user blocks in data-parallel runs and otherwise unchanged."""
    if loader_class is FullSortEvalDataLoader:
        return ColdStartFullSortEvalDataLoader
    if loader_class not in _SHARDED:
        _SHARDED[loader_class] = type(f"Sharded{loader_class.__name__}", (ShardedEvalMixin, loader_class), {})
    return _SHARDED[loader_class]
