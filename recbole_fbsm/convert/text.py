"""Item text -> term counts -> RecBole dataset (the paper's Sec. 5.1 preprocessing), the CSV/TSV converter with its
optional tag file (each tag one token, kept whole: ``WholeTokenAnalyzer``), and the dataset's atomic writing (a folder
beside the target, renamed into place once complete: never a partial dataset where RecBole would load it).

Both converters (this one and `ctr`) end in `make_dataset`, so they treat bad input alike; a term's count is kept by
repeating it in the token_seq cell.
"""

import csv
import io
import math
import os
import re
import shutil
import uuid
from collections import namedtuple
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import pandas as pd
import scipy.sparse as sp
from sklearn.feature_extraction.text import CountVectorizer

from recbole_fbsm.config.conversion import PAPER_MAX_DF, TAG_SEP
from recbole_fbsm.data.analyzer import FieldRecord, TextAnalyzer, WholeTokenAnalyzer, analyzer_path, write_analyzer
from recbole_fbsm.errors import ColdStartError

PAPER_MIN_DF = 20  # keep terms that occur in at least this many items (the paper, on ~25,000 articles)
SMALL_DATA_ITEMS = 1_000  # below this, the filter's effect is always reported
SCALED_MIN_DF = "scaled with the number of items (see 'min_df applied' below)"
# The two kinds of token_seq field: what a token is called in messages, the options of its document-frequency
# filter, its README line, the column of raw text that serving reads for it, and its counts in the summary (the
# words field keeps the names it has always had).
FIELD_KINDS = {
    "words": {
        "what": "term",
        "options": ("--min-df", "--max-df"),
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
        "options": ("--tags-min-df", "--tags-max-df"),
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


class ConversionError(ColdStartError):
    """Input or settings from which no usable dataset can be written; the message says what and where."""


class Skipped(dict):
    """What a conversion left out, {reason: count}, with the first place of each (what a user needs to find the
    problem in a large file), and the doubtful input that was kept (`warnings`, said in the summary and README)."""

    def __init__(self):
        super().__init__()
        self.first, self.warnings = {}, []

    def add(self, reason, where="", n=1):
        if n > 0:
            self[reason] = self.get(reason, 0) + n
            self.first.setdefault(reason, where)

    def lines(self):
        first = self.first
        return [f"{n:,} {reason}" + f" (first: {first[reason]})" * bool(first[reason]) for reason, n in self.items()]

    def describe(self):
        """One line for error messages: what was skipped and where it first happened."""
        return "; ".join(self.lines()) or "nothing skipped"


class ConversionResult(namedtuple("ConversionResult", "path counts skipped skipped_lines warnings")):
    """Where a converted dataset was written and what it holds (the figures also in its README.txt); ``skipped``:
    {reason: count}, ``warnings``: e.g. the df filter dropped many terms on small data."""

    def summary(self):
        counts = [f"  {key}: {value:,}" for key, value in self.counts.items()]
        skipped = ["  skipped:", *(f"    {line}" for line in self.skipped_lines)] if self.skipped_lines else []
        return "\n".join([f"wrote {self.path}", *counts, *skipped, *(f"warning: {line}" for line in self.warnings)])


# One token_seq column ("words" or "tags", see FIELD_KINDS) of the .item file before the document-frequency filter:
# row k of `counts` holds the k-th item's; min_df None: scaled with the number of items (default_min_df).
TokenField = namedtuple("TokenField", "name counts terms min_df max_df analyzer")


def read_text(path, what):
    """The whole of a UTF-8 input file, lines ends kept and a byte order mark (spreadsheets write one) dropped: it
    would otherwise join the first id. An unreadable or non-UTF-8 file is a ConversionError naming it."""
    try:
        with open(path, encoding="utf-8-sig", newline="") as f:
            return f.read()
    except OSError as exc:
        raise ConversionError(f"cannot read {what} file {path}: {exc.strerror}") from exc
    except UnicodeDecodeError as exc:
        raise ConversionError(f"{what} file {path} is not UTF-8 text (byte {exc.start})") from exc


def default_min_df(n_items):
    """`--min-df` when none is given: the paper's 20 items scaled to the data (20 of ~25,000 articles) and kept
    within [2, 20] (a fixed 20 is 7% of a 300-item catalogue; a term of one item links no two items)."""
    return int(min(PAPER_MIN_DF, max(2, round(n_items * PAPER_MIN_DF / 25_000))))


def count_terms(docs, analyzer, source):
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


def count_matrix(item_rows, tokens, n_items):
    """items x tokens counts from (item row, token) pairs; tokens sorted like the word terms."""
    terms, cols = np.unique(np.asarray(tokens, dtype=object).astype(str), return_inverse=True)
    counts = sp.csr_matrix(
        (np.ones(len(cols), dtype=np.int64), (np.asarray(item_rows, dtype=np.int64), cols.ravel())),
        shape=(n_items, len(terms)),
    )
    counts.sum_duplicates()
    return counts, terms.astype(object)


def words_options(min_df, max_df, stem, stopwords):
    """README lines for the words field."""
    return {
        "min_df (items)": SCALED_MIN_DF if min_df is None else min_df,
        "max_df (fraction of items)": max_df,
        "stemming (snowball english)": stem,
        "stop words removed (scikit-learn english list)": stopwords,
    }


def tag_options(min_df, max_df):
    """README lines for the tags field."""
    return {
        "tags": "each tag one token: lower case, whitespace and double quotes -> '_', not stemmed",
        "tags_min_df (items)": SCALED_MIN_DF if min_df is None else min_df,
        "tags_max_df (fraction of items)": max_df,
    }


def filtered_field(field, rows, result_counts, warnings):
    """One field's token cells after the document-frequency filter over the kept items ``rows`` (sklearn's
    semantics: found in [min_df, max_df x items] items), and its analyzer record; its counts go into
    ``result_counts``, a warning when the filter drops more than a third of the distinct terms (or any, on data
    of fewer than SMALL_DATA_ITEMS items) into ``warnings``."""
    counts = field.counts.tocsr()[rows]
    n_items, kind = len(rows), FIELD_KINDS[field.name]
    what, (min_option, max_option) = kind["what"], kind["options"]
    min_df = default_min_df(n_items) if field.min_df is None else field.min_df
    df = np.bincount(counts.indices, minlength=counts.shape[1])  # CSR without duplicate or zero entries
    present, too_rare, too_common = df > 0, df < max(min_df, 1), df > field.max_df * n_items
    keep = ~too_rare & ~too_common
    if not keep.any():
        min_name, max_name = (option.lstrip("-").replace("-", "_") for option in kind["options"])
        raise ConversionError(
            f"the document-frequency filter removes every {what}: {min_name}={min_df} ({min_option}) keeps {what}s in "
            f">= {min_df} items and {max_name}={field.max_df} ({max_option}) keeps {what}s in <= "
            f"{field.max_df * n_items:g} of the {n_items:,} items, but the {present.sum():,} {what}s occur in "
            f"{df[present].min(initial=df.max(initial=0))}..{df.max(initial=0)} items; lower {min_option} or raise "
            f"{max_option}"
        )
    n_terms, dropped = int(present.sum()), int((present & ~keep).sum())
    if dropped and (dropped * 3 > n_terms or n_items < SMALL_DATA_ITEMS):
        warnings.append(
            f"{field.name}: the document-frequency filter dropped {dropped:,} of {n_terms:,} distinct {what}s "
            f"({100 * dropped / n_terms:.0f}%) of {n_items:,} items: {int((present & too_rare).sum()):,} found in "
            f"fewer than {min_df} items ({min_option} {min_df}), {int((present & too_common).sum()):,} in more than "
            f"{field.max_df:g} of them ({max_option} {field.max_df:g})"
        )
    kept, terms = counts[:, keep], field.terms[keep]
    kept.sort_indices()
    lengths = np.asarray(kept.sum(axis=1)).ravel()
    empty_before = int((np.diff(counts.indptr) == 0).sum())
    values = (min_df, len(terms), int(lengths.sum()), int(lengths.max()), empty_before, int((lengths == 0).sum()))
    result_counts |= dict(zip(kind["counts"], values))
    tokens = np.repeat(np.asarray(terms, dtype=object)[kept.indices], kept.data)  # a term once per occurrence
    cells = [" ".join(tokens[a:b]) for a, b in zip(np.cumsum(lengths) - lengths, np.cumsum(lengths))]
    return cells, FieldRecord(field.name, field.analyzer, min_df, field.max_df, terms, kind["raw_column"])


def dataset_readme(name, command, sources, options, counts, skipped, warnings, fields, note=""):
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
            f"  {name}.inter  user_id:token, item_id:token"
            + (", label:float (1 like, 0 dislike)" if "likes (label 1)" in counts else ""),
            f"  {name}.item   item_id:token, "
            + ", ".join(f"{field.name}:token_seq ({FIELD_KINDS[field.name]['description']})" for field in fields),
            f"  {analyzer_path(name, name).name}  how raw text became these tokens (analyzer, filter, vocabulary);"
            " serving applies it to raw text of new items",
            note,
        ]
    )


