"""Hyperparameter search (`run_hyper.py`, `recbole-fbsm hyper`): trials, seeds, pruning, grid
claims, the output file and the tuned property layer; and the selection of the untrained model
(`valid_before_training`)."""

import logging
import shutil
import time
from collections import Counter
from pathlib import Path
from types import SimpleNamespace

import optuna
import pytest
import torch
import yaml
from helpers import dataset_config
from optuna.trial import TrialState

from recbole_fbsm.cli.experiments import hyper
from recbole_fbsm.config import cold_start_config as config_module
from recbole_fbsm.config.cold_start_config import ColdStartConfig
from recbole_fbsm.errors import ColdStartError
from recbole_fbsm.experiments import search_space, tune
from recbole_fbsm.quick_start import prepare, run
from recbole_fbsm.training.trainer import get_trainer

# tune filters Optuna's "experimental heartbeat" warning once, at import; pytest restores every filter per test
pytestmark = pytest.mark.filterwarnings("ignore::optuna.exceptions.ExperimentalWarning")

GRID_4 = "rank choice [1, 2]\nreg_V choice [0.01, 0.1]\n"


def toy_search(toy, model, params_text, seeds=(2020,), **settings):
    params = search_space.parse_params_text(params_text)
    return tune.Search(model, toy.name, params, seeds, overrides=dataset_config(toy, **settings))


def test_a_dead_process_or_an_interrupted_trial_has_its_grid_point_run_again(monkeypatch, tmp_path):
    """Optuna's heartbeat fails the trial of a process that died, Ctrl-C fails the running one: each is queued again
    (RetryHeartbeatStaleTrialCallback, its grid point kept) and run first by the next search; no point runs twice."""
    monkeypatch.setattr(tune, "HEARTBEAT_S", 1)
    monkeypatch.setattr(tune, "HEARTBEAT_GRACE_S", 1)
    params = search_space.parse_params_text(GRID_4)
    storage = tune.make_storage(f"sqlite:///{tmp_path}/tune.db")
    study = optuna.create_study(storage=storage, sampler=tune.make_sampler("grid", params), direction="maximize")
    with pytest.warns(UserWarning, match="Heartbeat"):  # Optuna: the heartbeat is for Study.optimize
        dead = study.ask()  # a process that ran point 0, then died: its heartbeat stops
    storage.record_heartbeat(dead._trial_id)
    search = SimpleNamespace(params=params, seeds=[1], valid_metric="score", bigger=True)

    def interrupted(self, trial, k, seed, settings, done):
        raise KeyboardInterrupt

    monkeypatch.setattr(tune.Objective, "run_seed", interrupted)
    with pytest.raises(KeyboardInterrupt):
        tune.optimize(search, study, 4)
    assert [t.state for t in study.get_trials()] == [TrialState.RUNNING, TrialState.FAIL, TrialState.WAITING]

    def score(self, trial, k, seed, settings, done):
        return {"best_valid_score": settings["rank"] + settings["reg_V"], "test_result": {}, "seconds": 0}

    monkeypatch.setattr(tune.Objective, "run_seed", score)
    time.sleep(2.5)  # the dead process's heartbeat is older than the grace period now
    tune.optimize(search, study, 4)
    trials = study.get_trials()
    assert trials[0].state == TrialState.FAIL  # failed by the heartbeat, then run again from its queued copy
    done = Counter((t.params["rank"], t.params["reg_V"]) for t in trials if t.state == TrialState.COMPLETE)
    assert done == Counter({(1, 0.01): 1, (1, 0.1): 1, (2, 0.01): 1, (2, 0.1): 1})
    assert [t.system_attrs.get("failed_trial") for t in trials[2:4]] == [1, 0]  # the queued copies ran first
    tune.optimize(search, study, 4)  # the same command again: the grid is done
    assert len(study.get_trials()) == len(trials)


