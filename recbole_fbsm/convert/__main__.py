"""Command line: `recbole-fbsm convert {ctr,text} ...` (see --help and docs/convert.md)."""

from __future__ import annotations

import logging
import sys
from pathlib import Path

from recbole_fbsm.arguments.convert import build_parser
from recbole_fbsm.config.conversion import CTR_FILES, CTR_TAG_FILES

from .atomic import ConversionError
from .ctr import convert_ctr
from .text import convert_text


def main(argv: list[str] | None = None, prog="recbole-fbsm convert") -> int:
    parser = build_parser(prog)
    args = parser.parse_args(argv)
    logging.getLogger("recbole_fbsm.convert").setLevel(logging.ERROR)  # the summary below reports skips
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


if __name__ == "__main__":
    sys.exit(main())
