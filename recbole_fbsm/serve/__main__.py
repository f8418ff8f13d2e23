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
goes through the analyzer the converter stored with the dataset (stop words, stemming, ...). Outputs are CSV or JSON, chosen by
the file extension or --format; without an output file the result goes to stdout. Mistakes (a missing
field, colliding ids, an empty file, a checkpoint of another model) print 'error: ...' and exit with 2.
"""

import argparse
import sys
import warnings

from recbole_fbsm.errors import ColdStartError

EPILOG = "See docs/serve.md for examples and the meaning of every column."


def _common(parser, output_help="output file (.csv or .json; default: stdout)"):
    parser.add_argument("--device", default="cpu", help="torch device to score on (default: %(default)s)")
    parser.add_argument("--data-path", default=None,
                        help="for a checkpoint (.pth): folder holding the dataset's folder, if it moved since training")
    parser.add_argument("--trust-pickle", action="store_true",
                        help="load a checkpoint of pickled objects (recbole-fbsm before 0.2): only for a file you trust, "
                             "as loading it can run any code")
    parser.add_argument("--format", choices=("csv", "json"), default=None,
                        help="output format (default: from the output file's extension; CSV on stdout)")
    if output_help:
        parser.add_argument("--output", "-o", default=None, help=output_help)


def _add_recommend(commands):
    recommend = commands.add_parser(
        "recommend", help="top users for each new item, and top new items for users",
        description="Score brand-new items (an .item file) with a trained model: (a) for each new item the top-N "
                    "users to show it to (among users with training likes), (b) for the given users (default: "
                    "all with training likes) the top-N new items. Feature tokens the model does not know are "
                    "ignored and counted in a warning. Without --item-output / --user-output both lists go to stdout.",
        epilog=EPILOG,
    )
    recommend.add_argument("checkpoint", metavar="model", help="model artifact (.fbsm) or checkpoint (.pth) of FBSM, UFSM, CoSim, ItemKNNCBF, DropoutNet, Heater or ALDI")
    recommend.add_argument("new_items", help=".item file of new items (same feature fields as training, new ids), "
                                             "or a CSV/TSV file of their raw text")
    recommend.add_argument("--raw-text", action="store_true",
                           help="the .item file's cells are raw text: analyse them as the converter did")
    recommend.add_argument("--top", "-n", type=int, default=10, help="entries per list (default: %(default)s)")
    recommend.add_argument("--item-output", default=None, help="file for (a): item_id, rank, user_id, score")
    recommend.add_argument("--user-output", default=None, help="file for (b): user_id, rank, item_id, score")
    recommend.add_argument("--users", nargs="+", default=None, metavar="USER",
                           help="user ids for (b) (default: all with training likes); (b) goes to stdout without --user-output")
    recommend.add_argument("--users-file", default=None, help="file with one user id per line for (b)")
    recommend.add_argument("--seed", type=int, default=None, help="seed of the random tie breaking (default: the checkpoint's seed)")
    _common(recommend, output_help=None)


def _add_explain(commands):
    explain = commands.add_parser(
        "explain", help="break one (user, item) score into feature pairs and liked items",
        description="Explain score(user, item): the contributions of feature pairs (diagonal part f_ip c_p f_up; "
                    "for FBSM also the low-rank part f_ip (v_p.v_q) f_uq, p = q included) and of the user's training "
                    "likes (sim(i, j)). Both add up to the model's score. The item is a dataset item or a new item "
                    "of --new-items; a dataset item the user liked in training is scored without its own features.",
        epilog=EPILOG,
    )
    explain.add_argument("checkpoint", metavar="model", help="model artifact (.fbsm) or checkpoint (.pth) of FBSM, UFSM or CoSim")
    explain.add_argument("--user", required=True, help="user id (as in the .inter file)")
    explain.add_argument("--item", required=True, help="item id: a dataset item, or a new item of --new-items")
    explain.add_argument("--new-items", default=None, help=".item file (or CSV/TSV file of raw text) holding the new item")
    explain.add_argument("--raw-text", action="store_true",
                         help="the .item file's cells are raw text: analyse them as the converter did")
    explain.add_argument("--top", "-n", type=int, default=10,
                         help="entries shown per part and for items; the rest is summed in one line (default: %(default)s)")
    _common(explain, output_help="output file (.csv or .json; default: a readable summary on stdout)")


def _add_interactions(commands):
    interactions = commands.add_parser(
        "interactions", help="FBSM's strongest learned feature interactions",
        description="The largest and most negative off-diagonal entries v_p.v_q of FBSM's D + V V^T (p != q, each pair "
                    "once) and the largest and smallest self-weights D_p + ||v_p||^2, with feature names, computed "
                    "block by block (never the dense features x features matrix).",
        epilog=EPILOG,
    )
    interactions.add_argument("checkpoint", metavar="model", help="FBSM model artifact (.fbsm) or checkpoint (.pth)")
    interactions.add_argument("--top", "-n", type=int, default=20, help="entries per kind (default: %(default)s)")
    interactions.add_argument("--min-items", type=int, default=0,
                              help="only features that occur in at least this many training items (1: leave out tokens "
                                   "of validation/test items only, which training never touched; default: %(default)s)")
    _common(interactions)


def _add_compare_users(commands):
    compare = commands.add_parser(
        "compare-users", help="users for whom model A is better, the same, or worse than B (test Recall@k)",
        description="The paper's user-level investigation: per-user test Recall@k of two checkpoints trained on the same "
                    "dataset and item split (checked), ranking only the test items with fair random tie breaking; the "
                    "users are grouped into A better / same / worse, with counts, distinct test items, and likes per user "
                    "and per item for each group.",
        epilog=EPILOG,
    )
    compare.add_argument("checkpoint_a", metavar="model_a", help="artifact (or checkpoint) of model A")
    compare.add_argument("checkpoint_b", metavar="model_b", help="artifact (or checkpoint) of model B (same dataset and split)")
    compare.add_argument("--k", type=int, default=10, help="Recall@k cut-off (default: %(default)s)")
    compare.add_argument("--per-user", default=None, help="also write the per-user recalls and groups to this file")
    _common(compare, output_help="file for the group table (.csv or .json; default: stdout)")


def _add_http(commands):
    http = commands.add_parser(
        "http", help="an HTTP service that remembers: new items, likes, top-N lists of the whole catalogue (JSON)",
        description="Serve the model over HTTP (Starlette on uvicorn): POST /items adds new items (raw text or tokens), "
                    "POST /users/{user}/likes records likes that count in that user's next answer, GET /users/{user}/items "
                    "ranks the whole catalogue (scope=all|new|warm), GET /items/{item}/users gives the users a new item "
                    "should go to, GET /users/{user}/items/{item}/explanation breaks a score down; GET /health, /model, "
                    "/items; POST /admin/reload (or SIGHUP) swaps in a retrained artifact. New items and likes live in "
                    "the store (--store), committed before each answer. Stop it with Ctrl-C.",
        epilog="See docs/serve.md for the request and answer formats.")
    http.add_argument("checkpoint", metavar="model", help="model artifact (.fbsm) or checkpoint (.pth)")
    http.add_argument("--host", default="127.0.0.1",
                      help="address to listen on (default: %(default)s; any other address needs --token)")
    http.add_argument("--port", type=int, default=8000, help="port (default: %(default)s)")
    http.add_argument("--new-items", default=None, help="new items to add to the store at start (.item file, or CSV/TSV of raw text)")
    http.add_argument("--store", default=None,
                      help="where new items and likes live: an SQLite file (default: MODEL.store.sqlite beside the model) "
                           "or a PostgreSQL URL postgresql://user@host/db (pip install 'recbole-fbsm[postgres]')")
    http.add_argument("--token", default=None,
                      help="bearer token that POST and DELETE requests need (default: $RECBOLE_FBSM_TOKEN; none: loopback only)")
    http.add_argument("--max-body", type=int, default=8 << 20, help="largest request body in bytes (default: %(default)s)")
    http.add_argument("--workers", type=int, default=1,
                      help="worker processes behind the port, sharing the store (default: %(default)s)")
    _common(http, output_help=None)


def _add_export_likes(commands):
    export = commands.add_parser(
        "export-likes", help="write a store's likes and new items as RecBole atomic files, to retrain on",
        description="Write the likes (.inter: the model's user and item id fields) and new items (.item: the model's "
                    "feature fields) a store holds as RecBole atomic files DIR/NAME.inter and DIR/NAME.item (NAME: the "
                    "folder's name), to add to the dataset before retraining. The model gives the field names and "
                    "analyses raw-text items as the converter did (--model; found beside a default store "
                    "MODEL.store.sqlite).", epilog=EPILOG)
    export.add_argument("store", help="the store: an SQLite file or a postgresql:// URL")
    export.add_argument("--output", "-o", required=True, help="folder to write NAME.inter and NAME.item into")
    export.add_argument("--model", default=None, help="the model artifact the items were served with (default: the "
                                                      "store's name without .store.sqlite, when that file exists)")


def _add_export(commands):
    export = commands.add_parser(
        "export", help="make the model artifact (.fbsm) of a training checkpoint",
        description="Read a training checkpoint and its dataset once, and write the model artifact that serves without "
                    "them (a run writes it itself; this is for a checkpoint alone, or one of an older release with "
                    "--trust-pickle).", epilog=EPILOG)
    export.add_argument("checkpoint", help="training checkpoint (.pth)")
    _common(export, output_help="the artifact to write (default: the checkpoint's name ending in .fbsm)")


def build_parser(prog="recbole-fbsm serve"):
    parser = argparse.ArgumentParser(
        prog=prog, description=__doc__, epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    commands = parser.add_subparsers(dest="command", required=True,
                                     metavar="{recommend,explain,interactions,compare-users,http,export,export-likes}")
    _add_recommend(commands)
    _add_explain(commands)
    _add_interactions(commands)
    _add_compare_users(commands)
    _add_http(commands)
    _add_export(commands)
    _add_export_likes(commands)
    return parser


# the largest list length and cut-off the command line takes: longer lists are not for a terminal or a CSV
# file (and the library clamps lengths to the candidates anyway)
MAX_LIST_LENGTH = 1_000_000
SEED_MAX = 2 ** 32 - 1  # torch's and numpy's seeds (config.checks.SEED_MAX)
# option -> (lowest, highest, what it counts): checked after parsing, one 'error:' line each
NUMBER_OPTIONS = {"top": (1, MAX_LIST_LENGTH, "entries per list"), "k": (1, MAX_LIST_LENGTH, "the Recall cut-off"),
                  "min_items": (0, MAX_LIST_LENGTH, "training items per feature"),
                  "seed": (0, SEED_MAX, "the seed of the tie breaking")}


def check_numbers(args):
    """A ColdStartError for a number option outside its range (a seed of 2**70 overflowed torch's generator, a
    --k of 10^9 asked for a 10^9-column score matrix)."""
    for name, (low, high, what) in NUMBER_OPTIONS.items():
        value = getattr(args, name, None)
        if value is not None and not low <= value <= high:
            raise ColdStartError(f"--{name.replace('_', '-')}: expected {what}, an integer from {low} to {high}; "
                                 f"got {value}.")


def main(argv=None, prog="recbole-fbsm serve"):
    parser = build_parser(prog)
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        warnings.showwarning = _show_warning  # printed when they happen: a service's start-up warnings at start-up
        try:
            check_numbers(args)
            written = COMMANDS[args.command](args)
        except ColdStartError as error:
            print(f"error: {error}", file=sys.stderr)
            return 2
    for path in written:
        print(f"wrote {path}", file=sys.stderr)
    return 0


def _show_warning(message, category, filename, lineno, file=None, line=None):
    """The serving tools' own warnings, one 'warning:' line each (library noise stays out of the way)."""
    from recbole_fbsm.artifact.model_file import UnsealedArtifactWarning
    from recbole_fbsm.serve.new_items import ServeWarning

    if issubclass(category, (ServeWarning, UnsealedArtifactWarning)):
        print(f"warning: {message}", file=sys.stderr, flush=True)


