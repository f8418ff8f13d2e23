"""Shared helpers for the pipeline tests: small generated atomic datasets and their configs."""

import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest
import torch
from recbole.data.interaction import Interaction

from recbole_fbsm.quick_start import run
from recbole_fbsm.serve.live import score_candidates

REPO_ROOT = Path(__file__).resolve().parent.parent
RUN_RECBOLE = REPO_ROOT / "run_recbole.py"

GENRES = [f"g{k}" for k in range(6)]
WORDS = [f"w{k}" for k in range(30)]

# Settings that keep runs quiet, on the CPU and short (every key exists in RecBole 1.2.1's overall.yaml).
QUIET = {
    "state": "ERROR",
    "show_progress": False,
    "use_gpu": False,
    "worker": 0,
    "epochs": 1,
    "save_dataset": False,
    "save_dataloaders": False,
}


@dataclass
class GeneratedDataset:
    """What ``write_dataset`` wrote: the folder, and the rows by external token."""

    root: Path
    name: str
    rows: list  # (user token, item token, rating or None)
    item_tokens: list  # every item of the .item file, with or without interactions
    item_features: dict = field(default_factory=dict)  # item token -> {field: [tokens]}

    @property
    def folder(self):
        return self.root / self.name

    @property
    def inter_path(self):
        return self.folder / f"{self.name}.inter"

    @property
    def item_path(self):
        return self.folder / f"{self.name}.item"

    @property
    def interacted_items(self):
        return {item for _, item, _ in self.rows}

    def likes(self, threshold=4):
        return [(u, i) for u, i, r in self.rows if r is None or r >= threshold]

    def dislikes(self, threshold=4):
        return [(u, i) for u, i, r in self.rows if r is not None and r < threshold]


def write_dataset(
    root,
    name="toy",
    n_users=40,
    n_items=60,
    n_items_without_inter=3,
    likes_per_user=(3, 12),
    dislike_user_fraction=0.5,
    dislikes_per_user=(1, 5),
    implicit=False,
    user_liking_everything=False,
    seed=0,
    rows_order_seed=None,
):
    """Write ``<root>/<name>/<name>.inter`` and ``.item`` and return a ``GeneratedDataset``.

    - item tokens are random strings, so their sorted order, their first appearance in the file and
      their popularity are unrelated; item popularity is skewed (Zipf-like) so that popularity
      sampling has something to follow;
    - ``.inter`` has ``user_id:token item_id:token rating:float`` (no rating when ``implicit``):
      ratings 4-5 are likes, 1-3 explicit dislikes; only a ``dislike_user_fraction`` of users has
      dislikes, and no user both likes and dislikes one item;
    - ``.item`` has two ``token_seq`` features (``genre``, ``words``) and ``n_items_without_inter``
      items that no one interacted with;
    - ``user_liking_everything`` adds user ``u_all`` who likes every interacted item;
    - ``rows_order_seed`` shuffles the rows of both files (same content, another order).
    """
    rng = np.random.default_rng(seed)
    n_total = n_items + n_items_without_inter
    raw = rng.choice(10**6, size=n_total, replace=False)
    item_tokens = [f"m{value:06d}" for value in raw]
    interacted = item_tokens[:n_items]
    popularity = 1.0 / np.arange(1, n_items + 1) ** 0.9
    popularity = popularity[rng.permutation(n_items)]
    popularity /= popularity.sum()

    rows = []
    for u in range(n_users):
        n_like = int(rng.integers(likes_per_user[0], likes_per_user[1] + 1))
        n_dislike = 0
        if not implicit and u < int(round(dislike_user_fraction * n_users)):
            n_dislike = int(rng.integers(dislikes_per_user[0], dislikes_per_user[1] + 1))
        n_like = min(n_like, n_items)
        n_dislike = min(n_dislike, n_items - n_like)
        chosen = rng.choice(n_items, size=n_like + n_dislike, replace=False, p=popularity)
        for k, index in enumerate(chosen):
            rating = None if implicit else float(rng.integers(4, 6) if k < n_like else rng.integers(1, 4))
            rows.append((f"u{u:03d}", interacted[index], rating))
    # every interacted item gets at least one interaction (one like by a dedicated user)
    seen = {item for _, item, _ in rows}
    for item in interacted:
        if item not in seen:
            rows.append(("u_fill", item, None if implicit else 5.0))
    if user_liking_everything:
        rows += [("u_all", item, None if implicit else 5.0) for item in interacted]

    features = {}
    for item in item_tokens:
        features[item] = {
            "genre": list(rng.choice(GENRES, size=int(rng.integers(1, 4)), replace=False)),
            "words": list(rng.choice(WORDS, size=int(rng.integers(2, 6)), replace=False)),
        }

    item_order = list(item_tokens)
    if rows_order_seed is not None:
        order_rng = np.random.default_rng(rows_order_seed)
        rows = [rows[k] for k in order_rng.permutation(len(rows))]
        item_order = [item_order[k] for k in order_rng.permutation(len(item_order))]

    folder = Path(root) / name
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / f"{name}.inter", "w", encoding="utf-8") as handle:
        handle.write("user_id:token\titem_id:token" + ("" if implicit else "\trating:float") + "\n")
        for user, item, rating in rows:
            handle.write(f"{user}\t{item}" + ("" if implicit else f"\t{rating:g}") + "\n")
    with open(folder / f"{name}.item", "w", encoding="utf-8") as handle:
        handle.write("item_id:token\tgenre:token_seq\twords:token_seq\n")
        for item in item_order:
            handle.write(f"{item}\t{' '.join(features[item]['genre'])}\t{' '.join(features[item]['words'])}\n")
    return GeneratedDataset(Path(root), name, rows, item_tokens, features)


