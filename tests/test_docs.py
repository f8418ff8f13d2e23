"""Every ```bash and ```python block of README.md and docs/*.md runs here, so the docs cannot go stale.

- Sybil parses the markdown: its PythonCodeBlockParser runs the ```python blocks (one namespace per document),
  a CodeBlockParser for ```bash runs each bash block with ``bash -e -o pipefail``, and its SkipParser reads
  ``<!-- skip: next "why" -->``, the only way to keep a block from running (install lines, several machines,
  hours of training). A skip without a reason fails, as does a fenced block in a
  language that nothing runs (``sh``, ``console``, ...): no block is left out silently.
- The blocks of one document run in order, in one temporary working directory (so a block may use what an
  earlier one wrote), with this venv's ``recbole-fbsm`` on PATH and ``python run_recbole.py`` / ``python
  run_hyper.py`` available; ``../shared/datasets`` points at the checkout's shared datasets, when there are any.
- Blocks that name citeulike-t (or the citeulike-tags conversion) are marked ``slow`` and skipped where
  ``../shared/datasets/citeulike-t`` is absent; their ``recbole-fbsm download`` reads the files there (a
  ``file://`` mirror, tests/docs_fast_args.py).
- A block may start the HTTP service in the background (``serve http ... &``) and call it with curl: a request
  answered with an error fails the block (curl's ``fail-with-body``), and the service ends with the block.
- Time: the bash blocks' training commands (``recbole-fbsm run|compare|hyper``, ``python run_recbole.py``,
  ``python run_hyper.py``) go through tests/docs_fast_args.py: 2 epochs, 2 warm BPR-MF epochs of rank 32
  (docs/compare.md's DropoutNet, Heater and ALDI block takes a third of its time at the default rank 200),
  evaluation on 300 users drawn at random (``eval_user_sample``: the context-aware models of docs/compare.md
  spend most of a 2-epoch run scoring every user x candidate pair), one torch thread for every setting the
  command does not give itself, and the first seed of a ``--seeds`` list
  (the ml-100k comparisons of docs/compare.md would otherwise take many minutes on 2 cores).
  ``DOCS_TEST_OVERRIDES= DOCS_TEST_SEEDS= pytest tests/test_docs.py`` runs them exactly as written. The
  ```python blocks always run as written.
"""

import contextlib
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from sybil import Sybil
from sybil.parsers.markdown import CodeBlockParser, PythonCodeBlockParser, SkipParser

ROOT = Path(__file__).resolve().parent.parent
SHARED = ROOT.parent / "shared"
CITEULIKE = SHARED / "datasets" / "citeulike-t"
DOC_FILES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
RUNNABLE = {"bash", "python"}
# fenced blocks in these languages are data or output, shown and never run
DATA_LANGUAGES = {"", "text", "json", "yaml", "csv", "tsv"}
NEEDS_CITEULIKE = re.compile(r"citeulike-t|citeulike-tags")
DEFAULT_OVERRIDES = "--epochs=2 --warm_epochs=2 --warm_embedding_size=32 --eval_user_sample=300 --torch_threads=1"
DEFAULT_SEEDS = "1"
BLOCK_TIMEOUT_S = 1800
FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>```+|~~~+)(?P<info>[^\n`]*)$", re.M)

FAST_ARGS_DIR = Path(__file__).resolve().parent  # docs_fast_args.py


def run_bash(example):
    """Evaluate a ```bash block in its document's working directory; fail with the end of its output. A documented
    HTTP request that gets an error answer fails the block (curl reads ``fail-with-body`` from the $CURL_HOME made
    here), and a service the block started in the background ends with it (its process group is killed)."""
    workdir, bindir = example.namespace["workdir"], example.namespace["bindir"]
    path = os.pathsep.join([str(bindir), str(Path(sys.executable).parent), os.environ.get("PATH", "")])
    (bindir / ".curlrc").write_text("fail-with-body\n")
    env = dict(
        os.environ,
        PATH=path,
        CURL_HOME=str(bindir),
        DOCS_TEST_MIRROR=CITEULIKE.as_uri() + "/" if CITEULIKE.is_dir() else "",
        DOCS_TEST_OVERRIDES=os.environ.get("DOCS_TEST_OVERRIDES", DEFAULT_OVERRIDES),
        DOCS_TEST_SEEDS=os.environ.get("DOCS_TEST_SEEDS", DEFAULT_SEEDS),
    )
    with tempfile.TemporaryFile("w+") as output:  # a file, not a pipe: a background service cannot hold it open
        block = ["bash", "-e", "-o", "pipefail", "-c", example.parsed]
        process = subprocess.Popen(block, cwd=workdir, env=env, stdout=output, stderr=output, start_new_session=True)
        try:
            code = process.wait(timeout=BLOCK_TIMEOUT_S)
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
        output.seek(0)
        text = output.read()
    return f"bash block exited with {code}:\n{text[-4000:]}" if code else None


SYBIL = Sybil(parsers=[SkipParser(), PythonCodeBlockParser(), CodeBlockParser("bash", run_bash)])


