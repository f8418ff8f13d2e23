"""Answers name items by title where the data has a title field (ml-100k's movie_title), not by id alone."""

import os

import pandas as pd
import pytest
import recbole
from http_helpers import call, live_service, train

from recbole_fbsm.quick_start import run

ML_100K_ITEMS = os.path.join(os.path.dirname(recbole.__file__), "dataset_example", "ml-100k", "ml-100k.item")


@pytest.fixture(scope="module")
def cosim_on_ml_100k(tmp_path_factory):
    root = tmp_path_factory.mktemp("titles")
    os.chdir(root)  # RecBole's ./log
    result = run("CoSim", "ml-100k", config_dict={"state": "ERROR", "checkpoint_dir": str(root / "saved")})
    return result["artifact_file"], root


def test_a_users_list_carries_the_titles_of_dataset_and_new_items(cosim_on_ml_100k):
    artifact, root = cosim_on_ml_100k
    titles = pd.read_csv(ML_100K_ITEMS, sep="\t", dtype=str).set_index("item_id:token")["movie_title:token_seq"]
    with live_service(artifact, str(root / "store.sqlite")) as (url, state):
        new = [
            {"id": "space_western", "text": {"movie_title": "Space Cowboys of Mars", "class": "Sci-Fi Western"}},
            {"id": "zorglub", "tokens": {"movie_title": ["Zorglub", "Returns"], "class": ["Sci-Fi"]}},
        ]
        assert call(f"{url}/items", "POST", {"items": new})[0] == 200
        status, answer = call(f"{url}/users/196/items?top=1000&scope=all")
        assert status == 200
        named = {entry["item_id"]: entry["title"] for entry in answer["items"]}
        assert named["space_western"] == "Space Cowboys of Mars" and named["zorglub"] == "Zorglub Returns"
        dataset_items = [item for item in named if item in titles.index]
        assert len(dataset_items) > 900 and all(named[item] == titles[item] for item in dataset_items)
        status, answer = call(f"{url}/items/space_western/users?top=3")
        assert status == 200 and answer["title"] == "Space Cowboys of Mars"


def test_data_without_a_title_field_answers_without_one(tmp_path):
    artifacts, data = train(tmp_path, ["CoSim"])  # fields genre and words: no title
    with live_service(artifacts["CoSim"], str(tmp_path / "store.sqlite")) as (url, state):
        user = state.current().view.served.user_tokens([1])[0]
        status, answer = call(f"{url}/users/{user}/items?top=3&scope=warm")
        assert status == 200 and answer["items"] and all("title" not in entry for entry in answer["items"])
