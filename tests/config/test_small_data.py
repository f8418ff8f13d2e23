"""A newcomer's small dataset: ``--topk=[5]`` alone is enough (the validation metric follows it), a split too
small for the top-k names both settings that decide it, and docs/mydata.yaml runs as it is."""

import json
import re

import pytest
import yaml
from helpers import REPO_ROOT, dataset_config, write_dataset

from recbole_fbsm.cli.run import run as run_main
from recbole_fbsm.config.cold_start_config import ColdStartConfig
from recbole_fbsm.errors import ColdStartError

MYDATA = REPO_ROOT / "docs" / "mydata.yaml"


def config(toy, config_files=None, **settings):
    return ColdStartConfig(
        model="CoSim", dataset=toy.name, config_file_list=config_files, config_dict=dataset_config(toy, **settings)
    )


@pytest.mark.parametrize(
    "settings, file_settings, expected",
    [
        ({}, {}, "Recall@10"),  # the default, properties/overall.yaml
        ({"topk": [5]}, {}, "Recall@5"),  # follows the user's topk
        ({"topk": [5, 20]}, {}, "Recall@5"),  # the first cut-off
        ({"topk": [20, 10]}, {}, "Recall@10"),  # its own cut-off is still computed: unchanged
        ({}, {"topk": [5]}, "Recall@5"),  # topk in the user's config file
        ({"topk": [5], "valid_metric": "NDCG@5"}, {}, "NDCG@5"),  # the user's valid_metric is theirs
        ({"topk": 5}, {}, "Recall@5"),  # a single cut-off, as RecBole accepts it
    ],
)
def test_the_default_valid_metric_follows_the_users_topk(toy, tmp_path, settings, file_settings, expected):
    files = None
    if file_settings:
        path = tmp_path / "mine.yaml"
        path.write_text(yaml.safe_dump(file_settings))
        files = [str(path)]
    assert config(toy, files, **settings)["valid_metric"] == expected


def test_a_valid_metric_the_user_set_is_never_changed(toy, tmp_path):
    path = tmp_path / "mine.yaml"
    path.write_text("valid_metric: Recall@10\n")
    with pytest.raises(
        ColdStartError,
        match=r"valid_metric 'Recall@10': expected one of the metrics computed .* at a cut-off of topk \[5\]",
    ):
        config(toy, [str(path)], topk=[5])


@pytest.fixture
def thirty_items(tmp_path):
    """30 items with likes (18/6/6 after the 60/20/20 split), in mydata.yaml's columns (words and genre)."""
    return write_dataset(tmp_path, "mydata", n_users=25, n_items=30, n_items_without_inter=0, seed=3)


def test_thirty_items_run_with_topk_5_alone(thirty_items, workdir, capsys):
    args = [
        "--model=ItemKNNCBF",
        "--dataset=mydata",
        f"--config_files={MYDATA}",
        f"--data_path={thirty_items.root}",
        "--topk=[5]",
        "--torch_threads=1",
    ]
    assert run_main(args) == 0, capsys.readouterr().err
    out = capsys.readouterr().out
    assert re.search(r"best valid: \{'recall@5': [0-9.]+", out), out
    (record,) = [json.loads(path.read_text()) for path in (workdir / "log" / "ItemKNNCBF").glob("*.json")]
    assert record["valid_metric"] == "recall@5" and record["config"]["topk"] == [5]


def test_a_split_smaller_than_the_topk_names_topk_and_the_split_in_one_line(thirty_items, capsys):
    args = [
        "--model=ItemKNNCBF",
        "--dataset=mydata",
        f"--config_files={MYDATA}",
        f"--data_path={thirty_items.root}",
        "--torch_threads=1",
    ]
    assert run_main(args) == 2
    err = capsys.readouterr().err
    (line,) = [line for line in err.splitlines() if line.startswith("error:")]
    assert "the valid split has 6 item(s), not more than the largest topk (10)" in line
    assert "lower topk (now [10]) below 6" in line
    assert "eval_args.split RS [0.6, 0.2, 0.2] of the dataset's 30 items" in line


def test_mydata_yaml_holds_known_settings_only():
    from recbole_fbsm.config.settings import check_user_settings, read_yaml

    settings = read_yaml(MYDATA)
    check_user_settings([str(MYDATA)])
    assert {"data_path", "load_col", "threshold", "feature_fields", "topk"} <= set(settings)
