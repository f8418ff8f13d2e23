"""Item text -> term counts -> RecBole dataset (the paper's Sec. 5.1 preprocessing), and the CSV/TSV converter
with its optional tag file (each tag one token, kept whole: ``WholeTokenAnalyzer``).

Both converters (this one and `ctr`) start with `check_settings` and end in `make_dataset`, so they treat bad
input alike; a term's count is kept by repeating it in the token_seq cell.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import pandas as pd
import scipy.sparse as sp
from sklearn.feature_extraction.text import CountVectorizer

from recbole_fbsm.config.conversion import PAPER_MAX_DF, TAG_SEP
from recbole_fbsm.data.analyzer import FieldRecord, TextAnalyzer, WholeTokenAnalyzer, analyzer_path, write_analyzer

from .atomic import (
    ConversionError,
    ConversionResult,
    Skipped,
    bad_id,
    csv_records,
    log,
    target_folder,
    write_dataset,
)

PAPER_MIN_DF = 20  # keep terms that occur in at least this many items (the paper, on ~25,000 articles)
PAPER_ITEMS = 25_000  # the size of the data the paper's 20 items were chosen for (CiteULike)
MIN_DF_FLOOR = 2  # a term found in one item links no two items
SMALL_DATA_ITEMS = 1_000  # below this, the filter's effect is always reported
TAG_DF_OPTIONS = ("--tags-min-df", "--tags-max-df")


def default_min_df(n_items: int) -> int:
    """`--min-df` when none is given: the paper's 20 items scaled to the data and kept within [2, 20] (a fixed 20
    is 0.08% of CiteULike but 7% of a 300-item catalogue, where it removes most real words)."""
    return int(min(PAPER_MIN_DF, max(MIN_DF_FLOOR, round(n_items * PAPER_MIN_DF / PAPER_ITEMS))))


def count_terms(
    docs: Sequence[str], analyzer: Callable[[str], list[str]], source: str
) -> tuple[sp.csr_matrix, np.ndarray]:
    """Sparse docs x terms count matrix and its (sorted) terms; fails when no document has any term."""
    try:
        vectorizer = CountVectorizer(analyzer=analyzer, dtype=np.int64)
        counts = vectorizer.fit_transform(docs)
    except ValueError as exc:  # sklearn: "empty vocabulary; perhaps the documents only contain stop words"
        raise ConversionError(
            f"{source}: no terms at all after tokenising and stop-word removal ({len(docs):,} texts); "
            "expected texts with words of two or more letters"
        ) from exc
    return counts.tocsr(), vectorizer.get_feature_names_out()


def check_df_settings(min_df: int, max_df: float, options: tuple[str, str] = ("--min-df", "--max-df")) -> None:
    """Fail early on filter settings that cannot mean what the paper's filter means (min_df None: scaled)."""
    min_name, max_name = (opt.lstrip("-").replace("-", "_") for opt in options)
    if min_df is not None and (isinstance(min_df, bool) or not isinstance(min_df, (int, np.integer)) or min_df < 0):
        raise ConversionError(f"{min_name} ({options[0]}) must be a whole number of items >= 0, got {min_df!r}")
    if isinstance(max_df, bool) or not isinstance(max_df, (int, float)) or not 0 < max_df <= 1:
        raise ConversionError(f"{max_name} ({options[1]}) must be a fraction of items in (0, 1], got {max_df!r}")


def check_settings(out_dir, name, overwrite, min_df, max_df, tags, tags_min_df, tags_max_df):
    """Both converters' settings and output folder, checked before any work; returns the tags' min_df and
    max_df (default: the words')."""
    check_df_settings(min_df, max_df)
    tags_df = (min_df if tags_min_df is None else tags_min_df, max_df if tags_max_df is None else tags_max_df)
    if tags:
        check_df_settings(*tags_df, options=TAG_DF_OPTIONS)
    target_folder(out_dir, name, overwrite)
    return tags_df


