"""The results tables of the docs are rendered from committed run records (docs/results/), and no figure table
is typed by hand: a stale table, or a new metric table outside a results-table marker, fails here."""

import json
import re
import shutil
from pathlib import Path

import pytest

from recbole_fbsm.experiments import doc_tables

ROOT = Path(__file__).resolve().parent.parent
# a markdown table that reports scores: its header names a metric
METRIC_HEADER = re.compile(r"^\|.*\b(recall|ndcg|precision|hit|mrr|rec@|dcg|valid|test)\b", re.I)
NOT_REPRODUCED = "<!-- not-reproduced:"


@pytest.mark.parametrize("path", doc_tables.doc_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_results_table_matches_its_records(path):
    text = path.read_text(encoding="utf-8")
    assert doc_tables.render_text(text) == text, (
        f"{path.name}: a results table differs from its records; run python -m recbole_fbsm.experiments.doc_tables")


@pytest.mark.parametrize("path", doc_tables.doc_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_no_hand_typed_metric_table(path):
    """A table with a metric in its header is rendered from records, or says it was not reproduced by them."""
    lines = path.read_text(encoding="utf-8").splitlines()
    inside, offenders = False, []
    for number, line in enumerate(lines, 1):
        if line.startswith("<!-- results-table:"):
            inside = True
        elif line.startswith("<!-- end results-table"):
            inside = False
        elif METRIC_HEADER.match(line) and not inside and not (number > 1 and lines[number - 2].startswith("|")):
            above = [lines[k] for k in range(max(0, number - 3), number - 1)]
            if not any(a.startswith(NOT_REPRODUCED) for a in above):
                offenders.append(number)
    assert not offenders, (f"{path.name} lines {offenders}: a metric table outside a results-table marker "
                           f"(render it from records, or mark it '{NOT_REPRODUCED} \"why\" -->')")


def _record(model, seed, recall, valid=0.1, seconds=10.0):
    return {"model": model, "seed": seed, "status": "ok", "dataset": "d", "valid_metric": "recall@10",
            "best_valid_score": valid, "wall_seconds": seconds, "test_result": {"recall@10": recall},
            "settings": {"dataset": "d", "config_files": [], "overrides": {}}}


def _write(folder, records):
    folder.mkdir(parents=True, exist_ok=True)
    for record in records:
        (folder / f"{record['model']}-{record['seed']}.json").write_text(json.dumps(record))


def test_a_table_follows_its_records(tmp_path):
    _write(tmp_path / "res", [_record("A", 1, 0.2), _record("A", 2, 0.4), _record("B", 1, 0.1), _record("B", 2, 0.4)])
    spec = "res | A B | valid, **recall@10**, /B, s/run"
    table = doc_tables.render_table(spec, root=tmp_path)
    assert table.splitlines()[0] == "| model | valid Recall@10 | **test Recall@10** | / B (per split) | s/run |"
    # mean ± sample std over the splits; ratios per split (2.00, 1.00), then averaged
    assert table.splitlines()[2] == "| A | 0.1000 ± 0.0000 | **0.3000 ± 0.1414** | 1.500 (2.00, 1.00) | 10 |"
    # a re-run with other figures makes the committed text stale
    text = f"x\n<!-- results-table: {spec} -->\n{table}<!-- end results-table -->\ny\n"
    assert doc_tables.render_text(text, root=tmp_path) == text
    _write(tmp_path / "res", [_record("A", 2, 0.5)])
    assert "0.3500 ± 0.2121" in doc_tables.render_text(text, root=tmp_path)
    # one split: its value, never a "± 0.0000" that would read as no spread
    _write(tmp_path / "one" / "res", [_record("A", 1, 0.2), _record("B", 1, 0.1)])
    assert doc_tables.render_table("res | A | **recall@10**, /B", root=tmp_path / "one").splitlines()[2] == (
        "| A | **0.2000** | 2.000 |")


def test_a_bad_marker_is_named(tmp_path):
    _write(tmp_path / "res", [_record("A", 1, 0.2)])
    with pytest.raises(doc_tables.TableError, match="no records of model Z"):
        doc_tables.render_table("res | A Z | recall@10", root=tmp_path)
    with pytest.raises(doc_tables.TableError, match="has no test ndcg@10"):
        doc_tables.render_table("res | A | ndcg@10", root=tmp_path)
    with pytest.raises(doc_tables.TableError, match="no finished run records"):
        doc_tables.render_table("nothing | A | recall@10", root=tmp_path)
    with pytest.raises(doc_tables.TableError, match="expected 'FOLDER"):
        doc_tables.render_table("res A recall@10", root=tmp_path)


def test_records_are_compare_records():
    """The committed records are `compare`'s own files (readable by its reader), not hand-made summaries."""
    from recbole_fbsm.storage.run_records import read_record

    files = sorted((ROOT / "docs" / "results").rglob("*.json"))
    assert files, "docs/results/ holds the records behind the docs' tables"
    for path in files:
        record = read_record(path)
        assert record is not None and record["status"] == "ok", path
        assert {"settings", "test_result", "best_valid_score", "seed", "model"} <= set(record), path
