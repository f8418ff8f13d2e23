"""Results depend only on what they should: not on the evaluation batch size, the metric list, the
cut-offs or the order of the files' lines; evaluation batches stay within their cell budget; early
stopping counts like the paper and a tie keeps the earlier checkpoint."""

import numpy as np
import pytest
import torch
from helpers import dataset_config, write_dataset

from recbole_fbsm.quick_start import prepare, run
from recbole_fbsm.storage.safe_files import load_checkpoint
from recbole_fbsm.training.trainer import get_trainer

pytestmark = pytest.mark.usefixtures("workdir")


def trainer_for(model, data, **overrides):
    config, model, loaders = prepare(model, data.name, config_dict=dataset_config(data, **overrides))
    return config, get_trainer(config["MODEL_TYPE"], config["model"])(config, model), loaders


def pop_valid_result(data, **overrides):
    """Pop trained one epoch (it scores every cold item alike: all ties), evaluated on validation."""
    _, trainer, (train_data, valid_data, _) = trainer_for("Pop", data, **overrides)
    trainer._train_epoch(train_data, 0)
    return trainer.evaluate(valid_data, load_best_model=False)


def test_metrics_do_not_depend_on_the_evaluation_batch_size(toy):
    small = pop_valid_result(toy, eval_batch_size=2 * 64)  # a couple of users per batch
    large = pop_valid_result(toy, eval_batch_size=1 << 24)  # every user in one batch
    assert small == large


def test_metrics_do_not_depend_on_the_metric_list_or_the_cutoffs(toy):
    plain = pop_valid_result(toy, metrics=["Recall"], topk=[10])
    more = pop_valid_result(toy, metrics=["Hit", "Recall", "NDCG"], topk=[5, 10, 11])
    assert plain["recall@10"] == more["recall@10"]


def test_evaluation_draws_nothing_from_the_random_streams_training_uses(toy):
    _, trainer, (train_data, valid_data, _) = trainer_for("Pop", toy)
    trainer._train_epoch(train_data, 0)
    torch_state, numpy_state = torch.get_rng_state(), np.random.get_state()
    trainer.evaluate(valid_data, load_best_model=False)
    assert torch.equal(torch.get_rng_state(), torch_state)
    after = np.random.get_state()
    assert np.array_equal(after[1], numpy_state[1]) and after[2] == numpy_state[2]


def test_metric_list_does_not_change_the_trained_model(toy):
    """The same FBSM run with another metric list and cut-offs keeps the same epoch and parameters."""
    results = [
        run("FBSM", toy.name, config_dict=dataset_config(toy, epochs=4, metrics=metrics, topk=topk, rank=3))
        for metrics, topk in ((["Recall"], [10]), (["Recall", "NDCG", "Hit"], [3, 10, 11]))
    ]
    assert results[0]["best_valid_result"]["recall@10"] == results[1]["best_valid_result"]["recall@10"]
    assert results[0]["test_result"]["recall@10"] == results[1]["test_result"]["recall@10"]
    weights = [load_checkpoint(r["saved_model_file"])["state_dict"] for r in results]
    assert all(torch.equal(weights[0][name], weights[1][name]) for name in weights[0])


def test_row_order_of_the_files_changes_nothing(tmp_path):
    """The same likes, dislikes and item rows in another line order: the same ids, split and metrics."""
    results, vocabularies = [], []
    for index, order_seed in enumerate((None, 7)):
        data = write_dataset(tmp_path / f"copy{index}", "toy", rows_order_seed=order_seed)
        config = dataset_config(data, epochs=3, rank=3)
        results.append(run("FBSM", "toy", config_dict=config))
        _, model, (train_data, _, _) = prepare("FBSM", "toy", config_dict=config)
        dataset = train_data._dataset
        vocabularies.append((list(dataset.field2id_token["item_id"]), list(dataset.field2id_token["words"])))
    for key in ("best_valid_result", "test_result"):
        assert results[0][key] == results[1][key]
    assert vocabularies[0] == vocabularies[1]
    weights = [load_checkpoint(r["saved_model_file"])["state_dict"] for r in results]
    assert all(torch.equal(weights[0][name], weights[1][name]) for name in weights[0])


