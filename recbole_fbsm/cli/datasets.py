"""``recbole-fbsm download`` and ``recbole-fbsm convert``: write a RecBole dataset from a public one or from the
user's files (docs/datasets.md, docs/convert.md); the converters and pandas load once the options are read."""

import argparse
import sys
from pathlib import Path

from recbole_fbsm.config.conversion import CTR_FILES, CTR_TAG_FILES, PAPER_MAX_DF, TAG_SEP
from recbole_fbsm.config.datasets import DATASETS, SOURCES, run_command
from recbole_fbsm.errors import ColdStartError

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


def _sep(value):
    """Accept a literal tab as well as the spellings '\\t' and 'tab' typed in a shell."""
    value = {"\\t": "\t", "tab": "\t", "TAB": "\t"}.get(value, value)
    if len(value) != 1:
        raise argparse.ArgumentTypeError(f"expected a single character, got {value!r}")
    return value


def _common(p):
    g = p.add_argument_group("output and features")
    g.add_argument("--name", required=True, help="dataset name: folder and file stem of the output")
    g.add_argument(
        "--out", default="dataset", help="folder that receives NAME/ (default: %(default)s, RecBole's data_path)"
    )
    g.add_argument(
        "--min-df",
        type=int,
        default=None,
        help="drop terms found in fewer items than this (default: the paper's 20 scaled to the data, "
        "items x 20 / 25,000 within [2, 20]: 20 for citeulike-t, 2 for fewer than 3,125 items)",
    )
    g.add_argument(
        "--max-df",
        type=float,
        default=PAPER_MAX_DF,
        help="drop terms found in more than this fraction of items (default: %(default)s)",
    )
    g.add_argument(
        "--no-stem", dest="stem", action="store_false", help="keep words unstemmed (default: Snowball english stems)"
    )
    g.add_argument("--no-stopwords", dest="stopwords", action="store_false", help="keep English stop words")
    g.add_argument("--overwrite", action="store_true", help="replace an existing OUT/NAME dataset folder")
    g.add_argument("--tags-min-df", type=int, help="drop tags found in fewer items than this (default: --min-df)")
    g.add_argument(
        "--tags-max-df", type=float, help="drop tags found in more than this fraction of items (default: --max-df)"
    )


def convert_parser(prog="recbole-fbsm convert"):
    parser = argparse.ArgumentParser(
        prog=prog,
        description="Write RecBole .inter/.item files with item text as a token_seq field 'words',\n"
        "preprocessed as in the FBSM paper: stop words removed, words stemmed, terms found in fewer\n"
        "than --min-df items or in more than --max-df of the items dropped.",
        epilog=CONVERT_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="{ctr,text}")
    ctr = sub.add_parser(
        "ctr",
        help="CTR/CDL format (users.dat, mult.dat, vocabulary.dat), e.g. citeulike-t",
        description="Convert CTR/CDL-format files; every user-item pair is an implicit like.",
    )
    g = ctr.add_argument_group("input (give --src, or each file)")
    g.add_argument("--src", help="folder holding " + ", ".join(CTR_FILES.values()))
    for key, file in CTR_FILES.items():
        g.add_argument(f"--{key}", help=f"{file} (default: SRC/{file})")
    g = ctr.add_argument_group("tags (optional): a second field 'tags', each tag one token kept whole")
    g.add_argument(
        "--tags", action="store_true", help="also read " + " and ".join(CTR_TAG_FILES.values()) + " from SRC"
    )
    for key, file in CTR_TAG_FILES.items():
        g.add_argument(f"--{key.replace('_', '-')}", dest=key, help=f"{file} (default: SRC/{file} with --tags)")
    _common(ctr)
    text = sub.add_parser(
        "text",
        help="CSV/TSV interactions 'user,item[,rating]' and item texts 'item,text'",
        description="Convert CSV/TSV files; ratings are binarised with --threshold.",
    )
    g = text.add_argument_group("input")
    g.add_argument("--inter", required=True, help="interactions: user, item[, rating] per line (more columns ignored)")
    g.add_argument("--items", required=True, help="item texts: item, text per line (CSV quoting honoured)")
    g.add_argument(
        "--sep",
        type=_sep,
        help="field separator for both files (default: tab for .tsv/.tab, comma otherwise); '\\t' or 'tab' for tab",
    )
    g.add_argument("--header", action="store_true", help="skip the first line of both files")
    g.add_argument(
        "--threshold",
        type=float,
        help="rating >= THRESHOLD is a like (label 1), lower a dislike (label 0); "
        "without it no label column is written and every line is a like",
    )
    g.add_argument(
        "--tags",
        help="optional: item, tag[, tag ...] per line (an item may have several lines); written "
        "as a second field 'tags', each tag one token kept whole (lower case, not stemmed)",
    )
    g.add_argument(
        "--tag-sep",
        type=_sep,
        default=TAG_SEP,
        help="separator of several tags inside one field of --tags (default: %(default)s)",
    )
    _common(text)
    return parser