def test_a_trial_scores_the_mean_best_validation_over_its_split_seeds(toy):
    search = toy_search(toy, "CoSim", "feature_weighting choice ['binary']", seeds=(2020, 2021))
    study = optuna.create_study(direction="maximize")
    study.optimize(tune.Objective(search, log=lambda *_: None), n_trials=1)
    trial = study.trials[0]
    runs = trial.user_attrs["runs"]
    assert [r["seed"] for r in runs] == [2020, 2021]
    assert trial.value == pytest.approx((runs[0]["best_valid_score"] + runs[1]["best_valid_score"]) / 2)
    for r in runs:  # seed = split_seed = the trial's seed: the same runs as run_recbole.py gives
        alone = run(
            "CoSim",
            toy.name,
            config_dict=dataset_config(toy, feature_weighting="binary", seed=r["seed"], split_seed=r["seed"]),
        )
        assert r["best_valid_score"] == pytest.approx(alone["best_valid_score"])
        assert r["test_result"]["recall@10"] == pytest.approx(alone["test_result"]["recall@10"])
    assert runs[0]["best_valid_result"] != runs[1]["best_valid_result"], "two seeds, two item splits"


@pytest.mark.parametrize(
    "pruner, state, reports",
    [
        (optuna.pruners.ThresholdPruner(lower=2.0), TrialState.PRUNED, 1),  # any recall is behind: stop at once
        (optuna.pruners.NopPruner(), TrialState.COMPLETE, 5),  # the untrained model and 4 epochs
    ],
)
def test_the_pruner_sees_every_validation_and_stops_training(toy, pruner, state, reports):
    search = toy_search(toy, "FBSM", "rank choice [2]", epochs=4, stopping_step=10, valid_before_training=True)
    study = optuna.create_study(direction="maximize", pruner=pruner)
    study.optimize(tune.Objective(search, log=lambda *_: None), n_trials=1)
    trial = study.trials[0]
    assert trial.state == state
    assert sorted(trial.intermediate_values) == list(range(reports))
    if state == TrialState.COMPLETE:  # reported: the best validation so far, ending at the kept epoch's
        values = [trial.intermediate_values[step] for step in range(reports)]
        assert values == sorted(values) and values[-1] == pytest.approx(trial.value)


@pytest.fixture
def tuned_dir(workdir):
    """The working directory's properties/dataset/: where --write writes, and what runs started there load."""
    return workdir / "properties" / "dataset"


def write_toy_config(toy, path, **settings):
    path.write_text(yaml.safe_dump(dataset_config(toy, **settings)))
    return str(path)


