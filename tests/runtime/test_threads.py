"""torch_threads: the setting (auto / ~ / N), the thread count it chooses once per run, OpenMP's wait policy set
before torch loads, and a run that follows its choice. No timings here: benchmarks/bench_threads.py measures speed."""

import logging

import pytest
import torch
from helpers import dataset_config

from recbole_fbsm.config import settings
from recbole_fbsm.errors import ColdStartError
from recbole_fbsm.quick_start import prepare, run
from recbole_fbsm.runtime import openmp, threads
from recbole_fbsm.runtime.threads import TRAIN_ROWS_FOR_CORES, set_torch_threads
from recbole_fbsm.training.trainer import get_trainer


@pytest.fixture
def restore_threads():
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


# ------------------------------------------------------------------------------------------ the setting
@pytest.mark.parametrize("value", ["auto", "AUTO", None, 1])
def test_torch_threads_accepts_auto_none_and_a_core_count(value):
    settings.check_settings({"torch_threads": value}, None)


@pytest.mark.parametrize("value", [0, -1, 1.5, True, "autp", "two", 10**6])
def test_torch_threads_rejects_bad_values_in_one_line_naming_the_setting(value):
    with pytest.raises(ColdStartError) as caught:
        settings.check_settings({"torch_threads": value}, None)
    message = str(caught.value)
    assert message.startswith("setting --torch_threads: expected auto or an integer from 1 to ")
    assert "this machine's cores" in message and len(message.splitlines()) == 1
    if value == "autp":
        assert "did you mean 'auto'" in message


def test_the_default_is_auto():
    assert "auto" in settings.known_defaults()["torch_threads"]


@pytest.mark.parametrize(
    "value, auto",
    [(None, True), ("auto", True), (" Auto ", True), ("~", True), ("None", True), (1, False), (2, False), ("2", False)],
)
def test_auto_is_unset_tilde_or_auto(value, auto):
    assert openmp.is_auto(value) is auto


# ------------------------------------------------------------------------------------------ the policy
def chosen(monkeypatch, torch_threads, rows, processes=1, cores=4, passive=True):
    """The (count, line) ``set_torch_threads`` chooses on ``cores`` cores with ``processes`` ranks."""
    monkeypatch.setattr(threads, "usable_cores", lambda: cores)
    monkeypatch.setattr(threads, "waits_passively", lambda: passive)
    monkeypatch.setattr(threads.torch, "set_num_threads", lambda count: None)
    values = {"torch_threads": torch_threads, "train_batch_size": rows * processes}
    if processes > 1:
        values.update(single_spec=False, nproc=processes, world_size=processes)
    line = set_torch_threads(values)
    return int(line.split()[2]), line


def test_auto_runs_small_steps_on_one_thread(monkeypatch):
    assert chosen(monkeypatch, "auto", 1024)[0] == 1
    assert chosen(monkeypatch, None, 256) == chosen(monkeypatch, "auto", 256)


def test_auto_runs_large_steps_on_the_cores(monkeypatch):
    assert chosen(monkeypatch, "auto", TRAIN_ROWS_FOR_CORES)[0] == 4
    assert chosen(monkeypatch, "auto", TRAIN_ROWS_FOR_CORES - 1)[0] == 1


def test_auto_stays_on_one_thread_where_openmp_spins_or_one_core_is_usable(monkeypatch):
    count, line = chosen(monkeypatch, "auto", 1 << 20, passive=False)
    assert count == 1 and "OpenMP spin-waits" in line
    assert chosen(monkeypatch, "auto", 1 << 20, cores=1)[0] == 1


def test_data_parallel_processes_share_the_cores(monkeypatch):
    assert chosen(monkeypatch, "auto", 1 << 20, processes=2, cores=4)[0] == 2
    assert chosen(monkeypatch, "auto", 1 << 20, processes=4, cores=2)[0] == 1


@pytest.mark.parametrize("count", [1, 3])
def test_an_explicit_count_is_never_overridden(monkeypatch, count):
    for rows in (1, 1 << 20):
        for passive in (True, False):
            assert chosen(monkeypatch, count, rows, processes=2, cores=8, passive=passive) == (
                count,
                f"torch threads: {count} (torch_threads: {count})",
            )


def test_a_configs_count_uses_each_processes_share_of_the_batch(monkeypatch, restore_threads):
    monkeypatch.setattr(threads, "usable_cores", lambda: 4)
    monkeypatch.setattr(threads, "waits_passively", lambda: True)
    monkeypatch.setattr(threads.torch, "set_num_threads", lambda count: None)
    one = {"torch_threads": None, "train_batch_size": 2 * TRAIN_ROWS_FOR_CORES}
    assert set_torch_threads(one).startswith("torch threads: 4 ")
    ranks = dict(one, single_spec=False, nproc=2, world_size=4)  # 2 processes here, 4 in all: 2,048 rows each
    assert set_torch_threads(ranks).startswith("torch threads: 1 ")
    assert set_torch_threads(dict(ranks, train_batch_size=8 * TRAIN_ROWS_FOR_CORES)).startswith("torch threads: 2 ")
    assert set_torch_threads(dict(ranks, torch_threads=3)).startswith("torch threads: 3 ")


