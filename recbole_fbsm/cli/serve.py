"""Serve a trained model (FBSM, UFSM, CoSim, ItemKNNCBF, DropoutNet, Heater, ALDI) on brand-new items.

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
--format; stdout without an output file). Mistakes print 'error: ...' and exit with 2; see docs/serve.md.
"""

import argparse

from recbole_fbsm.config.checks import SEED_MAX

EPILOG = "See docs/serve.md for examples and the meaning of every column."
MAX_LIST_LENGTH = 1_000_000  # the longest list and cut-off: longer lists are not for a terminal or a CSV file
MODEL_FILE = "model artifact (.fbsm) or checkpoint (.pth)"
RAW_TEXT = "the .item file's cells are raw text: analyse them as the converter did"


def integer(what, low, high=None):
    """An argparse type: an integer from ``low`` to ``high`` (None: no upper bound), checked before any model loads."""
    allowed = f"an integer from {low} to {high}" if high is not None else f"an integer of at least {low}"

    def parse(text):
        try:
            value = int(text)
        except ValueError:
            value = None
        if value is None or value < low or (high is not None and value > high):
            raise argparse.ArgumentTypeError(f"expected {what}, {allowed}; got {text}")
        return value

    return parse


def _command(commands, name, help, description, model_help=MODEL_FILE, output_help=None, epilog=EPILOG, formats=True):
    """A subcommand that reads a model on a torch device, with the options every such command shares (``formats``:
    it writes CSV or JSON)."""
    parser = commands.add_parser(name, help=help, description=description, epilog=epilog)
    if model_help:
        parser.add_argument("checkpoint", metavar="model", help=model_help)
    parser.add_argument("--device", default="cpu", help="torch device to score on (default: %(default)s)")
    parser.add_argument("--data-path", help="for a checkpoint (.pth): the folder of its dataset's folder, if moved")
    if formats:
        parser.add_argument(
            "--format",
            choices=("csv", "json"),
            help="output format (default: the output file's extension; CSV on stdout)",
        )
    if output_help:
        parser.add_argument("--output", "-o", help=output_help)
    return parser


def _top(parser, default, help):
    parser.add_argument("--top", "-n", type=integer("entries per list", 1, MAX_LIST_LENGTH), default=default, help=help)


def _add_recommend(commands):
    recommend = _command(
        commands,
        "recommend",
        help="top users for each new item, and top new items for users",
        description="Score brand-new items with a trained model: (a) for each new item the top-N users to show it "
        "to, (b) for the given users (default: all with training likes) the top-N new items. Unknown feature "
        "tokens are ignored and counted in a warning. Without --item-output / --user-output both go to stdout.",
        model_help=f"{MODEL_FILE} of FBSM, UFSM, CoSim, ItemKNNCBF, DropoutNet, Heater or ALDI",
    )
    recommend.add_argument(
        "new_items",
        help=".item file of new items (same feature fields as training, new ids), or a CSV/TSV file of their raw text",
    )
    recommend.add_argument("--raw-text", action="store_true", help=RAW_TEXT)
    _top(recommend, 10, "entries per list (default: %(default)s)")
    recommend.add_argument("--item-output", help="file for (a): item_id, rank, user_id, score")
    recommend.add_argument("--user-output", help="file for (b): user_id, rank, item_id, score")
    recommend.add_argument("--users", nargs="+", metavar="USER", help="user ids for (b) (default: all with likes)")
    recommend.add_argument("--users-file", help="file with one user id per line for (b)")
    recommend.add_argument(
        "--seed",
        type=integer("the seed of the tie breaking", 0, SEED_MAX),
        help="seed of the random tie breaking (default: the checkpoint's seed)",
    )


def _add_explain(commands):
    explain = _command(
        commands,
        "explain",
        help="break one (user, item) score into feature pairs and liked items",
        description="Explain score(user, item) by the contributions of feature pairs (diagonal part; FBSM's low-rank "
        "part) and of the user's training likes; both add up to the model's score. The item is a dataset item or "
        "a new item of --new-items; a dataset item the user liked in training is scored without its own features.",
        model_help=f"{MODEL_FILE} of FBSM, UFSM or CoSim",
        output_help="output file (.csv or .json; default: a readable summary on stdout)",
    )
    explain.add_argument("--user", required=True, help="user id (as in the .inter file)")
    explain.add_argument("--item", required=True, help="item id: a dataset item, or a new item of --new-items")
    explain.add_argument("--new-items", help=".item file (or CSV/TSV file of raw text) holding the new item")
    explain.add_argument("--raw-text", action="store_true", help=RAW_TEXT)
    _top(explain, 10, "entries shown per part and for items; the rest is summed in one line (default: %(default)s)")


