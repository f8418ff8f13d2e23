"""Fuzz of the settings and the atomic-file loader: every case of docs/errors.md, run in-process through
``run_recbole.main`` (a few through the real command line). Each bad input ends in one ``error: ...``
line (exit code 2) that names the setting, file or line and what was expected, or, where the run can go
on, in a warning with counts; never a traceback, never silence, never a log file left behind."""

import importlib.util
import re
from pathlib import Path

import pytest
import yaml
from helpers import REPO_ROOT, RUN_RECBOLE, item_token_ids, run_cli, write_dataset
from pandas._libs.parsers import STR_NA_VALUES

from recbole_fbsm.config.cold_start_config import ColdStartConfig
from recbole_fbsm.data.preparation import check_dataset_files

pytestmark = pytest.mark.usefixtures("workdir")

_spec = importlib.util.spec_from_file_location("run_recbole", RUN_RECBOLE)
run_recbole = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(run_recbole)

ERRORS_DOC = REPO_ROOT / "docs" / "errors.md"


# ------------------------------------------------------------------------------- dataset edits
def lines(path):
    return path.read_text(encoding="utf-8").split("\n")


def rewrite(path, edit):
    rows = lines(path)
    edit(rows)
    path.write_text("\n".join(rows), encoding="utf-8")


def set_cell(path, row, column, value):
    def edit(rows):
        cells = rows[row].split("\t")
        cells[column] = value
        rows[row] = "\t".join(cells)

    rewrite(path, edit)


def header(path, text):
    rewrite(path, lambda rows: rows.__setitem__(0, text))


def drop_item_rows(data, keep):
    rewrite(data.item_path, lambda rows: rows.__setitem__(slice(1, None), [r for r in rows[1:] if not r or keep(r)]))


def empty_features(data):
    rewrite(
        data.item_path,
        lambda rows: rows.__setitem__(slice(1, None), [r.split("\t")[0] + "\t\t" if r else r for r in rows[1:]]),
    )


def add_float_seq(data, bad=False):
    def edit(rows):
        rows[0] += "\tvec:float_seq"
        for k in range(1, len(rows)):
            if rows[k]:
                rows[k] += "\t" + ("0.5 oops" if k == 4 and bad else "0.5 1.5")

    rewrite(data.item_path, edit)


def add_price(data):
    def edit(rows):
        rows[0] += "\tprice:float"
        for k in range(1, len(rows)):
            if rows[k]:
                rows[k] += "\t" + ("" if k == 2 else "9.5")

    rewrite(data.item_path, edit)


def spaces_around_ids(data):
    def edit(rows):
        rows[3] = rows[3].replace("\t", " \t", 1)  # 'u000 '
        rows[5] = " " + rows[5]  # ' u000'

    rewrite(data.inter_path, edit)


