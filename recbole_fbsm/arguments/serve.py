"""Serve a trained FBSM / UFSM / CoSim (or DropoutNet, Heater, ALDI) model on brand-new items.

  recbole-fbsm serve recommend MODEL NEW_ITEMS --item-output top_users.csv --user-output top_items.json
  recbole-fbsm serve explain MODEL --user 196 --item new_1 --new-items NEW_ITEMS
  recbole-fbsm serve interactions MODEL --top 20 --min-items 2 --output interactions.csv
  recbole-fbsm serve compare-users MODEL_A MODEL_B --output groups.csv --per-user users.csv
  recbole-fbsm serve http MODEL --port 8000 [--new-items NEW_ITEMS] [--store FILE] [--token T] [--workers N]
  recbole-fbsm serve export CHECKPOINT -o MODEL.fbsm
  recbole-fbsm serve export-likes MODEL.fbsm.store.sqlite -o DIR

MODEL is the .fbsm artifact a training run writes beside its checkpoint (the run prints 'model artifact:
saved/FBSM-....fbsm'; quick_start.run returns it as result['artifact_file']): it holds the parameters,
the fitted features, the training likes and the raw-text analyzer, and loads without the dataset and
without running code. A training checkpoint (.pth) is accepted too: its dataset is then read once to
make the artifact (--data-path if the data moved). NEW_ITEMS is an .item atomic file in
the training .item file's format, or a CSV/TSV file of raw text (a header line: the item id column and
one column of text per feature field, e.g. item_id,text), with ids never seen in training; raw text
goes through the analyzer the converter stored with the dataset (stop words, stemming, ...). Outputs are
CSV or JSON, chosen by the file extension or --format; without an output file the result goes to stdout.
Mistakes (a missing field, colliding ids, an empty file, a checkpoint of another model) print 'error: ...'
and exit with 2.
"""

import argparse

EPILOG = "See docs/serve.md for examples and the meaning of every column."


def _common(parser, output_help="output file (.csv or .json; default: stdout)"):
    parser.add_argument("--device", default="cpu", help="torch device to score on (default: %(default)s)")
    parser.add_argument(
        "--data-path",
        default=None,
        help="for a checkpoint (.pth): folder holding the dataset's folder, if it moved since training",
    )
    parser.add_argument(
        "--trust-pickle",
        action="store_true",
        help="load a checkpoint of pickled objects (recbole-fbsm before 0.2): only for a file you trust, "
        "as loading it can run any code",
    )
    parser.add_argument(
        "--format",
        choices=("csv", "json"),
        default=None,
        help="output format (default: from the output file's extension; CSV on stdout)",
    )
    if output_help:
        parser.add_argument("--output", "-o", default=None, help=output_help)


def _add_recommend(commands):
    recommend = commands.add_parser(
        "recommend",
        help="top users for each new item, and top new items for users",
        description="Score brand-new items (an .item file) with a trained model: (a) for each new item the top-N "
        "users to show it to (among users with training likes), (b) for the given users (default: "
        "all with training likes) the top-N new items. Feature tokens the model does not know are "
        "ignored and counted in a warning. Without --item-output / --user-output both lists go to stdout.",
        epilog=EPILOG,
    )
    recommend.add_argument(
        "checkpoint",
        metavar="model",
        help="model artifact (.fbsm) or checkpoint (.pth) of FBSM, UFSM, CoSim, ItemKNNCBF, DropoutNet, Heater or ALDI",
    )
    recommend.add_argument(
        "new_items",
        help=".item file of new items (same feature fields as training, new ids), or a CSV/TSV file of their raw text",
    )
    recommend.add_argument(
        "--raw-text", action="store_true", help="the .item file's cells are raw text: analyse them as the converter did"
    )
    recommend.add_argument("--top", "-n", type=int, default=10, help="entries per list (default: %(default)s)")
    recommend.add_argument("--item-output", default=None, help="file for (a): item_id, rank, user_id, score")
    recommend.add_argument("--user-output", default=None, help="file for (b): user_id, rank, item_id, score")
    recommend.add_argument(
        "--users",
        nargs="+",
        default=None,
        metavar="USER",
        help="user ids for (b) (default: all with training likes); (b) goes to stdout without --user-output",
    )
    recommend.add_argument("--users-file", default=None, help="file with one user id per line for (b)")
    recommend.add_argument(
        "--seed", type=int, default=None, help="seed of the random tie breaking (default: the checkpoint's seed)"
    )
    _common(recommend, output_help=None)


