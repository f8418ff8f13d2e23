"""Item text -> term counts -> RecBole dataset (the paper's Sec. 5.1 preprocessing), and the CSV/TSV converter
with its optional tag file (each tag one token, kept whole: ``WholeTokenAnalyzer``).

Both converters (this one and `ctr`) start with `check_settings` and end in `make_dataset`, so they treat bad
input alike; a term's count is kept by repeating it in the token_seq cell.
"""

import math
import os
import re
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

from .atomic import ConversionError, ConversionResult, Skipped, csv_records, target_folder, write_dataset

PAPER_MIN_DF = 20  # keep terms that occur in at least this many items (the paper, on ~25,000 articles)
PAPER_ITEMS = 25_000  # the size of the data the paper's 20 items were chosen for (CiteULike)
MIN_DF_FLOOR = 2  # a term found in one item links no two items
SMALL_DATA_ITEMS = 1_000  # below this, the filter's effect is always reported
WORD_DF_OPTIONS = ("--min-df", "--max-df")
TAG_DF_OPTIONS = ("--tags-min-df", "--tags-max-df")
SCALED_MIN_DF = "scaled with the number of items (see 'min_df applied' below)"


def default_min_df(n_items: int) -> int:
    """`--min-df` when none is given: the paper's 20 items scaled to the data and kept within [2, 20] (a fixed 20
    is 0.08% of CiteULike but 7% of a 300-item catalogue, where it removes most real words)."""
    return int(min(PAPER_MIN_DF, max(MIN_DF_FLOOR, round(n_items * PAPER_MIN_DF / PAPER_ITEMS))))


def count_terms(
    docs: Sequence[str], analyzer: Callable[[str], list[str]], source: str
) -> tuple[sp.csr_matrix, np.ndarray]:
    """Sparse docs x terms count matrix and its (sorted) terms; fails when no document has any term."""
    vectorizer = CountVectorizer(analyzer=analyzer, dtype=np.int64)
    try:
        counts = vectorizer.fit_transform(docs)
    except ValueError as exc:  # sklearn: "empty vocabulary; perhaps the documents only contain stop words"
        raise ConversionError(
            f"{source}: no terms at all after tokenising and stop-word removal ({len(docs):,} texts); "
            "expected texts with words of two or more letters"
        ) from exc
    return counts.tocsr(), vectorizer.get_feature_names_out()


def count_matrix(item_rows: np.ndarray, tokens: Sequence[str], n_items: int) -> tuple[sp.csr_matrix, np.ndarray]:
    """items x tokens counts from (item row, token) pairs; tokens sorted like the word terms."""
    terms, cols = np.unique(np.asarray(tokens, dtype=object).astype(str), return_inverse=True)
    counts = sp.csr_matrix(
        (np.ones(len(cols), dtype=np.int64), (np.asarray(item_rows, dtype=np.int64), cols.ravel())),
        shape=(n_items, len(terms)),
    )
    counts.sum_duplicates()
    return counts, terms.astype(object)


def check_settings(out_dir, name, overwrite, min_df, max_df, tags, tags_min_df, tags_max_df):
    """Both converters' filter settings and output folder, checked before any work; returns the tags' min_df
    and max_df (default: the words')."""
    tags_df = (min_df if tags_min_df is None else tags_min_df, max_df if tags_max_df is None else tags_max_df)
    for (low, high), options in [((min_df, max_df), WORD_DF_OPTIONS)] + [(tags_df, TAG_DF_OPTIONS)] * bool(tags):
        low_name, high_name = (option.lstrip("-").replace("-", "_") for option in options)
        if low is not None and (isinstance(low, bool) or not isinstance(low, (int, np.integer)) or low < 0):
            raise ConversionError(f"{low_name} ({options[0]}) must be a whole number of items >= 0, got {low!r}")
        if isinstance(high, bool) or not isinstance(high, (int, float)) or not 0 < high <= 1:
            raise ConversionError(f"{high_name} ({options[1]}) must be a fraction of items in (0, 1], got {high!r}")
    target_folder(out_dir, name, overwrite)
    return tags_df


