"""`recbole-fbsm compare` in the hybrid scenario: the table, the console and the chart show all, cold and warm
items; the item scenario's table keeps its columns."""

import json

import pytest
from helpers import run_record
from test_compare import PNG_MAGIC, table_rows

from recbole_fbsm.cli.experiments import compare as compare_command
from recbole_fbsm.experiments import report


def _header(table):
    return [
        c.strip() for c in next(line for line in table.splitlines() if line.startswith("| model")).strip("|").split("|")
    ]


# Pop and ItemKNNCBF on ml-100k in the hybrid scenario, one split: run by the fixture, run again to resume
HYBRID_COMPARISON = [
    "--dataset=ml-100k",
    "--models",
    "Pop",
    "ItemKNNCBF",
    "--seeds",
    "2020",
    "--results",
    "r",
    "--cold_start_scenario=hybrid",
    "--topk=[20]",
    "--valid_metric=Recall@20",
    "--metrics=['Recall','NDCG']",
    "--use_gpu=False",
    "--worker=0",
    "--torch_threads=1",
]


@pytest.fixture(scope="module")
def hybrid_results(tmp_path_factory):
    """Pop and ItemKNNCBF on ml-100k in the hybrid scenario, one split, through the real run()."""
    cwd = tmp_path_factory.mktemp("compare_hybrid")
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(cwd)
        code = compare_command(list(HYBRID_COMPARISON))
    return cwd / "r", code


def test_hybrid_table_has_all_cold_and_warm_columns_from_the_records(hybrid_results, capsys):
    results, code = hybrid_results
    assert code == 0
    table = (results / "table.md").read_text()
    header = _header(table)
    metric_columns = [c for c in header if "@20 " in c or c.startswith("/")]
    assert metric_columns == [
        "test Recall@20 all",
        "test Recall@20 cold",
        "test Recall@20 warm",
        "NDCG@20 all",
        "NDCG@20 cold",
        "NDCG@20 warm",
        "/ ItemKNNCBF all (per split)",
        "/ ItemKNNCBF cold (per split)",
    ]
    rows = table_rows(table)
    for model in ("Pop", "ItemKNNCBF"):
        record = json.loads((results / f"{model}-2020.json").read_text())
        cells = dict(zip(header, rows[model]))
        # one split: the record's figure alone, for each group
        assert cells["test Recall@20 all"] == f"{record['test_result']['recall@20']:.4f}"
        assert cells["test Recall@20 cold"] == f"{record['test_result_cold']['recall@20']:.4f}"
        assert cells["NDCG@20 warm"] == f"{record['test_result_warm']['ndcg@20']:.4f}"
    # the groups are really different rankings: content similarity finds the cold items Pop cannot rank
    pop, knn = (json.loads((results / f"{m}-2020.json").read_text()) for m in ("Pop", "ItemKNNCBF"))
    assert knn["test_result_cold"]["recall@20"] > pop["test_result_cold"]["recall@20"]
    assert (results / "chart.png").read_bytes()[:8] == PNG_MAGIC


def test_resumed_hybrid_comparison_prints_the_groups_on_the_console(hybrid_results, monkeypatch, capsys):
    results, _ = hybrid_results
    monkeypatch.chdir(results.parent)
    assert compare_command(list(HYBRID_COMPARISON)) == 0
    out = capsys.readouterr().out
    knn = json.loads((results / "ItemKNNCBF-2020.json").read_text())
    figures = "/".join(
        f"{knn[key]['recall@20']:.4f}" for key in ("test_result", "test_result_cold", "test_result_warm")
    )
    assert f"done before, skipped (recall@20 all/cold/warm={figures})" in out
    assert "| test Recall@20 all | test Recall@20 cold | test Recall@20 warm |" in out


def _record(model, seed, all_, cold, warm):
    return run_record(
        model, seed, {"recall@10": all_}, test_result_cold={"recall@10": cold}, test_result_warm={"recall@10": warm}
    )


def test_group_cells_are_means_over_splits_and_the_ratios_are_on_all_and_on_cold_items():
    records = [
        _record("FBSM", 1, 0.30, 0.10, 0.50),
        _record("FBSM", 2, 0.40, 0.20, 0.70),
        _record("ItemKNNCBF", 1, 0.20, 0.30, 0.10),
        _record("ItemKNNCBF", 2, 0.20, 0.30, 0.10),
    ]
    table = report.build_table(
        report.summarise(records, ["FBSM", "ItemKNNCBF"]), {"dataset": "d", "config_files": [], "overrides": {}}
    )
    cells = dict(zip(_header(table), table_rows(table)["FBSM"]))
    mean, std = report.mean_std([0.10, 0.20])
    assert cells["test Recall@10 cold"] == f"{mean:.4f} ± {std:.4f}"
    assert cells["test Recall@10 warm"] == f"{0.6:.4f} ± {report.mean_std([0.5, 0.7])[1]:.4f}"
    assert cells["/ ItemKNNCBF all (per split)"].startswith("1.750 (1.50, 2.00)")
    assert cells["/ ItemKNNCBF cold (per split)"] == "0.500 (0.33, 0.67)"
    assert "/ CoSim cold (per split)" not in cells  # one cold ratio: to the strongest content baseline
    without = report.build_table(  # no ItemKNNCBF among the models: no ratio column
        report.summarise(records[:2], ["FBSM"]), {"dataset": "d", "config_files": [], "overrides": {}}
    )
    assert not [c for c in _header(without) if c.startswith("/")]


def test_item_scenario_table_keeps_one_column_per_metric():
    records = [{**_record("FBSM", 1, 0.3, 0, 0)}]
    for record in records:
        del record["test_result_cold"], record["test_result_warm"]
    table = report.build_table(
        report.summarise(records, ["FBSM"]), {"dataset": "d", "config_files": [], "overrides": {}}
    )
    assert _header(table) == ["model", "splits", "valid Recall@10", "test Recall@10", "s/run", "status"]
    assert "Hybrid scenario" not in table and " all" not in table
