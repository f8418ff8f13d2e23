"""Damaged, edited and crafted model artifacts are refused in one line, before any array reaches native code.

Each case edits a real artifact twice: once keeping the file's checksum (what a damaged or naively edited file
is: the SHA-256 refuses it, or the structure check when it comes first), once with the checksum recomputed (what
an attacker who rewrites it can do): the validation rule of that case must refuse it by itself. A case that
slipped through would crash (SIGSEGV, heap abort) or load and answer wrongly, so each asserts the message.
"""

import copy
import re
import struct
import zipfile

import numpy as np
import pytest
import torch
from helpers import train_planted

from recbole_fbsm.artifact import integrity
from recbole_fbsm.artifact.model_file import (
    FORMAT_VERSION,
    UnsealedArtifactWarning,
    tokens_record,
)
from recbole_fbsm.errors import ColdStartError
from recbole_fbsm.serve import load_model, recommend
from recbole_fbsm.serve.__main__ import main as serve_main
from recbole_fbsm.serve.loading import read_model_file
from recbole_fbsm.storage import safe_files
from recbole_fbsm.storage.safe_files import load_tensors, save_tensors

CHECKSUM = r"its SHA-256 is not the one it was written with|integrity\.tensor_bytes: the file declares"


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    runs = {"FBSM": {"epochs": 1, "rank": 3, "init_std": 0.1}, "UFSM": {"epochs": 1}}
    data, results = train_planted(tmp_path_factory.mktemp("integrity"), runs)
    return {**data, **results}


def _content(trained, model="FBSM"):
    return read_model_file(trained[model]["artifact_file"])


def _write(content, path, reseal):
    """``content`` saved as it is (its old checksum kept) or sealed again (an attacker's rewrite)."""
    save_tensors(integrity.seal(content) if reseal else content, path)
    return path


def _refused(path, pattern):
    with pytest.raises(ColdStartError) as caught:
        load_model(path)
    message = str(caught.value)
    assert "\n" not in message and message.startswith(f"model artifact {path}")
    assert re.search(pattern, message), message
    return message


def _set_tokens(content, field, tokens):
    content["vocabulary"]["tokens"][field] = tokens_record(tokens)


def _tokens(content, field):
    return integrity.decode_tokens(content["vocabulary"]["tokens"][field], field).tolist()


def _split_character(content):
    """Item 3 ends in a two-byte character whose second byte is moved into item 4: every byte is still UTF-8."""
    tokens = _tokens(content, "item_id")
    tokens[3] += "\u00e9"
    _set_tokens(content, "item_id", tokens)
    lengths = content["vocabulary"]["tokens"]["item_id"]["lengths"]
    lengths[3] -= 1
    lengths[4] += 1


def _swap_names(content):
    names = content["features"]["names"]
    a, b = [k for k, name in enumerate(names) if name.startswith("words:")][:2]
    names[a], names[b] = names[b], names[a]


def _flip_bit(content):
    V = content["state_dict"]["V"]
    V.view(torch.int32)[0, 0] ^= 1 << 3  # a low mantissa bit: still a finite, plausible weight


def _rename_feature(content):
    names = content["features"]["names"]
    k = names.index("words:t0")
    names[k] = "words:t1"  # one flipped bit in the pickled text: 0x30 -> 0x31


