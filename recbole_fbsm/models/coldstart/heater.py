"""Heater (Zhu, Sun, Wang, Caverlee, SIGIR 2020): a mixture-of-experts transform of item content into the
warm embedding space, aligned with the warm embeddings, and randomized training that feeds the towers
the transformed content instead of the warm embedding at random."""

import torch
from torch import nn

from recbole_fbsm.config.schema import setting
from recbole_fbsm.models.coldstart.base import (
    ContentColdStartRecommender,
    SparseLinear,
    TanhBlock,
    standardized,
    truncated_normal_init,
)


class Heater(ContentColdStartRecommender):
    """Item content x -> MoE: z(x) = tanh(sum_k g_k(x) tanh(W_k x + b_k)), g(x) = tanh(W_g x + b_g)
    (``n_experts`` one-layer experts with the warm rank as width, a tanh gate, as in the authors' code).

    - Inputs: U, V the warm BPR-MF embeddings, standardised per column over users with likes / training
      items and cut at 5 (U) and 1 (V) standard deviations, as the authors' code prepares them.
    - Item input to the item tower: V_v, replaced by z(x_v) with probability ``randomized_rate``
      (randomized training) and always for items without a warm row (cold items). Towers: one
      batch-normalised tanh layer and a linear output, for users over U_u, for items over that input.
    - Loss: recommendation loss (squared error of the score against 1 for a training like and 0 for a
      sampled training negative; ``sample_num`` negatives per like, each like counted once), plus the
      alignment ("similarity") loss ``alignment_weight`` * sum ||z(x_v) - V_v||^2 over the batch's items,
      plus L2 (``reg_weight``, as weight decay) on the layers.
    """

    reg_weight_decay = 2.0  # the authors' reg * ||w||^2 in the loss: a gradient of 2 reg w

    def __init__(self, config, dataset):
        super().__init__(config, dataset)
        d = self.embedding_size
        self.n_experts = int(config["n_experts"])
        self.randomized_rate = float(config["randomized_rate"])
        self.alignment_weight = float(config["alignment_weight"])
        self.negatives_per_like = int((config["train_neg_sample_args"] or {}).get("sample_num") or 1)
        output = d if setting(config, "output_size") is None else int(setting(config, "output_size"))  # ~: warm rank
        has_likes = self.warm_user_embedding.abs().sum(1) > 0
        self.register_buffer("user_input", standardized(self.warm_user_embedding, has_likes, 5.0), persistent=False)
        self.register_buffer(
            "item_input", standardized(self.warm_item_embedding, self.training_item_mask, 1.0), persistent=False
        )
        self.experts = SparseLinear(self.n_features, self.n_experts * d, generator=self._generator)
        self.gate = SparseLinear(self.n_features, self.n_experts, generator=self._generator)
        self.user_layer, self.item_layer = TanhBlock(d, output), TanhBlock(d, output)
        self.user_output, self.item_output = nn.Linear(output, output), nn.Linear(output, output)
        self.apply(truncated_normal_init)  # every nn.Linear, in the order they were made

    def item_preference_table(self):
        return self.item_input

    def content_embedding(self, rows):
        """z(x): the gated mixture of the experts' transforms of the content, in the warm space."""
        experts = torch.tanh(self.experts(rows)).view(-1, self.n_experts, self.embedding_size)
        gate = torch.tanh(self.gate(rows))
        return torch.tanh((gate.unsqueeze(2) * experts).sum(1))

    def user_vectors(self, users):
        return self.user_output(self.user_layer(self.user_input.index_select(0, users)))

    def item_vectors_from_rows(self, rows, preference, warm):
        item_input = torch.where(warm[:, None], preference, self.content_embedding(rows))
        return self.item_output(self.item_layer(item_input))

    def calculate_loss(self, interaction):
        """Squared error of the scores to 1 (likes, each counted once) and 0 (negatives), plus the alignment of
        the training items' content to their warm embeddings.

        Args:
            interaction (Interaction): a training batch: ``USER_ID``, ``ITEM_ID`` (a liked training item) and
                ``NEG_ITEM_ID`` (a sampled training item), LongTensors of shape [batch_size].

        Returns:
            torch.Tensor: the batch's loss, a scalar.
        """
        users, positives, negatives = self.batch_triplets(interaction)
        n = len(users)
        items = torch.cat([positives, negatives])
        labels = torch.cat([torch.ones(n), torch.zeros(n)]).to(self.item_input.device)
        # RecBole repeats each like once per negative: count every like once, as the authors' sampler does
        weights = torch.cat([torch.full((n,), 1.0 / self.negatives_per_like), torch.ones(n)]).to(labels.device)
        distinct, inverse = torch.unique(items, return_inverse=True)  # each like appears sample_num times
        content = self.content_embedding(self.F.gather_rows(distinct)).index_select(0, inverse)
        preference = self.item_input.index_select(0, items)
        warm = self.training_item_mask.index_select(0, items)
        use_content = ~warm | self.bernoulli(len(items), self.randomized_rate, items.device)
        item_input = torch.where(use_content[:, None], content, preference)
        scores = self.triplet_scores(users, self.item_output(self.item_layer(item_input)))
        recommendation = (weights * (scores - labels).pow(2)).sum() / weights.sum()
        alignment = (
            self.alignment_weight * (weights * warm.to(weights.dtype) * (content - preference).pow(2).sum(-1)).sum()
        )
        return recommendation + alignment
