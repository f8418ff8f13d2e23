"""The CUDA path (marked ``cuda``; skipped where torch sees no GPU): every plugin model trains and
evaluates on a GPU with RecBole's ``use_gpu``/``gpu_id``, a GPU run's checkpoint gives the same metrics
on the CPU, ``serve`` scores on a GPU as on the CPU, and two GPUs run data-parallel over nccl."""

import pytest
import torch
from models.test_coldstart_models import SMALL, topics_dataset

from recbole_fbsm.quick_start import prepare, run
from recbole_fbsm.training.trainer import get_trainer

pytestmark = [
    pytest.mark.cuda,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device visible to torch"),
]

MODELS = ("FBSM", "UFSM", "CoSim", "DropoutNet", "Heater", "ALDI", "BPR")
GPU = {"use_gpu": True, "gpu_id": "0"}


@pytest.fixture
def topics(tmp_path):
    topics_dataset(tmp_path / "data", "topics")
    return {
        "data_path": str(tmp_path / "data"),
        "checkpoint_dir": str(tmp_path / "saved"),
        "seed": 2020,
        "state": "ERROR",
        "show_progress": False,
        "epochs": 3,
        **SMALL,
    }


@pytest.mark.parametrize("name", MODELS)
def test_a_model_trains_on_the_gpu_and_its_checkpoint_scores_alike_on_the_cpu(topics, name):
    config, model, _ = prepare(name, "topics", config_dict={**topics, **GPU})
    assert config["device"].type == "cuda"
    assert all(p.device.type == "cuda" for p in model.parameters())
    gpu = run(name, "topics", config_dict={**topics, **GPU})
    config, model, (_, _, test_data) = prepare(name, "topics", config_dict={**topics, "use_gpu": False})
    assert config["device"].type == "cpu"
    trainer = get_trainer(config["MODEL_TYPE"], name)(config, model)
    cpu = trainer.evaluate(test_data, load_best_model=True, model_file=gpu["saved_model_file"])
    for metric, value in gpu["test_result"].items():  # float sums differ in the last bits: rare tie flips only
        assert cpu[metric] == pytest.approx(value, abs=0.01), (metric, cpu, gpu["test_result"])


@pytest.mark.parametrize("name", ("FBSM", "DropoutNet"))
def test_training_batches_are_cut_and_their_negatives_drawn_on_the_gpu(topics, name):
    _, model, (train_data, _, _) = prepare(name, "topics", config_dict={**topics, **GPU})
    assert type(train_data).__name__.startswith("Device")
    batch = next(iter(train_data))
    assert all(batch[field].device.type == "cuda" for field in (model.USER_ID, model.ITEM_ID, model.NEG_ITEM_ID))
    assert set(batch[model.NEG_ITEM_ID].tolist()) <= set(train_data._dataset.split_items.tolist())


@pytest.mark.parametrize("name", ("FBSM", "Heater"))
def test_serving_on_the_gpu_scores_as_on_the_cpu(topics, tmp_path, name):
    from helpers import score_new_items, write_items_as_new

    from recbole_fbsm.serve.loading import load_model
    from recbole_fbsm.serve.new_items import read_new_items

    checkpoint = run(name, "topics", config_dict={**topics, **GPU})["saved_model_file"]
    scores = {}
    for device in ("cuda", "cpu"):
        served = load_model(checkpoint, device=device)
        path = tmp_path / f"new-{device}.item"
        write_items_as_new(
            tmp_path / "data" / "topics" / "topics.item", path, served.item_tokens(served.split_items("test")[:5])
        )
        users = torch.arange(1, served.model.n_users)
        scores[device] = score_new_items(served, read_new_items(served, path), users).cpu()
    torch.testing.assert_close(scores["cuda"], scores["cpu"], rtol=1e-4, atol=1e-5)


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="data-parallel over nccl needs two GPUs")
def test_two_gpus_over_nccl_evaluate_like_one(topics):
    config = {**topics, **GPU, "gpu_id": "0,1"}
    one = run("CoSim", "topics", config_dict=dict(config))
    two = run("CoSim", "topics", config_dict=dict(config), nproc=2)
    assert (two["best_valid_result"], two["test_result"]) == (one["best_valid_result"], one["test_result"])
    trained = run("FBSM", "topics", config_dict=dict(config), nproc=2)
    assert trained["world_size"] == 2 and trained["test_result"]["recall@10"] > 0
