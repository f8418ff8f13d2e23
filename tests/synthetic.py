"""Generated datasets in RecBole's atomic format for the tests: the paper's planted feature pairs, text-like topics
(the small ones: ``helpers``; the benchmarks' scaled data: benchmarks/scale_data.py)."""

from pathlib import Path

import numpy as np

from recbole_fbsm.data.dataset import item_split


def write_atomic(folder, name, interactions, item_words):
    """Write ``<folder>/<name>/<name>.inter`` and ``.item``; ``item_words`` maps item -> list of tokens."""
    path = Path(folder) / name
    path.mkdir(parents=True, exist_ok=True)
    likes = "".join(f"{user}\t{item}\n" for user, item in interactions)
    (path / f"{name}.inter").write_text("user_id:token\titem_id:token\n" + likes, encoding="utf-8")
    words = "".join(f"{item}\t{' '.join(tokens)}\n" for item, tokens in item_words.items())
    (path / f"{name}.item").write_text("item_id:token\twords:token_seq\n" + words, encoding="utf-8")
    return path


def planted_interactions(
    folder,
    name="planted",
    n_types=4,
    items_per_side=40,
    teachers=25,
    students=25,
    likes_per_side=8,
    noise_words=40,
    seed=0,
    split_seed=2020,
    ratios=(0.6, 0.2, 0.2),
):
    """The paper's "leather shoes with black clothes", planted: teachers of type k like training items with word
    ``a{k}`` and with ``b{k}``; students like ``a{k}`` items in training and ``b{k}`` items only in validation/test,
    reachable through the a_k-b_k pair alone. The split is the pipeline's own (``item_split`` with ``split_seed``)."""
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
            chosen = (
                pick("a", k, {0}, likes_per_side)
                + pick("b", k, {1}, likes_per_side // 2)
                + pick("b", k, {2}, likes_per_side // 2)
            )
            interactions += [(f"s{k}_{s}", item) for item in chosen]
    liked = {item for _, item in interactions}
    # every item needs an interaction, or it would leave the split and change it: one filler user per
    # split likes the items nobody else does (their scores are ties for every model: random level)
    interactions += [(f"filler{split[item]}", item) for item in items if item not in liked]
    return write_atomic(folder, name, interactions, words)


def topic_text(
    folder,
    name="topics",
    n_topics=8,
    items_per_topic=50,
    users_per_topic=30,
    words_per_topic=12,
    topic_words_per_item=2,
    noise_words=40,
    noise_words_per_item=4,
    likes_per_user=12,
    stray_likes=2,
    seed=0,
):
    """Text-like data whose signal lies in feature weights and pairs: items of one topic carry a few of its synonyms
    (often none in common: only learned word pairs relate them) plus shared noise words (only a learned weight mutes
    them), so CoSim's shared words lose to a model that learns the diagonal and the low rank."""
    rng = np.random.default_rng(seed)
    n_items = n_topics * items_per_topic
    topic = np.repeat(np.arange(n_topics), items_per_topic)
    words = {}
    for item in range(n_items):
        own = rng.choice(words_per_topic, topic_words_per_item, replace=False)
        noise = rng.choice(noise_words, noise_words_per_item, replace=False)
        words[f"i{item}"] = [f"t{topic[item]}w{w}" for w in own] + [f"n{w}" for w in noise]
    interactions = []
    for k in range(n_topics):
        pool = np.flatnonzero(topic == k)
        for u in range(users_per_topic):
            liked = set(rng.choice(pool, likes_per_user, replace=False)) | set(rng.choice(n_items, stray_likes))
            interactions += [(f"u{k}_{u}", f"i{item}") for item in sorted(liked)]
    return write_atomic(folder, name, interactions, words)
