"""Serving: new items without any usable feature (an empty description) are named in a warning: they
score 0 for every user, so their ranking of users would be arbitrary without a word."""

import pytest
from helpers import dataset_config

from recbole_fbsm.quick_start import run
from recbole_fbsm.serve import load_model
from recbole_fbsm.serve.new_items import UnknownTokensWarning, read_new_items

pytestmark = pytest.mark.usefixtures("workdir")


def test_new_items_with_an_empty_description_are_named_in_a_warning(toy, tmp_path):
    checkpoint = run("CoSim", toy.name, config_dict=dataset_config(toy))["saved_model_file"]
    served = load_model(checkpoint)
    some = toy.item_features[toy.item_tokens[0]]
    path = tmp_path / "new.item"
    path.write_text(
        "item_id:token\tgenre:token_seq\twords:token_seq\n"
        f"fine\t{' '.join(some['genre'])}\t{' '.join(some['words'])}\n"
        "blank1\t\t\n"
        "blank2\t\t\n"
    )
    with pytest.warns(UnknownTokensWarning) as record:
        items = read_new_items(served, path)
    message = str(record[0].message)
    assert items.featureless == ["blank1", "blank2"]
    assert "2 new item(s) have no known feature left and score 0 for every user" in message
    assert "'blank1', 'blank2'" in message
