"""`recbole-fbsm download`: files fetched from a loopback HTTP server started here, checked, converted; every
failure (checksum, truncated file, 404, a server that stops mid-file or stalls, an interrupted run) ends in one
`error:` line and leaves nothing under the dataset's name, and the next run fetches the files not yet checked.
Also the missing-dataset and did-you-mean lines of a run, and `recbole-fbsm models`."""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from helpers import REPO_ROOT as ROOT

from recbole_fbsm.cli import run as run_command
from recbole_fbsm.cli.datasets import download as download_command
from recbole_fbsm.config import datasets
from recbole_fbsm.config.registry import PLUGIN_MODELS
from recbole_fbsm.convert import download

CITEULIKE_T = ROOT.parent / "shared" / "datasets" / "citeulike-t"

# A tiny CTR dataset the converter accepts: 30 items, each with two of ten words (every word on 6 items,
# 20% of them: inside the default filter), 10 users with 5 likes each.
WORDS = ["graph", "network", "protein", "gene", "neural", "cell", "market", "price", "music", "sound"]
TINY = {
    "users.dat": "".join(f"5 {' '.join(str((3 * u + k) % 30) for k in range(5))}\n" for u in range(10)),
    "mult.dat": "".join(f"2 {i % 10}:1 {(i + 1) % 10}:2\n" for i in range(30)),
    "vocabulary.dat": "".join(f"{word}\n" for word in WORDS),
}
TINY = {name: text.encode() for name, text in TINY.items()}