def _load(args):
    from recbole_fbsm.serve.loading import load_model

    return load_model(args.checkpoint, device=args.device, data_path=args.data_path, trust_pickle=args.trust_pickle)


def run_recommend(args):
    from recbole_fbsm.serve.output import grouped_records, resolve_format, write_output
    from recbole_fbsm.serve.recommend import recommend

    for path in (args.item_output, args.user_output):
        if path is not None:
            resolve_format(path, args.format)  # a bad extension fails before the model loads
    users = args.users
    if args.users_file:
        try:
            with open(args.users_file, encoding="utf-8") as handle:
                users = (users or []) + [line.strip() for line in handle if line.strip()]
        except OSError as error:
            raise ColdStartError(f"--users-file {args.users_file}: {error.strerror}.") from None
    to_stdout = args.item_output is None and args.user_output is None
    served = _load(args)
    result = recommend(served, args.new_items, top=args.top, users=users,
                       for_items=to_stdout or args.item_output is not None,
                       for_users=to_stdout or args.user_output is not None or users is not None, seed=args.seed,
                       raw_text=args.raw_text or None)
    kinds = []  # (output file or None for stdout, label, table, document)
    if result.for_items is not None and (to_stdout or args.item_output):
        kinds.append((args.item_output, f"top {args.top} users for each new item", result.for_items,
                      {"items": grouped_records(result.for_items, "item_id", "users")}))
    if result.for_users is not None:  # to stdout when --users came without --user-output
        kinds.append((args.user_output, f"top {args.top} new items for each user", result.for_users,
                      {"users": grouped_records(result.for_users, "user_id", "items")}))
    for path, _, table, document in kinds:
        if path is not None:
            write_output(path, args.format, table, document)
    shown = [kind for kind in kinds if kind[0] is None]
    if shown:
        print_recommendations(shown, args.format)
    return [path for path in (args.item_output, args.user_output) if path]


