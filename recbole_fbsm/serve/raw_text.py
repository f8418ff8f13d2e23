"""Raw text of new items -> the tokens training saw, through the analyzer the converter stored (``NAME.analyzer.json``,
copied into the artifact); a field it does not describe is split as RecBole splits it."""

import csv
import os
from collections import Counter, defaultdict
from dataclasses import dataclass, field

from recbole.utils import FeatureType

from recbole_fbsm.convert.text import default_sep
from recbole_fbsm.errors import ColdStartError


@dataclass
class Tokenized:
    """Token lists of one field for every new item, and what the analyzer made of the words."""

    cells: list  # per item: the field's tokens
    origin: dict = field(default_factory=dict)  # token -> Counter of the original words that gave it
    analyzer: object = None  # the stored analyzer, when the cells were raw text


def tokenize_field(values, name, served, raw):
    """The tokens of field ``name`` for each cell of ``values``: raw text through the stored analyzer
    (remembering which words gave each token), else RecBole's own reading of pre-tokenised cells."""
    record = served.analyzers.get(name)
    if raw and record is not None:
        analyzer, cells, origin = record.analyzer, [], defaultdict(Counter)
        for value in values:
            words = analyzer.words(str(value))
            cells.append([analyzer.stem(word) for word in words])
            for word, token in zip(words, cells[-1]):
                origin[token][word] += 1
        return Tokenized(cells, dict(origin), analyzer)
    if served.dataset.field2type[name] == FeatureType.TOKEN_SEQ:
        separator = served.config["seq_separator"] or " "
        return Tokenized([[t for t in str(value).split(separator) if t] for value in values])
    return Tokenized([[str(value)] if str(value) != "" else [] for value in values])


def read_text_table(path, served):
    """(item ids, {field: raw cells}) of a CSV/TSV file with a header line: the id column is the item id field's
    or the first; a feature field's is its own or the raw-text column the converter recorded (``text`` for
    ``words``); other columns are ignored."""
    separator = default_sep(path)  # tab for .tsv / .tab, comma otherwise, as `convert text`
    try:
        with open(path, newline="", encoding=served.config["encoding"] or "utf-8") as handle:
            reader = csv.reader(handle, delimiter=separator)
            rows = [(reader.line_num, row) for row in reader if row]  # a quoted cell may span lines
    except (OSError, UnicodeDecodeError, csv.Error) as error:
        raise ColdStartError(
            f"new-item file {path} cannot be read as {'TSV' if separator == chr(9) else 'CSV'}: {error}"
        ) from None
    if not rows:
        raise ColdStartError(f"new-item file {path} is empty: expected a header line and one row per new item.")
    header = [column.strip() for column in rows[0][1]]
    iid = served.iid_field
    id_column = header.index(iid) if iid in header else 0
    columns = {}
    for name in served.fields:
        record = served.analyzers.get(name)
        choices = [name] + ([record.raw_column] if record is not None and record.raw_column != name else [])
        found = [c for c in choices if c in header]
        if not found:
            raise ColdStartError(
                f"new-item file {path} has no column for feature field {name!r}: expected a column named "
                f"{' or '.join(repr(c) for c in choices)}; the header has {header}."
            )
        columns[name] = header.index(found[0])
    body = rows[1:]
    if not body:
        raise ColdStartError(f"new-item file {path} has a header but no item rows: expected one row per new item.")
    for relation, test in (("fewer", lambda n: n < len(header)), ("more", lambda n: n > len(header))):
        wrong = [line for line, row in body if test(len(row))]
        if wrong:  # a short row is not read as empty cells, a long row's extra cell is not dropped
            raise ColdStartError(
                f"new-item file {path}: line(s) {wrong[:10]} have {relation} than the header's {len(header)} columns "
                f"(separator {separator!r}, from the file extension)."
            )
    tokens = [row[id_column].strip() for _, row in body]
    return tokens, {name: [row[k] for _, row in body] for name, k in columns.items()}


def is_atomic_header(path, separator):
    """True when the first line looks like an atomic file's header: every column 'field:type'."""
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            first = handle.readline().rstrip("\r\n")
    except OSError:
        return True  # let the atomic reader report the problem
    return not first.strip() or all(":" in column for column in first.split(separator))


def dropped_words_message(name, unknown, origin, analyzer):
    """'words: 3 of 25 words dropped after stop-word removal and stemming ... (e.g. 'fertilizer' -> 'fertil')'
    for the unknown tokens of one analysed field."""
    examples = []
    for token, _ in unknown.most_common():
        words = origin.get(token.partition(":")[2])
        if words:
            word, term = words.most_common(1)[0][0], token.partition(":")[2]
            examples.append(f"{word!r} -> {term!r}" if word != term else repr(word))
        if len(examples) == 5:
            break
    total = sum(sum(words.values()) for words in origin.values())
    dropped = sum(unknown.values())
    if analyzer.kind == "whole":
        return f"{name}: {dropped} of {total} tags not in the training vocabulary (e.g. {', '.join(examples)})"
    parts = {"stop-word removal": analyzer.stop_words, "stemming": analyzer.stemmer}
    steps = [step for step, part in parts.items() if part is not None]
    after = f" after {' and '.join(steps)}" if steps else ""
    return (
        f"{name}: {dropped} of {total} words dropped{after}, as their terms are not in the training vocabulary "
        f"(e.g. {', '.join(examples)})"
    )


def raw_text_hint(unknown, analyzers, known_columns):
    """For a pre-tokenised file: how many unknown tokens would be known after the dataset's analyzer (the
    file then probably holds raw words), with an example; None when none would."""
    helped, example = 0, None
    for token, count in unknown.items():
        name, _, value = token.partition(":")
        record = analyzers.get(name)
        if record is None:
            continue
        terms = record.analyzer(value)
        if terms and all(f"{name}:{t}" in known_columns for t in terms):
            helped += count
            example = example or f"{value!r} -> {' '.join(terms)!r}"
    if not helped:
        return None
    return (
        f"{helped} of them become known terms through the dataset's analyzer (e.g. {example}): the file seems "
        "to hold raw text; give it as a CSV/TSV file or with --raw-text (raw_text=True) to analyse it as training did"
    )


def existing_file(path):
    if not os.path.isfile(path):
        raise ColdStartError(f"new-item file {path} not found.")
