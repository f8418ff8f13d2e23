"""A run that keeps FBSM's untrained start says what that means, and its artifact says it too.

FBSM starts as ItemKNNCBF's similarity (BM25 with the row shrink, D = 1, V near 0); when no epoch beats it on
validation, the model kept is that fixed similarity. The run's last lines say so and name the comparison that
shows it; ``serve interactions`` refuses to list V's random initialisation as "learned interactions".
"""

import json
import logging

import pytest
import yaml
from helpers import dataset_config

from recbole_fbsm.cli.run import run as run_main
from recbole_fbsm.cli.serve import serve as serve_main
from recbole_fbsm.serve.loading import read_model_file
from recbole_fbsm.storage.safe_files import load_checkpoint
from recbole_fbsm.training.trainer import ColdStartTrainerMixin


def run_fbsm(toy, tmp_path, capsys, **settings):
    config_file = tmp_path / "toy.yaml"
    config_file.write_text(yaml.safe_dump(dataset_config(toy, **settings)))
    code = run_main(["--model=FBSM", f"--dataset={toy.name}", f"--config_files={config_file}", "--torch_threads=1"])
    out = capsys.readouterr().out
    assert code == 0, out
    artifact = next(line.split()[2] for line in out.splitlines() if line.startswith("model artifact:"))
    return out.splitlines(), artifact, config_file


@pytest.fixture
def kept_start(toy, tmp_path, capsys):
    # steps of 1e-12 leave every score as it was: no epoch beats the start strictly, so the start is kept
    return run_fbsm(toy, tmp_path, capsys, epochs=2, learning_rate=1e-12)


def test_the_last_lines_say_the_untrained_start_was_kept_and_what_it_is(toy, kept_start, workdir):
    lines, artifact, config_file = kept_start
    assert lines[-3].startswith("kept the untrained start: no training epoch beat it on validation (recall@10 0.")
    assert lines[-2] == (
        "FBSM starts as ItemKNNCBF's BM25 similarity with the row shrink (feature_weighting: bm25, "
        "feature_shrink: 1; D = 1, V near 0), so the model kept is that fixed similarity, not a "
        "learned one."
    )
    assert lines[-1] == (
        f"side by side with the baselines: recbole-fbsm compare --dataset={toy.name} "
        f"--config_files={config_file} --models FBSM ItemKNNCBF CoSim"
    )
    (record,) = [json.loads(path.read_text()) for path in (workdir / "log" / "FBSM").glob("*.json")]
    assert record["best_epoch"] == -1 and record["start_valid_score"] == record["best_valid_score"]
    training = read_model_file(artifact)["training"]
    assert training["kept_epoch"] == -1 and training["valid_metric"] == "recall@10"
    assert training["kept_valid_score"] == pytest.approx(record["best_valid_score"])


def test_interactions_of_a_kept_start_say_so_instead_of_listing_noise(kept_start, tmp_path, capsys):
    _, artifact, _ = kept_start
    assert serve_main(["interactions", artifact, "--top", "3"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith(
        f"error: model {artifact}: validation kept FBSM's untrained start (no training "
        "epoch beat it), so V holds its random initialisation (init_std 0.01)"
    )


def test_a_model_that_learned_keeps_its_last_lines_and_its_interactions(toy, tmp_path, capsys):
    lines, artifact, _ = run_fbsm(toy, tmp_path, capsys, epochs=1, valid_before_training=False)
    assert not any(line.startswith("kept the untrained start") for line in lines)
    assert lines[-1].startswith("kept epoch 0 ") and lines[-2].startswith("model artifact:")
    assert read_model_file(artifact)["training"]["kept_epoch"] == 0
    assert serve_main(["interactions", artifact, "--top", "3"]) == 0
    assert "positive," in capsys.readouterr().out


@pytest.mark.parametrize("scenario", ["item", "hybrid"])
def test_the_summary_repeats_the_kept_epoch_and_the_checkpoint_is_announced_once(
    toy, tmp_path, capsys, caplog, monkeypatch, scenario
):
    """The kept-epoch line, logged after training, is the summary's last line in both scenarios; the checkpoint,
    rewritten on each improvement, is named once in the log, not once per improving epoch."""
    original = ColdStartTrainerMixin._valid_epoch
    calls = []

    def improving(self, *args, **kwargs):  # every epoch beats the last: one checkpoint write each
        score, result = original(self, *args, **kwargs)
        calls.append(score)
        return score + len(calls), result

    monkeypatch.setattr(ColdStartTrainerMixin, "_valid_epoch", improving)
    caplog.set_level(logging.INFO)
    hybrid = {"cold_start_scenario": "hybrid", "identity_features": True, "topk": [5]} if scenario == "hybrid" else {}
    lines, _, _ = run_fbsm(toy, tmp_path, capsys, epochs=3, **hybrid)
    assert lines[-1].startswith("kept epoch 2 (3 epochs trained)") and lines[-2].startswith("model artifact:")
    assert lines[-1] in caplog.messages and caplog.text.count("Saving current:") == 1


def test_an_export_records_the_checkpoints_kept_epoch(kept_start, tmp_path):
    _, artifact, _ = kept_start
    checkpoint = artifact[: -len(".fbsm")] + ".pth"
    assert load_checkpoint(checkpoint)["epoch"] == -1
    exported = tmp_path / "exported.fbsm"
    assert serve_main(["export", checkpoint, "-o", str(exported)]) == 0
    assert read_model_file(str(exported))["training"]["kept_epoch"] == -1
