"""Fair tie breaking for RecBole's top-k collection.

``torch.topk`` breaks ties by the lowest index, and RecBole's internal item ids follow first appearance in the
interaction file, which correlates with popularity: a model that scores all cold items alike (Pop, ItemKNN, an
empty profile) would beat Random for that reason alone. Here tied items of each user are ordered by a hash of
(seed, user, item): the same order whatever the batch size, the metrics or the cut-offs, and no random number
drawn that training would otherwise have used."""

import functools

import torch
from recbole.evaluator import Collector

from recbole_fbsm.runtime import distributed

_TOPK_KEYS = ("rec.items", "rec.topk")
# what RecBole's Collector accumulates batch by batch, one row per evaluated user (the rest is per model or data)
_PER_USER_KEYS = ("rec.topk", "rec.meanrank", "rec.score", "rec.items", "data.label")
_MASK = 0xFFFFFFFF


def _mul32(x, constant):
    """(x * constant) mod 2^32 for int64 tensors holding 32-bit values, without int64 overflow."""
    low, high = constant & 0xFFFF, constant >> 16
    return (x * low + (((x * high) & 0xFFFF) << 16)) & _MASK


def _mix32(x):
    """MurmurHash3's 32-bit finaliser: every input bit changes about half of the output bits."""
    x = x ^ (x >> 16)
    x = _mul32(x, 0x85EBCA6B)
    x = x ^ (x >> 13)
    x = _mul32(x, 0xC2B2AE35)
    return x ^ (x >> 16)


def tie_keys(seed, users, items):
    """Keys in [0, 1), one per (user, item) pair (``users`` and ``items`` broadcast together): a hash
    of (seed, user id, item id), so each user gets an independent, reproducible order of the items."""
    hashed_users = _mix32((users.long() & _MASK) ^ _salt(int(seed)))
    hashed_items = _mix32(_mul32(items.long() & _MASK, 0x9E3779B1) ^ 0x5BD1E995)
    return _mix32(hashed_users ^ hashed_items).to(torch.float64) / float(1 << 32)


@functools.cache
def _salt(seed):
    return int(_mix32(torch.tensor(seed & _MASK, dtype=torch.int64)))


def random_tie_topk(scores, k, seed, users=None, items=None):
    """Top-k column indices per row, ordered by score, ties ordered by ``tie_keys(seed, ...)`` (random-looking,
    independent per row, reproducible): evaluation's, serving's and the audience's one top-k. ``users``: the
    row's user ids (default: the row number); ``items``: each column's item id (default: the column number).

    Exact and cheaper than sorting keys for every row: one ``topk`` of k + 1 columns shows which rows
    have items outside the first k tied with the k-th score. Only those rows get keys over all their
    columns (the items tied at the k-th score compete for the remaining places by key); every other
    row's top-k set is already unique. The k chosen items are then ordered by score, equal scores by key;
    rows whose chosen scores are all distinct keep ``topk``'s order (the same order) without keys.
    """
    n_rows, n_cols = scores.shape
    device = scores.device
    users = torch.arange(n_rows, device=device) if users is None else users.to(device)
    items = torch.arange(n_cols, device=device) if items is None else items.to(device)
    k = min(k, n_cols)
    top = torch.topk(scores, min(k + 1, n_cols), dim=1)
    chosen = top.indices[:, :k]
    # rows whose k chosen scores, in topk's descending order, are not strictly decreasing (a tie, or a
    # NaN): only their order needs the keys; every other row's order is its scores' alone
    unsorted = ~(top.values[:, 1:k] < top.values[:, : k - 1]).all(dim=1)
    if n_cols > k:
        threshold = top.values[:, k - 1 : k]
        rows = torch.nonzero(top.values[:, k] == threshold[:, 0]).squeeze(1)
        if len(rows):
            tied, level = scores[rows], threshold[rows]
            keys = tie_keys(seed, users[rows][:, None], items[None, :])
            selection_key = torch.where(tied > level, 2.0, torch.where(tied == level, keys, -1.0))
            chosen = chosen.clone()
            chosen[rows] = torch.topk(selection_key, k, dim=1).indices
            unsorted[rows] = True
    rows = torch.nonzero(unsorted).squeeze(1)
    if len(rows) == 0:
        return chosen.contiguous()
    chosen = chosen.clone()
    picked = chosen[rows]
    keys = tie_keys(seed, users[rows][:, None], items[picked])
    picked = picked.gather(1, keys.argsort(dim=1, descending=True))
    by_score = scores[rows].gather(1, picked).argsort(dim=1, descending=True, stable=True)
    chosen[rows] = picked.gather(1, by_score)
    return chosen


class _RegisterWithout:
    def __init__(self, register, keys):
        self._register, self._keys = register, set(keys)

    def need(self, key):
        return key not in self._keys and self._register.need(key)