# Each case: (id, model, edit of the generated dataset or None, extra argv, file settings or None,
#             regular expressions the single error line must match)
SETTING_CASES = [
    ("unknown-key", "FBSM", None, ["--rnak=10"], None, [r"unknown setting --rnak", r"did you mean 'rank'"]),
    (
        "unknown-key-in-file",
        "FBSM",
        None,
        [],
        {"rnak": 10},
        [r"unknown setting 'rnak' in config file .*toy\.yaml", r"'rank'"],
    ),
    (
        "misspelled-learner",
        "FBSM",
        None,
        ["--learner=adamm"],
        None,
        [r"--learner", r"one of adam", r"got 'adamm'", r"did you mean 'adam'"],
    ),
    (
        "missing-config-file",
        "FBSM",
        None,
        ["--config_files=missing.yaml"],
        None,
        [r"config file missing\.yaml not found"],
    ),
    ("rank-negative", "FBSM", None, ["--rank=-3"], None, [r"--rank", r"positive integer", r"got -3"]),
    ("rank-text", "FBSM", None, ["--rank=abc"], None, [r"--rank", r"positive integer", r"got 'abc'"]),
    ("rank-fraction", "FBSM", None, ["--rank=2.5"], None, [r"--rank", r"positive integer", r"got 2\.5"]),
    ("n-functions-zero", "UFSM", None, ["--n_functions=0"], None, [r"--n_functions", r"positive integer", r"got 0"]),
    (
        "learning-rate-text",
        "FBSM",
        None,
        ["--learning_rate=abc"],
        None,
        [r"--learning_rate", r"number >= 0", r"got 'abc'"],
    ),
    (
        "learning-rate-negative",
        "FBSM",
        None,
        ["--learning_rate=-0.1"],
        None,
        [r"--learning_rate", r">= 0", r"got -0\.1"],
    ),
    ("seed-negative", "Pop", None, ["--seed=-1"], None, [r"--seed", r"from 0 to 4294967295", r"got -1"]),
    ("reg-negative", "FBSM", None, ["--reg_V=-1"], None, [r"--reg_V", r">= 0"]),
    ("epochs-zero", "Pop", None, ["--epochs=0"], None, [r"--epochs", r"positive integer"]),
    ("batch-size-zero", "BPR", None, ["--train_batch_size=0"], None, [r"--train_batch_size", r"positive integer"]),
    ("eval-batch-text", "Pop", None, ["--eval_batch_size=big"], None, [r"--eval_batch_size", r"got 'big'"]),
    ("topk-negative", "Pop", None, ["--topk=[10, -5]"], None, [r"--topk", r"positive integer"]),
    (
        "unknown-metric",
        "Pop",
        None,
        ["--metrics=['Recal']"],
        None,
        [r"--metrics", r"got 'Recal'", r"did you mean 'Recall'"],
    ),
    (
        "valid-metric-cutoff",
        "Pop",
        None,
        ["--valid_metric=Recall@20"],
        None,
        [r"valid_metric 'Recall@20'", r"topk \[10\]"],
    ),
    (
        "valid-metric-not-computed",
        "Pop",
        None,
        ["--valid_metric=MAP@10"],
        None,
        [r"valid_metric 'MAP@10'", r"metrics computed"],
    ),
    (
        "feature-weighting",
        "CoSim",
        None,
        ["--feature_weighting=idf"],
        None,
        [r"--feature_weighting", r"tfidf, bm25, tf, none, binary"],
    ),
    ("flag-not-bool", "CoSim", None, ["--feature_normalize=maybe"], None, [r"--feature_normalize", r"True or False"]),
    (
        "order-temporal-on-item-split",
        "CoSim",
        None,
        ["--eval_args={'split': {'RS': [0.6, 0.2, 0.2]}, 'group_by': 'item', 'order': 'TO'}"],
        None,
        [r"eval_args\.order: the item split partitions items at random \(order: RO\)", r"got 'TO'"],
    ),
    (
        "seed-over-numpy-range",
        "CoSim",
        None,
        ["--seed=4294967296"],
        None,
        [r"--seed", r"from 0 to 4294967295", r"got 4294967296"],
    ),
    (
        "threads-over-cores",
        "CoSim",
        None,
        ["--torch_threads=100000"],
        None,
        [r"--torch_threads", r"this machine's cores", r"got 100000"],
    ),
    (
        "feature-fields-empty",
        "FBSM",
        None,
        ["--feature_fields=[]"],
        None,
        [r"--feature_fields", r"at least one field name", r"got \[\]"],
    ),
    (
        "dynamic-without-candidates",
        "FBSM",
        None,
        ["--train_neg_sample_args={'distribution': 'uniform', 'sample_num': 1, 'dynamic': True, 'candidate_num': 0}"],
        None,
        [r"--train_neg_sample_args", r"candidate_num >= 1 with dynamic: True", r"got 0"],
    ),
    (
        "key-given-twice-in-file",
        "FBSM",
        None,
        [],
        "epochs: 1\nepochs: 3\n",
        [r"toy\.yaml line 2", r"'epochs' is given twice \(lines 1 and 2\)"],
    ),
    (
        "rank-over-memory",
        "FBSM",
        None,
        ["--rank=10000000000"],
        None,
        [r"model FBSM: its parameters do not fit in memory", r"rank=10000000000"],
    ),
    (
        "similarity-unknown",
        "ItemKNNCBF",
        None,
        ["--similarity=cosin"],
        None,
        [r"--similarity", r"one of cosine", r"did you mean 'cosine'"],
    ),
    ("bm25-b-over-one", "ItemKNNCBF", None, ["--bm25_b=1.5"], None, [r"--bm25_b", r"from 0 to 1", r"got 1\.5"]),
    (
        "threshold-not-number",
        "Pop",
        None,
        ["--threshold={'rating': 'high'}"],
        None,
        [r"--threshold", r"'rating' to be a finite number", r"got 'high'"],
    ),
    ("seed-text", "Pop", None, ["--seed=abc"], None, [r"--seed", r"from 0 to 4294967295", r"got 'abc'"]),
    (
        "negative-distribution",
        "BPR",
        None,
        ["--train_neg_sample_args={'distribution': 'pop'}"],
        None,
        [r"--train_neg_sample_args", r"uniform, popularity", r"got 'pop'", r"'popularity'"],
    ),
    (
        "unknown-model",
        "FBMS",
        None,
        [],
        None,
        [r"unknown model 'FBMS'", r"did you mean 'FBSM'", r"recbole-fbsm models"],
    ),
    ("empty-model-name", "", None, [], None, [r"unknown model ''\. recbole-fbsm models lists"]),
    ("eval-user-sample-zero", "FM", None, ["--eval_user_sample=0"], None, [r"--eval_user_sample", r"positive integer"]),
    ("state-unknown", "Pop", None, ["--state=LOUD"], None, [r"--state", r"info, debug"]),
    ("load-col-not-mapping", "Pop", None, ["--load_col=abc"], None, [r"--load_col", r"a mapping"]),
    (
        "feature-fields-text",
        "CoSim",
        None,
        ["--feature_fields=genre"],
        None,
        [r"--feature_fields", r"list of field names"],
    ),
    ("stopping-step-zero", "Pop", None, ["--stopping_step=0"], None, [r"--stopping_step", r"positive integer"]),
    ("recbole-model-setting-text", "LightGCN", None, ["--n_layers=abc"], None, [r"--n_layers", r"a number"]),
    (
        "pairwise-without-negatives",
        "BPR",
        None,
        ["--train_neg_sample_args=None"],
        None,
        [r"train_neg_sample_args: model BPR learns likes against sampled negatives", r"distribution: uniform"],
    ),
    (
        "context-model-without-negatives",
        "FM",
        None,
        ["--train_neg_sample_args=None"],
        None,
        [r"train_neg_sample_args: model FM learns likes against sampled negatives", r"got none"],
    ),
    (
        "duplicate-removal-choice",
        "Pop",
        None,
        ["--rm_dup_inter=middle"],
        None,
        [r"--rm_dup_inter", r"first, last", r"got 'middle'"],
    ),
    (
        "valid-metric-of-a-single-metric",
        "Pop",
        None,
        ["--metrics=Recall", "--valid_metric=NDCG@10"],
        None,
        [r"valid_metric 'NDCG@10'", r"metrics computed \(Recall\)"],
    ),
    (
        "sampled-evaluation-mode",
        "Pop",
        None,
        ["--eval_args={'mode': 'uni100'}"],
        None,
        [r"eval_args\.mode", r"mode: full", r"got 'uni100'"],
    ),
    (
        "filters-remove-everything",
        "Pop",
        None,
        ["--user_inter_num_interval=[100,inf)"],
        None,
        [r"the filters leave no data", r"user_inter_num_interval='\[100,inf\)'"],
    ),
    ("yaml-syntax", "Pop", None, [], "rank: [1, 2\nepochs: 1\n", [r"toy\.yaml line \d+", r"not valid YAML"]),
    (
        "yaml-not-mapping",
        "Pop",
        None,
        [],
        "- epochs\n- 1\n",
        [r"toy\.yaml", r"expected key: value settings, found a list"],
    ),
    (
        "clip-grad-norm-zero",
        "FBSM",
        None,
        ["--clip_grad_norm={'max_norm': 0}"],
        None,
        [r"--clip_grad_norm: expected 'max_norm' to be a number > 0", r"got 0\."],
    ),
    (
        "clip-grad-norm-unknown-key",
        "FBSM",
        None,
        ["--clip_grad_norm={'maxnorm': 5}"],
        None,
        [r"--clip_grad_norm: expected keys among max_norm, norm_type", r"got 'maxnorm'; did you mean 'max_norm'\?"],
    ),
    (
        "sparse-adam-dense-model",
        "FBSM",
        None,
        ["--learner=sparse_adam"],
        None,
        [r"setting --learner: expected one of adam, adamw, sgd, adagrad, rmsprop; got 'sparse_adam'"],
    ),
    (
        "feature-fields-repeated",
        "FBSM",
        None,
        ["--feature_fields=['genre', 'genre']"],
        None,
        [r"--feature_fields: expected a list of distinct field names", r"got \['genre', 'genre'\]"],
    ),
    (
        "load-col-repeated",
        "Pop",
        None,
        ["--load_col={'inter': ['user_id', 'item_id', 'item_id', 'rating']}"],
        None,
        [
            r"--load_col: expected 'inter' to be a list of distinct field names",
            r"got \['user_id', 'item_id', 'item_id'",
        ],
    ),
    (
        "eval-args-unknown-key",
        "Pop",
        None,
        ["--eval_args={'groupby': 'user'}"],
        None,
        [
            r"--eval_args: expected keys among split, group_by, order, mode; got 'groupby'",
            r"did you mean 'group_by'\?",
        ],
    ),
    (
        "interval-malformed",
        "Pop",
        None,
        ["--user_inter_num_interval=abc"],
        None,
        [r"--user_inter_num_interval: expected an interval like '\[5,inf\)'", r"got 'abc'\."],
    ),
    (
        "embedding-size-zero",
        "BPR",
        None,
        ["--embedding_size=0"],
        None,
        [r"--embedding_size: expected a positive integer; got 0"],
    ),
    (
        "model-named-in-config-file",
        "FBSM",
        None,
        [],
        {"model": "BPR"},
        [r"config file .*toy\.yaml sets model: BPR, but this run's model is 'FBSM' \(--model\)", r"--model=BPR"],
    ),
    (
        "encoding-unknown",
        "Pop",
        None,
        ["--encoding=utf9"],
        None,
        [r"--encoding: expected the name of a text encoding Python knows", r"got 'utf9'"],
    ),
    (
        "identity-features-item-scenario",
        "FBSM",
        None,
        ["--identity_features=True"],
        None,
        [
            r"identity_features: True needs cold_start_scenario: hybrid "
            r"\(in the item scenario no candidate is a training item"
        ],
    ),
    (
        "identity-features-not-fbsm",
        "UFSM",
        None,
        ["--cold_start_scenario=hybrid", "--identity_features=True"],
        None,
        [r"identity_features: True is for FBSM .*; model UFSM would ignore them\."],
    ),
    (
        "hybrid-with-user-grouping",
        "Pop",
        None,
        ["--cold_start_scenario=hybrid", "--eval_args={'group_by': 'user', 'split': {'RS': [0.8, 0.1, 0.1]}}"],
        None,
        [
            r"cold_start_scenario: hybrid splits items itself \(eval_args.group_by: item\); "
            r"got eval_args.group_by: user\."
        ],
    ),
    (
        "hybrid-cold-ratio-one",
        "Pop",
        None,
        ["--cold_start_scenario=hybrid", "--hybrid_cold_ratio=1"],
        None,
        [r"--hybrid_cold_ratio: expected a number from 0 to 1 \(exclusive\); got 1\."],
    ),
    (
        "hybrid-warm-split-sum",
        "Pop",
        None,
        ["--hybrid_warm_split=[0.8, 0.1, 0.3]"],
        None,
        [r"--hybrid_warm_split: expected three positive ratios \[train, valid, test\] that sum to 1"],
    ),
    (
        "blend-in-item-scenario",
        "HybridBlend",
        None,
        [],
        None,
        [
            r"model HybridBlend blends a warm model with a content model over warm and cold items: it needs "
            r"cold_start_scenario: hybrid\."
        ],
    ),
    (
        "stop-words-typo",
        "CoSim",
        None,
        ["--stop_words=enlgish"],
        None,
        [r"--stop_words: expected english or a list of words such as \[the, of\] \(or ~\); got 'enlgish'\.$"],
    ),
    (
        "blend-content-model-warm-only",
        "HybridBlend",
        None,
        ["--cold_start_scenario=hybrid", "--content_model=BPR"],
        None,
        [r"content_model: BPR knows warm items only", r"expected a model that reads item features"],
    ),
    (
        "blend-part-is-a-blend",
        "HybridBlend",
        None,
        ["--cold_start_scenario=hybrid", "--warm_model=HybridBlend"],
        None,
        [r"warm_model: HybridBlend cannot be a part of itself"],
    ),
]

