"""The one argparse table of the command line: every command, sub-command and option of ``recbole-fbsm``, and
``parser(command, prog)`` that builds a command's parser from it (no torch, RecBole or pandas: ``--help`` and a
usage error answer at once)."""

import argparse
from collections import namedtuple

from recbole_fbsm.config.checks import SEED_MAX
from recbole_fbsm.config.conversion import CTR_FILES, CTR_TAG_FILES, PAPER_MAX_DF, TAG_SEP
from recbole_fbsm.config.datasets import DATASETS
from recbole_fbsm.config.paths import LOCAL_PROPERTIES_DIR

MAX_LIST_LENGTH = 1_000_000  # the longest list and cut-off: longer lists are not for a terminal or a CSV file
# commands that take RecBole settings as --key=value (no abbreviations: --seed=7 is not --seeds) and train with
# torch_threads: auto (runtime.threads), so OpenMP's threads should sleep while they wait
TRAINING_COMMANDS = ("run", "compare", "hyper")
DEFAULT_MODELS = ["FBSM", "UFSM", "ItemKNNCBF", "CoSim", "FM", "DeepFM", "WideDeep", "BPR", "Pop", "Random"]
DEFAULT_SEEDS = [2020, 2021, 2022]
ALGOS = {"grid": "grid", "exhaustive": "grid", "tpe": "tpe", "bayes": "tpe", "random": "random"}  # --algo: sampler


# about: its line in the list of commands; options: [(flags, add_argument's keywords)]; description (default: about),
# epilog; sub: its sub-commands (serve's, convert's), name -> Command
Command = namedtuple("Command", "about options description epilog sub", defaults=(None, None, None))


def bounded(what, low, high=None, number=int):
    """An argparse type: a ``number`` from ``low`` to ``high`` (None: no upper bound), its error naming ``what``."""
    kind = "an integer" if number is int else "a number"
    allowed = f"{kind} from {low} to {high}" if high is not None else f"{kind} of at least {low}"

    def parse(text):
        try:
            value = number(text)
        except ValueError:
            value = None
        if value is None or not low <= value <= (value if high is None else high):  # NaN fails the comparison
            raise argparse.ArgumentTypeError(f"expected {what}, {allowed}; got {text}")
        return value

    return parse


def separator(value):
    """A one-character separator; '\\t' and 'tab', as typed in a shell, are a tab."""
    value = {"\\t": "\t", "tab": "\t", "TAB": "\t"}.get(value, value)
    if len(value) != 1:
        raise argparse.ArgumentTypeError(f"expected a single character, got {value!r}")
    return value


def option(*flags, **keywords):
    return flags, keywords


# ------------------------------------------------------------------------------------------ run, models
RUN_DESCRIPTION = """Train and test one model: ``recbole-fbsm run --model=FBSM --dataset=ml-100k [--config_files="a.yaml
b.yaml"] [--key=value ...]`` (``python run_recbole.py ...``). Any RecBole setting can be given as ``--key=value``;
the model, the config files and every setting are checked before torch and RecBole are imported.

Data-parallel training with RecBole's flags: ``--nproc=2`` on this machine; over machines ``--world_size=W
--ip=HOST_OF_RANK_0 --port=P --nproc=N --group_offset=K`` (K: the machine's first rank). See docs/distributed.md."""
RUN = [
    option("--model", "-m", default="FBSM", help="model name (plugin models first, then RecBole's)"),
    option("--dataset", "-d", default="ml-100k", help="dataset name"),
    option("--config_files", default=None, help="space-separated yaml files"),
    option("--nproc", type=int, default=1, help="processes on this machine (data-parallel)"),
    option("--world_size", type=int, default=-1, help="processes on all machines (default: nproc)"),
    option("--ip", default="localhost", help="address of the machine of rank 0"),
    option("--port", default=None, help="its port (default: a free one on one machine, 5678 on several)"),
    option("--group_offset", type=int, default=0, help="rank of this machine's first process"),
]

