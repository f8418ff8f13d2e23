"""The results tables of README.md and docs/*.md, rendered from committed `compare` records, never typed by hand.

A marked block is generated between its two markers:

    <!-- results-table: docs/results/citeulike-t | FBSM ItemKNNCBF | valid, **recall@10**, /ItemKNNCBF, s/run -->
    <!-- end results-table -->

Fields: the records folder (from the repository root), the rows, the columns: ``valid`` (best_valid_score) and
test metrics (``recall@10``) as mean ± std over the splits; ``/MODEL`` the mean per-split ratio of the validation
metric's test value to MODEL's (``/max(A B)``: to the better of A and B on each split); ``s/run``; ``splits``.
``GROUP:`` (all, cold, warm) picks a hybrid-scenario group, ``users:`` / ``users-raw:`` the users direction's
calibrated / raw ranking (who should see a new item); a row ``SUB/MODEL`` reads the subfolder SUB and its
label adds the settings in which it differs; ``**column**`` is bold. tests/experiments/test_doc_tables.py says which
tables are stale.
"""

import re
import sys
from pathlib import Path

from recbole_fbsm.experiments.report import Table, TableError, summarise
from recbole_fbsm.storage.run_records import load_records

ROOT = Path(__file__).resolve().parents[2]
DOC_FILES = ("README.md", "docs/*.md")
BLOCK = re.compile(
    r"(?P<open><!-- results-table: (?P<spec>[^\n]*?) -->\n)(?P<body>.*?)(?P<close><!-- end results-table -->)",
    re.S,
)
BLEND = ("warm_model", "content_model")  # a blend's label names its models already


def _rows(folder):
    """``summarise``'s rows of the folder's finished runs."""
    rows = [row for row in summarise(load_records(folder)) if row["ok"]]
    if not rows:
        raise TableError(f"results-table: no finished run records in {folder}")
    return rows


def render_table(spec, root=ROOT):
    """The markdown table of one marker's spec (records folder | rows | columns), from the records in its folder."""
    parts = [p.strip() for p in spec.split("|")]
    if len(parts) != 3 or not all(parts):
        raise TableError(f"results-table marker '{spec}': expected 'FOLDER | MODEL ... | COLUMN, ...'")
    folder, tokens, columns = parts[0], parts[1].split(), [c.strip() for c in parts[2].split(",")]
    rows = _rows(Path(root) / folder)
    own = {k: v for row in rows for r in row["ok"] for k, v in r["settings"]["overrides"].items()}
    labels = {}
    for token in tokens:  # a row SUB/MODEL: MODEL's records in the subfolder, labelled with the settings that differ
        sub, _, model = token.rpartition("/")
        found = [row for row in (_rows(Path(root) / folder / sub) if sub else rows) if row["model"] == model]
        first = found[0]["ok"][0] if found else {}
        blend = first.get("warm_model") and first.get("content_model")
        labels[token] = model + (f" ({first['warm_model']} + {first['content_model']})" if blend else "")
        changed = {k: v for k, v in first.get("settings", {}).get("overrides", {}).items() if own.get(k) != v}
        labels[token] += "".join(f" `--{k}={v}`" for k, v in changed.items() if sub and k not in BLEND)
        rows += [{**row, "model": token} for row in found if sub]
    table = Table(rows, f"results-table {folder}")
    return "\n".join(table.markdown(tokens, [(c.strip("*"), c.startswith("**")) for c in columns], labels)) + "\n"


def render_text(text, root=ROOT):
    """The markdown text with every results-table block rendered afresh."""
    return BLOCK.sub(lambda m: m["open"] + render_table(m["spec"], root) + m["close"], text)


def doc_files(root=ROOT):
    return [p for pattern in DOC_FILES for p in sorted(Path(root).glob(pattern))]


def main():
    """Render the results tables of README.md and docs/*.md from their records (docs/results/)."""
    for path in doc_files():
        text = path.read_text(encoding="utf-8")
        try:
            rendered = render_text(text)
        except TableError as error:
            print(f"error: {path.relative_to(ROOT)}: {error}", file=sys.stderr)
            return 2
        if rendered != text:
            print(f"rewrote: {path.relative_to(ROOT)}")
            path.write_text(rendered, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