FILE_CASES = [
    (
        "header-without-type",
        "Pop",
        lambda d: header(d.inter_path, "user_id\titem_id:token\trating:float"),
        [],
        [r"toy\.inter line 1", r"'user_id'", r"expected name:type"],
    ),
    (
        "header-unknown-type",
        "Pop",
        lambda d: header(d.inter_path, "user_id:token\titem_id:token\trating:number"),
        [],
        [r"toy\.inter line 1", r"'rating' has type 'number'", r"token, token_seq, float, float_seq"],
    ),
    (
        "header-duplicate-column",
        "Pop",
        lambda d: header(d.item_path, "item_id:token\tgenre:token_seq\tgenre:token_seq"),
        [],
        [r"toy\.item line 1", r"'genre' appears twice"],
    ),
    ("empty-inter-file", "Pop", lambda d: d.inter_path.write_text(""), [], [r"toy\.inter", r"empty", r"header"]),
    (
        "inter-header-only",
        "Pop",
        lambda d: d.inter_path.write_text("user_id:token\titem_id:token\trating:float\n"),
        [],
        [r"toy\.inter", r"no interactions"],
    ),
    (
        "row-too-few-columns",
        "Pop",
        lambda d: rewrite(d.inter_path, lambda r: r.__setitem__(5, "u001\tm000001")),
        [],
        [r"toy\.inter line 6", r"2 column\(s\), expected 3"],
    ),
    (
        "row-too-many-columns",
        "Pop",
        lambda d: rewrite(d.inter_path, lambda r: r.__setitem__(7, r[7] + "\t5")),
        [],
        [r"toy\.inter line 8", r"4 column\(s\), expected 3"],
    ),
    (
        "rating-not-a-number",
        "Pop",
        lambda d: set_cell(d.inter_path, 3, 2, "abc"),
        [],
        [r"toy\.inter", r"'rating'", r"line 4: 'abc'", r"expected a number"],
    ),
    (
        "rating-empty",
        "Pop",
        lambda d: set_cell(d.inter_path, 9, 2, ""),
        [],
        [r"toy\.inter", r"'rating' is empty on 1 line", r"line 10", r"column mean"],
    ),
    ("rating-nan", "Pop", lambda d: set_cell(d.inter_path, 2, 2, "nan"), [], [r"'rating'", r"line 3: 'nan'"]),
    ("rating-infinite", "Pop", lambda d: set_cell(d.inter_path, 2, 2, "inf"), [], [r"'rating'", r"line 3: 'inf'"]),
    (
        "duplicate-item-id",
        "Pop",
        lambda d: rewrite(d.item_path, lambda r: r.__setitem__(4, r[2].split("\t")[0] + "\tg1\tw1")),
        [],
        [r"toy\.item", r"item_id '.*' is on 2 lines", r"line 3, line 5"],
    ),
    (
        "empty-user-id",
        "Pop",
        lambda d: set_cell(d.inter_path, 6, 0, ""),
        [],
        [r"toy\.inter", r"'user_id' is empty", r"line 7"],
    ),
    (
        "not-utf8",
        "Pop",
        lambda d: d.item_path.write_bytes(d.item_path.read_bytes().replace(b"w1", b"w\xff", 1)),
        [],
        [r"toy\.item line \d+", r"not utf-8 text", r"0xff"],
    ),
    (
        "field-starting-with-quote",
        "Pop",
        lambda d: rewrite(d.item_path, lambda r: r.__setitem__(3, r[3].replace("\t", '\t"', 1))),
        [],
        [r"toy\.item: 63 data lines, but ", r"double quote", r"first at line 4"],
    ),
    (
        "byte-order-mark",
        "Pop",
        lambda d: d.inter_path.write_bytes(b"\xef\xbb\xbf" + d.inter_path.read_bytes()),
        [],
        [r"toy\.inter line 1", r"byte order mark"],
    ),
    ("threshold-missing-column", "Pop", None, ["--threshold={'score': 4}"], [r"threshold", r"'score'", r"toy\.inter"]),
    (
        "threshold-token-column",
        "Pop",
        None,
        ["--threshold={'user_id': 4}"],
        [r"threshold", r"'user_id'", r"expected a float column"],
    ),
    (
        "no-item-row-matches",
        "Pop",
        lambda d: drop_item_rows(d, lambda r: False),
        [],
        [r"no item of .*toy\.inter has a row in .*toy\.item", r"dropped"],
    ),
    ("no-features-at-all", "FBSM", empty_features, [], [r"toy\.item", r"empty for every item", r"FBSM"]),
    (
        "no-features-neural-model",
        "DropoutNet",
        empty_features,
        [],
        [r"toy\.item", r"empty for every item", r"for DropoutNet, which scores items by them"],
    ),
    (
        "too-few-items-for-topk",
        "Pop",
        "tiny",
        [],
        [r"has \d item\(s\), not more than the largest topk \(10\)", r"Recall@10 = 1\.0"],
    ),
    (
        "float-seq-not-numbers",
        "Pop",
        lambda d: add_float_seq(d, bad=True),
        ["--load_col={'inter': ['user_id', 'item_id', 'rating'], 'item': ['item_id', 'genre', 'vec']}"],
        [r"toy\.item", r"'vec' \(float_seq\)", r"line 5: 'oops'"],
    ),
    (
        "user-id-column-missing",
        "Pop",
        lambda d: header(d.inter_path, "uid:token\titem_id:token\trating:float"),
        [],
        [r"load_col|toy\.inter", r"'user_id'"],
    ),
    (
        "user-id-not-token",
        "Pop",
        lambda d: header(d.inter_path, "user_id:float\titem_id:token\trating:float"),
        [],
        [r"toy\.inter", r"'user_id'", r"expected token"],
    ),
    ("missing-dataset-folder", "Pop", "nowhere", [], [r"'nowhere'", r"not found"]),
    (
        "seq-len-unknown-field",
        "FBSM",
        None,
        ["--seq_len={'wrds': 2}"],
        [
            r"seq_len names \['wrds'\], not a loaded token_seq or float_seq column \(loaded: \['genre', 'words'\]\)",
            r"did you mean 'words'\?",
        ],
    ),
    (
        "item-id-not-loaded",
        "Pop",
        None,
        ["--load_col={'inter': ['user_id', 'item_id', 'rating'], 'item': ['genre', 'words']}"],
        [r"load_col\.item \['genre', 'words'\] lacks 'item_id' \(ITEM_ID_FIELD\); the item rows are joined"],
    ),
    (
        "item-id-unloaded",
        "Pop",
        None,
        ["--load_col=None", "--unload_col={'item': ['item_id']}"],
        [r"unload_col\.item names 'item_id' \(ITEM_ID_FIELD\)", r"keep it loaded"],
    ),
]