def make_dataset(inter, item_ids, fields, *, name, out_dir, overwrite, skipped, texts_source, command, **readme):
    """Join interactions (user_id, item_id[, label]) with the items' fields, filter and write the dataset
    (``readme``: dataset_readme's sources, options and note, and ``extra_counts``). Repeated (user, item) pairs keep
    the first, interactions naming an item without text are dropped, items without interactions left out (RecBole
    would drop them), document frequencies counted over the items that remain; an item with no token left in a
    field keeps an empty cell (a zero feature row) and is counted."""
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
    counts |= readme.pop("extra_counts", {})
    text = dataset_readme(name, command, counts=counts, skipped=skipped, warnings=warnings, fields=fields, **readme)
    target = target_folder(out_dir, name, overwrite)
    tmp = target.parent / f".{name}.tmp-{uuid.uuid4().hex[:12]}"  # beside the target: renames are atomic
    tmp.mkdir()  # unlike tempfile.mkdtemp, with the user's usual permissions, which the dataset keeps
    unquoted = {"sep": "\t", "index": False, "quoting": csv.QUOTE_NONE, "lineterminator": "\n", "encoding": "utf-8"}
    try:
        columns = {"user_id": "user_id:token", "item_id": "item_id:token", "label": "label:float"}
        inter[[column for column in columns if column in inter]].rename(columns=columns).to_csv(
            tmp / f"{name}.inter", float_format="%g", **unquoted
        )
        items = {"item_id:token": list(pd.Index(item_ids)[rows])}
        items |= {f"{field.name}:token_seq": field_cells for field, field_cells in zip(fields, cells)}
        pd.DataFrame(items).to_csv(tmp / f"{name}.item", **unquoted)
        (tmp / "README.txt").write_text(text, encoding="utf-8")
        write_analyzer(analyzer_path(tmp, name), command, records)
        _move_into_place(tmp, target, overwrite)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return ConversionResult(target, counts, dict(skipped), skipped.lines(), warnings)


