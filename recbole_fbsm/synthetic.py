"""Generated datasets in RecBole's atomic format, for tests, examples and benchmarks."""

from pathlib import Path

import numpy as np

from recbole_fbsm.data.dataset import item_split


def write_atomic(folder, name, interactions, item_words, label=None):
    """Write ``<folder>/<name>/<name>.inter`` and ``.item``; ``item_words`` maps item -> list of tokens."""
    path = Path(folder) / name
    path.mkdir(parents=True, exist_ok=True)
    with open(path / f"{name}.inter", "w", encoding="utf-8") as handle:
        handle.write("user_id:token\titem_id:token" + ("\tlabel:float" if label is not None else "") + "\n")
        for row, (user, item) in enumerate(interactions):
            extra = f"\t{label[row]}" if label is not None else ""
            handle.write(f"{user}\t{item}{extra}\n")
    with open(path / f"{name}.item", "w", encoding="utf-8") as handle:
        handle.write("item_id:token\twords:token_seq\n")
        for item, words in item_words.items():
            handle.write(f"{item}\t{' '.join(words)}\n")
    return path


def planted_interactions(folder, name="planted", n_types=4, items_per_side=40, teachers=25, students=25,
                         likes_per_side=8, noise_words=40, seed=0, split_seed=2020, ratios=(0.6, 0.2, 0.2)):
    """The paper's "leather shoes with black clothes", planted.

    Each type k has A-items (word ``a{k}``) and B-items (word ``b{k}``), each with two random noise
    words. Teachers of type k like training A_k and B_k items, so a_k and b_k co-occur in histories.
    Students of type k like training A_k items only, and B_k items only in validation/test: what they
    like there shares no feature with their training likes (noise words aside), and the only path is
    the a_k-b_k interaction. The split is computed with the same function the pipeline uses
    (``item_split`` with ``split_seed``), so the design holds for the split the pipeline will make.
    """
    rng = np.random.default_rng(seed)
    items, words, kinds = [], {}, {}
    for k in range(n_types):
        for side in "ab":
            for n in range(items_per_side):
                item = f"{side}{k}_{n}"
                items.append(item)
                kinds[item] = (side, k)
                words[item] = [f"{side}{k}"] + [f"n{w}" for w in rng.choice(noise_words, 2, replace=False)]
    split = dict(zip(items, item_split(items, ratios, split_seed)))

    def pick(side, k, phases, count):
        pool = [i for i in items if kinds[i] == (side, k) and split[i] in phases]
        return list(rng.choice(pool, min(count, len(pool)), replace=False))

    interactions = []
    for k in range(n_types):
        for t in range(teachers):
            for item in pick("a", k, {0}, likes_per_side) + pick("b", k, {0}, likes_per_side):
                interactions.append((f"t{k}_{t}", item))
        for s in range(students):
            chosen = pick("a", k, {0}, likes_per_side) + pick("b", k, {1}, likes_per_side // 2) + pick("b", k, {2}, likes_per_side // 2)
            interactions += [(f"s{k}_{s}", item) for item in chosen]
    liked = {item for _, item in interactions}
    # every item needs an interaction, or it would leave the split and change it: one filler user per
    # split likes the items nobody else does (their scores are ties for every model: random level)
    interactions += [(f"filler{split[item]}", item) for item in items if item not in liked]
    return write_atomic(folder, name, interactions, words)
