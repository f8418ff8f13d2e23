"""End to end: the CLI on ml-100k, best-checkpoint reload, unique checkpoints, clear errors for unknown
models, no pickled caches, context-aware models without item_id."""

import logging
import re
import time
import traceback
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers import dataset_config, item_token_ids, run_cli, start_cli

from recbole_fbsm import quick_start
from recbole_fbsm.config.cold_start_config import ColdStartConfig
from recbole_fbsm.config.registry import get_model
from recbole_fbsm.errors import ColdStartError
from recbole_fbsm.quick_start import prepare, run
from recbole_fbsm.training.trainer import get_trainer, load_checkpoint

CLI_MODELS = ["BPR", "Pop", "Random", "ItemKNN", "FM"]
GARBAGE = b"not a pickle: a cache file must never be read\x00\xff"
LOADING = "Loading model structure and parameters from "


# ------------------------------------------------------------------------------------------ the CLI
@pytest.fixture(scope="module")
def cli_runs(tmp_path_factory):
    """Every CLI model on ml-100k (2 epochs for BPR and FM), plus a second Pop run started at the same moment
    as the first, all in one
    working directory whose saved/ holds garbage files with RecBole's cache names."""
    cwd = tmp_path_factory.mktemp("cli")
    saved = cwd / "saved"
    saved.mkdir()
    caches = [saved / "ml-100k-ColdStartDataset.pth", saved / "ml-100k-Dataset.pth"]
    caches += [saved / f"ml-100k-for-{model}-dataloader.pth" for model in CLI_MODELS]
    for path in caches:
        path.write_bytes(GARBAGE)
    # Pop, Random and ItemKNN learn nothing more in a second epoch: one keeps the suite fast.
    jobs = [(model, model, 2 if model in ("BPR", "FM") else 1) for model in CLI_MODELS] + [("Pop-again", "Pop", 1)]
    processes = {
        # --state=INFO: RecBole's full console, whose checkpoint lines these tests read
        name: start_cli([f"--model={model}", "--dataset=ml-100k", f"--epochs={epochs}", "--state=INFO"], cwd)
        for name, model, epochs in jobs
    }
    results = {}
    deadline = time.time() + 400
    for name, process in processes.items():
        try:
            out, err = process.communicate(timeout=max(1, deadline - time.time()))
        except Exception:
            process.kill()
            out, err = process.communicate()
        results[name] = (process.returncode, out, err)
    return cwd, caches, results


@pytest.mark.parametrize("name", CLI_MODELS)
def test_cli_runs_end_to_end_and_tests_the_best_checkpoint(cli_runs, name):
    cwd, _, results = cli_runs
    code, out, err = results[name]
    assert code == 0, err[-3000:]
    assert "Traceback" not in err

    match = re.search(r"^test result: (\{.*\})$", out, re.M)
    assert match, out
    test_result = eval(match.group(1))
    assert {"recall@10", "ndcg@10"} <= set(test_result)
    assert all(0.0 <= value <= 1.0 for value in test_result.values())

    saved = re.findall(r"Saving current: (\S+\.pth)", err)
    loaded = re.findall(re.escape(LOADING) + r"(\S+\.pth)", err)
    assert saved, "no checkpoint was written"
    assert len(loaded) == 1, "the test must load the best checkpoint once"
    checkpoint = cwd / loaded[0]
    assert loaded[0] == saved[-1], "the test must use the last improving (best) checkpoint"
    assert checkpoint.is_file() and checkpoint.parent == cwd / "saved"
    state = load_checkpoint(checkpoint)
    assert state["config"]["model"] == name and "state_dict" in state

    # RecBole's own log file (./log/<model>/) records the reload too
    logs = list((cwd / "log" / name).glob(f"{name}-ml-100k-*.log"))
    assert logs and any(LOADING + loaded[0] in log.read_text() for log in logs)