def words_options(min_df, max_df, stem, stopwords):
    """README lines for the words field."""
    return {
        "min_df (items)": SCALED_MIN_DF if min_df is None else min_df,
        "max_df (fraction of items)": max_df,
        "stemming (snowball english)": stem,
        "stop words removed (scikit-learn english list)": stopwords,
    }


def tag_options(min_df: int | None, max_df: float) -> dict[str, object]:
    """README lines for the tags field."""
    return {
        "tags": "each tag one token: lower case, whitespace and double quotes -> '_', not stemmed",
        "tags_min_df (items)": SCALED_MIN_DF if min_df is None else min_df,
        "tags_max_df (fraction of items)": max_df,
    }


# The two kinds of token_seq field: what a token is called in messages, the options of its document-frequency
# filter, its README line, the column of raw text that serving reads for it, and its counts in the summary (the
# words field keeps the names it has always had).
FIELD_KINDS = {
    "words": {
        "what": "term",
        "options": WORD_DF_OPTIONS,
        "description": "each term repeated once per occurrence",
        "raw_column": "text",
        "counts": (
            "min_df applied (items)",
            "features (terms after the filter)",
            "tokens (term occurrences)",
            "max tokens per item",
            "items with no term before the df filter",
            "items with no term after the df filter (kept, empty words cell)",
        ),
    },
    "tags": {
        "what": "tag",
        "options": TAG_DF_OPTIONS,
        "description": "each tag one token, kept whole",
        "raw_column": "tags",
        "counts": (
            "tags min_df applied (items)",
            "tags after the filter (tags field)",
            "tag tokens (tag occurrences)",
            "max tag tokens per item",
            "items with no tag before the df filter",
            "items with no tag after the df filter (kept, empty tags cell)",
        ),
    },
}


@dataclass
class TokenField:
    """One token_seq column ("words" or "tags", see FIELD_KINDS) of the .item file before the document-frequency
    filter: row k of `counts` holds the k-th item's."""

    name: str
    counts: sp.csr_matrix
    terms: np.ndarray
    min_df: int | None  # None: scaled with the number of items (default_min_df)
    max_df: float
    analyzer: TextAnalyzer | WholeTokenAnalyzer


