"""Small things a user sees: labelled recommendation tables on stdout, no OpenMP advice in a host application,
the compare command recorded as typed, a chart legend that hides no error bar, and no "train loss 0.0000" for a
model with nothing to train."""

import logging
import os
import subprocess
import sys
import textwrap

import pytest
from helpers import REPO_ROOT, dataset_config, run_record

from recbole_fbsm.cli.serve import serve as serve_main
from recbole_fbsm.config.cli import typed_command
from recbole_fbsm.experiments import report
from recbole_fbsm.quick_start import run


# ------------------------------------------------------------------------------------- serve recommend
@pytest.fixture
def cosim_artifact(toy):
    result = run("CoSim", toy.name, config_dict=dataset_config(toy))
    new_items = toy.root / "new.item"
    new_items.write_text("item_id:token\tgenre:token_seq\twords:token_seq\nnew_a\tg1 g2\tw1 w2 w3\nnew_b\tg3\tw4 w5\n")
    return result["artifact_file"], new_items


def test_recommend_without_output_files_prints_one_labelled_table_per_kind(cosim_artifact, capsys):
    artifact, new_items = cosim_artifact
    assert serve_main(["recommend", artifact, str(new_items), "--top", "3"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("# top 3 users for each new item\n")
    items_part, users_part = out.split("\n\n# top 3 new items for each user\n")
    assert items_part.splitlines()[1] == "item_id,rank,user_id,score"
    assert len(items_part.splitlines()) == 2 + 2 * 3  # label, header, 3 users for each of 2 items
    assert users_part.splitlines()[0] == "user_id,rank,item_id,score"
    assert serve_main(["recommend", artifact, str(new_items), "--top", "3", "--format", "json"]) == 0
    import json

    document = json.loads(capsys.readouterr().out)  # one document, both kinds
    assert set(document) == {"items", "users"}


# --------------------------------------------------------------------------------- OpenMP advice
def test_the_python_api_prints_no_openmp_advice(toy, tmp_path):
    """A host application chose its own OpenMP (here: spinning waits on 4 usable cores): the run's console says
    nothing about OMP_WAIT_POLICY; the log file keeps the thread plan and why."""
    script = textwrap.dedent(f"""
        import recbole_fbsm.quick_start as quick_start
        import recbole_fbsm.runtime.threads as threads
        threads.usable_cores = lambda environ=None: 4
        settings = {dataset_config(toy)!r}
        del settings["state"]  # the default, quiet console
        quick_start.run("CoSim", {toy.name!r}, config_dict=settings)
    """)
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "PYTHONWARNINGS")}
    env.update(OMP_WAIT_POLICY="ACTIVE", PYTHONPATH=str(REPO_ROOT))
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    console = done.stdout + done.stderr
    assert "[Item split]" in console  # the quiet console is there
    assert "OMP_WAIT_POLICY" not in console and "torch threads:" not in console, console
    (log,) = (tmp_path / "log" / "CoSim").glob("*.log")
    assert "torch threads: 1 (torch_threads: auto, 4 cores per process, OpenMP spin-waits" in log.read_text()


# ---------------------------------------------------------------------------------- compare's command
@pytest.mark.parametrize(
    "process, original, expected",
    [
        (
            ["/venv/bin/recbole-fbsm", "compare", "--models", "FBSM", "--epochs=3"],
            ["/venv/bin/python3", "/venv/bin/recbole-fbsm", "compare", "--models", "FBSM", "--epochs=3"],
            "recbole-fbsm compare --models FBSM --epochs=3",
        ),
        (
            ["/src/recbole_fbsm/__main__.py", "compare", "--models", "FBSM", "--epochs=3"],
            ["python", "-m", "recbole_fbsm", "compare", "--models", "FBSM", "--epochs=3"],
            "python -m recbole_fbsm compare --models FBSM --epochs=3",
        ),
        (
            ["/src/recbole_fbsm/experiments/compare.py", "--models", "FBSM", "--epochs=3"],
            ["python3", "-m", "recbole_fbsm.experiments.compare", "--models", "FBSM", "--epochs=3"],
            "python3 -m recbole_fbsm.experiments.compare --models FBSM --epochs=3",
        ),
    ],
)
def test_the_command_is_recorded_as_typed(process, original, expected):
    assert typed_command(["--models", "FBSM", "--epochs=3"], "recbole-fbsm compare", process, original) == expected


# ----------------------------------------------------------------------------------------- the chart
def test_the_chart_legend_hides_no_error_bar():
    def record(model, seed, recall, ndcg):
        return run_record(model, seed, {"recall@10": recall, "ndcg@10": ndcg})

    # tall bars with wide error bars on the left and the right: where a legend inside the axes would sit
    records = [
        record(m, s, r + 0.2 * s, n + 0.2 * s)
        for m, r, n in (("FBSM", 0.6, 0.6), ("ItemKNNCBF", 0.2, 0.1), ("CoSim", 0.55, 0.62))
        for s in (0, 1)
    ]
    figure = report.chart_figure(report.summarise(records, ["FBSM", "ItemKNNCBF", "CoSim"]), "d")
    figure.canvas.draw()
    renderer = figure.canvas.get_renderer()
    (axes,) = figure.axes
    legend = axes.get_legend().get_window_extent(renderer)
    assert not legend.overlaps(axes.get_window_extent(renderer))
    # every error bar (its vertical segment, caps included) in display coordinates
    segments = [
        segment
        for container in axes.containers
        if getattr(container, "errorbar", None) is not None
        for collection in container.errorbar.lines[2]
        for segment in collection.get_segments()
    ]
    assert len(segments) == 6  # 3 models x 2 metrics
    for segment in segments:
        (x, low), (_, high) = axes.transData.transform(segment)
        hidden = legend.x0 - 5 <= x <= legend.x1 + 5 and low <= legend.y1 and high >= legend.y0
        assert not hidden, (x, low, high, legend)
    assert legend.x1 <= figure.bbox.x1  # and the legend is inside the picture


# ------------------------------------------------------------------------------- nothing to train
@pytest.mark.parametrize("model", ["ItemKNNCBF", "CoSim"])
def test_a_model_with_nothing_to_train_says_so_instead_of_a_zero_loss(toy, model, caplog):
    with caplog.at_level(logging.INFO):
        result = run(model, toy.name, config_dict=dataset_config(toy))
    messages = [record.getMessage() for record in caplog.records]
    assert not [m for m in messages if "train loss" in m or "training [" in m]
    (line,) = [m for m in messages if m.startswith("nothing to train:")]
    assert (
        line == f"nothing to train: {model} is a fixed similarity of the item features: valid recall@10 "
        f"{result['best_valid_score']:.4f}"
    )
    assert not [m for m in messages if m.startswith("kept epoch")] and result["kept_summary"] == line
    assert result["test_result"]["recall@10"] > 0
