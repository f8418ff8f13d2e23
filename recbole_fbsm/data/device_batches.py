"""Training batches cut from tensors on the model's device: the training loop without the loader's toll.

RecBole's loader builds every batch in Python on the CPU (indices, a collate over every column, an
``Interaction`` repeated for the negatives, a copy to the GPU). The models that read their own features need
three columns, so the training likes are held once as tensors on the model's device and a batch is a slice
of the epoch's plan (whole users, ``UserGroupedBatchSampler``, or shuffled rows), two ``index_select`` and
negatives drawn there by ``DeviceNegativeSampler`` (with dynamic sampling, the best scored of ``candidate_num``).
RecBole's trainer still drives the epochs. The negatives come from the loader's own generator (seeded by the
run's seed and the process's rank): a seeded run is the same run to run.
"""

import numpy as np
import torch
from recbole.data.interaction import Interaction
from recbole.utils import InputType

from recbole_fbsm.data.sampler import ColdStartSampler, DeviceNegativeSampler
from recbole_fbsm.errors import ColdStartError
from recbole_fbsm.runtime import distributed


def device_batches_apply(config, reads_own_features, sampler):
    """Whether the run's training batches can be cut on the device: a model that reads its own features (it
    needs only users, positives and negatives), BPR pairs with sampled negatives from the plugin's split
    sampler, and whole-user batches (any number of processes) or shuffled rows in one process (RecBole's
    data-parallel split of rows is its DistributedSampler's)."""
    args = config["train_neg_sample_args"] or {}
    sampled = args.get("distribution") in ("uniform", "popularity") and args.get("sample_num") not in (None, "none")
    return (
        reads_own_features
        and sampled
        and (bool(config["train_batch_by_user"]) or not distributed.is_distributed(config))
        and isinstance(sampler, ColdStartSampler)
        and config["MODEL_INPUT_TYPE"] == InputType.PAIRWISE
    )


# longer than 60 lines: a class factory whose body is the class (its methods are short)
def device_batches(loader_class):
    """``loader_class`` (RecBole's TrainDataLoader, or its whole-user version of ``user_batches.user_grouped``)
    whose iteration yields batches cut on the model's device; everything else (length, model, dataset,
    settings) is the loader's."""

    class DeviceTrainDataLoader(loader_class):
        def __iter__(self):
            likes = self.device_likes()
            order, cuts = self.epoch_plan()
            order = torch.as_tensor(order).to(likes["device"])
            bounds = cuts.tolist()
            return (self.cut_batch(likes, order[a:b]) for a, b in zip(bounds[:-1], bounds[1:]))

        def epoch_plan(self):
            """(like indices in batch order, batch boundaries) of the next epoch, drawn from the loader's
            generator: whole users (``UserGroupedBatchSampler``) or shuffled rows."""
            if hasattr(self._index_sampler, "epoch_plan"):  # whole users
                order, cuts = self._index_sampler.epoch_plan()
                return np.ascontiguousarray(order), cuts
            n = self.sample_size
            order = torch.randperm(n, generator=self.generator) if self.shuffle else torch.arange(n)
            return order, np.r_[np.arange(0, n, max(1, int(self.step))), n] if n else np.zeros(1, dtype=np.int64)

        def device_likes(self):
            """The training likes and the negative sampler on the model's device, built on first use (the
            model is built after the loaders) and again if the model moves."""
            device = torch.device(self.model.device if self.model is not None else self.config["device"])
            held = getattr(self, "_device_likes", None)
            if held is None or held["device"] != device:
                inter_feat = self._dataset.inter_feat
                rank = distributed.world()[0]
                seed = int(np.random.SeedSequence([int(self.config["seed"]), rank]).generate_state(1)[0])
                generator = torch.Generator(device=device).manual_seed(seed)
                negatives = DeviceNegativeSampler(self._sampler, device, generator)
                held = self._device_likes = {
                    "device": device,
                    "users": inter_feat[self.uid_field].to(device),
                    "items": inter_feat[self.iid_field].to(device),
                    "negatives": negatives,
                }
            return held

        def cut_batch(self, likes, index):
            """The batch of like indices ``index``: users, positives (each repeated ``sample_num`` times, as
            RecBole's pairwise batches) and their negatives; with whole users, their ``WholeUserBatch``."""
            users, items = likes["users"].index_select(0, index), likes["items"].index_select(0, index)
            if self.times > 1:
                users, items = users.repeat(self.times), items.repeat(self.times)
            negatives = self.device_negatives(likes["negatives"], users)
            return Interaction({self.uid_field: users, self.iid_field: items, self.neg_item_id: negatives})

        def device_negatives(self, sampler, users):
            """One negative per entry of ``users``; with dynamic sampling ``candidate_num`` draws per entry, as a
            (len(users) x candidate_num) tensor: the model's loss takes the best scored (``picks_negatives``), or,
            for another model, the best by ``predict`` (as RecBole's ``_neg_sampling``, on the device)."""
            model = self.model
            if not self.neg_sample_args.get("dynamic", False):
                return sampler.sample(users)
            candidate_num = int(self.neg_sample_args["candidate_num"])
            pair_users = users.repeat(candidate_num)
            candidates = sampler.sample(pair_users)
            if getattr(model, "picks_negatives", False):
                return candidates.view(candidate_num, -1).T.contiguous()
            if model is None:
                raise ColdStartError(
                    "dynamic negative sampling scores its candidates with the model: hand it to the "
                    "training loader first (train_data.get_model(model))."
                )
            with torch.no_grad():
                was_training = model.training
                model.eval()
                scores = model.predict(Interaction({self.uid_field: pair_users, self.iid_field: candidates}))
                model.train(was_training)
            # the first best of each column, as argmax (max over dim 0 is 4 times faster on CPU)
            best = scores.reshape(candidate_num, -1).max(0, keepdim=True).indices
            return candidates.reshape(candidate_num, -1).gather(0, best).view(-1)

    DeviceTrainDataLoader.__name__ = "Device" + loader_class.__name__
    return DeviceTrainDataLoader
