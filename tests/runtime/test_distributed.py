"""Data-parallel runs (``recbole_fbsm.runtime.distributed``): 2 CPU processes over gloo on small generated data.

What must hold: with ``parallel_sync: gradients`` each rank trains on whole users and all ranks together on
exactly the batch one process would, and a step's gradient is the mean of the ranks' gradients (DDP's all-reduce);
it learns like one process; evaluation gives the one-process metrics to the last digit; two launches of one
rank each (two "machines" on this host) run
the same as ``--nproc=2``; only rank 0 writes.
"""

import copy
import os
import subprocess
import sys
import time

import numpy as np
import pytest
import torch
from helpers import REPO_ROOT, RUN_RECBOLE, dataset_config, write_dataset
from synthetic import planted_interactions

from recbole_fbsm.data.user_batches import UserGroupedBatchSampler
from recbole_fbsm.errors import ColdStartError
from recbole_fbsm.quick_start import run
from recbole_fbsm.runtime import distributed
from recbole_fbsm.serve.loading import load_model


def _shares(users, batch_size, world_size, seed=1):
    """Every rank's batches for one epoch (the ranks' generators are seeded alike, as in a run)."""
    return [
        list(UserGroupedBatchSampler(users, batch_size, torch.Generator().manual_seed(seed), rank, world_size))
        for rank in range(world_size)
    ]


@pytest.mark.parametrize("world_size", [2, 3])
def test_ranks_split_each_batch_by_whole_users_and_together_cover_the_one_process_batches(world_size):
    rng = np.random.default_rng(0)
    users = rng.integers(0, 400, size=6000)
    one = list(UserGroupedBatchSampler(users, 256, torch.Generator().manual_seed(1)))
    shares = _shares(users, 256, world_size)
    assert len({len(batches) for batches in shares}) == 1, "every rank must take the same number of steps"
    assert len(shares[0]) == len(one), "no batch merged: every batch here has more users than ranks"
    for step, whole in enumerate(one):
        parts = [shares[rank][step] for rank in range(world_size)]
        assert all(len(part) for part in parts), "a rank without rows at a step"
        assert sorted(np.concatenate(parts).tolist()) == sorted(whole), "the ranks' step is not the one-process batch"
        owners = [set(users[part].tolist()) for part in parts]
        assert not set.intersection(*owners), "a user split over two ranks"
        assert set.union(*owners) == set(users[whole].tolist())


def test_a_batch_with_fewer_users_than_ranks_is_merged_and_no_rank_goes_empty():
    rng = np.random.default_rng(1)
    users = rng.integers(0, 60, size=1200)
    users[:900] = 5  # one user far larger than a batch: alone in a batch of the one-process plan
    shares = _shares(users, 64, 2)
    assert len(shares[0]) == len(shares[1])
    flat = np.concatenate([np.concatenate(batches) for batches in shares])
    assert np.array_equal(np.sort(flat), np.arange(len(users))), "each like exactly once per epoch"
    assert all(len(part) for batches in shares for part in batches)
    steps_of_user_5 = [
        (rank, step)
        for rank, batches in enumerate(shares)
        for step, part in enumerate(batches)
        if 5 in set(users[part].tolist())
    ]
    assert len(steps_of_user_5) == 1


def test_too_few_users_for_the_ranks_is_a_clear_error():
    with pytest.raises(ColdStartError, match="at least one per process"):
        _shares(np.array([0, 0, 1, 1]), 4, 3)


def test_gather_rows_outside_a_process_group_is_the_identity():
    rows = {"rec.topk": torch.arange(6).view(3, 2)}
    assert distributed.gather_rows(rows)["rec.topk"] is rows["rec.topk"]
    assert distributed.shard_bounds(10, 0, 3) == (0, 3) and distributed.shard_bounds(10, 2, 3) == (6, 10)