# (case, edit of the content, what the validation says once the checksum is rewritten)
CASES = [
    (
        "likes.indices out of range (was a SIGSEGV)",
        lambda c: c["likes"]["indices"].__setitem__(0, len(_tokens(c, "item_id")) + 7),
        r"likes\.indices: value \d+ at position 0 is outside 0 to \d+ \(items = \d+\)",
    ),
    (
        "false features.matrix.shape (was a heap abort)",
        lambda c: c["features"]["matrix"].__setitem__("shape", [c["features"]["matrix"]["shape"][0], 10**6]),
        r"features\.matrix\.shape: expected features = \d+ \(as features\.names gives\), got 1000000",
    ),
    (
        "negative shape",
        lambda c: c["features"]["matrix"]["shape"].__setitem__(0, -5),
        r"features\.matrix\.shape\[0\]: expected an integer >= 0, got -5",
    ),
    (
        "cut user vocabulary",
        lambda c: _set_tokens(c, "user_id", _tokens(c, "user_id")[:-3]),
        r"likes\.indptr: expected length \d+ \(users \+ 1, users = \d+ as vocabulary\.tokens\.user_id gives\)",
    ),
    (
        "cut feature names",
        lambda c: c["features"]["names"].pop(),
        r"features\.matrix\.shape: expected features = \d+ \(as features\.names gives\)",
    ),
    (
        "training items out of range",
        lambda c: c["training_items"].__setitem__(0, 10**6),
        r"training_items: value 1000000 at position 0 is outside 1 to",
    ),
    ("model key removed", lambda c: c.pop("model"), r": key\(s\) \['model'\] missing"),
    ("features key removed", lambda c: c.pop("features"), r": key\(s\) \['features'\] missing"),
    ("settings a string", lambda c: c.__setitem__("settings", "abc"), r"settings: expected a mapping, got 'abc'"),
    (
        "bad UTF-8 byte in the vocabulary",
        lambda c: c["vocabulary"]["tokens"]["item_id"]["utf8"].__setitem__(8, 0xFF),
        r"vocabulary\.tokens\.item_id\.utf8: token 1 is not UTF-8 \(invalid start byte, byte 8\)",
    ),
    (
        "a token starting inside a character",
        _split_character,
        r"vocabulary\.tokens\.item_id\.utf8: token 4 is not UTF-8 \(a token starts inside a character",
    ),
    (
        "a user token twice (answers to the wrong user)",
        lambda c: _set_tokens(
            c, "user_id", [*_tokens(c, "user_id")[:5], _tokens(c, "user_id")[4], *_tokens(c, "user_id")[6:]]
        ),
        r"vocabulary\.tokens\.user_id: token 'u\w+' appears more than once",
    ),
    (
        "a feature token twice",
        lambda c: _set_tokens(c, "genre", ["[PAD]", "g0", "g0", *_tokens(c, "genre")[3:]]),
        r"vocabulary\.tokens\.genre: token 'g0' appears more than once",
    ),
    (
        "settings.seed = 'abc'",
        lambda c: c["settings"].__setitem__("seed", "abc"),
        r"settings\.seed: expected an integer from 0 to 4294967295, got 'abc'",
    ),
    (
        "state_dict a list",
        lambda c: c.__setitem__("state_dict", list(c["state_dict"].values())),
        r"state_dict: expected a mapping, got list of 2",
    ),
    (
        "V stored as int64",
        lambda c: c["state_dict"].__setitem__("V", c["state_dict"]["V"].to(torch.int64)),
        r"state_dict\.V: expected a tensor of dtype float32 and shape \(\d+, 3\), got a tensor of dtype int64",
    ),
    (
        "V stored as float16",
        lambda c: c["state_dict"].__setitem__("V", c["state_dict"]["V"].half()),
        r"state_dict\.V: expected a tensor of dtype float32 and shape \(\d+, 3\), got a tensor of dtype float16",
    ),
    (
        "NaN parameter",
        lambda c: c["state_dict"]["V"].__setitem__((2, 1), float("nan")),
        r"state_dict\.V: 1 non-finite value\(s\) \(NaN or inf\)",
    ),
    (
        "inf parameter",
        lambda c: c["state_dict"]["D"].__setitem__(0, float("inf")),
        r"state_dict\.D: 1 non-finite value\(s\) \(NaN or inf\)",
    ),
    (
        "item vocabulary cut short (a dataset id accepted as new)",
        lambda c: _set_tokens(c, "item_id", _tokens(c, "item_id")[:-2]),
        r"features\.matrix\.indptr: expected length (\d+) \(items \+ 1, items = \d+ as vocabulary\.tokens\.item_id "
        r"gives\), got \d+",
    ),
    (
        "two feature names swapped",
        _swap_names,
        r"features\.names\[\d+\]: expected 'words:\w+' \(the token of its column\)",
    ),
    (
        "feature renamed in the pickled structure",
        _rename_feature,
        r"features\.names\[\d+\]: expected 'words:t0' \(the token of its column\), got 'words:t1'",
    ),
    (
        "token length set negative",
        lambda c: (
            c["vocabulary"]["tokens"]["user_id"]["lengths"].__setitem__(3, -4),
            c["vocabulary"]["tokens"]["user_id"]["lengths"].__setitem__(
                4, c["vocabulary"]["tokens"]["user_id"]["lengths"][4] + 8
            ),
        ),
        r"vocabulary\.tokens\.user_id\.lengths: token 3 has length -4; expected lengths >= 0",
    ),
    (
        "likes pointers going down",
        lambda c: c["likes"]["indptr"].__setitem__(2, c["likes"]["indptr"][-1] + 1),
        r"likes\.indptr: expected non-decreasing pointers; position \d+ goes down",
    ),
    (
        "split item out of range",
        lambda c: c["split"]["test"]["items"].__setitem__(0, -1),
        r"split\.test\.items: value -1 at position 0 is outside 1 to",
    ),
    (
        "features weights as float32",
        lambda c: c["features"].__setitem__("column_weights", c["features"]["column_weights"].float()),
        r"features\.column_weights: expected dtype float64, got float32",
    ),
    (
        "other_parameter overwriting a model attribute",
        lambda c: c.__setitem__("other_parameter", {"F": "x"}),
        r"other_parameter: expected None \(the served models keep no other parameter\), got dict of 1",
    ),
    (
        "unknown key",
        lambda c: c.__setitem__("extra", torch.zeros(3)),
        r": unknown key\(s\) \['extra'\], not among the \d+ this release writes",
    ),
]