def test_two_runs_never_share_a_checkpoint_file(cli_runs):
    cwd, _, results = cli_runs
    files = []
    for name in ("Pop", "Pop-again"):
        code, _, err = results[name]
        assert code == 0, err[-3000:]
        files.append(re.findall(re.escape(LOADING) + r"(\S+\.pth)", err)[0])
    assert files[0] != files[1]
    assert all((cwd / f).is_file() for f in files)
    assert load_checkpoint(cwd / files[0])["config"]["model"] == load_checkpoint(cwd / files[1])["config"]["model"]


def test_cli_never_reads_pickled_caches(cli_runs):
    _, caches, results = cli_runs
    assert all(code == 0 for code, _, _ in results.values())
    for path in caches:
        assert path.read_bytes() == GARBAGE, f"{path.name} was rewritten"


def test_two_trainers_created_in_the_same_second_get_different_checkpoint_files(toy, quiet, workdir):
    config, model, _ = prepare("BPR", toy.name, config_dict=dataset_config(toy, quiet))
    trainer_class = get_trainer(config["MODEL_TYPE"], config["model"])
    files = {trainer_class(config, model).saved_model_file for _ in range(5)}
    assert len(files) == 5
    assert all(Path(f).parent == Path(config["checkpoint_dir"]) for f in files)


# ----------------------------------------------------------------------------- best checkpoint reload
def test_test_evaluation_uses_the_best_epoch_not_the_last(toy, quiet, workdir, monkeypatch, caplog):
    """Validation improves only at epoch 0 of 3: the test must run on epoch 0's weights."""
    captured = {}
    real_get_trainer = quick_start.get_trainer

    def spy_get_trainer(model_type, model_name):
        base = real_get_trainer(model_type, model_name)

        class Spy(base):
            def _valid_epoch(self, valid_data, show_progress=False):
                score, result = super()._valid_epoch(valid_data, show_progress=show_progress)
                captured["validations"] = captured.get("validations", 0) + 1
                return (1.0 if captured["validations"] == 1 else 0.0), result

            def fit(self, *args, **kwargs):
                output = super().fit(*args, **kwargs)
                captured["last_epoch_state"] = {k: v.clone() for k, v in self.model.state_dict().items()}
                captured["trainer"] = self
                return output

        return Spy

    monkeypatch.setattr(quick_start, "get_trainer", spy_get_trainer)
    caplog.set_level(logging.INFO)
    result = run("BPR", toy.name, config_dict=dataset_config(toy, quiet, epochs=3, learning_rate=0.05))

    assert captured["validations"] == 3
    checkpoint_file = result["saved_model_file"]
    assert Path(checkpoint_file).is_file()
    assert f"{LOADING}{checkpoint_file}" in caplog.text
    checkpoint = load_checkpoint(checkpoint_file)
    assert checkpoint["epoch"] == 0

    trainer = captured["trainer"]
    tested_state = trainer.model.state_dict()
    for key, value in checkpoint["state_dict"].items():
        assert torch.equal(tested_state[key].cpu(), value.cpu()), "the tested weights are not the checkpoint's"
    assert any(not torch.equal(captured["last_epoch_state"][k], v) for k, v in tested_state.items())
    # and the reported test result is that of the checkpoint's weights
    _, _, (_, _, test_data) = prepare("BPR", toy.name, config_dict=dataset_config(toy, quiet, epochs=3))
    assert trainer.evaluate(test_data, load_best_model=False) == result["test_result"]


# ----------------------------------------------------------------------------------- unknown models
def test_cli_unknown_model_is_a_clear_error(tmp_path):
    code, out, err = run_cli(["--model=NoSuchModel", "--dataset=ml-100k"], tmp_path, timeout=120)
    assert code == 2
    assert "Traceback" not in err
    assert "test result" not in out
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(errors) == 1
    assert "unknown model 'NoSuchModel'" in errors[0]
    assert "recbole-fbsm models" in errors[0]


