"""What a ``.fbsm`` file must be before any of it reaches native code (docs/serve.md, "Format, checksum and what
is validated"): ``ARTIFACT`` declares every field once, ``check`` walks it, then the checksum and the value rules."""

import hashlib
import math
import re
import struct
from collections.abc import Callable
from typing import NamedTuple

import numpy as np
import pandas as pd
import pyarrow as pa
import torch
import yaml
from recbole.utils import FeatureType

from recbole_fbsm.config.paths import PROPERTIES_DIR
from recbole_fbsm.config.schema import MODEL, PLUGIN_SETTINGS, SPECS, WEIGHTING_ALIASES, WEIGHTINGS
from recbole_fbsm.data.analyzer import analyzer_records
from recbole_fbsm.errors import ColdStartError

# an artifact stores the weighting its features were fitted with: an alias ("none") is already resolved
FITTED_WEIGHTINGS = tuple(w for w in WEIGHTINGS if w not in WEIGHTING_ALIASES)
# settings whose check depends on the machine, not on the artifact (a run on 16 cores kept torch_threads 16)
MACHINE_SETTINGS = ("torch_threads", "encoding", "data_path", "checkpoint_dir")
MAX_PLAIN_DEPTH = 32


class ArtifactError(ColdStartError):
    """One line: the file, the field, what was expected and what is there."""

    def __init__(self, path, where, message):
        super().__init__(f"model artifact {path}: {where}: {message}" if where else f"model artifact {path}: {message}")


class Invalid(Exception):
    """(where, message) raised by a rule; ``validate`` turns it into an ``ArtifactError`` naming the file."""


def _got(value):
    if isinstance(value, torch.Tensor):
        return f"a tensor of dtype {_dtype(value.dtype)} and shape {tuple(value.shape)}"
    if isinstance(value, (dict, list, tuple)):
        return f"{type(value).__name__} of {len(value)}"
    shown = repr(value)
    return shown if len(shown) <= 60 else shown[:57] + "..."


def _dtype(dtype):
    return str(dtype).removeprefix("torch.")


class Kind(NamedTuple):
    """A plain value: ``test(value)`` true, else "expected ``expected``"."""

    expected: str
    test: Callable


class Tensor(NamedTuple):
    """A strided tensor of ``dtypes`` (one or a tuple) and ``shape`` (named dimensions, "name+1", None: any
    length) whose contents pass the ``check_values`` rules ``values`` after the checksum."""

    dtypes: object
    shape: tuple
    values: tuple = ()


class ListOf(NamedTuple):
    item: object
    length: str = None  # a named dimension


class MapOf(NamedTuple):
    item: object  # text keys


class Optional(NamedTuple):
    rule: object  # or None


class Context:
    """The named dimensions defined so far (and by which field), and the value rules to run after the checksum."""

    def __init__(self):
        self.dims, self.defined_by, self.values = {}, {}, []

    def dimension(self, name, size, where):
        base, _, plus = name.partition("+")
        size = size - int(plus or 0)
        if base not in self.dims:
            self.dims[base], self.defined_by[base] = size, where
        elif self.dims[base] != size:
            source = f"{base} = {self.dims[base]} as {self.defined_by[base]} gives"
            if plus:
                expected = f"length {self.dims[base] + int(plus)} ({base} + {plus}, {source}), got {size + int(plus)}"
                raise Invalid(where, f"expected {expected}")
            raise Invalid(where, f"expected {base} = {self.dims[base]} (as {self.defined_by[base]} gives), got {size}")


