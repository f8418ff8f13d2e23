"""The one model file format (checkpoints and artifacts): what goes in comes back exactly, and a file that is not
one of ours (a pickle, another file, one cut short, one changed) is named so in one line, its content never run."""

import zipfile

import pytest
import torch

from recbole_fbsm.errors import ColdStartError
from recbole_fbsm.storage.safe_files import PickledFileError, load_checkpoint, load_tensors, save_tensors


def test_nested_records_come_back_exactly(tmp_path):
    """Dicts with int keys (an optimizer's state), lists of tensors, plain values: as they were written."""
    record = {
        "state_dict": {"V": torch.randn(3, 2), "D": torch.ones(3, dtype=torch.float64)},
        "optimizer": {
            "state": {0: {"step": torch.tensor(3.0), "exp_avg": torch.zeros(2)}},
            "param_groups": [{"lr": 0.1, "params": [0]}],
        },
        "other_parameter": {"__csr__": [torch.tensor([0, 1]), torch.tensor([0]), torch.tensor([2.0]), [1, 1]]},
        "config": {"model": "FBSM", "topk": [10], "seed": 2020, "none": None},
    }
    path = save_tensors(record, tmp_path / "c.pth", {"format": "x"})
    header, again = load_tensors(path, "checkpoint")
    assert header == {"format": "x"}
    assert again["config"] == record["config"] and again["optimizer"]["param_groups"] == [{"lr": 0.1, "params": [0]}]
    assert list(again["optimizer"]["state"]) == [0]  # int keys stay int: torch's load_state_dict matches them
    torch.testing.assert_close(again["state_dict"], record["state_dict"])
    assert again["state_dict"]["D"].dtype == torch.float64
    assert torch.equal(again["other_parameter"]["__csr__"][2], torch.tensor([2.0]))


@pytest.mark.parametrize("kind", ["torch.save", "empty zip", "bytes prepended", "text", "cut short"])
def test_a_file_that_is_not_ours_is_one_line(tmp_path, kind):
    good = save_tensors({"state_dict": {"w": torch.ones(3)}, "config": {}}, tmp_path / "good.pth")
    path = tmp_path / "model.pth"
    if kind == "torch.save":
        torch.save({"state_dict": {}}, path)
    elif kind == "empty zip":
        zipfile.ZipFile(path, "w").close()
    elif kind == "bytes prepended":
        path.write_bytes(b"#!junk\n" * 10 + good.read_bytes())
    elif kind == "text":
        path.write_text("user_id:token\titem_id:token\n")
    else:
        path.write_bytes(good.read_bytes()[:-3])
    with pytest.raises(ColdStartError) as raised:
        load_checkpoint(path)
    message = str(raised.value)
    assert "\n" not in message and str(path) in message
    if kind in ("torch.save", "empty zip"):
        assert isinstance(raised.value, PickledFileError) and "retrain with this release" in message
    else:
        assert "is not a file of recbole-fbsm (safetensors)" in message
    assert torch.equal(load_checkpoint(good)["state_dict"]["w"], torch.ones(3))


def test_a_changed_byte_is_refused_and_an_artifact_is_not_a_checkpoint(tmp_path):
    path = save_tensors({"state_dict": {"w": torch.ones(3)}, "config": {}}, tmp_path / "c.pth")
    data = bytearray(path.read_bytes())
    data[-1] ^= 0x01  # a weight's last byte
    path.write_bytes(bytes(data))
    with pytest.raises(ColdStartError, match="its SHA-256 is not the one it was written with"):
        load_checkpoint(path)
    artifact = save_tensors({"state_dict": {}}, tmp_path / "m.fbsm", {"format": "recbole-fbsm model"})
    with pytest.raises(ColdStartError, match=r"is a recbole-fbsm model, not a training checkpoint"):
        load_checkpoint(artifact)