class FileServer(BaseHTTPRequestHandler):
    """Serves ``files`` {name: bytes}, and misbehaves on request: ``modes`` {name: mode} with mode 'close'
    (announces the whole file, sends half, closes), 'stall' (sends half, then waits).
    ``requests`` records the names asked for."""

    files: dict = {}
    modes: dict = {}
    requests: list = []

    def do_GET(self):  # noqa: N802 (http.server's name)
        name = self.path.lstrip("/")
        self.requests.append(name)
        if name not in self.files:
            self.send_error(404, "Not Found")
            return
        body, mode = self.files[name], self.modes.get(name)
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if mode in ("close", "stall"):
            self.wfile.write(body[: len(body) // 2])
            self.wfile.flush()
            if mode == "stall":
                time.sleep(1.5)
            self.close_connection = True
            return
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture
def server():
    """A loopback server on a free port, its files and modes reset for each test."""
    handler = type("Handler", (FileServer,), {"files": {}, "modes": {}, "requests": []})
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    httpd.daemon_threads = True
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    handler.url = f"http://127.0.0.1:{httpd.server_address[1]}/"
    yield handler
    httpd.shutdown()
    httpd.server_close()


@pytest.fixture
def tiny(server, monkeypatch):
    """The tiny dataset 'tiny' in the download table (the test's own source, checksums of its files)."""
    monkeypatch.setitem(
        datasets.SOURCES,
        "tiny",
        {
            "url": server.url,
            "files": {name: (len(body), hashlib.sha256(body).hexdigest()) for name, body in TINY.items()},
        },
    )
    monkeypatch.setitem(datasets.DATASETS, "tiny", datasets.Downloadable("tiny", tuple(TINY), "a tiny test dataset"))
    server.files.update(TINY)
    return server


def download_cli(out, *more):
    return download_command(["tiny", "--out", str(out), *more])


def error_line(capsys):
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: "), err
    return err[0]


def assert_nothing_under_final_name(out, name="tiny", checked=()):
    """Nothing under the dataset's name; in the download folder only the files ``checked`` (no partial file)."""
    assert not (out / name).exists()
    assert [p.name for p in out.iterdir() if not p.name.startswith(".")] == []
    assert sorted(p.name for p in (out / f".{name}.download").iterdir()) == sorted(checked)


def test_download_checks_converts_and_says_the_next_command(tiny, tmp_path, capsys):
    out = tmp_path / "data"
    assert download_cli(out) == 0
    printed = capsys.readouterr().out
    assert f"wrote {out / 'tiny'}" in printed and "items: 30" in printed and "interactions: 50" in printed
    assert printed.strip().splitlines()[-1] == f"next: recbole-fbsm run --model=FBSM --dataset=tiny --data_path={out}"
    assert sorted(p.name for p in (out / "tiny").iterdir()) == [
        "README.txt",
        "tiny.analyzer.json",
        "tiny.inter",
        "tiny.item",
    ]
    assert hashlib.sha256(TINY["users.dat"]).hexdigest() in (out / "tiny" / "README.txt").read_text()
    assert sorted(p.name for p in out.iterdir()) == ["tiny"]  # the download folder is gone
    assert sorted(tiny.requests) == sorted(TINY)


def test_a_checksum_mismatch_is_one_error_line_and_keeps_nothing(tiny, tmp_path, capsys):
    body = bytearray(TINY["mult.dat"])
    body[10] ^= 1  # same size, one bit flipped
    tiny.files["mult.dat"] = bytes(body)
    out = tmp_path / "data"
    assert download_cli(out) == 2
    line = error_line(capsys)
    assert "mult.dat: SHA-256" in line and "differs from the expected" in line
    assert_nothing_under_final_name(out, checked=["users.dat"])  # a wrong file is never kept


def test_a_truncated_file_is_refused(tiny, tmp_path, capsys):
    tiny.files["users.dat"] = TINY["users.dat"][:-7]
    out = tmp_path / "data"
    assert download_cli(out) == 2
    assert "users.dat: SHA-256 differs from the expected" in error_line(capsys)
    assert_nothing_under_final_name(out)


def test_a_missing_file_is_the_http_status(tiny, tmp_path, capsys):
    del tiny.files["vocabulary.dat"]
    out = tmp_path / "data"
    assert download_cli(out) == 2
    assert "vocabulary.dat: the download failed (HTTP 404 Not Found); check" in error_line(capsys)
    assert_nothing_under_final_name(out, checked=["users.dat", "mult.dat"])


def test_a_server_closing_mid_file_keeps_the_checked_files_for_the_rerun(tiny, tmp_path, capsys):
    tiny.modes["mult.dat"] = "close"
    out = tmp_path / "data"
    assert download_cli(out) == 2
    assert "mult.dat: the download failed (the connection ended mid-file); check" in error_line(capsys)
    assert_nothing_under_final_name(out, checked=["users.dat"])
    del tiny.modes["mult.dat"]
    tiny.requests.clear()
    assert download_cli(out) == 0
    assert tiny.requests == ["mult.dat", "vocabulary.dat"]  # a file checked earlier is not fetched again
    assert (out / "tiny" / "tiny.item").is_file()


def test_a_stalled_server_times_out(tiny, tmp_path, capsys):
    tiny.modes["users.dat"] = "stall"
    out = tmp_path / "data"
    assert download_cli(out, "--timeout", "0.3") == 2
    assert "users.dat: the download failed (no data within --timeout); check" in error_line(capsys)
    assert_nothing_under_final_name(out)


@pytest.mark.parametrize("timeout", ["-1", "nan", "inf", "1e309", "0", "soon"])
def test_a_timeout_that_is_no_positive_number_of_seconds_is_one_error_line(tiny, tmp_path, capsys, timeout):
    with pytest.raises(SystemExit) as exit_:
        download_cli(tmp_path / "data", f"--timeout={timeout}")
    assert exit_.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("recbole-fbsm download: error: argument --timeout: expected") and "Traceback" not in err
    assert tiny.requests == []


@pytest.mark.parametrize("link", ["users.dat.part", "users.dat"])
def test_a_link_planted_in_the_download_folder_is_never_written_through(tiny, tmp_path, link):
    victim = tmp_path / "victim.txt"
    victim.write_bytes(b"not yours")
    out = tmp_path / "data"
    (out / ".tiny.download").mkdir(parents=True)
    (out / ".tiny.download" / link).symlink_to(victim)
    assert download_cli(out) == 0
    assert victim.read_bytes() == b"not yours"
    assert (out / "tiny" / "tiny.inter").is_file()


def test_a_download_folder_that_is_a_link_is_not_written_through(tiny, tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    out = tmp_path / "data"
    out.mkdir()
    (out / ".tiny.download").symlink_to(elsewhere)
    assert download_cli(out) == 0
    assert list(elsewhere.iterdir()) == []


@pytest.mark.parametrize("mirror", ["http://user:s3cret@[::1/", "http://user:s3cret@127.0.0.1:99999/"])
def test_a_mirror_with_a_broken_address_is_one_error_line(tiny, tmp_path, capsys, mirror):
    assert download_cli(tmp_path / "data", "--mirror", mirror) == 2
    line = error_line(capsys)
    assert "users.dat" in line and "s3cret" not in line


def test_the_password_of_a_mirror_is_never_shown(tiny, tmp_path, capsys):
    mirror = tiny.url.replace("http://", "http://user:s3cret@")
    out = tmp_path / "data"
    del tiny.files["vocabulary.dat"]
    assert download_cli(out, "--mirror", mirror) == 2
    line = error_line(capsys)
    assert "s3cret" not in line and "vocabulary.dat: the download failed (HTTP 404 Not Found)" in line
    tiny.files["vocabulary.dat"] = TINY["vocabulary.dat"]
    assert download_cli(out, "--mirror", mirror) == 0
    printed = capsys.readouterr()
    assert "s3cret" not in printed.out + printed.err
    assert "s3cret" not in (out / "tiny" / "README.txt").read_text()


class InterruptOn:
    """A progress bar that stands for the user's Ctrl-C once the first bytes of ``file`` arrive."""

    def __init__(self, file, total):
        self.file, self.total = file, total

    def update(self, n):
        if self.file == "mult.dat":
            raise KeyboardInterrupt

    def reset(self):
        pass

    def close(self):
        pass


def test_an_interrupted_run_is_one_error_line_and_the_rerun_goes_on(tiny, tmp_path, capsys, monkeypatch):
    progress_bar = download.tqdm
    monkeypatch.setattr(download, "tqdm", lambda total, desc, **options: InterruptOn(desc.split()[-1], total))
    out = tmp_path / "data"
    assert download_cli(out) == 2
    assert "interrupted; nothing was written under" in error_line(capsys)
    assert_nothing_under_final_name(out, checked=["users.dat"])
    monkeypatch.setattr(download, "tqdm", progress_bar)
    tiny.requests.clear()
    assert download_cli(out) == 0
    assert tiny.requests == ["mult.dat", "vocabulary.dat"]
    assert (out / "tiny" / "tiny.inter").is_file()


def test_an_existing_dataset_is_refused_before_any_download(tiny, tmp_path, capsys):
    (tmp_path / "data" / "tiny").mkdir(parents=True)
    assert download_cli(tmp_path / "data") == 2
    assert "already exists; pass --overwrite" in error_line(capsys)
    assert tiny.requests == []


def test_a_mirror_that_is_no_url_is_refused_before_any_download(tiny, tmp_path, capsys):
    assert download_cli(tmp_path / "data", "--mirror", "ftp://x/") == 2
    assert (
        error_line(capsys)
        == "error: --mirror 'ftp://x/': expected a base URL starting with http://, https:// or file://"
    )
    assert not (tmp_path / "data").exists()


@pytest.mark.parametrize(
    "name, expected",
    [
        ("citeulike-tt", "did you mean 'citeulike-t'"),
        ("ml-1m", "'ml-1m' is one of RecBole's datasets, published by RecBole at https://"),
    ],
)
def test_download_of_an_unknown_name(name, expected, capsys):
    assert download_command([name]) == 2
    line = error_line(capsys)
    assert line.startswith(
        f"error: no download for dataset {name!r} (downloadable here: citeulike-t, citeulike-tags); "
    )
    assert expected in line


@pytest.mark.parametrize(
    "argv, expected",
    [
        (
            ["--dataset=citeulike-t"],
            "error: dataset 'citeulike-t': folder dataset/citeulike-t not found; download and "
            "convert it with: recbole-fbsm download citeulike-t",
        ),
        (["--dataset=citeulike-tags", "--data_path=data"], "with: recbole-fbsm download citeulike-tags --out data"),
        (
            ["--dataset=ml-100"],
            "error: dataset 'ml-100': folder dataset/ml-100 not found (data_path='dataset'); did you mean 'ml-100k'?",
        ),
        (["--dataset=citeulike-tt"], "did you mean 'citeulike-t'"),
        (["--dataset=mydata", "--data_path=data"], "did you mean 'my-data'?"),  # a folder present under data_path
    ],
)
def test_a_run_without_its_dataset_folder_says_what_to_do(argv, expected, workdir, capsys):
    (workdir / "data" / "my-data").mkdir(parents=True)
    assert run_command.run(["--model=FBSM", *argv]) == 2
    assert expected in error_line(capsys)


def test_the_new_commands_answer_without_importing_torch():
    """download --help and models are read from tables and source files: no torch, no RecBole import."""
    code = (
        "import sys; from recbole_fbsm.cli import main\n"
        "for argv in (['models'], ['download', '--help']):\n"
        "    try: main(argv)\n"
        "    except SystemExit: pass\n"
        "print(sorted(m for m in ('torch', 'recbole', 'pandas') if m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert done.stdout.strip().splitlines()[-1] == "[]"


def test_models_lists_every_model_a_run_accepts_with_a_line_each(capsys):
    from recbole_fbsm.config.registry import model_names

    assert set(run_command.PLUGIN_MODEL_LINES) == set(PLUGIN_MODELS)  # a new model of ours says what it is
    assert run_command.models([]) == 0
    listed = {}
    for line in capsys.readouterr().out.splitlines():
        match = re.fullmatch(r"  (\S+)\s+(.+)", line)
        if match:
            listed[match.group(1)] = match.group(2)
    assert set(listed) == set(model_names())
    assert listed["FM"].startswith("Factorization Machine") and listed["BPR"].startswith("BPR is")
    assert listed["NCEPLRec"].startswith("Ga Wu, et al.")  # no class docstring: the module's reference
    assert all(len(text) <= run_command.LINE_WIDTH + 2 for text in listed.values())


@pytest.mark.slow
def test_the_real_citeulike_t_files_from_a_mirror(server, tmp_path, capsys):
    """The published files (served from ../shared), their checksums in the table, converted as `convert ctr` does."""
    if not CITEULIKE_T.is_dir():
        pytest.skip(f"{CITEULIKE_T} is absent (the published citeulike-t files)")
    server.files.update({p.name: p.read_bytes() for p in CITEULIKE_T.glob("*.dat")})
    out = tmp_path / "dataset"
    assert download_command(["citeulike-tags", "--out", str(out), "--mirror", server.url]) == 0
    printed = capsys.readouterr().out
    for count in ("users: 7,947", "items: 25,584", "interactions: 134,860", "features (terms after the filter): 3,490"):
        assert count in printed
    assert sorted(server.requests) == sorted(datasets.DATASETS["citeulike-tags"].files)
    assert "tags:token_seq" in (out / "citeulike-tags" / "citeulike-tags.item").open().readline()


def readme_test_recall(model):
    """The model's test Recall@10 as README.md's citeulike-t table prints it (rendered from docs/results/)."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    return float(re.search(rf"^\| {model} \| \*\*([0-9.]+)", readme, re.M).group(1))


# README.md, "Results on citeulike-t": test Recall@10, mean over the item splits of seeds 2020-2022, with the
# tuned property files of properties/dataset/citeulike-t/ (which a run on that name loads by itself).
README_MODELS = ("FBSM", "ItemKNNCBF", "CoSim")
SEEDS = [2020, 2021, 2022]


@pytest.fixture(scope="module")
def compared(tmp_path_factory, request):
    """From an empty folder: download citeulike-t from a loopback mirror, then compare FBSM, ItemKNNCBF and
    CoSim over three splits (about 5 CPU minutes; 24 minutes of wall time on 2 busy cores). Runs only when the
    slow tier is asked for (-m slow): the default suite would take that much longer."""
    if not CITEULIKE_T.is_dir():
        pytest.skip(f"{CITEULIKE_T} is absent (the published citeulike-t files)")
    if "slow" not in (request.config.option.markexpr or "") or "not slow" in request.config.option.markexpr:
        pytest.skip("download + compare on citeulike-t takes minutes: run it with -m slow")
    from recbole_fbsm.experiments.compare import compare

    folder = tmp_path_factory.mktemp("reproduce")
    handler = type(
        "Handler",
        (FileServer,),
        {"files": {p.name: p.read_bytes() for p in CITEULIKE_T.glob("*.dat")}, "modes": {}, "requests": []},
    )
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    patch = pytest.MonkeyPatch()
    patch.chdir(folder)
    try:
        assert download_command(["citeulike-t", "--mirror", f"http://127.0.0.1:{httpd.server_address[1]}/"]) == 0
        done = compare(
            models=list(README_MODELS),
            dataset="citeulike-t",
            seeds=SEEDS,
            results_dir=folder / "results",
            overrides={"torch_threads": 1},
            log=lambda *args: None,
        )
    finally:
        patch.undo()
        httpd.shutdown()
        httpd.server_close()
    assert not done["failed"]
    return folder / "results"


@pytest.mark.slow
@pytest.mark.parametrize("model", README_MODELS)
def test_download_then_compare_reproduces_the_readme_rows(compared, model):
    recalls = [
        json.loads((compared / f"{model}-{seed}.json").read_text())["test_result"]["recall@10"] for seed in SEEDS
    ]
    assert round(sum(recalls) / len(recalls), 4) == readme_test_recall(model), recalls


def test_compare_without_its_dataset_folder_names_the_download_command(workdir, capsys):
    """compare (and hyper) reach the folder check of the data layer, not run's early one: the same hint."""
    from recbole_fbsm.cli.experiments import compare as compare_main

    assert compare_main(["--dataset=citeulike-t", "--models", "ItemKNNCBF", "--seeds", "2020"]) != 0
    printed = capsys.readouterr()
    assert "download and convert it with: recbole-fbsm download citeulike-t" in printed.out + printed.err