def check(rule, value, where, ctx):
    """``value`` against its ``rule``: a dict is a record of exactly its keys ("key?": may be absent), a function
    a rule across its own fields."""
    match rule:
        case Kind(expected, test):
            if not test(value):
                raise Invalid(where, f"expected {expected}, got {_got(value)}")
        case Optional(inner):
            if value is not None:
                check(inner, value, where, ctx)
        case ListOf(item, length):
            if not isinstance(value, (list, tuple)):
                raise Invalid(where, f"expected a list, got {_got(value)}")
            if length is not None:
                ctx.dimension(length, len(value), where)
            for k, entry in enumerate(value):
                if not (isinstance(item, Kind) and item.test(entry)):  # the path text only for a failing entry
                    check(item, entry, f"{where}[{k}]", ctx)
        case MapOf(item):
            for key, entry in _mapping(value, where).items():
                check(item, entry, f"{where}.{key}", ctx)
        case dict():
            names = [key.removesuffix("?") for key in rule]
            unknown = [key for key in _mapping(value, where) if key not in names]
            if unknown:
                raise Invalid(where, f"unknown key(s) {unknown[:5]}, not among the {len(rule)} this release writes")
            missing = [key for key in rule if key not in value and not key.endswith("?")]
            if missing:
                raise Invalid(where, f"key(s) {missing} missing")
            for key, entry in zip(names, rule.values()):
                if key in value:
                    check(entry, value[key], f"{where}.{key}" if where else key, ctx)
        case Tensor(dtypes, shape, values):
            dtypes = dtypes if isinstance(dtypes, tuple) else (dtypes,)
            if not isinstance(value, torch.Tensor) or value.layout != torch.strided:
                raise Invalid(where, f"expected a tensor, got {_got(value)}")
            if value.dtype not in dtypes:
                raise Invalid(where, f"expected dtype {' or '.join(map(_dtype, dtypes))}, got {_dtype(value.dtype)}")
            if value.dim() != len(shape):
                raise Invalid(where, f"expected {len(shape)} dimension(s), got shape {tuple(value.shape)}")
            for size, name in zip(value.shape, shape):
                if name is not None:
                    ctx.dimension(name, int(size), where)
            ctx.values += [(value_rule, value, where) for value_rule in values]
        case _:
            rule(value, where, ctx)


def _mapping(value, where):
    if not isinstance(value, dict):
        raise Invalid(where, f"expected a mapping, got {_got(value)}")
    key = next((key for key in value if not isinstance(key, str)), None)
    if key is not None:
        raise Invalid(where, f"expected text keys, got {_got(key)}")
    return value


def plain_data(value, where, ctx, depth=0):
    """JSON-like data only (mappings with text keys, lists, text, numbers, flags, None): no tensor, bounded depth."""
    if depth > MAX_PLAIN_DEPTH:
        raise Invalid(where, f"nested deeper than {MAX_PLAIN_DEPTH} levels")
    if isinstance(value, dict):
        for key, item in _mapping(value, where).items():
            plain_data(item, f"{where}.{key}", ctx, depth + 1)
    elif isinstance(value, (list, tuple)):
        for k, item in enumerate(value):
            plain_data(item, f"{where}[{k}]", ctx, depth + 1)
    elif not (value is None or isinstance(value, (str, bool, int, float))):
        raise Invalid(where, f"expected plain data (text, numbers, lists, mappings), got {_got(value)}")


def csr_arrays(rows, cols, data_dtypes):
    """A scipy CSR matrix's arrays (``model_file.csr_record``) of ``rows`` x ``cols`` named dimensions."""
    fields = {
        "indptr": Tensor(torch.int64, (f"{rows}+1",), ("pointers",)),
        "indices": Tensor((torch.int32, torch.int64), (None,), (("range", 0, cols),)),
        "data": Tensor(data_dtypes, (None,), ("finite",)),
        "shape": ListOf(COUNT),
    }

    def rule(value, where, ctx):
        check(fields, value, where, ctx)
        shape, entries = value["shape"], len(value["indices"])
        if len(shape) != 2:
            raise Invalid(f"{where}.shape", f"expected [{rows}, {cols}], got {shape}")
        ctx.dimension(rows, shape[0], f"{where}.shape")
        ctx.dimension(cols, shape[1], f"{where}.shape")
        if len(value["data"]) != entries:
            raise Invalid(f"{where}.data", f"expected as many values as indices ({entries}), got {len(value['data'])}")
        if entries > shape[0] * shape[1]:
            raise Invalid(f"{where}.indices", f"{entries} entries in a {shape[0]} x {shape[1]} matrix")
        ctx.values.append((("ends at", entries), value["indptr"], f"{where}.indptr"))

    return rule