def target_folder(out_dir, name, overwrite):
    """The dataset folder `out_dir/name` (a plain name: a folder and file stem); refuses an existing one unless
    overwrite (checked before work)."""
    if not name or name in (".", "..") or any(c in name for c in "/\\") or name != name.strip():
        raise ConversionError(f"dataset name (--name) must be a plain folder name, got {name!r}")
    target = Path(out_dir) / name
    if target.exists() and not overwrite:
        raise ConversionError(
            f"output dataset folder {target} already exists; pass --overwrite (overwrite=True) to replace it"
        )
    try:
        Path(out_dir).mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConversionError(
            f"output folder {out_dir} (--out) cannot be created ({exc.strerror or exc}); expected a writable folder"
        ) from None
    if not os.access(out_dir, os.W_OK):
        raise ConversionError(f"output folder {out_dir} (--out) is not writable")
    return target


def _move_into_place(tmp, target, overwrite):
    """Rename the finished folder onto `target`; an old dataset is moved aside first, then deleted."""
    old = target.parent / f".{target.name}.old-{uuid.uuid4().hex[:12]}"
    if target.exists():
        if not overwrite:  # appeared while we were converting
            raise ConversionError(f"output dataset folder {target} already exists; pass --overwrite to replace it")
        os.rename(target, old)
    os.rename(tmp, target)
    shutil.rmtree(old, ignore_errors=True)


# ----------------------------------------------------------------------------------------------- CSV / TSV
def default_sep(path):
    """Tab for .tsv / .tab files, comma otherwise."""
    return "\t" if Path(path).suffix.lower() in (".tsv", ".tab") else ","


def csv_records(path, sep, header, what):
    """(line number, fields) of each non-blank CSV record."""
    reader = csv.reader(io.StringIO(read_text(path, what), newline=""), delimiter=sep)
    try:
        yield from ((reader.line_num, row) for k, row in enumerate(reader) if row and not (header and k == 0))
    except csv.Error as exc:
        raise ConversionError(f"{path}:{reader.line_num + 1}: unreadable {what} record: {exc}") from exc