def test_the_count_is_set_once_for_torch(restore_threads):
    torch.set_num_threads(2)
    assert set_torch_threads({"torch_threads": 1}) == "torch threads: 1 (torch_threads: 1)"
    assert torch.get_num_threads() == 1


def test_usable_cores_follow_affinity_and_omp_num_threads(monkeypatch):
    monkeypatch.setattr(openmp.os, "sched_getaffinity", lambda pid: {0, 1, 2, 3}, raising=False)
    assert openmp.usable_cores({}) == 4
    assert openmp.usable_cores({"OMP_NUM_THREADS": "2"}) == 2
    assert openmp.usable_cores({"OMP_NUM_THREADS": "16"}) == 4
    assert openmp.usable_cores({"OMP_NUM_THREADS": "junk"}) == 4


# ------------------------------------------------------------------------------------------ OpenMP's waits
def test_passive_waits_are_set_only_for_auto_before_torch_and_without_a_users_choice():
    environ = {}
    assert openmp.prefer_passive_wait(None, environ, modules={}) is True
    assert environ == {"OMP_WAIT_POLICY": "PASSIVE"} and openmp.waits_passively(environ)
    for torch_threads, environ, modules in [
        (None, {}, {"torch": object()}),  # too late: the runtime read its variables
        (None, {"OMP_WAIT_POLICY": "ACTIVE"}, {}),  # the user's choice
        (None, {"GOMP_SPINCOUNT": "10000"}, {}),
        (2, {}, {}),  # an explicit count keeps OpenMP's own waits
    ]:
        before = dict(environ)
        assert openmp.prefer_passive_wait(torch_threads, environ, modules) is False
        assert environ == before


def test_waits_passively_reads_the_variables():
    assert openmp.waits_passively({"OMP_WAIT_POLICY": "passive"})
    assert openmp.waits_passively({"GOMP_SPINCOUNT": "0"})
    assert not openmp.waits_passively({})
    assert not openmp.waits_passively({"OMP_WAIT_POLICY": "ACTIVE"})


def test_torch_threads_asked_reads_the_command_line_then_its_config_files(tmp_path):
    first, second = tmp_path / "a.yaml", tmp_path / "b.yaml"
    first.write_text("torch_threads: 2\n")
    second.write_text("epochs: 3\n")
    assert openmp.torch_threads_asked(["--model=FBSM"]) is None
    assert openmp.torch_threads_asked(["--torch_threads=1"]) == "1"
    assert openmp.torch_threads_asked([f"--config_files={first} {second}"]) == 2
    assert openmp.torch_threads_asked(["--config_files", f"{second} {first}", "--torch_threads=auto"]) == "auto"
    assert openmp.torch_threads_asked([f"--config_files={tmp_path / 'missing.yaml'}"]) is None


# ------------------------------------------------------------------------------------------ a run
def test_a_run_trains_and_evaluates_with_the_count_it_set(toy, quiet, workdir, restore_threads, caplog):
    torch.set_num_threads(2)
    with caplog.at_level(logging.INFO):
        config, model, (train_data, valid_data, _) = prepare(
            "FBSM", toy.name, config_dict=dataset_config(toy, quiet, torch_threads=1)
        )
    assert any(record.getMessage() == "torch threads: 1 (torch_threads: 1)" for record in caplog.records)
    trainer = get_trainer(config["MODEL_TYPE"], config["model"])(config, model)
    seen = {"train": set(), "evaluate": set()}
    loss, scorer = model.calculate_loss, model.candidate_scorer

    def counting_loss(*args, **kwargs):
        seen["train"].add(torch.get_num_threads())
        return loss(*args, **kwargs)

    def counting_scorer(*args, **kwargs):
        seen["evaluate"].add(torch.get_num_threads())
        return scorer(*args, **kwargs)

    model.calculate_loss, model.candidate_scorer = counting_loss, counting_scorer
    trainer._train_epoch(train_data, 0)
    trainer.evaluate(valid_data, load_best_model=False)
    assert seen == {"train": {1}, "evaluate": {1}}


def test_a_run_gives_the_callers_thread_count_back(toy, quiet, workdir, restore_threads):
    torch.set_num_threads(2)
    run("CoSim", toy.name, config_dict=dataset_config(toy, quiet, torch_threads=1))
    assert torch.get_num_threads() == 2
