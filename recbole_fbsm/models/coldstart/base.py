"""What DropoutNet, Heater and ALDI share: score(u, i) = user_vector(u) . item_vector(i), the user vector from
the user's warm (BPR-MF) embedding, the item vector from the item's sparse content row and, for training items
only, its warm embedding (an item outside the training split has a zero warm row: its id never enters its score).
"""

import torch
from recbole.model.abstract_recommender import GeneralRecommender
from recbole.utils import InputType
from torch import nn

from recbole_fbsm.config.schema import setting
from recbole_fbsm.kernels.sparse import TorchCsr, rows_times_table
from recbole_fbsm.models.contract import CandidateScoring
from recbole_fbsm.models.inputs import model_inputs


def csr_rows(matrix):
    """A torch sparse CSR matrix as the (owner, cols, values, offsets) tuple of ``TorchCsr.gather_rows``."""
    indptr = matrix.crow_indices()
    counts = indptr[1:] - indptr[:-1]
    owner = torch.repeat_interleave(torch.arange(len(counts), device=indptr.device), counts)
    return owner, matrix.col_indices(), matrix.values(), indptr[:-1]


class SparseLinear(nn.Module):
    """x W + b for sparse feature rows given as ``gather_rows`` tuples (an embedding bag forward and backward)."""

    def __init__(self, n_features, out_features, std=0.01, generator=None):
        super().__init__()
        self.weight = nn.Parameter(std * torch.randn(n_features, out_features, generator=generator))
        self.bias = nn.Parameter(torch.zeros(out_features))

    def forward(self, rows):
        return rows_times_table(*rows, self.weight) + self.bias


class TanhBlock(nn.Module):
    """Linear, batch norm, tanh: the hidden layer of DropoutNet's, Heater's and ALDI's towers."""

    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.norm = nn.BatchNorm1d(out_features, momentum=0.01, eps=0.001)

    def forward(self, x):
        return torch.tanh(self.norm(self.linear(x)))


def standardized(table, rows, clip):
    """Column-wise standardisation over ``rows`` (bool mask) with values cut at +-``clip``; other rows stay
    zero. DropoutNet's and Heater's preprocessing of the pretrained U and V."""
    trained = table[rows]
    if len(trained) < 2:
        return table.clone()
    mean, std = trained.mean(0), trained.std(0).clamp(min=1e-8)
    out = ((table - mean) / std).clamp(-clip, clip)
    return out * rows[:, None].to(out.dtype)


def truncated_normal_init(module, std=0.01):
    """The papers' initialisation: weights ~ N(0, std^2) cut at 2 std, biases zero."""
    if isinstance(module, nn.Linear):
        nn.init.trunc_normal_(module.weight, std=std, a=-2 * std, b=2 * std)
        if module.bias is not None:
            nn.init.zeros_(module.bias)


