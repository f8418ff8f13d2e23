"""What a ``.fbsm`` file must be before any of it reaches native code: its checksum, and a table of its fields.

An artifact is data from elsewhere (a damaged copy, an edited file, one crafted to make scipy or torch read past
an array's end), so ``validate`` checks, in this order: the structure on the unpickled metadata alone (``ARTIFACT``:
every key known, every value of its kind, every tensor of its exact dtype and of the shape its named dimensions
give); the tensors' bytes against the declared ``tensor_bytes``; the SHA-256 (``content_digest``); then the values,
which a rewritten checksum cannot get past (``VALUE_CHECKS``: pointers, ids in range, finite weights, UTF-8 tokens,
feature names, settings). ``check_state_dict`` compares the parameters with the rebuilt model's before loading.
A new field is one entry of ``ARTIFACT`` (and, where its values need it, one function of ``VALUE_CHECKS``).
"""

import hashlib
import math
import re
import struct

import numpy as np
import pandas as pd
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
    """Raised by a spec; ``validate`` turns it into an ``ArtifactError`` naming the file."""

    def __init__(self, where, message):
        super().__init__(where, message)
        self.where, self.message = where, message


def _got(value):
    if isinstance(value, torch.Tensor):
        return f"a tensor of dtype {str(value.dtype).removeprefix('torch.')} and shape {tuple(value.shape)}"
    if isinstance(value, (dict, list, tuple)):
        return f"{type(value).__name__} of {len(value)}"
    shown = repr(value)
    return shown if len(shown) <= 60 else shown[:57] + "..."


# ----------------------------------------------------------------------------------------------- specs
class Context:
    """What the checks share: the named dimensions defined so far, and the value checks to run after the
    checksum (they read the tensors' contents)."""

    def __init__(self):
        self.dims, self.defined_by, self.values = {}, {}, []

    def dimension(self, name, size, where):
        base, _, plus = name.partition("+")
        size = size - int(plus or 0)
        if base not in self.dims:
            self.dims[base], self.defined_by[base] = size, where
            return
        if self.dims[base] != size:
            source = f"{base} = {self.dims[base]} as {self.defined_by[base]} gives"
            if plus:
                raise Invalid(
                    where,
                    f"expected length {self.dims[base] + int(plus)} ({base} + {plus}, {source}), "
                    f"got {size + int(plus)}",
                )
            raise Invalid(where, f"expected {base} = {self.dims[base]} (as {self.defined_by[base]} gives), got {size}")


class Spec:
    def check(self, value, where, ctx):
        raise NotImplementedError


class Kind(Spec):
    """A plain value: ``test(value)`` true, else ``expected``."""

    def __init__(self, expected, test):
        self.expected, self.test = expected, test

    def check(self, value, where, ctx):
        if not self.test(value):
            raise Invalid(where, f"expected {self.expected}, got {_got(value)}")


def _is_int(value):
    return isinstance(value, int) and not isinstance(value, bool)


def _is_real(value):
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


TEXT = Kind("text", lambda v: isinstance(v, str))
FLAG = Kind("a flag", lambda v: isinstance(v, bool))
REAL = Kind("a finite number", _is_real)
NON_NEGATIVE = Kind("a finite number >= 0", lambda v: _is_real(v) and v >= 0)
SHA256 = Kind("64 hexadecimal digits", lambda v: isinstance(v, str) and re.fullmatch(r"[0-9a-f]{64}", v) is not None)
COUNT = Kind("an integer >= 0", lambda v: _is_int(v) and v >= 0)


def choice(*options):
    return Kind(f"one of {', '.join(map(repr, options))}", lambda v: isinstance(v, str) and v in options)


class Optional(Spec):
    def __init__(self, inner):
        self.inner = inner

    def check(self, value, where, ctx):
        if value is not None:
            self.inner.check(value, where, ctx)