WARNING_CASES = [
    (
        "items-without-item-row",
        lambda d: drop_item_rows(d, lambda r: hash(r) % 5 != 0 and r[1:3] != "00"),
        [
            r"\d+ item\(s\) of .*toy\.inter",
            r"no row in .*toy\.item",
            r"\d+ interaction\(s\) of \d+ \(\d+\.\d%\) are dropped",
        ],
    ),
    (
        "item-feature-value-missing",
        lambda d: add_price(d),
        [r"toy\.item: column 'price' is empty on 1 line\(s\) \(line 3\)", r"column mean"],
    ),
    (
        "id-with-spaces-around",
        spaces_around_ids,
        [
            r"toy\.inter: 2 line\(s\) have a user_id with spaces around it \(line 4: 'u000 ', line 6: ' u000'\)",
            r"'u000 ' is not 'u000'\): remove the spaces",
        ],
    ),
]


def config_file(root, model, settings):
    path = root / "toy.yaml"
    base = {
        "data_path": str(root),
        "epochs": 1,
        "state": "ERROR",
        "load_col": {"inter": ["user_id", "item_id", "rating"], "item": ["item_id", "genre", "words"]},
        "threshold": {"rating": 4},
    }
    if isinstance(settings, str):
        path.write_text(settings)
        return path
    base.update(settings or {})
    path.write_text(yaml.safe_dump(base))
    return path