def _add_explain(commands):
    explain = commands.add_parser(
        "explain",
        help="break one (user, item) score into feature pairs and liked items",
        description="Explain score(user, item): the contributions of feature pairs (diagonal part f_ip c_p f_up; "
        "for FBSM also the low-rank part f_ip (v_p.v_q) f_uq, p = q included) and of the user's training "
        "likes (sim(i, j)). Both add up to the model's score. The item is a dataset item or a new item "
        "of --new-items; a dataset item the user liked in training is scored without its own features.",
        epilog=EPILOG,
    )
    explain.add_argument(
        "checkpoint", metavar="model", help="model artifact (.fbsm) or checkpoint (.pth) of FBSM, UFSM or CoSim"
    )
    explain.add_argument("--user", required=True, help="user id (as in the .inter file)")
    explain.add_argument("--item", required=True, help="item id: a dataset item, or a new item of --new-items")
    explain.add_argument(
        "--new-items", default=None, help=".item file (or CSV/TSV file of raw text) holding the new item"
    )
    explain.add_argument(
        "--raw-text", action="store_true", help="the .item file's cells are raw text: analyse them as the converter did"
    )
    explain.add_argument(
        "--top",
        "-n",
        type=int,
        default=10,
        help="entries shown per part and for items; the rest is summed in one line (default: %(default)s)",
    )
    _common(explain, output_help="output file (.csv or .json; default: a readable summary on stdout)")


def _add_interactions(commands):
    interactions = commands.add_parser(
        "interactions",
        help="FBSM's strongest learned feature interactions",
        description="The largest and most negative off-diagonal entries v_p.v_q of FBSM's D + V V^T (p != q, each pair "
        "once) and the largest and smallest self-weights D_p + ||v_p||^2, with feature names, computed "
        "block by block (never the dense features x features matrix).",
        epilog=EPILOG,
    )
    interactions.add_argument("checkpoint", metavar="model", help="FBSM model artifact (.fbsm) or checkpoint (.pth)")
    interactions.add_argument("--top", "-n", type=int, default=20, help="entries per kind (default: %(default)s)")
    interactions.add_argument(
        "--min-items",
        type=int,
        default=0,
        help="only features that occur in at least this many training items (1: leave out tokens "
        "of validation/test items only, which training never touched; default: %(default)s)",
    )
    _common(interactions)


def _add_compare_users(commands):
    compare = commands.add_parser(
        "compare-users",
        help="users for whom model A is better, the same, or worse than B (test Recall@k)",
        description="The paper's user-level investigation: per-user test Recall@k of two checkpoints trained on the "
        "same dataset and item split (checked), ranking only the test items with fair random tie breaking; the "
        "users are grouped into A better / same / worse, with counts, distinct test items, and likes per user "
        "and per item for each group.",
        epilog=EPILOG,
    )
    compare.add_argument("checkpoint_a", metavar="model_a", help="artifact (or checkpoint) of model A")
    compare.add_argument(
        "checkpoint_b", metavar="model_b", help="artifact (or checkpoint) of model B (same dataset and split)"
    )
    compare.add_argument("--k", type=int, default=10, help="Recall@k cut-off (default: %(default)s)")
    compare.add_argument("--per-user", default=None, help="also write the per-user recalls and groups to this file")
    _common(compare, output_help="file for the group table (.csv or .json; default: stdout)")