def words_options(min_df, max_df, stem, stopwords):
    """README lines for the words field."""
    return {
        "min_df (items)": _min_df_option(min_df),
        "max_df (fraction of items)": max_df,
        "stemming (snowball english)": stem,
        "stop words removed (scikit-learn english list)": stopwords,
    }


def filter_document_frequency(
    field: TokenField, counts: sp.csr_matrix, min_df: int
) -> tuple[sp.csr_matrix, np.ndarray, str | None]:
    """The columns of `counts` (CSR without duplicate or zero entries, as the converters count) and the terms of
    `field` found in [min_df, field.max_df x n_items] items (sklearn's semantics; terms found in no item are always
    dropped), and the filter's warning or None."""
    what, options, max_df = field.what, field.options, field.max_df
    n_items = counts.shape[0]
    df = np.bincount(counts.indices, minlength=counts.shape[1])
    keep = (df >= max(min_df, 1)) & (df <= max_df * n_items)
    if not keep.any():
        present = df[df > 0]
        min_name, max_name = (opt.lstrip("-").replace("-", "_") for opt in options)
        raise ConversionError(
            f"the document-frequency filter removes every {what}: {min_name}={min_df} ({options[0]}) keeps {what}s in "
            f">= {min_df} items and {max_name}={max_df} ({options[1]}) keeps {what}s in <= {max_df * n_items:g} of the "
            f"{n_items:,} items, but the {present.size:,} {what}s occur in "
            f"{present.min() if present.size else 0}..{present.max() if present.size else 0} items; "
            f"lower {options[0]} or raise {options[1]}"
        )
    return counts[:, keep], field.terms[keep], filter_warning(field, df, n_items, min_df)


def filter_warning(field: TokenField, df: np.ndarray, n_items: int, min_df: int) -> str | None:
    """A warning when the filter removes more than a third of the distinct terms, or any on data of fewer than
    SMALL_DATA_ITEMS items: how many, the most frequent dropped, and what each smaller `--min-df` would keep."""
    terms, what, options, max_df = field.terms, field.what, field.options, field.max_df
    present = df > 0
    too_rare = present & (df < max(min_df, 1))
    too_common = present & (df > max_df * n_items)
    n_terms, dropped = int(present.sum()), int((too_rare | too_common).sum())
    if not dropped or (dropped * 3 <= n_terms and n_items >= SMALL_DATA_ITEMS):
        return None

    def examples(mask):
        order = np.flatnonzero(mask)[np.argsort(-df[mask], kind="stable")][:5]
        return ", ".join(f"{terms[k]!r} ({df[k]} item{'s' if df[k] != 1 else ''})" for k in order)

    if min_df == PAPER_MIN_DF == default_min_df(n_items):  # citeulike-t: what the paper did, not a mishap
        parts = [
            f"{field.name}: the paper's document-frequency filter ({options[0]} {min_df}: {what}s in fewer than "
            f"{min_df} items are left out) kept {n_terms - dropped:,} of {n_terms:,} distinct {what}s "
            f"of {n_items:,} items"
        ]
    else:
        parts = [
            f"{field.name}: the document-frequency filter dropped {dropped:,} of {n_terms:,} distinct {what}s "
            f"({100 * dropped / n_terms:.0f}%) of {n_items:,} items"
        ]
    if too_rare.any():
        parts.append(
            f"{int(too_rare.sum()):,} found in fewer than {min_df} items ({options[0]} {min_df}), "
            f"e.g. {examples(too_rare)}"
        )
        smaller = [m for m in (MIN_DF_FLOOR, 3, 5, 10) if m < min_df]
        if smaller:
            kept = ", ".join(
                f"{options[0]} {m} keeps {int((present & (df >= m) & ~too_common).sum()):,}" for m in smaller
            )
            parts.append(f"{what}s kept with a lower setting: {kept} (now {n_terms - dropped:,})")
    if too_common.any():
        parts.append(
            f"{int(too_common.sum()):,} found in more than {max_df:g} of the items ({options[1]} {max_df:g}), "
            f"e.g. {examples(too_common)}"
        )
    return "; ".join(parts)