@pytest.mark.parametrize("edit, pattern", [case[1:] for case in CASES], ids=[case[0] for case in CASES])
def test_an_edited_artifact_is_refused_by_its_checksum_and_by_its_own_rule(trained, tmp_path, edit, pattern):
    content = _content(trained)
    edit(content)
    _refused(_write(content, tmp_path / "stale.fbsm", reseal=False), rf"{CHECKSUM}|{pattern}")
    _refused(_write(content, tmp_path / "resealed.fbsm", reseal=True), pattern)


def test_a_flipped_bit_in_a_parameter_is_caught_by_the_checksum(trained, tmp_path):
    content = _content(trained)
    _flip_bit(content)
    _refused(_write(content, tmp_path / "flipped.fbsm", reseal=False), CHECKSUM)


def _storage_offsets(path):
    """(offset, size) of each tensor storage's bytes inside the zip file torch.save wrote."""
    spans = []
    with zipfile.ZipFile(path) as archive, open(path, "rb") as handle:
        for info in archive.infolist():
            if "/data/" in info.filename and info.file_size:
                handle.seek(info.header_offset + 26)
                name_length, extra_length = struct.unpack("<HH", handle.read(4))
                spans.append((info.header_offset + 30 + name_length + extra_length, info.file_size))
    return spans


