"""DropoutNet (Volkovs, Yu, Poutanen, NeurIPS 2017): towers over [preference, content], trained with
input dropout to reproduce the warm model's scores, so that a missing preference input (a cold item)
is handled by the content part."""

import torch
from torch import nn

from recbole_fbsm.config.schema import setting
from recbole_fbsm.models.coldstart.base import (
    ContentColdStartRecommender,
    SparseLinear,
    TanhBlock,
    truncated_normal_init,
)


class DropoutNet(ContentColdStartRecommender):
    """User tower f_U(U_u), item tower f_V([V_v, phi(x_v)]), score f_U . f_V.

    - U, V: the warm BPR-MF embeddings (``recbole_fbsm.models.warm_backbone``) as they are (as ColdRec feeds them; the
      authors standardised their WMF factors, whose products are near 0/1 ratings: standardised BPR factors
      give targets of variance ~d that the tanh towers fit far worse, measured on ml-100k); x_v: the item's
      feature row.
    - The item tower's first layer is linear over the concatenation [V_v, x_v]: W_pref V_v + W_content x_v
      + b (the content half a ``SparseLinear``), then batch norm and tanh; then ``hidden_sizes`` tanh
      blocks and a linear output of ``output_size``. The user tower is the same over U_u.
    - Training (the paper's objective): for the batch's (user, item) pairs (training likes and sampled
      training negatives) minimise (f_U . f_V - U_u . V_v)^2, with the item's preference input V_v set
      to zero with probability ``dropout_rate`` (item dropout; the paper's 0.5). At cold time (items
      outside the training split) V_v is zero: the content path alone scores the item.
    """

    def __init__(self, config, dataset):
        super().__init__(config, dataset)
        hidden = [int(h) for h in config["hidden_sizes"]]
        output = setting(config, "output_size")
        self.output_size = self.embedding_size if output is None else int(output)  # ~: the warm rank
        self.dropout_rate = float(config["dropout_rate"])
        d = self.embedding_size
        self.item_content = SparseLinear(self.n_features, hidden[0], generator=self._generator)
        self.item_preference = nn.Linear(d, hidden[0], bias=False)
        self.item_first_norm = nn.BatchNorm1d(hidden[0], momentum=0.01, eps=0.001)
        self.item_layers = nn.Sequential(*[TanhBlock(a, b) for a, b in zip(hidden, hidden[1:])])
        self.item_output = nn.Linear(hidden[-1], self.output_size)
        user_sizes = [d] + hidden
        self.user_layers = nn.Sequential(*[TanhBlock(a, b) for a, b in zip(user_sizes, user_sizes[1:])])
        self.user_output = nn.Linear(hidden[-1], self.output_size)
        self.apply(truncated_normal_init)  # every nn.Linear, in the order they were made

    def user_vectors(self, users):
        return self.user_output(self.user_layers(self.warm_user_embedding.index_select(0, users)))

    def item_vectors_from_rows(self, rows, preference, warm):
        preference = preference * warm[:, None].to(preference.dtype)  # no preference input without a warm row
        hidden = self.item_content(rows) + self.item_preference(preference)
        hidden = torch.tanh(self.item_first_norm(hidden))
        return self.item_output(self.item_layers(hidden))

    def calculate_loss(self, interaction):
        """The towers' squared error to the warm model's scores of the batch's likes and negatives.

        Args:
            interaction (Interaction): a training batch: ``USER_ID``, ``ITEM_ID`` (a liked training item) and
                ``NEG_ITEM_ID`` (a sampled training item), LongTensors of shape [batch_size].

        Returns:
            torch.Tensor: the batch's loss, a scalar.
        """
        users, positives, negatives = self.batch_triplets(interaction)
        users = torch.cat([users, users])
        items = torch.cat([positives, negatives])
        target = self.warm_scores(users, items)
        keep = ~self.bernoulli(len(items), self.dropout_rate, items.device)  # item dropout
        rows = self.F.gather_rows(items)
        preference = self.warm_item_embedding.index_select(0, items)
        warm = self.training_item_mask.index_select(0, items) & keep
        prediction = self.triplet_scores(users[: len(positives)], self.item_vectors_from_rows(rows, preference, warm))
        return torch.nn.functional.mse_loss(prediction, target)
