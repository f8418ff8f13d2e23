"""Bad input stops with one clear message that names the file or setting (CLI: exit code 2, no traceback)."""

import importlib.util
import re

import pytest
import yaml
from helpers import RUN_RECBOLE, start_cli, write_dataset

pytestmark = pytest.mark.usefixtures("workdir")

_spec = importlib.util.spec_from_file_location("run_recbole", RUN_RECBOLE)
run_recbole = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(run_recbole)


def toy_yaml(root, load_item=("item_id", "genre", "words"), **extra):
    path = root / "toy.yaml"
    settings = {
        "data_path": str(root),
        "load_col": {"inter": ["user_id", "item_id", "rating"], "item": list(load_item)},
        "threshold": {"rating": 4},
        "epochs": 1,
        "state": "ERROR",
    }
    settings.update(extra)
    path.write_text(yaml.safe_dump(settings))
    return f"--config_files={path}"


def cli_error(capsys, argv):
    """Run the CLI's main() on ``argv``; return its one error line (and check the rest of the contract)."""
    code = run_recbole.main(argv)  # an escaping exception would be a traceback: the test fails on it
    out, err = capsys.readouterr()
    assert code == 2, f"exit code {code}; stderr: {err[-2000:]}"
    assert "Traceback" not in err and "Traceback" not in out
    assert "test result" not in out
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, err
    return errors[0]


def test_missing_dataset_folder(tmp_path, capsys):
    message = cli_error(capsys, ["--model=Pop", "--dataset=nowhere", f"--data_path={tmp_path}"])
    assert "'nowhere'" in message and str(tmp_path / "nowhere") in message and "not found" in message


def test_missing_inter_file(tmp_path, capsys):
    data = write_dataset(tmp_path, "nointer")
    data.inter_path.unlink()
    message = cli_error(capsys, ["--model=Pop", "--dataset=nointer", f"--data_path={tmp_path}"])
    assert str(data.inter_path) in message and "not found" in message


def test_feature_field_missing_from_item_file(tmp_path, capsys):
    data = write_dataset(tmp_path, "toy")
    message = cli_error(
        capsys, ["--model=Pop", "--dataset=toy", toy_yaml(tmp_path), "--feature_fields=['genre', 'plot']"]
    )
    assert "feature_fields" in message and "'plot'" in message and str(data.item_path) in message
    assert "'genre'" not in message.split("lacks")[0], "only the missing field is named as missing"


def test_loaded_column_missing_from_item_file(tmp_path, capsys):
    data = write_dataset(tmp_path, "toy")
    message = cli_error(capsys, ["--model=Pop", "--dataset=toy", toy_yaml(tmp_path, load_item=("item_id", "plot"))])
    assert "load_col.item" in message and "'plot'" in message and str(data.item_path) in message


def test_feature_fields_need_an_item_file(tmp_path, capsys):
    data = write_dataset(tmp_path, "toy")
    data.item_path.unlink()
    settings = toy_yaml(tmp_path)
    path = tmp_path / "toy.yaml"
    loaded = yaml.safe_load(path.read_text())
    loaded["load_col"].pop("item")
    path.write_text(yaml.safe_dump(loaded))
    message = cli_error(capsys, ["--model=Pop", "--dataset=toy", settings, "--feature_fields=['genre']"])
    assert "feature_fields" in message and str(data.item_path) in message and "not found" in message


@pytest.mark.parametrize("model", ["FBSM", "ItemKNNCBF"])
def test_a_feature_model_names_the_missing_item_file_first(tmp_path, capsys, model):
    """A dataset of one's own with only its .inter file: the first error names NAME.item (not topk, not a field)."""
    data = write_dataset(tmp_path, "toy", n_items=20)  # so few items that the default topk would fail too
    data.item_path.unlink()
    message = cli_error(capsys, [f"--model={model}", "--dataset=toy", f"--data_path={tmp_path}", "--state=ERROR"])
    assert str(data.item_path) in message and "not found" in message and "topk" not in message