def _add_http(commands):
    http = commands.add_parser(
        "http",
        help="an HTTP service that remembers: new items, likes, top-N lists of the whole catalogue (JSON)",
        description="Serve the model over HTTP (Starlette on uvicorn): POST /items adds new items (raw text or "
        "tokens), POST /users/{user}/likes records likes that count in that user's next answer, "
        "GET /users/{user}/items ranks the whole catalogue (scope=all|new|warm), GET /items/{item}/users gives the "
        "users a new item should go to, GET /users/{user}/items/{item}/explanation breaks a score down; "
        "GET /health, /model, /items; POST /admin/reload (or SIGHUP) swaps in a retrained artifact. New items and "
        "likes live in the store (--store), committed before each answer. Stop it with Ctrl-C.",
        epilog="See docs/serve.md for the request and answer formats.",
    )
    http.add_argument("checkpoint", metavar="model", help="model artifact (.fbsm) or checkpoint (.pth)")
    http.add_argument(
        "--host",
        default="127.0.0.1",
        help="address to listen on (default: %(default)s; any other address needs --token)",
    )
    http.add_argument("--port", type=int, default=8000, help="port (default: %(default)s)")
    http.add_argument(
        "--new-items", default=None, help="new items to add to the store at start (.item file, or CSV/TSV of raw text)"
    )
    http.add_argument(
        "--store",
        default=None,
        help="where new items and likes live: an SQLite file (default: MODEL.store.sqlite beside the model) "
        "or a PostgreSQL URL postgresql://user@host/db (pip install 'recbole-fbsm[postgres]')",
    )
    http.add_argument(
        "--token",
        default=None,
        help="bearer token that POST and DELETE requests need (default: $RECBOLE_FBSM_TOKEN; none: loopback only)",
    )
    http.add_argument(
        "--max-body", type=int, default=8 << 20, help="largest request body in bytes (default: %(default)s)"
    )
    http.add_argument(
        "--workers",
        type=int,
        default=1,
        help="worker processes behind the port, sharing the store (default: %(default)s)",
    )
    _common(http, output_help=None)


def _add_export_likes(commands):
    export = commands.add_parser(
        "export-likes",
        help="write a store's likes and new items as RecBole atomic files, to retrain on",
        description="Write the likes (.inter: the model's user and item id fields) and new items (.item: the model's "
        "feature fields) a store holds as RecBole atomic files DIR/NAME.inter and DIR/NAME.item (NAME: the "
        "folder's name), to add to the dataset before retraining. The model gives the field names and "
        "analyses raw-text items as the converter did (--model; found beside a default store "
        "MODEL.store.sqlite).",
        epilog=EPILOG,
    )
    export.add_argument("store", help="the store: an SQLite file or a postgresql:// URL")
    export.add_argument("--output", "-o", required=True, help="folder to write NAME.inter and NAME.item into")
    export.add_argument(
        "--model",
        default=None,
        help="the model artifact the items were served with (default: the "
        "store's name without .store.sqlite, when that file exists)",
    )


def _add_export(commands):
    export = commands.add_parser(
        "export",
        help="make the model artifact (.fbsm) of a training checkpoint",
        description="Read a training checkpoint and its dataset once, and write the model artifact that serves without "
        "them (a run writes it itself; this is for a checkpoint alone, or one of an older release with "
        "--trust-pickle).",
        epilog=EPILOG,
    )
    export.add_argument("checkpoint", help="training checkpoint (.pth)")
    _common(export, output_help="the artifact to write (default: the checkpoint's name ending in .fbsm)")


def build_parser(prog="recbole-fbsm serve"):
    parser = argparse.ArgumentParser(
        prog=prog,
        description=__doc__,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    commands = parser.add_subparsers(
        dest="command", required=True, metavar="{recommend,explain,interactions,compare-users,http,export,export-likes}"
    )
    _add_recommend(commands)
    _add_explain(commands)
    _add_interactions(commands)
    _add_compare_users(commands)
    _add_http(commands)
    _add_export(commands)
    _add_export_likes(commands)
    return parser
