"""``recbole-fbsm download`` and ``recbole-fbsm convert``: write a RecBole dataset from a public one or from the
user's files (docs/datasets.md, docs/convert.md); the converters and pandas load once the options are read."""

import sys
from pathlib import Path

from recbole_fbsm.cli.options import parser
from recbole_fbsm.config.conversion import CTR_FILES, CTR_TAG_FILES
from recbole_fbsm.config.datasets import DATASETS, SOURCES, run_command
from recbole_fbsm.errors import ColdStartError


def convert(argv, prog="recbole-fbsm convert"):
    convert_parser = parser("convert", prog)
    args = convert_parser.parse_args(argv)
    from recbole_fbsm.convert import convert_ctr, convert_text

    keys = ("min_df", "max_df", "stem", "stopwords", "overwrite", "tags_min_df", "tags_max_df", "name")
    common = {key: getattr(args, key) for key in keys} | {"out_dir": args.out}
    try:
        if args.command == "ctr":
            tags = args.tags or bool(args.tag_item or args.tag_names)
            files = CTR_FILES | (CTR_TAG_FILES if tags else {})  # convert_ctr's keywords: the public datasets' names
            paths = {key: Path(args.src) / file for key, file in files.items()} if args.src else {}
            paths |= {key: getattr(args, key) for key in CTR_FILES | CTR_TAG_FILES if getattr(args, key)}
            missing = [f"--{key.replace('_', '-')}" for key in files if key not in paths]
            if missing:
                convert_parser.error(f"ctr: give --src or all of {', '.join(missing)}")
            result = convert_ctr(**paths, **common)
        else:
            common |= {key: getattr(args, key) for key in ("sep", "threshold", "header", "tags", "tag_sep")}
            result = convert_text(args.inter, args.items, **common)
    except ColdStartError as error:  # a ConversionError too
        print(f"error: {error}", file=sys.stderr)
        return 2
    print(result.summary())
    return 0


def download(argv, prog="recbole-fbsm download"):
    """``recbole-fbsm download NAME``: the files, checked and converted; then a summary and the next command."""
    args = parser("download", prog).parse_args(argv)
    from recbole_fbsm.convert.download import download_dataset, redact

    try:
        result = download_dataset(args.name, args.out, args.mirror, args.overwrite, args.timeout)
    except KeyboardInterrupt:
        interrupted = f"download of {args.name} interrupted; nothing was written under {args.out}/{args.name}"
        print(f"error: {interrupted}, run the same command to resume.", file=sys.stderr)
        return 2
    except ColdStartError as error:  # a ConversionError or a DownloadError too
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
