"""Tests of recbole_fbsm.convert on small hand-written inputs (plus one slow run on citeulike-t)."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from helpers import REPO_ROOT as ROOT

from recbole_fbsm.cli.datasets import convert as main
from recbole_fbsm.convert import ConversionError, convert_ctr, convert_text

CITEULIKE_T = ROOT.parent / "shared" / "datasets" / "citeulike-t"

# Tiny CTR dataset. Vocabulary: 'the' is a stop word, 'running'/'runs' share the stem 'run',
# 'rare' occurs in one item, 'common' in every item, 'model' in two of four items.
VOCAB = ["the", "running", "runs", "model", "rare", "common", "graph"]
MULT = [
    "4 0:5 1:2 2:3 5:1",  # item 0: the x5, running x2, runs x3, common
    "3 3:2 5:1 6:1",  # item 1: model x2, common, graph
    "4 3:1 4:1 5:1 6:2",  # item 2: model, rare, common, graph x2
    "2 1:1 5:4",  # item 3: running, common x4
    "1 6:1",  # item 4: nobody has it
]
USERS = ["2 0 1", "3 1 2 3", "1 0"]


def write_lines(path: Path, lines: list[str]) -> Path:
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def ctr_files(tmp_path: Path, users=USERS, mult=MULT, vocab=VOCAB) -> dict[str, Path]:
    src = tmp_path / "src"
    src.mkdir(exist_ok=True)
    return {
        "users": write_lines(src / "users.dat", users),
        "mult": write_lines(src / "mult.dat", mult),
        "vocab": write_lines(src / "vocabulary.dat", vocab),
    }


def read_item(path: Path, field: str = "words") -> dict[str, list[str]]:
    lines = path.read_text(encoding="utf-8").split("\n")
    header = lines[0].split("\t")
    assert header[:2] == ["item_id:token", "words:token_seq"] and lines[-1] == ""
    column = header.index(f"{field}:token_seq")
    rows = [line.split("\t") for line in lines[1:-1]]
    assert all(len(row) == len(header) for row in rows)
    return {row[0]: row[column].split(" ") if row[column] else [] for row in rows}


def read_inter(path: Path) -> list[list[str]]:
    return [line.split("\t") for line in path.read_text(encoding="utf-8").splitlines()]


def small_ctr(tmp_path: Path, **kwargs):
    kwargs = {"min_df": 2, "max_df": 0.75} | kwargs
    return convert_ctr(**ctr_files(tmp_path), name="tiny", out_dir=tmp_path / "out", **kwargs)


# ---------------------------------------------------------------- CTR


def test_ctr_round_trip_keeps_counts_merges_stems_and_filters(tmp_path):
    result = small_ctr(tmp_path)
    folder = tmp_path / "out" / "tiny"
    assert result.path == folder
    assert read_inter(folder / "tiny.inter") == [
        ["user_id:token", "item_id:token"],
        ["0", "0"],
        ["0", "1"],
        ["1", "1"],
        ["1", "2"],
        ["1", "3"],
        ["2", "0"],
    ]
    # 'running' x2 + 'runs' x3 -> 'run' x5; 'the' is a stop word; 'rare' (1 item) and 'common'
    # (4 of 4 items > 0.75) fail the filter; item 4 has no user and is left out.
    assert read_item(folder / "tiny.item") == {
        "0": ["run"] * 5,
        "1": ["graph", "model", "model"],
        "2": ["graph", "graph", "model"],
        "3": ["run"],
    }
    assert result.counts["users"] == 3 and result.counts["items"] == 4 and result.counts["interactions"] == 6
    assert result.counts["features (terms after the filter)"] == 3
    assert result.skipped == {"items without interactions (left out)": 1}
    readme = (folder / "README.txt").read_text(encoding="utf-8")
    assert "min_df (items): 2" in readme and "features (terms after the filter): 3" in readme


def test_ctr_without_stemming_or_stop_words(tmp_path):
    small_ctr(tmp_path, stem=False, stopwords=False, min_df=1, max_df=1.0)
    items = read_item(tmp_path / "out" / "tiny" / "tiny.item")
    assert items["0"] == ["common"] + ["running"] * 2 + ["runs"] * 3 + ["the"] * 5
    assert items["2"] == ["common", "graph", "graph", "model", "rare"]


def test_ctr_malformed_lines_are_skipped_and_counted(tmp_path):
    users = USERS + ["3 0 1", "x 1", "0"]  # count mismatch, not a number, no items
    mult = MULT[:3] + ["2 1:1"]  # item 3: says 2 pairs, has 1
    files = ctr_files(tmp_path, users=users, mult=mult)
    result = convert_ctr(**files, name="tiny", out_dir=tmp_path / "out", min_df=1, max_df=1.0)
    assert result.skipped["malformed lines in users.dat"] == 2
    assert result.skipped["users without items in users.dat"] == 1
    assert result.skipped["malformed lines in mult.dat (item left without text)"] == 1
    assert result.skipped[f"interactions naming an item without text in {files['mult']}"] == 1
    assert any(f"{files['users']}:4: expected 'count item item ...'" in line for line in result.skipped_lines)
    assert "3" not in read_item(tmp_path / "out" / "tiny" / "tiny.item")


def test_ctr_all_users_malformed_fails_naming_file_and_line(tmp_path):
    files = ctr_files(tmp_path, users=["2 0", "a b"])
    with pytest.raises(
        ConversionError, match=r"users\.dat: no usable interactions.*users\.dat:1: expected 'count item"
    ):
        convert_ctr(**files, name="tiny", out_dir=tmp_path / "out", min_df=1)
    assert not (tmp_path / "out" / "tiny").exists()


def test_ctr_interactions_only_with_items_without_text_fail(tmp_path):
    files = ctr_files(tmp_path, users=["2 7 8"])
    with pytest.raises(
        ConversionError, match=r"no usable interactions: none names an item that has text in .*mult\.dat"
    ):
        convert_ctr(**files, name="tiny", out_dir=tmp_path / "out", min_df=1)


def test_ctr_word_id_outside_vocabulary_is_malformed(tmp_path):
    files = ctr_files(tmp_path, mult=["1 99:1"] * 4)
    with pytest.raises(
        ConversionError, match=r"mult\.dat: no usable item texts.*mult\.dat:1: expected 'n word_id:count"
    ):
        convert_ctr(**files, name="tiny", out_dir=tmp_path / "out", min_df=1)


def test_ctr_file_in_another_format_names_the_rejected_lines_not_the_filter(tmp_path):
    """mult.dat as 'count id id id' lines (no ':count'): a few lines parse by accident ('0', '1 3:1');
    the error says how many lines were rejected and shows the first, instead of blaming the df filter."""
    mult = ["3 0 1 5", "2 3 6", "0", "4 1 2 3 4", "1 3:1", "2 5 6"]
    files = ctr_files(tmp_path, mult=mult)
    with pytest.raises(ConversionError) as error:
        convert_ctr(**files, name="tiny", out_dir=tmp_path / "out", min_df=1)
    message = str(error.value)
    assert "4 of 6 lines rejected" in message and "another format" in message
    assert "mult.dat:1: expected 'n word_id:count" in message and "'3 0 1 5'" in message
    assert "document-frequency" not in message


def test_filter_removing_every_term_fails_naming_the_settings(tmp_path):
    with pytest.raises(ConversionError, match=r"removes every term: min_df=50 \(--min-df\).*max_df=0\.75 \(--max-df\)"):
        small_ctr(tmp_path, min_df=50)
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())  # nothing partial left


def test_a_bad_setting_fails_naming_the_setting(tmp_path, capsys):
    with pytest.raises(ConversionError, match=r"dataset name \(--name\)"):
        convert_ctr(**ctr_files(tmp_path), name="a/b", out_dir=tmp_path / "out")
    src = str(ctr_files(tmp_path)["users"].parent)
    for option, value, expected in [
        ("--min-df", "-1", "expected a number of items, an integer of at least 0; got -1"),
        ("--max-df", "1.5", "expected a fraction of items, a number from 0 to 1; got 1.5"),
        ("--tags-max-df", "2", "expected a fraction of items, a number from 0 to 1; got 2"),
    ]:
        with pytest.raises(SystemExit) as exit_:
            main(["ctr", "--src", src, "--name", "tiny", option, value])
        assert exit_.value.code == 2
        assert capsys.readouterr().err.strip().splitlines()[-1].endswith(f"error: argument {option}: {expected}")


def test_missing_input_file_fails_naming_it(tmp_path):
    files = ctr_files(tmp_path) | {"vocab": tmp_path / "nope.dat"}
    with pytest.raises(ConversionError, match=r"cannot read vocabulary file .*nope\.dat"):
        convert_ctr(**files, name="tiny", out_dir=tmp_path / "out")


def test_refuses_to_overwrite_unless_asked(tmp_path):
    small_ctr(tmp_path)
    item_file = tmp_path / "out" / "tiny" / "tiny.item"
    before = item_file.read_text()
    with pytest.raises(ConversionError, match=r"already exists; pass --overwrite"):
        small_ctr(tmp_path, min_df=1)
    assert item_file.read_text() == before
    with pytest.raises(ConversionError, match="removes every term"):  # failed overwrite keeps the old data
        small_ctr(tmp_path, min_df=50, overwrite=True)
    assert item_file.read_text() == before
    small_ctr(tmp_path, min_df=1, max_df=1.0, overwrite=True)
    assert item_file.read_text() != before
    assert [p.name for p in (tmp_path / "out").iterdir()] == ["tiny"]


# Tags of the tiny CTR dataset: tag-item.dat line t lists the 0-based items (mult.dat lines) carrying
# the tag on line t of tags.dat.
TAG_NAMES = ["scale_free", "ucsc-browser", "Networks", "-", "rare tag"]
TAG_ITEMS = [
    "3 0 1 2",  # scale_free: items 0, 1, 2
    "2 1 3",  # ucsc-browser: items 1, 3
    "3 0 3 9",  # Networks: items 0, 3 and 9, which has no text
    "2 0 1",  # '-': no letter or digit, skipped
    "1 2",  # 'rare tag': one item
    "1 4",  # line without a name in tags.dat
]


def tag_files(tmp_path: Path, names=TAG_NAMES, tag_items=TAG_ITEMS) -> dict[str, Path]:
    src = tmp_path / "src"
    src.mkdir(exist_ok=True)
    return {"tag_item": write_lines(src / "tag-item.dat", tag_items), "tag_names": write_lines(src / "tags.dat", names)}


def test_ctr_tags_are_a_second_field_of_whole_tokens(tmp_path):
    result = small_ctr(tmp_path, **tag_files(tmp_path), tags_min_df=1, tags_max_df=1.0)
    folder = tmp_path / "out" / "tiny"
    header = (folder / "tiny.item").read_text(encoding="utf-8").split("\n")[0]
    assert header == "item_id:token\twords:token_seq\ttags:token_seq"
    # tag ids are 0-based lines of mult.dat, as the item ids; tags are neither split nor stemmed
    assert read_item(folder / "tiny.item", "tags") == {
        "0": ["networks", "scale_free"],
        "1": ["scale_free", "ucsc-browser"],
        "2": ["rare_tag", "scale_free"],
        "3": ["networks", "ucsc-browser"],
    }
    assert read_item(folder / "tiny.item") == {  # the words field is unchanged
        "0": ["run"] * 5,
        "1": ["graph", "model", "model"],
        "2": ["graph", "graph", "model"],
        "3": ["run"],
    }
    assert result.counts["tags after the filter (tags field)"] == 4
    assert result.skipped["tags without a letter or digit in tags.dat"] == 1
    assert result.skipped["lines of tag-item.dat without a name in tags.dat"] == 1
    assert result.skipped["tag-item pairs naming an item without text in mult.dat"] == 1
    readme = (folder / "README.txt").read_text(encoding="utf-8")
    assert "tags:token_seq (each tag one token, kept whole)" in readme and "tags_min_df (items): 1" in readme


def test_ctr_tags_have_their_own_document_frequency_filter(tmp_path):
    small_ctr(tmp_path, **tag_files(tmp_path), tags_min_df=2, tags_max_df=0.5)
    tags = read_item(tmp_path / "out" / "tiny" / "tiny.item", "tags")
    # scale_free is in 3 of 4 items (> 0.5), rare_tag in 1 (< 2): only networks and ucsc-browser stay
    assert tags == {"0": ["networks"], "1": ["ucsc-browser"], "2": [], "3": ["networks", "ucsc-browser"]}
    with pytest.raises(ConversionError, match=r"removes every tag: tags_min_df=9 \(--tags-min-df\)"):
        small_ctr(tmp_path, **tag_files(tmp_path), tags_min_df=9, overwrite=True)


def test_cli_ctr_tags_from_src(tmp_path, capsys):
    files = ctr_files(tmp_path) | tag_files(tmp_path)
    args = [
        "ctr",
        "--src",
        str(files["users"].parent),
        "--tags",
        "--name",
        "tiny",
        "--out",
        str(tmp_path / "out"),
        "--min-df",
        "2",
        "--max-df",
        "0.75",
        "--tags-min-df",
        "1",
        "--tags-max-df",
        "1",
    ]
    assert main(args) == 0
    assert "tags after the filter (tags field): 4" in capsys.readouterr().out
    assert read_item(tmp_path / "out" / "tiny" / "tiny.item", "tags")["1"] == ["scale_free", "ucsc-browser"]
    files["tag_names"].unlink()
    assert main(args[:-8] + ["--overwrite"]) == 2
    assert "cannot read tag names file" in capsys.readouterr().err


# ---------------------------------------------------------------- CSV / TSV

ITEM_TEXTS = [
    "item,text",
    'b1,"The cats are running, quickly"',
    "b2,A cat runs to the graph models",
    "b3,graph model of cats",
    "b4,",  # empty text: kept, counted
    "b5,an unrated book",  # nobody rated it
]


def test_csv_with_threshold_writes_labels(tmp_path):
    inter = write_lines(
        tmp_path / "r.csv",
        ["user,item,rating,time", "u1,b1,5,1", "u1,b2,2,2", "u2,b3,4,3", "u2,b4,3.5,4", "u2,b1,1,5", "u2,b1,5,6"],
    )
    items = write_lines(tmp_path / "items.csv", ITEM_TEXTS)
    result = convert_text(inter, items, "books", tmp_path / "out", threshold=4, header=True, min_df=2, max_df=1.0)
    folder = tmp_path / "out" / "books"
    assert read_inter(folder / "books.inter") == [
        ["user_id:token", "item_id:token", "label:float"],
        ["u1", "b1", "1"],
        ["u1", "b2", "0"],
        ["u2", "b3", "1"],
        ["u2", "b4", "0"],
        ["u2", "b1", "0"],
    ]
    # cats/cat -> cat, running/runs -> run, models/model -> model; 'quickly' in one item only
    assert read_item(folder / "books.item") == {
        "b1": ["cat", "run"],
        "b2": ["cat", "graph", "model", "run"],
        "b3": ["cat", "graph", "model"],
        "b4": [],
    }
    assert result.counts["likes (label 1)"] == 2 and result.counts["dislikes (label 0)"] == 3
    assert result.counts["items with no term after the df filter (kept, empty words cell)"] == 1
    assert result.skipped == {
        "duplicate user-item pairs (kept the first)": 1,
        "items without interactions (left out)": 1,
    }


def test_tsv_without_threshold_is_implicit(tmp_path):
    inter = write_lines(tmp_path / "r.tsv", ["u1\tb1\t5", "u2\tb2", "u2\tzz"])
    items = write_lines(tmp_path / "items.tsv", [line.replace(",", "\t", 1) for line in ITEM_TEXTS[1:3]])
    result = convert_text(inter, items, "books", tmp_path / "out", min_df=1, max_df=1.0)
    assert read_inter(tmp_path / "out" / "books" / "books.inter") == [
        ["user_id:token", "item_id:token"],
        ["u1", "b1"],
        ["u2", "b2"],
    ]
    assert result.skipped == {f"interactions naming an item without text in {items}": 1}


def test_csv_malformed_lines_are_reported(tmp_path):
    inter = write_lines(tmp_path / "r.csv", ["u1,b1,5", "u1,b2,lots", "u3", "u2,b3,4"])
    items = write_lines(tmp_path / "items.csv", ITEM_TEXTS[1:4] + ["lonely"])
    result = convert_text(inter, items, "books", tmp_path / "out", threshold=4, min_df=1, max_df=1.0)
    assert result.skipped["malformed lines in r.csv"] == 2
    assert result.skipped["malformed lines in items.csv"] == 1
    assert any(
        f"{inter}:2: expected 'user,item,rating'" in line and "'u1,b2,lots'" in line for line in result.skipped_lines
    )
    assert any(f"{items}:4: expected 'item,text'" in line for line in result.skipped_lines)


def test_csv_interactions_only_naming_items_without_text_fail(tmp_path):
    inter = write_lines(tmp_path / "r.csv", ["u1,x1", "u2,x2"])
    items = write_lines(tmp_path / "items.csv", ITEM_TEXTS[1:])
    with pytest.raises(
        ConversionError, match=r"none names an item that has text in .*items\.csv.*2 interactions naming"
    ):
        convert_text(inter, items, "books", tmp_path / "out", min_df=1)


def test_csv_only_empty_texts_fail(tmp_path):
    inter = write_lines(tmp_path / "r.csv", ["u1,b1", "u2,b2"])
    items = write_lines(tmp_path / "items.csv", ["b1,", "b2,  the of a  "])
    with pytest.raises(
        ConversionError, match=r"items\.csv: no terms at all after tokenising and stop-word removal \(2 texts\)"
    ):
        convert_text(inter, items, "books", tmp_path / "out", min_df=1)


def test_csv_all_interaction_lines_malformed_fail(tmp_path):
    inter = write_lines(tmp_path / "r.csv", ["u1,b1", "u2,b2,bad"])
    items = write_lines(tmp_path / "items.csv", ITEM_TEXTS[1:])
    with pytest.raises(
        ConversionError, match=r"r\.csv: no usable interactions, expected lines 'user,item,rating'.*r\.csv:1"
    ):
        convert_text(inter, items, "books", tmp_path / "out", threshold=3)


def test_csv_tags_are_kept_whole_and_merged_over_lines(tmp_path):
    inter = write_lines(tmp_path / "r.csv", ["u1,b1", "u1,b2", "u2,b3", "u2,b2"])
    items = write_lines(tmp_path / "items.csv", ITEM_TEXTS[1:4])
    tags = write_lines(
        tmp_path / "tags.csv",
        [
            "b1,Science Fiction|scale_free,ucsc-browser",  # fields and '|' both separate tags
            "b2,science fiction",
            "b2,running",  # a second line of b2 adds to its tags; 'running' is not stemmed
            "b3,-",  # no letter or digit: no tag
            "zz,orphan",  # no such item
        ],
    )
    result = convert_text(
        inter, items, "books", tmp_path / "out", tags=tags, min_df=1, max_df=1.0, tags_min_df=1, tags_max_df=1.0
    )
    assert read_item(tmp_path / "out" / "books" / "books.item", "tags") == {
        "b1": ["scale_free", "science_fiction", "ucsc-browser"],
        "b2": ["running", "science_fiction"],
        "b3": [],
    }
    assert result.skipped["tag lines naming an item without text in tags.csv"] == 1
    assert result.counts["items with no tag after the df filter (kept, empty tags cell)"] == 1


def test_csv_tags_with_another_separator(tmp_path):
    inter = write_lines(tmp_path / "r.tsv", ["u1\tb1", "u2\tb2"])
    items = write_lines(tmp_path / "items.tsv", ["b1\tcats", "b2\tcats"])
    tags = write_lines(tmp_path / "tags.tsv", ["b1\tnew york;jazz", "b2\tjazz"])
    convert_text(inter, items, "books", tmp_path / "out", tags=tags, tag_sep=";", min_df=1, max_df=1.0)
    assert read_item(tmp_path / "out" / "books" / "books.item", "tags") == {"b1": ["jazz", "new_york"], "b2": ["jazz"]}


# ---------------------------------------------------------------- small data: the filter's effect is reported


def small_catalogue(tmp_path: Path, n_items: int = 300, own_words: int = 20) -> tuple[Path, Path]:
    """n_items items: 'garden' and 'music' in 50 items each, 'seed' in 15, 'yoga' in 8, 'vinyl' in 6,
    and a word of their own (`own00x`, ...) in the first `own_words` items; every item liked by one of
    30 users."""
    counts = {"garden": 50, "music": 50, "seed": 15, "yoga": 8, "vinyl": 6}
    texts = [[] for _ in range(n_items)]
    for word, n in counts.items():
        for k in np.random.default_rng(len(word)).choice(n_items, n, replace=False):
            texts[k].append(word)
    for k in range(own_words):
        texts[k].append(f"own{k:02d}x")
    items = write_lines(tmp_path / "items.csv", [f"i{k},{' '.join(t)}" for k, t in enumerate(texts)])
    inter = write_lines(tmp_path / "r.csv", [f"u{k % 30},i{k}" for k in range(n_items)])
    return inter, items


def test_filter_dropping_real_words_on_small_data_is_reported(tmp_path, capsys):
    inter, items = small_catalogue(tmp_path)
    result = convert_text(inter, items, "small", tmp_path / "out", min_df=20)
    (warning,) = result.warnings
    assert warning == (
        "words: the document-frequency filter dropped 23 of 25 distinct terms (92%) of 300 items: 23 found in fewer "
        "than 20 items (--min-df 20), 0 in more than 0.2 of them (--max-df 0.2)"
    )
    assert f"warning: {warning}" in result.summary()
    assert warning in (tmp_path / "out" / "small" / "README.txt").read_text()
    assert (
        main(
            [
                "text",
                "--inter",
                str(inter),
                "--items",
                str(items),
                "--name",
                "cli",
                "--out",
                str(tmp_path / "out"),
                "--min-df",
                "20",
            ]
        )
        == 0
    )
    assert "warning: words: the document-frequency filter dropped 23 of 25" in capsys.readouterr().out


def test_default_min_df_scales_with_the_number_of_items(tmp_path):
    from recbole_fbsm.convert.text import default_min_df

    assert [default_min_df(n) for n in (50, 300, 3_000, 5_000, 12_500, 25_584, 100_000)] == [2, 2, 2, 4, 10, 20, 20]
    inter, items = small_catalogue(tmp_path)
    result = convert_text(inter, items, "small", tmp_path / "out")  # default: min_df 2 for 300 items
    assert result.counts["min_df applied (items)"] == 2
    vocabulary = {t for words in read_item(tmp_path / "out" / "small" / "small.item").values() for t in words}
    assert {"seed", "yoga", "vinyl", "garden", "music"} <= vocabulary  # real words kept; 'own00x' (1 item) not
    assert "own00x" not in vocabulary and any("fewer than 2 items" in w for w in result.warnings)


def test_no_warning_when_the_filter_keeps_most_terms_of_enough_items(tmp_path):
    inter, items = small_catalogue(tmp_path, n_items=1_200, own_words=2)  # drops 2 of 7 terms: no warning
    result = convert_text(inter, items, "big", tmp_path / "out", min_df=2)
    assert result.warnings == [] and result.counts["features (terms after the filter)"] == 5
    inter, items = small_catalogue(tmp_path, n_items=1_200, own_words=3)  # drops 3 of 8: more than a third
    assert convert_text(inter, items, "big", tmp_path / "out", min_df=2, overwrite=True).warnings


# ---------------------------------------------------------------- command line


def test_cli_converts_and_reports_errors_without_traceback(tmp_path, capsys):
    files = ctr_files(tmp_path)
    args = [
        "ctr",
        "--users",
        str(files["users"]),
        "--mult",
        str(files["mult"]),
        "--vocab",
        str(files["vocab"]),
        "--name",
        "tiny",
        "--out",
        str(tmp_path / "out"),
        "--min-df",
        "2",
        "--max-df",
        "0.75",
    ]
    assert main(args) == 0
    assert "features (terms after the filter): 3" in capsys.readouterr().out
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: output dataset folder") and "Traceback" not in err
    assert (
        main(
            [
                "ctr",
                "--src",
                str(files["users"].parent),
                "--name",
                "tiny",
                "--out",
                str(tmp_path / "out"),
                "--overwrite",
                "--min-df",
                "99",
            ]
        )
        == 2
    )
    assert "removes every term" in capsys.readouterr().err


def test_cli_help_runs_as_module():
    done = subprocess.run(
        [sys.executable, "-m", "recbole_fbsm.convert", "--help"], cwd=ROOT, capture_output=True, text=True, check=True
    )
    assert "ctr" in done.stdout and "text" in done.stdout and "--overwrite" not in done.stderr


# ---------------------------------------------------------------- RecBole reads what we write


def load_with_recbole(
    monkeypatch, data_path: Path, name: str, config_files: list[str] | None = None, load_col: dict | None = None
):
    """RecBole's own Dataset on a converted folder; numpy-2 aliases and Config's compatibility hook are
    patched for this call only (RecBole 1.2.1 references np.float_ and friends)."""
    monkeypatch.setattr(np, "float_", np.float64, raising=False)
    monkeypatch.setattr(np, "complex_", np.complex128, raising=False)
    monkeypatch.setattr(np, "unicode_", np.str_, raising=False)
    from recbole.config import Config
    from recbole.data.dataset import Dataset

    monkeypatch.setattr(Config, "compatibility_settings", lambda self: None)
    monkeypatch.setattr(sys, "argv", sys.argv[:1])  # Config reads --key=value from the command line
    config_dict = {"data_path": str(data_path), "checkpoint_dir": str(data_path / "saved"), "show_progress": False}
    if load_col:
        config_dict["load_col"] = load_col
    config = Config(model="Pop", dataset=name, config_file_list=config_files, config_dict=config_dict)
    dataset = Dataset(config)
    dataset._change_feat_format()  # DataFrames -> Interaction tensors, as Dataset.build() does
    return dataset


def test_recbole_loads_repeats_labels_and_empty_cells(tmp_path, monkeypatch):
    inter = write_lines(tmp_path / "r.csv", ["u1,b1,5", "u1,b2,2", "u2,b3,4", "u2,b4,3"])
    items = write_lines(tmp_path / "items.csv", ITEM_TEXTS[1:])
    convert_text(inter, items, "books", tmp_path / "out", threshold=4, min_df=2, max_df=1.0)
    dataset = load_with_recbole(
        monkeypatch,
        tmp_path / "out",
        "books",
        load_col={"inter": ["user_id", "item_id", "label"], "item": ["item_id", "words"]},
    )
    words = dataset.item_feat["words"]
    row = {item: dataset.token2id("item_id", item) for item in ["b1", "b2", "b3", "b4"]}
    assert int((words[row["b4"]] > 0).sum()) == 0  # empty cell -> all-padding row
    assert int((words[row["b2"]] > 0).sum()) == 4
    assert dataset.inter_feat["label"].tolist() == [1.0, 0.0, 1.0, 0.0]


def test_recbole_loads_the_tags_field(tmp_path, monkeypatch):
    small_ctr(tmp_path, **tag_files(tmp_path), tags_min_df=1, tags_max_df=1.0)
    dataset = load_with_recbole(
        monkeypatch,
        tmp_path / "out",
        "tiny",
        load_col={"inter": ["user_id", "item_id"], "item": ["item_id", "words", "tags"]},
    )
    tags = dataset.field2id_token["tags"]
    row = dataset.item_feat["tags"][dataset.token2id("item_id", "1")]
    assert sorted(tags[row[row > 0]].tolist()) == ["scale_free", "ucsc-browser"]


@pytest.mark.slow
def test_citeulike_t_tags_line_up_with_the_articles(tmp_path):
    """tag-item.dat's ids are 0-based mult.dat lines: a tag that is also a word of the vocabulary is
    found among the words of its articles far more often than among those of the neighbouring lines."""
    if not CITEULIKE_T.is_dir():
        pytest.skip(f"{CITEULIKE_T} is absent")
    convert_ctr(
        CITEULIKE_T / "users.dat",
        CITEULIKE_T / "mult.dat",
        CITEULIKE_T / "vocabulary.dat",
        "ct",
        tmp_path,
        tag_item=CITEULIKE_T / "tag-item.dat",
        tag_names=CITEULIKE_T / "tags.dat",
        stem=False,
        min_df=1,
        max_df=1.0,
        tags_min_df=1,
        tags_max_df=1.0,
    )
    words = read_item(tmp_path / "ct" / "ct.item")
    tags = read_item(tmp_path / "ct" / "ct.item", "tags")
    assert len(tags) == 25584
    assert {"scale_free", "scale-free", "ucsc-browser"} <= {tag for item_tags in tags.values() for tag in item_tags}
    pairs = [(item, tag) for item, item_tags in tags.items() for tag in item_tags if tag.isalpha()]
    words = {item: set(item_words) for item, item_words in words.items()}
    found = np.mean([tag in words[item] for item, tag in pairs])
    shifted = [(str(int(item) + shift), tag) for item, tag in pairs for shift in (-1, 1)]
    found_shifted = np.mean([tag in words.get(item, ()) for item, tag in shifted])
    assert found > 10 * found_shifted, (found, found_shifted)


@pytest.mark.slow
def test_citeulike_t_conversion(tmp_path, monkeypatch):
    if not CITEULIKE_T.is_dir():
        pytest.skip(f"{CITEULIKE_T} is absent")
    start = time.perf_counter()
    result = convert_ctr(
        CITEULIKE_T / "users.dat", CITEULIKE_T / "mult.dat", CITEULIKE_T / "vocabulary.dat", "citeulike-t", tmp_path
    )
    seconds = time.perf_counter() - start
    counts = result.counts
    print(
        f"citeulike-t: {counts['features (terms after the filter)']} features, "
        f"{counts['items with no term after the df filter (kept, empty words cell)']} items without terms, "
        f"{seconds:.1f} s"
    )
    assert counts["users"] == 7947 - result.skipped.get("users without items in users.dat", 0)
    assert counts["items"] == 25584 and counts["interactions"] == 134860
    assert 2000 <= counts["features (terms after the filter)"] <= 8000  # paper's CUL: 6,359 features
    assert result.skipped == {"items without interactions (left out)": 25975 - 25584}
    dataset = load_with_recbole(
        monkeypatch, tmp_path, "citeulike-t", config_files=[str(ROOT / "properties" / "dataset" / "citeulike-t.yaml")]
    )
    assert dataset.user_num - 1 == counts["users"] and dataset.item_num - 1 == counts["items"]
    assert len(dataset.field2id_token["words"]) - 1 == counts["features (terms after the filter)"]


def test_failure_while_writing_leaves_no_partial_dataset(tmp_path, monkeypatch):
    from recbole_fbsm.convert import text as atomic

    def fail(*args):
        raise OSError("disk full")

    monkeypatch.setattr(atomic, "_move_into_place", fail)
    with pytest.raises(OSError, match="disk full"):
        small_ctr(tmp_path)
    assert list((tmp_path / "out").iterdir()) == []


def test_csv_header_not_skipped_is_an_error_not_a_user(tmp_path):
    """Without --header, a header line would become a user 'user' and an item 'item'."""
    inter = write_lines(tmp_path / "r.csv", ["user,item,rating", "u1,b1,5", "u1,b2,2", "u2,b3,4"])
    items = write_lines(tmp_path / "items.csv", ITEM_TEXTS[1:])
    with pytest.raises(
        ConversionError, match=r"r\.csv line 1 \('user,item,rating'\) looks like a header.*give --header"
    ):
        convert_text(inter, items, "books", tmp_path / "out", threshold=4, min_df=1, max_df=1.0)
    assert not (tmp_path / "out" / "books").exists()


def test_ratings_without_threshold_are_all_likes_and_say_so(tmp_path, capsys):
    inter = write_lines(tmp_path / "r.csv", ["u1,b1,5", "u1,b2,1", "u2,b3,2", "u2,b1,5"])
    items = write_lines(tmp_path / "items.csv", ITEM_TEXTS[1:])
    result = convert_text(inter, items, "books", tmp_path / "out", min_df=1, max_df=1.0)
    (warning,) = [w for w in result.warnings if "no --threshold" in w]
    assert "ratings (1 to 5)" in warning and "the 2 rated below 5 included" in warning and "--threshold 5" in warning
    assert "warning: " + warning in result.summary()
    assert "no --threshold" in (tmp_path / "out" / "books" / "README.txt").read_text()


def test_a_byte_order_mark_does_not_swallow_the_first_id(tmp_path):
    """Spreadsheets save CSV with a UTF-8 BOM: the first user and the first item keep their ids."""
    inter = tmp_path / "r.csv"
    inter.write_bytes("\ufeffu1,b1\nu2,b2\nu1,b2\n".encode("utf-8"))
    items = tmp_path / "items.csv"
    items.write_bytes(("\ufeff" + "\n".join(ITEM_TEXTS[1:]) + "\n").encode("utf-8"))
    result = convert_text(inter, items, "books", tmp_path / "out", min_df=1, max_df=1.0)
    rows = read_inter(tmp_path / "out" / "books" / "books.inter")
    assert ["u1", "b1"] in rows and result.counts["users"] == 2
    assert not any("without text" in reason for reason in result.skipped)


def test_an_output_folder_that_cannot_be_made_fails_before_the_work(tmp_path):
    inter = write_lines(tmp_path / "r.csv", ["u1,b1", "u2,b2"])
    items = write_lines(tmp_path / "items.csv", ITEM_TEXTS[1:])
    (tmp_path / "a_file").write_text("")
    with pytest.raises(ConversionError, match=r"output folder .*a_file/out \(--out\) cannot be created"):
        convert_text(inter, items, "books", tmp_path / "a_file" / "out", min_df=1, max_df=1.0)


def test_ids_pandas_reads_as_missing_round_trip(tmp_path):
    """Users and items called NA, null, nan, None, N/A (pandas' default missing values) are written as those
    ids and read back as those ids by the plugin's dataset, with every interaction and item kept."""
    from recbole_fbsm.config.cold_start_config import ColdStartConfig
    from recbole_fbsm.data.preparation import create_dataset

    names = ["NA", "null", "nan", "None", "N/A", "NULL", "#N/A"]
    inter_rows = [
        f"{user},{item},{5 if (u + i) % 3 else 2}"
        for u, user in enumerate(names)
        for i, item in enumerate(names)
        if (u + i) % 2 == 0
    ]
    inter = write_lines(tmp_path / "r.csv", inter_rows)
    items = write_lines(
        tmp_path / "items.csv", [f"{item},graph model of cats number {k % 3} NA" for k, item in enumerate(names)]
    )
    result = convert_text(inter, items, "nas", tmp_path / "out", threshold=4, min_df=1, max_df=1.0)
    assert result.counts["users"] == len(names) and result.counts["items"] == len(names)
    assert result.counts["interactions"] == len(inter_rows) and not result.skipped
    written = read_inter(tmp_path / "out" / "nas" / "nas.inter")[1:]
    assert [row[:2] for row in written] == [row.split(",")[:2] for row in inter_rows]
    assert set(read_item(tmp_path / "out" / "nas" / "nas.item")) == set(names)

    config = ColdStartConfig(
        model="Pop",
        dataset="nas",
        config_dict={
            "data_path": str(tmp_path / "out"),
            "state": "ERROR",
            "checkpoint_dir": str(tmp_path / "saved"),
            "load_col": {"inter": ["user_id", "item_id", "label"], "item": ["item_id", "words"]},
            "threshold": None,
        },
    )
    dataset = create_dataset(config)
    assert sorted(dataset.field2id_token["user_id"][1:].tolist()) == sorted(names)
    assert sorted(dataset.field2id_token["item_id"][1:].tolist()) == sorted(names)
    assert len(dataset.inter_feat) == len(inter_rows)
    assert "na" in dataset.field2id_token["words"].tolist()  # the word NA of the texts, lower-cased