def token_cells(counts: sp.csr_matrix, terms: np.ndarray) -> list[str]:
    """One token_seq cell per row: each term repeated `count` times, terms in column order."""
    counts.sort_indices()
    tokens = np.repeat(np.asarray(terms, dtype=object)[counts.indices], counts.data)
    ends = np.cumsum(np.asarray(counts.sum(axis=1)).ravel())
    starts = np.concatenate(([0], ends[:-1]))
    return [" ".join(tokens[a:b]) for a, b in zip(starts, ends)]


@dataclass
class TokenField:
    """One token_seq column of the .item file before the document-frequency filter: row k of `counts` holds
    the k-th item's; `what` names a token in messages and `options` spell `min_df` / `max_df`."""

    name: str
    counts: sp.csr_matrix
    terms: np.ndarray
    min_df: int
    max_df: float
    analyzer: TextAnalyzer | WholeTokenAnalyzer
    raw_column: str = "text"  # the column of a raw-text file of new items that feeds this field (serving)
    what: str = "term"
    options: tuple[str, str] = ("--min-df", "--max-df")
    description: str = "each term repeated once per occurrence"

    def count_keys(self) -> dict[str, str]:
        """The summary's count names: the words field keeps the names it has always had."""
        if self.name == "words":
            return {
                "min_df": "min_df applied (items)",
                "kept": "features (terms after the filter)",
                "tokens": "tokens (term occurrences)",
                "max": "max tokens per item",
                "empty_before": "items with no term before the df filter",
                "empty_after": "items with no term after the df filter (kept, empty words cell)",
            }
        return {
            "min_df": f"{self.name} min_df applied (items)",
            "kept": f"{self.what}s after the filter ({self.name} field)",
            "tokens": f"{self.what} tokens ({self.what} occurrences)",
            "max": f"max {self.what} tokens per item",
            "empty_before": f"items with no {self.what} before the df filter",
            "empty_after": f"items with no {self.what} after the df filter (kept, empty {self.name} cell)",
        }


def tag_field(
    counts: sp.csr_matrix, terms: np.ndarray, min_df: int, max_df: float, separator: str | None = TAG_SEP
) -> TokenField:
    """The `tags` field: token lists kept whole, filtered by their own document-frequency settings."""
    return TokenField(
        "tags",
        counts,
        terms,
        min_df,
        max_df,
        WholeTokenAnalyzer(separator),
        raw_column="tags",
        what="tag",
        options=TAG_DF_OPTIONS,
        description="each tag one token, kept whole",
    )


def _min_df_option(min_df: int | None) -> object:
    return "scaled with the number of items (see 'min_df applied' below)" if min_df is None else min_df


def tag_options(min_df: int | None, max_df: float) -> dict[str, object]:
    """README lines for the tags field."""
    return {
        "tags": "each tag one token: lower case, whitespace and double quotes -> '_', not stemmed",
        "tags_min_df (items)": _min_df_option(min_df),
        "tags_max_df (fraction of items)": max_df,
    }


def make_dataset(
    inter: pd.DataFrame,
    item_ids: Sequence[str],
    fields: Sequence[TokenField],
    *,
    name: str,
    out_dir: str | os.PathLike,
    overwrite: bool,
    skipped: Skipped,
    texts_source: str,
    command: str,
    sources: dict[str, str | os.PathLike],
    options: dict[str, object],
    extra_counts: dict[str, int] | None = None,
) -> ConversionResult:
    """Join interactions (user_id, item_id[, label]) with the items' fields, filter and write the dataset.

    Interactions naming an item without text are dropped, items without interactions left out (RecBole would
    drop them), document frequencies counted over the items that remain; an item with no token left in a field
    keeps an empty cell (a zero feature row) and is counted.
    """
    inter = _usable_interactions(inter, pd.Index(item_ids), skipped, texts_source)
    used = pd.Index(item_ids).isin(inter["item_id"].unique())
    skipped.add("items without interactions (left out)", n=int((~used).sum()))
    rows = np.flatnonzero(used)
    item_ids = pd.Index(item_ids)[rows]
    result_counts = {
        "users": int(inter["user_id"].nunique()),
        "items": len(item_ids),
        "interactions": len(inter),
    }
    if "label" in inter:
        result_counts["likes (label 1)"] = int((inter["label"] == 1).sum())
        result_counts["dislikes (label 0)"] = int((inter["label"] == 0).sum())
    warnings = list(skipped.warnings)
    cells, records = {}, []
    for field in fields:
        cells[field.name], record = _filtered_field(field, rows, result_counts, warnings)
        records.append(record)
    result_counts |= extra_counts or {}
    for line in skipped.lines():
        log.warning("skipped %s", line)
    readme = _readme(command, sources, options, name, fields, inter, result_counts, skipped, warnings)

    def write_analyzer_file(folder: Path) -> None:
        write_analyzer(analyzer_path(folder, name), command, records)

    path = write_dataset(out_dir, name, inter, list(item_ids), cells, readme, overwrite, extra=write_analyzer_file)
    return ConversionResult(path, result_counts, dict(skipped.counts), skipped.lines(), warnings)