def dataset_config(data, quiet=None, implicit=None, **overrides):
    """config_dict for a generated dataset: its data_path, columns, like threshold and quiet settings."""
    implicit = all(r is None for _, _, r in data.rows) if implicit is None else implicit
    config = dict(QUIET if quiet is None else quiet)
    config.update(
        data_path=str(data.root),
        checkpoint_dir=str(data.root / "saved"),
        load_col={
            "inter": ["user_id", "item_id"] + ([] if implicit else ["rating"]),
            "item": ["item_id", "genre", "words"],
        },
        threshold=None if implicit else {"rating": 4},
    )
    config.update(overrides)
    return config


def run_record(model, seed, test_result, **groups):
    """A finished run's record as ``compare`` writes it (recall@10 its valid metric), for the table and chart tests;
    ``groups``: more result keys, e.g. ``test_result_cold``."""
    return {
        "model": model,
        "seed": seed,
        "status": "ok",
        "valid_metric": "recall@10",
        "best_valid_score": 0.1,
        "test_result": test_result,
        "wall_seconds": 1.0,
        **groups,
    }


def item_token_ids(dataset, field, item):
    """The token ids of one item's ``field`` (the padding left out), wherever the dataset keeps them:
    ``item_token_rows`` for the models that read their own features, RecBole's padded rows otherwise."""
    from recbole_fbsm.data.features import item_token_rows  # helpers stay importable without torch

    indptr, indices = item_token_rows(dataset, field)
    return indices[indptr[item] : indptr[item + 1]]


def tokens_of(dataset, field, ids):
    """External tokens of internal ids of a token field."""
    return [str(t) for t in dataset.field2id_token[field][np.asarray(ids, dtype=np.int64)]]


def split_by_token(built):
    """{item token: phase} from the datasets returned by ``ColdStartDataset.build()``."""
    result = {}
    for part in built:
        for token in tokens_of(part, part.iid_field, part.split_items):
            assert token not in result, f"item {token} is in two splits"
            result[token] = part.phase
    return result


