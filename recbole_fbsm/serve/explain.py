"""Why a user gets an item: the score f_i^T W_u g_u broken into feature pairs and into the user's liked items,
each adding up to the score (docs/serve.md, "explain"); only nnz(f_i) x nnz(g_u) pairs are formed."""

from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch
from recbole.data.interaction import Interaction

from recbole_fbsm.errors import ColdStartError
from recbole_fbsm.models.contract import FeatureSimilarity, ItemNeighbourhood
from recbole_fbsm.serve.loading import load_model
from recbole_fbsm.serve.new_items import NewItems, read_new_items

FEATURE_COLUMNS = ["part", "item_feature", "user_feature", "item_value", "user_value", "weight", "contribution"]


@dataclass
class Explanation:
    model: str
    user: str
    item: str
    new_item: bool  # True: the item comes from the new-item file
    estimation_constraint: bool  # True: the item is one of the user's training likes, left out of the profile
    model_score: float  # the model's own score (predict, or the new-item scorer)
    features: pd.DataFrame  # FEATURE_COLUMNS, by decreasing |contribution|
    items: pd.DataFrame  # item_id, similarity: the user's training likes j != i, by decreasing similarity
    part_names: tuple = ("diagonal",)  # the parts of this model's similarity ("diagonal", "low_rank" for FBSM)

    def part(self, name):
        """The feature rows of one part (possibly none)."""
        return self.features[self.features["part"] == name]

    @property
    def score(self):
        """Sum of the feature contributions (equal to the model's score)."""
        return float(self.features["contribution"].sum())

    def parts(self):
        """{part: sum of its contributions} (diagonal, and low_rank for FBSM)."""
        return {name: float(self.part(name)["contribution"].sum()) for name in self.part_names}

    def to_table(self, top=None):
        """One flat table (CSV): feature rows, then item rows, each ``top`` at most, plus a row per part
        for the rest, so the contributions shown always add up to the score."""
        rows = [{"section": "score", "contribution": self.model_score}]
        items = self.items.rename(columns={"item_id": "item_feature", "similarity": "contribution"})
        groups = [("feature", part, self.part(part), "pairs") for part in self.part_names]
        for section, part, group, what in groups + [("item", None, items, "liked items")]:
            shown = _head(group, top)
            rows += [{"section": section, **row} for row in shown.to_dict("records")]
            if len(shown) < len(group):
                rest = group["contribution"].iloc[len(shown) :].sum()
                label = f"({len(group) - len(shown)} other {what})"
                rows.append({"section": section, "part": part, "item_feature": label, "contribution": rest})
        return pd.DataFrame(rows, columns=["section"] + FEATURE_COLUMNS)

    def to_dict(self, top=None):
        groups = {part: self.part(part) for part in self.part_names}
        parts = {
            part: {
                "total": float(group["contribution"].sum()),
                "pairs": len(group),
                "top": _head(group, top).drop(columns=["part"]).to_dict("records"),
            }
            for part, group in groups.items()
        }
        return {
            "model": self.model,
            "user": self.user,
            "item": self.item,
            "new_item": self.new_item,
            "estimation_constraint": self.estimation_constraint,
            "score": self.model_score,
            "sum_of_contributions": self.score,
            "features": parts,
            "items": {
                "total": float(self.items["similarity"].sum()),
                "liked_items": len(self.items),
                "top": _head(self.items, top).to_dict("records"),
            },
        }


def _head(frame, top):
    return frame if top is None else frame.head(int(top))


