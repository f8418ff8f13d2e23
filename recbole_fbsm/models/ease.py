"""EASE (Steck, WWW 2019) as RecBole's, in float32 on the run's device, with a fraction of RecBole's memory.

RecBole's EASE inverts the dense Gram matrix with numpy and keeps three dense n_items² copies: on citeulike-t
(25,585 items) it passed 18.5 GB. Here the inverse comes from a Cholesky factor (G + λI is symmetric positive
definite), each dense matrix is freed once the next exists, and B is kept on the device that scores with it.
"""

import numpy as np
import torch
from recbole.model.abstract_recommender import GeneralRecommender
from recbole.model.general_recommender.ease import EASE as RecBoleEASE


def ease_weights(interactions, reg_weight, device):
    """B = I - P diagMat(1 / diag(P)) with P = (XᵀX + λI)⁻¹, then diag(B) = 0: the closed form of Steck's paper.

    Args:
        interactions (scipy.sparse.csr_matrix): X, the training likes, of shape [n_users, n_items].
        reg_weight (float): λ.
        device (torch.device): where the dense matrices are built.

    Returns:
        torch.Tensor: B, float32 of shape [n_items, n_items], on ``device``.
    """
    gram = torch.from_numpy((interactions.T @ interactions).toarray().astype(np.float32, copy=False)).to(device)
    gram.diagonal().add_(float(reg_weight))
    factor = torch.linalg.cholesky(gram)
    del gram
    weights = torch.cholesky_inverse(factor)
    del factor
    weights.div_(-weights.diagonal().clone())  # P_ij / -P_jj, column by column
    weights.diagonal().zero_()
    return weights


class EASE(RecBoleEASE):
    """RecBole's EASE (same ``reg_weight``, same scores up to float32 rounding) with its weights on the device."""

    nothing_to_train = "a closed form, computed when the model is built"

    def __init__(self, config, dataset):
        GeneralRecommender.__init__(self, config, dataset)
        self.dummy_param = torch.nn.Parameter(torch.zeros(1))  # RecBole's optimizer needs one parameter
        self.interaction_matrix = dataset.inter_matrix(form="csr").astype(np.float32)
        # the checkpoint keeps B on the CPU (its writer reads tensors as numpy); scoring reads the device's copy
        self._device_weights = ease_weights(self.interaction_matrix, config["reg_weight"], self.device)
        self.item_similarity = self._weights_source = self._device_weights.cpu()  # the same tensor on the CPU
        self.other_parameter_name = ["interaction_matrix", "item_similarity"]

    @property
    def weights(self):
        """B on the device, copied there again when a checkpoint has replaced ``item_similarity``."""
        if self._weights_source is not self.item_similarity:
            self._device_weights = torch.as_tensor(self.item_similarity).to(self.device)
            self._weights_source = self.item_similarity
        return self._device_weights

    def _user_likes(self, users):
        """The users' training likes as (row in the batch, item, value), LongTensors and a float32 tensor."""
        rows = self.interaction_matrix[users.cpu().numpy()].tocoo()
        return (
            torch.from_numpy(array).to(self.device)
            for array in (rows.row.astype(np.int64), rows.col.astype(np.int64), rows.data)
        )

    def full_sort_predict(self, interaction):
        """Every item's score X_u B.

        Args:
            interaction (Interaction): ``USER_ID``: the users, a LongTensor of shape [batch_size].

        Returns:
            torch.Tensor: the scores, flattened from shape [batch_size, n_items].
        """
        users = interaction[self.USER_ID]
        row, item, value = self._user_likes(users)
        likes = torch.sparse_coo_tensor(
            torch.stack([row, item]), value, (len(users), self.n_items), check_invariants=False
        )
        return torch.sparse.mm(likes, self.weights).view(-1)

    def predict(self, interaction):
        """The score X_u B_i of each (user, item) pair: the sum of B_ji over the user's liked items j.

        Args:
            interaction (Interaction): ``USER_ID`` and ``ITEM_ID``, LongTensors of shape [batch_size].

        Returns:
            torch.Tensor: the scores, of shape [batch_size].
        """
        row, item, value = self._user_likes(interaction[self.USER_ID])
        targets = interaction[self.ITEM_ID].to(self.device)[row]
        scores = torch.zeros(len(interaction[self.ITEM_ID]), device=self.device)
        return scores.index_add_(0, row, value * self.weights[item, targets])
