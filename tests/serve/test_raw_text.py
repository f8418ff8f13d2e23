"""Serving raw text: the converter stores its analyzer, serving applies exactly it to new items.

A small raw-text dataset (four topics whose words come inflected and capitalised: `Gardening`,
`plants`, `headphones`) is converted with `convert_text` (words and whole tags), FBSM is trained
on it for two epochs and CoSim once. New items are then served as raw text (CSV, TSV, `.item` with
raw cells) and as the tokens the converter's analyzer gives: the scores must be the same.
"""

import csv
import io
import json

import numpy as np
import pytest
import torch
from helpers import QUIET, score_new_items

from recbole_fbsm.cli.serve import serve as main
from recbole_fbsm.convert import convert_text
from recbole_fbsm.data.analyzer import TextAnalyzer, WholeTokenAnalyzer, analyzer_path, read_analyzer
from recbole_fbsm.errors import ColdStartError
from recbole_fbsm.quick_start import run
from recbole_fbsm.serve import UnknownTokensWarning, explain, load_model, read_new_items

TOPICS = {
    "garden": ["Garden", "gardens", "gardening", "plant", "Plants", "planting", "soil", "soils", "compost"],
    "audio": ["headphone", "Headphones", "speaker", "speakers", "amplifier", "amplifiers", "sound", "sounds"],
    "yoga": ["Yoga", "stretch", "stretching", "stretches", "pose", "poses", "breathing", "breaths"],
    "cooking": ["cook", "Cooking", "cooked", "recipe", "recipes", "kitchen", "kitchens", "baking"],
}
TAGS = {"garden": "Home and Garden", "audio": "hi-fi", "yoga": "well_being", "cooking": "food|drink"}
NOISE = ["great", "new", "simple", "best", "guide", "review", "daily"]
NEW_ITEMS = [  # item id, raw text, raw tags
    ("new_garden", "Gardening: composting the soils, for PLANTS!", "Home and Garden|outdoors"),
    ("new_audio", "The best headphones and amplifiers of the year", "hi-fi"),
    ("new_yoga", "Stretching poses; breathing (daily)", "well_being"),
    ("new_mixed", "Cooking for gardeners: fertilizer recipes", "food|Home and Garden"),
]


def write_raw(root, seed=0):
    rng = np.random.default_rng(seed)
    items, tags, likes = [], [], []
    topic_items = {}
    for topic, words in TOPICS.items():
        for n in range(20):
            item = f"{topic}{n:02d}"
            chosen = list(rng.choice(words, 4)) + list(rng.choice(NOISE, 2))
            items.append((item, f"The {chosen[0]} and {', '.join(chosen[1:])} of the week."))
            tags.append((item, TAGS[topic] + ("|extra" if n % 3 == 0 else "")))
            topic_items.setdefault(topic, []).append(item)
    every = [item for item, _ in items]
    for k, topic in enumerate(TOPICS):
        for u in range(10):
            for item in rng.choice(topic_items[topic], 6, replace=False):
                likes.append((f"u{k}_{u}", item))
            likes.append((f"u{k}_{u}", every[int(rng.integers(len(every)))]))
    for name, rows in (("inter.csv", likes), ("items.csv", items), ("tags.csv", tags)):
        with open(root / name, "w", newline="", encoding="utf-8") as handle:
            csv.writer(handle).writerows(rows)
    return root / "inter.csv", root / "items.csv", root / "tags.csv"


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    root = tmp_path_factory.mktemp("raw")
    inter, items, tags = write_raw(root)
    convert_text(inter, items, "raw", root / "data", tags=tags, min_df=2, max_df=0.9, tags_min_df=2, tags_max_df=0.9)
    common = dict(QUIET, data_path=str(root / "data"), checkpoint_dir=str(root / "saved"), seed=2020, threshold=None)
    models = {}
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(root)
        for name, extra in {
            "FBSM": {"epochs": 2, "rank": 3, "init_std": 0.1, "learning_rate": 0.05},
            "CoSim": {},
        }.items():
            result = run(name, "raw", config_dict={**common, **extra})
            models[name] = load_model(result["saved_model_file"])
            models[name + "_checkpoint"] = result["saved_model_file"]
    models["root"] = root
    return models


