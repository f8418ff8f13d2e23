"""The built wheel carries the property files and runs a model outside the checkout.

Why: `pip install .` once produced a wheel without `properties/`, and the installed plugin silently
fell back to RecBole's user split. The wheel is built offline from a copy of the sources (no build
isolation, so no download) and unpacked instead of installed: a wheel is the site-packages layout.
"""

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from helpers import REPO_ROOT

PROPERTY_FILES = sorted(  # the checkout's properties/ folder, as the wheel's recbole_fbsm/properties/
    "recbole_fbsm/" + path.relative_to(REPO_ROOT).as_posix()
    for path in (REPO_ROOT / "properties").rglob("*")
    if path.suffix == ".yaml"
)


@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
    pytest.importorskip("setuptools")
    src = tmp_path_factory.mktemp("src")
    shutil.copytree(REPO_ROOT / "recbole_fbsm", src / "recbole_fbsm", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(REPO_ROOT / "properties", src / "properties")
    for name in ("pyproject.toml", "setup.py", "README.md"):
        shutil.copy(REPO_ROOT / name, src / name)
    out = tmp_path_factory.mktemp("wheel")
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "--no-index",
            "-q",
            "-w",
            str(out),
            str(src),
        ],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    (path,) = out.glob("recbole_fbsm-*.whl")
    return path


def test_wheel_holds_every_property_file(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    assert PROPERTY_FILES and "recbole_fbsm/properties/model/FBSM.yaml" in PROPERTY_FILES
    assert [name for name in PROPERTY_FILES if name not in names] == []


def test_unpacked_wheel_runs_fbsm_from_an_empty_folder(wheel, tmp_path):
    site = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(site)
    empty = tmp_path / "elsewhere"
    empty.mkdir()
    script = (
        "import json, recbole_fbsm\n"
        "from recbole_fbsm.config.cold_start_config import ColdStartConfig\n"
        "from recbole_fbsm.quick_start import run\n"
        "settings = {'epochs': 1, 'state': 'ERROR', 'use_gpu': False, 'torch_threads': 1}\n"
        "config = ColdStartConfig(model='FBSM', dataset='ml-100k', config_dict=settings)\n"
        "result = run('FBSM', 'ml-100k', config_dict=settings)\n"
        "print(json.dumps({'file': recbole_fbsm.__file__, 'group_by': config['eval_args']['group_by'],\n"
        "                  'rank': config['rank'], 'recall': result['test_result']['recall@10']}))\n"
    )
    env = dict(os.environ, PYTHONPATH=str(site), OMP_NUM_THREADS="1")
    done = subprocess.run([sys.executable, "-c", script], cwd=empty, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    result = __import__("json").loads(done.stdout.strip().splitlines()[-1])
    assert Path(result["file"]).is_relative_to(site)  # the unpacked wheel, not the checkout
    assert result["group_by"] == "item"  # properties/overall.yaml was found: the item split
    assert result["rank"] == 64  # recbole_fbsm/properties/model/FBSM.yaml, read from the installed package
    assert 0 <= result["recall"] <= 1


def test_wheel_installs_one_command_line(wheel, tmp_path):
    """The wheel declares the ``recbole-fbsm`` console script; ``python -m recbole_fbsm`` answers --help and
    runs a model from an empty folder with the installed package alone."""
    entry_points = next(n for n in zipfile.ZipFile(wheel).namelist() if n.endswith("entry_points.txt"))
    assert "recbole-fbsm = recbole_fbsm.cli:main" in zipfile.ZipFile(wheel).read(entry_points).decode()
    site = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(site)
    empty = tmp_path / "elsewhere"
    empty.mkdir()
    env = dict(os.environ, PYTHONPATH=str(site), OMP_NUM_THREADS="1")
    shown = subprocess.run(
        [sys.executable, "-m", "recbole_fbsm", "--help"], cwd=empty, env=env, capture_output=True, text=True
    )
    assert shown.returncode == 0 and "run" in shown.stdout and "serve" in shown.stdout
    done = subprocess.run(
        [sys.executable, "-m", "recbole_fbsm", "run", "--model=CoSim", "--dataset=ml-100k"],
        cwd=empty,
        env=env,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "test result: {'recall@10': 0." in done.stdout
    wrong = subprocess.run(
        [sys.executable, "-m", "recbole_fbsm", "comapre"], cwd=empty, env=env, capture_output=True, text=True
    )
    assert (
        wrong.returncode == 2
        and "argument COMMAND: invalid choice: 'comapre' (choose from 'run', 'compare'" in wrong.stderr
    )