def finite(text):
    """The finite number ``text`` holds, else None."""
    try:
        return float(text) if math.isfinite(float(text)) else None
    except ValueError:
        return None


def well_formed(path, sep, row, line, expected, fields, skipped, ids=1, ok=True):
    """The first ``ids`` fields of ``row``, stripped, when it is ``ok``, has ``fields`` fields and ids RecBole reads
    back unchanged (not empty, no tab, line break or double quote); else None, the line counted as malformed."""
    cells = [cell.strip() for cell in row[:ids]]
    if ok and len(row) >= fields and all(cell and not re.search('[\t\n\r"]', cell) for cell in cells):
        return cells
    where = f"{path}:{line}: expected {expected}, got {sep.join(row)[:80]!r}"
    skipped.add(f"malformed lines in {Path(path).name}", where.replace("\t", "<TAB>"))


def read_interactions(path, sep, threshold, header, skipped):
    """user_id, item_id (+ label = rating >= threshold as 1.0 / 0.0 when a threshold is given); columns after
    the ones used are ignored (e.g. a timestamp); without a threshold every line is a like."""
    rated = threshold is not None
    expected = f"'user{sep}item{sep}rating'" if rated else f"'user{sep}item[{sep}rating]'"
    records = list(csv_records(path, sep, header, "interactions"))
    numbers = [finite(row[2]) if len(row) > 2 else None for _, row in records]
    rest = [number is not None for (_, row), number in zip(records[1:], numbers[1:]) if len(row) >= 3]
    if (
        not header
        and len(records) >= 3
        and len(records[0][1]) >= 3
        and numbers[0] is None
        and rest
        and sum(rest) >= 0.9 * len(rest)
    ):
        raise ConversionError(  # read as data, it would be a user and an item
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
    rule = expected + " with ids free of tabs and double quotes" + (" and a numeric rating" if rated else "")
    kept = [
        (ids, number)
        for (line, row), number in zip(records, numbers)
        if (ids := well_formed(path, sep, row, line, rule, 2 + rated, skipped, 2, not rated or number is not None))
    ]
    if not kept:
        raise ConversionError(
            f"{path}: no usable interactions, expected lines {expected} ({skipped.describe()})".replace("\t", "<TAB>")
        )
    inter = pd.DataFrame([ids for ids, _ in kept], columns=["user_id", "item_id"])
    if rated:
        inter["label"] = (np.array([number for _, number in kept], dtype=np.float64) >= threshold).astype(np.float64)
    return inter


def read_item_texts(path, sep, header, skipped):
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


def read_tag_file(path, sep, tag_sep, header, item_ids, skipped):
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
    return count_matrix(items, tokens, len(item_ids))


def convert_text(
    inter,
    items,
    name,
    out_dir="dataset",
    *,
    sep=None,
    threshold=None,
    header=False,
    min_df=None,
    max_df=PAPER_MAX_DF,
    stem=True,
    stopwords=True,
    overwrite=False,
    tags=None,
    tag_sep=TAG_SEP,
    tags_min_df=None,
    tags_max_df=None,
):
    """Convert interactions (`user,item[,rating]`) and item texts (`item,text`) into a RecBole dataset
    (docs/convert.md): `threshold` makes ratings labels (1: rating >= threshold, else 0: a dislike), `tags` a
    second field of whole tags (`item,tag[,tag...]` lines, each field further split on `tag_sep`; `tags_min_df`
    and `tags_max_df` default to the words')."""
    target_folder(out_dir, name, overwrite)  # before any work
    skipped = Skipped()
    interactions = read_interactions(inter, sep or default_sep(inter), threshold, header, skipped)
    item_ids, texts = read_item_texts(items, sep or default_sep(items), header, skipped)
    analyzer = TextAnalyzer.paper(stem, stopwords)
    fields = [TokenField("words", *count_terms(texts, analyzer, source=str(items)), min_df, max_df, analyzer)]
    sources = {"interactions": inter, "item texts": items}
    options = {
        "separator": repr(sep) if sep else "by file extension (tab for .tsv/.tab, comma otherwise)",
        "header line skipped": header,
        "rating threshold (label 1 if rating >= threshold)": "none (implicit likes)"
        if threshold is None
        else threshold,
    } | words_options(min_df, max_df, stem, stopwords)
    if tags is not None:
        tags_min_df, tags_max_df = min_df if tags_min_df is None else tags_min_df, tags_max_df or max_df
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