def test_grid_search_output_file_and_write_the_winner(toy, tuned_dir, tmp_path, capsys):
    config_file = write_toy_config(toy, tmp_path / "toy.yaml")
    params_file = tmp_path / "fbsm.hyper"
    # two feature weightings: two different untrained starts, so a winner (two ranks both kept the start: a tie)
    params_file.write_text(
        "feature_weighting choice ['tfidf', 'binary']\nclip_grad_norm choice [\"{'max_norm': 5, 'norm_type': 2}\"]\n"
    )
    path = tuned_dir / toy.name / "FBSM.yaml"
    path.parent.mkdir(parents=True)
    path.write_text("seq_len: {words: 7}\nrank: 9\n")
    args = [
        "--model=FBSM",
        f"--dataset={toy.name}",
        f"--config_files={config_file}",
        f"--params_file={params_file}",
        f"--storage=sqlite:///{tmp_path}/tune.db",
        "--study_name=fbsm-toy",
        f"--output_file={tmp_path}/out.result",
    ]
    assert hyper(args + ["--write"]) == 0
    study = optuna.load_study(study_name="fbsm-toy", storage=f"sqlite:///{tmp_path}/tune.db")
    complete = study.get_trials(states=(TrialState.COMPLETE,))
    assert sorted(t.params["feature_weighting"] for t in complete) == ["binary", "tfidf"]
    assert complete[0].value != complete[1].value
    best = max(complete, key=lambda t: t.value)
    text = (tmp_path / "out.result").read_text()
    assert text.startswith(f"best params: feature_weighting:{best.params['feature_weighting']}, clip_grad_norm:")
    assert text.count("Valid result:\n") == 2 and text.count("Test result:\n") == 2

    written = path.read_text()
    assert written.startswith("# FBSM on") and "# search space: feature_weighting choice ['tfidf', 'binary']" in written
    values = yaml.safe_load(written)
    assert values["seq_len"] == {"words": 7} and values["rank"] == 9  # hand-set keys are kept
    assert values["clip_grad_norm"] == {"max_norm": 5, "norm_type": 2}  # as Config read it, not as a string
    tuned = ColdStartConfig(model="FBSM", dataset=toy.name, config_dict=dataset_config(toy))
    assert tuned["feature_weighting"] == best.params["feature_weighting"] and tuned["rank"] == 9
    # the user's settings still win over tuned values, and the layer can be switched off
    assert (
        ColdStartConfig(model="FBSM", dataset=toy.name, config_dict=dataset_config(toy, feature_weighting="tf"))[
            "feature_weighting"
        ]
        == "tf"
    )
    plain = ColdStartConfig(model="FBSM", dataset=toy.name, config_dict=dataset_config(toy, use_tuned_properties=False))
    model_file = config_module.PROPERTIES_DIR / "model" / "FBSM.yaml"
    assert plain["feature_weighting"] == yaml.safe_load(model_file.read_text())["feature_weighting"] == "bm25"

    # the same command again: the study is complete, nothing runs
    capsys.readouterr()
    assert hyper(args) == 0
    assert "[trial" not in capsys.readouterr().out
    assert len(optuna.load_study(study_name="fbsm-toy", storage=f"sqlite:///{tmp_path}/tune.db").trials) == 2


def test_tpe_search_over_continuous_ranges_on_ml_100k(tmp_path, capsys):
    params_file = tmp_path / "fbsm.hyper"
    params_file.write_text("learning_rate loguniform -7,-2\nreg_V uniform 0.0001,0.1\nrank quniform 2,8,2\n")
    output = tmp_path / "fbsm.result"
    assert (
        hyper(
            [
                "--model=FBSM",
                "--dataset=ml-100k",
                f"--params_file={params_file}",
                "--max_evals=3",
                f"--storage=sqlite:///{tmp_path}/tune.db",
                f"--output_file={output}",
                "--epochs=1",
                "--use_gpu=False",
                f"--checkpoint_dir={tmp_path}/saved",
            ]
        )
        == 0
    )
    assert ": tpe," in capsys.readouterr().out  # not every parameter is a choice: TPE by default
    study = optuna.load_study(study_name=None, storage=f"sqlite:///{tmp_path}/tune.db")
    trials = study.get_trials(states=(TrialState.COMPLETE,))
    assert len(trials) == 3
    for trial in trials:
        assert 0.0009 < trial.params["learning_rate"] < 0.1354 and 0.0001 <= trial.params["reg_V"] <= 0.1
        assert trial.params["rank"] in (2, 4, 6, 8) and isinstance(trial.params["rank"], int)
    text = output.read_text()
    best = study.best_trial
    assert text.splitlines()[0] == "best params: " + tune.params_text(best.params)
    assert f"best valid score: {best.value:.4f}" in text and text.count("Test result:") == 3


