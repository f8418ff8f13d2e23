"""Leak-free negative sampling for the item split, vectorised over users.

RecBole's ``Sampler`` draws negatives from *all* items, so on an item split about half of the training
negatives are validation/test items, and its rejection loop never ends for a user who has every
candidate. ``ColdStartSampler`` draws, in each phase, only among the items of that phase's split:

- a user with explicit dislikes in the split gets negatives drawn uniformly from those dislikes
  (paper, "Model Training");
- otherwise, ``uniform``: exactly uniform among the split's items the user has not liked, without
  rejection (the r-th free item is found by a binary search over the user's sorted likes);
  ``popularity``: split item popularity ** alpha, rejection for a few rounds, then the exact uniform
  draw for what is left;
- a user who has liked every item of the split has no true negative; they get a uniform split item
  (a warning says how many such users exist) rather than hanging the loop.
"""

from logging import getLogger

import numpy as np
import torch
from recbole.sampler import Sampler

from recbole_fbsm.recbole_compat import SamplerRoutes

POPULARITY_REJECTION_ROUNDS = 16


class _Csr:
    """Per-user sorted integer lists (row pointer + values), for vectorised lookups."""

    def __init__(self, users, values, n_users, presorted=False):
        """``presorted``: the pairs are already in (user, value) order (no sort)."""
        values = np.asarray(values, dtype=np.int64)
        self.values = values if presorted else values[np.lexsort((values, users))]
        counts = np.bincount(np.asarray(users, dtype=np.int64), minlength=n_users)
        self.indptr = np.concatenate(([0], np.cumsum(counts)))
        self.counts = counts
        self.rows = np.repeat(np.arange(n_users), counts)


def sorted_unique(values):
    """``np.unique`` by a sort (numpy >= 2.3's hashing ``np.unique`` is far slower on 10^7 integers)."""
    values = np.sort(values)
    keep = np.ones(len(values), dtype=bool)
    keep[1:] = values[1:] != values[:-1]
    return values[keep]