def argv_for(tmp_path, model, edit, extra, settings=None):
    dataset = "toy"
    if edit == "nowhere":
        dataset = "nowhere"
        write_dataset(tmp_path, "toy")
    elif edit == "tiny":
        write_dataset(tmp_path, "toy", n_items=5, n_items_without_inter=0, n_users=8, likes_per_user=(1, 3))
    else:
        data = write_dataset(tmp_path, "toy")
        if edit is not None:
            edit(data)
    files = [str(config_file(tmp_path, model, settings if settings is not None else {}))]
    if settings is not None and not isinstance(settings, dict):
        files.insert(0, str(config_file_path_base(tmp_path)))
    return [f"--model={model}", f"--dataset={dataset}", f"--config_files={' '.join(files)}", *extra]


def config_file_path_base(root):
    path = root / "base.yaml"
    path.write_text(yaml.safe_dump({"data_path": str(root), "epochs": 1, "state": "ERROR"}))
    return path


def single_error(capsys, argv):
    code = run_recbole.main(argv)  # an escaping exception would be a traceback: the test fails on it
    out, err = capsys.readouterr()
    assert code == 2, f"exit code {code}; stderr: {err[-2000:]}"
    assert "Traceback" not in err + out
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, err
    return errors[0]


def assert_no_log_left(folder):
    logs = list(Path(folder).glob("log/**/*.log"))
    assert not logs, f"a failed run left {logs}"


