"""Common fixtures: a private working directory, quiet settings, small generated datasets."""

import pytest
from helpers import QUIET, write_dataset


@pytest.fixture(autouse=True)
def workdir(tmp_path, monkeypatch):
    """Every test runs in its ``tmp_path``: RecBole writes ./log, ./log_tensorboard and ./saved relative
    to the cwd, and a test that forgot to ask for this would fill the checkout with them."""
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.fixture
def quiet(tmp_path):
    """Common config_dict: quiet logging, CPU, one epoch, checkpoints under ``tmp_path/saved``."""
    return dict(QUIET, checkpoint_dir=str(tmp_path / "saved"))


@pytest.fixture
def toy(tmp_path):
    """A small explicit-feedback dataset (ratings 1-5, like = rating >= 4) with token_seq item features."""
    return write_dataset(tmp_path, "toy")


def pytest_collection_modifyitems(config, items):
    """The slow tier (real citeulike-t data: the docs' citeulike-t blocks, the README reproduction, the real
    files' conversion) runs only when asked for with ``-m slow``: together they take well over an hour on 2 cores,
    so the default run (the README's test command, CI's) leaves them out and says so."""
    markexpr = config.option.markexpr or ""
    if "slow" in markexpr and "not slow" not in markexpr:
        return
    skip = pytest.mark.skip(reason="slow tier (real citeulike-t data): run it with -m slow")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)