class Plain(Spec):
    """JSON-like data only (mappings with text keys, lists, text, numbers, flags, None): no tensor, bounded depth."""

    def check(self, value, where, ctx, depth=0):
        if depth > MAX_PLAIN_DEPTH:
            raise Invalid(where, f"nested deeper than {MAX_PLAIN_DEPTH} levels")
        if isinstance(value, dict):
            for key, item in value.items():
                if not isinstance(key, str):
                    raise Invalid(where, f"expected text keys, got {_got(key)}")
                self.check(item, f"{where}.{key}", ctx, depth + 1)
        elif isinstance(value, (list, tuple)):
            for k, item in enumerate(value):
                self.check(item, f"{where}[{k}]", ctx, depth + 1)
        elif not (value is None or isinstance(value, (str, bool, int, float))):
            raise Invalid(where, f"expected plain data (text, numbers, lists, mappings), got {_got(value)}")


class ListOf(Spec):
    def __init__(self, item, length=None):
        self.item, self.length = item, length

    def check(self, value, where, ctx):
        if not isinstance(value, (list, tuple)):
            raise Invalid(where, f"expected a list, got {_got(value)}")
        if self.length is not None:
            ctx.dimension(self.length, len(value), where)
        test = self.item.test if isinstance(self.item, Kind) else None
        for k, item in enumerate(value):
            if test is None or not test(item):  # a plain kind: the path text only for a failing item
                self.item.check(item, f"{where}[{k}]", ctx)


class MapOf(Spec):
    def __init__(self, item):
        self.item = item

    def check(self, value, where, ctx):
        if not isinstance(value, dict):
            raise Invalid(where, f"expected a mapping, got {_got(value)}")
        for key, item in value.items():
            if not isinstance(key, str):
                raise Invalid(where, f"expected text keys, got {_got(key)}")
            self.item.check(item, f"{where}.{key}", ctx)


class Record(Spec):
    """A mapping of exactly these keys (``optional``: may be absent, as in older versions), checked in order."""

    def __init__(self, fields, optional=()):
        self.fields, self.optional = fields, set(optional)

    def check(self, value, where, ctx):
        if not isinstance(value, dict):
            raise Invalid(where, f"expected a mapping, got {_got(value)}")
        unknown = [key for key in value if key not in self.fields]
        if unknown:
            raise Invalid(where, f"unknown key(s) {unknown[:5]}, not among the {len(self.fields)} this release writes")
        missing = [key for key in self.fields if key not in value and key not in self.optional]
        if missing:
            raise Invalid(where, f"key(s) {missing} missing")
        for key, spec in self.fields.items():
            if key in value:
                spec.check(value[key], f"{where}.{key}" if where else key, ctx)


class Tensor(Spec):
    """A tensor of one of ``dtypes``, of ``shape`` (named dimensions, ``"name+1"``, or None: any length), with
    ``values`` checks on its contents run after the checksum (``values(array, where, ctx)``)."""

    def __init__(self, dtypes, shape, values=()):
        self.dtypes = dtypes if isinstance(dtypes, tuple) else (dtypes,)
        self.shape, self.values = shape, values

    def check(self, value, where, ctx):
        if not isinstance(value, torch.Tensor) or value.layout != torch.strided:
            raise Invalid(where, f"expected a tensor, got {_got(value)}")
        if value.dtype not in self.dtypes:
            raise Invalid(
                where,
                f"expected dtype {' or '.join(str(d).removeprefix('torch.') for d in self.dtypes)}, "
                f"got {str(value.dtype).removeprefix('torch.')}",
            )
        if value.dim() != len(self.shape):
            raise Invalid(where, f"expected {len(self.shape)} dimension(s), got shape {tuple(value.shape)}")
        for size, name in zip(value.shape, self.shape):
            if name is not None:
                ctx.dimension(name, int(size), where)
        for check in self.values:
            ctx.values.append((check, value, where))


class Csr(Record):
    """A scipy CSR matrix's arrays (``model_file.csr_record``) of ``rows`` x ``cols`` named dimensions."""

    def __init__(self, rows, cols, data_dtypes):
        super().__init__(
            {
                "indptr": Tensor(torch.int64, (f"{rows}+1",), (starts_at_zero, non_decreasing)),
                "indices": Tensor((torch.int32, torch.int64), (None,), (in_range(0, cols),)),
                "data": Tensor(data_dtypes, (None,), (finite,)),
                "shape": ListOf(COUNT),
            }
        )
        self.rows, self.cols = rows, cols

    def check(self, value, where, ctx):
        super().check(value, where, ctx)
        shape = value["shape"]
        if len(shape) != 2:
            raise Invalid(f"{where}.shape", f"expected [{self.rows}, {self.cols}], got {shape}")
        ctx.dimension(self.rows, shape[0], f"{where}.shape")
        ctx.dimension(self.cols, shape[1], f"{where}.shape")
        entries = len(value["indices"])
        if len(value["data"]) != entries:
            raise Invalid(f"{where}.data", f"expected as many values as indices ({entries}), got {len(value['data'])}")
        if entries > shape[0] * shape[1]:
            raise Invalid(f"{where}.indices", f"{entries} entries in a {shape[0]} x {shape[1]} matrix")
        ctx.values.append((last_pointer_is(entries), value["indptr"], f"{where}.indptr"))


