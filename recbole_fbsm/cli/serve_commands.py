"""``recbole-fbsm serve``'s subcommands at work, once ``recbole_fbsm.cli.serve`` has read their options: the model
loaded, the lists scored, explained or compared, written as CSV or JSON; the HTTP service's modules load only for
``serve http``."""

import os
import sys
import warnings

from recbole_fbsm.artifact.model_file import SUFFIX, write_artifact
from recbole_fbsm.errors import ColdStartError
from recbole_fbsm.serve.explain import explain
from recbole_fbsm.serve.export import export_likes
from recbole_fbsm.serve.interactions import strongest_interactions
from recbole_fbsm.serve.loading import load_model, read_model_file, served_from_artifact
from recbole_fbsm.serve.new_items import ServeWarning, new_items_from_cells, read_item_cells
from recbole_fbsm.serve.output import resolve_format, write_output
from recbole_fbsm.serve.recommend import recommend
from recbole_fbsm.serve.store import StoreWarning
from recbole_fbsm.serve.user_level import compare_users


def main(args):
    """Run the subcommand ``args`` names (parsed by recbole_fbsm.cli.serve): 'error: ...' and 2 for a mistake."""
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        warnings.showwarning = _show_warning  # printed when they happen: a service's start-up warnings at start-up
        try:
            if args.command == "export":
                args.output = args.output or os.path.splitext(args.checkpoint)[0] + SUFFIX
            check_outputs(args)
            written = SUBCOMMANDS[args.command](args)
        except ColdStartError as error:
            print(f"error: {error}", file=sys.stderr)
            return 2
    for path in written:
        print(f"wrote {path}", file=sys.stderr)
    return 0


def _show_warning(message, category, filename, lineno, file=None, line=None):
    """The serving tools' own warnings, one 'warning:' line each (library noise stays out of the way)."""
    if issubclass(category, (ServeWarning, StoreWarning)):
        print(f"warning: {message}", file=sys.stderr, flush=True)


def _same_file(a, b):
    return os.path.realpath(a) == os.path.realpath(b) or (
        os.path.exists(a) and os.path.exists(b) and os.path.samefile(a, b)
    )


def check_outputs(args):
    """Refuse, before anything is read, an output naming one of the command's input files or another output:
    written, it would replace that file (a checkpoint, the new items, the other list); or an output whose extension
    names no format."""
    named = [(f"the {INPUTS[name]} file", getattr(args, name)) for name in INPUTS if getattr(args, name, None)]
    for name in FORMATTED_OUTPUTS.get(args.command, ("output",)):
        path, option = getattr(args, name, None), "--" + name.replace("_", "-")
        same = [what for what, other in named if path not in (None, "-") and _same_file(path, other)]
        if same:
            raise ColdStartError(
                f"{option} {path} is also {same[0]}: an output never replaces an input or another output; "
                "name another file."
            )
        if path is not None and args.command in FORMATTED_OUTPUTS:  # a bad extension fails before the model loads
            resolve_format(path, args.format)
        named.append((option, path or "-"))


def _load(args, path=None):
    path = path or args.checkpoint
    return load_model(path, device=args.device, data_path=args.data_path)


def run_recommend(args):
    result = recommend(
        _load(args),
        args.new_items,
        top=args.top,
        users=args.users,
        for_items=args.item_output is not None or args.user_output is None,
        for_users=args.user_output is not None or args.item_output is None or args.users is not None,
        seed=args.seed,
        raw_text=args.raw_text or None,
    )
    lists = {"items": (result.for_items, args.item_output, "users for each new item")}
    lists["users"] = (result.for_users, args.user_output, "new items for each user")
    printed = {key: (table, label) for key, (table, path, label) in lists.items() if table is not None and not path}
    for table, path, _ in lists.values():
        if table is not None and path:
            write_output(path, args.format, table)
    if printed and args.format == "json":  # one document holding every printed list
        write_output(None, "json", None, {key: table.to_dict("records") for key, (table, _) in printed.items()})
    for position, (table, label) in enumerate(printed.values() if args.format != "json" else ()):
        print("\n" * bool(position) + f"# top {args.top} {label}")
        write_output(None, "csv", table)
    return [path for path in (args.item_output, args.user_output) if path]


def run_explain(args):
    explanation = explain(_load(args), args.user, args.item, new_items=args.new_items, raw_text=args.raw_text or None)
    write_output(args.output, args.format, explanation.to_table(args.top), explanation.to_dict(args.top))
    return [args.output] if args.output else []


def run_interactions(args):
    table = strongest_interactions(_load(args), top=args.top, min_items=args.min_items)
    write_output(args.output, args.format, table)
    return [args.output] if args.output else []


def run_compare(args):
    comparison = compare_users(_load(args, args.checkpoint_a), _load(args, args.checkpoint_b), k=args.k)
    write_output(args.output, args.format, comparison.groups)
    if args.per_user:
        write_output(args.per_user, args.format, comparison.per_user)
    return [path for path in (args.output, args.per_user) if path]


def run_http(args):
    from recbole_fbsm.serve.http import TOKEN_VARIABLE, check_exposure, check_id, run_service
    from recbole_fbsm.serve.live import LiveState
    from recbole_fbsm.serve.store import StoredItem, default_store_path, open_store

    token = args.token or os.environ.get(TOKEN_VARIABLE) or None
    check_exposure(args.host, token)  # before the model loads: one line, at once
    location = args.store or default_store_path(args.checkpoint)
    served = _load(args)  # its warnings print as they happen (main's warnings hook): at start-up, not at exit
    store = open_store(location)
    if args.new_items:  # stored as the file gives them (as POST /items does), once weighed and warned of
        tokens, values, raw = read_item_cells(served, args.new_items)
        for token in tokens:  # the ids the API takes: any other could never be listed or deleted
            check_id(token, f"new-item file {args.new_items}: item id")
        new_items_from_cells(served, tokens, values, raw, source=f"new-item file {args.new_items}")
        store.put_items([StoredItem(t, raw, {f: values[f][k] for f in served.fields}) for k, t in enumerate(tokens)])
    state = LiveState(args.checkpoint, store, args.device, served, args.data_path)
    run_service(state, args.host, args.port, token, args.max_body, args.workers)
    return []


def run_export(args):
    content = read_model_file(args.checkpoint, args.data_path)
    served_from_artifact(content, args.output)  # the artifact loads and rebuilds its model before it is written
    write_artifact(args.output, content)
    return [args.output]


# the options naming a CSV or JSON file each command writes
FORMATTED_OUTPUTS = {
    "recommend": ("item_output", "user_output"),
    "explain": ("output",),
    "interactions": ("output",),
    "compare-users": ("output", "per_user"),
}
# the arguments naming a file a command reads
INPUTS = {
    "checkpoint": "model",
    "checkpoint_a": "model_a",
    "checkpoint_b": "model_b",
    "new_items": "new items",
}
SUBCOMMANDS = {
    "recommend": run_recommend,
    "explain": run_explain,
    "interactions": run_interactions,
    "compare-users": run_compare,
    "http": run_http,
    "export": run_export,
    "export-likes": lambda args: export_likes(args.store, args.output, args.model),
}
