"""The live service's state: a model artifact plus what the store learned since (new items, likes), and the
scores of the whole catalogue for one user with those likes counted at once (docs/serve.md, "Likes that count at
once"). Each worker holds a ``LiveState`` that applies the store's changes before every request, so a write acked
by any worker is in every worker's next answer; snapshots are immutable and swapped whole.
"""

import logging
import threading
from collections import defaultdict
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np
import scipy.sparse as sp
import torch

from recbole_fbsm.config.schema import setting
from recbole_fbsm.errors import ColdStartError
from recbole_fbsm.evaluation.audience import calibration
from recbole_fbsm.evaluation.collector import TieBreakingCollector
from recbole_fbsm.models.contract import FeatureSimilarity, ItemNeighbourhood
from recbole_fbsm.serve.audience import audience_alpha
from recbole_fbsm.serve.loading import load_model
from recbole_fbsm.serve.neighbours import NeighbourScorer
from recbole_fbsm.serve.new_items import NewItems, new_items_from_cells
from recbole_fbsm.serve.recommend import top_lists
from recbole_fbsm.serve.store import ITEM, LIKE, RELOAD, by_kind

log = logging.getLogger("recbole_fbsm.serve.http")

SCOPES = ("all", "new", "warm")


class Conflict(Exception):
    """A request the model cannot answer for this user (409): the message names the reason."""


class ModelView:
    """One loaded artifact and what scoring needs of it, built once per (re)load."""

    def __init__(self, served):
        self.served = served
        model = served.model
        inputs = served.dataset.model_inputs
        self.likes = inputs.likes.tocsr()  # users x items: training likes
        self.matrix = served.features.matrix.tocsr().astype(np.float32)  # every dataset item's weighted row
        self.training_items = np.asarray(served.training_items(), dtype=np.int64)
        self.warm_matrix = self.matrix[self.training_items]
        self.item_tokens = np.asarray(served.dataset.field2id_token[served.iid_field], dtype=object)
        self.warm_ids = self.item_tokens[self.training_items]
        self.profile = isinstance(model, FeatureSimilarity)
        self.per_user_weights, self.factors, self.neighbours = False, None, None
        if self.profile:
            weights, factors = model.diagonal_weights(torch.tensor([1])), model.low_rank_factors()
            self.per_user_weights = weights.dim() == 2  # UFSM: c_u per user
            self.shared_weights = None if self.per_user_weights else weights.detach().cpu().numpy().astype(np.float32)
            self.factors = None if factors is None else factors.detach().cpu().numpy().astype(np.float32)
        elif isinstance(model, ItemNeighbourhood) and model.linear:  # x_i . f_u: a profile with W_u = I
            self.profile, self.shared_weights = True, np.ones(self.matrix.shape[1], dtype=np.float32)
        elif isinstance(model, ItemNeighbourhood):
            self.neighbours = NeighbourScorer(model, self.training_items)
        self.collector = TieBreakingCollector(served.config)  # evaluation's top-k, its ties broken by seed
        self.hybrid = str(setting(served.config, "cold_start_scenario")).lower() == "hybrid"
        self.warm_candidates = torch.as_tensor(self.training_items, device=served.device)

    @property
    def name(self):
        return self.served.model_name

    def dataset_user(self, user):
        """The internal id of a dataset user, else 0."""
        return int(self.served.dataset.field2token_id[self.served.uid_field].get(user, 0))

    def dataset_item(self, item):
        return int(self.served.dataset.field2token_id[self.served.iid_field].get(item, 0))


@dataclass(frozen=True)
class Snapshot:
    """What one request scores against: never changed once built."""

    view: ModelView
    catalogue: NewItems  # the stored new items, weighted by this model
    likes: dict  # user -> tuple of stored liked item ids, oldest first
    seq: int  # the last store change applied
    skipped: dict = field(default_factory=dict)  # stored item id -> why this model cannot serve it

    @cached_property
    def position(self):
        """New item id -> row of ``catalogue``."""
        return {token: k for k, token in enumerate(self.catalogue.tokens)}

    def knows_item(self, item):
        return item in self.position or self.view.dataset_item(item) != 0

    def knows_user(self, user):
        return self.view.dataset_user(user) != 0 or bool(self.likes.get(user))