def _usable_interactions(inter, item_index, skipped, texts_source):
    """The interactions without repeated (user, item) pairs and naming an item that has text."""
    n_pairs = len(inter)
    inter = inter.drop_duplicates(["user_id", "item_id"], keep="first")
    skipped.add("duplicate user-item pairs (kept the first)", n=n_pairs - len(inter))
    known = inter["item_id"].isin(item_index)
    if not known.all():
        first = inter.loc[~known].iloc[0]
        skipped.add(
            f"interactions naming an item without text in {texts_source}",
            f"user {first.user_id}, item {first.item_id}",
            n=int((~known).sum()),
        )
        inter = inter.loc[known]
    if inter.empty:
        raise ConversionError(
            f"no usable interactions: none names an item that has text in {texts_source} ({skipped.describe()})"
        )
    return inter


def _filtered_field(field, rows, result_counts, warnings):
    """One field's token cells after the document-frequency filter over the kept items ``rows``, and its
    analyzer record; its counts go into ``result_counts``, a filter warning into ``warnings``."""
    counts = field.counts.tocsr()[rows]
    min_df = default_min_df(len(rows)) if field.min_df is None else field.min_df
    empty_before = int((np.diff(counts.indptr) == 0).sum())
    counts, terms, warning = filter_document_frequency(field, counts, min_df)
    if warning:
        warnings.append(warning)
        log.warning("%s", warning)
    lengths = np.asarray(counts.sum(axis=1)).ravel()
    keys = field.count_keys()
    result_counts |= {
        keys["min_df"]: min_df,
        keys["kept"]: len(terms),
        keys["tokens"]: int(lengths.sum()),
        keys["max"]: int(lengths.max()),
        keys["empty_before"]: empty_before,
        keys["empty_after"]: int((lengths == 0).sum()),
    }
    if result_counts[keys["empty_after"]]:
        log.warning(
            "%d items have no %s left in %s after preprocessing and filtering; kept with an empty cell",
            result_counts[keys["empty_after"]],
            field.what,
            field.name,
        )
    record = FieldRecord(field.name, field.analyzer, min_df, field.max_df, terms, field.raw_column)
    return token_cells(counts, terms), record


def _readme(command, sources, options, name, fields, inter, result_counts, skipped, warnings):
    """README.txt of the converted dataset: its sources and options, counts, what was skipped, its files."""
    when = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    columns = ", ".join(f"{field.name}:token_seq ({field.description})" for field in fields)
    return "\n".join(
        [f"RecBole atomic dataset written by recbole_fbsm.convert (convert_{command}) on {when}.", "", "sources:"]
        + [f"  {key}: {Path(value).resolve()}" for key, value in sources.items()]
        + ["", "options:"]
        + [f"  {key}: {value}" for key, value in options.items()]
        + ["", "counts:"]
        + [f"  {key}: {value:,}" for key, value in result_counts.items()]
        + ["", "skipped:"]
        + [f"  {line}" for line in skipped.lines() or ["nothing"]]
        + (["", "warnings:"] + [f"  {line}" for line in warnings] if warnings else [])
        + [
            "",
            "files:",
            f"  {name}.inter  user_id:token, item_id:token"
            + (", label:float (1 like, 0 dislike)" if "label" in inter else ""),
            f"  {name}.item   item_id:token, {columns}",
            f"  {analyzer_path(name, name).name}  how raw text became these tokens (analyzer, filter, vocabulary);"
            " serving applies it to raw text of new items",
            "",
        ]
    )