def field_tokens(value, where, ctx):
    """One field's vocabulary: version 2's {utf8, lengths} tensors, or version 1's list of strings."""
    if isinstance(value, list):
        check(ListOf(TEXT), value, where, ctx)
    else:
        check(TOKEN_BYTES, value, where, ctx)
        ctx.values.append((("covers", len(value["utf8"])), value["lengths"], f"{where}.lengths"))


def vocabulary_fields(value, where, ctx):
    """The fields' tokens; the users' and the items' define the dimensions ``users`` and ``items``."""
    check(VOCABULARY, value, where, ctx)
    for role, dim in (("uid_field", "users"), ("iid_field", "items")):
        name = value[role]
        if name not in value["tokens"]:
            raise Invalid(f"{where}.tokens", f"no tokens of the {role} {name!r}")
        ctx.dimension(dim, _token_count(value["tokens"][name]), f"{where}.tokens.{name}")


def _token_count(record):
    return len(record) if isinstance(record, list) else len(record["lengths"])


def _is_int(value):
    return isinstance(value, int) and not isinstance(value, bool)


def _is_real(value):
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def choice(*options):
    return Kind(f"one of {', '.join(map(repr, options))}", lambda v: isinstance(v, str) and v in options)


TEXT = Kind("text", lambda v: isinstance(v, str))
FLAG = Kind("a flag", lambda v: isinstance(v, bool))
REAL = Kind("a finite number", _is_real)
NON_NEGATIVE = Kind("a finite number >= 0", lambda v: _is_real(v) and v >= 0)
COUNT = Kind("an integer >= 0", lambda v: _is_int(v) and v >= 0)
SHA256 = Kind("64 hexadecimal digits", lambda v: isinstance(v, str) and re.fullmatch(r"[0-9a-f]{64}", v) is not None)
# state_dict entries: any dtype and shape here; check_state_dict compares them with the rebuilt model's
ANY_TENSOR = Kind("a tensor", lambda v: isinstance(v, torch.Tensor) and v.layout == torch.strided)
ITEM_IDS = Tensor(torch.int64, (None,), (("range", 1, "items"),))
FEATURE_STATISTIC = Optional(Tensor(torch.float64, ("fields",), (">= 0",)))
TOKEN_BYTES = {"utf8": Tensor(torch.uint8, (None,)), "lengths": Tensor(torch.int64, (None,), ("lengths",))}
VOCABULARY = {
    "dataset": TEXT,
    "uid_field": TEXT,
    "iid_field": TEXT,
    "tokens": MapOf(field_tokens),
    "types": MapOf(choice(*(kind.value for kind in FeatureType))),
}


def split(name):
    """A validation or test split's items and its likes, a user and an item each (None: no such split)."""
    return Optional(
        {
            "items": ITEM_IDS,
            "users_of_likes": Tensor(torch.int64, (f"{name} likes",), (("range", 1, "users"),)),
            "items_of_likes": Tensor(torch.int64, (f"{name} likes",), (("range", 1, "items"),)),
        }
    )