def wide_vocabulary_dataset(root, n_items=40, words_per_item=60):
    """Few items, a large vocabulary (every item its own words): the (users x features) block is wide."""
    folder = root / "wide"
    folder.mkdir(parents=True)
    rng = np.random.default_rng(0)
    rows = [(f"u{u}", f"i{i}") for u in range(30) for i in rng.choice(n_items, 6, replace=False)]
    (folder / "wide.inter").write_text("user_id:token\titem_id:token\n" + "".join(f"{u}\t{i}\n" for u, i in rows))
    lines = [f"i{i}\t" + " ".join(f"w{i}_{k}" for k in range(words_per_item)) + "\n" for i in range(n_items)]
    (folder / "wide.item").write_text("item_id:token\twords:token_seq\n" + "".join(lines))
    return n_items * words_per_item


def test_evaluation_batches_stay_within_eval_batch_size_cells_with_a_large_vocabulary(tmp_path):
    n_words = wide_vocabulary_dataset(tmp_path)
    cells = 5 * n_words
    config, model, (_, valid_data, _) = prepare(
        "CoSim",
        "wide",
        config_dict=dict(
            state="ERROR",
            use_gpu=False,
            epochs=1,
            data_path=str(tmp_path),
            checkpoint_dir=str(tmp_path / "saved"),
            load_col={"inter": ["user_id", "item_id"], "item": ["item_id", "words"]},
            threshold=None,
            eval_batch_size=cells,
            topk=[5],
            valid_metric="Recall@5",
        ),
    )
    trainer = get_trainer(config["MODEL_TYPE"], config["model"])(config, model)
    widths = []
    weighted_profiles_t = model.weighted_profiles_t

    def spy(users, *args, **kwargs):
        block = weighted_profiles_t(users, *args, **kwargs)  # the users' dense profiles, features x users
        widths.append(block.numel())
        return block

    model.weighted_profiles_t = spy
    trainer.evaluate(valid_data, load_best_model=False)
    assert model.n_features >= n_words * 0.5 and widths
    assert max(widths) <= cells, f"a dense block of {max(widths)} cells for eval_batch_size {cells}"


class _ScoreSequence:
    """Makes validation return a given sequence of scores, and records epochs and checkpoints."""

    def __init__(self, trainer, scores):
        self.scores, self.saved, self.trained = list(scores), [], []
        save, train = trainer._save_checkpoint, trainer._train_epoch
        metric = trainer.valid_metric

        def fake_evaluate(eval_data, load_best_model=True, model_file=None, show_progress=False):
            return {metric: self.scores.pop(0)}

        def fake_save(epoch, *args, **kwargs):
            self.saved.append(epoch)
            return save(epoch, *args, **kwargs)

        def fake_train(train_data, epoch_idx, *args, **kwargs):
            self.trained.append(epoch_idx)
            return train(train_data, epoch_idx, *args, **kwargs)

        trainer.evaluate, trainer._save_checkpoint, trainer._train_epoch = fake_evaluate, fake_save, fake_train


def test_early_stopping_counts_like_the_paper_and_a_tie_keeps_the_earlier_epoch(toy):
    """Scores 0.1, 0.2, 0.2 (tie), 0.15, 0.19 with stopping_step 3: the kept epoch is 1 (the tie at epoch 2
    does not replace it), and training stops after 3 epochs without improvement (epochs 2, 3, 4)."""
    _, trainer, (train_data, valid_data, _) = trainer_for("BPR", toy, epochs=20, stopping_step=3)
    spy = _ScoreSequence(trainer, [0.1, 0.2, 0.2, 0.15, 0.19] + [0.0] * 20)
    best_score, _ = trainer.fit(train_data, valid_data, saved=True)
    assert spy.trained == [0, 1, 2, 3, 4]
    assert spy.saved == [0, 1]
    assert best_score == 0.2
