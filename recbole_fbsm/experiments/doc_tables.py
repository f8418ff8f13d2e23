"""The results tables of README.md and docs/*.md, rendered from committed `compare` records, never typed by hand.

A table in a markdown file is a marked block; everything between the two markers is generated:

    <!-- results-table: docs/results/citeulike-t | FBSM UFSM ItemKNNCBF CoSim | valid, **recall@10**, /ItemKNNCBF, s/run -->
    | model | valid Recall@10 | ... |        (rendered)
    <!-- end results-table -->

The first field is a folder of `recbole-fbsm compare` JSON records (relative to the repository root), the
second the rows in order, the third the columns:

- ``valid``: the validation score of the kept epoch (``best_valid_score``), mean ± std over the splits;
- a test metric (``recall@10``, ``ndcg@100``, ...): mean ± std over the splits;
- ``/MODEL``: the mean of the per-split ratios of the validation metric's test value to MODEL's on the same
  split, each split's ratio in brackets (the ratio the project's claims are about);
- ``s/run``: mean wall seconds of one run; ``splits``: how many splits the row has.

``**column**`` prints that column in bold. ``python -m recbole_fbsm.experiments.doc_tables`` rewrites the tables
in place; ``--check`` only says which are stale (tests/test_doc_tables.py runs it), so a re-run's new records
and the docs can never disagree unnoticed.
"""

import argparse
import re
import sys
from pathlib import Path

from recbole_fbsm.experiments.report import load_records, mean_std

ROOT = Path(__file__).resolve().parents[2]
DOC_FILES = ("README.md", "docs/*.md")
BLOCK = re.compile(
    r"(?P<open><!-- results-table: (?P<spec>[^\n]*?) -->\n)(?P<body>.*?)(?P<close><!-- end results-table -->)",
    re.S,
)
METRIC_NAMES = {"recall": "Recall", "ndcg": "NDCG", "precision": "Precision", "hit": "Hit", "mrr": "MRR",
                "rec": "Rec", "dcg": "DCG"}


class TableError(ValueError):
    """A marker that cannot be rendered: a bad spec, a missing folder, a model or metric without records."""


def metric_label(metric):
    name, _, k = metric.partition("@")
    return f"{METRIC_NAMES.get(name, name)}@{k}" if k else METRIC_NAMES.get(name, name)


def parse_spec(spec):
    """(records folder, models, [(column, bold)]) of a marker's text."""
    parts = [p.strip() for p in spec.split("|")]
    if len(parts) != 3 or not all(parts):
        raise TableError(f"results-table marker '{spec}': expected 'FOLDER | MODEL ... | COLUMN, ...'")
    columns = []
    for column in (c.strip() for c in parts[2].split(",")):
        bold = column.startswith("**") and column.endswith("**")
        columns.append((column.strip("*"), bold))
    return parts[0], parts[1].split(), columns


def _records_by_model(folder):
    records = [r for r in load_records(folder) if r.get("status") == "ok"]
    if not records:
        raise TableError(f"results-table: no finished run records in {folder}")
    by_model = {}
    for record in records:
        by_model.setdefault(record["model"], {})[record["seed"]] = record
    return by_model


def _mean_std(values):
    """mean ± sample std over the splits; a single split's value alone (a std of one value would read as 0)."""
    if len(values) == 1:
        return f"{float(values[0]):.4f}"
    mean, std = mean_std(values)
    return f"{mean:.4f} ± {std:.4f}"


def render_table(spec, root=ROOT):
    """The markdown table of one marker's spec, from the records in its folder."""
    folder, models, columns = parse_spec(spec)
    by_model = _records_by_model(Path(root) / folder)
    valid_metrics = {r.get("valid_metric") for runs in by_model.values() for r in runs.values()}
    if len(valid_metrics) != 1:
        raise TableError(f"results-table {folder}: the records were chosen on different metrics {valid_metrics}")
    valid_metric = str(valid_metrics.pop()).lower()

    def header(column):
        if column == "valid":
            return f"valid {metric_label(valid_metric)}"
        if column.startswith("/"):
            return f"/ {column[1:]} (per split)"
        if column in ("s/run", "splits"):
            return column
        return f"test {metric_label(column)}" if column == valid_metric else metric_label(column)

    def cell(model, column):
        runs = by_model.get(model)
        if not runs:
            raise TableError(f"results-table {folder}: no records of model {model}")
        seeds = sorted(runs)
        if column == "valid":
            return _mean_std([runs[s]["best_valid_score"] for s in seeds])
        if column == "s/run":
            return f"{sum(runs[s]['wall_seconds'] for s in seeds) / len(seeds):.0f}"
        if column == "splits":
            return str(len(seeds))
        if column.startswith("/"):
            base = by_model.get(column[1:])
            if not base:
                raise TableError(f"results-table {folder}: no records of baseline {column[1:]}")
            shared = [s for s in seeds if s in base]
            ratios = [runs[s]["test_result"][valid_metric] / base[s]["test_result"][valid_metric] for s in shared]
            if len(ratios) == 1:
                return f"{ratios[0]:.3f}"
            return f"{sum(ratios) / len(ratios):.3f} ({', '.join(f'{r:.2f}' for r in ratios)})"
        missing = [s for s in seeds if column not in runs[s]["test_result"]]
        if missing:
            raise TableError(f"results-table {folder}: {model} has no test {column} (seeds {missing})")
        return _mean_std([runs[s]["test_result"][column] for s in seeds])

    def bold(text, on):
        return f"**{text}**" if on else text

    lines = ["| model | " + " | ".join(bold(header(c), b) for c, b in columns) + " |",
             "|---|" + "---:|" * len(columns)]
    for model in models:
        lines.append(f"| {model} | " + " | ".join(bold(cell(model, c), b) for c, b in columns) + " |")
    return "\n".join(lines) + "\n"


def render_text(text, root=ROOT):
    """The markdown text with every results-table block rendered afresh."""
    return BLOCK.sub(lambda m: m["open"] + render_table(m["spec"], root) + m["close"], text)


def doc_files(root=ROOT):
    root = Path(root)
    return [p for pattern in DOC_FILES for p in sorted(root.glob(pattern))]


def main(argv=None):
    parser = argparse.ArgumentParser(description="Render the results tables of README.md and docs/*.md from "
                                                 "their records (docs/results/).")
    parser.add_argument("--check", action="store_true", help="only report stale tables; exit 1 if any")
    args = parser.parse_args(argv)
    stale = []
    for path in doc_files():
        text = path.read_text(encoding="utf-8")
        try:
            rendered = render_text(text)
        except TableError as error:
            print(f"error: {path.relative_to(ROOT)}: {error}", file=sys.stderr)
            return 2
        if rendered != text:
            stale.append(path)
            if not args.check:
                path.write_text(rendered, encoding="utf-8")
    for path in stale:
        print(f"{'stale' if args.check else 'rewrote'}: {path.relative_to(ROOT)}")
    return 1 if stale and args.check else 0


if __name__ == "__main__":
    sys.exit(main())