# The artifact, one entry per field (``model_file.build_artifact`` writes them): a new field is one line here.
# A dict is a record of exactly its keys, checked in order ("key?": may be absent); Optional: None allowed.
ARTIFACT = {
    "format": TEXT,
    "format_version": COUNT,
    "package_version": TEXT,
    "model": TEXT,
    "settings": MapOf(plain_data),
    "data": Optional(plain_data),
    "vocabulary": vocabulary_fields,
    "features": {
        "names": ListOf(TEXT, length="features"),
        "fields": ListOf(TEXT, length="fields"),
        "dense_fields": ListOf(TEXT),
        "matrix": csr_arrays("items", "features", torch.float64),
        # content columns: the first ones of matrix; identity columns (hybrid FBSM) follow them
        "column_weights": Tensor(torch.float64, ("content_features",), (">= 0",)),
        "column_field": Tensor(torch.int64, ("content_features",), (("range", 0, "fields"),)),
        "field_scales": FEATURE_STATISTIC,
        "source_columns": Tensor(torch.int64, ("content_features",), (("range", 0, "source_columns"),)),
        "average_lengths": FEATURE_STATISTIC,
        "mean_square_norms": Optional(Tensor(torch.float64, (None,), (">= 0",))),
        "weighting": choice(*FITTED_WEIGHTINGS),
        "normalize": FLAG,
        "bm25_k1": Optional(NON_NEGATIVE),
        "bm25_b": Optional(Kind("a number from 0 to 1", lambda v: _is_real(v) and 0 <= v <= 1)),
        "shrink": NON_NEGATIVE,
        # artifacts before the hybrid FBSM have neither
        "identity_items?": Optional(Tensor(torch.int64, ("identity",), (("range", 1, "items"), "distinct"))),
        "identity_weight?": Optional(NON_NEGATIVE),
    },
    "likes": csr_arrays("users", "items", (torch.float32, torch.float64)),
    "training_items": Tensor(torch.int64, ("training_items",), (("range", 1, "items"), "distinct")),
    "warm_shapes": Optional(ListOf(ListOf(COUNT))),
    "split": {"valid": split("valid"), "test": split("test")},
    "analyzer": Optional(plain_data),
    "state_dict": MapOf(ANY_TENSOR),
    # RecBole's load_other_parameter sets each entry as an attribute of the model: none of the served models
    # keeps one, so a value could only overwrite what the model built (its F, its R)
    "other_parameter": Kind("None (the served models keep no other parameter)", lambda v: v is None),
    # which epoch validation kept (-1: the untrained start) and the scores behind it (model_file.training_record);
    # absent in older files
    "training?": Optional(
        {
            "kept_epoch": Optional(Kind("a whole number of at least -1", lambda v: _is_int(v) and v >= -1)),
            "valid_metric": TEXT,
            "kept_valid_score": Optional(REAL),
            "start_valid_score": Optional(REAL),
        }
    ),
    # each item's title, where a feature field is a title or name (model_file.titles_record); absent in older files
    "titles?": Optional({"field": TEXT, "items": ListOf(TEXT, length="items")}),
    # versions 1 and 2 carry no checksum
    "integrity?": {"sha256": SHA256, "tensor_bytes": COUNT},
}


def check_across_fields(content, ctx):
    """The vocabulary holds the users', the items' and each feature field's tokens, a type per feature field;
    the warm tables' shapes are those of the stored tables."""
    vocabulary, features = content["vocabulary"], content["features"]
    fields = list(features["fields"])
    expected = {vocabulary["uid_field"], vocabulary["iid_field"], *fields}
    if set(vocabulary["tokens"]) != expected:
        raise Invalid(
            "vocabulary.tokens", f"expected the tokens of {sorted(expected)}, got {sorted(vocabulary['tokens'])}"
        )
    if set(vocabulary["types"]) != set(fields):
        raise Invalid(
            "vocabulary.types", f"expected the types of the feature fields {fields}, got {sorted(vocabulary['types'])}"
        )
    if not set(features["dense_fields"]) <= set(fields):
        raise Invalid(
            "features.dense_fields",
            f"expected some of the feature fields {fields}, got {list(features['dense_fields'])}",
        )
    # source_columns index the fields' vocabularies laid side by side ([PAD] left out)
    ctx.dimension("source_columns", sum(_token_count(vocabulary["tokens"][f]) - 1 for f in fields), "vocabulary.tokens")
    shapes, weights = content.get("warm_shapes"), content["state_dict"]
    if shapes is None:
        return
    stored = [list(weights[k].shape) if k in weights else None for k in ("warm_user_embedding", "warm_item_embedding")]
    if [list(s) for s in shapes] != stored or stored[0][0] != ctx.dims["users"] or stored[1][0] != ctx.dims["items"]:
        raise Invalid(
            "warm_shapes",
            f"expected the warm tables' shapes in state_dict ({stored}) with "
            f"{ctx.dims['users']} users and {ctx.dims['items']} items, got {shapes}",
        )


