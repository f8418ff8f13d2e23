"""Converters to RecBole atomic datasets (.inter, .item with `words` and optional `tags` token_seq fields, and
`NAME.analyzer.json` for serving): `convert_ctr` (CiteULike's CTR format), `convert_text` (CSV/TSV); docs/convert.md."""

from recbole_fbsm.data.analyzer import TextAnalyzer, WholeTokenAnalyzer, read_analyzer

from .atomic import ConversionError, ConversionResult
from .ctr import convert_ctr, ctr_paths
from .text import convert_text, default_min_df

__all__ = [
    "ConversionError",
    "ConversionResult",
    "TextAnalyzer",
    "WholeTokenAnalyzer",
    "convert_ctr",
    "convert_text",
    "ctr_paths",
    "default_min_df",
    "read_analyzer",
]
