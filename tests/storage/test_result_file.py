"""Every run writes its result file: compare's record schema, beside the run's log."""

import json
from pathlib import Path

from helpers import dataset_config, run_cli

from recbole_fbsm.experiments import compare
from recbole_fbsm.quick_start import run
from recbole_fbsm.serve.loading import read_model_file


def test_run_writes_a_record_that_compare_reads(toy, tmp_path):
    (toy.folder / f"{toy.name}.user").write_text("user_id:token\tage:float\nu000\t30\n")  # load_col leaves it out
    result = run("CoSim", toy.name, config_dict=dataset_config(toy, seed=7))
    path = Path(result["result_file"])
    assert path.parent == tmp_path / "log" / "CoSim" and path.suffix == ".json"
    record = compare.read_record(path)
    assert record is not None and record["status"] == "ok"
    assert record["model"] == "CoSim" and record["seed"] == 7 and record["split_seed"] == 7
    assert record["test_result"] == {k: float(v) for k, v in result["test_result"].items()}
    assert record["best_valid_result"] == {k: float(v) for k, v in result["best_valid_result"].items()}
    # no path of this machine: relative to the working directory the run had
    assert not Path(record["saved_model_file"]).is_absolute()
    assert Path(record["saved_model_file"]).resolve() == Path(result["saved_model_file"]).resolve()
    assert record["settings"]["dataset"] == toy.name and record["settings"]["overrides"]["seed"] == "7"
    assert record["config"]["seed"] == 7 and record["valid_metric"] == "recall@10"
    # bound to the data it was computed on: the content hash of each atomic file the dataset read (not the
    # .user file load_col leaves out), the same in the artifact, and the package version
    assert set(record["data"]["files"]) == {"toy.inter", "toy.item"}
    assert read_model_file(record["artifact_file"])["data"] == record["data"]
    assert record["settings"]["data_sha256"] == record["data"]["sha256"] and record["settings"]["package_version"]
    assert Path(record["artifact_file"]).resolve() == Path(result["artifact_file"]).resolve()


def test_the_record_has_every_key_of_compares_own(toy, tmp_path):
    settings = compare.planned_settings("CoSim", toy.name, None, dataset_config(toy))
    theirs = compare.run_pair("CoSim", toy.name, 3, tmp_path / "results", None, dataset_config(toy), settings)
    assert theirs["status"] == "ok", theirs.get("error")
    mine = json.loads(Path(sorted((tmp_path / "log" / "CoSim").glob("*.json"))[-1]).read_text())
    assert set(theirs) <= set(mine)
    for key in (
        "model",
        "seed",
        "split_seed",
        "status",
        "valid_metric",
        "best_valid_score",
        "best_valid_result",
        "test_result",
        "eval_user_sample",
    ):
        assert mine[key] == theirs[key], key
    assert Path(mine["saved_model_file"]).resolve() == Path(theirs["saved_model_file"]).resolve()


def test_command_line_prints_the_result_file_beside_the_log(toy, tmp_path):
    settings = [f"--{key}={value}" for key, value in dataset_config(toy).items() if key != "state"]
    code, out, err = run_cli(["--model=CoSim", f"--dataset={toy.name}", *settings], cwd=tmp_path)
    assert code == 0, err[-2000:]
    line = next(line for line in (out + err).splitlines() if "result file:" in line)
    path = Path(line.split("result file:")[1].strip())
    assert path.is_file() and path.with_suffix(".log").is_file()
    record = json.loads(path.read_text())
    assert Path(record["log_file"]).resolve() == path.with_suffix(".log").resolve()
    assert f"'recall@10': {round(record['test_result']['recall@10'], 4)}" in out