def check_values(rule, array, where, ctx):
    """One value rule of the table on a tensor's contents (as numpy, after the checksum)."""
    match rule:
        case "pointers":
            if len(array) and array[0] != 0:
                raise Invalid(where, f"expected the first pointer 0, got {int(array[0])}")
            drops = np.flatnonzero(np.diff(array) < 0)
            if len(drops):
                k = int(drops[0])
                raise Invalid(
                    where,
                    f"expected non-decreasing pointers; position {k + 1} goes down "
                    f"({int(array[k])} -> {int(array[k + 1])})",
                )
        case ("ends at", entries):
            if len(array) and int(array[-1]) != entries:
                raise Invalid(where, f"expected the last pointer to be the {entries} entries, got {int(array[-1])}")
        case ("range", low, dim):
            high = ctx.dims[dim]
            outside = np.flatnonzero((array < low) | (array >= high))
            if len(outside):
                raise Invalid(
                    where,
                    f"value {int(array[outside[0]])} at position {int(outside[0])} is outside "
                    f"{low} to {high - 1} ({dim} = {high}); {len(outside)} such value(s)",
                )
        case "finite" | ">= 0":
            bad = np.flatnonzero(~np.isfinite(array))
            if len(bad):
                raise Invalid(where, f"{len(bad)} non-finite value(s) (e.g. {array[bad[0]]} at position {int(bad[0])})")
            if rule == ">= 0" and len(array) and array.min() < 0:
                raise Invalid(where, f"expected values >= 0, got {array.min()}")
        case "distinct":
            if len(np.unique(array)) != len(array):
                raise Invalid(where, "expected distinct ids, some appear more than once")
        case "lengths":
            if len(array) and array.min() < 0:
                k = int(np.argmin(array))
                raise Invalid(where, f"token {k} has length {int(array[k])}; expected lengths >= 0")
        case ("covers", n_bytes):
            if int(array.sum()) != n_bytes:
                raise Invalid(where, f"the token lengths add up to {int(array.sum())} bytes, the tokens hold {n_bytes}")
        case _:
            raise ValueError(f"no value rule {rule!r} (a misspelt rule in ARTIFACT would check nothing)")


def check_utf8(record, where):
    """Each token of a version 2+ record is UTF-8 text, checked as a whole: the bytes decode and no token starts
    inside a character (a continuation byte, 0b10xxxxxx)."""
    data, lengths = record["utf8"].numpy(), record["lengths"].numpy()
    ends = np.cumsum(lengths)
    starts = ends - lengths
    try:
        data.tobytes().decode("utf-8")
        position = None
    except UnicodeDecodeError as error:
        position, reason = error.start, error.reason
    if position is None and len(data):
        inside = np.flatnonzero((lengths > 0) & ((data[np.minimum(starts, len(data) - 1)] & 0xC0) == 0x80))
        if len(inside):
            position, reason = int(starts[inside[0]]), "a token starts inside a character"
    if position is not None:
        token = int(np.searchsorted(ends, position, side="right"))
        raise Invalid(f"{where}.utf8", f"token {token} is not UTF-8 ({reason}, byte {position})")