# ---------------------------------------------------------------------------------------- compare, hyper
COMPARE_EPILOG = """examples:
  recbole-fbsm compare --dataset=ml-100k
  recbole-fbsm compare --dataset=ml-100k --models FBSM CoSim Pop --seeds 2020 2021 --results results/x
  recbole-fbsm compare --dataset=ml-100k --results results/x --epochs=30 --metrics="['Recall','NDCG','Rec','DCG']"

Every other RecBole setting is given as --key=value and passed to every model (seed and split_seed
are set per split by --seeds). Quiet defaults: state=WARNING, show_progress=False; checkpoints go to
RESULTS/saved. Writes RESULTS/MODEL-SEED.json for every (model, seed), RESULTS/table.md (mean +- std
over the splits of every test metric, the validation score and the wall seconds of each run) and
RESULTS/chart.png (mean test Recall@10 and NDCG@10 with std error bars). To resume an interrupted
comparison, run the same command with the same --results: finished pairs with the same dataset,
config files and overrides are not run again (failed ones are retried).

Exit status: 0 when every run succeeded, 1 when some run failed (it is in the table), 2 for a usage
error, an unknown model, or a dataset/setting error raised by the first run."""
COMPARE = [
    option("--dataset", "-d", default="ml-100k", help="dataset name (default: %(default)s)"),
    option(
        "--models",
        "-m",
        nargs="+",
        default=list(DEFAULT_MODELS),
        metavar="MODEL",
        help=f"models to compare (default: {' '.join(DEFAULT_MODELS)})",
    ),
    option(
        "--seeds",
        nargs="+",
        type=int,
        default=list(DEFAULT_SEEDS),
        metavar="SEED",
        help="one item split per seed, used as both seed and split_seed "
        f"(default: {' '.join(map(str, DEFAULT_SEEDS))})",
    ),
    option(
        "--results",
        default=None,
        metavar="DIR",
        help="results folder (default: results/DATASET-TIMESTAMP); pass an existing one to resume",
    ),
    option("--config_files", default=None, help="space-separated yaml files, used by every model"),
]
HYPER = [
    option("--model", "-m", required=True),
    option("--dataset", "-d", default="ml-100k"),
    option("--config_files", default=None, help="space-separated yaml files, used by every trial"),
    option(
        "--params_file",
        default=None,
        help="RecBole params file (NAME choice|uniform|loguniform|quniform RANGE per line) or a yaml "
        "grid (default: properties/grids/MODEL.hyper, else MODEL.yaml)",
    ),
    option("--output_file", default=None, help="RecBole's result file (default: STUDY_NAME.result)"),
    option(
        "--algo",
        choices=sorted(ALGOS),
        default=None,
        help="grid (every parameter a choice; the default then), tpe (the default otherwise) or random",
    ),
    option(
        "--max_evals",
        type=bounded("finished trials", 1),
        default=None,
        help="finished trials the study should hold (default: the grid's size, or 100)",
    ),
    option("--seeds", nargs="+", type=int, default=[2020], help="split seeds (default: 2020)"),
    option("--storage", default="sqlite:///tune.db", help="Optuna database URL (default: %(default)s)"),
    option("--study_name", default=None, help="default: MODEL-DATASET-<hash of the search's settings>"),
    option(
        "--pruner",
        choices=["median", "none"],
        default="median",
        help="stop trials whose validation curve is below the median of finished ones (default)",
    ),
    option(
        "--write",
        action="store_true",
        help="write the best values to ./properties/dataset/DATASET/MODEL.yaml, which runs started in "
        "this folder load (nothing on a tie; never inside an installed package)",
    ),
    option(
        "--properties-dir",
        default=str(LOCAL_PROPERTIES_DIR),
        metavar="DIR",
        help="folder --write writes DIR/dataset/DATASET/MODEL.yaml into (default: %(default)s)",
    ),
]