@pytest.mark.parametrize("case", SETTING_CASES, ids=[c[0] for c in SETTING_CASES])
def test_bad_setting_is_one_error_line(tmp_path, capsys, case):
    _, model, edit, extra, settings, expected = case
    message = single_error(capsys, argv_for(tmp_path, model, edit, extra, settings))
    for pattern in expected:
        assert re.search(pattern, message), f"{pattern!r} not in {message!r}"
    assert_no_log_left(tmp_path)


@pytest.mark.parametrize("case", FILE_CASES, ids=[c[0] for c in FILE_CASES])
def test_bad_atomic_file_is_one_error_line(tmp_path, capsys, case):
    _, model, edit, extra, expected = case
    message = single_error(capsys, argv_for(tmp_path, model, edit, extra))
    for pattern in expected:
        assert re.search(pattern, message), f"{pattern!r} not in {message!r}"
    assert_no_log_left(tmp_path)


@pytest.mark.parametrize("case", WARNING_CASES, ids=[c[0] for c in WARNING_CASES])
def test_doubtful_atomic_file_is_a_warning_with_counts(tmp_path, case):
    _, edit, expected = case
    data = write_dataset(tmp_path, "toy")
    edit(data)
    settings = {"load_col": None} if case[0] == "item-feature-value-missing" else {}
    config = ColdStartConfig(model="Pop", dataset="toy", config_file_list=[str(config_file(tmp_path, "Pop", settings))])
    warnings = check_dataset_files(config).warnings
    assert len(warnings) == 1, warnings
    for pattern in expected:
        assert re.search(pattern, warnings[0]), f"{pattern!r} not in {warnings[0]!r}"