# ------------------------------------------------------------------ in 2 processes
def _gradient_worker(local_rank, config_dict, launch_settings, queue):
    """One rank: the DDP gradient of its share of the first step, and (rank 0) the mean of the ranks' shares'
    gradients (the shares gathered, with their negatives) on an unwrapped copy."""
    import torch.distributed as dist

    from recbole_fbsm.quick_start import prepare
    from recbole_fbsm.training.trainer import get_trainer

    try:
        config, model, (train_data, _, _) = prepare(
            "FBSM", "toy", config_dict={**config_dict, **launch_settings, "local_rank": local_rank}
        )
        model.double()
        for module in (model.F, model.F_U, model.R):
            module.values = module.values.double()
        reference = copy.deepcopy(model)
        trainer = get_trainer(config["MODEL_TYPE"], "FBSM")(config, model)
        share = next(iter(train_data))
        trainer.set_reduce_hook()
        loss = model.calculate_loss(share) + trainer.sync_grad_loss()
        loss.backward()
        shares = [None] * dist.get_world_size()
        dist.all_gather_object(shares, {key: value for key, value in share.interaction.items()})
        if dist.get_rank() == 0:
            from recbole.data.interaction import Interaction

            (sum(reference.calculate_loss(Interaction(s)) for s in shares) / len(shares)).backward()
            queue.put(
                (
                    "result",
                    {  # numpy: torch would share tensors through files gone with the process
                        "rows": [len(s[model.USER_ID]) for s in shares],
                        "users": [set(s[model.USER_ID].tolist()) for s in shares],
                        "ddp": (model.D.grad.numpy().copy(), model.V.grad.numpy().copy()),
                        "one": (reference.D.grad.numpy().copy(), reference.V.grad.numpy().copy()),
                    },
                )
            )
        distributed.end_process_group(together=True)
    finally:
        distributed.end_process_group()


def test_a_two_process_step_has_the_mean_gradient_of_the_ranks_shares(toy):
    config = dataset_config(
        toy,
        train_batch_by_user=True,
        train_batch_size=64,
        rank=3,
        init_std=0.3,
        torch_threads=1,
        parallel_sync="gradients",
    )
    got = distributed.launch(_gradient_worker, 2, -1, "localhost", None, 0, (config,))
    assert all(got["rows"]) and not got["users"][0] & got["users"][1], "shares must be non-empty, whole users"
    for ddp, one in zip(got["ddp"], got["one"]):
        assert np.abs(one).max() > 0
        np.testing.assert_allclose(ddp, one, rtol=1e-10, atol=1e-12)


def _aborting_worker(local_rank, finish_first, launch_settings, queue):
    """A rank that dies by SIGABRT (as gloo aborts a rank while the process group is torn down), after or
    before it reported its work done."""
    if finish_first:
        if local_rank == 0:
            queue.put(("result", {"value": 7}))
        queue.put(("done", local_rank))
    if local_rank == 1:
        if finish_first:  # a real run's ranks pass a barrier after reporting; here rank 0 gets time to report
            time.sleep(3)
        os.abort()


def test_an_abort_while_leaving_the_group_keeps_the_finished_result_and_an_earlier_one_fails():
    assert distributed.launch(_aborting_worker, 2, -1, "localhost", None, 0, (True,)) == {"value": 7}
    with pytest.raises(torch.multiprocessing.ProcessExitedException, match="SIGABRT"):
        distributed.launch(_aborting_worker, 2, -1, "localhost", None, 0, (False,))


def _metrics(result):
    return result["best_valid_result"], result["test_result"]


def test_two_processes_evaluate_exactly_like_one(toy):
    """CoSim has nothing to learn: the same model on 1 and 2 processes must give the same numbers, ties
    included (evaluation rows are gathered, not per-rank metrics averaged)."""
    config = dataset_config(
        toy, torch_threads=1, metrics=["Recall", "NDCG", "Hit", "MRR", "Precision", "MAP"], topk=[1, 5, 10]
    )
    one = run("CoSim", "toy", config_dict=dict(config))
    two = run("CoSim", "toy", config_dict=dict(config), nproc=2)
    assert _metrics(two) == _metrics(one)
    assert two["world_size"] == 2 and os.path.isfile(two["result_file"])