@pytest.mark.parametrize(
    "eval_args, expected",
    [
        ("{'split': {'RS': [0.5, 0.2, 0.2]}}", [r"eval_args\.split\.RS", r"sum to 0\.9", r"expected 1"]),
        ("{'split': {'RS': [0.6, 0.3, 0.3]}}", [r"eval_args\.split\.RS", r"sum to 1\.2"]),
        ("{'split': {'RS': [0.8, 0.2, 0.0]}}", [r"eval_args\.split\.RS", r"three positive ratios", r"0\.0"]),
        ("{'split': {'RS': [0.8, 0.2]}}", [r"eval_args\.split\.RS", r"three positive ratios"]),
        ("{'split': {'LS': 'valid_and_test'}}", [r"eval_args\.split", r"RS"]),
        ("{'group_by': 'session'}", [r"--eval_args: expected 'group_by'", r"'session'", r"item, user, none"]),
    ],
)
def test_bad_split_settings(tmp_path, capsys, eval_args, expected):
    write_dataset(tmp_path, "toy")
    message = cli_error(capsys, ["--model=Pop", "--dataset=toy", toy_yaml(tmp_path), f"--eval_args={eval_args}"])
    for pattern in expected:
        assert re.search(pattern, message), f"{pattern!r} not in {message!r}"


@pytest.mark.parametrize("value", ["0", "-2", "'two'", "1.5", "autp"])
def test_bad_torch_threads(tmp_path, capsys, value):
    write_dataset(tmp_path, "toy")
    message = cli_error(capsys, ["--model=Pop", "--dataset=toy", toy_yaml(tmp_path), f"--torch_threads={value}"])
    assert (
        "torch_threads" in message and "auto or an integer from 1 to" in message and "this machine's cores" in message
    )
    assert len(message.strip().splitlines()) == 1


def test_torch_threads_sets_torchs_thread_count_for_the_run():
    import torch

    from recbole_fbsm.runtime.threads import set_torch_threads

    before = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        line = set_torch_threads({"torch_threads": 1, "train_batch_size": 1 << 20})  # explicit: 1 for large steps
        assert line.startswith("torch threads: 1 ") and torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)


def test_ratios_that_leave_a_split_without_items(tmp_path, capsys):
    write_dataset(tmp_path, "toy", n_items=60)
    message = cli_error(
        capsys,
        ["--model=Pop", "--dataset=toy", toy_yaml(tmp_path), "--eval_args={'split': {'RS': [0.99, 0.005, 0.005]}}"],
    )
    assert "'toy'" in message and "too small to split" in message
    assert "eval_args.split.RS" in message and "(60, 0, 0)" in message


def test_dataset_too_small_to_split(tmp_path, capsys):
    write_dataset(tmp_path, "toy", n_items=2, n_users=5)
    message = cli_error(capsys, ["--model=Pop", "--dataset=toy", toy_yaml(tmp_path)])
    assert "'toy'" in message and "too small to split" in message and "2 items" in message


def test_split_without_any_like(tmp_path, capsys):
    """Three items, one per split, one of them only disliked: whatever the seed, one split has no like
    (a training split without likes used to crash deep in torch with num_samples=0)."""
    folder = tmp_path / "toy"
    folder.mkdir()
    (folder / "toy.inter").write_text(
        "user_id:token\titem_id:token\trating:float\nu1\tA\t5\nu2\tB\t4\nu1\tC\t1\nu2\tC\t2\n"
    )
    (folder / "toy.item").write_text(
        "item_id:token\tgenre:token_seq\twords:token_seq\nA\tg1\tw1\nB\tg2\tw2\nC\tg1\tw3\n"
    )
    phases = set()
    for seed in range(12):
        message = cli_error(
            capsys,
            [
                "--model=Pop",
                "--dataset=toy",
                toy_yaml(tmp_path),
                f"--seed={seed}",
                "--eval_args={'split': {'RS': [0.34, 0.33, 0.33]}}",
            ],
        )
        match = re.search(r"leaves the (train|valid|test) split \(1 items\) without any liked interaction", message)
        assert match and "'toy'" in message, message
        phases.add(match.group(1))
    assert phases == {"train", "valid", "test"}


def test_real_cli_prints_no_traceback(tmp_path):
    """The same contract through a real process (logging set up, warnings on): exit code 2, one error line.
    One error found while checking the files, one while splitting (config errors: test_pipeline's CLI test)."""
    write_dataset(tmp_path, "toy")
    cases = {
        "folder": (["--model=Pop", "--dataset=nowhere", f"--data_path={tmp_path}"], "not found"),
        "small": (
            ["--model=Pop", "--dataset=toy", toy_yaml(tmp_path), "--eval_args={'split': {'RS': [0.99, 0.005, 0.005]}}"],
            "too small to split",
        ),
    }
    processes = {name: start_cli(argv, tmp_path) for name, (argv, _) in cases.items()}
    for name, process in processes.items():
        out, err = process.communicate(timeout=180)
        assert process.returncode == 2, err[-3000:]
        assert "Traceback" not in err
        errors = [line for line in err.splitlines() if line.startswith("error:")]
        assert len(errors) == 1 and cases[name][1] in errors[0], err[-3000:]
