"""Every command's ``--help`` (and a usage error) answers without importing torch, RecBole, scipy or pandas, which
take seconds to load: each command of ``recbole_fbsm.cli`` parses its options before it imports the modules that
run it. The commands and sub-commands are read from the command
table and the parsers themselves, so a new one is checked without being listed here. Timings are not asserted
(a loaded machine would make them flaky): the heavy imports are what take the seconds."""

import argparse
import subprocess
import sys

import pytest
from helpers import REPO_ROOT as ROOT

from recbole_fbsm.cli import PROG
from recbole_fbsm.cli.options import COMMANDS, parser

HEAVY = ("torch", "recbole", "scipy", "pandas")


def parser_of(command):
    return parser(command, f"{PROG} {command}")


def sub_commands(parser):
    return [
        name for action in parser._actions if isinstance(action, argparse._SubParsersAction) for name in action.choices
    ]


COMMAND_LINES = [
    [command, *sub] for command in COMMANDS for sub in [[]] + [[s] for s in sub_commands(parser_of(command))]
]


def run_python(*args):
    """(exit status, stdout, stderr, top-level packages imported) of ``python -X importtime ARGS``."""
    done = subprocess.run(
        [sys.executable, "-X", "importtime", *args], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    imported = {
        line.rsplit("|", 1)[-1].strip().split(".")[0]
        for line in done.stderr.splitlines()
        if line.startswith("import time:")
    }
    return done.returncode, done.stdout, done.stderr, imported


def test_the_command_lines_cover_the_sub_commands():
    assert ["serve", "recommend"] in COMMAND_LINES and ["convert", "ctr"] in COMMAND_LINES
    assert len(COMMAND_LINES) >= len(COMMANDS) + 9


@pytest.mark.parametrize("line", COMMAND_LINES, ids=" ".join)
def test_help_answers_without_the_heavy_imports(line):
    status, out, err, imported = run_python("-m", "recbole_fbsm", *line, "--help")
    assert status == 0, err
    assert out.startswith(f"usage: {PROG} {' '.join(line)}")
    assert sorted(imported & set(HEAVY)) == []


@pytest.mark.parametrize("script, prog", [("run_hyper.py", "run_hyper.py"), ("run_recbole.py", "run_recbole.py")])
def test_the_scripts_help_answers_without_the_heavy_imports(script, prog):
    status, out, err, imported = run_python(script, "--help")
    assert status == 0, err
    assert out.startswith(f"usage: {prog}") and "--model" in out
    assert sorted(imported & set(HEAVY)) == []


@pytest.mark.parametrize(
    "line, expected",
    [
        (["hyper", "--dataset=ml-100k"], "the following arguments are required: --model/-m"),
        (["serve", "recommend", "model.fbsm"], "the following arguments are required: new_items"),
        (["compare", "--seeds", "x"], "--seeds: invalid int value: 'x'"),
        (["download", "x", "--timeout", "0"], "argument --timeout: expected seconds, a number from 0.001 to 86400"),
    ],
)
def test_a_usage_error_answers_without_the_heavy_imports(line, expected):
    status, _, err, imported = run_python("-m", "recbole_fbsm", *line)
    assert status == 2 and expected in err
    assert sorted(imported & set(HEAVY)) == []


def test_serve_http_help_names_the_store_file_the_service_opens():
    """The default store is the artifact's file name with .store.sqlite appended (FBSM-x.fbsm.store.sqlite)."""
    from recbole_fbsm.serve.store import default_store_path

    help_text = " ".join(
        subprocess.run(
            [sys.executable, "-m", "recbole_fbsm", "serve", "http", "--help"], cwd=ROOT, capture_output=True, text=True
        ).stdout.split()
    )
    assert f"default: {default_store_path('MODEL.fbsm')} beside the model" in help_text