def filter_warning(field: TokenField, df: np.ndarray, n_items: int, min_df: int) -> str | None:
    """A warning when the filter removes more than a third of the distinct terms, or any on data of fewer than
    SMALL_DATA_ITEMS items: how many, the most frequent dropped, and what each smaller `--min-df` would keep."""
    terms, max_df, kind = field.terms, field.max_df, FIELD_KINDS[field.name]
    what, options = kind["what"], kind["options"]
    present = df > 0
    too_rare = present & (df < max(min_df, 1))
    too_common = present & (df > max_df * n_items)
    n_terms, dropped = int(present.sum()), int((too_rare | too_common).sum())
    if not dropped or (dropped * 3 <= n_terms and n_items >= SMALL_DATA_ITEMS):
        return None

    def examples(mask):
        order = np.flatnonzero(mask)[np.argsort(-df[mask], kind="stable")][:5]
        return ", ".join(f"{terms[k]!r} ({df[k]} item{'s' if df[k] != 1 else ''})" for k in order)

    paper = min_df == PAPER_MIN_DF == default_min_df(n_items)  # citeulike-t: what the paper did, not a mishap
    parts = [
        f"{field.name}: the paper's document-frequency filter ({options[0]} {min_df}: {what}s in fewer than "
        f"{min_df} items are left out) kept {n_terms - dropped:,} of {n_terms:,} distinct {what}s of {n_items:,} items"
        if paper
        else f"{field.name}: the document-frequency filter dropped {dropped:,} of {n_terms:,} distinct {what}s "
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


def filtered_field(field, rows, result_counts, warnings):
    """One field's token cells after the document-frequency filter over the kept items ``rows`` (sklearn's
    semantics: found in [min_df, max_df x items] items), and its analyzer record; its counts go into
    ``result_counts``, a filter warning into ``warnings``."""
    counts = field.counts.tocsr()[rows]
    n_items, kind = len(rows), FIELD_KINDS[field.name]
    what, (min_option, max_option) = kind["what"], kind["options"]
    min_df = default_min_df(n_items) if field.min_df is None else field.min_df
    df = np.bincount(counts.indices, minlength=counts.shape[1])  # CSR without duplicate or zero entries
    keep = (df >= max(min_df, 1)) & (df <= field.max_df * n_items)
    if not keep.any():
        present = df[df > 0]
        min_name, max_name = (opt.lstrip("-").replace("-", "_") for opt in kind["options"])
        raise ConversionError(
            f"the document-frequency filter removes every {what}: {min_name}={min_df} ({min_option}) keeps {what}s in "
            f">= {min_df} items and {max_name}={field.max_df} ({max_option}) keeps {what}s in <= "
            f"{field.max_df * n_items:g} of the {n_items:,} items, but the {present.size:,} {what}s occur in "
            f"{present.min() if present.size else 0}..{present.max() if present.size else 0} items; "
            f"lower {min_option} or raise {max_option}"
        )
    warnings += [w for w in [filter_warning(field, df, n_items, min_df)] if w]
    kept, terms = counts[:, keep], field.terms[keep]
    kept.sort_indices()
    lengths = np.asarray(kept.sum(axis=1)).ravel()
    empty_before = int((np.diff(counts.indptr) == 0).sum())
    values = (min_df, len(terms), int(lengths.sum()), int(lengths.max()), empty_before, int((lengths == 0).sum()))
    result_counts |= dict(zip(kind["counts"], values))
    tokens = np.repeat(np.asarray(terms, dtype=object)[kept.indices], kept.data)  # a term once per occurrence
    cells = [" ".join(tokens[a:b]) for a, b in zip(np.cumsum(lengths) - lengths, np.cumsum(lengths))]
    return cells, FieldRecord(field.name, field.analyzer, min_df, field.max_df, terms, kind["raw_column"])


def dataset_readme(name, command, sources, options, counts, skipped, warnings, fields, labelled, note=""):
    """The dataset's README.txt: where it came from, the options, counts, what was skipped, the files."""
    return "\n".join(
        [
            f"RecBole atomic dataset written by recbole_fbsm.convert (convert_{command}) on "
            f"{datetime.now(timezone.utc).strftime('%Y-%m-%d %H:%M UTC')}.",
            "",
            "sources:",
            *[f"  {key}: {Path(value).resolve()}" for key, value in sources.items()],
            "",
            "options:",
            *[f"  {key}: {value}" for key, value in options.items()],
            "",
            "counts:",
            *[f"  {key}: {value:,}" for key, value in counts.items()],
            "",
            "skipped:",
            *[f"  {line}" for line in skipped.lines() or ["nothing"]],
            *(["", "warnings:"] + [f"  {line}" for line in warnings] if warnings else []),
            "",
            "files:",
            f"  {name}.inter  user_id:token, item_id:token" + (", label:float (1 like, 0 dislike)" if labelled else ""),
            f"  {name}.item   item_id:token, "
            + ", ".join(f"{field.name}:token_seq ({FIELD_KINDS[field.name]['description']})" for field in fields),
            f"  {analyzer_path(name, name).name}  how raw text became these tokens (analyzer, filter, vocabulary);"
            " serving applies it to raw text of new items",
            note,
        ]
    )


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
    note: str = "",
) -> ConversionResult:
    """Join interactions (user_id, item_id[, label]) with the items' fields, filter and write the dataset.

    Repeated (user, item) pairs keep the first, interactions naming an item without text are dropped, items
    without interactions left out (RecBole would drop them), document frequencies counted over the items that
    remain; an item with no token left in a field keeps an empty cell (a zero feature row) and is counted.
    """
    deduplicated = inter.drop_duplicates(["user_id", "item_id"], keep="first")
    skipped.add("duplicate user-item pairs (kept the first)", n=len(inter) - len(deduplicated))
    known = deduplicated["item_id"].isin(pd.Index(item_ids))
    if not known.all():
        first = deduplicated.loc[~known].iloc[0]
        where = f"user {first.user_id}, item {first.item_id}"
        skipped.add(f"interactions naming an item without text in {texts_source}", where, n=int((~known).sum()))
    inter = deduplicated.loc[known]
    if inter.empty:
        raise ConversionError(
            f"no usable interactions: none names an item that has text in {texts_source} ({skipped.describe()})"
        )
    used = pd.Index(item_ids).isin(inter["item_id"].unique())
    skipped.add("items without interactions (left out)", n=int((~used).sum()))
    rows = np.flatnonzero(used)
    counts = {"users": int(inter["user_id"].nunique()), "items": len(rows), "interactions": len(inter)}
    if "label" in inter:
        counts |= {
            "likes (label 1)": int((inter["label"] == 1).sum()),
            "dislikes (label 0)": int((inter["label"] == 0).sum()),
        }
    warnings = list(skipped.warnings)
    cells, records = zip(*(filtered_field(field, rows, counts, warnings) for field in fields))
    counts |= extra_counts or {}
    readme = dataset_readme(name, command, sources, options, counts, skipped, warnings, fields, "label" in inter, note)
    item_fields = {field.name: field_cells for field, field_cells in zip(fields, cells)}
    path = write_dataset(
        out_dir,
        name,
        inter,
        list(pd.Index(item_ids)[rows]),
        item_fields,
        readme,
        overwrite,
        extra=lambda folder: write_analyzer(analyzer_path(folder, name), command, records),
    )
    return ConversionResult(path, counts, dict(skipped.counts), skipped.lines(), warnings)