@pytest.mark.parametrize("name", ["NoSuchModel", "bpr", "BPR.yaml", "../BPR", "", "SASRec", "KGAT"])
def test_unknown_or_unsupported_model_names_raise_a_clear_error(name):
    with pytest.raises(ColdStartError, match=r"unknown model .*recbole-fbsm models lists"):
        get_model(name)


def test_known_models_resolve():
    assert get_model("BPR").__name__ == "BPR"
    assert get_model("FM").__name__ == "FM"
    assert get_model("ItemKNN").__name__ == "ItemKNN"


# -------------------------------------------------------------------------------------- no hidden state
def test_pickled_caches_in_checkpoint_dir_are_never_read(toy, quiet, workdir):
    saved = Path(quiet["checkpoint_dir"])
    saved.mkdir(parents=True, exist_ok=True)
    caches = [
        saved / "toy-ColdStartDataset.pth",
        saved / "toy-Dataset.pth",
        saved / "toy-for-Pop-dataloader.pth",
        workdir / "explicit-dataset.pth",
        workdir / "explicit-dataloaders.pth",
    ]
    for path in caches:
        path.write_bytes(GARBAGE)
    config = dataset_config(
        toy,
        quiet,
        dataset_save_path=str(caches[3]),
        dataloaders_save_path=str(caches[4]),
    )
    result = run("Pop", toy.name, config_dict=config)
    assert result["test_result"]["recall@10"] >= 0
    for path in caches:
        assert path.read_bytes() == GARBAGE


def test_recbole_finds_its_folders_made(toy, quiet, workdir, monkeypatch):
    """RecBole creates ./log/<model> and checkpoint_dir by check-then-makedirs, which races when runs start
    together in one folder (FileExistsError). The plugin makes them first (exist_ok): RecBole's own
    ``ensure_dir`` must never be the one to create a folder."""
    import recbole.trainer.trainer
    import recbole.utils.logger

    created_by_recbole = []

    def strict_ensure_dir(path):
        if not Path(path).is_dir():
            created_by_recbole.append(path)
            Path(path).mkdir(parents=True)

    for module in (recbole.utils.logger, recbole.trainer.trainer):
        monkeypatch.setattr(module, "ensure_dir", strict_ensure_dir)
    config = dataset_config(toy, quiet, checkpoint_dir=str(workdir / "fresh" / "saved"))
    run("Pop", toy.name, config_dict=config)
    assert created_by_recbole == []
    assert (workdir / "log" / "Pop").is_dir() and (workdir / "fresh" / "saved").is_dir()


def test_each_run_in_one_process_writes_its_own_log(toy, quiet, workdir, monkeypatch):
    """Two runs of one configuration, one process, the same second (as compare runs splits): RecBole alone
    would name both logs alike (model, dataset, second, config md5) and, its basicConfig being a no-op once
    the root logger has handlers, write the second run into the first run's file. Each run's file must hold
    its own run id and not the other's."""
    import recbole.utils.logger

    monkeypatch.setattr(recbole.utils.logger, "get_local_time", lambda: "same-second")
    monkeypatch.setattr(logging.getLogger(), "handlers", [])  # as in run_recbole.py: no host handler (pytest's)
    runs = []
    for _ in range(2):
        config, model, _ = prepare("Pop", toy.name, config_dict=dataset_config(toy, quiet, state="INFO"))
        files = [h.baseFilename for h in logging.getLogger().handlers if isinstance(h, logging.FileHandler)]
        runs.append((config["run_id"], files))
    for handler in logging.getLogger().handlers:
        handler.close()
    (first_id, first_files), (second_id, second_files) = runs
    assert len(first_files) == len(second_files) == 1 and first_files != second_files
    first_log, second_log = Path(first_files[0]).read_text(), Path(second_files[0]).read_text()
    assert first_id in first_log and second_id not in first_log
    assert second_id in second_log and first_id not in second_log