def cli_env():
    """Environment for ``run_recbole.py`` subprocesses: one torch thread each, no user site quirks, and this
    checkout's ``recbole_fbsm`` (tests run in a temporary folder, where an editable install elsewhere would win)."""
    env = dict(os.environ)
    env.update(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", PYTHONWARNINGS="ignore", PYTHONUNBUFFERED="1")
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
    return env


def start_cli(args, cwd, **popen_kwargs):
    """Start ``python run_recbole.py ARGS`` in ``cwd`` (so that ./log and ./saved land there)."""
    return subprocess.Popen(
        [sys.executable, str(RUN_RECBOLE), *args],
        cwd=str(cwd),
        env=cli_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        **popen_kwargs,
    )


def run_cli(args, cwd, timeout=300):
    """Run ``run_recbole.py`` to completion; return (returncode, stdout, stderr)."""
    process = start_cli(args, cwd)
    try:
        out, err = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        out, err = process.communicate()
        raise AssertionError(f"run_recbole.py {args} did not finish in {timeout}s:\n{err[-3000:]}") from None
    return process.returncode, out, err


def tiny_word_dataset(tmp_path, seed, max_words, quiet):
    """40 items with 1 to ``max_words`` - 1 words (repeats: term counts) out of 12, 15 users with 8 likes each,
    written as ``tmp_path/data/tiny``; returns the settings that run on it (40 items split 24/8/8: Recall@5,
    as a split must have more items than the largest cut-off)."""
    from synthetic import write_atomic

    rng = np.random.default_rng(seed)
    words = {f"i{i}": [f"w{w}" for w in rng.integers(0, 12, size=rng.integers(1, max_words))] for i in range(40)}
    interactions = sorted({(f"u{u}", f"i{i}") for u in range(15) for i in rng.choice(40, 8, replace=False)})
    write_atomic(tmp_path / "data", "tiny", interactions, words)
    return {
        "data_path": str(tmp_path / "data"),
        "checkpoint_dir": str(tmp_path / "saved"),
        "topk": [5],
        "valid_metric": "Recall@5",
        **quiet,
    }


# ------------------------------------------------------------------ planted topics with held-out new items
TOPICS, ITEMS_PER_TOPIC, HELD_OUT_PER_TOPIC, USERS_PER_TOPIC = 4, 24, 3, 10
HEADER = "item_id:token\tgenre:token\twords:token_seq\n"


def item_line(token, features):
    return f"{token}\t{features['genre']}\t{' '.join(features['words'])}\n"


def write_items_as_new(item_file, out_file, tokens, prefix="new_", separator="\t", id_field="item_id"):
    """Copy the rows of ``tokens`` from an ``.item`` file to ``out_file`` under the ids ``prefix + token``: new
    items with the features of existing ones. Returns the new ids."""
    wanted = {str(t) for t in tokens}
    written = []
    with open(item_file, encoding="utf-8") as source, open(out_file, "w", encoding="utf-8") as target:
        header = source.readline()
        target.write(header)
        id_column = [c.split(":")[0] for c in header.rstrip("\r\n").split(separator)].index(id_field)
        for line in source:
            cells = line.rstrip("\r\n").split(separator)
            if cells[id_column] in wanted:
                cells[id_column] = prefix + cells[id_column]
                written.append(cells[id_column])
                target.write(separator.join(cells) + "\n")
    return written


def write_planted(root, name="plant", seed=0):
    """Implicit likes with a planted topic signal; the held-out items go to ``new.item`` only.

    Each item has a genre (token field, noise), its topic word ``t{k}``, two noise words and a word of
    its own (``x_<item>``: an item of the validation/test split gives a token that no training item has).
    """
    rng = np.random.default_rng(seed)
    features, topic_of, held_out = {}, {}, []
    for k in range(TOPICS):
        for n in range(ITEMS_PER_TOPIC + HELD_OUT_PER_TOPIC):
            token = f"k{k}i{n:02d}"
            noise = [f"n{w}" for w in rng.choice(15, 2, replace=False)]
            features[token] = {"genre": f"g{rng.integers(4)}", "words": [f"t{k}", *noise, f"x_{token}"]}
            topic_of[token] = k
            if n >= ITEMS_PER_TOPIC:
                held_out.append(token)
    kept = [t for t in features if t not in held_out]
    likes, users_of_topic = [], {}
    for k in range(TOPICS):
        own = [t for t in kept if topic_of[t] == k]
        others = [t for t in kept if topic_of[t] != k]
        for n in range(USERS_PER_TOPIC):
            user = f"u{k}_{n}"
            users_of_topic.setdefault(k, []).append(user)
            chosen = list(rng.choice(own, 7, replace=False)) + [others[int(rng.integers(len(others)))]]
            likes += [(user, item) for item in chosen]
    folder = root / name
    folder.mkdir(parents=True)
    with open(folder / f"{name}.inter", "w") as handle:
        handle.write("user_id:token\titem_id:token\n")
        handle.writelines(f"{u}\t{i}\n" for u, i in likes)
    with open(folder / f"{name}.item", "w") as handle:
        handle.write(HEADER)
        handle.writelines(item_line(t, features[t]) for t in kept)
    with open(root / "new.item", "w") as handle:
        handle.write(HEADER)
        handle.writelines(item_line(t, features[t]) for t in held_out)
    return {
        "root": root,
        "name": name,
        "features": features,
        "topic_of": topic_of,
        "held_out": held_out,
        "users_of_topic": users_of_topic,
        "likes": likes,
        "item_file": folder / f"{name}.item",
        "new_file": root / "new.item",
    }


def planted_settings(root):
    """config_dict for a dataset of ``write_planted(root)``: quiet, checkpoints under ``root/saved``, implicit likes."""
    return dict(
        QUIET,
        data_path=str(root),
        checkpoint_dir=str(root / "saved"),
        seed=2020,
        threshold=None,
        load_col={"inter": ["user_id", "item_id"], "item": ["item_id", "genre", "words"]},
    )


def evaluation_scores(served, user, items):
    """The trained model's own evaluation scores (``score_candidates``) of dataset ``items`` for ``user``."""
    model = served.model
    model._cache = None
    users = torch.tensor([served.dataset.field2token_id[served.uid_field][user]])
    return model.score_candidates(Interaction({model.USER_ID: users}), torch.as_tensor(items))[0].numpy()


def train_planted(root, runs, model=None, **common):
    """``write_planted(root)``'s data and the ``run`` result of each ``{name: settings}`` in ``runs`` (model
    ``model``, else ``name``; ``common`` added to every run), run from ``root``: RecBole writes ./log there."""
    data = write_planted(root)
    common = {**planted_settings(root), **common}
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(root)
        results = {
            name: run(model or name, data["name"], config_dict={**common, **extra}) for name, extra in runs.items()
        }
    return data, results


def score_new_items(served, new_items, users):
    """Dense (len(users) x len(new_items)) scores of the serving path; ``users`` are internal ids."""
    users = torch.as_tensor(users, device=served.device)
    return served.model.score_feature_rows(users, served.feature_rows(new_items.matrix))


def score_user(snapshot, user, scope):
    """(item ids, scores, note) of every candidate of ``scope`` for ``user`` in the live service, likes left out."""
    scores, eligible, ids, note = score_candidates(snapshot, user, scope)
    return ids[eligible], scores[eligible], note