def default_sep(path: str | os.PathLike) -> str:
    """Tab for .tsv / .tab files, comma otherwise."""
    return "\t" if Path(path).suffix.lower() in (".tsv", ".tab") else ","


def finite(text: str) -> float | None:
    """The finite number ``text`` holds, else None."""
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def well_formed(path, sep, row, line, expected, fields, skipped, ids=1, ok=True):
    """The first ``ids`` fields of ``row``, stripped, when it is ``ok``, has ``fields`` fields and ids RecBole reads
    back unchanged (not empty, no tab, line break or double quote); else None, the line counted as malformed."""
    cells = [cell.strip() for cell in row[:ids]]
    if ok and len(row) >= fields and all(cell and not re.search('[\t\n\r"]', cell) for cell in cells):
        return cells
    where = f"{path}:{line}: expected {expected}, got {sep.join(row)[:80]!r}"
    skipped.add(f"malformed lines in {Path(path).name}", where.replace("\t", "<TAB>"))
    return None


def read_interactions(path, sep: str, threshold: float | None, header: bool, skipped: Skipped) -> pd.DataFrame:
    """user_id, item_id (+ label = rating >= threshold as 1.0 / 0.0 when a threshold is given); columns after
    the ones used are ignored (e.g. a timestamp); without a threshold every line is a like."""
    rated = threshold is not None
    expected = f"'user{sep}item{sep}rating'" if rated else f"'user{sep}item[{sep}rating]'"
    ids_rule = " with ids free of tabs and double quotes" + (" and a numeric rating" if rated else "")
    records = list(csv_records(path, sep, header, "interactions"))
    numbers = [finite(row[2]) if len(row) > 2 else None for _, row in records]
    rest = [number for (_, row), number in zip(records[1:], numbers[1:]) if len(row) >= 3]
    if not header and len(records) >= 3 and len(records[0][1]) >= 3 and numbers[0] is None and rest:
        if sum(number is not None for number in rest) >= 0.9 * len(rest):  # read as data: a user and an item
            raise ConversionError(
                f"{path} line {records[0][0]} ({','.join(records[0][1])[:80]!r}) looks like a header: its third "
                "column is not a number while the other lines' are; give --header to skip each file's first line."
            )
    ratings = [number for number in numbers if number is not None]
    if not rated and len(ratings) >= 0.9 * len(records) and len(set(ratings)) >= 2:
        low, high = min(ratings), max(ratings)
        skipped.warnings.append(
            f"{path}: the third column holds ratings ({low:g} to {high:g}) but no --threshold was given, so every "
            f"line is a like, the {sum(rating < high for rating in ratings):,} rated below {high:g} included; give "
            f"--threshold (e.g. --threshold {high:g}) to keep only high ratings as likes and lower ones as dislikes."
        )
    kept = [
        (ids, number)
        for (line, row), number in zip(records, numbers)
        if (
            ids := well_formed(
                path, sep, row, line, expected + ids_rule, 2 + rated, skipped, 2, not rated or number is not None
            )
        )
    ]
    if not kept:
        expected = expected.replace("\t", "<TAB>")
        raise ConversionError(f"{path}: no usable interactions, expected lines {expected} ({skipped.describe()})")
    inter = pd.DataFrame([ids for ids, _ in kept], columns=["user_id", "item_id"])
    if rated:
        inter["label"] = (np.array([number for _, number in kept], dtype=np.float64) >= threshold).astype(np.float64)
    return inter