def test_a_flipped_bit_anywhere_in_the_file_s_tensors_is_refused(trained, tmp_path):
    """Bit rot in the file itself (not through torch): every storage, a bit in its middle."""
    original = open(trained["FBSM"]["artifact_file"], "rb").read()
    spans = _storage_offsets(trained["FBSM"]["artifact_file"])
    assert len(spans) > 20
    for offset, size in spans:
        damaged = bytearray(original)
        damaged[offset + size // 2] ^= 0x10
        path = tmp_path / "rot.fbsm"
        path.write_bytes(bytes(damaged))
        _refused(path, rf"{CHECKSUM}|: ")


def test_a_model_s_artifact_labelled_as_the_other_model_is_refused(trained, tmp_path):
    ufsm = _content(trained, "UFSM")
    ufsm["model"] = "FBSM"
    for reseal in (False, True):
        _refused(_write(ufsm, tmp_path / f"ufsm-{reseal}.fbsm", reseal), rf"{CHECKSUM}|settings: no rank")
    fbsm = _content(trained, "FBSM")
    fbsm["model"] = "UFSM"
    _refused(
        _write(fbsm, tmp_path / "fbsm.fbsm", True),
        r"settings: no n_functions, reg_M, reg_W, init_W, which a "
        r"UFSM is built from .* another model's artifact",
    )
    # with the settings made to fit, the parameters still tell: a UFSM has W and M, this file D and V
    fbsm["settings"].update(n_functions=1, reg_M=0.1, reg_W=0.1, init_W=1.0)
    _refused(
        _write(fbsm, tmp_path / "fbsm2.fbsm", True),
        r"state_dict: no W, which a UFSM has \(is it another "
        r"model's artifact\?\)",
    )
    cosim = _content(trained, "FBSM")
    cosim["model"] = "CoSim"  # no setting of its own: its one parameter is compared once it is built
    _refused(
        _write(cosim, tmp_path / "cosim.fbsm", True),
        r"state_dict: a CoSim has parameters \['fake_loss'\]; "
        r"the file has \['D', 'V'\] \(is it another model's artifact",
    )


@pytest.mark.parametrize("model, setting, value", [("FBSM", "rank", 10**9), ("UFSM", "n_functions", 10**7)])
def test_a_size_setting_that_does_not_fit_the_parameters_is_refused_before_the_model_is_built(
    trained, tmp_path, model, setting, value
):
    content = _content(trained, model)
    content["settings"][setting] = value  # would allocate (features x 10^9) or (users x 10^7) floats
    _refused(
        _write(content, tmp_path / "sized.fbsm", reseal=True),
        rf"settings\.{setting}: {value} does not size the stored state_dict\.\w+ \(shape \(\d+, \d+\)\): the "
        r"model it builds would not fit its parameters",
    )


def test_an_extra_large_tensor_is_refused_before_it_is_read(trained, tmp_path, monkeypatch):
    content = _content(trained)
    big = torch.zeros(4_000_000)  # 16 MB here; the same check refused 1.5 GB without reading it
    content["extra"] = big
    stale = _write(content, tmp_path / "extra.fbsm", reseal=False)
    content.pop("extra")
    # a known field made a view of a large storage, the declared size left as it was
    hidden = copy.copy(content)
    n = len(content["training_items"])
    storage = torch.zeros(4_000_000, dtype=torch.int64)
    storage[:n] = content["training_items"]
    hidden["training_items"] = storage[:n]
    hidden_path = _write(hidden, tmp_path / "hidden.fbsm", reseal=False)
    monkeypatch.setattr(integrity, "content_digest", lambda *a: pytest.fail("the tensors were read"))
    _refused(stale, r": unknown key\(s\) \['extra'\], not among the \d+ this release writes")
    _refused(
        hidden_path,
        r"integrity\.tensor_bytes: the file declares \d+ bytes of tensors and holds \d+: refused "
        r"before reading them",
    )


def test_the_command_line_refuses_a_crafted_artifact_in_one_error_line(trained, tmp_path, capsys):
    content = _content(trained)
    content["likes"]["indices"][0] = 10**6
    path = _write(content, tmp_path / "crafted.fbsm", reseal=True)
    assert serve_main(["recommend", str(path), str(trained["new_file"])]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"error: model artifact {path}: likes.indices: value 1000000")


def test_older_versions_load_validated_with_a_warning_and_export_rewrites_them(trained, tmp_path, capsys):
    content = _content(trained)
    assert content["format_version"] == FORMAT_VERSION == 3
    old = {key: value for key, value in content.items() if key != "integrity"}
    v2 = _write({**old, "format_version": 2}, tmp_path / "v2.fbsm", reseal=False)
    with pytest.warns(UnsealedArtifactWarning, match=r"format version 2, which carries no checksum.* serve export"):
        served = load_model(v2)
    expected = recommend(load_model(trained["FBSM"]["artifact_file"]), trained["new_file"], top=3).for_items
    assert recommend(served, trained["new_file"], top=3).for_items.equals(expected)
    # the rules apply to an old version too, only the checksum is missing
    broken = copy.deepcopy(old)
    broken["likes"]["indices"][0] = 10**6
    _refused(_write({**broken, "format_version": 2}, tmp_path / "v2-broken.fbsm", reseal=False), r"likes\.indices")
    upgraded = tmp_path / "v3.fbsm"
    assert serve_main(["export", str(v2), "-o", str(upgraded)]) == 0
    assert "warning: model artifact" in capsys.readouterr().err
    rewritten = load_tensors(upgraded, "file")
    assert rewritten["format_version"] == 3 and rewritten["integrity"]["sha256"] == integrity.content_digest(rewritten)
    assert recommend(load_model(upgraded), trained["new_file"], top=3).for_items.equals(expected)


def test_the_checksum_covers_every_value_and_is_stable(trained):
    content = _content(trained)
    digest = integrity.content_digest(content)
    assert digest == content["integrity"]["sha256"] == integrity.content_digest(copy.deepcopy(content))
    for change in (
        lambda c: c["settings"].__setitem__("seed", c["settings"]["seed"] + 1),
        lambda c: c["features"].__setitem__("shrink", c["features"]["shrink"] + 1e-9),
        lambda c: c["vocabulary"]["types"].__setitem__("genre", "token_seq"),
        lambda c: c["likes"].__setitem__(
            "data",
            c["likes"]["data"].to(torch.float64)
            if c["likes"]["data"].dtype == torch.float32
            else c["likes"]["data"].float(),
        ),
    ):
        edited = copy.deepcopy(content)
        change(edited)
        assert integrity.content_digest(edited) != digest
    assert np.isclose(integrity.tensor_bytes(content), content["integrity"]["tensor_bytes"])


def test_pickled_values_are_size_bounded_before_unpickling(trained, tmp_path, monkeypatch):
    """The pickled part (``data.pkl``) is checked by its declared size and storage before torch reads it: too
    large, or deflated (a small file that expands a thousandfold), is one error line."""
    path = trained["FBSM"]["artifact_file"]
    with zipfile.ZipFile(path) as archive:
        size = next(info.file_size for info in archive.infolist() if info.filename.endswith("/data.pkl"))
    monkeypatch.setattr(safe_files, "MAX_PICKLE_BYTES", size - 1)
    _refused_unread(
        path,
        rf"pickled values \(\S+/data\.pkl\) declare {size} bytes, more than the {size - 1} .* refused "
        "before reading them",
    )
    monkeypatch.setattr(safe_files, "MAX_PICKLE_BYTES", size)
    load_model(path)  # at the limit: read
    deflated = tmp_path / "deflated.fbsm"
    with zipfile.ZipFile(path) as source, zipfile.ZipFile(deflated, "w") as target:
        for info in source.infolist():
            kind = zipfile.ZIP_DEFLATED if info.filename.endswith("/data.pkl") else zipfile.ZIP_STORED
            target.writestr(info.filename, source.read(info.filename), compress_type=kind)
    _refused_unread(deflated, r"pickled values \(\S+/data\.pkl\) are compressed, which torch\.save never does")


def _refused_unread(path, pattern):
    with pytest.raises(ColdStartError) as caught:
        load_model(path)
    message = str(caught.value)
    assert "\n" not in message and message.startswith(f"model file {path}: ") and re.search(pattern, message), message
