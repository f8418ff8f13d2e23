"""FBSM's strongest learned feature interactions (docs/serve.md, "interactions"), without the dense features x
features matrix: v_p . v_q scanned in blocks of rows with a running top-k, memory O(chunk x n_features + k).
"""

import numpy as np
import pandas as pd
import torch

from recbole_fbsm.errors import ColdStartError
from recbole_fbsm.serve.loading import load_model

COLUMNS = ["kind", "rank", "feature_p", "feature_q", "weight", "D_p", "vv", "items_p", "items_q"]
DEFAULT_CELLS = 1 << 22


def top_pairs(factors, k, cells=DEFAULT_CELLS):
    """((values, p, q) of the largest positive, (values, p, q) of the most negative) v_p . v_q over p < q, each
    by decreasing |value| and at most ``k`` long."""
    n, k = factors.shape[0], int(k)
    chunk = max(1, int(cells) // max(n, 1))
    columns = torch.arange(n, device=factors.device)
    best = {sign: (factors.new_empty(0), columns.new_empty(0)) for sign in (+1, -1)}  # values, pair p * n + q
    for start in range(0, n, chunk):
        stop = min(start + chunk, n)
        block = factors[start:stop] @ factors.T  # chunk x n
        upper = columns[None, :] > torch.arange(start, stop, device=factors.device)[:, None]
        for sign, (old_values, old_pairs) in best.items():
            signed = (sign * block).masked_fill(~upper, -torch.inf).reshape(-1)
            values, pairs = torch.topk(signed, min(k, signed.numel()))
            values, pairs = torch.cat([old_values, values]), torch.cat([old_pairs, pairs + start * n])
            keep = torch.topk(values, min(k, len(values))).indices
            best[sign] = (values[keep], pairs[keep])
    result = []
    for sign, (values, pairs) in best.items():
        order = torch.argsort(values, descending=True, stable=True)
        values, pairs = values[order], pairs[order]
        positive = values > 0
        result.append((sign * values[positive], pairs[positive] // n, pairs[positive] % n))
    return tuple(result)


@torch.no_grad()
def strongest_interactions(served, top=20, min_items=0, cells=DEFAULT_CELLS):
    """The ``top`` strongest learned interactions of an FBSM model (``COLUMNS``): the ``positive`` / ``negative``
    off-diagonal v_p . v_q and the ``diagonal_top`` / ``diagonal_bottom`` self-weights D_p + ||v_p||^2, among the
    features of at least ``min_items`` training items (1: leave out those whose weights training never touched)."""
    served = load_model(served)
    model = served.model
    if served.model_name != "FBSM":
        raise ColdStartError(
            f"model {served.checkpoint}: feature interactions are FBSM's (D + V V^T); this is a "
            f"{served.model_name} model, whose similarity has no cross-feature terms."
        )
    if (served.training or {}).get("kept_epoch") == -1:  # V is its random start: its "strongest" pairs, noise
        raise ColdStartError(
            f"model {served.checkpoint}: validation kept FBSM's untrained start (no training epoch beat it), so V "
            f"holds its random initialisation (init_std {served.config['init_std']}) and there are no learned "
            "interactions to list; the model scores with the fixed similarity of its features "
            f"(D = {served.config['init_D']} on every feature). Train longer or with other settings (docs/tune.md) "
            "for interactions."
        )
    frequency = np.asarray(served.training_item_frequency)
    selected = np.flatnonzero(frequency >= int(min_items))
    if len(selected) == 0:
        raise ColdStartError(f"no feature occurs in at least {min_items} training items (--min-items).")
    names = np.asarray(served.features.names, dtype=object)
    index = torch.as_tensor(selected, dtype=torch.long, device=model.D.device)
    D = model.D.detach()[index].double()
    V = model.low_rank_factors().detach()[index].double()
    self_low_rank = V.pow(2).sum(1)

    def table(kind, p, q, weight, D_p, vv):
        """Rows ranked 1.. of feature pairs (p, q): positions in ``selected``."""
        return pd.DataFrame(
            {
                "kind": kind,
                "rank": np.arange(1, len(p) + 1),
                "feature_p": names[selected[p]],
                "feature_q": names[selected[q]],
                "weight": weight,
                "D_p": D_p,
                "vv": vv,
                "items_p": frequency[selected[p]],
                "items_q": frequency[selected[q]],
            }
        )

    frames = []
    for kind, (values, p, q) in zip(("positive", "negative"), top_pairs(V, top, cells)):
        values = values.cpu().numpy()
        frames.append(table(kind, p.cpu().numpy(), q.cpu().numpy(), values, np.nan, values))
    diagonal = D + self_low_rank
    take = min(int(top), len(selected))
    for kind, descending in (("diagonal_top", True), ("diagonal_bottom", False)):
        order = torch.argsort(diagonal, descending=descending, stable=True)[:take].cpu().numpy()
        weights, D_p, vv = (x.cpu().numpy()[order] for x in (diagonal, D, self_low_rank))
        frames.append(table(kind, order, order, weights, D_p, vv))
    return pd.concat(frames, ignore_index=True)[COLUMNS]
