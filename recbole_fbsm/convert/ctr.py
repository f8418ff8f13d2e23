"""Reader for the CTR / CDL format of the public CiteULike datasets (citeulike-a, citeulike-t); ids are 0-based
line numbers. The vocabulary words are raw ('writings', 'e.\xa0coli'), so each goes through the text analyzer:
a sparse words x terms matrix maps word counts to term counts (merging stems, splitting 'infinite-horizon')."""

from pathlib import Path

import numpy as np
import pandas as pd
import scipy.sparse as sp

from recbole_fbsm.config.conversion import PAPER_MAX_DF
from recbole_fbsm.data.analyzer import TextAnalyzer, WholeTokenAnalyzer

from .text import (
    ConversionError,
    Skipped,
    TokenField,
    count_matrix,
    count_terms,
    make_dataset,
    read_text,
    tag_options,
    target_folder,
    words_options,
)


def read_lines(path, what):
    """Lines split on '\\n' only: str.splitlines() would also split on characters such as U+2028
    that may occur inside vocabulary words, shifting every later id."""
    lines = read_text(path, what).removesuffix("\n").split("\n")
    if lines == [""]:
        raise ConversionError(f"{what} file {path} is empty")
    return [line.removesuffix("\r") for line in lines]


def _ints(parts):
    """Non-negative integers, or None if any part is not one (digits only)."""
    values = [int(part) for part in parts if part.isdecimal()]
    return values if len(values) == len(parts) else None


def _require(path, n_lines, n_found, skipped, reason, nothing):
    """Fail when nothing usable was found, or when most lines are malformed: such a file is in another format,
    and converting the few lines that happen to parse would end in a misleading error of the df filter."""
    if not n_found:
        raise ConversionError(f"{path}: {nothing} ({skipped.describe()})")
    rejected = skipped.get(reason, 0)
    if rejected * 2 > n_lines:
        raise ConversionError(
            f"{path}: {rejected:,} of {n_lines:,} lines rejected as malformed; is the file in another format? "
            f"First: {skipped.first.get(reason, '')}"
        )


def read_id_lists(path, what, skipped, nothing):
    """(0-based line, ids) of each well-formed ``count id id ...`` line (users.dat, tag-item.dat), in file order:
    the first number is how many 0-based ids follow; the other lines are counted as malformed."""
    lines, reason, n_ids = read_lines(path, what), f"malformed lines in {Path(path).name}", 0
    for k, line in enumerate(lines):
        values = _ints(line.split())
        if values and values[0] == len(values) - 1:
            n_ids += values[0]
            yield k, values[1:]
        else:
            skipped.add(
                reason,
                f"{path}:{k + 1}: expected 'count item item ...' with count = number of 0-based item ids, "
                f"got {line[:80]!r}",
            )
    _require(path, len(lines), n_ids, skipped, reason, nothing)


def read_users(path, skipped):
    """user_id, item_id pairs (as strings) from users.dat; malformed lines are skipped and counted."""
    users, items = [], []
    for u, ids in read_id_lists(path, "users", skipped, "no usable interactions"):
        if not ids:
            skipped.add(f"users without items in {Path(path).name}", f"{path}:{u + 1}")
        users += [u] * len(ids)
        items += ids
    return pd.DataFrame({"user_id": np.asarray(users).astype(str), "item_id": np.asarray(items).astype(str)})


def read_mult(path, n_words, skipped):
    """Item ids and the items x vocabulary-words count matrix of the well-formed lines of mult.dat."""
    ids, rows, cols, vals = [], [], [], []
    lines, reason = read_lines(path, "mult"), f"malformed lines in {Path(path).name} (item left without text)"
    for i, line in enumerate(lines):
        parts = line.split()
        pairs = [p.split(":") for p in parts[1:]]
        values = (
            _ints([parts[0]] + [x for p in pairs for x in p]) if parts and all(len(p) == 2 for p in pairs) else None
        )
        if not values or values[0] != len(pairs) or max(values[1::2], default=0) >= n_words or 0 in values[2::2]:
            skipped.add(
                reason,
                f"{path}:{i + 1}: expected 'n word_id:count ...' with n pairs, word ids < {n_words:,} "
                f"(vocabulary size) and counts > 0, got {line[:80]!r}",
            )
            continue
        rows += [len(ids)] * values[0]
        cols += values[1::2]
        vals += values[2::2]
        ids.append(str(i))
    _require(path, len(lines), len(ids), skipped, reason, "no usable item texts")
    counts = sp.csr_matrix((vals, (rows, cols)), shape=(len(ids), n_words), dtype=np.int64)
    return ids, counts  # duplicate word ids on a line are summed by the constructor


