"""`recbole-fbsm compare`: the table, the chart, one JSON file per (model, seed), resuming,
failures recorded, user mistakes stopping at once."""

import json
import re
import shutil
import sys

import pytest
from helpers import run_record, write_dataset

from recbole_fbsm.cli.experiments import compare as compare_command
from recbole_fbsm.cli.experiments import compare_options
from recbole_fbsm.errors import ColdStartError
from recbole_fbsm.experiments import compare as cmp
from recbole_fbsm.experiments import report

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
BOOM = RuntimeError("boom | bad\nthing")  # a message with a table's separator and a line break
# Pop and CoSim on ml-100k, one split: the fixture's comparison, and the one resumed from its folder
POP_COSIM = ["--dataset=ml-100k", "--models", "Pop", "CoSim", "--seeds", "2020", "--use_gpu=False", "--worker=0"]


def table_rows(table, which=0):
    """model name -> the cells of its row in the ``which``-th markdown table (0: the comparison's)."""
    tables = [block for block in table.split("\n\n") if block.startswith("| model")]
    rows = {}
    for line in tables[which].splitlines() if len(tables) > which else []:
        if line.startswith("| ") and not line.startswith("| model"):
            cells = [c.strip() for c in line.strip("|").split(" | ")]
            rows[cells[0]] = cells
    return rows


# ---------------------------------------------------------------------------- a real comparison
@pytest.fixture(scope="module")
def real_results(tmp_path_factory):
    """Pop and CoSim on ml-100k, one split, through the real run(); the folder and the console output."""
    cwd = tmp_path_factory.mktemp("compare")
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(cwd)
        code = compare_command([*POP_COSIM, "--results", "results/x"])
    return cwd, cwd / "results" / "x", code


