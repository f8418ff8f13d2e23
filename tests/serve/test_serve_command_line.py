"""The serve command line: output files written whole, new-item files read line by line as they are, warnings
when they happen, out-of-range numbers refused in one line."""

import contextlib
import subprocess
import sys

import pytest
from helpers import HEADER, cli_env, train_planted

from recbole_fbsm.cli.serve import serve as serve_main
from recbole_fbsm.errors import ColdStartError
from recbole_fbsm.serve import load_model, read_new_items
from recbole_fbsm.serve.store import open_store


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    data, results = train_planted(tmp_path_factory.mktemp("serve-cli"), {"FBSM": {"epochs": 1, "rank": 3}})
    return {**data, **results, "model": results["FBSM"]["artifact_file"]}


def _one_error_line(capsys, *expected):
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: "), err
    for text in expected:
        assert text in err, err
    return err


KILL_AT_FSYNC = """
import os, signal, sys
os.fsync = lambda fd: os.kill(os.getpid(), signal.SIGKILL)  # killed with the new file written, not yet renamed
from recbole_fbsm.cli.serve import serve as main
main(sys.argv[1:])
"""


def test_a_run_killed_while_writing_leaves_the_old_output_whole(trained, tmp_path):
    output = tmp_path / "top_items.json"
    old = '{"users": "the previous run\'s whole list"}\n'
    output.write_text(old)
    command = [
        sys.executable,
        "-c",
        KILL_AT_FSYNC,
        "recommend",
        str(trained["model"]),
        str(trained["new_file"]),
        "--user-output",
        str(output),
    ]
    process = subprocess.run(command, capture_output=True, text=True, cwd=tmp_path, timeout=300, env=cli_env())
    assert process.returncode == -9, process.stderr
    assert output.read_text() == old
    # and a run that completes replaces it whole
    assert serve_main(["recommend", str(trained["model"]), str(trained["new_file"]), "--user-output", str(output)]) == 0
    assert output.read_text().startswith('[\n  {\n    "user_id": ') and output.read_text().endswith("}\n]\n")


@pytest.mark.parametrize(
    "rows, line, count",
    [
        ("z1\tg0\tt0 n1\textra\nz2\tg1\tt1\n", 2, 4),  # a first row with an extra cell shifted every id
        ("z1\tg0\tt0 n1\nz2\tg1\tt1\tlost\n", 3, 4),  # a later row's extra cell was dropped
        ("z1\tg0\tt0 n1\nz2\tg1\n", 3, 2),  # a short row was read as an empty description
    ],
)
def test_a_new_item_row_with_another_column_count_names_its_line(trained, tmp_path, capsys, rows, line, count):
    new = tmp_path / "new.item"
    new.write_text(HEADER + rows)
    with pytest.raises(
        ColdStartError, match=rf"new\.item line {line}: {count} column\(s\), expected 3 as in the header"
    ):
        read_new_items(load_model(trained["model"]), new)
    assert serve_main(["recommend", str(trained["model"]), str(new)]) == 2
    _one_error_line(capsys, f"line {line}: {count} column(s)")


def test_a_raw_text_row_with_an_extra_cell_names_its_line(trained, tmp_path):
    new = tmp_path / "new.csv"
    new.write_text('item_id,genre,words\nz1,g0,t0 n1\n"z2",g1,"t1\nn2",lost\nz3,g2,t2\n')
    with pytest.raises(ColdStartError, match=r"new\.csv: line\(s\) \[4\] have more than the header's 3 columns"):
        read_new_items(load_model(trained["model"]), new)


def test_ids_with_spaces_get_the_training_reader_s_warning(trained, tmp_path):
    new = tmp_path / "new.item"
    new.write_text(HEADER + "z1 \tg0\tt0 n1\nz2\tg1\tt1\n")
    with pytest.warns(
        UserWarning,
        match=r"new\.item: 1 line\(s\) have a item_id with spaces around it \(line 2: "
        r"'z1 '\); each is an id of its own",
    ):
        items = read_new_items(load_model(trained["model"]), new)
    assert items.tokens == ["z1 ", "z2"]  # kept as written, as the training reader keeps them


def test_new_item_warnings_are_shown_before_the_service_starts(trained, tmp_path, capsys, monkeypatch):
    import recbole_fbsm.serve.http as http

    new = tmp_path / "new.item"
    new.write_text(HEADER + "z1\tg0\tt0 unheard\n")
    seen = {}

    def service(*args, **kwargs):  # what the console shows while the service runs
        seen["err"] = capsys.readouterr().err

    monkeypatch.setattr(http, "run_service", service)
    store = tmp_path / "s.sqlite"
    assert (
        serve_main(["http", str(trained["model"]), "--new-items", str(new), "--port", "0", "--store", str(store)]) == 0
    )
    assert "warning: new-item file" in seen["err"] and "'words:unheard'" in seen["err"]
    assert "warning" not in capsys.readouterr().err  # not shown a second time at exit
    with contextlib.closing(open_store(store)) as stored:  # as the file gives it: a retrained model may know it
        assert [(item.item_id, item.cells) for item in stored.items()] == [
            ("z1", {"genre": "g0", "words": "t0 unheard"})
        ]