def print_recommendations(kinds, fmt):
    """The lists without an output file, on stdout: one labelled table per kind (a readable table, or CSV under a
    ``# label`` line with ``--format csv``), or one JSON document holding every kind with ``--format json``."""
    from recbole_fbsm.serve.output import write_output

    if fmt == "json":
        document = {}
        for _, _, _, part in kinds:
            document.update(part)
        write_output(None, "json", None, document)
        return
    for position, (_, label, table, _) in enumerate(kinds):
        if position:
            print()
        if fmt == "csv":
            print(f"# {label}")
            write_output(None, "csv", table, None)
        else:
            print(f"{label}:")
            print(table.to_string(index=False, float_format=lambda value: f"{value:.6g}") if len(table) else "  (none)")


def run_explain(args):
    from recbole_fbsm.serve.explain import explain
    from recbole_fbsm.serve.output import resolve_format, write_output

    if args.output is not None:
        resolve_format(args.output, args.format)
    explanation = explain(_load(args), args.user, args.item, new_items=args.new_items, raw_text=args.raw_text or None)
    if args.output is None and args.format is None:
        print(readable_explanation(explanation, args.top))
        return []
    write_output(args.output, args.format, explanation.to_table(args.top), explanation.to_dict(args.top))
    return [args.output] if args.output else []