class TieBreakingCollector(Collector):
    """RecBole ``Collector`` whose top-k orders tied items by ``tie_keys(seed, user, item)``."""

    def __init__(self, config):
        super().__init__(config)
        self.tie_seed = config["seed"]
        self.uid_field = config["USER_ID_FIELD"]
        self.candidates = None  # item id of each score column when scores cover candidates only
        self.group_collectors = {}  # hybrid scenario: {group name: (collector, column mask)} (``set_groups``)

    def get_data_struct(self):
        """RecBole's collected rows; in a data-parallel run every rank's block of users, gathered in rank
        order: the rows (and so the metrics) of one process evaluating all users."""
        if distributed.world()[1] > 1:
            held = {key: self.data_struct[key] for key in _PER_USER_KEYS if key in self.data_struct}
            for key, rows in distributed.gather_rows(held).items():
                self.data_struct.set(key, rows)
        return super().get_data_struct()

    def set_groups(self, masks):
        """Also collect each group of candidate columns on its own (the hybrid scenario's cold and warm items):
        ``masks`` is {name: bool tensor over the candidate columns}, or None for none. A group's collector sees its
        columns only and the positives among them; a user without a positive there is left out of its mean."""
        self.group_collectors = {}
        for name, mask in (masks or {}).items():
            child = TieBreakingCollector(self.config)
            for key, value in self.data_struct._data_dict.items():  # data.* (item counts): collected once, shared
                if key.startswith("data."):
                    child.data_struct.set(key, value)
            columns = torch.nonzero(mask).squeeze(1)
            position = torch.full((len(mask),), -1, dtype=torch.long, device=mask.device)
            position[columns] = torch.arange(len(columns), device=mask.device)
            child.candidates = self.candidates.index_select(0, columns.to(self.candidates.device))
            self.group_collectors[name] = (child, columns, position)

    def group_structs(self):
        """{group name: its collected rows}, as ``get_data_struct`` (which they follow, rows reset)."""
        return {name: child.get_data_struct() for name, (child, _, _) in self.group_collectors.items()}

    def _collect_groups(self, scores, interaction, positive_u, positive_i):
        """Each group's columns of ``scores``, for the rows (users) with at least one positive among them."""
        for child, columns, position in self.group_collectors.values():
            columns, position = columns.to(scores.device), position.to(scores.device)
            column = position.index_select(0, positive_i.to(scores.device).long())
            inside = column >= 0
            rows = torch.unique(positive_u.to(scores.device)[inside])
            row_of = torch.full((len(scores),), -1, dtype=torch.long, device=scores.device)
            row_of[rows] = torch.arange(len(rows), device=scores.device)
            child.eval_batch_collect(
                scores.index_select(0, rows).index_select(1, columns),
                interaction[rows.cpu()],
                row_of.index_select(0, positive_u.to(scores.device)[inside].long()),
                column[inside],
            )

    def random_tie_topk(self, scores, k, users=None, items=None):
        """``random_tie_topk`` with this run's seed."""
        return random_tie_topk(scores, k, self.tie_seed, users, items)

    def eval_batch_collect(self, scores_tensor, interaction, positive_u, positive_i):
        candidates = self.candidates
        shortfall = max(self.topk) - scores_tensor.shape[1]
        if candidates is not None and shortfall > 0:
            # fewer candidates than k: the list ends with never-relevant fillers (RecBole's padding item 0),
            # as it did when the other splits' items scored -inf
            filler = torch.full((len(scores_tensor), shortfall), -torch.inf, device=scores_tensor.device)
            scores_tensor = torch.cat([scores_tensor, filler], dim=1)
            candidates = torch.cat([candidates, candidates.new_zeros(shortfall)])
        if self.register.need("rec.items") or self.register.need("rec.topk"):
            users = interaction[self.uid_field] if self.uid_field in interaction else None
            topk_idx = self.random_tie_topk(scores_tensor, max(self.topk), users, candidates)
            if self.register.need("rec.items"):
                items = topk_idx if candidates is None else candidates[topk_idx]
                self.data_struct.update_tensor("rec.items", items)
            if self.register.need("rec.topk"):
                hits, pos_len = _hits(scores_tensor.shape, topk_idx, positive_u, positive_i)
                self.data_struct.update_tensor("rec.topk", torch.cat((hits, pos_len), dim=1))
        if self.group_collectors:
            self._collect_groups(scores_tensor, interaction, positive_u, positive_i)
        register = self.register
        self.register = _RegisterWithout(register, _TOPK_KEYS)
        try:
            super().eval_batch_collect(scores_tensor, interaction, positive_u, positive_i)
        finally:
            self.register = register


def _hits(shape, topk_idx, positive_u, positive_i):
    """1 where a top-k column is a positive of its row, and each row's number of positives, by binary
    search in the sorted (row, column) keys of the positives: no dense rows x columns matrix."""
    n_rows, n_cols = shape
    device = topk_idx.device
    positive_u, positive_i = positive_u.to(device).long(), positive_i.to(device).long()
    positive_keys = torch.unique(positive_u * n_cols + positive_i)  # sorted, duplicates merged
    pos_len = torch.bincount(torch.div(positive_keys, n_cols, rounding_mode="floor"), minlength=n_rows)
    queries = torch.arange(n_rows, device=device)[:, None] * n_cols + topk_idx
    if len(positive_keys) == 0:
        return torch.zeros_like(queries, dtype=torch.int), pos_len[:, None].int()
    found = torch.searchsorted(positive_keys, queries).clamp_(max=len(positive_keys) - 1)
    return (positive_keys[found] == queries).int(), pos_len[:, None].int()