# longer than 60 lines: the two decompositions (feature pairs, liked items) share their inputs; the docstring names both
@torch.no_grad()
def explain(served, user, item, new_items=None, raw_text=None):
    """Explain the score of ``item`` (a dataset item's id, or a new item of ``new_items``: a
    ``NewItems``, an ``.item`` path or a CSV/TSV of raw text, see ``read_new_items`` for ``raw_text``)
    for ``user`` (external id). Returns an ``Explanation``."""
    served = load_model(served)
    if new_items is not None and not isinstance(new_items, NewItems):
        new_items = read_new_items(served, new_items, raw_text=raw_text)
    model, device = served.model, served.device
    if not isinstance(model, FeatureSimilarity):
        kind = (
            "a sum of item-to-item similarities to the user's likes"
            if isinstance(model, ItemNeighbourhood)
            else "a dot product of neural towers"
        )
        raise ColdStartError(
            f"model {served.checkpoint}: explain splits a feature-similarity score (FBSM, UFSM, CoSim) into "
            f"feature pairs and liked items; a {served.model_name} score is {kind}."
        )
    u = served.user_ids([user])
    item = str(item)
    new_item = not served.dataset.field2token_id[served.iid_field].get(item, 0)
    if new_item:
        if new_items is None:
            raise ColdStartError(
                f"item {item!r} is not an item of dataset {served.dataset.dataset_name!r}; for a new item give "
                "the new-item file (--new-items FILE)."
            )
        row = new_items.matrix[[new_items.index(item)]]
        item_cols = torch.as_tensor(row.indices, dtype=torch.long, device=device)
        item_vals = torch.as_tensor(row.data, dtype=torch.float64, device=device)
        i, in_profile = None, False
        model_score = float(model.score_feature_rows(u, served.feature_rows(row))[0, 0])
    else:
        i = served.item_ids([item])
        _, item_cols, item_vals, _ = model.F.gather_rows(i)
        item_vals = item_vals.double()
        in_profile = bool(model.R.contains(u, i)[0])
        interaction = Interaction({served.uid_field: u, served.iid_field: i})
        model_score = float(model.predict(interaction.to(device))[0])

    profile = model.F_U.dense_rows(u)[0].double()
    if in_profile:  # estimation constraint: the item's own features leave the profile
        profile = profile.index_add(0, item_cols, -item_vals)
    weights = model.diagonal_weights(u).reshape(-1).double()
    names = np.asarray(served.features.names, dtype=object)
    user_vals = profile[item_cols]
    shared = user_vals != 0
    cols = item_cols[shared]
    frames = [_pairs("diagonal", names, cols, cols, item_vals[shared], user_vals[shared], weights[cols])]
    factors = model.low_rank_factors()
    if factors is not None:  # every (feature of the item, feature of the profile) pair: f_ip (v_p . v_q) g_uq
        V, user_cols = factors.double(), torch.nonzero(profile).squeeze(1)
        p, q = (index.reshape(-1) for index in torch.meshgrid(item_cols, user_cols, indexing="ij"))
        pair_weights = (V[item_cols] @ V[user_cols].T).reshape(-1)
        f_p = item_vals.repeat_interleave(len(user_cols))
        frames.append(_pairs("low_rank", names, p, q, f_p, profile[q], pair_weights))
    features = pd.concat(frames, ignore_index=True).sort_values(
        "contribution", key=abs, ascending=False, kind="stable", ignore_index=True
    )
    items = _liked_items(served, u, i, item_cols, item_vals, weights, factors)
    part_names = ("diagonal",) if factors is None else ("diagonal", "low_rank")
    return Explanation(
        served.model_name, str(user), item, new_item, in_profile, model_score, features, items, part_names
    )


def _pairs(part, names, item_cols, user_cols, item_vals, user_vals, weights):
    """One row per feature pair (tensors of one length): contribution = f_ip * weight * g_uq."""
    return pd.DataFrame(
        {
            "part": part,
            "item_feature": names[item_cols.cpu().numpy()],
            "user_feature": names[user_cols.cpu().numpy()],
            "item_value": item_vals.cpu().numpy(),
            "user_value": user_vals.cpu().numpy(),
            "weight": weights.cpu().numpy(),
            "contribution": (item_vals * weights * user_vals).cpu().numpy(),
        }
    )


def _liked_items(served, u, i, item_cols, item_vals, weights, factors):
    """sim_u(i, j) = f_i^T W_u f_j for each training like j != i of the user, vectorised."""
    model = served.model
    _, liked, _, _ = model.R.gather_rows(u)
    if i is not None:
        liked = liked[liked != i[0]]
    item_dense = torch.zeros(model.n_features, dtype=torch.float64, device=liked.device)
    item_dense = item_dense.index_add(0, item_cols, item_vals)
    owner, cols, values, _ = model.F.gather_rows(liked)
    values = values.double()
    similarity = torch.zeros(len(liked), dtype=torch.float64, device=liked.device)
    similarity = similarity.index_add(0, owner, values * weights[cols] * item_dense[cols])
    if factors is not None:
        factors = factors.double()
        liked_factors = torch.zeros(len(liked), factors.shape[1], dtype=torch.float64, device=liked.device)
        liked_factors = liked_factors.index_add(0, owner, values[:, None] * factors[cols])
        similarity = similarity + liked_factors @ (item_vals @ factors[item_cols])
    order = torch.argsort(similarity, descending=True, stable=True)
    return pd.DataFrame(
        {"item_id": served.item_tokens(liked[order].cpu().numpy()), "similarity": similarity[order].cpu().numpy()}
    )