def default_sep(path: str | os.PathLike) -> str:
    """Tab for .tsv / .tab files, comma otherwise."""
    return "\t" if Path(path).suffix.lower() in (".tsv", ".tab") else ","


def read_interactions(
    path: str | os.PathLike, sep: str, threshold: float | None, header: bool, skipped: Skipped
) -> pd.DataFrame:
    """user_id, item_id (+ label = rating >= threshold as 1.0 / 0.0 when a threshold is given); columns after
    the ones used are ignored (e.g. a timestamp); without a threshold every line is a like."""
    expected = f"'user{sep}item{sep}rating'" if threshold is not None else f"'user{sep}item[{sep}rating]'"
    expected = expected.replace("\t", "<TAB>")
    need = 3 if threshold is not None else 2
    records = list(csv_records(path, sep, header, "interactions"))
    # the third column as numbers (NaN: none, or not a number)
    thirds = np.array([_number(row[2]) if len(row) >= 3 else math.nan for _, row in records])
    if not header:
        _refuse_unskipped_header(path, records, thirds)
    if threshold is None:
        _warn_unused_ratings(path, thirds, skipped)
    users, items, ratings = [], [], []
    for (line, row), rating in zip(records, thirds):
        user, item = (row[0].strip(), row[1].strip()) if len(row) >= 2 else ("", "")
        if len(row) < need or bad_id(user) or bad_id(item) or (threshold is not None and math.isnan(rating)):
            skipped.add(
                f"malformed lines in {Path(path).name}",
                f"{path}:{line}: expected {expected} with ids free of tabs and double quotes"
                + (" and a numeric rating" if threshold is not None else "")
                + f", got {sep.join(row)[:80]!r}",
            )
            continue
        users.append(user)
        items.append(item)
        ratings.append(rating)
    if not users:
        raise ConversionError(f"{path}: no usable interactions, expected lines {expected} ({skipped.describe()})")
    inter = pd.DataFrame({"user_id": users, "item_id": items})
    if threshold is not None:
        inter["label"] = (np.asarray(ratings) >= threshold).astype(np.float64)
    return inter


def _refuse_unskipped_header(path, records, thirds):
    """A first line whose third column is text while the other lines' are numbers is a header: read as data
    it would become a user and an item."""
    if len(records) < 3 or len(records[0][1]) < 3 or not math.isnan(thirds[0]):
        return
    rest = [k for k, (_, row) in enumerate(records) if k and len(row) >= 3]
    if rest and (~np.isnan(thirds[rest])).sum() >= 0.9 * len(rest):
        raise ConversionError(
            f"{path} line {records[0][0]} ({','.join(records[0][1])[:80]!r}) looks like a header: its third column is "
            "not a number while the other lines' are; give --header to skip each file's first line."
        )


def _warn_unused_ratings(path, thirds, skipped):
    """Without --threshold every line is a like: say so when the third column holds ratings."""
    values = thirds[~np.isnan(thirds)]
    if len(values) < 0.9 * len(thirds) or len(np.unique(values)) < 2:
        return
    top = values.max()
    lower = int((values < top).sum())
    skipped.warnings.append(
        f"{path}: the third column holds ratings ({values.min():g} to {top:g}) but no --threshold was given, so every "
        f"line is a like, the {lower:,} rated below {top:g} included; give --threshold (e.g. --threshold {top:g}) "
        "to keep only high ratings as likes and lower ones as dislikes."
    )