def convert(argv, prog="recbole-fbsm convert"):
    parser = convert_parser(prog)
    args = parser.parse_args(argv)
    from recbole_fbsm.convert import ConversionError, convert_ctr, convert_text

    shared = ("min_df", "max_df", "stem", "stopwords", "overwrite", "tags_min_df", "tags_max_df")
    common = {key: getattr(args, key) for key in shared}
    try:
        if args.command == "ctr":
            tags = args.tags or bool(args.tag_item or args.tag_names)
            files = CTR_FILES | (CTR_TAG_FILES if tags else {})  # convert_ctr's keywords: the public datasets' names
            paths = {key: Path(args.src) / file for key, file in files.items()} if args.src else {}
            paths |= {key: getattr(args, key) for key in CTR_FILES | CTR_TAG_FILES if getattr(args, key)}
            missing = [f"--{key.replace('_', '-')}" for key in files if key not in paths]
            if missing:
                parser.error(f"ctr: give --src or all of {', '.join(missing)}")
            result = convert_ctr(name=args.name, out_dir=args.out, **paths, **common)
        else:
            common |= {key: getattr(args, key) for key in ("sep", "threshold", "header", "tags", "tag_sep")}
            result = convert_text(args.inter, args.items, args.name, args.out, **common)
    except ConversionError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(result.summary())
    return 0


# ------------------------------------------------------------------------------- recbole-fbsm download
DOWNLOAD_EPILOG = """examples:
  recbole-fbsm download citeulike-t
  recbole-fbsm download citeulike-tags --out data/
  recbole-fbsm download citeulike-t --mirror http://files.example.org/citeulike-t/

Every file is checked against its size and SHA-256 before it is converted (docs/datasets.md). The files
arrive in OUT/.NAME.download/; a failed or interrupted run leaves nothing under OUT/NAME, ends with one
'error: ...' line (exit status 2), and the same command resumes it."""


def download_parser(prog="recbole-fbsm download"):
    parser = argparse.ArgumentParser(
        prog=prog,
        epilog=DOWNLOAD_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Download a public dataset, check every file's SHA-256, and write it as a RecBole dataset:\n"
        + "\n".join(f"  {name:<15} {dataset.about}" for name, dataset in DATASETS.items()),
    )
    parser.add_argument("name", metavar="NAME", help="dataset to download: " + ", ".join(DATASETS))
    parser.add_argument(
        "--out", default="dataset", help="folder that receives NAME/ (default: %(default)s, RecBole's data_path)"
    )
    parser.add_argument(
        "--mirror",
        metavar="URL",
        help="base URL serving the same file names (default: the dataset's public repository)",
    )
    parser.add_argument("--overwrite", action="store_true", help="replace an existing OUT/NAME dataset folder")
    parser.add_argument(
        "--timeout",
        type=_seconds,
        default=30.0,
        help="seconds a connection or a read may wait; a file gets 2 x this plus 1 s per 10 kB (default: %(default)s)",
    )
    return parser


def _seconds(text):
    """--timeout: above 0 (0 makes the socket non-blocking) and at most a day (inf or 1e309 overflow it)."""
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not 0 < value <= 86400:
        raise argparse.ArgumentTypeError(f"expected seconds, a number above 0 and at most 86400; got {text!r}")
    return value


def download(argv, prog="recbole-fbsm download"):
    """``recbole-fbsm download NAME``: the files, checked and converted; then a summary and the next command."""
    args = download_parser(prog).parse_args(argv)
    from recbole_fbsm.convert import ConversionError
    from recbole_fbsm.convert.download import download_dataset, redact

    try:
        result = download_dataset(
            args.name, args.out, mirror=args.mirror, overwrite=args.overwrite, timeout=args.timeout
        )
    except KeyboardInterrupt:
        interrupted = f"download of {args.name} interrupted; nothing was written under {args.out}/{args.name}"
        print(f"error: {interrupted}, run the same command to resume.", file=sys.stderr)
        return 2
    except (ColdStartError, ConversionError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    dataset = DATASETS[args.name]
    source = SOURCES[dataset.source]
    size = sum(source["files"][file][0] for file in dataset.files)
    where = redact(args.mirror or source["url"])
    print(f"downloaded {len(dataset.files)} files ({size / 1e6:.1f} MB) from {where}, sizes and SHA-256 checked")
    print(result.summary())
    print(f"next: {run_command(args.name, args.out)}")
    return 0