def weigh_items(served, stored):
    """(NewItems of the ``StoredItem``s this model can serve, {id: why not} of the others)."""
    known = served.dataset.field2token_id[served.iid_field]
    skipped = {
        s.item_id: "now an item of the model's dataset (retrained on it)" for s in stored if known.get(s.item_id, 0)
    }
    parts = []
    for group in by_kind([s for s in stored if s.item_id not in skipped]):
        try:
            parts.append(weigh_group(served, group, "store"))
        except ColdStartError as error:  # never one bad item stopping every answer: logged, left out
            log.error("store items left out: %s", error)
            skipped.update({s.item_id: str(error) for s in group})
    return joined(parts, served.features.n_features), skipped


def weigh_group(served, group, source):
    """NewItems of ``group`` (``StoredItem``s of one kind), without a warning: the caller reports its tokens."""
    cells = {name: [s.cells.get(name, "") for s in group] for name in served.fields}
    return new_items_from_cells(served, [s.item_id for s in group], cells, group[0].raw, source=source, warn=False)


def joined(parts, n_features):
    """One catalogue of the items of ``parts`` (``NewItems``), in order."""
    empty = sp.csr_matrix((0, n_features), dtype=np.float32)
    return NewItems(
        "catalogue",
        [token for part in parts for token in part.tokens],
        sp.vstack([empty, *(part.counts for part in parts)], format="csr"),
        sp.vstack([empty, *(part.matrix.astype(np.float32) for part in parts)], format="csr"),
    )


def without_items(catalogue, gone):
    keep = [k for k, token in enumerate(catalogue.tokens) if token not in gone]
    return NewItems("catalogue", [catalogue.tokens[k] for k in keep], catalogue.counts[keep], catalogue.matrix[keep])


class LiveState:
    """A model and the store, kept in step: ``current()`` applies the store's new changes and gives the snapshot."""

    def __init__(self, model_path, store, device="cpu", served=None, data_path=None):
        self.model_path, self.store, self.device = model_path, store, device
        self.data_path = data_path  # a checkpoint's, for every (re)load
        self._lock, self._reload_lock = threading.Lock(), threading.Lock()
        self._reload_seq = store.last_change()  # reload requests up to here are in this model
        self._snapshot = self._full_snapshot(served or self.load())

    def load(self):
        """The model at ``model_path``, read again."""
        return load_model(self.model_path, self.device, self.data_path)

    def _full_snapshot(self, served):
        seq = self.store.last_change()  # first: changes after it are applied again (idempotent), none missed
        catalogue, skipped = weigh_items(served, self.store.items())
        likes = defaultdict(list)
        for user, item in self.store.all_likes():
            likes[user].append(item)
        return Snapshot(ModelView(served), catalogue, {u: tuple(items) for u, items in likes.items()}, seq, skipped)

    def current(self):
        """The snapshot with every change the store acknowledged so far."""
        with self._lock:
            changes = self.store.changes_since(self._snapshot.seq)
            if changes:
                self._snapshot = self._apply(self._snapshot, changes)
            return self._snapshot

    def _apply(self, snapshot, changes):
        items = {item for _, kind, _, item in changes if kind == ITEM}
        users = {user for _, kind, user, _ in changes if kind == LIKE}
        reload = any(kind == RELOAD and seq > self._reload_seq for seq, kind, _, _ in changes)
        catalogue, skipped = snapshot.catalogue, snapshot.skipped
        if items:
            added, newly_skipped = weigh_items(snapshot.view.served, self.store.items(items))
            catalogue = joined([without_items(catalogue, items), added], catalogue.matrix.shape[1])
            skipped = {item: why for item, why in skipped.items() if item not in items} | newly_skipped
        likes = snapshot.likes
        if users:  # a user's likes as the store has them now; a user without any left goes
            changed = {user: tuple(self.store.likes(user)) for user in users}
            likes = {user: liked for user, liked in {**likes, **changed}.items() if liked}
        if reload:  # another worker asked for it: loaded in a thread, the old model answering meanwhile
            self._reload_seq = changes[-1][0]
            self.in_background(lambda: self._swap_in(self.load(), ", as another worker asked"))
        return Snapshot(snapshot.view, catalogue, likes, changes[-1][0], skipped)

    def reload(self):
        """Read the artifact again (a retrained one at the same path) and swap it in; a file that does not load
        raises and leaves the old model serving. Other workers follow through the store's change log."""
        served = self.load()
        seq = self.store.request_reload()
        with self._lock:
            self._reload_seq = max(self._reload_seq, seq)
        return self._swap_in(served)

    def _swap_in(self, served, why=""):
        snapshot = self._full_snapshot(served)
        with self._lock:
            self._snapshot = snapshot
        log.warning("reloaded model %s (%s)%s", self.model_path.rsplit("/", 1)[-1], served.model_name, why)
        return snapshot

    def in_background(self, work):
        """Run ``work`` (a reload) in a daemon thread, one at a time; a failure is logged (one line, no traceback),
        and the old model goes on serving."""

        def run():
            with self._reload_lock:
                try:
                    work()
                except Exception as error:
                    log.error("reload failed, the old model goes on serving: %s", error)

        threading.Thread(target=run, daemon=True).start()