def readable_explanation(explanation, top):
    lines = [
        f"{explanation.model} score of item {explanation.item}{' (new)' if explanation.new_item else ''} "
        f"for user {explanation.user}: {explanation.model_score:.6g}"
        + ("  (a training like: scored without its own features)" if explanation.estimation_constraint else ""),
    ]
    for part in explanation.part_names:
        group = explanation.part(part)
        lines.append(f"\n{part} part: {group['contribution'].sum():.6g} over {len(group)} feature pair(s)")
        shown = group.head(top)
        for row in shown.itertuples():
            pair = row.item_feature if row.item_feature == row.user_feature and part == "diagonal" else f"{row.item_feature} x {row.user_feature}"
            lines.append(f"  {row.contribution:+.6g}  {pair}  (item {row.item_value:.4g}, user {row.user_value:.4g}, weight {row.weight:.4g})")
        if len(group) > len(shown):
            lines.append(f"  {group['contribution'].iloc[len(shown):].sum():+.6g}  ({len(group) - len(shown)} other pairs)")
    items = explanation.items
    lines.append(f"\nliked items: {items['similarity'].sum():.6g} over {len(items)} training like(s)")
    for row in items.head(top).itertuples():
        lines.append(f"  {row.similarity:+.6g}  {row.item_id}")
    if len(items) > top:
        lines.append(f"  {items['similarity'].iloc[top:].sum():+.6g}  ({len(items) - top} other liked items)")
    return "\n".join(lines)