# -------------------------------------------------------------------------------------- download, convert
DOWNLOAD_EPILOG = """examples:
  recbole-fbsm download citeulike-t
  recbole-fbsm download citeulike-tags --out data/
  recbole-fbsm download citeulike-t --mirror http://files.example.org/citeulike-t/

Every file is checked against its size and SHA-256 before it is converted (docs/datasets.md). The files
arrive in OUT/.NAME.download/; a failed or interrupted run leaves nothing under OUT/NAME, ends with one
'error: ...' line (exit status 2), and the same command resumes it."""
OUT = option("--out", default="dataset", help="folder that receives NAME/ (default: %(default)s, RecBole's data_path)")
OVERWRITE = option("--overwrite", action="store_true", help="replace an existing OUT/NAME dataset folder")
DOWNLOAD = [
    option("name", metavar="NAME", help="dataset to download: " + ", ".join(DATASETS)),
    OUT,
    option(
        "--mirror",
        metavar="URL",
        help="base URL serving the same file names (default: the dataset's public repository)",
    ),
    OVERWRITE,
    option(
        "--timeout",
        type=bounded("seconds", 0.001, 86400, float),  # 0 would make the socket non-blocking; inf overflows it
        default=30.0,
        help="seconds a connection or a read may wait (default: %(default)s)",
    ),
]
CONVERT_EPILOG = """examples:
  recbole-fbsm convert ctr --src ../shared/datasets/citeulike-t --name citeulike-t --out dataset/
  recbole-fbsm convert ctr --src ../shared/datasets/citeulike-t --tags --name citeulike-t-tags --out dataset/
  recbole-fbsm convert text --inter ratings.csv --items books.csv --threshold 3 --header \\
      --name amazon-books --out dataset/

Writes OUT/NAME/NAME.inter, OUT/NAME/NAME.item (words:token_seq, a term repeated once per occurrence)
(with tags: a second field tags:token_seq, each tag one token kept whole)
OUT/NAME/README.txt and OUT/NAME/NAME.analyzer.json (how text became tokens, for serving raw text);
skipped input is counted in the summary. Exit status 2 with 'error: ...' when no usable dataset can be
written (nothing is written then)."""
CONVERT_OUTPUT = [  # both converters' output and feature options
    option("--name", required=True, help="dataset name: folder and file stem of the output"),
    OUT,
    option(
        "--min-df",
        type=bounded("a number of items", 0),
        default=None,
        help="drop terms found in fewer items than this (default: the paper's 20 scaled to the data, "
        "items x 20 / 25,000 within [2, 20]: 20 for citeulike-t, 2 for fewer than 3,125 items)",
    ),
    option(
        "--max-df",
        type=bounded("a fraction of items", 0, 1, float),
        default=PAPER_MAX_DF,
        help="drop terms found in more than this fraction of items (default: %(default)s)",
    ),
    option(
        "--no-stem", dest="stem", action="store_false", help="keep words unstemmed (default: Snowball english stems)"
    ),
    option("--no-stopwords", dest="stopwords", action="store_false", help="keep English stop words"),
    OVERWRITE,
    option(
        "--tags-min-df",
        type=bounded("a number of items", 0),
        help="drop tags found in fewer items than this (default: --min-df)",
    ),
    option(
        "--tags-max-df",
        type=bounded("a fraction of items", 0, 1, float),
        help="drop tags found in more than this fraction of items (default: --max-df)",
    ),
]
CTR = [
    option("--src", help="folder holding " + ", ".join(CTR_FILES.values()) + " (or give each file)"),
    *[option(f"--{key}", help=f"{file} (default: SRC/{file})") for key, file in CTR_FILES.items()],
    option(
        "--tags",
        action="store_true",
        dest="with_tags",
        help="also read " + " and ".join(CTR_TAG_FILES.values()) + " from SRC: a second field 'tags', each tag "
        "one token kept whole",
    ),
    *[
        option(f"--{key.replace('_', '-')}", dest=key, help=f"{file} (default: SRC/{file} with --tags)")
        for key, file in CTR_TAG_FILES.items()
    ],
    *CONVERT_OUTPUT,
]
TEXT = [
    option("--inter", required=True, help="interactions: user, item[, rating] per line (more columns ignored)"),
    option("--items", required=True, help="item texts: item, text per line (CSV quoting honoured)"),
    option(
        "--sep",
        type=separator,
        help="field separator for both files (default: tab for .tsv/.tab, comma otherwise); '\\t' or 'tab' for tab",
    ),
    option("--header", action="store_true", help="skip the first line of both files"),
    option(
        "--threshold",
        type=bounded("a finite rating", -1e308, 1e308, float),
        help="rating >= THRESHOLD is a like (label 1), lower a dislike (label 0); "
        "without it no label column is written and every line is a like",
    ),
    option(
        "--tags",
        help="optional: item, tag[, tag ...] per line (an item may have several lines); written "
        "as a second field 'tags', each tag one token kept whole (lower case, not stemmed)",
    ),
    option(
        "--tag-sep",
        type=separator,
        default=TAG_SEP,
        help="separator of several tags inside one field of --tags (default: %(default)s)",
    ),
    *CONVERT_OUTPUT,
]

