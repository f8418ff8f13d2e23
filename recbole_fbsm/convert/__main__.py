"""Command line: `recbole-fbsm convert {ctr,text} ...` (see --help and docs/convert.md)."""

from __future__ import annotations

import logging
import sys

from recbole_fbsm.arguments.convert import build_parser
from recbole_fbsm.config.conversion import CTR_FILES, CTR_TAG_FILES

from .atomic import ConversionError
from .ctr import convert_ctr, ctr_paths
from .text import convert_text


def main(argv: list[str] | None = None, prog="recbole-fbsm convert") -> int:
    parser = build_parser(prog)
    args = parser.parse_args(argv)
    logging.getLogger("recbole_fbsm.convert").setLevel(logging.ERROR)  # the summary below reports skips
    common = dict(
        min_df=args.min_df,
        max_df=args.max_df,
        stem=args.stem,
        stopwords=args.stopwords,
        overwrite=args.overwrite,
        tags_min_df=args.tags_min_df,
        tags_max_df=args.tags_max_df,
    )
    try:
        if args.command == "ctr":
            tags = args.tags or bool(args.tag_item or args.tag_names)
            paths = ctr_paths(args.src, tags=tags) if args.src else {}
            given = CTR_FILES | CTR_TAG_FILES
            paths |= {key: getattr(args, key) for key in given if getattr(args, key)}
            wanted = list(CTR_FILES) + (list(CTR_TAG_FILES) if tags else [])
            missing = [f"--{key.replace('_', '-')}" for key in wanted if key not in paths]
            if missing:
                parser.error(f"ctr: give --src or all of {', '.join(missing)}")
            result = convert_ctr(name=args.name, out_dir=args.out, **paths, **common)  # paths: convert_ctr's keywords
        else:
            result = convert_text(
                args.inter,
                args.items,
                args.name,
                args.out,
                sep=args.sep,
                threshold=args.threshold,
                header=args.header,
                tags=args.tags,
                tag_sep=args.tag_sep,
                **common,
            )
    except ConversionError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(result.summary())
    return 0


if __name__ == "__main__":
    sys.exit(main())
