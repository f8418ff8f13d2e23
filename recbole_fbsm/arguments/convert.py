"""``recbole-fbsm convert``'s options (``--help``), read before pandas and the converters load
(``recbole_fbsm.convert.__main__`` runs them)."""

import argparse

from recbole_fbsm.config.conversion import CTR_FILES, CTR_TAG_FILES, PAPER_MAX_DF, TAG_SEP

EPILOG = """examples:
  recbole-fbsm convert ctr --src ../shared/datasets/citeulike-t --name citeulike-t --out dataset/
  recbole-fbsm convert ctr --src ../shared/datasets/citeulike-t --tags --name citeulike-t-tags --out dataset/
  recbole-fbsm convert text --inter ratings.csv --items books.csv --threshold 3 --header \\
      --name amazon-books --out dataset/

Writes OUT/NAME/NAME.inter, OUT/NAME/NAME.item (words:token_seq, a term repeated once per occurrence)
(with tags: a second field tags:token_seq, each tag one token kept whole)
OUT/NAME/README.txt and OUT/NAME/NAME.analyzer.json (how text became tokens, for serving raw text);
skipped input is counted in the summary. Exit status 2 with 'error: ...' when no usable dataset can be
written (nothing is written then)."""


def _sep(value: str) -> str:
    """Accept a literal tab as well as the spellings '\\t' and 'tab' typed in a shell."""
    value = {"\\t": "\t", "tab": "\t", "TAB": "\t"}.get(value, value)
    if len(value) != 1:
        raise argparse.ArgumentTypeError(f"expected a single character, got {value!r}")
    return value


def _common(p: argparse.ArgumentParser) -> None:
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


def build_parser(prog="recbole-fbsm convert") -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=prog,
        description="Write RecBole .inter/.item files with item text as a token_seq field 'words',\n"
        "preprocessed as in the FBSM paper: stop words removed, words stemmed, terms found in fewer\n"
        "than --min-df items or in more than --max-df of the items dropped.",
        epilog=EPILOG,
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