def _add_interactions(commands):
    interactions = _command(
        commands,
        "interactions",
        help="FBSM's strongest learned feature interactions",
        description="The largest and most negative off-diagonal entries v_p.v_q of FBSM's D + V V^T (p != q) and the "
        "largest and smallest self-weights D_p + ||v_p||^2, with feature names.",
        model_help=f"FBSM {MODEL_FILE}",
        output_help="output file (.csv or .json; default: stdout)",
    )
    _top(interactions, 20, "entries per kind (default: %(default)s)")
    interactions.add_argument(
        "--min-items",
        type=integer("training items per feature", 0, MAX_LIST_LENGTH),
        default=0,
        help="only features of at least this many training items (1: leave out the tokens training never touched; "
        "default: %(default)s)",
    )


def _add_compare_users(commands):
    compare = _command(
        commands,
        "compare-users",
        help="users for whom model A is better, the same, or worse than B (test Recall@k)",
        description="The paper's user-level investigation: per-user test Recall@k of two models of the same dataset "
        "and item split, users grouped into A better / same / worse, with counts, test items and likes per group.",
        model_help=None,
        output_help="file for the group table (.csv or .json; default: stdout)",
    )
    compare.add_argument("checkpoint_a", metavar="model_a", help="artifact (or checkpoint) of model A")
    compare.add_argument("checkpoint_b", metavar="model_b", help="artifact (or checkpoint) of model B (same split)")
    compare.add_argument(
        "--k",
        type=integer("the Recall cut-off", 1, MAX_LIST_LENGTH),
        default=10,
        help="Recall@k cut-off (default: %(default)s)",
    )
    compare.add_argument("--per-user", help="also write the per-user recalls and groups to this file")


def _add_http(commands):
    http = _command(
        commands,
        "http",
        help="an HTTP service that remembers: new items, likes, top-N lists of the whole catalogue (JSON)",
        description="Serve the model over HTTP: new items (POST /items) and likes (POST /users/{user}/likes) count in "
        "the next answer; GET /users/{user}/items ranks the whole catalogue, GET /items/{item}/users finds a new "
        "item's users. They live in the store (--store); POST /admin/reload (or SIGHUP) swaps in a retrained "
        "artifact. Stop it with Ctrl-C.",
        epilog="See docs/serve.md for the request and answer formats.",
        formats=False,
    )
    http.add_argument("--host", default="127.0.0.1", help="address (default: %(default)s; any other needs --token)")
    http.add_argument("--port", type=integer("a TCP port", 0, 65535), default=8000, help="port (default: %(default)s)")
    http.add_argument("--new-items", help="new items to add to the store at start (.item file, or CSV/TSV of raw text)")
    http.add_argument(
        "--store",
        help="where new items and likes live: an SQLite file (default: MODEL.fbsm.store.sqlite beside the model) "
        "or a PostgreSQL URL postgresql://user@host/db (pip install 'recbole-fbsm[postgres]')",
    )
    http.add_argument(
        "--token",
        help="bearer token that POST and DELETE requests need (default: $RECBOLE_FBSM_TOKEN; none: loopback only)",
    )
    http.add_argument(
        "--max-body",
        type=integer("a number of bytes", 1),
        default=8 << 20,
        help="largest request body in bytes (default: %(default)s)",
    )
    http.add_argument(
        "--workers",
        type=integer("worker processes", 1, 64),
        default=1,
        help="worker processes behind the port, sharing the store (default: %(default)s)",
    )


def _add_export_likes(commands):
    export = commands.add_parser(
        "export-likes",
        help="write a store's likes and new items as RecBole atomic files, to retrain on",
        description="Write the likes and new items a store holds as RecBole atomic files DIR/NAME.inter and "
        "DIR/NAME.item (NAME: the folder's name), to add to the dataset before retraining; the model (--model) "
        "gives the field names and analyses raw-text items as the converter did.",
        epilog=EPILOG,
    )
    export.add_argument("store", help="the store: an SQLite file or a postgresql:// URL")
    export.add_argument("--output", "-o", required=True, help="folder to write NAME.inter and NAME.item into")
    export.add_argument(
        "--model", help="the artifact the items were served with (default: the store's name without .store.sqlite)"
    )


def _add_export(commands):
    export = _command(
        commands,
        "export",
        help="make the model artifact (.fbsm) of a training checkpoint",
        description="Read a training checkpoint and its dataset once and write the model artifact that serves without "
        "them (a run writes it itself; this is for a checkpoint alone).",
        model_help=None,
        output_help="the artifact to write (default: the checkpoint's name ending in .fbsm)",
        formats=False,
    )
    export.add_argument("checkpoint", help="training checkpoint (.pth)")


def serve_parser(prog="recbole-fbsm serve"):
    parser = argparse.ArgumentParser(
        prog=prog,
        description=__doc__,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    commands = parser.add_subparsers(dest="command", required=True)
    _add_recommend(commands)
    _add_explain(commands)
    _add_interactions(commands)
    _add_compare_users(commands)
    _add_http(commands)
    _add_export(commands)
    _add_export_likes(commands)
    return parser


def serve(argv, prog="recbole-fbsm serve"):
    args = serve_parser(prog).parse_args(argv)
    from recbole_fbsm.cli import serve_commands  # torch, RecBole, pandas: once the options are read

    return serve_commands.main(args)