def read_ctr_tags(tag_item, tag_names, item_ids, skipped, mult_name="mult.dat"):
    """Items x tags counts, rows aligned with `item_ids`, from citeulike-t's tag-item.dat (line t: `count item
    item ...`, the articles carrying tag t) and tags.dat (line t: tag t's name)."""
    names = read_lines(tag_names, "tag names")
    tokens = np.array([WholeTokenAnalyzer().token(name) for name in names], dtype=object)  # '' for '-', '--'
    nothing, pairs = "no usable tag of an item with text", []  # pairs: (line, item)
    for t, ids in read_id_lists(tag_item, "tag-item", skipped, nothing):
        if t >= len(names):
            skipped.add(
                f"lines of {Path(tag_item).name} without a name in {Path(tag_names).name}", f"{tag_item}:{t + 1}"
            )
        elif not tokens[t]:
            skipped.add(
                f"tags without a letter or digit in {Path(tag_names).name}", f"{tag_names}:{t + 1}: {names[t][:40]!r}"
            )
        else:
            pairs += [(t, item) for item in ids]
    lines, items = np.array(pairs, dtype=np.int64).reshape(-1, 2).T
    rows = pd.Index(item_ids).get_indexer(items.astype(str))
    unknown = np.flatnonzero(rows < 0)
    if unknown.size:
        where, reason = f"{tag_item}:{lines[unknown[0]] + 1}: item {items[unknown[0]]}", Path(mult_name).name
        skipped.add(f"tag-item pairs naming an item without text in {reason}", where, n=unknown.size)
    if unknown.size == len(rows):
        raise ConversionError(f"{tag_item}: {nothing} ({skipped.describe()})")
    return count_matrix(rows[rows >= 0], tokens[lines[rows >= 0]], len(item_ids))


# longer than 60 lines: 17 of them are its signature, one keyword argument per option of `convert ctr`
def convert_ctr(
    users,
    mult,
    vocab,
    name,
    out_dir="dataset",
    *,
    min_df=None,
    max_df=PAPER_MAX_DF,
    stem=True,
    stopwords=True,
    overwrite=False,
    tag_item=None,
    tag_names=None,
    tags_min_df=None,
    tags_max_df=None,
    readme_note="",
):
    """Convert CTR-format files (users.dat, mult.dat, vocabulary.dat) into a RecBole dataset of implicit likes;
    `tag_item` and `tag_names` (citeulike-t's tag-item.dat and tags.dat) add a field of whole tags; `readme_note`
    ends its README.txt."""
    if (tag_item is None) != (tag_names is None):
        raise ConversionError(
            "tags need both files: tag_item (--tag-item, tag-item.dat) and tag_names (--tag-names, tags.dat)"
        )
    target_folder(out_dir, name, overwrite)  # before any work
    skipped = Skipped()
    words = read_lines(vocab, "vocabulary")
    item_ids, word_counts = read_mult(mult, len(words), skipped)
    inter = read_users(users, skipped)
    analyzer = TextAnalyzer.paper(stem, stopwords)
    word_terms, terms = count_terms(words, analyzer, source=str(vocab))
    fields = [TokenField("words", word_counts @ word_terms, terms, min_df, max_df, analyzer)]
    sources = {"users": users, "mult": mult, "vocabulary": vocab}
    options = words_options(min_df, max_df, stem, stopwords) | {
        "vocabulary words": "tokenised like text (scikit-learn), counts of words sharing a term merged",
    }
    if tag_item is not None:
        tags_min_df, tags_max_df = min_df if tags_min_df is None else tags_min_df, tags_max_df or max_df
        tag_counts = read_ctr_tags(tag_item, tag_names, item_ids, skipped, mult)
        fields.append(TokenField("tags", *tag_counts, tags_min_df, tags_max_df, WholeTokenAnalyzer()))
        sources |= {"tag-item": tag_item, "tag names": tag_names}
        options |= tag_options(tags_min_df, tags_max_df)
    return make_dataset(
        inter,
        item_ids,
        fields,
        name=name,
        out_dir=out_dir,
        overwrite=overwrite,
        skipped=skipped,
        texts_source=str(mult),
        command="ctr",
        sources=sources,
        options=options,
        note=readme_note,
        extra_counts={
            "vocabulary words": len(words),
            "vocabulary words giving no term (stop words, single characters, punctuation)": int(
                (np.diff(word_terms.indptr) == 0).sum()
            ),
        },
    )
