"""Training batches made of whole users: every like of a user lands in the same batch.

Why: FBSM scores a triplet against the user's profile f_u = sum of the user's training likes. With
RecBole's shuffled batches, a user with n likes shows up in about n batches and each time needs the
whole profile: an epoch costs sum_u n_u^2. When a batch holds all of its users' likes, the profile is
the sum over the batch's own positives (``FeatureSimilarityRecommender.profile_factors_from_batch``),
and an epoch costs sum_u n_u: linear in the likes.

The order is still random: users are shuffled every epoch (seeded by the loader's generator) and each
user's likes are shuffled too; batches are cut at user boundaries, so a batch has about
``train_batch_size`` triplets (one user with more likes than that gets a batch of their own).
"""

import numpy as np
import torch
from recbole.data.interaction import Interaction


class UserGroupedBatchSampler:
    """Lists of interaction indices, grouped by user, with a new random order every epoch."""

    def __init__(self, users, batch_size, generator):
        self.users = np.asarray(users, dtype=np.int64)
        self.batch_size = max(1, int(batch_size))
        self.generator = generator
        self._planned = None

    def _plan(self):
        n = len(self.users)
        if n == 0:
            return []
        seed = int(torch.randint(0, 2**62, (1,), generator=self.generator))
        rng = np.random.default_rng(seed)
        user_rank = rng.permutation(int(self.users.max()) + 1)
        # sort by (shuffled user rank, random key): users contiguous, in random order, likes shuffled
        order = np.lexsort((rng.random(n), user_rank[self.users]))
        grouped_users = self.users[order]
        starts = np.flatnonzero(np.r_[True, grouped_users[1:] != grouped_users[:-1]])
        # a user goes to the batch in which their first like would fall
        batch_of_user = starts // self.batch_size
        _, first = np.unique(batch_of_user, return_index=True)
        cuts = np.r_[starts[first], n]
        return [order[a:b].tolist() for a, b in zip(cuts[:-1], cuts[1:])]

    def __iter__(self):
        batches = self._planned if self._planned is not None else self._plan()
        self._planned = None
        return iter(batches)

    def __len__(self):
        if self._planned is None:
            self._planned = self._plan()
        return len(self._planned)


def user_grouped(loader_class):
    """``loader_class`` (RecBole's TrainDataLoader) with batches of whole users."""

    class UserGroupedTrainDataLoader(loader_class):
        @property
        def _index_sampler(self):
            if getattr(self, "_user_batches", None) is None:
                users = self._dataset.inter_feat[self._dataset.uid_field].numpy()
                self._user_batches = UserGroupedBatchSampler(users, self.step, self.generator)
            return self._user_batches

        def set_batch_size(self, batch_size):
            super().set_batch_size(batch_size)
            self._user_batches = None

        def collate_fn(self, index):
            """RecBole's collate (rows, feature join, negative sampling) with the rows taken by
            ``index_select``: RecBole indexes every column with a numpy array, 5 times slower on CPU."""
            index = torch.as_tensor(np.asarray(index, dtype=np.int64))
            inter_feat = self._dataset.inter_feat
            rows = Interaction({field: inter_feat[field].index_select(0, index) for field in inter_feat.columns})
            return self._neg_sampling(self.transform(self._dataset, self._dataset.join(rows)))

    UserGroupedTrainDataLoader.__name__ = f"UserGrouped{loader_class.__name__}"
    return UserGroupedTrainDataLoader
