"""The results tables of README.md and docs/*.md, rendered from committed `compare` records, never typed by hand.

A marked block is generated between its two markers:

    <!-- results-table: docs/results/citeulike-t | FBSM ItemKNNCBF | valid, **recall@10**, /ItemKNNCBF, s/run -->
    <!-- end results-table -->

Fields: the records folder (from the repository root), the rows, the columns: ``valid`` (best_valid_score) and
test metrics (``recall@10``) as mean ± std over the splits; ``/MODEL`` the mean per-split ratio of the validation
metric's test value to MODEL's (``/max(A B)``: to the better of A and B on each split); ``s/run``; ``splits``.
``GROUP:`` (all, cold, warm) picks a hybrid-scenario group, ``users:`` / ``users-raw:`` the users direction's
calibrated / raw ranking (who should see a new item); a row ``SUB/MODEL`` reads the subfolder SUB and its
label adds the settings in which it differs; ``**column**`` is bold. ``--check`` only says which tables are stale
(tests/experiments/test_doc_tables.py).
"""

import argparse
import re
import sys
from pathlib import Path

from recbole_fbsm.experiments import report
from recbole_fbsm.storage.run_records import GROUPS, USER_GROUPS, group_result, load_records

ROOT = Path(__file__).resolve().parents[2]
DOC_FILES = ("README.md", "docs/*.md")
BLOCK = re.compile(
    r"(?P<open><!-- results-table: (?P<spec>[^\n]*?) -->\n)(?P<body>.*?)(?P<close><!-- end results-table -->)",
    re.S,
)
GROUP_LABELS = {"users": "(users, calibrated)", "users-raw": "(users, raw sum)"}
MAX_OF = re.compile(r"^max\((?P<models>[^()]+)\)$")


class TableError(ValueError):
    """A marker that cannot be rendered: a bad spec, a missing folder, a model or metric without records."""


def parse_spec(spec):
    """(records folder, models, [(column, bold)]) of a marker's text."""
    parts = [p.strip() for p in spec.split("|")]
    if len(parts) != 3 or not all(parts):
        raise TableError(f"results-table marker '{spec}': expected 'FOLDER | MODEL ... | COLUMN, ...'")
    columns = [c.strip() for c in parts[2].split(",")]
    return parts[0], parts[1].split(), [(c.strip("*"), c.startswith("**") and c.endswith("**")) for c in columns]


def _records_by_model(folder):
    """{model: {seed: record}} of the folder's finished runs."""
    rows = report.summarise(load_records(folder))
    by_model = {row["model"]: {r["seed"]: r for r in row["ok"]} for row in rows if row["ok"]}
    if not by_model:
        raise TableError(f"results-table: no finished run records in {folder}")
    return by_model


def _group_result(record, group):
    """``group_result``, where a missing group is an error rather than no metrics."""
    result = group_result(record, group)
    if not result:
        raise TableError(
            f"results-table: {record['model']} (seed {record['seed']}) has no test_result_{group}: "
            f"a {group} column needs records of the {'item' if group in USER_GROUPS else 'hybrid'} scenario"
        )
    return result


def _overrides(record):
    return (record.get("settings") or {}).get("overrides") or {}


def _row_label(token, runs, own_overrides):
    """A row's label: the model, a blend's two models, a subfolder's changed settings (``--identity_features=True``)."""
    first = runs[min(runs)]
    label = first["model"]
    if first.get("warm_model") and first.get("content_model"):
        label += f" ({first['warm_model']} + {first['content_model']})"
    if "/" in token:
        shown = {"warm_model", "content_model"}
        extra = [f"--{k}={v}" for k, v in _overrides(first).items() if k not in shown and own_overrides.get(k) != v]
        label += "".join(f" `{e}`" for e in extra)
    return label


def _split_group(column):
    """(group or None, rest) of a column: ``cold:recall@20`` -> ("cold", "recall@20")."""
    group, colon, rest = column.partition(":")
    if colon and group not in (*GROUPS, *USER_GROUPS):
        raise TableError(
            f"results-table column '{column}': expected GROUP:COLUMN with GROUP one of "
            f"{', '.join((*GROUPS, *USER_GROUPS))}"
        )
    return (group, rest) if colon else (None, column)


