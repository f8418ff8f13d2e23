"""FBSM_bpr (Sharma, Zhou, Hu, Karypis, SDM 2015): sim(i, j) = f_i^T (D + V^T V) f_j."""

import contextlib

import torch
from torch import nn

from recbole_fbsm.config.schema import setting
from recbole_fbsm.models.base import FeatureSimilarityRecommender, fixed_similarity_words

# RecBole learners whose weight_decay adds weight_decay * p to the gradient (the gradient of an L2 term)
L2_DECAY_LEARNERS = ("adam", "sgd", "adagrad", "rmsprop")


class FBSM(FeatureSimilarityRecommender):
    """Feature-based factorized Bilinear Similarity Model.

    Parameters: ``D`` (n_features,), the diagonal of D; ``V`` (n_features x h), row p is the paper's latent
    factor v_p. Objective per mini-batch: mean BPR over the triplets + λ ||V||_F² + β ||D||², whose per-triplet
    SGD steps are the paper's updates; α1 = ``learning_rate_D`` (default ``learning_rate``, α2). D = 1 and V
    near 0 start the model as the fixed similarity f_i . f_j. Beyond the paper (docs/models.md): the alignment
    to a warm model (``align_weight``) and the hybrid FBSM's identity features and softmax loss.
    """

    learns_identity = True  # identity_features: V learns item-to-item terms between warm items (hybrid scenario)

    def __init__(self, config, dataset):
        super().__init__(config, dataset)
        self.rank = int(config["rank"])
        self.reg_V = float(config["reg_V"])
        self.reg_D = float(config["reg_D"])
        self.learning_rate_D = config["learning_rate_D"]
        self.weight_decay = float(config["weight_decay"] or 0.0)
        # λ and β as weight decay (2λ, 2β: the same gradient) where the learner's decay is an L2 gradient: free per
        # batch (fused Adam folds it into its one pass); otherwise (adamw) ``calculate_loss`` adds the L2 terms
        self.regulariser_in_optimizer = str(config["learner"]).lower() in L2_DECAY_LEARNERS
        generator = torch.Generator().manual_seed(int(config["seed"]))
        self.D = nn.Parameter(torch.full((self.n_features,), float(config["init_D"])))
        self.V = nn.Parameter(float(config["init_std"]) * torch.randn(self.n_features, self.rank, generator=generator))
        # with identity columns (hybrid FBSM) V learns at learning_rate_identity: the identity terms must move, and the
        # content part with them, to rank warm items on one scale (docs/models.md)
        self.learning_rate_V = float(setting(config, "learning_rate_identity")) if self.n_identity else None
        self.align_weight = float(setting(config, "align_weight"))
        self.align_temperature = float(setting(config, "align_temperature"))
        if self.align_weight > 0:
            _, warm_items = self.warm_tables
            # only for the training loss: not a parameter, not in the checkpoint
            self.register_buffer("warm_items", nn.functional.normalize(warm_items, dim=1), persistent=False)
        # the identity entries' positions in F's values (hybrid FBSM), which ``identities_dropped`` zeroes at random
        self.identity_dropout = float(setting(config, "identity_dropout")) if self.n_identity else 0.0
        entries = torch.nonzero(self.F.indices >= self.n_features - self.n_identity).squeeze(1)
        self.register_buffer("identity_entries", entries if self.identity_dropout else None, persistent=False)
        self.loss_type = str(setting(config, "fbsm_loss")).lower()
        self.softmax_temperature = float(setting(config, "softmax_temperature"))

    @contextlib.contextmanager
    def identities_dropped(self):
        """Within this block each warm item's identity is hidden with probability ``identity_dropout`` (one draw per
        item for the batch): DropoutNet's trick: the content part alone ranks warm items on cold items' scale."""
        if not (self.training and self.identity_dropout > 0 and len(self.identity_entries)):
            yield
            return
        full = self.F.values
        kept = torch.rand(len(self.identity_entries), device=full.device) >= self.identity_dropout
        self.F.values = full.index_put((self.identity_entries,), full.index_select(0, self.identity_entries) * kept)
        try:
            yield
        finally:
            self.F.values = full

    @classmethod
    def uses_warm_backbone(cls, config):
        return float(setting(config, "align_weight")) > 0

    @classmethod
    def untrained_start(cls, config):
        return fixed_similarity_words(config, f"D = {float(config['init_D']):g}, V near 0")

    def diagonal_weights(self, users):
        return self.D

    def low_rank_factors(self):
        return self.V

    def calculate_loss(self, interaction):
        """BPR over (user, liked item, negative) triplets (the paper's) or the hybrid FBSM's softmax (``fbsm_loss``),
        plus the optional alignment, plus the L2 terms unless the optimizer's weight decay holds them.

        Args:
            interaction (Interaction): the batch; ``USER_ID`` and ``ITEM_ID`` (a training like) of shape [batch_size].

        Returns:
            torch.Tensor: the loss, shape [] (a scalar).
        """
        with self.identities_dropped():
            loss = self.whole_user_loss(interaction, self.loss_type, self.softmax_temperature)
        if self.align_weight > 0:
            loss = loss + self.align_weight * self.alignment_loss(interaction[self.ITEM_ID])
        if not self.regulariser_in_optimizer:
            loss = loss + self.reg_V * self.V.pow(2).sum() + self.reg_D * self.D.pow(2).sum()
        return loss

    def alignment_loss(self, items):
        """Mean over the batch's distinct positive items i of KL(warm || model) between the distributions
        softmax_j(cos(e_i, e_j) / τ) and softmax_j(f_i^T (D + V^T V) f_j / τ) over the other items j."""
        items = torch.unique(items)
        if len(items) < 3:
            return torch.zeros((), device=self.D.device)
        rows = self.F.dense_rows(items)  # |S| x n_features
        factors = self.F.bag_sum(items, self.V)  # V f_i, |S| x h
        model = (rows * self.D) @ rows.T + factors @ factors.T  # |S| x |S| similarities
        warm = self.warm_items.index_select(0, items)
        teacher = warm @ warm.T
        off_diagonal = ~torch.eye(len(items), dtype=torch.bool, device=items.device)
        tau = self.align_temperature
        log_student = torch.log_softmax(model.masked_fill(~off_diagonal, float("-inf")) / tau, dim=1)
        target = torch.softmax(teacher.masked_fill(~off_diagonal, float("-inf")) / tau, dim=1)
        return (target * (torch.log(target.clamp_min(1e-30)) - log_student)).masked_fill(~off_diagonal, 0).sum(1).mean()

    def optimizer_param_groups(self, learning_rate):
        """The paper's separate learning rates, α1 for D and α2 for V, and λ, β as weight decay where the learner's
        decay is an L2 gradient."""
        lr_D = learning_rate if self.learning_rate_D is None else float(self.learning_rate_D)
        groups = [{"params": [self.D], "lr": lr_D}, {"params": [self.V], "lr": self.learning_rate_V or learning_rate}]
        if self.regulariser_in_optimizer:
            groups[0]["weight_decay"] = 2 * self.reg_D + self.weight_decay
            groups[1]["weight_decay"] = 2 * self.reg_V + self.weight_decay
        return groups