def decode_tokens(record, where):
    """A field's tokens as strings (version 1: the list itself), checked: UTF-8, RecBole's padding token first,
    none twice (a token's second id would never be reached)."""
    if isinstance(record, list):
        tokens = np.asarray(record, dtype=object)
    else:
        check_utf8(record, where)  # then pyarrow decodes the checked bytes, without a Python loop
        lengths = record["lengths"].numpy()
        offsets = pa.py_buffer(np.concatenate(([0], np.cumsum(lengths))))
        array = pa.LargeStringArray.from_buffers(len(lengths), offsets, pa.py_buffer(record["utf8"].numpy()))
        tokens = array.to_numpy(zero_copy_only=False)
    if not len(tokens) or tokens[0] != "[PAD]":
        raise Invalid(
            where, f"expected RecBole's padding token '[PAD]' first, got {_got(tokens[0] if len(tokens) else None)}"
        )
    repeated = pd.Index(tokens).duplicated()
    if repeated.any():
        raise Invalid(where, f"token {tokens[np.flatnonzero(repeated)[0]]!r} appears more than once")
    return tokens


def check_tokens_and_names(content, ctx):
    """Every vocabulary is UTF-8; each feature name is its column's token (``source_columns``): a renamed or
    swapped name would put a learned weight on another token."""
    vocabulary, features = content["vocabulary"], content["features"]
    fields = list(features["fields"])
    for name, record in vocabulary["tokens"].items():
        if name not in fields and not isinstance(record, list):
            check_utf8(record, f"vocabulary.tokens.{name}")
    tokens = {name: decode_tokens(vocabulary["tokens"][name], f"vocabulary.tokens.{name}") for name in fields}
    column_field, source = features["column_field"].numpy(), features["source_columns"].numpy()
    sparse = ~np.isin(np.asarray(fields, dtype=object)[column_field], list(features["dense_fields"]))
    # the fields' tokens side by side ([PAD] left out), as source_columns number them; dense fields: none
    side_by_side = np.concatenate(
        [np.asarray([f"{f}:"], dtype=object) + tokens[f][1:] for f in fields] + [np.zeros(0, dtype=object)]
    )
    names = check_identity_names(content, np.asarray(features["names"], dtype=object), ctx)
    expected = np.full(len(names), None, dtype=object)
    within = sparse & (source < len(side_by_side))
    expected[within] = side_by_side[source[within]]
    wrong = np.flatnonzero(sparse & (expected != names))
    if len(wrong):
        k = int(wrong[0])
        raise Invalid(f"features.names[{k}]", f"expected {expected[k]!r} (the token of its column), got {names[k]!r}")
    if not np.array_equal(np.lexsort((names.astype(str), column_field)), np.arange(len(names))):
        raise Invalid("features.names", "expected the columns sorted by field and token, as the features are built")


def check_identity_names(content, names, ctx):
    """The identity columns (hybrid FBSM) follow the content columns, one per item of ``identity_items``, named
    "identity:TOKEN" by that item's token; returns the content columns' names."""
    features = content["features"]
    identity = features.get("identity_items")
    n_identity = 0 if identity is None else len(identity)
    if (identity is None) != (features.get("identity_weight") is None):
        raise Invalid("features.identity_weight", "expected identity_items and identity_weight both or neither")
    n_content = ctx.dims["content_features"]
    if n_content + n_identity != len(names):
        raise Invalid(
            "features.names", f"expected {n_content} content and {n_identity} identity columns, got {len(names)} names"
        )
    if n_identity:
        iid = content["vocabulary"]["iid_field"]
        items = decode_tokens(content["vocabulary"]["tokens"][iid], f"vocabulary.tokens.{iid}")
        expected = np.asarray(["identity:"], dtype=object) + items[identity.numpy()]
        wrong = np.flatnonzero(expected != names[n_content:])
        if len(wrong):
            k = int(wrong[0])
            raise Invalid(
                f"features.names[{n_content + k}]",
                f"expected {expected[k]!r} (the identity of item {int(identity[k])}), got {names[n_content + k]!r}",
            )
    return names[:n_content]