def test_bad_searches_stop_with_one_error_line(toy, tmp_path, capsys):
    good = tmp_path / "good.hyper"
    good.write_text("rank choice [1, 2]\n")
    bad = tmp_path / "bad.hyper"
    bad.write_text("rank choice [1, 2]\nreg_V loguniform 1\n")
    config_file = write_toy_config(toy, tmp_path / "toy.yaml")
    common = [f"--dataset={toy.name}", f"--config_files={config_file}", f"--storage=sqlite:///{tmp_path}/t.db"]
    cases = [
        (["--model=FBSM", f"--params_file={bad}"], "bad.hyper line 2: reg_V loguniform: expected 2 numbers"),
        (["--model=NoSuchModel", f"--params_file={good}"], "unknown model"),
        (["--model=FBSM", f"--params_file={good}", "--rank=3"], "--rank=... is also a searched parameter"),
        (["--model=FBSM", f"--params_file={bad.with_name('none.hyper')}"], "none.hyper: cannot be read"),
        (
            ["--model=FBSM", f"--params_file={good}", "--algo=grid", "--storage=nosuchdb://x"],
            "--storage 'nosuchdb://x'",
        ),
        (["--model=FBSM", f"--params_file={good}", "--rnak=3"], "unknown setting --rnak; did you mean 'rank'"),
    ]
    # every value a search may try is checked before the first trial
    for k, (text, message) in enumerate(
        [
            ("rnak choice [1, 2]\n", "unknown setting 'rnak' in params file"),
            ("learner choice ['sgd', 'sdg']\n", "setting 'learner' in params file"),
            ("rank quniform 0,8,2\n", "setting 'rank' in params file"),
        ]
    ):
        path = tmp_path / f"values{k}.hyper"
        path.write_text(text)
        cases.append((["--model=FBSM", f"--params_file={path}"], message))
    for args, message in cases:
        assert hyper(common + args) == 2, args
        err = capsys.readouterr().err
        assert err.startswith("error: ") and message in err and "Traceback" not in err
    tpe = tmp_path / "tpe.hyper"
    tpe.write_text("reg_V uniform 0,1\n")
    assert hyper(common + ["--model=FBSM", f"--params_file={tpe}", "--algo=grid"]) == 2
    assert "every parameter to be a choice" in capsys.readouterr().err
    # a named study is bound to its settings: other settings under that name are refused
    assert hyper(common + ["--model=FBSM", f"--params_file={good}", "--study_name=s", "--epochs=1"]) == 0
    assert hyper(common + ["--model=FBSM", f"--params_file={good}", "--study_name=s", "--epochs=2"]) == 2
    assert "made with other settings (overrides)" in capsys.readouterr().err


def test_the_untrained_model_is_kept_when_training_only_hurts_validation(toy, monkeypatch, tmp_path):
    """FBSM starts as the fixed similarity of its features (ItemKNNCBF's default); an epoch that makes it
    worse must not be chosen over the start."""
    monkeypatch.chdir(tmp_path)
    settings = dataset_config(
        toy, epochs=3, stopping_step=5, valid_before_training=True, init_std=0.0
    )  # start = ItemKNNCBF exactly
    config, model, (train_data, valid_data, test_data) = prepare("FBSM", toy.name, config_dict=settings)
    trainer = get_trainer(config["MODEL_TYPE"], "FBSM")(config, model)
    initial = trainer.evaluate(valid_data, load_best_model=False)

    def sabotaging_epoch(train_data, epoch_idx, loss_func=None, show_progress=False):
        with torch.no_grad():
            model.D.mul_(-1.0)  # reversed similarity: the worst ranking there is
        return 0.0

    monkeypatch.setattr(trainer, "_train_epoch", sabotaging_epoch)
    best_score, best_result = trainer.fit(train_data, valid_data, saved=True)
    assert best_result == initial and best_score == initial[config["valid_metric"].lower()]
    neighbourhood = run("ItemKNNCBF", toy.name, config_dict=dataset_config(toy))["test_result"]
    assert trainer.evaluate(test_data, load_best_model=True) == neighbourhood