# ---------------------------------------------------------------------------------------- value checks
def starts_at_zero(array, where, ctx):
    if len(array) and array[0] != 0:
        raise Invalid(where, f"expected the first pointer 0, got {int(array[0])}")


def non_decreasing(array, where, ctx):
    drops = np.flatnonzero(np.diff(array) < 0)
    if len(drops):
        raise Invalid(
            where,
            f"expected non-decreasing pointers; position {int(drops[0]) + 1} goes down "
            f"({int(array[drops[0]])} -> {int(array[drops[0] + 1])})",
        )


def last_pointer_is(entries):
    def check(array, where, ctx):
        if len(array) and int(array[-1]) != entries:
            raise Invalid(where, f"expected the last pointer to be the {entries} entries, got {int(array[-1])}")

    return check


def in_range(low, high_dim):
    """Values in [low, dims[high_dim])."""

    def check(array, where, ctx):
        high = ctx.dims[high_dim]
        outside = np.flatnonzero((array < low) | (array >= high))
        if len(outside):
            raise Invalid(
                where,
                f"value {int(array[outside[0]])} at position {int(outside[0])} is outside "
                f"{low} to {high - 1} ({high_dim} = {high}); {len(outside)} such value(s)",
            )

    return check


def finite(array, where, ctx):
    bad = np.flatnonzero(~np.isfinite(array))
    if len(bad):
        raise Invalid(where, f"{len(bad)} non-finite value(s) (e.g. {array[bad[0]]} at position {int(bad[0])})")


def non_negative(array, where, ctx):
    finite(array, where, ctx)
    if len(array) and array.min() < 0:
        raise Invalid(where, f"expected values >= 0, got {array.min()}")


def distinct(array, where, ctx):
    if len(np.unique(array)) != len(array):
        raise Invalid(where, "expected distinct ids, some appear more than once")


def token_lengths(array, where, ctx):
    if len(array) and array.min() < 0:
        position = int(np.argmin(array))
        raise Invalid(where, f"token {position} has length {int(array[position])}; expected lengths >= 0")


ITEM_ID = Tensor(torch.int64, (None,), (in_range(1, "items"),))
USER_ID = Tensor(torch.int64, (None,), (in_range(1, "users"),))


class Tokens(Spec):
    """One field's vocabulary: version 2's {utf8, lengths} tensors, or version 1's list of strings."""

    def check(self, value, where, ctx):
        if isinstance(value, list):
            ListOf(TEXT).check(value, where, ctx)
            return
        Record({"utf8": Tensor(torch.uint8, (None,)), "lengths": Tensor(torch.int64, (None,), (token_lengths,))}).check(
            value, where, ctx
        )
        ctx.values.append((lengths_cover(len(value["utf8"])), value["lengths"], f"{where}.lengths"))


def lengths_cover(n_bytes):
    def check(array, where, ctx):
        if int(array.sum()) != n_bytes:
            raise Invalid(where, f"the token lengths add up to {int(array.sum())} bytes, the tokens hold {n_bytes}")

    return check


class Vocabulary(Record):
    def __init__(self):
        super().__init__(
            {
                "dataset": TEXT,
                "uid_field": TEXT,
                "iid_field": TEXT,
                "tokens": MapOf(Tokens()),
                "types": MapOf(choice(*(kind.value for kind in FeatureType))),
            }
        )

    def check(self, value, where, ctx):
        super().check(value, where, ctx)
        tokens = value["tokens"]
        for role, dim in (("uid_field", "users"), ("iid_field", "items")):
            name = value[role]
            if name not in tokens:
                raise Invalid(f"{where}.tokens", f"no tokens of the {role} {name!r}")
            ctx.dimension(dim, _token_count(tokens[name]), f"{where}.tokens.{name}")