def check_settings_and_analyzer(content, ctx):
    """The settings pass the settings table's checks; the analyzer is a converter's."""
    for key, value in content["settings"].items():
        if key in SPECS and key not in MACHINE_SETTINGS and value is not None:
            problem = SPECS[key](value)
            if problem:
                raise Invalid(f"settings.{key}", f"expected {problem}, got {_got(value)}")
    if content.get("analyzer") is not None:
        try:
            analyzer_records(content["analyzer"])
        except (ValueError, KeyError, TypeError, AttributeError) as error:
            raise Invalid(
                "analyzer", f"not a converter's analyzer document ({type(error).__name__}: {error})"
            ) from None


def _tensors(value):
    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, (dict, list, tuple)):
        for item in value.values() if isinstance(value, dict) else value:
            yield from _tensors(item)


def tensor_bytes(content):
    """Bytes of the storages of the artifact's tensors, each storage once and whole (loading would read it)."""
    storages = {}
    for tensor in _tensors({k: v for k, v in content.items() if k != "integrity"}):
        storage = tensor.untyped_storage()
        storages[(storage.data_ptr(), storage.nbytes())] = storage.nbytes()
    return sum(storages.values())


def content_digest(content):
    """SHA-256 of the content without its ``integrity`` entry, in one canonical order (not pickle's layout)."""
    digest = hashlib.sha256()

    def feed(value):
        if isinstance(value, torch.Tensor):
            value = value.detach().cpu().contiguous()
            header = f"T{str(value.dtype)}{tuple(value.shape)}".encode()
            digest.update(struct.pack("<Q", len(header)) + header)
            if value.numel():
                digest.update(value.reshape(-1).view(torch.uint8).numpy())
        elif isinstance(value, dict):
            digest.update(b"D" + struct.pack("<Q", len(value)))
            for key in sorted(value, key=str):
                feed(str(key))
                feed(value[key])
        elif isinstance(value, (list, tuple)):
            digest.update(b"L" + struct.pack("<Q", len(value)))
            for item in value:
                feed(item)
        else:
            text = f"{type(value).__name__}:{value!r}".encode("utf-8", "surrogatepass")
            digest.update(b"V" + struct.pack("<Q", len(text)) + text)

    feed({k: v for k, v in content.items() if k != "integrity"})
    return digest.hexdigest()


def seal(content):
    """``content`` with its ``integrity`` entry: the SHA-256 and the tensors' bytes."""
    body = {k: v for k, v in content.items() if k != "integrity"}
    return {**body, "integrity": {"sha256": content_digest(body), "tensor_bytes": tensor_bytes(body)}}


def validate(content, path, checksum=True):
    """Check ``content`` in docs/serve.md's order; an ``ArtifactError`` names the first problem (``checksum``:
    False for versions 1 and 2, which carry none)."""
    ctx = Context()
    try:
        check(ARTIFACT, content, "", ctx)
        check_across_fields(content, ctx)
        integrity = content.get("integrity")
        if checksum and integrity is None:
            raise Invalid("integrity", "missing: a version 3 artifact carries its SHA-256")
        if integrity is not None:
            held = tensor_bytes(content)
            if held != integrity["tensor_bytes"]:
                raise Invalid(
                    "integrity.tensor_bytes",
                    f"the file declares {integrity['tensor_bytes']} bytes of "
                    f"tensors and holds {held}: refused before reading them",
                )
            if content_digest(content) != integrity["sha256"]:
                raise Invalid(
                    "",
                    "its SHA-256 is not the one it was written with: the file was damaged or edited "
                    "since (copy it again, or export it again from its checkpoint)",
                )
        for rule, tensor, where in ctx.values:
            check_values(rule, tensor.numpy(), where, ctx)
        check_settings_and_analyzer(content, ctx)
        check_tokens_and_names(content, ctx)
    except Invalid as error:
        raise ArtifactError(path, *error.args) from None