@pytest.mark.parametrize(
    "arguments, expected",
    [
        (
            ["compare-users", "{model}", "{model}", "--k", "1000000000"],
            "argument --k: expected the Recall cut-off, an integer from 1",
        ),
        (
            ["recommend", "{model}", "{new}", "--seed", str(2**70)],
            "argument --seed: expected the seed of the tie breaking, an "
            "integer from 0 to 4294967295; got 1180591620717411303424",
        ),
        (
            ["recommend", "{model}", "{new}", "--top", "1000000000"],
            "argument --top/-n: expected entries per list, an integer from 1 to",
        ),
        (["recommend", "{model}", "{new}", "--top", "0"], "argument --top/-n: expected entries per list"),
        (["interactions", "{model}", "--top", str(2**70)], "argument --top/-n: expected entries per list"),
        (["interactions", "{model}", "--min-items", "-1"], "argument --min-items: expected training items per feature"),
        (["http", "{model}", "--port", "70000"], "argument --port: expected a TCP port, an integer from 0 to 65535"),
        (["http", "{model}", "--workers", "0"], "argument --workers: expected worker processes, an integer from 1"),
        (["http", "{model}", "--max-body", "0"], "argument --max-body: expected a number of bytes, an integer of"),
        (["http", "{model}", "--port", "x"], "argument --port: expected a TCP port, an integer from 0 to 65535; got x"),
    ],
)
def test_out_of_range_numbers_are_usage_errors(trained, capsys, arguments, expected):
    """Refused while parsing, before any model loads: argparse's usage line, then one error line naming the
    option and its range (exit status 2, no traceback)."""
    filled = [a.format(model=trained["model"], new=trained["new_file"]) for a in arguments]
    with pytest.raises(SystemExit) as exited:
        serve_main(filled)
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: ") and "Traceback" not in err
    last = err.strip().splitlines()[-1]
    assert last.startswith("recbole-fbsm serve ") and f"error: {expected}" in last, err


@pytest.mark.parametrize("command", ["http", "export"])
def test_commands_that_write_no_table_take_no_format(command, capsys):
    with pytest.raises(SystemExit) as exited:
        serve_main([command, "model.fbsm", "--format", "json"])
    assert exited.value.code == 2 and "unrecognized arguments: --format json" in capsys.readouterr().err


def test_the_largest_accepted_numbers_still_answer(trained, tmp_path):
    """The bounds refuse nothing a list can hold: the largest --top and seed give every new item's whole list."""
    output = tmp_path / "lists.csv"
    assert (
        serve_main(
            [
                "recommend",
                str(trained["model"]),
                str(trained["new_file"]),
                "--top",
                "1000000",
                "--seed",
                str(2**32 - 1),
                "--users",
                "u0_0",
                "--user-output",
                str(output),
            ]
        )
        == 0
    )
    lines = output.read_text().splitlines()
    assert lines[0] == "user_id,rank,item_id,score" and len(lines) == 1 + len(trained["held_out"])


@pytest.mark.parametrize(
    "arguments, expected",
    [
        (
            ["recommend", "{model}", "{copy}", "--item-output", "{copy}"],
            "--item-output {copy} is also the new items file",
        ),
        (
            ["recommend", "{model}", "{new}", "--item-output", "{out}", "--user-output", "{out}"],
            "--user-output {out} is also --item-output",
        ),
        (
            ["explain", "{model}", "--user", "u0_0", "--item", "z1", "-o", "{model}"],
            "--output {model} is also the model file",
        ),
        (["compare-users", "{model}", "{model}", "-o", "{out}", "--per-user", "{out}"], "--per-user {out} is also"),
        (["export", "{checkpoint}", "-o", "{checkpoint}"], "--output {checkpoint} is also the model file"),
        (["export", "{model}"], "--output {model} is also the model file"),  # the default output: its own name
    ],
)
def test_an_output_never_replaces_an_input_or_another_output(trained, tmp_path, capsys, arguments, expected):
    copy = tmp_path / "new.csv"
    copy.write_text(trained["new_file"].read_text())
    names = {"model": trained["model"], "new": trained["new_file"], "copy": copy, "out": tmp_path / "out.csv"}
    names["checkpoint"] = trained["FBSM"]["saved_model_file"]
    before = {path: open(path, "rb").read() for path in (trained["model"], copy, names["checkpoint"])}
    assert serve_main([a.format(**names) for a in arguments]) == 2
    _one_error_line(capsys, expected.format(**names), "an output never replaces")
    assert {path: open(path, "rb").read() for path in before} == before and not names["out"].exists()


@pytest.mark.parametrize("bad, rule", [("a/b", "'/'"), ("x" * 300, "at most 256"), ("ctl\x01id", "control")])
def test_the_service_refuses_new_item_ids_its_api_refuses(trained, tmp_path, capsys, monkeypatch, bad, rule):
    """An id the API cannot take could never be listed or deleted once stored."""
    import recbole_fbsm.serve.http as http

    monkeypatch.setattr(http, "run_service", lambda *args, **kwargs: None)
    new = tmp_path / "new.item"
    new.write_text(HEADER + f"z1\tg0\tt0\n{bad}\tg1\tt1\n")
    store = tmp_path / "s.sqlite"
    assert serve_main(["http", str(trained["model"]), "--new-items", str(new), "--store", str(store)]) == 2
    _one_error_line(capsys, f"new-item file {new}: item id", rule)
    with contextlib.closing(open_store(store)) as stored:
        assert stored.items() == []
