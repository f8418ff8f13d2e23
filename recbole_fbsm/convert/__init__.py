"""Converters to RecBole atomic datasets (.inter, .item with `words` and optional `tags` token_seq fields, and
`NAME.analyzer.json` for serving): `convert_ctr` (CiteULike's CTR format), `convert_text` (CSV/TSV); docs/convert.md."""

from .ctr import convert_ctr
from .text import ConversionError, ConversionResult, convert_text

__all__ = ["ConversionError", "ConversionResult", "convert_ctr", "convert_text"]