def test_command_line_of_the_host_process_is_ignored(toy, quiet, workdir, monkeypatch):
    """RecBole's Config reads every --key=value of sys.argv (pytest's too); the plugin's must not."""
    monkeypatch.setattr("sys.argv", ["pytest", "--epochs=99", "--eval_args={'group_by': 'session'}", "--seed=7"])
    config = ColdStartConfig(model="Pop", dataset=toy.name, config_dict=dataset_config(toy, quiet))
    assert config["epochs"] == quiet["epochs"] and config["seed"] != 7 and config.item_split


def test_each_run_builds_its_own_split(toy, quiet, workdir):
    """Nothing carries over between runs in one process: another seed, another split; same seed, same."""

    def test_items(seed):
        _, _, (_, _, test_data) = prepare("Pop", toy.name, config_dict=dataset_config(toy, quiet, seed=seed))
        return sorted(test_data._dataset.field2id_token["item_id"][test_data._dataset.split_items])

    first = test_items(1)
    assert test_items(2) != first
    assert test_items(1) == first


# ---------------------------------------------------------------------------------- context-aware models
CONTEXT_MODELS = ["LR", "FM", "DeepFM", "WideDeep", "NFM", "AutoInt", "DSSM", "AFM", "DCN", "PNN", "FwFM", "FFM"]


def field_names(model):
    return {
        kind: list(getattr(model, f"{kind}_field_names", [])) for kind in ("token", "token_seq", "float", "float_seq")
    } | {"all": list(getattr(model, "field_names", []))}


@pytest.mark.parametrize("name", CONTEXT_MODELS)
def test_context_models_use_item_features_not_item_id(toy, quiet, workdir, name):
    config, model, (train_data, _, _) = prepare(name, toy.name, config_dict=dataset_config(toy, quiet))
    names = field_names(model)
    used = {f for fields in names.values() for f in fields}
    assert "item_id" not in used, f"{name} embeds item_id: {names}"
    assert {"genre", "words"} <= set(names["token_seq"]), f"{name} ignores the item features: {names}"
    assert "user_id" in names["token"]
    # hiding item_id was only for the constructor: batches still carry it (to join item features)
    assert "item_id" in train_data._dataset.fields()


def test_context_model_on_ml100k_embeds_titles_and_genres_not_item_id(quiet, workdir):
    _, model, _ = prepare("FM", "ml-100k", config_dict=quiet)
    names = field_names(model)
    assert "item_id" not in {f for fields in names.values() for f in fields}
    assert names["token"] == ["user_id"] and set(names["token_seq"]) == {"movie_title", "class"}


def test_context_model_uses_item_id_only_when_asked(toy, quiet, workdir):
    _, model, _ = prepare("FM", toy.name, config_dict=dataset_config(toy, quiet, context_use_item_id=True))
    assert "item_id" in field_names(model)["token"]


def test_context_model_trains_on_sampled_negatives(toy, quiet, workdir):
    """Context models' own yaml sets no negatives; the item split needs them (labels 0 and 1)."""
    _, _, (train_data, _, _) = prepare("FM", toy.name, config_dict=dataset_config(toy, quiet))
    labels = np.concatenate([batch["label"].numpy() for batch in train_data])
    assert set(np.unique(labels).tolist()) == {0.0, 1.0}
    assert (labels == 0).sum() == (labels == 1).sum() == len(train_data._dataset.inter_feat)


@pytest.mark.parametrize("name", ["FM", "DeepFM", "DSSM"])
def test_context_models_run_end_to_end(toy, quiet, workdir, name):
    result = run(name, toy.name, config_dict=dataset_config(toy, quiet, epochs=2))
    values = list(result["test_result"].values()) + list(result["best_valid_result"].values())
    assert values and all(np.isfinite(v) and 0 <= v <= 1 for v in values)
    assert Path(result["saved_model_file"]).is_file()