def test_windows_line_ends_are_line_ends(tmp_path):
    """\\r\\n line ends (a file saved on Windows) are read as \\n ones: no error, no warning."""
    data = write_dataset(tmp_path, "toy")
    for path in (data.inter_path, data.item_path):
        path.write_bytes(path.read_bytes().replace(b"\n", b"\r\n"))
    config = ColdStartConfig(model="FBSM", dataset="toy", config_file_list=[str(config_file(tmp_path, "FBSM", {}))])
    assert check_dataset_files(config, reads_own_features=True).warnings == []


def test_items_without_item_rows_warn_with_the_count_of_lost_interactions(tmp_path):
    """ml-100k-like: a fifth of the items lose their .item row; RecBole drops their interactions."""
    data = write_dataset(tmp_path, "toy")
    gone = set(sorted(data.interacted_items)[::5])
    drop_item_rows(data, lambda row: row.split("\t")[0] not in gone)
    config = ColdStartConfig(model="Pop", dataset="toy", config_file_list=[str(config_file(tmp_path, "Pop", {}))])
    (warning,) = check_dataset_files(config).warnings
    lost = sum(1 for _, item, _ in data.rows if item in gone)
    assert f"{len(gone)} item(s)" in warning and f"their {lost} interaction(s) of {len(data.rows)}" in warning


def test_every_case_is_listed_in_docs_errors_md():
    text = ERRORS_DOC.read_text(encoding="utf-8")
    cases = [c[0] for c in SETTING_CASES + FILE_CASES + WARNING_CASES]
    assert len(set(cases)) == len(cases) >= 30
    missing = [case for case in cases if f"`{case}`" not in text]
    assert not missing, f"docs/errors.md lacks {missing}"


def test_real_command_line_errors_fail_fast_and_leave_nothing(tmp_path):
    """Through a real process: a typo in a setting, a bad file and a split error (found after the data was
    loaded): exit code 2, one error line, no traceback, no log file."""
    write_dataset(tmp_path, "toy")
    config = config_file(tmp_path, "Pop", {})
    set_cell(tmp_path / "toy" / "toy.inter", 3, 2, "abc")
    cases = [
        (["--model=FBSM", "--rnak=10"], "did you mean 'rank'"),
        (["--model=Pop", "--dataset=toy", f"--config_files={config}"], "'abc'"),
    ]
    for argv, expected in cases:
        code, out, err = run_cli(argv, tmp_path)
        assert code == 2 and "Traceback" not in err, err[-3000:]
        errors = [line for line in err.splitlines() if line.startswith("error:")]
        assert len(errors) == 1 and expected in errors[0], err[-3000:]
    assert_no_log_left(tmp_path)


