"""Random, the honest floor: RecBole's draws one score vector per evaluation batch, so every user of a
batch gets the same random list (with large ``eval_batch_size`` the whole evaluation is one draw)."""

import torch
from recbole.model.general_recommender.random import Random as RecBoleRandom


class Random(RecBoleRandom):
    """RecBole's Random with independent scores for every (user, item) in full-sort evaluation."""

    nothing_to_train = "a random scorer"  # RecBole's fake loss moves nothing: no pass over the training data
    scores_cold_items = True  # the hybrid scenario's floor: cold items drawn like warm ones, not ranked last

    def full_sort_predict(self, interaction):
        """Independent uniform scores for every (user, item) of the batch.

        Args:
            interaction (Interaction): ``USER_ID``: the users, a LongTensor of shape [batch_size].

        Returns:
            torch.Tensor: the scores, flattened from shape [batch_size, n_items].
        """
        n_users = interaction[self.USER_ID].shape[0]
        return torch.rand(n_users, self.n_items, device=interaction[self.USER_ID].device).view(-1)