def training_likes(view, user):
    """Dataset item ids ``user`` liked in training (none for a user the dataset does not know: row 0, padding)."""
    return view.likes[view.dataset_user(user)].indices


def liked_items(snapshot, user):
    """(dataset item ids liked in training or since, new-item rows liked since) of ``user``."""
    view = snapshot.view
    stored = snapshot.likes.get(user, ())
    dataset = np.asarray([view.dataset_item(i) for i in stored], dtype=np.int64)
    dataset = np.union1d(training_likes(view, user), dataset[dataset > 0])
    new_rows = np.asarray([snapshot.position[i] for i in stored if i in snapshot.position], dtype=np.int64)
    return dataset, new_rows


def trained_user(view, user, why):
    """The internal id of ``user``; a Conflict when the model, which ``why``, was not trained on them."""
    internal = view.dataset_user(user)
    if not internal:
        raise Conflict(
            f"user {user!r} is not a user the {view.name} model was trained on, and {view.name} {why}: their "
            "likes are stored and count once a model retrained on them is loaded (serve export-likes, then "
            "POST /admin/reload)"
        )
    return internal


def user_weights(snapshot, user, dataset_likes, new_rows):
    """w_u = c_u * f_u + V (V^T f_u) (dense, features), f_u the sum of the liked items' rows."""
    view = snapshot.view
    f_u = view.matrix[dataset_likes].sum(axis=0) + snapshot.catalogue.matrix[new_rows].sum(axis=0)
    f_u = np.asarray(f_u, dtype=np.float32).ravel()
    if view.per_user_weights:
        internal = trained_user(view, user, "learns each user's feature weights (c_u)")
        weights = view.served.model.diagonal_weights(torch.tensor([internal])).detach().cpu().numpy()[0]
    else:
        weights = view.shared_weights
    w = weights * f_u
    if view.factors is not None:
        w = w + view.factors @ (view.factors.T @ f_u)
    return w


