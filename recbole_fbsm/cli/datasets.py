"""``recbole-fbsm download`` and ``recbole-fbsm convert``: write a RecBole dataset from a public one or from the
user's files (docs/datasets.md, docs/convert.md); the converters and pandas load once the options are read."""

import sys
from pathlib import Path

from recbole_fbsm.cli.options import parser
from recbole_fbsm.config.conversion import CTR_FILES, CTR_TAG_FILES
from recbole_fbsm.config.datasets import run_command
from recbole_fbsm.errors import ColdStartError


def convert(argv, prog="recbole-fbsm convert"):
    convert_parser = parser("convert", prog)
    args = vars(convert_parser.parse_args(argv))  # convert_ctr's or convert_text's keywords, but these:
    command, src, tags = args.pop("command"), args.pop("src", None), args.pop("with_tags", False)
    args["out_dir"] = args.pop("out")
    if command == "ctr":  # each file: its option, else the public datasets' name under --src
        files = CTR_FILES | (CTR_TAG_FILES if tags or args["tag_item"] or args["tag_names"] else {})
        args |= {key: args[key] or (src and Path(src) / file) for key, file in files.items()}
        missing = [f"--{key.replace('_', '-')}" for key in files if not args[key]]
        if missing:
            convert_parser.error(f"ctr: give --src or all of {', '.join(missing)}")
    from recbole_fbsm.convert import convert_ctr, convert_text

    try:
        result = (convert_ctr if command == "ctr" else convert_text)(**args)
    except ColdStartError as error:  # a ConversionError too
        print(f"error: {error}", file=sys.stderr)
        return 2
    print(result.summary())
    return 0


def download(argv, prog="recbole-fbsm download"):
    """``recbole-fbsm download NAME``: the files, checked and converted; then a summary and the next command."""
    args = parser("download", prog).parse_args(argv)
    from recbole_fbsm.convert.download import download_dataset

    try:
        result = download_dataset(args.name, args.out, args.mirror, args.overwrite, args.timeout)
    except KeyboardInterrupt:
        interrupted = f"download of {args.name} interrupted; nothing was written under {args.out}/{args.name}"
        print(f"error: {interrupted}, run the same command to resume.", file=sys.stderr)
        return 2
    except ColdStartError as error:  # a ConversionError or a DownloadError too
        print(f"error: {error}", file=sys.stderr)
        return 2
    print(result.summary())
    print(f"next: {run_command(args.name, args.out)}")
    return 0
