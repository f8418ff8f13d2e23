"""Leak-free negative sampling for the item split, vectorised over users.

RecBole's ``Sampler`` draws negatives from *all* items, so on an item split about half of the training
negatives are validation/test items, and its rejection loop never ends for a user who has every
candidate. ``ColdStartSampler`` draws, in each phase, only among the items of that phase's split:

- a user with explicit dislikes in the split gets negatives drawn uniformly from those dislikes
  (paper, "Model Training");
- otherwise, ``uniform``: exactly uniform among the split's items the user has not liked, without
  rejection (the r-th free item is found by a binary search over the user's sorted likes);
  ``popularity``: split item popularity ** alpha, rejection for a few rounds, else the uniform draw;
- a user who has liked every item of the split has no true negative; they get a uniform split item
  rather than hanging the loop.

The draws are torch's (``DeviceNegativeSampler``), on the CPU for RecBole's loaders and on the model's device
for ``data.device_batches``: one sampler for both.
"""

from functools import cached_property

import numpy as np
import torch
from recbole.sampler import Sampler

POPULARITY_REJECTION_ROUNDS = 16


class _Csr:
    """Per-user sorted integer lists (row pointer + values), for vectorised lookups."""

    def __init__(self, users, values, n_users):
        values = np.asarray(values, dtype=np.int64)
        self.values = values[np.lexsort((values, users))]
        self.counts = np.bincount(np.asarray(users, dtype=np.int64), minlength=n_users)
        self.indptr = np.concatenate(([0], np.cumsum(self.counts)))


class _Likes:
    """A phase's likes as the uniform draw reads them: per user (``indptr``, ``counts``) the shifted keys
    user * (pool + 1) + p_k - k of the user's sorted distinct liked pool positions p_0 < p_1 < ...
    (``DeviceNegativeSampler.free_positions``). The keys user * (pool + 1) + p_k themselves, which only the
    popularity draw reads, are derived on first use: at 10^7 likes each like-sized array is 48 MB."""

    def __init__(self, keys, n_users, pool_size):
        """``keys``: the sorted distinct user * (pool_size + 1) + position of every like."""
        users = keys // (pool_size + 1)
        self.counts = np.bincount(users, minlength=n_users)
        self.indptr = np.concatenate(([0], np.cumsum(self.counts)))
        self.shifted_keys = keys - self.within_user_index()

    def within_user_index(self):
        """k of each like among its user's (0, 1, ... per user)."""
        return np.arange(self.indptr[-1]) - np.repeat(self.indptr[:-1], self.counts)

    @cached_property
    def liked_keys(self):
        return self.shifted_keys + self.within_user_index()


def sorted_unique(values):
    """``np.unique`` by a sort (numpy >= 2.3's hashing ``np.unique`` is far slower on 10^7 integers)."""
    values = np.sort(values)
    keep = np.ones(len(values), dtype=bool)
    keep[1:] = values[1:] != values[:-1]
    return values[keep]


def liked_keys(datasets):
    """Sorted distinct ``user * n_items + item`` of every (user, liked item) of ``datasets``: RecBole's
    ``used_ids`` of a phase (its per-user sets took 25 s and 1.5 GB at 10^7 likes), read when asked."""
    return sorted_unique(
        np.concatenate(
            [
                d.inter_feat[d.uid_field].numpy().astype(np.int64) * d.item_num
                + d.inter_feat[d.iid_field].numpy().astype(np.int64)
                for d in datasets
            ]
        )
    )


