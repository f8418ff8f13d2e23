"""Reader for the CTR / CDL format of the public CiteULike datasets (citeulike-a, citeulike-t).

users.dat line u = `count item item ...`, mult.dat line i = `n word_id:count ...`, vocabulary.dat line
w = word; all ids are 0-based line numbers and become the dataset's external ids as strings.
The vocabulary words are neither stemmed nor cleaned (e.g. 'writings', 'networks’', 'e.\xa0coli'), so
each word goes through the same analyzer as raw text: a sparse words x terms matrix maps the word
counts to term counts, which merges words with one stem and splits words such as 'infinite-horizon'.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pandas as pd
import scipy.sparse as sp

from .atomic import ConversionError, ConversionResult, Skipped, target_folder
from .text import (
    PAPER_MAX_DF,
    PAPER_MIN_DF,
    build_analyzer,
    check_df_settings,
    count_terms,
    make_dataset,
    readme_head,
)

CTR_FILES = {"users": "users.dat", "mult": "mult.dat", "vocab": "vocabulary.dat"}


def read_lines(path: str | os.PathLike, what: str) -> list[str]:
    """Lines split on '\\n' only: str.splitlines() would also split on characters such as U+2028
    that may occur inside vocabulary words, shifting every later id."""
    try:
        with open(path, encoding="utf-8", newline="") as f:
            text = f.read()
    except OSError as exc:
        raise ConversionError(f"cannot read {what} file {path}: {exc.strerror}") from exc
    except UnicodeDecodeError as exc:
        raise ConversionError(f"{what} file {path} is not UTF-8 text (byte {exc.start})") from exc
    lines = [line[:-1] if line.endswith("\r") else line for line in text.split("\n")]
    if lines and lines[-1] == "":
        lines.pop()
    if not lines:
        raise ConversionError(f"{what} file {path} is empty")
    return lines


def _ids(parts: list[str]) -> list[int] | None:
    """Non-negative integers, or None if any part is not one."""
    try:
        values = [int(p) for p in parts]
    except ValueError:
        return None
    return values if all(v >= 0 for v in values) else None


def refuse_other_format(path: str | os.PathLike, n_lines: int, skipped: Skipped, reason: str) -> None:
    """A file whose lines are mostly malformed is in another format: say so, with the count and the
    first rejected line, instead of converting the few lines that happen to parse (and then blaming
    the document-frequency filter for an empty result)."""
    rejected = skipped.counts.get(reason, 0)
    if rejected and rejected * 2 > n_lines:
        raise ConversionError(
            f"{path}: {rejected:,} of {n_lines:,} lines rejected as malformed; is the file in another format? "
            f"First: {skipped.first.get(reason, '')}"
        )


def read_users(path: str | os.PathLike, skipped: Skipped) -> pd.DataFrame:
    """user_id, item_id pairs (as strings) from users.dat; malformed lines are skipped and counted."""
    users, items = [], []
    lines = read_lines(path, "users")
    for u, line in enumerate(lines):
        values = _ids(line.split())
        if not values or values[0] != len(values) - 1:
            skipped.add(
                f"malformed lines in {Path(path).name}",
                f"{path}:{u + 1}: expected 'count item item ...' with count = number of 0-based item ids, "
                f"got {line[:80]!r}",
            )
            continue
        if values[0] == 0:
            skipped.add(f"users without items in {Path(path).name}", f"{path}:{u + 1}")
        users += [u] * values[0]
        items += values[1:]
    if not users:
        raise ConversionError(f"{path}: no usable interactions ({skipped.describe()})")
    refuse_other_format(path, len(lines), skipped, f"malformed lines in {Path(path).name}")
    return pd.DataFrame({"user_id": np.asarray(users).astype(str), "item_id": np.asarray(items).astype(str)})


def read_mult(path: str | os.PathLike, n_words: int, skipped: Skipped) -> tuple[list[str], sp.csr_matrix]:
    """Item ids and the items x vocabulary-words count matrix of the well-formed lines of mult.dat."""
    ids, rows, cols, vals = [], [], [], []
    lines = read_lines(path, "mult")
    for i, line in enumerate(lines):
        parts = line.split()
        pairs = [p.split(":") for p in parts[1:]]
        values = _ids([parts[0]] + [x for p in pairs for x in p]) if parts and all(len(p) == 2 for p in pairs) else None
        if not values or values[0] != len(pairs) or max(values[1::2], default=0) >= n_words or 0 in values[2::2]:
            skipped.add(
                f"malformed lines in {Path(path).name} (item left without text)",
                f"{path}:{i + 1}: expected 'n word_id:count ...' with n pairs, word ids < {n_words:,} "
                f"(vocabulary size) and counts > 0, got {line[:80]!r}",
            )
            continue
        rows += [len(ids)] * values[0]
        cols += values[1::2]
        vals += values[2::2]
        ids.append(str(i))
    if not ids:
        raise ConversionError(f"{path}: no usable item texts ({skipped.describe()})")
    refuse_other_format(path, len(lines), skipped, f"malformed lines in {Path(path).name} (item left without text)")
    counts = sp.csr_matrix((vals, (rows, cols)), shape=(len(ids), n_words), dtype=np.int64)
    return ids, counts  # duplicate word ids on a line are summed by the constructor


def convert_ctr(
    users: str | os.PathLike,
    mult: str | os.PathLike,
    vocab: str | os.PathLike,
    name: str,
    out_dir: str | os.PathLike = "dataset",
    *,
    min_df: int = PAPER_MIN_DF,
    max_df: float = PAPER_MAX_DF,
    stem: bool = True,
    stopwords: bool = True,
    overwrite: bool = False,
) -> ConversionResult:
    """Convert CTR-format files (users.dat, mult.dat, vocabulary.dat) into a RecBole dataset of
    implicit likes with the paper's feature preprocessing (see the module docstring)."""
    check_df_settings(min_df, max_df)
    target_folder(out_dir, name, overwrite)
    skipped = Skipped()
    words = read_lines(vocab, "vocabulary")
    item_ids, word_counts = read_mult(mult, len(words), skipped)
    inter = read_users(users, skipped)
    word_terms, terms = count_terms(words, build_analyzer(stem, stopwords), source=str(vocab))
    head = readme_head(
        "convert_ctr",
        {"users": users, "mult": mult, "vocabulary": vocab},
        {
            "min_df (items)": min_df,
            "max_df (fraction of items)": max_df,
            "stemming (snowball english)": stem,
            "stop words removed (scikit-learn english list)": stopwords,
            "vocabulary words": "tokenised like text (scikit-learn), counts of words sharing a term merged",
        },
    )
    return make_dataset(
        inter, item_ids, word_counts @ word_terms, terms,
        name=name, out_dir=out_dir, min_df=min_df, max_df=max_df, overwrite=overwrite,
        skipped=skipped, texts_source=str(mult), readme_head=head,
        extra_counts={
            "vocabulary words": len(words),
            "vocabulary words giving no term (stop words, single characters, punctuation)":
                int((np.diff(word_terms.indptr) == 0).sum()),
        },
    )


def ctr_paths(src: str | os.PathLike) -> dict[str, Path]:
    """The three CTR files inside a dataset folder, by the names the public datasets use."""
    return {key: Path(src) / file for key, file in CTR_FILES.items()}
