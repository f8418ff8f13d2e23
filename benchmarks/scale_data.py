"""Scaled generated datasets for the benchmarks (``scale_dataset``), in RecBole's atomic format: long-tailed item
popularity, log-normal user activity, Zipf word frequencies, 10^7 interactions in seconds."""

from pathlib import Path

import numpy as np

# numpy >= 2.3's hash-based np.unique (and isin / union1d / setdiff1d built on it) is ~100x slower than a sort
# on 10^7 int64 keys, and Generator.choice(p=...) is slower than a searchsorted on the cdf: these helpers
# stay on sorts and searchsorted so that 10^7 interactions take seconds.


def _sorted_unique(keys):
    keys = np.sort(keys)
    return keys[np.concatenate(([True], keys[1:] != keys[:-1]))] if len(keys) else keys


def _isin_sorted(keys, sorted_reference):
    """Boolean mask: which entries of ``keys`` occur in ``sorted_reference`` (a sorted array)."""
    if len(sorted_reference) == 0:
        return np.zeros(len(keys), dtype=bool)
    found = np.searchsorted(sorted_reference, keys).clip(max=len(sorted_reference) - 1)
    return sorted_reference[found] == keys


def _sampler(weights):
    """Draw ids 0..len(weights)-1 with probability proportional to ``weights`` (with replacement)."""
    cdf = np.cumsum(weights, dtype=np.float64)

    def draw(size, rng):
        return np.searchsorted(cdf, rng.random(size) * cdf[-1], side="right").clip(max=len(cdf) - 1)

    return draw


def _zipf_weights(n, exponent, rng):
    """Zipf-like weights 1 / rank**exponent, the ranks randomly assigned to the ids 0..n-1."""
    return (1.0 / np.arange(1, n + 1, dtype=np.float64) ** exponent)[rng.permutation(n)]


def _distinct_per_row(n_rows, k, weights, rng, max_rounds=8):
    """(n_rows, k) column ids, each row a draw without replacement from ``weights``: vectorised oversampling rounds
    (1.5 x what a row still needs, its distinct values kept in draw order), then Efraimidis-Spirakis keys for the
    rows still short after ``max_rounds`` (only when ``k`` is close to ``len(weights)``)."""
    n_cols = len(weights)
    draw = _sampler(weights)
    rows_out, cols_out = [], []
    need = np.full(n_rows, k, dtype=np.int64)
    taken = np.empty(0, dtype=np.int64)  # sorted row * n_cols + col already kept
    short = np.arange(n_rows)
    for _ in range(max_rounds):
        if len(short) == 0:
            break
        counts = need[short] + need[short] // 2 + 2
        rows = np.repeat(short, counts)
        keys = rows * n_cols + draw(len(rows), rng)
        # first occurrence of each key, in draw order, not taken in an earlier round
        order = np.argsort(keys, kind="stable")
        first = np.concatenate(([True], keys[order][1:] != keys[order][:-1]))
        keep = np.zeros(len(keys), dtype=bool)
        keep[order[first]] = True
        keep &= ~_isin_sorted(keys, taken)
        rows, keys = rows[keep], keys[keep]
        # at most need[row] per row, in draw order (rows are sorted: np.repeat kept them contiguous)
        per_row = np.bincount(rows, minlength=n_rows)
        starts = np.cumsum(per_row) - per_row
        rank = np.arange(len(rows)) - starts[rows]
        within = rank < need[rows]
        rows, keys = rows[within], keys[within]
        rows_out.append(rows)
        cols_out.append(keys - rows * n_cols)
        taken = _sorted_unique(np.concatenate([taken, keys]))
        need -= np.bincount(rows, minlength=n_rows)
        short = np.flatnonzero(need)
    if len(short):  # exact fallback for the few rows left
        probabilities = weights / weights.sum()
        block = max(1, 2**22 // n_cols)
        is_short = np.zeros(n_rows, dtype=bool)
        is_short[short] = True
        if rows_out:
            rows_all, cols_all = np.concatenate(rows_out), np.concatenate(cols_out)
            rows_out, cols_out = [rows_all[~is_short[rows_all]]], [cols_all[~is_short[rows_all]]]
        for start in range(0, len(short), block):
            rows = short[start : start + block]
            scores = np.log(rng.random((len(rows), n_cols))) / probabilities  # top k of u ** (1 / p)
            top = np.argsort(-scores, axis=1)[:, :k]
            rows_out.append(np.repeat(rows, k))
            cols_out.append(top.ravel())
    rows, cols = np.concatenate(rows_out), np.concatenate(cols_out)
    order = np.argsort(rows, kind="stable")
    return cols[order].reshape(n_rows, k)


def scale_dataset(
    folder,
    name,
    n_users,
    n_items,
    n_features,
    words_per_item,
    n_interactions,
    seed=0,
    item_exponent=0.8,
    word_exponent=1.0,
    user_sigma=1.0,
):
    """Write a generated dataset of a chosen size for the benchmarks (``write_atomic``'s layout, vectorised): every
    item has ``min(words_per_item, n_features)`` distinct Zipf-drawn words; exactly ``n_interactions`` distinct likes,
    one per item first, the rest by log-normal user activity x Zipf item popularity; integer tokens whose ids and
    file order say nothing."""
    import pandas as pd

    n_users, n_items, n_features = int(n_users), int(n_items), int(n_features)
    n_interactions, k = int(n_interactions), min(int(words_per_item), int(n_features))
    if min(n_users, n_items, n_features, k) < 1:
        raise ValueError("scale_dataset: users, items, features and words_per_item must be positive")
    if not n_items <= n_interactions <= n_users * n_items // 2:
        raise ValueError(
            f"scale_dataset: n_interactions={n_interactions} must be between n_items={n_items} "
            f"(one like per item) and n_users * n_items / 2 = {n_users * n_items // 2}"
        )
    rng = np.random.default_rng(seed)
    draw_item = _sampler(_zipf_weights(n_items, item_exponent, rng))
    draw_user = _sampler(rng.lognormal(0.0, user_sigma, n_users))

    # likes: one per item (coverage), then activity x popularity draws until n_interactions distinct
    keys = _sorted_unique(draw_user(n_items, rng) * n_items + np.arange(n_items))
    extra = np.empty(0, dtype=np.int64)
    while len(keys) + len(extra) < n_interactions:
        size = int((n_interactions - len(keys) - len(extra)) * 1.1) + 16
        drawn = _sorted_unique(draw_user(size, rng) * n_items + draw_item(size, rng))
        extra = _sorted_unique(np.concatenate([extra, drawn[~_isin_sorted(drawn, keys)]]))
    extra = rng.permutation(extra)[: n_interactions - len(keys)]
    keys = rng.permutation(np.concatenate([keys, extra]))

    path = Path(folder) / name
    path.mkdir(parents=True, exist_ok=True)
    inter = pd.DataFrame({"user_id:token": keys // n_items, "item_id:token": keys % n_items})
    inter.to_csv(path / f"{name}.inter", sep="\t", index=False, lineterminator="\n")

    words = _distinct_per_row(n_items, k, _zipf_weights(n_features, word_exponent, rng), rng)
    order = rng.permutation(n_items)
    np.savetxt(
        path / f"{name}.item",
        np.column_stack([order, words[order]]),
        fmt="%d\t" + " ".join(["%d"] * k),
        header="item_id:token\twords:token_seq",
        comments="",
    )
    return path
