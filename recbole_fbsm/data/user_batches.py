"""Training batches made of whole users: every like of a user lands in the same batch.

Why: FBSM scores a triplet against the user's profile f_u = sum of the user's training likes. With RecBole's
shuffled batches a user with n likes shows up in about n batches, each needing the whole profile: an epoch
costs sum_u n_u^2. When a batch holds all of its users' likes, the profile is the sum over the batch's own
positives (``WholeUserBatch``, built by the loader and carried to the model's loss): sum_u n_u.

Users are shuffled every epoch (the loader's generator) and batches cut at user boundaries, about
``train_batch_size`` triplets each; a user's likes keep one order (a batch's loss is a mean), so planning an
epoch needs no sort. In a data-parallel run every rank plans the same epoch and takes its share of each batch
(its users dealt round-robin), so that every rank takes the same number of steps (DDP needs that).
"""

import numpy as np
import torch

from recbole_fbsm.errors import ColdStartError
from recbole_fbsm.runtime import distributed


class UserGroupedBatchSampler:
    """Lists of interaction indices, grouped by user, with a new random order every epoch."""

    def __init__(self, users, batch_size, generator, rank=0, world_size=1):
        self.users = np.asarray(users, dtype=np.int64)
        self.batch_size = max(1, int(batch_size))
        self.generator = generator
        self.rank, self.world_size = int(rank), int(world_size)
        self._planned = None
        # the likes grouped by user, once: each user's segment [start, start + count) of by_user
        self.by_user = np.argsort(self.users, kind="stable")
        counts = np.bincount(self.users) if len(self.users) else np.zeros(0, dtype=np.int64)
        self.active_users = np.flatnonzero(counts > 0)
        self.counts = counts[self.active_users]
        self.starts = (np.cumsum(counts) - counts)[self.active_users]

    def _plan(self):
        """The epoch as (like indices in batch order, batch boundaries): batch k is order[cuts[k]:cuts[k + 1]]."""
        n = int(self.counts.sum())
        if n == 0:
            return np.zeros(0, dtype=np.int64), np.zeros(1, dtype=np.int64)
        seed = int(torch.randint(0, 2**62, (1,), generator=self.generator))
        shuffled = np.random.default_rng(seed).permutation(len(self.active_users))
        lengths, starts = self.counts[shuffled], self.starts[shuffled]
        user_first = np.cumsum(lengths) - lengths  # where each shuffled user begins in the epoch
        order = self.by_user[np.arange(n) + np.repeat(starts - user_first, lengths)]
        # a user goes to the batch in which their first like would fall
        batch_of_user = user_first // self.batch_size  # non-decreasing
        first = np.flatnonzero(np.r_[True, batch_of_user[1:] != batch_of_user[:-1]])
        if self.world_size > 1:
            return self._share(order, lengths, first)
        return order, np.r_[user_first[first], n]

    def _share(self, order, lengths, first):
        """This rank's part of each batch of the epoch: the batch's users in epoch order, dealt round-robin
        (user k of a batch to rank k mod W). ``first``: the epoch position of each batch's first user."""
        n_users, size = len(lengths), self.world_size
        if n_users < size:
            raise ColdStartError(
                f"nproc/world_size={size}: the training split has {n_users} users with likes; "
                "a data-parallel run needs at least one per process."
            )
        starts = [0]  # batches with fewer users than ranks are merged into the next (the last into the previous)
        for start in first[1:]:
            if start - starts[-1] >= size:
                starts.append(int(start))
        if n_users - starts[-1] < size:
            starts.pop()
        starts = np.asarray(starts if starts else [0], dtype=np.int64)
        segment = np.repeat(np.arange(len(starts)), np.diff(np.r_[starts, n_users]))
        dealt = (np.arange(n_users) - starts[segment]) % size == self.rank
        mine = np.repeat(dealt, lengths)  # each like goes with its user
        like_segment = np.repeat(segment, lengths)[mine]
        order = order[mine]
        return order, np.r_[0, np.flatnonzero(like_segment[1:] != like_segment[:-1]) + 1, len(order)]

    def epoch_plan(self):
        """(order, cuts) of the next epoch (the one ``len()`` planned, if it was asked first)."""
        order, cuts = self._planned if self._planned is not None else self._plan()
        self._planned = None
        return order, cuts

    def __iter__(self):
        order, cuts = self.epoch_plan()
        return iter([order[a:b].tolist() for a, b in zip(cuts[:-1], cuts[1:])])

    def __len__(self):
        if self._planned is None:
            self._planned = self._plan()
        return len(self._planned[1]) - 1


# longer than 60 lines: a class factory whose body is the class (its methods are short)
def user_grouped(loader_class):
    """``loader_class`` (RecBole's TrainDataLoader) with batches of whole users."""

    class UserGroupedTrainDataLoader(loader_class):
        @property
        def _index_sampler(self):
            if getattr(self, "_user_batches", None) is None:
                users = self._dataset.inter_feat[self._dataset.uid_field].numpy()
                self._user_batches = UserGroupedBatchSampler(
                    users, self._whole_batch_step, self.generator, *distributed.world()
                )
            return self._user_batches

        def _init_batch_size_and_step(self):
            super()._init_batch_size_and_step()
            # the batch of the whole run: RecBole divides ``step`` by the world size afterwards, in a
            # data-parallel run; here each rank takes its share of the whole batch instead
            self._whole_batch_step = self.step

        def set_batch_size(self, batch_size):
            super().set_batch_size(batch_size)
            self._user_batches = None

    UserGroupedTrainDataLoader.__name__ = f"UserGrouped{loader_class.__name__}"
    return UserGroupedTrainDataLoader