class Table:
    """One marker's records: by row token (``MODEL`` from the folder, ``SUB/MODEL`` from its subfolder), the folder's
    own overrides (for the subfolder rows' labels) and the one validation metric they were all chosen on."""

    def __init__(self, folder, models, root):
        self.folder, self.by_model = folder, _records_by_model(Path(root) / folder)
        records = [record for runs in self.by_model.values() for record in runs.values()]
        self.own_overrides = {
            k: v for r in records for k, v in ((r.get("settings") or {}).get("overrides") or {}).items()
        }
        for token in (t for t in models if "/" in t):
            sub, _, model = token.rpartition("/")
            self.by_model[token] = _records_by_model(Path(root) / folder / sub).get(model) or {}
        valid_metrics = {r.get("valid_metric") for token in models for r in self.by_model.get(token, {}).values()}
        if len(valid_metrics) != 1:
            raise TableError(f"results-table {folder}: the records were chosen on different metrics {valid_metrics}")
        self.valid_metric = str(valid_metrics.pop()).lower()

    def runs(self, model):
        if not self.by_model.get(model):
            raise TableError(f"results-table {self.folder}: no records of model {model}")
        return self.by_model[model]

    def header(self, column):
        group, column = _split_group(column)
        suffix = f" {GROUP_LABELS.get(group, group)}" if group else ""
        if column == "valid":
            return f"valid {report.metric_label(self.valid_metric)}"
        if column.startswith("/"):
            return f"/ {column[1:]}{suffix} (per split)"
        if column in ("s/run", "splits"):
            return column
        return ("test " if column == self.valid_metric else "") + report.metric_label(column) + suffix

    def base_value(self, baseline, seed, group):
        """The baseline's (``max(A B)``: the better one's) test value on one split; None when one lacks the split."""
        match = MAX_OF.match(baseline)
        runs = [self.runs(name) for name in (match["models"].split() if match else [baseline])]
        values = [_group_result(r[seed], group)[self.valid_metric] for r in runs if seed in r]
        return max(values) if len(values) == len(runs) else None

    def cell(self, model, column):
        group, column = _split_group(column)
        runs = self.runs(model)
        seeds = sorted(runs)
        if column == "s/run":
            return f"{sum(runs[s]['wall_seconds'] for s in seeds) / len(seeds):.0f}"
        if column == "splits":
            return str(len(seeds))
        if column.startswith("/"):
            bases = {s: self.base_value(column[1:], s, group) for s in seeds}
            ratios = [_group_result(runs[s], group)[self.valid_metric] / bases[s] for s in seeds if bases[s]]
            if not ratios:
                raise TableError(f"results-table {self.folder}: {model} shares no split with {column[1:]}")
            each = f" ({', '.join(f'{r:.2f}' for r in ratios)})" if len(ratios) > 1 else ""
            return f"{sum(ratios) / len(ratios):.3f}{each}"
        if column == "valid":
            values = [runs[s]["best_valid_score"] for s in seeds]
        else:
            missing = [s for s in seeds if column not in _group_result(runs[s], group)]
            if missing:
                raise TableError(f"results-table {self.folder}: {model} has no test {column} (seeds {missing})")
            values = [_group_result(runs[s], group)[column] for s in seeds]
        # one split: its value alone (a std of one value would read as no spread)
        return f"{float(values[0]):.4f}" if len(values) == 1 else report.mean_std_cell(values)


def render_table(spec, root=ROOT):
    """The markdown table of one marker's spec, from the records in its folder."""
    folder, models, columns = parse_spec(spec)
    table = Table(folder, models, root)

    def bold(text, on):
        return f"**{text}**" if on else text

    header = ["model", *(bold(table.header(c), b) for c, b in columns)]
    rows = [
        [
            _row_label(model, table.runs(model), table.own_overrides),
            *(bold(table.cell(model, c), b) for c, b in columns),
        ]
        for model in models
    ]
    return "\n".join(report.markdown_table(header, rows)) + "\n"


def render_text(text, root=ROOT):
    """The markdown text with every results-table block rendered afresh."""
    return BLOCK.sub(lambda m: m["open"] + render_table(m["spec"], root) + m["close"], text)


def doc_files(root=ROOT):
    return [p for pattern in DOC_FILES for p in sorted(Path(root).glob(pattern))]


def main(argv=None):
    parser = argparse.ArgumentParser(
        description="Render the results tables of README.md and docs/*.md from their records (docs/results/)."
    )
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
