"""The results tables of the docs are rendered from committed run records (docs/results/), and no figure table
is typed by hand: a stale table, or a new metric table outside a results-table marker, fails here."""

import json
import re

import pytest
from helpers import REPO_ROOT as ROOT

from recbole_fbsm.experiments import doc_tables

# a markdown table that reports scores: its header names a metric, or the hybrid scenario's groups as columns
# (`| model | all | cold | warm |`, `| Recall@20 cold |`)
METRIC_HEADER = re.compile(
    r"^\|.*(\b(recall|ndcg|precision|hit|mrr|rec@|dcg|valid|test)\b|\|\s*(all|cold|warm)\s*\|)", re.I
)
NOT_REPRODUCED = "<!-- not-reproduced:"


@pytest.mark.parametrize("path", doc_tables.doc_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_results_table_matches_its_records(path):
    text = path.read_text(encoding="utf-8")
    assert doc_tables.render_text(text) == text, (
        f"{path.name}: a results table differs from its records; run python -m recbole_fbsm.experiments.doc_tables"
    )


@pytest.mark.parametrize("path", doc_tables.doc_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_no_hand_typed_metric_table(path):
    """A table with a metric in its header is rendered from records, or says it was not reproduced by them."""
    offenders = hand_typed_metric_tables(path.read_text(encoding="utf-8"))
    assert not offenders, (
        f"{path.name} lines {offenders}: a metric table outside a results-table marker "
        f"(render it from records, or mark it '{NOT_REPRODUCED} \"why\" -->')"
    )


def hand_typed_metric_tables(text):
    """Line numbers of the metric tables' headers outside a results-table marker and not marked not-reproduced."""
    lines = text.splitlines()
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
    return offenders


def test_a_hand_typed_hybrid_table_is_caught():
    """The hybrid scenario's tables name the groups, not always the metric, in their header."""
    table = "| model | all | cold | warm |\n|---|---:|---:|---:|\n| FBSM | 0.24 | 0.23 | 0.42 |\n"
    assert hand_typed_metric_tables("text\n\n" + table) == [3]
    assert hand_typed_metric_tables("| setting | default |\n|---|---|\n| hybrid_valid_group | all |\n") == []
    marked = '<!-- not-reproduced: "one run" -->\n' + table
    assert hand_typed_metric_tables(marked) == []


def _record(model, seed, recall, valid=0.1, seconds=10.0):
    return {
        "model": model,
        "seed": seed,
        "status": "ok",
        "dataset": "d",
        "valid_metric": "recall@10",
        "best_valid_score": valid,
        "wall_seconds": seconds,
        "test_result": {"recall@10": recall},
        "settings": {"dataset": "d", "config_files": [], "overrides": {}},
    }


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
        "| A | **0.2000** | 2.000 |"
    )


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


def _hybrid_record(model, seed, groups, overrides=None, **extra):
    """A hybrid-scenario record: groups = {"all": recall, "cold": recall, "warm": recall}."""
    record = _record(model, seed, groups["all"])
    record["valid_metric"] = "recall@20"
    record["test_result"] = {"recall@20": groups["all"]}
    record["test_result_cold"] = {"recall@20": groups["cold"]}
    record["test_result_warm"] = {"recall@20": groups["warm"]}
    record["settings"] = {
        "dataset": "d",
        "config_files": [],
        "overrides": {"cold_start_scenario": "hybrid", **(overrides or {})},
    }
    return {**record, **extra}


@pytest.fixture
def hybrid_folder(tmp_path):
    _write(
        tmp_path / "h",
        [
            _hybrid_record("BPR", 1, {"all": 0.10, "cold": 0.12, "warm": 0.20}),
            _hybrid_record("BPR", 2, {"all": 0.10, "cold": 0.12, "warm": 0.20}),
            _hybrid_record("ItemKNNCBF", 1, {"all": 0.08, "cold": 0.30, "warm": 0.09}),
            _hybrid_record("ItemKNNCBF", 2, {"all": 0.20, "cold": 0.30, "warm": 0.09}),
            _hybrid_record(
                "HybridBlend",
                1,
                {"all": 0.11, "cold": 0.30, "warm": 0.12},
                warm_model="BPR",
                content_model="ItemKNNCBF",
            ),
            _hybrid_record(
                "HybridBlend",
                2,
                {"all": 0.21, "cold": 0.30, "warm": 0.12},
                warm_model="BPR",
                content_model="ItemKNNCBF",
            ),
        ],
    )
    # a second comparison with another setting, in a subfolder
    _write(
        tmp_path / "h" / "identity",
        [
            _hybrid_record("FBSM", 1, {"all": 0.30, "cold": 0.15, "warm": 0.40}, {"identity_features": True}),
            _hybrid_record("FBSM", 2, {"all": 0.40, "cold": 0.27, "warm": 0.50}, {"identity_features": True}),
        ],
    )
    return tmp_path


def test_a_hybrid_table_has_a_column_per_group(hybrid_folder):
    spec = (
        "h | BPR ItemKNNCBF HybridBlend identity/FBSM | **all:recall@20**, cold:recall@20, warm:recall@20, "
        "all:/max(BPR ItemKNNCBF), cold:/ItemKNNCBF"
    )
    lines = doc_tables.render_table(spec, root=hybrid_folder).splitlines()
    assert lines[0] == (
        "| model | **test Recall@20 all** | test Recall@20 cold | test Recall@20 warm "
        "| / max(BPR ItemKNNCBF) all (per split) | / ItemKNNCBF cold (per split) |"
    )
    rows = {line.split(" | ")[0][2:]: line for line in lines[2:]}
    assert set(rows) == {"BPR", "ItemKNNCBF", "HybridBlend (BPR + ItemKNNCBF)", "FBSM `--identity_features=True`"}
    fbsm = [c.strip() for c in rows["FBSM `--identity_features=True`"].strip("|").split("|")]
    # mean ± std of each group; the ratio to the better of BPR and ItemKNNCBF on each split: 0.30/0.10, 0.40/0.20
    assert fbsm[1:4] == ["**0.3500 ± 0.0707**", "0.2100 ± 0.0849", "0.4500 ± 0.0707"]
    assert fbsm[4] == "2.500 (3.00, 2.00)"
    assert fbsm[5] == "0.700 (0.50, 0.90)"  # cold items: where it loses to ItemKNNCBF


def test_a_changed_digit_in_a_hybrid_group_makes_the_table_stale(hybrid_folder):
    spec = "h | ItemKNNCBF identity/FBSM | all:recall@20, cold:recall@20, warm:recall@20"
    table = doc_tables.render_table(spec, root=hybrid_folder)
    text = f"<!-- results-table: {spec} -->\n{table}<!-- end results-table -->\n"
    assert doc_tables.render_text(text, root=hybrid_folder) == text
    edited = text.replace("0.2100 ± 0.0849", "0.2101 ± 0.0849")  # one digit of FBSM's cold column
    assert edited != text and doc_tables.render_text(edited, root=hybrid_folder) == text


def test_the_committed_hybrid_table_is_checked_digit_by_digit():
    """Editing one figure of a committed all/cold/warm table makes the docs test fail."""
    path = ROOT / "docs" / "models.md"
    text = path.read_text(encoding="utf-8")
    block = next(m for m in doc_tables.BLOCK.finditer(text) if "cold:" in m["spec"])
    row = block["body"].splitlines()[2]
    cells = row.split(" | ")
    cold = cells[2]  # the second figure column: cold items
    # the mean's fourth decimal, one up
    edited_cell = re.sub(r"(\d\.\d{3})(\d)", lambda m: m[1] + str((int(m[2]) + 1) % 10), cold, count=1)
    edited = text.replace(row, " | ".join(cells[:2] + [edited_cell] + cells[3:]), 1)
    assert edited != text
    assert doc_tables.render_text(edited) != edited


def test_a_group_column_needs_hybrid_records(tmp_path):
    _write(tmp_path / "res", [_record("A", 1, 0.2)])
    with pytest.raises(doc_tables.TableError, match="has no test_result_cold"):
        doc_tables.render_table("res | A | cold:recall@10", root=tmp_path)
    with pytest.raises(doc_tables.TableError, match="GROUP one of all, cold, warm"):
        doc_tables.render_table("res | A | hot:recall@10", root=tmp_path)
