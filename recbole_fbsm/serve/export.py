"""``serve export-likes STORE -o DIR``: what the live service learned, as atomic files ``DIR/NAME.inter`` and
``DIR/NAME.item`` in the model's own fields, ready to append to the dataset and retrain (docs/serve.md)."""

import contextlib
import glob
import os

from recbole_fbsm.errors import ColdStartError
from recbole_fbsm.serve.loading import load_model
from recbole_fbsm.serve.new_items import tokenize_field
from recbole_fbsm.serve.output import write_text
from recbole_fbsm.serve.store import by_kind, default_store_path, on_postgres, open_store


def export_likes(store_location, output, model=None):
    """Write the store's likes and items into folder ``output``; the paths written."""
    location = str(store_location)
    if not on_postgres(location) and not os.path.isfile(location):
        raise ColdStartError(
            f"store {location} not found (expected the SQLite file serve http --store wrote, or a postgresql:// URL)."
        )
    beside = location.removesuffix(default_store_path(""))  # a default store, MODEL.store.sqlite, names its model
    model = model or (beside if beside != location and os.path.isfile(beside) else None)
    if model is None:
        raise ColdStartError(
            f"store {location}: the model it served is needed to write its likes and items as atomic "
            "files (their user and item id fields, the items' feature fields and types, the raw-text "
            "analyzer): give --model MODEL.fbsm."
        )
    name = os.path.basename(os.path.abspath(output))  # "-o ." names the files after the current folder
    paths = [os.path.join(output, f"{name}.{suffix}") for suffix in ("inter", "item")]
    atomic = sorted(
        glob.glob(os.path.join(glob.escape(output), "*.inter")) + glob.glob(os.path.join(glob.escape(output), "*.item"))
    )
    if atomic:  # a dataset's folder (through a link too), or an earlier export: never written into
        raise ColdStartError(
            f"--output {output} already holds {atomic[0]}: export-likes never replaces a file nor writes "
            "beside a dataset's files (the dataset's own folder, or an earlier export?); give a new folder."
        )
    served = load_model(model)
    with contextlib.closing(open_store(location)) as store:
        items, likes = store.items(), store.all_likes()
    unread = sorted({field for item in items for field in item.cells} - set(served.fields))
    if unread:
        raise ColdStartError(
            f"store {location}: its items hold feature field(s) {unread} that model {model} does not read "
            f"(it reads {served.fields}): a model of another dataset? Give the --model the items were served with."
        )
    header = f"{served.uid_field}:token\t{served.iid_field}:token\n"
    write_text(paths[0], header + "".join(f"{user}\t{item}\n" for user, item in likes))
    if not items:
        return paths[:1]
    separator = served.config["seq_separator"] or " "
    columns = {}
    for group in by_kind(items):
        for field in served.fields:
            cells = tokenize_field([item.cells.get(field, "") for item in group], field, served, group[0].raw)
            for item, tokens in zip(group, cells):  # a tab or line break inside a token would break the row
                columns.setdefault(item.item_id, {})[field] = separator.join(" ".join(t.split()) for t in tokens)
    types = served.dataset.field2type  # the feature fields are token or token_seq
    header = "\t".join([f"{served.iid_field}:token"] + [f"{field}:{types[field].value}" for field in served.fields])
    rows = ["\t".join([item.item_id] + [columns[item.item_id][field] for field in served.fields]) for item in items]
    write_text(paths[1], "\n".join([header, *rows]) + "\n")
    return paths
