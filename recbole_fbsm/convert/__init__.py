"""Converters that write RecBole atomic datasets (.inter + .item with a `words` token_seq field, and
optionally a `tags` field of whole tags) plus `NAME.analyzer.json`, the analyzer that serving applies
to raw text of new items.

`convert_ctr` reads the CTR/CDL format of the public CiteULike datasets, `convert_text` reads
CSV/TSV interactions and item texts; both apply the paper's feature preprocessing and write the
dataset atomically. Command line: `recbole-fbsm convert --help`.
"""

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