class ColdStartSampler(Sampler):
    """RecBole ``Sampler`` restricted to the items of each phase's split (see module docstring)."""

    def __init__(self, phases, datasets, distribution="uniform", alpha=1.0):
        self._pools, self._likes, self._dislikes, self._cpu_samplers = {}, {}, {}, {}
        n_users, n_items = datasets[0].user_num, datasets[0].item_num
        for k, (phase, dataset) in enumerate(zip(phases, datasets)):
            pool = self._pools[phase] = np.asarray(dataset.split_items, dtype=np.int64)
            keys = liked_keys(datasets[: k + 1])  # the likes up to this phase, sorted by (user, item), distinct
            in_pool = np.zeros(n_items, dtype=bool)
            in_pool[pool] = True
            keys = keys[in_pool[keys % n_items]]
            # still sorted and distinct: p_k - k for the user's k-th liked position is non-decreasing per user
            positions = np.searchsorted(pool, keys % n_items)
            self._likes[phase] = _Likes(keys // n_items * (len(pool) + 1) + positions, n_users, len(pool))
            dislikes = dataset.dislike_feat
            self._dislikes[phase] = (
                None
                if dislikes is None
                else _Csr(dislikes[dataset.uid_field].numpy(), dislikes[dataset.iid_field].numpy(), n_users)
            )
        super().__init__(phases, datasets, distribution=distribution, alpha=alpha)

    # ----------------------------------------------------------------------- RecBole's interface
    def get_used_ids(self):
        """No per-user sets: RecBole's full-sort loader and rejection loop, their readers, are replaced here (the
        evaluation loaders read ``liked_keys``); a user who liked every item is not an error."""
        return dict.fromkeys(self.phases)

    def _build_alias_table(self):
        """Popularity cumulative distributions per phase (RecBole builds one alias table over all items)."""
        self._pop_cdf = {}
        for phase, dataset in zip(self.phases, self.datasets):
            pool = self._pools[phase]
            counts = np.bincount(dataset.inter_feat[self.iid_field].numpy(), minlength=self.item_num)[pool]
            weights = counts.astype(np.float64) ** self.alpha
            weights[counts == 0] = 0.0
            total = weights.sum()
            self._pop_cdf[phase] = None if total <= 0 else np.cumsum(weights) / total

    def sample_by_key_ids(self, key_ids, num):
        """``num`` negatives per user of ``key_ids``: the phase's ``DeviceNegativeSampler`` on the CPU, drawing from
        torch's global generator (seeded by the run), so that RecBole's loaders and the device batches share one
        sampler."""
        if self.phase not in self._cpu_samplers:
            self._cpu_samplers[self.phase] = DeviceNegativeSampler(self, "cpu", None)
        users = torch.as_tensor(np.asarray(key_ids, dtype=np.int64))
        return self._cpu_samplers[self.phase].sample(users.repeat(num))


class DeviceNegativeSampler:
    """One phase of a ``ColdStartSampler`` as tensors on a device, drawn by torch there from ``generator``
    (None: torch's global one), so that a training loop cuts its batches without leaving the device."""

    def __init__(self, sampler, device, generator):
        phase, self.device, self.generator = sampler.phase, torch.device(device), generator
        likes, dislikes = sampler._likes[phase], sampler._dislikes[phase]
        pool = sampler._pools[phase]
        self.pool_size = len(pool)

        def put(array):
            return torch.as_tensor(np.ascontiguousarray(array)).to(self.device)

        self.pool = put(pool)
        self.like_counts, self.like_starts = put(likes.counts), put(likes.indptr[:-1])
        cdf = sampler._pop_cdf.get(phase) if sampler.distribution == "popularity" else None
        self.popularity_cdf = None if cdf is None else put(cdf)
        self.shifted_keys = put(likes.shifted_keys)
        self.liked_keys = None if cdf is None else put(likes.liked_keys)  # read by the popularity draw alone
        # users who liked every item of the split: known up front, so no per-batch check (and no device sync)
        saturated = likes.counts >= self.pool_size
        self.saturated = put(saturated)
        self.dislikes = None
        if dislikes is not None and len(dislikes.values):
            self.dislikes = (put(dislikes.counts), put(dislikes.indptr[:-1]), put(dislikes.values))
        self._any_saturated = bool(saturated.any())  # none (the usual case): no per-draw check
        # ``sample`` never returns an item its user liked (a dynamic sampler's scoring may then skip the estimation
        # constraint, which only changes the score of a like): uniform free draws, popularity draws that clash fall
        # back to them; only a user who liked every item draws any (a dislike may also be a like: not assumed)
        self.excludes_likes = not self._any_saturated and self.dislikes is None

    def uniforms(self, n):
        return torch.rand(n, generator=self.generator, device=self.device, dtype=torch.float64)

    def sample(self, users):
        """One negative item (internal id) per entry of ``users`` (a long tensor on the device)."""
        result = self.pool.index_select(0, self.free_positions(users, self.uniforms(len(users))))
        if self.popularity_cdf is not None:
            result = self._popularity_draw(users, result)
        if self.dislikes is not None:  # users with dislikes in the split draw among them, whatever the distribution
            counts, starts, values = self.dislikes
            user_counts = counts.index_select(0, users)
            pick = starts.index_select(0, users) + (self.uniforms(len(users)) * user_counts).long()
            disliked = values.index_select(0, pick.clamp(max=len(values) - 1))
            result = torch.where(user_counts > 0, disliked, result)
        return result

    def free_positions(self, users, uniforms):
        """Positions in the pool, exactly uniform among those the user has not liked, from the given uniforms in
        [0, 1): with the user's sorted liked positions p_0 < p_1 < ..., the r-th free position is
        r + #{k : p_k - k <= r}, one binary search for every user at once."""
        free = self.pool_size - self.like_counts.index_select(0, users)
        saturated = self.saturated.index_select(0, users) if self._any_saturated else None
        r = (uniforms * (free if saturated is None else torch.where(saturated, self.pool_size, free))).long()
        keys = users * (self.pool_size + 1) + r
        below = torch.searchsorted(self.shifted_keys, keys, right=True).sub_(self.like_starts.index_select(0, users))
        return r.add_(below) if saturated is None else torch.where(saturated, r, r + below)

    def _popularity_draw(self, users, result):
        """Split popularity with rejection of liked items for a few rounds; rows still clashing keep their
        uniform free draw (``result``)."""
        cdf, liked, n = self.popularity_cdf, self.liked_keys, self.pool_size + 1
        todo = torch.ones(len(users), dtype=torch.bool, device=self.device)
        for _ in range(POPULARITY_REJECTION_ROUNDS):
            positions = torch.searchsorted(cdf, self.uniforms(len(users)), right=True).clamp(max=self.pool_size - 1)
            keys = users * n + positions
            found = torch.searchsorted(liked, keys).clamp(max=max(len(liked) - 1, 0))
            clash = liked.index_select(0, found) == keys if len(liked) else torch.zeros_like(todo)
            accept = todo & ~clash
            result = torch.where(accept, self.pool.index_select(0, positions), result)
            todo &= clash
            if not bool(todo.any()):
                break
        return result