def test_user_weighted_bpr_counts_every_user_the_same(toy):
    _, model, (train_data, _, _) = prepare("FBSM", toy.name, config_dict=dataset_config(toy, bpr_user_weighting=True))
    batch = next(iter(train_data))
    users = batch[model.USER_ID]
    difference = torch.linspace(-3, 3, len(users))  # any r_ui - r_uj: the weighting is what is checked
    likes = (model.R.indptr[users + 1] - model.R.indptr[users]).double()
    mean_likes = len(model.R.indices) / int((model.R.indptr[1:] > model.R.indptr[:-1]).sum())
    expected = (-torch.nn.functional.logsigmoid(difference).double() * mean_likes / likes).mean()
    assert model.bpr_loss(batch, difference).item() == pytest.approx(expected.item(), rel=1e-6)
    model.user_weighting = False
    assert model.bpr_loss(batch, difference).item() == pytest.approx(
        -torch.nn.functional.logsigmoid(difference).mean().item(), rel=1e-6
    )


def test_processes_racing_to_create_the_database_tables_retry(monkeypatch, tmp_path):
    """Processes started together on a new sqlite file race to create Optuna's tables (measured: of 4,
    3 failed with 'table studies already exists' or a UNIQUE constraint on alembic_version)."""
    import sqlalchemy.exc

    real, calls = optuna.storages.RDBStorage, []

    def racing(url, **kwargs):
        calls.append(url)
        if len(calls) == 1:
            raise sqlalchemy.exc.OperationalError("CREATE TABLE studies", {}, Exception("table studies already exists"))
        return real(url, **kwargs)

    monkeypatch.setattr(tune.time, "sleep", lambda seconds: None)
    monkeypatch.setattr(optuna.storages, "RDBStorage", racing)
    assert isinstance(tune.make_storage(f"sqlite:///{tmp_path}/t.db"), real) and len(calls) == 2


def test_a_search_on_changed_data_is_another_study(toy, tmp_path):
    """The study's default name and its stored settings carry the data's content fingerprint: after a change
    of the data a search starts afresh instead of reporting the old best."""
    storage = f"sqlite:///{tmp_path}/t.db"
    before = toy_search(toy, "FBSM", "rank choice [1, 2]\n")
    name = before.default_study_name()
    tune.open_study(before, storage, "named", optuna.samplers.RandomSampler(), optuna.pruners.NopPruner())
    inter = toy.folder / f"{toy.name}.inter"
    original = inter.read_text()
    try:
        lines = original.splitlines()
        inter.write_text("\n".join(lines[:-3]) + "\n")  # three ratings fewer
        after = toy_search(toy, "FBSM", "rank choice [1, 2]\n")
        assert after.default_study_name() != name
        with pytest.raises(ColdStartError, match=r"made with other settings \(data_sha256\)"):
            tune.open_study(after, storage, "named", optuna.samplers.RandomSampler(), optuna.pruners.NopPruner())
    finally:
        inter.write_text(original)
    assert toy_search(toy, "FBSM", "rank choice [1, 2]\n").default_study_name() == name


# ------------------------------------------------------------------------------- --write: where and when
def grid_args(toy, tmp_path, params_text, model="CoSim"):
    config_file = write_toy_config(toy, tmp_path / "toy.yaml")
    params_file = tmp_path / "grid.hyper"
    params_file.write_text(params_text)
    return [
        f"--model={model}",
        f"--dataset={toy.name}",
        f"--config_files={config_file}",
        f"--params_file={params_file}",
        f"--storage=sqlite:///{tmp_path}/tune.db",
        f"--output_file={tmp_path}/out.result",
    ]


def files_under(folder):
    return {path: path.read_bytes() for path in folder.rglob("*") if path.is_file()}