# ------------------------------------------------------------------------------------------------- serve
SERVE_DESCRIPTION = """\
Serve a trained model (FBSM, UFSM, CoSim, ItemKNNCBF, DropoutNet, Heater, ALDI) on brand-new items.

  recbole-fbsm serve recommend MODEL NEW_ITEMS --item-output top_users.csv --user-output top_items.json
  recbole-fbsm serve explain MODEL --user 196 --item new_1 --new-items NEW_ITEMS
  recbole-fbsm serve interactions MODEL --top 20 --min-items 2 --output interactions.csv
  recbole-fbsm serve compare-users MODEL_A MODEL_B --output groups.csv --per-user users.csv
  recbole-fbsm serve http MODEL --port 8000 [--new-items NEW_ITEMS] [--store FILE] [--token T] [--workers N]
  recbole-fbsm serve export CHECKPOINT -o MODEL.fbsm
  recbole-fbsm serve export-likes MODEL.fbsm.store.sqlite -o DIR

MODEL is the .fbsm artifact a training run writes (or its .pth checkpoint, whose dataset is then read).
NEW_ITEMS is an .item file in the training .item file's format, or a CSV/TSV file of raw text (a header line:
the item id column, one text column per feature field). Outputs are CSV or JSON (the file extension or
--format; stdout without an output file). Mistakes print 'error: ...' and exit with 2; see docs/serve.md."""
SERVE_EPILOG = "See docs/serve.md for examples and the meaning of every column."
MODEL_FILE = "model artifact (.fbsm) or checkpoint (.pth)"
TABLE_OUTPUT = option("--output", "-o", help="output file (.csv or .json; default: stdout)")
RAW_TEXT = option(
    "--raw-text", action="store_true", help="the .item file's cells are raw text: analyse them as the converter did"
)
# every sub-command that reads a model on a torch device; SCORING: those that also write CSV or JSON
LOADING = [
    option("--device", default="cpu", help="torch device to score on (default: %(default)s)"),
    option("--data-path", help="for a checkpoint (.pth): the folder of its dataset's folder, if moved"),
]
SCORING = [
    *LOADING,
    option(
        "--format", choices=("csv", "json"), help="output format (default: the output file's extension; CSV on stdout)"
    ),
]


def top(default, about):
    return option("--top", "-n", type=bounded("entries per list", 1, MAX_LIST_LENGTH), default=default, help=about)