def write_csv(path, rows, header=("item_id", "text", "tags"), delimiter=","):
    with open(path, "w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle, delimiter=delimiter)
        writer.writerow(header)
        writer.writerows(rows)
    return path


PAPER_WORDS, TAG_CELLS = TextAnalyzer.paper(), WholeTokenAnalyzer("|")  # the converter's analyzers


def write_tokens(path, rows, words=PAPER_WORDS, tags=TAG_CELLS):
    """The .item file the converter's own analyzers make of the raw rows."""
    lines = ["item_id:token\twords:token_seq\ttags:token_seq"]
    lines += [f"{item}\t{' '.join(words(text))}\t{' '.join(tags(tag_cell))}" for item, text, tag_cell in rows]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def users_of(served):
    return torch.arange(1, served.model.R.shape[0])


def test_converter_stores_its_analyzer_beside_the_dataset(served):
    s = served["FBSM"]
    path = analyzer_path(s.config["data_path"], "raw")
    records = read_analyzer(path)
    assert set(records) == {"words", "tags"}
    words, tags = records["words"], records["tags"]
    assert words.analyzer == TextAnalyzer.paper() and words.raw_column == "text"
    assert (words.min_df, words.max_df) == (2, 0.9)
    assert tags.analyzer == WholeTokenAnalyzer("|") and tags.raw_column == "tags"
    # the vocabulary is the .item file's: every token of the dataset's fields
    for name in ("words", "tags"):
        assert sorted(records[name].vocabulary) == sorted(str(t) for t in s.dataset.field2id_token[name][1:])
    assert "plant" in words.vocabulary and "home_and_garden" in tags.vocabulary
    assert json.loads(path.read_text())["fields"]["words"]["analyzer"]["stemmer"] == "snowball english"


@pytest.mark.parametrize("name", ["FBSM", "CoSim"])
def test_raw_text_scores_exactly_as_its_tokens(served, name, tmp_path):
    s = served[name]
    tokens_file = write_tokens(tmp_path / "new.item", NEW_ITEMS)
    assert "gardening" not in tokens_file.read_text() and "garden" in tokens_file.read_text()  # stemmed
    tokens = read_new_items(s, tokens_file, warn=False)
    users = users_of(s)
    expected = score_new_items(s, tokens, users)
    assert float(expected.abs().sum()) > 0
    variants = {
        "csv": write_csv(tmp_path / "new.csv", NEW_ITEMS),
        "tsv": write_csv(tmp_path / "new.tsv", NEW_ITEMS, delimiter="\t"),
        "named fields": write_csv(tmp_path / "fields.csv", NEW_ITEMS, header=("item_id", "words", "tags")),
        "id column not first": write_csv(
            tmp_path / "order.csv", [(t, g, i) for i, t, g in NEW_ITEMS], header=("text", "tags", "item_id")
        ),
    }
    for variant, path in variants.items():
        raw = read_new_items(s, path, warn=False)
        assert raw.tokens == tokens.tokens and raw.raw, variant
        assert (raw.counts != tokens.counts).nnz == 0, variant
        torch.testing.assert_close(score_new_items(s, raw, users), expected, rtol=0, atol=0)
    # an .item file whose cells are raw text, read with raw_text=True
    raw_item = tmp_path / "raw.item"
    raw_item.write_text(
        "item_id:token\twords:token_seq\ttags:token_seq\n" + "".join(f"{i}\t{t}\t{g}\n" for i, t, g in NEW_ITEMS),
        encoding="utf-8",
    )
    raw = read_new_items(s, raw_item, warn=False, raw_text=True)
    torch.testing.assert_close(score_new_items(s, raw, users), expected, rtol=0, atol=0)


def test_unknown_raw_words_are_reported_by_their_terms(served, tmp_path):
    s = served["FBSM"]
    path = write_csv(tmp_path / "new.csv", NEW_ITEMS)
    with pytest.warns(UnknownTokensWarning) as record:
        new = read_new_items(s, path)
    message = str(record[0].message)
    # 'gardeners' -> 'garden' is known, 'fertilizer' -> 'fertil' is not; of the tags, 'outdoors' is unknown
    assert "token(s) not in the training vocabulary (e.g. " in message
    assert "'words:fertil'" in message and "'tags:outdoors'" in message
    assert "words:fertil" in new.unknown and "tags:outdoors" in new.unknown


def test_raw_text_follows_the_stored_settings_not_the_defaults(tmp_path, monkeypatch):
    """A dataset converted without stemming is served without stemming."""
    inter, items, _ = write_raw(tmp_path)
    convert_text(inter, items, "plain", tmp_path / "data", min_df=2, max_df=0.9, stem=False)
    monkeypatch.chdir(tmp_path)
    result = run(
        "CoSim",
        "plain",
        config_dict=dict(
            QUIET, data_path=str(tmp_path / "data"), threshold=None, checkpoint_dir=str(tmp_path / "saved")
        ),
    )
    s = load_model(result["saved_model_file"])
    new = read_new_items(s, write_csv(tmp_path / "new.csv", [("n1", "plants and Gardening", "")]), warn=False)
    names = {s.features.names[c] for c in new.counts.indices}
    assert names == {"words:plants", "words:gardening"}


def test_raw_text_without_a_stored_analyzer_is_split_as_recbole_splits_a_cell(served, tmp_path, monkeypatch):
    s = served["CoSim"]
    monkeypatch.setattr(s, "analyzers", {})
    with pytest.warns(UnknownTokensWarning, match=r"not in the training vocabulary"):
        new = read_new_items(s, write_csv(tmp_path / "new.csv", NEW_ITEMS, header=("item_id", "words", "tags")))
    assert "words:Gardening:" in new.unknown and "tags:hi-fi" in {s.features.names[c] for c in new.counts.indices}


def test_cli_recommend_and_explain_take_raw_text(served, tmp_path, capsys):
    checkpoint = served["FBSM_checkpoint"]
    path = write_csv(tmp_path / "new.csv", NEW_ITEMS)
    out = tmp_path / "top.csv"
    assert main(["recommend", checkpoint, str(path), "--item-output", str(out), "--top", "2"]) == 0
    err = capsys.readouterr().err
    assert "'words:fertil'" in err and f"wrote {out}" in err
    with open(out, newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert [r["item_id"] for r in rows] == [i for i, _, _ in NEW_ITEMS for _ in range(2)]
    user = rows[0]["user_id"]
    assert main(["explain", checkpoint, "--user", user, "--item", "new_garden", "--new-items", str(path)]) == 0
    shown = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))  # the CSV table on stdout
    features = {row["item_feature"] for row in shown if row["section"] == "feature"}
    assert "words:garden" in features and "tags:home_and_garden" in features
    score = float(shown[0]["contribution"])
    assert shown[0]["section"] == "score"
    for section in ("feature", "item"):  # the entries shown and the rest's rows add up to the score
        total = sum(float(row["contribution"]) for row in shown if row["section"] == section)
        assert total == pytest.approx(score, abs=1e-4)
    with pytest.warns(UnknownTokensWarning):
        expected = explain(served["FBSM"], user, "new_garden", new_items=str(path)).model_score
    assert float(rows[0]["score"]) == pytest.approx(expected, rel=1e-5)