def run_interactions(args):
    from recbole_fbsm.serve.interactions import interactions_document, strongest_interactions
    from recbole_fbsm.serve.output import resolve_format, write_output

    if args.output is not None:
        resolve_format(args.output, args.format)
    table = strongest_interactions(_load(args), top=args.top, min_items=args.min_items)
    write_output(args.output, args.format, table, interactions_document(table))
    return [args.output] if args.output else []


def run_compare(args):
    from recbole_fbsm.serve.loading import load_model
    from recbole_fbsm.serve.output import resolve_format, write_output
    from recbole_fbsm.serve.user_level import compare_users

    for path in (args.output, args.per_user):
        if path is not None:
            resolve_format(path, args.format)
    if args.k < 1:
        raise ColdStartError(f"--k: expected a positive cut-off; got {args.k}.")
    a = load_model(args.checkpoint_a, device=args.device, data_path=args.data_path, trust_pickle=args.trust_pickle)
    b = load_model(args.checkpoint_b, device=args.device, data_path=args.data_path, trust_pickle=args.trust_pickle)
    comparison = compare_users(a, b, k=args.k)
    write_output(args.output, args.format, comparison.groups, comparison.to_dict())
    if args.per_user:
        write_output(args.per_user, args.format, comparison.per_user, {"users": comparison.per_user.to_dict("records")})
    return [path for path in (args.output, args.per_user) if path]


def run_http(args):
    import os

    from recbole_fbsm.serve.http import TOKEN_VARIABLE, check_exposure, run_service
    from recbole_fbsm.serve.live import LiveState, stored_items_of
    from recbole_fbsm.serve.new_items import read_new_items
    from recbole_fbsm.serve.store import default_store_path, open_store

    if not 0 <= args.port <= 65535:
        raise ColdStartError(f"--port: expected 0 to 65535; got {args.port}.")
    if not 1 <= args.workers <= 64:
        raise ColdStartError(f"--workers: expected 1 to 64; got {args.workers}.")
    if args.max_body < 1:
        raise ColdStartError(f"--max-body: expected a positive number of bytes; got {args.max_body}.")
    token = args.token or os.environ.get(TOKEN_VARIABLE) or None
    check_exposure(args.host, token)  # before the model loads: one line, at once
    location = args.store or default_store_path(args.checkpoint)
    served = _load(args)  # its warnings print as they happen (main's warnings hook): at start-up, not at exit
    new_items = read_new_items(served, args.new_items) if args.new_items else None
    store = open_store(location)
    if new_items is not None:
        store.put_items(stored_items_of(new_items, served))
    run_service(LiveState(args.checkpoint, store, device=args.device, served=served), args.host, args.port, token,
                args.max_body, args.workers, location, args.device)
    return []


def run_export_likes(args):
    from recbole_fbsm.serve.export import export_likes

    return export_likes(args.store, args.output, args.model)


def run_export(args):
    import os

    from recbole_fbsm.artifact.model_file import SUFFIX, write_artifact
    from recbole_fbsm.serve.loading import read_model_file, served_from_artifact

    output = args.output or os.path.splitext(args.checkpoint)[0] + SUFFIX
    content = read_model_file(args.checkpoint, args.data_path, args.trust_pickle)
    served_from_artifact(content, output)  # the artifact loads and rebuilds its model before it is written
    write_artifact(output, content)
    return [output]


COMMANDS = {"recommend": run_recommend, "explain": run_explain, "interactions": run_interactions,
            "compare-users": run_compare, "http": run_http, "export": run_export,
            "export-likes": run_export_likes}


if __name__ == "__main__":
    sys.exit(main())
