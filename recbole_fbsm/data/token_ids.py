"""Token -> internal id tables built on first use.

RecBole's ``field2token_id`` holds one Python dict per field; for 2 million items and half a million users
those dicts take about 400 MB and seconds to build, though training never reads them (the ids are
numbered from sorted codes; only serving and RecBole's ``token2id`` look tokens up)."""

from collections.abc import Mapping
from functools import cached_property


class TokenIds(Mapping):
    """``{token: index}`` of a token array (``field2id_token[field]``), as a read-only mapping whose dict is
    built by the first lookup."""

    def __init__(self, tokens):
        self._tokens = tokens

    @cached_property
    def _table(self):
        return {str(token): index for index, token in enumerate(self._tokens)}

    def __getitem__(self, token):
        return self._table[token]

    def __iter__(self):
        return iter(self._table)

    def __len__(self):
        return len(self._tokens)
