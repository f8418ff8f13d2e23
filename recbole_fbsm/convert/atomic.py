"""Writing RecBole atomic files (.inter / .item) atomically (a folder beside the target, renamed into place once
complete: never a partial dataset where RecBole would load it), and the bookkeeping shared by the converters."""

import csv
import io
import os
import shutil
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from recbole_fbsm.errors import ColdStartError


class ConversionError(ColdStartError):
    """Input or settings from which no usable dataset can be written; the message says what and where."""


def read_text(path: str | os.PathLike, what: str) -> str:
    """The whole of a UTF-8 input file, lines ends kept and a byte order mark (spreadsheets write one) dropped: it
    would otherwise join the first id. An unreadable or non-UTF-8 file is a ConversionError naming it."""
    try:
        with open(path, encoding="utf-8-sig", newline="") as f:
            return f.read()
    except OSError as exc:
        raise ConversionError(f"cannot read {what} file {path}: {exc.strerror}") from exc
    except UnicodeDecodeError as exc:
        raise ConversionError(f"{what} file {path} is not UTF-8 text (byte {exc.start})") from exc


def csv_records(path: str | os.PathLike, sep: str, header: bool, what: str) -> Iterator[tuple[int, list[str]]]:
    """(line number, fields) of each non-blank CSV record."""
    reader = csv.reader(io.StringIO(read_text(path, what), newline=""), delimiter=sep)
    try:
        for k, row in enumerate(reader):
            if row and not (header and k == 0):
                yield reader.line_num, row
    except csv.Error as exc:
        raise ConversionError(f"{path}:{reader.line_num + 1}: unreadable {what} record: {exc}") from exc


class Skipped:
    """Counts what a conversion left out, by reason, with the first place of each: what a user needs to find the
    problem in a large file."""

    def __init__(self) -> None:
        self.counts: dict[str, int] = {}
        self.first: dict[str, str] = {}
        self.warnings: list[str] = []  # doubtful input that was kept, said in the summary and the README

    def add(self, reason: str, where: str = "", n: int = 1) -> None:
        if n > 0:
            self.counts[reason] = self.counts.get(reason, 0) + n
            if where:
                self.first.setdefault(reason, where)

    def lines(self) -> list[str]:
        return [
            f"{n:,} {reason}" + (f" (first: {self.first[reason]})" if reason in self.first else "")
            for reason, n in self.counts.items()
        ]

    def describe(self) -> str:
        """One line for error messages: what was skipped and where it first happened."""
        return "; ".join(self.lines()) or "nothing skipped"


@dataclass
class ConversionResult:
    """Where a converted dataset was written and what it holds (the figures also in its README.txt)."""

    path: Path
    counts: dict[str, int]
    skipped: dict[str, int] = field(default_factory=dict)
    skipped_lines: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)  # e.g. the df filter dropped many terms on small data

    def summary(self) -> str:
        counts = [f"  {key}: {value:,}" for key, value in self.counts.items()]
        skipped = ["  skipped:", *(f"    {line}" for line in self.skipped_lines)] if self.skipped_lines else []
        return "\n".join([f"wrote {self.path}", *counts, *skipped, *(f"warning: {line}" for line in self.warnings)])


def target_folder(out_dir: str | os.PathLike, name: str, overwrite: bool) -> Path:
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


def write_dataset(
    out_dir: str | os.PathLike,
    name: str,
    inter: pd.DataFrame,
    item_ids: list[str],
    item_fields: dict[str, list[str]],
    readme: str,
    overwrite: bool,
    extra: Callable[[Path], None],
) -> Path:
    """Write `<out_dir>/<name>/{<name>.inter, <name>.item, README.txt}` atomically and return the folder;
    `item_fields[f][k]`: field f's token_seq cell of `item_ids[k]`, written unquoted as RecBole reads it."""
    target = target_folder(out_dir, name, overwrite)
    tmp = target.parent / f".{name}.tmp-{uuid.uuid4().hex[:12]}"  # beside the target: renames are atomic
    tmp.mkdir()  # unlike tempfile.mkdtemp, with the user's usual permissions, which the dataset keeps
    unquoted = {"sep": "\t", "index": False, "quoting": csv.QUOTE_NONE, "lineterminator": "\n", "encoding": "utf-8"}
    try:
        columns = {"user_id": "user_id:token", "item_id": "item_id:token", "label": "label:float"}
        inter = inter[[column for column in columns if column in inter]].rename(columns=columns)
        inter.to_csv(tmp / f"{name}.inter", float_format="%g", **unquoted)
        items = {"item_id:token": item_ids} | {f"{field}:token_seq": cells for field, cells in item_fields.items()}
        pd.DataFrame(items).to_csv(tmp / f"{name}.item", **unquoted)
        (tmp / "README.txt").write_text(readme, encoding="utf-8")
        extra(tmp)  # further files (the analyzer description), written into the same unfinished folder
        _move_into_place(tmp, target, overwrite)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return target


def _move_into_place(tmp: Path, target: Path, overwrite: bool) -> None:
    """Rename the finished folder onto `target`; an old dataset is moved aside first, then deleted."""
    old = target.parent / f".{target.name}.old-{uuid.uuid4().hex[:12]}"
    if target.exists():
        if not overwrite:  # appeared while we were converting
            raise ConversionError(f"output dataset folder {target} already exists; pass --overwrite to replace it")
        os.rename(target, old)
    os.rename(tmp, target)
    shutil.rmtree(old, ignore_errors=True)