@pytest.fixture(scope="module")
def planted_one_process(tmp_path_factory):
    """The planted-pairs data, and FBSM's and CoSim's test recall@10 on one process."""
    root = tmp_path_factory.mktemp("planted")
    planted_interactions(root / "data", "planted", split_seed=2020)
    common = {
        "state": "ERROR",
        "show_progress": False,
        "data_path": str(root / "data"),
        "seed": 2020,
        "checkpoint_dir": str(root / "saved"),
        "torch_threads": 1,
        "learning_rate": 0.003,  # V's rate for planted pairs (the default, 3e-5, suits real text: docs/models.md)
    }  # the default epochs
    one = run("FBSM", "planted", config_dict=dict(common))["test_result"]["recall@10"]
    cosim = run("CoSim", "planted", config_dict=dict(common))["test_result"]["recall@10"]
    return common, one, cosim


def test_fbsm_on_two_processes_learns_like_one(planted_one_process, tmp_path):
    """Planted feature pairs: FBSM on 2 processes finds them as on 1, and only rank 0 wrote a checkpoint and
    a log. The negatives differ, and V leaves its near-zero start after a plateau of a random length, so
    early stopping keeps epochs tens apart: 0.26 on one process and 0.34 on two were seen for this seed.
    The steps themselves are DDP's mean gradient
    (``test_a_two_process_step_has_the_mean_gradient_of_the_ranks_shares``)."""
    common, one, cosim = planted_one_process
    common = {**common, "checkpoint_dir": str(tmp_path / "saved")}
    two_result = run("FBSM", "planted", config_dict=dict(common), nproc=2)
    two = two_result["test_result"]["recall@10"]
    assert min(one, two) >= 2 * cosim and min(one, two) > 0.2, (one, two, cosim)
    assert abs(two - one) <= 0.35 * max(one, two), (one, two)
    saved = os.listdir(tmp_path / "saved")
    # one checkpoint and one artifact, none from rank 1
    files = sorted(os.path.basename(two_result[key]) for key in ("saved_model_file", "artifact_file"))
    assert sorted(name for name in saved if name.startswith("FBSM")) == files, saved
    # its artifact serves every user
    served = load_model(two_result["artifact_file"]).model
    with_likes = np.diff(served.R.indptr.numpy()) > 0
    assert with_likes[0::2].any() and with_likes[1::2].any()
    np.testing.assert_array_equal(np.diff(served.F_U.indptr.numpy()) > 0, with_likes)


