"""A damaged, cut, foreign or old-format model file is refused in one line, and what a file holds comes back
exactly (safetensors parses it; its SHA-256 covers every byte that carries meaning)."""

import re
import struct

import numpy as np
import pytest
import torch
from helpers import train_planted
from safetensors import safe_open
from safetensors.torch import save_file

from recbole_fbsm.artifact.model_file import FORMAT_VERSION, read_artifact, write_artifact
from recbole_fbsm.cli.serve import serve as serve_main
from recbole_fbsm.errors import ColdStartError
from recbole_fbsm.serve import load_model, recommend
from recbole_fbsm.serve.loading import read_model_file
from recbole_fbsm.storage.safe_files import content_digest

CHECKSUM = r"its SHA-256 is not the one it was written with"


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    data, results = train_planted(tmp_path_factory.mktemp("integrity"), {"FBSM": {"epochs": 1, "rank": 3}})
    return {**data, **results}


def _refused(path, pattern, prefix="model "):
    with pytest.raises(ColdStartError) as caught:
        load_model(path)
    message = str(caught.value)
    assert "\n" not in message and str(path) in message and message.startswith(prefix), message
    assert re.search(pattern, message), message
    return message


def test_a_written_artifact_reads_back_exactly(trained, tmp_path):
    content = read_model_file(trained["FBSM"]["artifact_file"])
    again = tmp_path / "again.fbsm"
    write_artifact(again, content)
    reread = read_artifact(again)
    assert reread.keys() == content.keys() and reread["settings"] == content["settings"]
    assert torch.equal(reread["state_dict"]["V"], content["state_dict"]["V"])
    assert reread["state_dict"]["V"].dtype == torch.float32 and reread["split"]["valid"]["items"].dtype == np.int64
    assert (reread["likes"] != content["likes"]).nnz == 0


def test_a_flipped_bit_anywhere_in_the_file_is_refused_in_one_line(trained, tmp_path):
    """Bit rot in the header (lengths, JSON, names, dtypes, shapes, the settings within) or in a tensor's bytes:
    safetensors refuses what no longer parses, the SHA-256 what still does."""
    original = open(trained["FBSM"]["artifact_file"], "rb").read()
    (header_length,) = struct.unpack("<Q", original[:8])
    assert len(original) > header_length + 8 > 1000
    positions = list(range(0, header_length + 8, 97)) + list(range(header_length + 8, len(original), 211))
    path = tmp_path / "rot.fbsm"
    for position in positions:
        damaged = bytearray(original)
        damaged[position] ^= 0x10
        path.write_bytes(bytes(damaged))
        _refused(path, rf"{CHECKSUM}|is not a file of recbole-fbsm|format version|neither a recbole-fbsm")
    # a flip in a parameter's bytes: a finite, plausible weight only the checksum sees
    damaged = bytearray(original)
    damaged[-5] ^= 0x08
    path.write_bytes(bytes(damaged))
    _refused(path, CHECKSUM)


def test_a_file_cut_short_or_of_another_kind_is_one_error_line(trained, tmp_path, capsys):
    original = open(trained["FBSM"]["artifact_file"], "rb").read()
    cut = tmp_path / "cut.fbsm"
    for size in (0, 5, 100, len(original) // 2, len(original) - 1):
        cut.write_bytes(original[:size])
        _refused(
            cut, r"not a file of recbole-fbsm .* cut short in a copy \(Error while deserializing header", "model file "
        )
    text = tmp_path / "text.fbsm"
    text.write_text("user_id:token\titem_id:token\n")
    _refused(text, r"is not a file of recbole-fbsm \(safetensors\): another kind of file", "model file ")
    foreign = tmp_path / "foreign.fbsm"  # a safetensors file, not ours
    save_file({"weight": torch.zeros(2)}, foreign)
    assert serve_main(["interactions", str(foreign)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "neither a recbole-fbsm model artifact" in err


def _write_with_header(path, content, **header):
    """``content`` written, its header entries replaced (and sealed again, as the release that wrote it did)."""
    write_artifact(path, content)
    with safe_open(path, framework="pt") as file:
        metadata = {**file.metadata(), **header}
        tensors = {name: file.get_tensor(name) for name in file.keys()}
    save_file(tensors, path, {**metadata, "sha256": content_digest(metadata, tensors)})


def test_an_artifact_of_another_format_version_gets_one_line_re_export_or_retrain(trained, tmp_path, capsys):
    """Version 5 kept CSR matrices as named records, 4 tensors apart from their place in the content, 1 to 3 were
    torch.save zips (refused as any pickle is, test_artifact.py); none is read any more, nor a later release's."""
    retrain = rf"reads version {FORMAT_VERSION} only: retrain, or export it again from a checkpoint this release wrote"
    content = read_model_file(trained["FBSM"]["artifact_file"])
    for version in ("5", str(FORMAT_VERSION + 1)):
        other = tmp_path / f"v{version}.fbsm"
        _write_with_header(other, content, format_version=version, package_version="0.1.0")
        _refused(
            other,
            rf"^model artifact {other} has format version {version} \(written by recbole-fbsm 0\.1\.0\); .*{retrain}",
        )
    assert serve_main(["export", str(other), "-o", str(tmp_path / "new.fbsm")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"error: model artifact {other} has format version")


def test_the_checksum_covers_settings_names_and_values(trained, tmp_path):
    content = read_model_file(trained["FBSM"]["artifact_file"])
    expected = recommend(load_model(trained["FBSM"]["artifact_file"]), trained["new_file"], top=3).for_items
    path = tmp_path / "m.fbsm"
    write_artifact(path, content)
    original = path.read_bytes()
    seed = f'\\"seed\\": {content["settings"]["seed"]}'.encode()
    name = b'"[\\"state_dict\\", \\"D\\"]"'  # a tensor's name in the header
    for old, new in ((seed, seed[:-1] + bytes([seed[-1] ^ 1])), (name, name.replace(b"D", b"E"))):
        assert original.count(old) == 1 and len(old) == len(new)
        path.write_bytes(original.replace(old, new))
        _refused(path, CHECKSUM)
    path.write_bytes(original)
    assert recommend(load_model(path), trained["new_file"], top=3).for_items.equals(expected)
