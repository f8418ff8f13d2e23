"""The fast tier's arguments for the training commands of the docs' bash blocks (tests/test_docs.py).

``DOCS_TEST_OVERRIDES`` (e.g. ``--epochs=2 --warm_epochs=2 --torch_threads=1``) is appended for every setting the
command does not give itself, so an override never clashes with a doc's own setting; with ``DOCS_TEST_SEEDS=1``
a ``--seeds a b c`` list keeps its first seed, and a
``compare`` without ``--seeds`` gets the first of its default ones. Both empty: the command runs exactly as written.
"""

import os

TRAINING_SUBCOMMANDS = ("run", "compare", "hyper")
DEFAULT_COMPARE_SEEDS = ("2020", "2021", "2022")  # recbole_fbsm/experiments/compare.py


def fast_args(args, subcommands=False):
    """``args`` of run_recbole.py / run_hyper.py (or of ``recbole-fbsm`` when ``subcommands``), made fast."""
    mirror = os.environ.get("DOCS_TEST_MIRROR")  # the published files on this machine, for `download`
    if subcommands and args[:1] == ["download"] and mirror and "--mirror" not in args:
        return [*args, "--mirror", mirror]
    if subcommands and (not args or args[0] not in TRAINING_SUBCOMMANDS):
        return list(args)
    keep_seeds = int(os.environ.get("DOCS_TEST_SEEDS") or 0)
    kept, seeds_left = [], None
    for arg in args:
        if arg.startswith("-"):
            seeds_left = keep_seeds if (arg == "--seeds" and keep_seeds) else None
        elif seeds_left is not None:
            if seeds_left == 0:
                continue
            seeds_left -= 1
        kept.append(arg)
    given = {a.split("=", 1)[0] for a in args if a.startswith("--")}
    if keep_seeds and subcommands and args[0] == "compare" and "--seeds" not in given:
        kept += ["--seeds", *DEFAULT_COMPARE_SEEDS[:keep_seeds]]  # compare's default is three splits
    overrides = os.environ.get("DOCS_TEST_OVERRIDES", "").split()
    return kept + [o for o in overrides if o.split("=", 1)[0] not in given]