def test_each_run_log_holds_the_runs_epochs_at_the_quiet_default(tmp_path):
    """compare runs at state=WARNING (a quiet console); each run's log file still has its epochs
    (a real process: in-process under pytest, RecBole leaves logging to the host)."""
    import subprocess
    import sys

    import yaml
    from helpers import cli_env, write_dataset

    write_dataset(tmp_path, "toy")
    config = tmp_path / "toy.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "data_path": str(tmp_path),
                "threshold": {"rating": 4},
                "load_col": {"inter": ["user_id", "item_id", "rating"], "item": ["item_id", "genre", "words"]},
            }
        )
    )
    process = subprocess.run(
        [
            sys.executable,
            "-m",
            "recbole_fbsm",
            "compare",
            "--dataset=toy",
            "--models",
            "CoSim",
            "Pop",
            "--seeds",
            "1",
            "--results",
            "results/x",
            f"--config_files={config}",
            "--use_gpu=False",
            "--worker=0",
        ],
        cwd=tmp_path,
        env=cli_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert process.returncode == 0, process.stderr[-3000:]
    for model in ("CoSim", "Pop"):
        record = json.loads((tmp_path / "results" / "x" / f"{model}-1.json").read_text())
        log = (tmp_path / record["log_file"]).read_text()
        # CoSim has nothing to train: one line says so instead of an epoch with a zero loss
        epoch = "nothing to train: CoSim" if model == "CoSim" else "epoch 0 training"
        assert epoch in log and "valid result" in log


def test_real_comparison_writes_table_chart_and_one_json_per_pair(real_results):
    cwd, results, code = real_results
    assert code == 0
    table = (results / "table.md").read_text()
    rows = table_rows(table)
    assert set(rows) == {"Pop", "CoSim"}
    for cells in rows.values():
        assert cells[-1] == "ok"
        assert sum(re.fullmatch(r"[\d.]+", c) is not None for c in cells) >= 5  # valid score, test metrics, time
    assert "Recall@10" in table and "NDCG@10" in table and "valid Recall@10" in table
    assert (results / "chart.png").read_bytes()[:8] == PNG_MAGIC
    # who should see a new item: CoSim's users direction from its record (Pop scores no feature rows)
    users = table_rows(table, which=1)
    audience = json.loads((results / "CoSim-2020.json").read_text())["audience"]
    assert set(users) == {"CoSim"} and users["CoSim"][1] == f"{audience['alpha']:g}"
    assert users["CoSim"][2].startswith(f"{audience['test_raw']['recall@10']:.4f}")

    for model in ("Pop", "CoSim"):
        record = json.loads((results / f"{model}-2020.json").read_text())
        assert record["status"] == "ok" and record["seed"] == record["split_seed"] == 2020
        assert record["settings"]["dataset"] == "ml-100k"
        assert 0 <= record["test_result"]["recall@10"] <= 1 and record["wall_seconds"] > 0
        # the checkpoint is in the results folder, nowhere else
        assert (cwd / record["saved_model_file"]).parent == results / "saved"
    assert not (cwd / "saved").exists()
    assert not list(results.glob("*.tmp")) and not list(results.glob(".*.tmp"))


def test_real_comparison_ranks_cosim_above_pop(real_results):
    _, results, _ = real_results
    test = {m: json.loads((results / f"{m}-2020.json").read_text())["test_result"] for m in ("Pop", "CoSim")}
    assert test["CoSim"]["recall@10"] > test["Pop"]["recall@10"]


# ------------------------------------------------------------------------------- a counting run
class FakeRun:
    """Stands in for run(): records its calls, fails for the models in ``fail``, returns made-up scores."""

    def __init__(self, fail=(), raise_on_call=None, error=BOOM):
        self.calls = []
        self.fail = set(fail)
        self.raise_on_call = raise_on_call
        self.error = error

    def __call__(self, model, dataset, config_file_list=None, config_dict=None, saved=True):
        self.calls.append((model, config_dict["seed"], dataset, config_file_list, dict(config_dict)))
        if self.raise_on_call is not None and len(self.calls) == self.raise_on_call:
            raise self.error
        if model in self.fail:
            raise self.error
        base = (sum(map(ord, model)) % 7) / 10 + (config_dict["seed"] % 10) / 100
        metrics = {"recall@10": base, "ndcg@10": base / 2, "hit@10": min(1.0, base * 3)}
        result = {
            "best_valid_score": base + 0.01,
            "valid_score_bigger": True,
            "best_valid_result": {k: v + 0.01 for k, v in metrics.items()},
            "test_result": metrics,
            "saved_model_file": f"saved/{model}.pth",
        }
        record = {
            "model": model,
            "seed": config_dict["seed"],
            "split_seed": config_dict["seed"],
            "status": "ok",
            "valid_metric": "recall@10",
            "property_files": [],
            "log_file": None,
            "eval_user_sample": None,
        }
        return {**result, "record": {**record, **result}}

    @property
    def pairs(self):
        return [(model, seed) for model, seed, *_ in self.calls]


@pytest.fixture
def fake(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    fake_run = FakeRun()
    monkeypatch.setattr(cmp, "run", fake_run)
    return fake_run


def test_resume_redoes_nothing_and_a_new_model_runs_alone(real_results, fake, tmp_path):
    shutil.copytree(real_results[1], tmp_path / "r")
    args = [*POP_COSIM, "--results", "r"]
    before = {p.name: p.read_bytes() for p in (tmp_path / "r").glob("*.json")}

    assert compare_command(args) == 0
    assert fake.pairs == []
    assert {p.name: p.read_bytes() for p in (tmp_path / "r").glob("*.json")} == before

    args[2:4] = ["Pop", "CoSim", "Random"]
    assert compare_command(args) == 0
    assert fake.pairs == [("Random", 2020)]
    rows = table_rows((tmp_path / "r" / "table.md").read_text())
    assert set(rows) == {"Pop", "CoSim", "Random"}
    assert list(rows) == ["Pop", "CoSim", "Random"]  # the order of --models
    assert (tmp_path / "r" / "chart.png").read_bytes()[:8] == PNG_MAGIC


def test_every_run_gets_the_split_seed_the_overrides_and_checkpoints_in_the_results(fake, tmp_path):
    (tmp_path / "a.yaml").write_text("epochs: 3\n")
    code = compare_command(
        [
            "--dataset=ml-100k",
            "--models",
            "Pop",
            "BPR",
            "--seeds",
            "7",
            "8",
            "--results",
            "out",
            "--config_files",
            "a.yaml",
            "--epochs=2",
            "--state=INFO",
        ]
    )
    assert code == 0
    assert fake.pairs == [("Pop", 7), ("BPR", 7), ("Pop", 8), ("BPR", 8)]  # one whole split after the other
    for _, seed, dataset, files, config in fake.calls:
        assert dataset == "ml-100k" and files == ["a.yaml"]
        assert config["seed"] == config["split_seed"] == seed
        assert config["checkpoint_dir"] == "out/saved"
        assert config["epochs"] == "2" and config["state"] == "INFO"  # the user's settings win
        assert config["show_progress"] is False
    table = (tmp_path / "out" / "table.md").read_text()
    cells = table_rows(table)["Pop"]
    # two splits: mean and sample std of the made-up scores (base + seed/100)
    base = (sum(map(ord, "Pop")) % 7) / 10
    mean, std = report.mean_std([base + 0.07, base + 0.08])
    assert f"{mean:.4f} ± {std:.4f}" in cells and std > 0
    assert "`--epochs=2`" in table and "`a.yaml`" in table


def test_quiet_by_default(fake):
    assert compare_command(["--models", "Pop", "--seeds", "1", "--results", "q"]) == 0
    config = fake.calls[0][4]
    assert config["state"] == "WARNING"


def test_changed_settings_or_config_file_run_again(fake, tmp_path):
    args = ["--models", "Pop", "--seeds", "1", "--results", "r", "--config_files", "a.yaml"]
    (tmp_path / "a.yaml").write_text("epochs: 3\n")
    compare_command(args)
    compare_command(args)
    assert len(fake.calls) == 1
    compare_command(args + ["--epochs=5"])  # another override
    assert len(fake.calls) == 2
    compare_command(args + ["--epochs=5"])
    assert len(fake.calls) == 2
    (tmp_path / "a.yaml").write_text("epochs: 4\n")  # the same file name, another content
    compare_command(args + ["--epochs=5"])
    assert len(fake.calls) == 3


def test_changed_data_runs_again(fake, tmp_path, capsys):
    """A stored result is bound to the content of the data it was computed on, not to the dataset's name."""
    write_dataset(tmp_path / "data", "toy")
    args = ["--dataset=toy", "--models", "Pop", "--seeds", "1", "--results", "r", f"--data_path={tmp_path / 'data'}"]
    compare_command(args)
    compare_command(args)
    assert len(fake.calls) == 1
    record = json.loads((tmp_path / "r" / "Pop-1.json").read_text())
    assert len(record["settings"]["data_sha256"]) == 64 and record["settings"]["package_version"]
    inter = tmp_path / "data" / "toy" / "toy.inter"
    inter.write_text(inter.read_text().replace("\t1\n", "\t2\n", 20))  # 20 ratings changed
    capsys.readouterr()
    compare_command(args)
    assert len(fake.calls) == 2
    assert "stored result differs in the data: running again" in capsys.readouterr().out


def test_a_comparison_with_an_absolute_data_path_has_its_rows_in_the_table(fake, tmp_path, capsys):
    """Records hold their settings without this machine's paths; the table still takes them as this comparison's."""
    write_dataset(tmp_path / "data", "toy")
    args = ["--dataset=toy", "--models", "Pop", "--seeds", "1", "--results", "r", f"--data_path={tmp_path / 'data'}"]
    assert compare_command(args) == 0
    assert "Pop" in table_rows((tmp_path / "r" / "table.md").read_text())
    assert "left out of the table" not in capsys.readouterr().out


def test_failing_model_is_recorded_and_the_others_go_on(fake, tmp_path, capsys):
    fake.fail = {"BPR"}
    code = compare_command(["--models", "Pop", "BPR", "CoSim", "--seeds", "1", "2", "--results", "r"])
    assert code == 1
    assert fake.pairs == [("Pop", 1), ("BPR", 1), ("CoSim", 1), ("Pop", 2), ("BPR", 2), ("CoSim", 2)]
    record = json.loads((tmp_path / "r" / "BPR-1.json").read_text())
    assert record["status"] == "failed" and record["error"].startswith("RuntimeError: boom")
    assert "Traceback" in record["traceback"]
    table = (tmp_path / "r" / "table.md").read_text()
    rows = table_rows(table)
    assert rows["BPR"][1] == "0/2" and "failed" in rows["BPR"][-1] and "boom \\| bad thing" in rows["BPR"][-1]
    assert rows["Pop"][-1] == "ok" and rows["CoSim"][-1] == "ok"
    assert "FAILED" in capsys.readouterr().out
    # the chart shows the models that ran
    assert (tmp_path / "r" / "chart.png").read_bytes()[:8] == PNG_MAGIC

    # resuming retries the failed pairs only
    fake.fail = set()
    fake.calls.clear()
    assert compare_command(["--models", "Pop", "BPR", "CoSim", "--seeds", "1", "2", "--results", "r"]) == 0
    assert fake.pairs == [("BPR", 1), ("BPR", 2)]
    assert table_rows((tmp_path / "r" / "table.md").read_text())["BPR"][-1] == "ok"


def test_interrupted_comparison_resumes_where_it_stopped(fake, tmp_path, capsys):
    fake.raise_on_call, fake.error = 2, KeyboardInterrupt()
    args = ["--models", "Pop", "CoSim", "--seeds", "1", "--results", "r"]
    assert compare_command(args) == 130
    assert "--results=r" in capsys.readouterr().err
    assert [p.name for p in (tmp_path / "r").iterdir() if p.is_file()] == ["Pop-1.json"]
    fake.raise_on_call = None
    fake.calls.clear()
    assert compare_command(args) == 0
    assert fake.pairs == [("CoSim", 1)]


def test_unreadable_json_is_run_again(fake, tmp_path):
    (tmp_path / "r").mkdir()
    (tmp_path / "r" / "Pop-1.json").write_text('{"model": "Pop", "se')  # a file cut short by hand
    (tmp_path / "r" / ".Pop-1.json.x.tmp").write_text("left over")
    assert compare_command(["--models", "Pop", "--seeds", "1", "--results", "r"]) == 0
    assert fake.pairs == [("Pop", 1)]
    assert json.loads((tmp_path / "r" / "Pop-1.json").read_text())["status"] == "ok"


def test_setting_error_in_the_first_run_stops_with_exit_2(fake, tmp_path, capsys):
    fake.raise_on_call, fake.error = 1, ColdStartError("eval_args.split.RS: the ratios sum to 2")
    assert compare_command(["--models", "Pop", "CoSim", "--seeds", "1", "2", "--results", "r"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: eval_args.split.RS") and "Traceback" not in err
    assert len(fake.calls) == 1


def test_setting_error_in_a_later_run_is_recorded(fake, tmp_path):
    fake.raise_on_call, fake.error = 2, ColdStartError("model 'CoSim': something about this model")
    assert compare_command(["--models", "Pop", "CoSim", "--seeds", "1", "--results", "r"]) == 1
    record = json.loads((tmp_path / "r" / "CoSim-1.json").read_text())
    assert record["status"] == "failed" and "something about this model" in record["error"]
    assert record["wall_seconds"] >= 0
    assert json.loads((tmp_path / "r" / "Pop-1.json").read_text())["status"] == "ok"


def test_unknown_model_stops_before_any_run(fake, tmp_path, capsys):
    assert compare_command(["--models", "Pop", "FBMS", "--seeds", "1", "--results", "r"]) == 2
    assert "unknown model 'FBMS'" in capsys.readouterr().err
    assert fake.calls == [] and not (tmp_path / "r").exists()


@pytest.mark.parametrize(
    "bad", [["--seed=7"], ["--split_seed=7"], ["--model=Pop"], ["epochs=3"], ["--seeds", "1", "1"]]
)
def test_usage_errors(fake, bad, capsys):
    with pytest.raises(SystemExit) as info:
        compare_command([*bad, "--models", "Pop"])  # after --models, a bare word would be a model name
    assert info.value.code == 2
    assert fake.calls == []


def test_default_models_seeds_and_results_folder(fake, tmp_path, capsys):
    args, overrides = compare_options([])
    assert args.models[:5] == ["FBSM", "UFSM", "ItemKNNCBF", "CoSim", "FM"] and len(args.models) >= 6
    assert args.seeds == [2020, 2021, 2022] and overrides == {}
    assert compare_command(["--models", "Pop", "--seeds", "1"]) == 0
    out = capsys.readouterr().out
    folders = list((tmp_path / "results").iterdir())
    assert len(folders) == 1 and folders[0].name.startswith("ml-100k-")
    assert f"results folder: results/{folders[0].name}" in out
    # the table gives the command that resumes this comparison
    assert f"--results=results/{folders[0].name}" in (folders[0] / "table.md").read_text()


def test_help_runs():
    with pytest.raises(SystemExit) as info:
        compare_command(["--help"])
    assert info.value.code == 0


def test_table_shows_each_models_per_split_ratio_to_itemknncbf_and_cosim():
    """The ratio columns are the mean of per-split ratios of the validation metric's test value."""

    def record(model, seed, recall):
        return run_record(model, seed, {"recall@10": recall, "ndcg@10": 0.5})

    records = [
        record("FBSM", 1, 0.22),
        record("FBSM", 2, 0.30),
        record("ItemKNNCBF", 1, 0.20),
        record("ItemKNNCBF", 2, 0.25),
        record("CoSim", 1, 0.11),
        record("CoSim", 2, 0.20),
    ]
    rows = report.summarise(records, ["FBSM", "ItemKNNCBF", "CoSim"])
    table = report.build_table(rows, {"dataset": "d", "config_files": [], "overrides": {}})
    header = next(line for line in table.splitlines() if line.startswith("| model"))
    assert "/ ItemKNNCBF (per split)" in header and "/ CoSim (per split)" in header
    fbsm = next(line for line in table.splitlines() if line.startswith("| FBSM"))
    assert "1.150 (1.10, 1.20)" in fbsm and "1.750 (2.00, 1.50)" in fbsm
    without = report.build_table(
        report.summarise(records[:2], ["FBSM"]), {"dataset": "d", "config_files": [], "overrides": {}}
    )
    assert "/ ItemKNNCBF" not in without


def test_seeds_out_of_range_and_a_results_file_are_usage_errors(tmp_path, capsys):
    (tmp_path / "afile").write_text("")
    for argv, message in (
        (["--models", "Pop", "--seeds", "-1"], "--seeds: expected integers from 0 to 4294967295"),
        (
            ["--models", "Pop", "--seeds", "1", "--results", str(tmp_path / "afile")],
            "expected a folder (new, or one to resume); it is a file",
        ),
    ):
        with pytest.raises(SystemExit) as stop:
            compare_options(argv)
        assert stop.value.code == 2 and message in capsys.readouterr().err


def test_the_table_records_the_command_as_typed(fake, tmp_path, monkeypatch):
    """sys.argv as given, shell-quoted (not a python -m line made up for it); the folder it chose is said apart."""
    argv = ["--dataset=ml-100k", "--metrics=['Recall', 'NDCG']", "--models", "Pop", "--seeds", "1"]
    monkeypatch.setattr(sys, "argv", ["/venv/bin/recbole-fbsm", "compare", *argv])
    monkeypatch.setattr(sys, "orig_argv", ["/venv/bin/python", "/venv/bin/recbole-fbsm", "compare", *argv])
    assert compare_command(argv) == 0 and fake.pairs == [("Pop", 1)]
    (table,) = (tmp_path / "results").glob("*/table.md")
    command = next(line for line in table.read_text().splitlines() if line.startswith("Command:"))
    folder = table.parent.relative_to(tmp_path)
    assert command == (
        "Command: `recbole-fbsm compare --dataset=ml-100k "
        "'--metrics=['\"'\"'Recall'\"'\"', '\"'\"'NDCG'\"'\"']' --models Pop --seeds 1` "
        f"(to resume or add runs: the same command with --results={folder})"
    )