def _token_count(record):
    return len(record) if isinstance(record, list) else len(record["lengths"])


class AnyTensor(Spec):
    """``state_dict`` entries: any dtype and shape here; ``check_state_dict`` compares them with the rebuilt model's."""

    def check(self, value, where, ctx):
        if not isinstance(value, torch.Tensor) or value.layout != torch.strided:
            raise Invalid(where, f"expected a tensor, got {_got(value)}")


SPLIT = Optional(Record({"items": ITEM_ID, "users_of_likes": USER_ID, "items_of_likes": ITEM_ID}))

# The artifact, one entry per field (``model_file.build_artifact`` writes them): a new field is one line here.
ARTIFACT = Record(
    {
        "format": TEXT,
        "format_version": COUNT,
        "package_version": TEXT,
        "model": TEXT,
        "settings": MapOf(Plain()),
        "data": Optional(Plain()),
        "vocabulary": Vocabulary(),
        "features": Record(
            {
                "names": ListOf(TEXT, length="features"),
                "fields": ListOf(TEXT, length="fields"),
                "dense_fields": ListOf(TEXT),
                "matrix": Csr("items", "features", torch.float64),
                # content columns: the first ones of matrix; identity columns (hybrid FBSM) follow them
                "column_weights": Tensor(torch.float64, ("content_features",), (non_negative,)),
                "column_field": Tensor(torch.int64, ("content_features",), (in_range(0, "fields"),)),
                "field_scales": Optional(Tensor(torch.float64, ("fields",), (non_negative,))),
                "source_columns": Tensor(torch.int64, ("content_features",), (in_range(0, "source_columns"),)),
                "average_lengths": Optional(Tensor(torch.float64, ("fields",), (non_negative,))),
                "mean_square_norms": Optional(Tensor(torch.float64, (None,), (non_negative,))),
                "weighting": choice(*FITTED_WEIGHTINGS),
                "normalize": FLAG,
                "bm25_k1": Optional(NON_NEGATIVE),
                "bm25_b": Optional(Kind("a number from 0 to 1", lambda v: _is_real(v) and 0 <= v <= 1)),
                "shrink": NON_NEGATIVE,
                "identity_items": Optional(Tensor(torch.int64, ("identity",), (in_range(1, "items"), distinct))),
                "identity_weight": Optional(NON_NEGATIVE),
            },
            optional=("identity_items", "identity_weight"),
        ),  # artifacts before the hybrid FBSM have neither
        "likes": Csr("users", "items", (torch.float32, torch.float64)),
        "training_items": Tensor(torch.int64, ("training_items",), (in_range(1, "items"), distinct)),
        "warm_shapes": Optional(ListOf(ListOf(COUNT))),
        "split": Record({"valid": SPLIT, "test": SPLIT}),
        "analyzer": Optional(Plain()),
        "state_dict": MapOf(AnyTensor()),
        # RecBole's load_other_parameter sets each entry as an attribute of the model: none of the served models
        # keeps one, so a value could only overwrite what the model built (its F, its R)
        "other_parameter": Kind("None (the served models keep no other parameter)", lambda v: v is None),
        # which epoch validation kept (-1: the untrained start) and the scores behind it (model_file.training_record)
        "training": Optional(
            Record(
                {
                    "kept_epoch": Optional(Kind("a whole number of at least -1", lambda v: _is_int(v) and v >= -1)),
                    "valid_metric": TEXT,
                    "kept_valid_score": Optional(REAL),
                    "start_valid_score": Optional(REAL),
                }
            )
        ),
        "integrity": Record({"sha256": SHA256, "tensor_bytes": COUNT}),
    },
    optional=("integrity", "training"),
)  # versions 1 and 2 carry no checksum; older files no training record


# ------------------------------------------------------------------------------ checks across fields
def check_vocabulary_fields(content, ctx):
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