def test_context_models_see_each_token_once_while_fbsm_keeps_term_counts(toy, tmp_path):
    """Repeated tokens encode term counts for FBSM's tf-idf; context models get distinct tokens."""
    item_file = toy.item_path
    lines = item_file.read_text().splitlines()
    header, first = lines[0], lines[1].split("\t")
    first[2] = " ".join(first[2].split() * 40)  # one item with every word 40 times
    item_file.write_text("\n".join([header, "\t".join(first)] + lines[2:]) + "\n")
    token = first[0]

    def words_of(model_name, **overrides):
        config, model, (train_data, _, _) = quick_start.prepare(
            model_name, toy.name, config_dict=dataset_config(toy, **overrides)
        )
        dataset = train_data._dataset
        item = dataset.token2id(dataset.iid_field, token)
        ids = item_token_ids(dataset, "words", item)
        return [t for t in dataset.field2id_token["words"][ids[ids > 0]]], dataset.field2seqlen["words"]

    distinct = first[2].split()[: len(set(first[2].split()))]
    words, seq_len = words_of("FM")
    assert words == distinct and seq_len < 40
    words, seq_len = words_of("FM", context_distinct_tokens=False)
    assert len(words) == 40 * len(distinct)
    words, _ = words_of("FBSM")
    assert len(words) == 40 * len(distinct)


def test_eval_user_sample_keeps_a_seeded_random_subset_of_evaluated_users(toy):
    def evaluated(**overrides):
        _, _, (_, valid_data, test_data) = quick_start.prepare(
            "Pop", toy.name, config_dict=dataset_config(toy, **overrides)
        )
        return [set(d._dataset.inter_feat["user_id"].numpy().tolist()) for d in (valid_data, test_data)]

    full = evaluated()
    sampled = evaluated(eval_user_sample=5)
    again = evaluated(eval_user_sample=5)
    for all_users, kept, kept_again in zip(full, sampled, again):
        assert len(all_users) > 5 and len(kept) == 5 and kept <= all_users
        assert kept == kept_again, "the sample is seeded"
    other = evaluated(eval_user_sample=5, split_seed=7, seed=7)
    assert other != sampled


def test_the_route_from_run_recbole_to_the_loss_is_six_functions_of_ours(tmp_path, monkeypatch):
    """``python run_recbole.py --model=FBSM`` reaches ``calculate_loss`` through at most 6 of the project's
    functions (issue 44), none of them in serve/, experiments/ or runtime/."""
    from helpers import REPO_ROOT, write_dataset

    import run_recbole
    from recbole_fbsm.models.fbsm import FBSM

    data = write_dataset(tmp_path)
    settings = dataset_config(data, epochs=1)
    config = tmp_path / "toy.yaml"
    config.write_text("".join(f"{key}: {value!r}\n" for key, value in settings.items()))
    stacks = []
    calculate_loss = FBSM.calculate_loss

    def recorded(self, interaction):
        stacks.append(traceback.extract_stack())
        return calculate_loss(self, interaction)

    monkeypatch.setattr(FBSM, "calculate_loss", recorded)
    monkeypatch.chdir(tmp_path)
    assert run_recbole.main(["--model=FBSM", "--dataset=toy", f"--config_files={config}"]) == 0
    files = [(Path(frame.filename).resolve(), frame.name) for frame in stacks[0][:-1]]  # [-1]: the recorder
    ours = [
        f"{path.relative_to(REPO_ROOT)}:{name}"
        for path, name in files
        if path == REPO_ROOT / "run_recbole.py" or path.is_relative_to(REPO_ROOT / "recbole_fbsm")
    ]
    assert ours == [
        "run_recbole.py:main",
        "recbole_fbsm/cli/__init__.py:dispatch",
        "recbole_fbsm/cli/run.py:run",
        "recbole_fbsm/quick_start.py:run",
        "recbole_fbsm/training/trainer.py:fit",
        "recbole_fbsm/training/trainer.py:_train_epoch",
    ]
