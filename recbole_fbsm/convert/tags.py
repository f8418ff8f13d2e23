"""Token lists kept whole (tags, genres, keywords): a second token_seq field beside the item text, each tag one
token (``WholeTokenAnalyzer``), read here from `item,tag[,tag...]` lines for `convert text`."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd
import scipy.sparse as sp

from recbole_fbsm.data.analyzer import WholeTokenAnalyzer

from .atomic import ConversionError, Skipped, bad_id, csv_records, skip_malformed

TAG_DF_OPTIONS = ("--tags-min-df", "--tags-max-df")


def count_matrix(item_rows: np.ndarray, tokens: Sequence[str], n_items: int) -> tuple[sp.csr_matrix, np.ndarray]:
    """items x tokens counts from (item row, token) pairs; tokens sorted like the word terms."""
    terms, cols = np.unique(np.asarray(tokens, dtype=object).astype(str), return_inverse=True)
    counts = sp.csr_matrix(
        (np.ones(len(cols), dtype=np.int64), (np.asarray(item_rows, dtype=np.int64), cols.ravel())),
        shape=(n_items, len(terms)),
    )
    counts.sum_duplicates()
    return counts, terms.astype(object)


def read_tag_file(
    path: str | os.PathLike,
    sep: str,
    tag_sep: str | None,
    header: bool,
    item_ids: Sequence[str],
    skipped: Skipped,
) -> tuple[sp.csr_matrix, np.ndarray]:
    """Items x tags counts from `item<sep>tag[<sep>tag...]` lines (each field further split on `tag_sep`), rows
    aligned with `item_ids`; an item's lines add up, and a repeated tag counts twice, like a repeated word."""
    index = pd.Index(item_ids)
    rows, tokens = [], []
    analyze = WholeTokenAnalyzer(tag_sep)
    for line, row in csv_records(path, sep, header, "tags"):
        item = row[0].strip()
        if len(row) < 2 or bad_id(item):
            skip_malformed(skipped, path, line, f"item{sep}tag[{sep}tag...]", row, sep)
            continue
        k = index.get_indexer([item])[0]
        if k < 0:
            skipped.add(f"tag lines naming an item without text in {Path(path).name}", f"{path}:{line}")
            continue
        found = [token for cell in row[1:] for token in analyze(cell)]
        rows += [k] * len(found)
        tokens += found
    if not tokens:
        raise ConversionError(
            f"{path}: no usable tag of an item with text, expected lines 'item{sep}tag[{sep}tag...]' "
            f"({skipped.describe()})".replace("\t", "<TAB>")
        )
    return count_matrix(np.asarray(rows), tokens, len(item_ids))