class UsedIds:
    """RecBole's ``used_ids`` of one phase (indexing by a user gives the set of items the user liked up
    to that phase), stored as each user's sorted distinct items (``indptr``, ``items``)."""

    def __init__(self, users, items, n_users, n_items):
        keys = sorted_unique(np.asarray(users, dtype=np.int64) * n_items + np.asarray(items, dtype=np.int64))
        self.n_items = n_items
        self.items = keys % n_items
        self.indptr = np.concatenate(([0], np.cumsum(np.bincount(keys // n_items, minlength=n_users))))

    def keys(self):
        """Sorted ``user * n_items + item`` of every (user, liked item)."""
        return np.repeat(np.arange(len(self)), np.diff(self.indptr)) * self.n_items + self.items

    def __len__(self):
        return len(self.indptr) - 1

    def __getitem__(self, user):
        if user is None:  # RecBole's evaluation loader asks for its "no user yet" before the first user
            return set()
        if np.ndim(user) == 0:
            return set(self.items[self.indptr[user]:self.indptr[user + 1]].tolist())
        sets = np.empty(len(user), dtype=object)
        sets[:] = [self[u] for u in np.asarray(user).tolist()]
        return sets


class ColdStartSampler(SamplerRoutes, Sampler):
    """RecBole ``Sampler`` restricted to the items of each phase's split (see module docstring)."""

    def __init__(self, phases, datasets, distribution="uniform", alpha=1.0):
        self.logger = getLogger()
        self._pools = {}
        self._likes = {}
        self._dislikes = {}
        n_users = datasets[0].user_num
        liked = []
        for phase, dataset in zip(phases, datasets):
            pool = np.asarray(dataset.split_items, dtype=np.int64)
            self._pools[phase] = pool
            liked.append(dataset.inter_feat)
            users = np.concatenate([f[dataset.uid_field].numpy() for f in liked])
            items = np.concatenate([f[dataset.iid_field].numpy() for f in liked])
            in_pool = np.zeros(dataset.item_num, dtype=bool)
            in_pool[pool] = True
            in_pool = in_pool[items]
            users, positions = users[in_pool], np.searchsorted(pool, items[in_pool])
            key = sorted_unique(users * (len(pool) + 1) + positions)  # dedupe repeated likes
            likes = self._likes[phase] = _Csr(key // (len(pool) + 1), key % (len(pool) + 1), n_users, presorted=True)
            # p_k - k for the user's k-th liked position: non-decreasing per user, see _uniform_free_positions
            likes.shifted_keys = likes.rows * (len(pool) + 1) + (
                likes.values - (np.arange(len(likes.values)) - np.repeat(likes.indptr[:-1], likes.counts))
            )
            likes.liked_keys = key  # row * (len(pool) + 1) + value: the sorted distinct keys it was built from
            dislikes = dataset.dislike_feat
            self._dislikes[phase] = None if dislikes is None else _Csr(
                dislikes[dataset.uid_field].numpy(), dislikes[dataset.iid_field].numpy(), n_users
            )
        super().__init__(phases, datasets, distribution=distribution, alpha=alpha)

    # ----------------------------------------------------------------------- RecBole's interface
    def get_used_ids(self):
        """Per phase, per user, the items liked up to that phase: RecBole's format (``used_ids[phase][user]``
        is a set, used by the evaluation dataloaders for the history mask), held as one sorted array per
        phase (``UsedIds``; a set per user and phase took 25 s and 1.5 GB at 10^7 likes). Unlike RecBole,
        a user who liked every item is not an error."""
        used = {}
        users, items = [], []
        for phase, dataset in zip(self.phases, self.datasets):
            users.append(dataset.inter_feat[self.uid_field].numpy())
            items.append(dataset.inter_feat[self.iid_field].numpy())
            used[phase] = UsedIds(np.concatenate(users), np.concatenate(items), self.user_num, self.item_num)
        return used

    def plugin_build_alias_table(self):
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
        users = np.tile(np.asarray(key_ids, dtype=np.int64), num)
        return torch.from_numpy(self.sample_negatives(users))

    # ------------------------------------------------------------------------------- the sampling
    def sample_negatives(self, users):
        """One negative item (internal id) per entry of ``users``, for the current phase."""
        phase = self.phase
        pool = self._pools[phase]
        result = np.empty(len(users), dtype=np.int64)
        todo = np.ones(len(users), dtype=bool)
        dislikes = self._dislikes[phase]
        if dislikes is not None:
            has = dislikes.counts[users] > 0
            if has.any():
                u = users[has]
                pick = dislikes.indptr[u] + (np.random.random(len(u)) * dislikes.counts[u]).astype(np.int64)
                result[has] = dislikes.values[pick]
                todo &= ~has
        if not todo.any():
            return result
        rows = np.flatnonzero(todo)
        if self.distribution == "popularity" and self._pop_cdf.get(phase) is not None:
            rows = self._popularity_draw(users, rows, result)
        if len(rows):
            result[rows] = pool[self._uniform_free_positions(users[rows])]
        return result

    def _popularity_draw(self, users, rows, result):
        """Fill ``result[rows]`` by popularity with rejection; return the rows still to fill."""
        pool, cdf, likes = self._pools[self.phase], self._pop_cdf[self.phase], self._likes[self.phase]
        n = len(pool) + 1
        liked_keys = likes.liked_keys
        for _ in range(POPULARITY_REJECTION_ROUNDS):
            positions = np.minimum(np.searchsorted(cdf, np.random.random(len(rows)), side="right"), len(pool) - 1)
            keys = users[rows] * n + positions
            found = np.searchsorted(liked_keys, keys)
            clash = (found < len(liked_keys)) & (liked_keys[np.minimum(found, len(liked_keys) - 1)] == keys)
            result[rows[~clash]] = pool[positions[~clash]]
            rows = rows[clash]
            if not len(rows):
                break
        return rows

    def _uniform_free_positions(self, users):
        """Exactly uniform positions in the pool among those the user has not liked, no rejection.

        With the user's sorted liked positions p_0 < p_1 < ..., the r-th free position is
        r + #{k : p_k - k <= r}; one global binary search answers every user at once.
        """
        pool_size = len(self._pools[self.phase])
        likes = self._likes[self.phase]
        free = pool_size - likes.counts[users]
        saturated = free <= 0
        if saturated.any():
            self._warn_saturated(users[saturated])
        r = (np.random.random(len(users)) * np.where(saturated, pool_size, free)).astype(np.int64)
        below = np.searchsorted(likes.shifted_keys, users * (pool_size + 1) + r, side="right") - likes.indptr[users]
        return np.where(saturated, r, r + below)

    def _warn_saturated(self, users):
        if not getattr(self, "_warned_saturated", False):
            self._warned_saturated = True
            self.logger.warning(
                f"{len(sorted_unique(users))} user(s) liked every item of the {self.phase} split: they have no "
                "true negative, so their negatives are drawn among their own likes."
            )


class DeviceNegativeSampler:
    """One phase of a ``ColdStartSampler`` as tensors on a device: the same negatives' distribution (dislikes,
    uniform among the split's items the user has not liked, popularity with rejection), drawn by torch on
    that device from its own generator, so that a training loop cuts its batches without leaving the device
    (``data.device_batches``)."""

    def __init__(self, sampler, device, generator):
        phase, self.device, self.generator = sampler.phase, torch.device(device), generator
        likes, dislikes = sampler._likes[phase], sampler._dislikes[phase]
        pool = sampler._pools[phase]
        self.pool_size = len(pool)

        def put(array):
            return torch.as_tensor(np.ascontiguousarray(array)).to(self.device)

        self.pool = put(pool)
        self.like_counts, self.like_starts = put(likes.counts), put(likes.indptr[:-1])
        self.shifted_keys, self.liked_keys = put(likes.shifted_keys), put(likes.liked_keys)
        # users who liked every item of the split: known up front, so no per-batch check (and no device sync)
        self.saturated = put(likes.counts >= self.pool_size)
        self.dislikes = None
        if dislikes is not None and len(dislikes.values):
            self.dislikes = (put(dislikes.counts), put(dislikes.indptr[:-1]), put(dislikes.values))
        cdf = sampler._pop_cdf.get(phase) if sampler.distribution == "popularity" else None
        self.popularity_cdf = None if cdf is None else put(cdf)
        saturated = likes.counts >= self.pool_size
        # every draw is an item its user has not liked: uniform free draws, popularity draws that clash fall
        # back to them; only a user who liked every item draws any (a dislike may also be a like: not assumed)
        self._any_saturated = bool(saturated.any())  # none (the usual case): no per-draw check
        self._excludes_likes = not self._any_saturated and self.dislikes is None
        if dislikes is not None:
            saturated &= dislikes.counts == 0
        if saturated.any():
            sampler._warn_saturated(np.flatnonzero(saturated))

    @property
    def excludes_likes(self):
        """True when ``sample`` never returns an item its user liked (a dynamic sampler's scoring may then skip
        the estimation constraint, which only changes the score of a like)."""
        return self._excludes_likes

    def uniforms(self, n):
        return torch.rand(n, generator=self.generator, device=self.device, dtype=torch.float64)

    def sample(self, users, groups=None):
        """One negative item (internal id) per entry of ``users`` (a long tensor on the device). ``groups``:
        (the distinct users, sorted; each entry's index among them), when the caller has them: the search for
        the free positions then reads those users' likes alone (``free_positions``)."""
        result = self.pool.index_select(0, self.free_positions(users, self.uniforms(len(users)), groups))
        if self.popularity_cdf is not None:
            result = self._popularity_draw(users, result)
        if self.dislikes is not None:  # users with dislikes in the split draw among them, whatever the distribution
            counts, starts, values = self.dislikes
            user_counts = counts.index_select(0, users)
            pick = starts.index_select(0, users) + (self.uniforms(len(users)) * user_counts).long()
            disliked = values.index_select(0, pick.clamp(max=len(values) - 1))
            result = torch.where(user_counts > 0, disliked, result)
        return result

    def free_positions(self, users, uniforms, groups=None):
        """Positions in the pool, exactly uniform among those the user has not liked (as
        ``ColdStartSampler._uniform_free_positions``, from the given uniforms in [0, 1)).

        ``groups`` (distinct users sorted, each entry's index among them): the binary search runs in those users'
        shifted keys alone, gathered once (a training batch's few hundred likes instead of all of them: measured
        about 5 times faster for a batch's 2,660 draws among citeulike-t's 81k likes); the same positions."""
        free = self.pool_size - self.like_counts.index_select(0, users)
        saturated = self.saturated.index_select(0, users) if self._any_saturated else None
        r = (uniforms * (free if saturated is None else torch.where(saturated, self.pool_size, free))).long()
        keys = users * (self.pool_size + 1) + r
        if groups is None:
            below = torch.searchsorted(self.shifted_keys, keys, right=True).sub_(self.like_starts.index_select(0, users))
        else:
            distinct, index = groups
            local, local_starts = self._keys_of(distinct)
            below = torch.searchsorted(local, keys, right=True).sub_(local_starts.index_select(0, index))
        return r.add_(below) if saturated is None else torch.where(saturated, r, r + below)

    def _keys_of(self, users):
        """The shifted keys of ``users`` (distinct, sorted: the result is sorted) and where each user's begin."""
        starts, counts = self.like_starts.index_select(0, users), self.like_counts.index_select(0, users)
        ends = torch.cumsum(counts, 0)
        total = int(ends[-1]) if len(ends) else 0
        local_starts = ends - counts
        positions = torch.repeat_interleave(starts - local_starts, counts, output_size=total)
        positions += torch.arange(total, device=positions.device)
        return self.shifted_keys.index_select(0, positions), local_starts

    def _popularity_draw(self, users, result):
        """Split popularity with rejection of liked items for a few rounds; rows still clashing keep their
        uniform free draw (``result``), as the numpy sampler does."""
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