def _number(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        return math.nan
    return value if math.isfinite(value) else math.nan


def item_records(path, sep, header, what, expected, skipped):
    """(line number, item id, fields) of each ``item<sep>...`` record with an id RecBole reads back unchanged;
    the others are counted as malformed, showing ``expected``."""
    for line, row in csv_records(path, sep, header, what):
        item = row[0].strip()
        if len(row) < 2 or bad_id(item):
            skipped.add(
                f"malformed lines in {Path(path).name}",
                f"{path}:{line}: expected '{expected}' with an id free of tabs and double quotes, "
                f"got {sep.join(row)[:80]!r}".replace("\t", "<TAB>"),
            )
        else:
            yield line, item, row


def read_item_texts(path: str | os.PathLike, sep: str, header: bool, skipped: Skipped) -> tuple[list[str], list[str]]:
    """Item ids and texts from `item<sep>text` lines; an unquoted text containing the separator is
    joined back, a repeated item keeps its first text."""
    ids, texts, seen = [], [], set()
    for line, item, row in item_records(path, sep, header, "item text", f"item{sep}text", skipped):
        if item in seen:
            skipped.add(f"repeated items in {Path(path).name} (kept the first text)", f"{path}:{line}")
            continue
        seen.add(item)
        ids.append(item)
        texts.append(sep.join(row[1:]).strip())
    if not ids:
        raise ConversionError(f"{path}: no usable item texts, expected lines 'item{sep}text' ({skipped.describe()})")
    return ids, texts


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
    for line, item, row in item_records(path, sep, header, "tags", f"item{sep}tag[{sep}tag...]", skipped):
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


def convert_text(
    inter: str | os.PathLike,
    items: str | os.PathLike,
    name: str,
    out_dir: str | os.PathLike = "dataset",
    *,
    sep: str | None = None,
    threshold: float | None = None,
    header: bool = False,
    min_df: int | None = None,
    max_df: float = PAPER_MAX_DF,
    stem: bool = True,
    stopwords: bool = True,
    overwrite: bool = False,
    tags: str | os.PathLike | None = None,
    tag_sep: str | None = TAG_SEP,
    tags_min_df: int | None = None,
    tags_max_df: float | None = None,
) -> ConversionResult:
    """Convert interactions (`user,item[,rating]`) and item texts (`item,text`) into a RecBole dataset
    (docs/convert.md): `threshold` makes ratings labels (1: rating >= threshold, else 0: a dislike), `tags` a
    second field of whole tags (`item,tag[,tag...]` lines, each field further split on `tag_sep`)."""
    if threshold is not None and not math.isfinite(threshold):
        raise ConversionError(f"threshold (--threshold) must be a finite number, got {threshold!r}")
    tags_min_df, tags_max_df = check_settings(out_dir, name, overwrite, min_df, max_df, tags, tags_min_df, tags_max_df)
    skipped = Skipped()
    interactions = read_interactions(inter, sep or default_sep(inter), threshold, header, skipped)
    item_ids, texts = read_item_texts(items, sep or default_sep(items), header, skipped)
    analyzer = TextAnalyzer.paper(stem, stopwords)
    counts, terms = count_terms(texts, analyzer, source=str(items))
    fields = [TokenField("words", counts, terms, min_df, max_df, analyzer)]
    sources = {"interactions": inter, "item texts": items}
    options = {
        "separator": repr(sep) if sep else "by file extension (tab for .tsv/.tab, comma otherwise)",
        "header line skipped": header,
        "rating threshold (label 1 if rating >= threshold)": threshold
        if threshold is not None
        else "none (implicit likes)",
    } | words_options(min_df, max_df, stem, stopwords)
    if tags is not None:
        tag_counts, tag_terms = read_tag_file(tags, sep or default_sep(tags), tag_sep, header, item_ids, skipped)
        fields.append(tag_field(tag_counts, tag_terms, tags_min_df, tags_max_df, tag_sep))
        sources["tags"] = tags
        options |= tag_options(tags_min_df, tags_max_df) | {"tag separator inside a field": repr(tag_sep)}
    return make_dataset(
        interactions,
        item_ids,
        fields,
        name=name,
        out_dir=out_dir,
        overwrite=overwrite,
        skipped=skipped,
        texts_source=str(items),
        command="text",
        sources=sources,
        options=options,
    )