def _is_skip(example):
    return isinstance(example.parsed, tuple)


def _documents():
    return {path: list(SYBIL.parse(path)) for path in DOC_FILES}


DOCUMENTS = _documents()


def _adjacent(marker, example):
    """Whether only the end of the marker's comment and blank space stand between it and the example."""
    return not example.document.text[marker.end : example.start].replace("-->", "", 1).strip()


def _skip_reason(examples, index):
    """The reason of a ``<!-- skip: next "why" -->`` right above code example ``index``, else None."""
    example = examples[index]
    if index == 0 or not _is_skip(examples[index - 1]):
        return None
    marker = examples[index - 1]
    if not _adjacent(marker, example):
        return None
    action, reason = marker.parsed
    return eval(reason, {}) if action == "next" and reason else None


def _cases():
    cases = []
    for path, examples in DOCUMENTS.items():
        for index, example in enumerate(examples):
            if _is_skip(example):
                continue
            block_id = f"{path.relative_to(ROOT)}:{example.line}"
            reason = _skip_reason(examples, index)
            marks = []
            if reason:
                marks.append(pytest.mark.skip(reason=f"marked in the doc: {reason}"))
            elif NEEDS_CITEULIKE.search(str(example.parsed)):
                marks += [pytest.mark.slow, pytest.mark.skipif(not CITEULIKE.is_dir(), reason=f"needs {CITEULIKE}")]
            if re.search(r"^curl ", str(example.parsed), re.M):
                marks.append(pytest.mark.skipif(shutil.which("curl") is None, reason="needs curl"))
            cases.append(pytest.param(path, index, marks=marks, id=block_id))
    return cases


@pytest.fixture(scope="module")
def workdirs(tmp_path_factory):
    """One working directory per document, made on first use, with the scripts and ../shared in reach."""
    made = {}

    def workdir_of(path):
        if path not in made:
            base = tmp_path_factory.mktemp(path.stem)
            work, bindir = base / "work", base / "bin"
            work.mkdir()
            bindir.mkdir()
            if SHARED.is_dir():
                (base / "shared").symlink_to(SHARED, target_is_directory=True)
                # the published citeulike-t files where docs/convert.md has a user keep them
                (work / "citeulike-t-files").symlink_to(SHARED / "datasets" / "citeulike-t", target_is_directory=True)
            for script in ("run_recbole.py", "run_hyper.py"):
                (work / script).write_text(shim(ROOT / script))
            command = bindir / "recbole-fbsm"
            command.write_text(shim(Path(sys.executable).parent / "recbole-fbsm", subcommands=True))
            command.chmod(0o755)
            made[path] = work, bindir
        return made[path]

    return workdir_of


@pytest.mark.parametrize("path, index", _cases())
def test_doc_block_runs(path, index, workdirs, monkeypatch):
    example = DOCUMENTS[path][index]
    workdir, bindir = workdirs(path)
    example.namespace.update(workdir=workdir, bindir=bindir)
    monkeypatch.chdir(workdir)  # the ```python blocks run in this process, in the document's folder
    example.evaluate()


def _fences(text):
    """(line, language, indent) of every opening fence of a markdown text."""
    found, open_fence = [], None
    for match in FENCE.finditer(text):
        if open_fence is None:
            open_fence = match["fence"]
            line = text.count("\n", 0, match.start()) + 1
            found.append((line, match["info"].strip().split(" ")[0].lower(), match["indent"]))
        elif match["fence"].startswith(open_fence) and not match["info"].strip():
            open_fence = None
    return found


def block_problems(path, examples):
    """What keeps a document's fenced blocks from all being run or marked: the docs test's own rules."""
    code_lines = {e.line for e in examples if not _is_skip(e)}
    problems = []
    for line, language, indent in _fences(path.read_text(encoding="utf-8")):
        if language in RUNNABLE:
            if indent:
                problems.append(f"line {line}: an indented ```{language} block (put it at the margin so it runs)")
            elif line not in code_lines:
                problems.append(f"line {line}: a ```{language} block the docs test did not collect")
        elif language not in DATA_LANGUAGES:
            problems.append(
                f"line {line}: ```{language}: nothing runs this language; write ```bash or ```python "
                f"(or a data language: {sorted(DATA_LANGUAGES - {''})})"
            )
    for index, example in enumerate(examples):
        if _is_skip(example):
            action, reason = example.parsed
            nxt = examples[index + 1] if index + 1 < len(examples) else None
            if action != "next" or not reason:
                problems.append(f'line {example.line}: write <!-- skip: next "why it cannot run" -->')
            elif nxt is None or _is_skip(nxt) or not _adjacent(example, nxt):
                problems.append(f"line {example.line}: a skip marker must stand right above the block it skips")
    return problems