SERVE = {
    "recommend": Command(
        "top users for each new item, and top new items for users",
        [
            option(
                "checkpoint",
                metavar="model",
                help=f"{MODEL_FILE} of FBSM, UFSM, CoSim, ItemKNNCBF, DropoutNet, Heater or ALDI",
            ),
            *SCORING,
            option(
                "new_items",
                help=".item file of new items (same feature fields as training, new ids), or a CSV/TSV file of their "
                "raw text",
            ),
            RAW_TEXT,
            top(10, "entries per list (default: %(default)s)"),
            option("--item-output", help="file for (a): item_id, rank, user_id, score"),
            option("--user-output", help="file for (b): user_id, rank, item_id, score"),
            option("--users", nargs="+", metavar="USER", help="user ids for (b) (default: all with likes)"),
            option(
                "--seed",
                type=bounded("the seed of the tie breaking", 0, SEED_MAX),
                help="seed of the random tie breaking (default: the checkpoint's seed)",
            ),
        ],
        "Score brand-new items with a trained model: (a) for each new item the top-N users to show it to, (b) for "
        "the given users (default: all with training likes) the top-N new items. Unknown feature tokens are ignored "
        "and counted in a warning. Without --item-output / --user-output both go to stdout.",
        SERVE_EPILOG,
    ),
    "explain": Command(
        "break one (user, item) score into feature pairs and liked items",
        [
            option("checkpoint", metavar="model", help=f"{MODEL_FILE} of FBSM, UFSM or CoSim"),
            *SCORING,
            TABLE_OUTPUT,
            option("--user", required=True, help="user id (as in the .inter file)"),
            option("--item", required=True, help="item id: a dataset item, or a new item of --new-items"),
            option("--new-items", help=".item file (or CSV/TSV file of raw text) holding the new item"),
            RAW_TEXT,
            top(10, "entries shown per part and for items; the rest is summed in one line (default: %(default)s)"),
        ],
        "Explain score(user, item) by the contributions of feature pairs (diagonal part; FBSM's low-rank part) and "
        "of the user's training likes; both add up to the model's score. The item is a dataset item or a new item of "
        "--new-items; a dataset item the user liked in training is scored without its own features.",
        SERVE_EPILOG,
    ),
    "interactions": Command(
        "FBSM's strongest learned feature interactions",
        [
            option("checkpoint", metavar="model", help=f"FBSM {MODEL_FILE}"),
            *SCORING,
            TABLE_OUTPUT,
            top(20, "entries per kind (default: %(default)s)"),
            option(
                "--min-items",
                type=bounded("training items per feature", 0, MAX_LIST_LENGTH),
                default=0,
                help="only features of at least this many training items (1: leave out the tokens training never "
                "touched; default: %(default)s)",
            ),
        ],
        "The largest and most negative off-diagonal entries v_p.v_q of FBSM's D + V V^T (p != q) and the largest and "
        "smallest self-weights D_p + ||v_p||^2, with feature names.",
        SERVE_EPILOG,
    ),
    "compare-users": Command(
        "users for whom model A is better, the same, or worse than B (test Recall@k)",
        [
            *SCORING,
            option("--output", "-o", help="file for the group table (.csv or .json; default: stdout)"),
            option("checkpoint_a", metavar="model_a", help="artifact (or checkpoint) of model A"),
            option("checkpoint_b", metavar="model_b", help="artifact (or checkpoint) of model B (same split)"),
            option(
                "--k",
                type=bounded("the Recall cut-off", 1, MAX_LIST_LENGTH),
                default=10,
                help="Recall@k cut-off (default: %(default)s)",
            ),
            option("--per-user", help="also write the per-user recalls and groups to this file"),
        ],
        "The paper's user-level investigation: per-user test Recall@k of two models of the same dataset and item "
        "split, users grouped into A better / same / worse, with counts, test items and likes per group.",
        SERVE_EPILOG,
    ),
    "http": Command(
        "an HTTP service that remembers: new items, likes, top-N lists of the whole catalogue (JSON)",
        [
            option("checkpoint", metavar="model", help=MODEL_FILE),
            *LOADING,
            option("--host", default="127.0.0.1", help="address (default: %(default)s; any other needs --token)"),
            option("--port", type=bounded("a TCP port", 0, 65535), default=8000, help="port (default: %(default)s)"),
            option("--new-items", help="new items to add to the store at start (.item file, or CSV/TSV of raw text)"),
            option(
                "--store",
                help="where new items and likes live: an SQLite file (default: MODEL.fbsm.store.sqlite beside the "
                "model) or a PostgreSQL URL postgresql://user@host/db (pip install 'recbole-fbsm[postgres]')",
            ),
            option(
                "--token",
                help="bearer token that POST and DELETE requests need (default: $RECBOLE_FBSM_TOKEN; none: loopback "
                "only)",
            ),
            option(
                "--max-body",
                type=bounded("a number of bytes", 1),
                default=8 << 20,
                help="largest request body in bytes (default: %(default)s)",
            ),
            option(
                "--workers",
                type=bounded("worker processes", 1, 64),
                default=1,
                help="worker processes behind the port, sharing the store (default: %(default)s)",
            ),
        ],
        "Serve the model over HTTP: new items (POST /items) and likes (POST /users/{user}/likes) count in the next "
        "answer; GET /users/{user}/items ranks the whole catalogue, GET /items/{item}/users finds a new item's users. "
        "They live in the store (--store); POST /admin/reload (or SIGHUP) swaps in a retrained artifact. Stop it "
        "with Ctrl-C.",
        "See docs/serve.md for the request and answer formats.",
    ),
    "export": Command(
        "make the model artifact (.fbsm) of a training checkpoint",
        [
            *LOADING,
            option("--output", "-o", help="the artifact to write (default: the checkpoint's name ending in .fbsm)"),
            option("checkpoint", help="training checkpoint (.pth)"),
        ],
        "Read a training checkpoint and its dataset once and write the model artifact that serves without them (a "
        "run writes it itself; this is for a checkpoint alone).",
        SERVE_EPILOG,
    ),
    "export-likes": Command(
        "write a store's likes and new items as RecBole atomic files, to retrain on",
        [
            option("store", help="the store: an SQLite file or a postgresql:// URL"),
            option("--output", "-o", required=True, help="folder to write NAME.inter and NAME.item into"),
            option(
                "--model",
                help="the artifact the items were served with (default: the store's name without .store.sqlite)",
            ),
        ],
        "Write the likes and new items a store holds as RecBole atomic files DIR/NAME.inter and DIR/NAME.item (NAME: "
        "the folder's name), to add to the dataset before retraining; the model (--model) gives the field names and "
        "analyses raw-text items as the converter did.",
        SERVE_EPILOG,
    ),
}