def two_tower_scores(view, internal, kind, matrix):
    """A two-tower model's scores of one block for one user: new items by their content rows, and in the hybrid
    scenario the training items as its evaluation scores them, so that both compete as they did in evaluation."""
    model, device = view.served.model, view.served.device
    users = torch.tensor([internal], device=device)
    if not matrix.shape[0]:
        return np.zeros(0, dtype=np.float32)
    if kind == "warm" and view.hybrid:  # one tensor per view: the model caches its candidates' vectors
        scores = model.score_candidates({model.USER_ID: users}, view.warm_candidates)
    else:
        scores = model.score_feature_rows(users, view.served.feature_rows(matrix))
    return scores[0].detach().cpu().numpy()


def score_candidates(snapshot, user, scope):
    """(scores, eligible, ids, note): the scores of every item of ``scope`` for ``user`` (training items first,
    then the new items), whether each may be recommended (not liked), and their ids."""
    view, catalogue = snapshot.view, snapshot.catalogue
    dataset_likes, new_rows = liked_items(snapshot, user)
    blocks = []  # (kind, item rows, ids, eligible)
    if scope in ("all", "warm"):
        blocks.append(("warm", view.warm_matrix, view.warm_ids, ~np.isin(view.training_items, dataset_likes)))
    if scope in ("all", "new"):
        eligible = ~np.isin(np.arange(len(catalogue.tokens)), new_rows)
        blocks.append(("new", catalogue.matrix, np.asarray(catalogue.tokens, dtype=object), eligible))
    note = None
    if view.profile:
        w = user_weights(snapshot, user, dataset_likes, new_rows)
        scores = [matrix @ w for _, matrix, _, _ in blocks]
    elif view.neighbours is not None:  # ItemKNNCBF: the user's likes, stored ones included, are the neighbours
        model = view.served.model
        training = model.neighbour_index[dataset_likes] >= 0
        others = sp.vstack([model.X[dataset_likes[~training]], catalogue.matrix[new_rows]], format="csr")
        scores = [
            view.neighbours.scores(kind, matrix, dataset_likes[training], others) for kind, matrix, _, _ in blocks
        ]
    else:
        internal = trained_user(view, user, "scores a user by the embedding learned in training")
        scores = [two_tower_scores(view, internal, kind, matrix) for kind, matrix, _, _ in blocks]
        if snapshot.likes.get(user):
            note = (
                f"{view.name} scores a user by the embedding learned in training: the likes stored since are "
                "left out of the list, and change the scores once a retrained model is loaded"
            )
    scores = np.concatenate(scores).astype(np.float32, copy=False)
    eligible, ids = (np.concatenate([block[k] for block in blocks]) for k in (3, 2))
    return scores, eligible, ids, note


def seeded_top(view, scores, eligible, k, row=0):
    """Positions of the ``k`` best ``eligible`` scores, best first, ranked by evaluation's top-k (ties by a seeded
    hash of (``row``, position), never by position, which follows popularity); a non-finite score ranks last."""
    candidates = np.flatnonzero(eligible)
    finite = torch.as_tensor(np.nan_to_num(scores[candidates], nan=-np.inf, posinf=-np.inf))
    best = view.collector.random_tie_topk(finite[None], int(k), torch.tensor([row]), torch.as_tensor(candidates))
    return candidates[best[0].numpy()]


def top_items(snapshot, user, scope="all", top=10):
    """[(item id, score)] of ``user``'s ``top`` best items of ``scope``, and the note of ``score_candidates``."""
    scores, eligible, ids, note = score_candidates(snapshot, user, scope)
    return [
        (str(ids[j]), float(scores[j]))
        for j in seeded_top(snapshot.view, scores, eligible, top, snapshot.view.dataset_user(user))
    ], note