class ContentColdStartRecommender(CandidateScoring, GeneralRecommender):
    """Warm embeddings (buffers, saved in checkpoints), content rows ``F``, two-tower scores. Subclasses implement
    ``user_vectors``, ``item_vectors_from_rows`` and ``calculate_loss``; ``reg_weight`` is L2 on the layers as
    weight decay, ``reg_weight_decay`` times it (the authors' regulariser's gradient)."""

    input_type = InputType.PAIRWISE
    reads_own_features = True  # the pipeline skips RecBole's per-batch feature join
    reg_weight_decay = 1.0  # tf's l2_regularizer(reg) adds reg * ||w||^2 / 2: a gradient of reg w

    def __init__(self, config, dataset):
        super().__init__(config, dataset)
        inputs = model_inputs(config, dataset, warm_backbone=True)
        features = inputs.features
        self.training_items = inputs.training_items
        self.feature_names = features.names
        self.n_features = features.n_features
        self.F = TorchCsr(features.matrix)  # items x features (the fitted inputs, not parameters)
        self.R = TorchCsr(inputs.likes)  # users x items: training likes (serving counts them)
        user_emb, item_emb = inputs.warm
        self.embedding_size = user_emb.shape[1]
        # persistent: the checkpoint holds the warm tables, so serving (and a later warm_checkpoint) needs no retraining
        self.register_buffer("warm_user_embedding", user_emb.cpu())
        self.register_buffer("warm_item_embedding", item_emb.cpu())
        mask = torch.zeros(self.n_items, dtype=torch.bool)
        mask[torch.as_tensor(self.training_items)] = True
        self.register_buffer("training_item_mask", mask, persistent=False)
        self.reg_weight = float(setting(config, "reg_weight"))
        self._generator = torch.Generator().manual_seed(int(config["seed"]))

    @classmethod
    def uses_warm_backbone(cls, config):
        return True

    # -------------------------------------------------------------------------------- subclass parts
    def user_vectors(self, users):
        """The user tower: users [n] -> vectors [n, output size], from their warm embeddings."""
        raise NotImplementedError

    def item_vectors_from_rows(self, rows, preference, warm):
        """The item tower: n feature rows (a ``gather_rows`` tuple), their warm embeddings [n, d] (zero for cold
        items) and ``warm`` [n] (bool: the warm embedding may be used) -> vectors [n, output size]."""
        raise NotImplementedError

    # ---------------------------------------------------------------------------------- item vectors
    def item_preference_table(self):
        """The items' preference inputs (n_items x d): the warm table, or a model's transform of it."""
        return self.warm_item_embedding

    def item_vectors(self, items):
        """Vectors of dataset items: training items may use their warm embedding, others content only."""
        rows = self.F.gather_rows(items)
        warm = self.training_item_mask.index_select(0, items)
        table = self.item_preference_table()
        preference = table.index_select(0, items) * warm[:, None].to(table.dtype)
        return self.item_vectors_from_rows(rows, preference, warm)

    # ---------------------------------------------------------------------------------------- scores
    def predict(self, interaction):
        """Scores of (user, item) pairs: the user vector . the item's vector (content tower or warm).

        Args:
            interaction (Interaction): ``USER_ID`` and ``ITEM_ID``, LongTensors of shape [n_pairs].

        Returns:
            torch.Tensor: the scores, shape [n_pairs].
        """
        users, items = interaction[self.USER_ID], interaction[self.ITEM_ID]
        return (self.user_vectors(users) * self.item_vectors(items)).sum(-1)

    def candidate_scorer(self, candidates):
        """A function of an evaluation batch's interaction giving its (users x candidates) scores, the user
        vectors times the candidates' vectors, computed here once per evaluation (the trainer holds the function).

        Args:
            candidates: the items scored, a LongTensor of shape [n_candidates].

        Returns:
            callable: interaction (``USER_ID``, a LongTensor of shape [n_users]) -> scores [n_users, n_candidates].
        """
        vectors = self.item_vectors(candidates)
        return lambda interaction: self.user_vectors(interaction[self.USER_ID]) @ vectors.T

    @torch.no_grad()
    def score_feature_rows(self, users, item_matrix):
        """(len(users) x new items) scores of items known only by their feature rows (``item_matrix``: a
        torch sparse CSR, new items x features, weighted like ``F``): what serving new items needs."""
        n, device = item_matrix.shape[0], self.warm_item_embedding.device
        preference = torch.zeros(n, self.embedding_size, dtype=self.warm_item_embedding.dtype, device=device)
        cold = torch.zeros(n, dtype=torch.bool, device=device)
        vectors = self.item_vectors_from_rows(csr_rows(item_matrix), preference, cold)
        return self.user_vectors(users) @ vectors.T

    # ------------------------------------------------------------------------------------- training
    def batch_triplets(self, interaction):
        """(users, positives, negatives) of a pairwise training batch."""
        return interaction[self.USER_ID], interaction[self.ITEM_ID], interaction[self.NEG_ITEM_ID]

    def warm_scores(self, users, items):
        """The warm model's scores (the distillation / regression targets)."""
        user, item = self.warm_user_embedding.index_select(0, users), self.warm_item_embedding.index_select(0, items)
        return (user * item).sum(-1)

    def bernoulli(self, n, probability, device):
        """A bool mask of n draws (seeded, from the model's own generator: reproducible, device-agnostic)."""
        return (torch.rand(n, generator=self._generator) < probability).to(device)

    def triplet_scores(self, users, item_vectors):
        """Scores [2n] of a batch's n (user, positive) then n (user, negative) pairs, from the users [n] and the
        items' vectors [2n, output size]: each user's tower computed once for both of its pairs."""
        user = self.user_vectors(users)
        return (torch.cat([user, user]) * item_vectors).sum(-1)

    def optimizer_param_groups(self, learning_rate):
        """L2 (as weight decay) on the layers' weights and biases, none on batch norm."""
        norms = {
            id(p) for m in self.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm) for p in m.parameters()
        }
        decayed = [p for p in self.parameters() if id(p) not in norms]
        plain = [p for p in self.parameters() if id(p) in norms]
        weight_decay = self.reg_weight_decay * self.reg_weight
        return [{"params": decayed, "weight_decay": weight_decay}, {"params": plain, "weight_decay": 0.0}]
