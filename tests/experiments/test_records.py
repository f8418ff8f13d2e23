"""The committed records (docs/results/) are made by this tree's code, and a run in which training matters
reproduces its record to 4 decimals: no figure in README or docs can drift while CI stays green."""

from pathlib import Path

import pytest

from recbole_fbsm.experiments.records import rerun
from recbole_fbsm.storage.run_records import code_fingerprint, read_record

RESULTS = Path(__file__).resolve().parents[2] / "docs" / "results"


def committed_records():
    return [(path, read_record(path)) for path in sorted(RESULTS.rglob("*.json"))]


def test_every_committed_record_was_made_by_the_code_of_this_tree():
    records = committed_records()
    stale = [
        str(path.relative_to(RESULTS))
        for path, record in records
        if record["settings"].get("code") != code_fingerprint()
    ]
    assert records and not stale, (
        f"{len(stale)} of {len(records)} records in docs/results were made by other code (models, data, training, "
        f"evaluation, config or properties changed since): rerun the command above their table in docs/results.md "
        f"(compare reruns exactly the stale ones), e.g. {stale[:5]}"
    )
    assert all(record.get("commit") for _, record in records), "every record names the commit that made it"


def test_no_record_holds_a_path_of_the_machine_it_ran_on():
    for path in sorted(RESULTS.rglob("*.json")):
        text = path.read_text(encoding="utf-8")
        assert "/work/" not in text and "/tmp/" not in text and "/home/" not in text, path


def test_a_run_in_which_training_matters_reproduces_its_record(tmp_path, monkeypatch):
    """FBSM with its defaults on ml-100k, a split whose kept epoch is a trained one, rerun here with the settings its
    record states: every validation and test figure equal to the committed record's to 4 decimals."""
    trained = [
        record
        for _, record in committed_records()
        if record["model"] == "FBSM"
        and record["settings"]["dataset"] == "ml-100k"
        and "cold_start_scenario" not in record["settings"]["overrides"]
        and record.get("best_epoch", -1) >= 0
    ]
    assert trained, "no committed ml-100k FBSM record keeps a trained epoch"
    monkeypatch.chdir(tmp_path)
    new = rerun(trained[0], tmp_path)
    assert new["best_epoch"] == trained[0]["best_epoch"]
    for key in ("best_valid_result", "test_result"):
        assert new[key] == pytest.approx(trained[0][key], abs=5e-5), key