def test_an_error_found_after_loading_leaves_no_log(tmp_path, capsys):
    """The split is made after the data is loaded and the log has started: its error removes the log."""
    write_dataset(tmp_path, "toy", n_items=60)
    argv = [
        "--model=Pop",
        "--dataset=toy",
        f"--config_files={config_file(tmp_path, 'Pop', {})}",
        "--eval_args={'split': {'RS': [0.99, 0.005, 0.005]}}",
    ]
    message = single_error(capsys, argv)
    assert "too small to split" in message
    assert_no_log_left(tmp_path)


# ------------------------------------------------------------------------------- read correctly
# every string pandas reads as missing by default, but ''
NA_LIKE = sorted(STR_NA_VALUES - {""})


def rename_tokens(data, users, items):
    """Rename users and items in both files (whole cells only) and add the item names as feature words."""

    def edit(rows):
        for k in range(1, len(rows)):
            if rows[k]:
                cells = rows[k].split("\t")
                cells = [users.get(cells[0], cells[0]), items.get(cells[1], cells[1])] + cells[2:]
                rows[k] = "\t".join(cells)

    rewrite(data.inter_path, edit)

    def edit_items(rows):
        for k in range(1, len(rows)):
            if rows[k]:
                item, genre, words = rows[k].split("\t")
                rows[k] = "\t".join([items.get(item, item), genre, words + " NA null"])

    rewrite(data.item_path, edit_items)


def test_ids_pandas_reads_as_missing_are_ids(tmp_path, capsys):
    """Users and items called NA, null, nan, None, N/A, ... (RecBole's reader took them for missing and dropped
    their lines; a previous version refused them) are read as those ids, and a model trains."""
    from recbole_fbsm.quick_start import prepare

    data = write_dataset(tmp_path, "toy")
    users = {f"u{k:03d}": name for k, name in enumerate(NA_LIKE)}
    items = dict(zip(sorted(data.interacted_items)[:6], ["NA", "null", "nan", "None", "N/A", "NULL"]))
    rename_tokens(data, users, items)
    rows = [line.split("\t") for line in lines(data.inter_path)[1:] if line]
    likes = sum(float(rating) >= 4 for _, _, rating in rows)
    file_items = {line.split("\t")[0] for line in lines(data.item_path)[1:] if line}
    config_files = f"--config_files={config_file(tmp_path, 'FBSM', {})}"
    assert run_recbole.main(["--model=FBSM", "--dataset=toy", config_files]) == 0, capsys.readouterr().err[-2000:]
    assert "test result" in capsys.readouterr().out

    _, _, (train, valid, test) = prepare("FBSM", "toy", config_file_list=[str(tmp_path / "toy.yaml")])
    dataset = train.dataset
    user_tokens = dataset.field2id_token["user_id"][1:].tolist()
    item_tokens = dataset.field2id_token["item_id"][1:].tolist()
    assert sorted(user_tokens) == sorted({user for user, _, _ in rows})
    assert set(NA_LIKE) <= set(user_tokens)
    assert sorted(item_tokens) == sorted(file_items) and set(items.values()) <= set(item_tokens)
    assert sum(len(part.dataset.inter_feat) for part in (train, valid, test)) == likes
    words = dataset.field2id_token["words"].tolist()
    assert "NA" in words and "null" in words
    row = item_token_ids(dataset, "words", dataset.token2id("item_id", "NA"))
    assert {"NA", "null"} <= {words[t] for t in row.tolist() if t}


# ------------------------------------------------------------------------------- further cases
def test_a_setting_given_twice_on_the_command_line_is_refused(tmp_path, capsys):
    """argparse and RecBole took the last of '--epochs=3 --epochs=1' without a word."""
    write_dataset(tmp_path, "toy")
    with pytest.raises(SystemExit) as stop:
        run_recbole.main(["--model=Pop", "--dataset=toy", f"--data_path={tmp_path}", "--epochs=3", "--epochs=1"])
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert (
        err.strip()
        .splitlines()[-1]
        .endswith("error: --epochs is given twice (--epochs=3 and --epochs=1); expected it once")
    )
    assert_no_log_left(tmp_path)