COMMANDS = {
    "run": Command(
        "train and test one model under the item cold-start protocol (run_recbole.py)", RUN, RUN_DESCRIPTION
    ),
    "compare": Command(
        "run several models over the same item splits: a table and a chart",
        COMPARE,
        "Run a list of models on one dataset over the same random item splits (one per seed)\n"
        "and write a markdown table and a PNG chart of the test metrics (docs/compare.md).",
        COMPARE_EPILOG,
    ),
    "hyper": Command(
        "search hyperparameters on validation, on an Optuna study (run_hyper.py)",
        HYPER,
        "Hyperparameter search on validation, the RecBole way (``run_hyper.py``), on an Optuna study.",
    ),
    "download": Command(
        "fetch a public dataset (citeulike-t), check its checksums, convert it",
        DOWNLOAD,
        "Download a public dataset, check every file's SHA-256, and write it as a RecBole dataset:\n"
        + "\n".join(f"  {name:<15} {dataset.about}" for name, dataset in DATASETS.items()),
        DOWNLOAD_EPILOG,
    ),
    "convert": Command(
        "write RecBole atomic files from CiteULike/CTR files or CSV + text",
        [],
        "Write RecBole .inter/.item files with item text as a token_seq field 'words',\n"
        "preprocessed as in the FBSM paper: stop words removed, words stemmed, terms found in fewer\n"
        "than --min-df items or in more than --max-df of the items dropped.",
        CONVERT_EPILOG,
        {
            "ctr": Command(
                "CTR/CDL format (users.dat, mult.dat, vocabulary.dat), e.g. citeulike-t",
                CTR,
                "Convert CTR/CDL-format files; every user-item pair is an implicit like.",
            ),
            "text": Command(
                "CSV/TSV interactions 'user,item[,rating]' and item texts 'item,text'",
                TEXT,
                "Convert CSV/TSV files; ratings are binarised with --threshold.",
            ),
        },
    ),
    "serve": Command(
        "score brand-new items with a trained model, explain scores", [], SERVE_DESCRIPTION, SERVE_EPILOG, SERVE
    ),
    "models": Command(
        "list every model a run accepts, with one line of what it is",
        [],
        "List every model `recbole-fbsm run --model=NAME` accepts: "
        "this plugin's, then RecBole's context-aware and general ones, one line each.",
    ),
}


def build(parser, command):
    """``parser`` given ``command``'s options and sub-commands (each with its own parser, built alike)."""
    for flags, keywords in command.options:
        parser.add_argument(*flags, **keywords)
    if command.sub:
        commands = parser.add_subparsers(dest="command", required=True, metavar="{" + ",".join(command.sub) + "}")
        for name, sub in command.sub.items():
            build(commands.add_parser(name, help=sub.about, description=sub.description, epilog=sub.epilog), sub)
    return parser


def parser(command, prog):
    """The argparse parser of ``command`` (a key of COMMANDS) called ``prog``."""
    spec = COMMANDS[command]
    return build(
        argparse.ArgumentParser(
            prog=prog,
            description=spec.description or spec.about,
            epilog=spec.epilog,
            formatter_class=argparse.RawDescriptionHelpFormatter,
            allow_abbrev=command not in TRAINING_COMMANDS,
        ),
        spec,
    )