def check_state_dict(state_dict, model, path):
    """The artifact's parameters against the rebuilt ``model``'s: the same keys, shapes and exact dtypes, and
    finite values, before ``load_state_dict`` could cast them or copy a NaN into every score."""
    expected = model.state_dict()
    if set(state_dict) != set(expected):
        raise ArtifactError(
            path,
            "state_dict",
            f"a {type(model).__name__} has parameters {sorted(expected)}; the file has "
            f"{sorted(state_dict)} (is it another model's artifact?)",
        )
    for key, value in expected.items():
        stored = state_dict[key]
        if stored.dtype != value.dtype or stored.shape != value.shape:
            raise ArtifactError(path, f"state_dict.{key}", f"expected {_got(value)}, got {_got(stored)}")
        if stored.is_floating_point() and not bool(torch.isfinite(stored).all()):
            bad = int((~torch.isfinite(stored)).sum())
            raise ArtifactError(
                path, f"state_dict.{key}", f"{bad} non-finite value(s) (NaN or inf): a model with them scores nothing"
            )


# Settings that size a model's parameters, and the dimension of a stored parameter each must equal: checked
# before the model is built, so that a rank of 10^9 written into the settings is refused, not allocated.
# (setting, parameter, dimension); "hidden_sizes[k]": every entry k >= 1 of the list, {j} = k - 1.
MODEL_SIZES = {
    "FBSM": (("rank", "V", 1),),
    "UFSM": (("n_functions", "W", 0), ("n_functions", "M", 1)),
    "DropoutNet": (
        ("hidden_sizes[0]", "item_content.weight", 1),
        ("hidden_sizes[k]", "item_layers.{j}.linear.weight", 0),
        ("output_size", "item_output.weight", 0),
    ),
    "Heater": (("n_experts", "gate.weight", 1), ("output_size", "user_output.weight", 0)),
    "ALDI": (("hidden_size", "item_hidden.weight", 1),),
}


def _sized_settings(settings, entry):
    """(name, value, parameter) of each setting an entry of ``MODEL_SIZES`` checks."""
    name, parameter, _ = entry
    if not name.endswith("]"):
        return [(name, settings.get(name), parameter)]
    key, _, index = name[:-1].partition("[")
    values = settings.get(key) or []
    if index == "0":
        return [(f"{key}[0]", values[0] if values else None, parameter)]
    return [(f"{key}[{k}]", values[k], parameter.format(j=k - 1)) for k in range(1, len(values))]


def check_model_settings(content, path):
    """The settings a model of the artifact's name is built from (``properties/model/NAME.yaml``) are all there
    (a UFSM's artifact labelled FBSM has no ``rank``) and size its stored parameters."""
    name = content["model"]
    model_file = PROPERTIES_DIR / "model" / f"{name}.yaml"
    if not model_file.is_file():
        return  # not a plugin model: the caller refuses it by name
    defaults = yaml.safe_load(model_file.read_text(encoding="utf-8")) or {}
    needed = [
        k for k, v in defaults.items() if k in PLUGIN_SETTINGS and PLUGIN_SETTINGS[k].layer == MODEL and v is not None
    ]
    missing = [key for key in needed if content["settings"].get(key) is None]
    if missing:
        raise ArtifactError(
            path,
            "settings",
            f"no {', '.join(missing)}, which a {name} is built from "
            f"(properties/model/{name}.yaml): is it another model's artifact?",
        )
    for entry in MODEL_SIZES.get(name, ()):
        for setting, value, parameter in _sized_settings(content["settings"], entry):
            if value is None:
                continue  # a default the model derives from checked shapes (output_size ~: the warm rank)
            stored = content["state_dict"].get(parameter)
            if stored is None:
                raise ArtifactError(
                    path, "state_dict", f"no {parameter}, which a {name} has (is it another model's artifact?)"
                )
            if stored.dim() <= entry[2] or stored.shape[entry[2]] != value:
                raise ArtifactError(
                    path,
                    f"settings.{setting}",
                    f"{_got(value)} does not size the stored state_dict.{parameter} (shape {tuple(stored.shape)}): "
                    "the model it builds would not fit its parameters",
                )
