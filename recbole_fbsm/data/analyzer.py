"""How raw text became the tokens of a converted dataset, stored beside it so serving can repeat it.

The converter writes `NAME/NAME.analyzer.json`: for each token_seq field of the .item file, the analyzer
(tokeniser pattern, lower-casing, the stop-word list itself, the stemmer; or "whole" tokens for tags),
the document-frequency filter and the resulting vocabulary. `recbole_fbsm.serve` reads it to turn raw
text of new items into exactly the tokens training saw. The stop words are stored as a list, not as
the name "english", so a later scikit-learn with another list cannot change what a stored dataset means.
"""

from __future__ import annotations

import functools
import json
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import snowballstemmer
from sklearn.feature_extraction.text import ENGLISH_STOP_WORDS, CountVectorizer

ANALYZER_FORMAT = "recbole_fbsm analyzer 1"
TOKEN_PATTERN = r"(?u)\b\w\w+\b"  # scikit-learn's default: runs of two or more word characters
SNOWBALL = "snowball english"


def analyzer_path(dataset_folder: str | os.PathLike, name: str | None = None) -> Path:
    """`FOLDER/NAME.analyzer.json` (NAME: the folder's name, as RecBole's dataset files)."""
    folder = Path(dataset_folder)
    return folder / f"{name or folder.name}.analyzer.json"


@dataclass(frozen=True)
class TextAnalyzer:
    """Words of running text -> terms: tokenise, lower-case, drop stop words, stem.

    `words(doc)` gives the tokens after stop-word removal and before stemming, `stem(word)` their term,
    so that serving can say which original words were dropped; `__call__` is both steps.
    """

    stop_words: tuple[str, ...] | None = tuple(sorted(ENGLISH_STOP_WORDS))
    stemmer: str | None = SNOWBALL
    token_pattern: str = TOKEN_PATTERN
    lowercase: bool = True
    kind: str = field(default="text", init=False)

    @classmethod
    def paper(cls, stem: bool = True, stopwords: bool = True) -> TextAnalyzer:
        """The converter's analyzer: scikit-learn's tokeniser and English stop words, Snowball stems."""
        return cls(
            stop_words=tuple(sorted(ENGLISH_STOP_WORDS)) if stopwords else None, stemmer=SNOWBALL if stem else None
        )

    @functools.cached_property
    def words(self):
        vectorizer = CountVectorizer(
            token_pattern=self.token_pattern,
            lowercase=self.lowercase,
            stop_words=list(self.stop_words) if self.stop_words is not None else None,
        )
        return vectorizer.build_analyzer()

    @functools.cached_property
    def stem(self):
        if self.stemmer is None:
            return lambda word: word
        if self.stemmer != SNOWBALL:
            raise ValueError(f"unknown stemmer {self.stemmer!r}; expected {SNOWBALL!r} or none")
        return functools.lru_cache(maxsize=None)(snowballstemmer.stemmer("english").stemWord)

    def __call__(self, doc: str) -> list[str]:
        stem = self.stem
        return [stem(word) for word in self.words(doc)]

    def to_dict(self) -> dict:
        return {
            "kind": "text",
            "token_pattern": self.token_pattern,
            "lowercase": self.lowercase,
            "stop_words": list(self.stop_words) if self.stop_words is not None else None,
            "stemmer": self.stemmer,
        }


@dataclass(frozen=True)
class WholeTokenAnalyzer:
    """A cell of tags -> one token per tag (split on `separator`, each part kept whole).

    Lower case, runs of whitespace and double quotes -> '_' (a token_seq cell is split on spaces and
    RecBole's reader takes quotes for quoting); a tag without any letter or digit gives no token.
    """

    separator: str | None = "|"
    kind: str = field(default="whole", init=False)

    def token(self, tag: str) -> str:
        token = "_".join(tag.replace('"', " ").lower().split())
        return token if any(c.isalnum() for c in token) else ""

    def words(self, cell: str) -> list[str]:
        parts = cell.split(self.separator) if self.separator else [cell]
        return [part.strip() for part in parts if self.token(part)]

    def stem(self, tag: str) -> str:
        return self.token(tag)

    def __call__(self, cell: str) -> list[str]:
        return [self.token(tag) for tag in self.words(cell)]

    def to_dict(self) -> dict:
        return {"kind": "whole", "separator": self.separator, "lowercase": True}


def analyzer_from_dict(spec: dict) -> TextAnalyzer | WholeTokenAnalyzer:
    """The analyzer a stored field description names (ValueError for anything else)."""
    kind = spec.get("kind")
    if kind == "text":
        stop_words = spec.get("stop_words")
        pattern = spec.get("token_pattern", TOKEN_PATTERN)
        try:
            re.compile(pattern)
        except (re.error, TypeError) as error:
            raise ValueError(f"token_pattern {pattern!r} is not a regular expression ({error})") from None
        return TextAnalyzer(
            stop_words=tuple(stop_words) if stop_words is not None else None,
            stemmer=spec.get("stemmer"),
            token_pattern=pattern,
            lowercase=bool(spec.get("lowercase", True)),
        )
    if kind == "whole":
        return WholeTokenAnalyzer(separator=spec.get("separator"))
    raise ValueError(f"unknown analyzer kind {kind!r}; expected 'text' or 'whole'")


@dataclass
class FieldRecord:
    """What the converter did to one token_seq field: analyzer, filter, vocabulary, raw-text column."""

    name: str
    analyzer: TextAnalyzer | WholeTokenAnalyzer
    min_df: int
    max_df: float
    vocabulary: Sequence[str]
    raw_column: str  # the column of a raw-text file of new items that feeds this field

    def to_dict(self) -> dict:
        return {
            "analyzer": self.analyzer.to_dict(),
            "min_df": int(self.min_df),
            "max_df": float(self.max_df),
            "raw_column": self.raw_column,
            "vocabulary": [str(t) for t in self.vocabulary],
        }


def write_analyzer(path: str | os.PathLike, command: str, fields: Sequence[FieldRecord]) -> None:
    document = {
        "format": ANALYZER_FORMAT,
        "written_by": f"recbole_fbsm.convert {command}",
        "fields": {record.name: record.to_dict() for record in fields},
    }
    Path(path).write_text(json.dumps(document, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")


def read_analyzer_document(path: str | os.PathLike) -> dict:
    """The stored analyzer file as plain data, checked (ValueError naming the file when it is not one)."""
    try:
        document = json.loads(Path(path).read_text(encoding="utf-8"))
        analyzer_records(document)
        return document
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as error:
        raise ValueError(f"{path} is not a readable analyzer file of recbole_fbsm.convert: {error}") from None


def analyzer_records(document: dict) -> dict[str, FieldRecord]:
    """{field: FieldRecord} of an analyzer document (the file's JSON, or the copy a model artifact holds)."""
    if document.get("format") != ANALYZER_FORMAT:
        raise ValueError(f"format {document.get('format')!r}, expected {ANALYZER_FORMAT!r}")
    return {
        name: FieldRecord(
            name,
            analyzer_from_dict(spec["analyzer"]),
            spec["min_df"],
            spec["max_df"],
            spec["vocabulary"],
            spec.get("raw_column", name),
        )
        for name, spec in document["fields"].items()
    }


def read_analyzer(path: str | os.PathLike) -> dict[str, FieldRecord]:
    """{field: FieldRecord} of a stored analyzer file; ValueError naming the file when it is not one."""
    return analyzer_records(read_analyzer_document(path))