def test_bad_raw_text_files_name_file_and_columns(served, tmp_path):
    s = served["CoSim"]
    no_text = write_csv(tmp_path / "no_text.csv", [("n1", "x")], header=("item_id", "title"))
    with pytest.raises(
        ColdStartError,
        match=r"no_text\.csv has no column for feature field 'words': expected a "
        r"column named 'words' or 'text'; the header has \['item_id', 'title'\]",
    ):
        read_new_items(s, no_text)
    short = tmp_path / "short.csv"
    short.write_text("item_id,text,tags\nn1,cats\n")
    with pytest.raises(ColdStartError, match=r"short\.csv: line\(s\) \[2\] have fewer than the header's 3 columns"):
        read_new_items(s, short)
    clash = write_csv(tmp_path / "clash.csv", [("garden00", "plants", "")])
    with pytest.raises(ColdStartError, match=r"already belong to items of dataset 'raw'"):
        read_new_items(s, clash)


def test_an_analyzer_file_with_a_bad_pattern_is_one_error(served, tmp_path):
    """A hand-edited analyzer JSON whose token_pattern is no regular expression names the file and the pattern."""
    from recbole_fbsm.artifact.model_file import dataset_analyzer

    s = served["FBSM"]
    path = analyzer_path(s.config["data_path"], "raw")
    original = path.read_text()
    document = json.loads(original)
    document["fields"]["words"]["analyzer"]["token_pattern"] = "(unclosed"
    try:
        path.write_text(json.dumps(document))
        with pytest.raises(
            ColdStartError,
            match=r"raw\.analyzer\.json is not a readable analyzer file.*token_pattern "
            r"'\(unclosed' is not a regular expression",
        ):
            dataset_analyzer(s.config, s.fields, s.dataset)  # what a run reads to put it in the artifact
    finally:
        path.write_text(original)
