"""Files read without running code: a file that is not torch.save's archive is named so, in one line."""

import zipfile

import pytest
import torch

from recbole_fbsm.errors import ColdStartError
from recbole_fbsm.storage.safe_files import load_tensors, save_tensors


@pytest.mark.parametrize("kind", ["empty zip", "bytes prepended", "zip of other files"])
@pytest.mark.parametrize("mmap", [False, True])
def test_a_zip_that_torch_save_did_not_write_is_named_so(tmp_path, kind, mmap):
    good = tmp_path / "good.fbsm"
    save_tensors({"weights": torch.ones(3)}, good)
    path = tmp_path / "model.fbsm"
    if kind == "empty zip":
        zipfile.ZipFile(path, "w").close()
    elif kind == "bytes prepended":
        path.write_bytes(b"#!junk\n" * 10 + good.read_bytes())
    else:
        with zipfile.ZipFile(path, "w") as archive:
            archive.writestr("notes.txt", "hello")
    with pytest.raises(
        ColdStartError, match=r"model file .*model\.fbsm is not a file written by torch\.save"
    ) as raised:
        load_tensors(path, "model file", mmap=mmap)
    assert "mmap" not in str(raised.value)
    assert torch.equal(load_tensors(good, "model file", mmap=mmap)["weights"], torch.ones(3))