def check_warm_shapes(content, ctx):
    shapes, weights = content.get("warm_shapes"), content["state_dict"]
    if shapes is None:
        return
    stored = [
        list(weights[key].shape) if key in weights else None for key in ("warm_user_embedding", "warm_item_embedding")
    ]
    if [list(s) for s in shapes] != stored or stored[0][0] != ctx.dims["users"] or stored[1][0] != ctx.dims["items"]:
        raise Invalid(
            "warm_shapes",
            f"expected the warm tables' shapes in state_dict ({stored}) with "
            f"{ctx.dims['users']} users and {ctx.dims['items']} items, got {shapes}",
        )


STRUCTURE_CHECKS = (check_vocabulary_fields, check_warm_shapes)


def check_utf8(record, where):
    """Each token of a version 2+ record is UTF-8 text, without decoding them one by one: the bytes decode as a
    whole and no token starts inside a character (a continuation byte, 0b10xxxxxx)."""
    data, lengths = record["utf8"].numpy(), record["lengths"].numpy()
    ends = np.cumsum(lengths)
    try:
        data.tobytes().decode("utf-8")
        position = None
    except UnicodeDecodeError as error:
        position, reason = error.start, error.reason
    starts = ends - lengths
    inside = (
        np.flatnonzero((lengths > 0) & ((data[np.minimum(starts, max(len(data) - 1, 0))] & 0xC0) == 0x80))
        if len(data)
        else np.zeros(0, dtype=np.int64)
    )
    if position is None and len(inside):
        position, reason = int(starts[inside[0]]), "a token starts inside a character"
    if position is not None:
        token = int(np.searchsorted(ends, position, side="right"))
        raise Invalid(f"{where}.utf8", f"token {token} is not UTF-8 ({reason}, byte {position})")


def decode_tokens(record, where):
    """A field's tokens as strings (version 1: the list itself), checked: UTF-8, distinct, '[PAD]' first."""
    if isinstance(record, list):
        tokens = np.asarray(record, dtype=object)
    else:
        check_utf8(record, where)
        data, ends = record["utf8"].numpy(), np.cumsum(record["lengths"].numpy())
        starts = (ends - record["lengths"].numpy()).tolist()
        tokens = np.asarray([data[a:b].tobytes().decode("utf-8") for a, b in zip(starts, ends.tolist())], dtype=object)
    check_distinct_tokens(tokens, where)
    return tokens


def check_distinct_tokens(tokens, where):
    """RecBole's padding token first, and no token twice (a token's second id would never be reached)."""
    if not len(tokens) or tokens[0] != "[PAD]":
        raise Invalid(
            where, f"expected RecBole's padding token '[PAD]' first, got {_got(tokens[0] if len(tokens) else None)}"
        )
    repeated = pd.Index(tokens).duplicated()
    if repeated.any():
        raise Invalid(where, f"token {tokens[np.flatnonzero(repeated)[0]]!r} appears more than once")


def check_tokens_and_names(content, ctx):
    """Every vocabulary is UTF-8 (the users' and items' are decoded once, by ``vocabulary_from_record``, which
    checks them with ``check_distinct_tokens``); each feature name is its column's token (``source_columns``): a
    renamed or swapped name would put a learned weight on another token."""
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
    names = np.asarray(features["names"], dtype=object)
    names = check_identity_names(content, names, ctx)
    expected = np.full(len(names), None, dtype=object)
    within = sparse & (source < len(side_by_side))
    expected[within] = side_by_side[source[within]]
    wrong = np.flatnonzero(sparse & (expected != names))
    if len(wrong):
        k = int(wrong[0])
        raise Invalid(f"features.names[{k}]", f"expected {expected[k]!r} (the token of its column), got {names[k]!r}")
    order = np.lexsort((names.astype(str), column_field))
    if not np.array_equal(order, np.arange(len(names))):
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


def check_settings(content, ctx):
    for key, value in content["settings"].items():
        if key in SPECS and key not in MACHINE_SETTINGS and value is not None:
            problem = SPECS[key](value)
            if problem:
                raise Invalid(f"settings.{key}", f"expected {problem}, got {_got(value)}")


def check_analyzer(content, ctx):
    if content.get("analyzer") is None:
        return
    try:
        analyzer_records(content["analyzer"])
    except (ValueError, KeyError, TypeError, AttributeError) as error:
        raise Invalid("analyzer", f"not a converter's analyzer document ({type(error).__name__}: {error})") from None