def like_matrix_of(snapshot):
    """(users x (dataset items + catalogue rows) binary likes, training ones and stored ones, the users' ids, and
    their internal ids (0: unknown at training)): the users with at least one like, dataset users first."""
    view = snapshot.view
    n_items, n_users = view.likes.shape[1], view.likes.shape[0]
    stored = [(user, item) for user, items in snapshot.likes.items() for item in items]
    newcomers = sorted({user for user, _ in stored if not view.dataset_user(user)})
    row_of = {user: n_users + k for k, user in enumerate(newcomers)}
    rows = np.asarray([view.dataset_user(user) or row_of[user] for user, _ in stored], dtype=np.int64)
    columns = np.asarray(
        [view.dataset_item(item) or n_items + snapshot.position.get(item, -1 - n_items) for _, item in stored],
        dtype=np.int64,
    )
    known, training = columns >= 0, view.likes.tocoo()  # a like of an item no longer in the catalogue: nowhere
    likes = sp.csr_matrix(
        (np.ones(training.nnz + known.sum()), (np.r_[training.row, rows[known]], np.r_[training.col, columns[known]])),
        shape=(n_users + len(newcomers), n_items + len(snapshot.catalogue.tokens)),
    )
    likes.data[:] = 1.0  # a like stored again for a training like counts once, as in ``liked_items``
    users = np.flatnonzero(np.diff(likes.indptr))
    dataset_users = view.served.dataset.field2id_token[view.served.uid_field]
    tokens = np.concatenate([dataset_users, np.asarray(newcomers, dtype=object)])
    return likes[users], tokens[users], np.where(users < n_users, users, 0)


def item_users(snapshot, item, top=10):
    """[(user id, score)] of the ``top`` users a catalogue item should go to: the scores ``top_items`` gives it,
    for all users at once (one sparse product), each divided by |I_u|^alpha (``serve.audience``: a raw sum over
    a user's likes favours the heaviest users), users who like it left out. Two-tower models score by the
    embeddings learned in training: the training users with a like, by ``serve recommend``'s raw score."""
    view = snapshot.view
    model = view.served.model
    if not view.profile and view.neighbours is None:
        users = torch.as_tensor(np.flatnonzero(np.diff(view.likes.indptr)), device=view.served.device)
        row = snapshot.catalogue.matrix[[snapshot.position[item]]]
        ids, scores = top_lists(view.served, users, row, top, True, view.collector.tie_seed)
        return list(zip(view.served.user_tokens(ids[0]), scores[0].tolist()))
    likes, tokens, internal = like_matrix_of(snapshot)
    x = snapshot.catalogue.matrix[snapshot.position[item]]
    every_row = sp.vstack([view.matrix, snapshot.catalogue.matrix], format="csr")
    if view.neighbours is not None:  # sim_k(x, j) of every item j, as a liked neighbour (serve/neighbours.py)
        scorer = view.neighbours
        similar = model.row_similarities(x, every_row)[0]
        if scorer.k is not None:
            kept, floor = scorer._kept(x)
            similar = np.where(similar >= floor[0], similar, 0.0)
            similar[model.neighbours] = kept.toarray()[0]
        scores = likes @ similar
    else:
        x = np.asarray(x.todense()).ravel()
        if view.per_user_weights:  # c_u = mixture[u] @ basis, learned for the users known at training only
            keep = internal > 0
            likes, tokens, internal = likes[keep], tokens[keep], internal[keep]
            basis, mixture = model.diagonal_parts(torch.as_tensor(internal, dtype=torch.long))
            basis, mixture = basis.detach().cpu().numpy(), mixture.detach().cpu().numpy()
        else:
            basis, mixture = view.shared_weights[None, :], np.ones((likes.shape[0], 1), dtype=np.float32)
        per_function = likes @ (every_row @ (basis * x).T)  # users x l
        scores = (per_function * mixture).sum(axis=1)
        if view.factors is not None:
            scores = scores + likes @ (every_row @ (view.factors @ (view.factors.T @ x)))
    alpha = audience_alpha(view.served)
    scores = np.asarray(scores, dtype=np.float64).ravel() * calibration(np.diff(likes.indptr), alpha)
    liked = np.asarray(likes[:, view.likes.shape[1] + snapshot.position[item]].todense()).ravel() != 0
    return [(str(tokens[j]), float(scores[j])) for j in seeded_top(view, scores, ~liked, top, snapshot.position[item])]