def test_two_machines_on_one_host_run_like_nproc_2(toy, tmp_path):
    """The documented multi-machine launch: two commands with --world_size=2 --group_offset=0/1."""
    args = [
        f"--data_path={toy.root}",
        "--load_col={'inter': ['user_id', 'item_id', 'rating'], 'item': ['item_id', 'genre', 'words']}",
        "--threshold={'rating': 4}",
        "--epochs=2",
        "--torch_threads=1",
        "--state=ERROR",
    ]
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    port = distributed.free_port()
    launches = [
        subprocess.Popen(
            [
                sys.executable,
                str(RUN_RECBOLE),
                "--model=FBSM",
                "--dataset=toy",
                "--world_size=2",
                "--nproc=1",
                f"--group_offset={offset}",
                "--ip=127.0.0.1",
                f"--port={port}",
                f"--checkpoint_dir={tmp_path / f'saved{offset}'}",
                *args,
            ],
            cwd=tmp_path,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for offset in (0, 1)
    ]
    outputs = [launch.communicate(timeout=300) for launch in launches]
    assert [launch.returncode for launch in launches] == [0, 0], outputs
    assert "test result" in outputs[0][0]
    assert "rank 0 reports the results" in outputs[1][0]
    assert not (tmp_path / "saved1").exists() or not os.listdir(tmp_path / "saved1"), "rank 1 wrote a checkpoint"
    together = subprocess.run(
        [
            sys.executable,
            str(RUN_RECBOLE),
            "--model=FBSM",
            "--dataset=toy",
            "--nproc=2",
            f"--checkpoint_dir={tmp_path / 'saved2'}",
            *args,
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert together.returncode == 0, together.stderr
    line = [row for row in outputs[0][0].splitlines() if row.startswith("test result")]
    assert line == [row for row in together.stdout.splitlines() if row.startswith("test result")]


def test_bad_launch_settings_are_one_line_errors(tmp_path):
    result = subprocess.run(
        [sys.executable, str(RUN_RECBOLE), "--model=FBSM", "--world_size=2", "--nproc=1", "--group_offset=2"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2 and result.stderr.startswith("error: --group_offset=2"), result.stderr
    assert "Traceback" not in result.stderr


def test_nccl_without_gpus_is_refused_with_the_setting_named(toy):
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA: nccl is a valid choice here")
    with pytest.raises(ColdStartError, match="dist_backend: nccl needs CUDA"):
        run("CoSim", "toy", config_dict=dataset_config(toy, dist_backend="nccl"), nproc=2)


@pytest.mark.parametrize("name", ["BPR", "FM"])
def test_recboles_general_and_context_models_train_on_two_processes(toy, name):
    """RecBole's own loaders (no whole-user batches) under the same launch: trained, tested, reported."""
    result = run(name, "toy", config_dict=dataset_config(toy, torch_threads=1, epochs=2), nproc=2)
    assert result["world_size"] == 2 and result["best_epoch"] is not None
    assert set(result["test_result"]) >= {"recall@10", "ndcg@10"} and os.path.isfile(result["saved_model_file"])


HYBRID = {"cold_start_scenario": "hybrid", "metrics": ["Recall", "NDCG"], "topk": [5], "valid_metric": "recall@5"}
GROUPS = ("best_valid_result", "test_result", "valid_result_cold", "valid_result_warm")
GROUPS += ("test_result_cold", "test_result_warm")


def test_two_processes_evaluate_the_hybrid_groups_exactly_like_one(tmp_path):
    """The hybrid scenario: CoSim's all, cold and warm metrics on 2 processes are the one-process figures."""
    data = write_dataset(tmp_path, "hyb", n_users=50, n_items=80, likes_per_user=(4, 14))
    config = dataset_config(data, torch_threads=1, **HYBRID)
    one = run("CoSim", "hyb", config_dict=dict(config))
    two = run("CoSim", "hyb", config_dict=dict(config), nproc=2)
    assert two["world_size"] == 2
    assert {key: two[key] for key in GROUPS} == {key: one[key] for key in GROUPS}
    assert 0 < one["test_result_cold"]["recall@5"] < 1


@pytest.mark.parametrize(
    "name, settings",
    [
        ("ALDI", {"warm_epochs": 3, "warm_embedding_size": 8, "hidden_size": 16}),
        ("FBSM", {"identity_features": True}),
        ("HybridBlend", {"warm_model": "ItemKNN", "content_model": "CoSim"}),
    ],
)
def test_hybrid_models_train_on_two_processes(tmp_path, name, settings):
    """Trained on 2 processes, reported in the three groups. ALDI's warm items are scored by its warm backbone,
    trained alike on every rank before the data-parallel part: its warm figures are the one-process ones; the blend
    of two models with nothing to learn is the one-process blend, its weight searched on the gathered validation."""
    data = write_dataset(tmp_path, "hyb", n_users=50, n_items=80, likes_per_user=(4, 14))
    config = dataset_config(data, torch_threads=1, epochs=2, **HYBRID, **settings)
    two = run(name, "hyb", config_dict=dict(config), nproc=2)
    assert two["world_size"] == 2
    for key in GROUPS:
        assert set(two[key]) == {"recall@5", "ndcg@5"}, key
    if name == "FBSM":
        return
    one = run(name, "hyb", config_dict=dict(config))
    if name == "ALDI":
        assert two["test_result_warm"] == one["test_result_warm"]
    else:
        assert {key: two[key] for key in GROUPS} == {key: one[key] for key in GROUPS}
        assert two["blend_weight"] == one["blend_weight"] and two["blend_search"] == one["blend_search"]