@pytest.mark.parametrize("path", DOC_FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_block_is_left_out_silently(path):
    """Every fenced block runs (bash, python) or is data (json, yaml, output); every skip says why."""
    problems = block_problems(path, DOCUMENTS[path])
    assert not problems, f"{path.name}: " + "; ".join(problems)


def test_a_block_nothing_runs_is_caught(tmp_path):
    doc = tmp_path / "doc.md"
    doc.write_text(
        "```sh\nls\n```\n\n<!-- skip: next -->\n```bash\nls\n```\n\n"
        '<!-- skip: next "a server" -->\n\ntext between\n\n```bash\nls\n```\n\n'
        "```bash\nls\n```\n\n```text\noutput\n```\n\n- item\n\n  ```python\n  1\n  ```\n"
    )
    problems = block_problems(doc, list(SYBIL.parse(doc)))
    assert [p.split(":")[0] for p in problems] == ["line 1", "line 28", "line 5", "line 10"], problems


def shim(target, subcommands=False):
    """A script that runs the Python script ``target`` with the fast tier's arguments (docs_fast_args.py)."""
    return "\n".join(
        [
            f"#!{sys.executable}",
            "import runpy, sys",
            f"sys.path.insert(0, {str(FAST_ARGS_DIR)!r})",
            "from docs_fast_args import fast_args",
            f"sys.argv = [{str(target)!r}] + fast_args(sys.argv[1:], subcommands={subcommands})",
            f"runpy.run_path({str(target)!r}, run_name='__main__')",
            "",
        ]
    )


def test_the_fast_arguments_keep_what_the_command_gives(monkeypatch):
    """The fast tier's overrides never clash with a setting the doc's command sets itself."""
    from docs_fast_args import fast_args

    monkeypatch.setenv("DOCS_TEST_OVERRIDES", "--epochs=2 --torch_threads=1")
    monkeypatch.setenv("DOCS_TEST_SEEDS", "1")
    assert fast_args(["--model=FBSM", "--epochs=7"]) == ["--model=FBSM", "--epochs=7", "--torch_threads=1"]
    assert fast_args(["compare", "--models", "A", "B", "--seeds", "1", "2", "3", "--x=1"], subcommands=True) == [
        "compare",
        "--models",
        "A",
        "B",
        "--seeds",
        "1",
        "--x=1",
        "--epochs=2",
        "--torch_threads=1",
    ]
    assert fast_args(["compare", "--models", "A"], subcommands=True) == [
        "compare",
        "--models",
        "A",
        "--seeds",
        "2020",
        "--epochs=2",
        "--torch_threads=1",
    ]
    monkeypatch.setenv("DOCS_TEST_MIRROR", "file:///data/citeulike-t/")
    assert fast_args(["download", "citeulike-t"], subcommands=True) == [
        "download",
        "citeulike-t",
        "--mirror",
        "file:///data/citeulike-t/",
    ]
    assert fast_args(["serve", "explain", "m.fbsm", "--top", "3"], subcommands=True) == [
        "serve",
        "explain",
        "m.fbsm",
        "--top",
        "3",
    ]
    monkeypatch.setenv("DOCS_TEST_OVERRIDES", "")
    monkeypatch.setenv("DOCS_TEST_SEEDS", "")
    assert fast_args(["compare", "--seeds", "1", "2"], subcommands=True) == ["compare", "--seeds", "1", "2"]


def test_the_shim_runs_the_script_with_the_fast_arguments(tmp_path):
    target = tmp_path / "show.py"
    target.write_text("import sys; print(' '.join(sys.argv[1:]))\n")
    (tmp_path / "shim.py").write_text(shim(target))
    env = dict(os.environ, DOCS_TEST_OVERRIDES="--epochs=2", DOCS_TEST_SEEDS="")
    shown = subprocess.run(
        [sys.executable, str(tmp_path / "shim.py"), "--x=1"], env=env, capture_output=True, text=True, check=True
    ).stdout
    assert shown.split() == ["--x=1", "--epochs=2"]


def test_the_readme_stays_a_page():
    """README.md is a user's page (at most 150 lines); details go to docs/."""
    assert len((ROOT / "README.md").read_text(encoding="utf-8").splitlines()) <= 150


def test_an_error_answer_fails_its_block_and_the_service_ends_with_it(tmp_path):
    """A documented request that gets an error answer fails the block; a service started with ``&`` does not
    outlive it (nor keep the test waiting on its output)."""
    if shutil.which("curl") is None:
        pytest.skip("needs curl")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    block = (
        f"{sys.executable} -m http.server {port} --bind 127.0.0.1 &\necho $! > pid\n"
        f"curl -s --retry 30 --retry-delay 1 --retry-connrefused localhost:{port}/ > /dev/null\n"
        f"curl -s localhost:{port}/missing\n"
    )
    example = SimpleNamespace(parsed=block, namespace={"workdir": tmp_path, "bindir": tmp_path})
    assert run_bash(example).startswith("bash block exited with 22"), "curl's exit status for an HTTP error"
    stat = Path(f"/proc/{(tmp_path / 'pid').read_text().strip()}/stat")
    for _ in range(50):
        if not stat.exists() or stat.read_text().split()[2] in "ZX":
            break
        time.sleep(0.1)
    assert not stat.exists() or stat.read_text().split()[2] in "ZX", "the service outlived its block"