def read_item_texts(path, sep: str, header: bool, skipped: Skipped) -> tuple[list[str], list[str]]:
    """Item ids and texts from `item<sep>text` lines; an unquoted text containing the separator is
    joined back, a repeated item keeps its first text."""
    texts = {}
    for line, row in csv_records(path, sep, header, "item text"):
        ids = well_formed(
            path, sep, row, line, f"'item{sep}text' with an id free of tabs and double quotes", 2, skipped
        )
        if ids and ids[0] in texts:
            skipped.add(f"repeated items in {Path(path).name} (kept the first text)", f"{path}:{line}")
        elif ids:
            texts[ids[0]] = sep.join(row[1:]).strip()
    if not texts:
        raise ConversionError(f"{path}: no usable item texts, expected lines 'item{sep}text' ({skipped.describe()})")
    return list(texts), list(texts.values())


def read_tag_file(path, sep: str, tag_sep: str | None, header: bool, item_ids: Sequence[str], skipped: Skipped):
    """Items x tags counts from `item<sep>tag[<sep>tag...]` lines (each field further split on `tag_sep`), rows
    aligned with `item_ids`; an item's lines add up, and a repeated tag counts twice, like a repeated word."""
    expected = f"'item{sep}tag[{sep}tag...]' with an id free of tabs and double quotes"
    rows, analyze, tokens, items = {item: k for k, item in enumerate(item_ids)}, WholeTokenAnalyzer(tag_sep), [], []
    for line, row in csv_records(path, sep, header, "tags"):
        ids = well_formed(path, sep, row, line, expected, 2, skipped)
        if ids and ids[0] not in rows:
            skipped.add(f"tag lines naming an item without text in {Path(path).name}", f"{path}:{line}")
        elif ids:
            found = [token for cell in row[1:] for token in analyze(cell)]
            tokens += found
            items += [rows[ids[0]]] * len(found)
    if not tokens:
        raise ConversionError(
            f"{path}: no usable tag of an item with text, expected lines 'item{sep}tag[{sep}tag...]' "
            f"({skipped.describe()})".replace("\t", "<TAB>")
        )
    return count_matrix(np.array(items, dtype=np.int64), tokens, len(item_ids))


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
        "rating threshold (label 1 if rating >= threshold)": "none (implicit likes)"
        if threshold is None
        else threshold,
    } | words_options(min_df, max_df, stem, stopwords)
    if tags is not None:
        tag_counts = read_tag_file(tags, sep or default_sep(tags), tag_sep, header, item_ids, skipped)
        fields.append(TokenField("tags", *tag_counts, tags_min_df, tags_max_df, WholeTokenAnalyzer(tag_sep)))
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