def check_split_lengths(content, ctx):
    for name, part in content["split"].items():
        if part is not None and len(part["users_of_likes"]) != len(part["items_of_likes"]):
            raise Invalid(
                f"split.{name}",
                f"{len(part['users_of_likes'])} users of likes, {len(part['items_of_likes'])} items of likes",
            )


VALUE_CHECKS = (check_settings, check_split_lengths, check_tokens_and_names, check_analyzer)


# ------------------------------------------------------------------------------------------- checksum
def _tensors(value):
    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from _tensors(item)
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from _tensors(item)


def tensor_bytes(content):
    """Bytes of the storages of the artifact's tensors (the integrity entry aside), each storage once: a small
    view of a large storage counts the whole storage, which loading would read."""
    storages = {}
    for tensor in _tensors({k: v for k, v in content.items() if k != "integrity"}):
        storage = tensor.untyped_storage()
        storages[(storage.data_ptr(), storage.nbytes())] = storage.nbytes()
    return sum(storages.values())


def content_digest(content):
    """SHA-256 of the content without its ``integrity`` entry: the keys, the kinds and values of the plain data,
    each tensor's dtype, shape and bytes, in one canonical order (independent of how pickle laid them out)."""
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


# ----------------------------------------------------------------------------------------------- entry
def validate(content, path, checksum=True):
    """Check ``content`` (an artifact's dict) in the module docstring's order; an ``ArtifactError`` names the
    first problem. ``checksum``: False for versions 1 and 2, which carry none."""
    ctx = Context()
    try:
        ARTIFACT.check(content, "", ctx)
        for check in STRUCTURE_CHECKS:
            check(content, ctx)
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
        for check, tensor, where in ctx.values:
            check(tensor.numpy(), where, ctx)
        for check in VALUE_CHECKS:
            check(content, ctx)
    except Invalid as error:
        raise ArtifactError(path, error.where, error.message) from None


def check_state_dict(state_dict, model, path):
    """The artifact's parameters against those of ``model`` (rebuilt from its settings): the same keys, shapes
    and exact dtypes, and finite values, before ``load_state_dict`` could cast them (an int64 or float16 V was
    silently converted) or copy a NaN into every score."""
    expected = model.state_dict()
    name = type(model).__name__
    unknown, missing = sorted(set(state_dict) - set(expected)), sorted(set(expected) - set(state_dict))
    if unknown or missing:
        raise ArtifactError(
            path,
            "state_dict",
            f"a {name} has parameters {sorted(expected)}; the file has "
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
    """The settings a model of the artifact's name is built from (its ``properties/model/NAME.yaml`` keys among
    the plugin's model settings) are all there: a UFSM's artifact labelled FBSM has no ``rank``."""
    name = content["model"]
    model_file = PROPERTIES_DIR / "model" / f"{name}.yaml"
    if not model_file.is_file():
        return  # not a plugin model: the caller refuses it by name
    defaults = yaml.safe_load(model_file.read_text(encoding="utf-8")) or {}
    needed = [
        key
        for key, value in defaults.items()
        if key in PLUGIN_SETTINGS and PLUGIN_SETTINGS[key].layer == MODEL and value is not None
    ]
    missing = [key for key in needed if content["settings"].get(key) is None]
    if missing:
        raise ArtifactError(
            path,
            "settings",
            f"no {', '.join(missing)}, which a {name} is built from "
            f"(properties/model/{name}.yaml): is it another model's artifact?",
        )
    weights = content["state_dict"]
    for entry in MODEL_SIZES.get(name, ()):
        for setting, value, parameter in _sized_settings(content["settings"], entry):
            if value is None:
                continue  # a default the model derives from checked shapes (output_size ~: the warm rank)
            stored = weights.get(parameter)
            if stored is None:
                raise ArtifactError(
                    path, "state_dict", f"no {parameter}, which a {name} has (is it another model's artifact?)"
                )
            if stored.dim() <= entry[2] or stored.shape[entry[2]] != value:
                raise ArtifactError(
                    path,
                    f"settings.{setting}",
                    f"{_got(value)} does not size the stored "
                    f"state_dict.{parameter} (shape {tuple(stored.shape)}): "
                    "the model it builds would not fit its parameters",
                )