def test_write_never_writes_into_an_installed_package(toy, tmp_path, workdir, monkeypatch, capsys):
    """The plugin's properties resolved inside a (fake) site-packages: --write writes to ./properties/."""
    installed = tmp_path / "venv" / "lib" / "python3.11" / "site-packages" / "recbole_fbsm" / "properties"
    shutil.copytree(config_module.PROPERTIES_DIR, installed)
    monkeypatch.setattr(config_module, "PROPERTIES_DIR", installed)
    before = files_under(installed.parents[1])
    args = grid_args(toy, tmp_path, "feature_weighting choice ['tfidf', 'binary']\n")  # two scores (tf = binary here)
    assert hyper(args + ["--write"]) == 0
    out = capsys.readouterr().out
    assert files_under(installed.parents[1]) == before  # nothing written into the package
    local = workdir / "properties" / "dataset" / toy.name / "CoSim.yaml"
    assert f"best values written to {Path('properties') / 'dataset' / toy.name / 'CoSim.yaml'}" in out
    assert yaml.safe_load(local.read_text())["feature_weighting"] in ("tfidf", "binary")


def test_a_tie_at_the_best_score_writes_nothing_and_says_so(toy, tmp_path, workdir, capsys):
    # bm25_k1 is not read by tf-idf weighting: both grid points score the same
    args = grid_args(toy, tmp_path, "bm25_k1 choice [1.2, 2.0]\n") + ["--feature_weighting=tfidf"]
    assert hyper(args + ["--write"]) == 0
    out = capsys.readouterr().out
    assert "--write: nothing written: 2 trials tie at the best validation recall@10" in out
    assert "bm25_k1:1.2" in out and "bm25_k1:2.0" in out
    assert not (workdir / "properties").exists()


def test_a_grid_point_run_twice_is_no_tie(tmp_path, capsys):
    """The end of a shared grid can run a point twice (GridSampler): the two copies are one winner, not a tie."""
    params = search_space.parse_params_text("rank choice [1, 2]\n")
    search = SimpleNamespace(model="FBSM", dataset="toy", params=params, valid_metric="recall@10", seeds=[2020])
    study = optuna.create_study(direction="maximize")
    distributions = {p.name: p.distribution() for p in params}
    for rank, value in ((2, 0.5), (1, 0.4), (2, 0.5)):
        study.add_trial(optuna.create_trial(params={"rank": rank}, distributions=distributions, value=value))
    path = tune.report_write(search, study, study.best_trial, "run_hyper.py", tmp_path)
    assert yaml.safe_load(path.read_text())["rank"] == 2
    assert "best values written to" in capsys.readouterr().out


def test_a_run_that_loads_a_tuned_file_says_which_on_the_console(toy, workdir, caplog):
    tuned = workdir / "properties" / "dataset" / toy.name / "CoSim.yaml"
    tuned.parent.mkdir(parents=True)
    tuned.write_text("feature_weighting: binary\n")
    with caplog.at_level(logging.INFO):
        config, _, _ = prepare("CoSim", toy.name, config_dict=dataset_config(toy))
    assert config["feature_weighting"] == "binary"
    lines = [r for r in caplog.records if "tuned settings loaded from" in r.getMessage()]
    assert len(lines) == 1 and getattr(lines[0], "console", None) is True
    assert str(Path("properties") / "dataset" / toy.name / "CoSim.yaml") in lines[0].getMessage()
    caplog.clear()
    with caplog.at_level(logging.INFO):
        prepare("CoSim", toy.name, config_dict=dataset_config(toy, use_tuned_properties=False))
    assert not [r for r in caplog.records if "tuned settings" in r.getMessage()]


def test_a_tuned_file_in_the_working_directory_is_checked_like_a_users_file(toy, workdir):
    tuned = workdir / "properties" / "dataset" / toy.name / "CoSim.yaml"
    tuned.parent.mkdir(parents=True)
    tuned.write_text("feature_wieghting: binary\n")
    with pytest.raises(ColdStartError, match=r"unknown setting 'feature_wieghting' in tuned file properties/dataset/"):
        ColdStartConfig(model="CoSim", dataset=toy.name, config_dict=dataset_config(toy))
