"""ALDI (Huang, Wang, Zhang, Chen, Yin, SIGIR 2023): a content -> embedding generator (the student)
distilled from the warm model (the teacher) by aligning ratings, rankings and item identities."""

import torch
from torch import nn
from torch.nn import functional as F

from recbole_fbsm.models.coldstart.base import ContentColdStartRecommender, SparseLinear, truncated_normal_init


def aligned(student, teacher, weight):
    """Item-weighted cross-entropy of sigmoid(student) against sigmoid(teacher): ALDI's two aligning terms."""
    return (weight * F.binary_cross_entropy_with_logits(student, torch.sigmoid(teacher), reduction="none")).mean()


class ALDI(ContentColdStartRecommender):
    """Student: item generator g(x) = W2 tanh(BN(W1 x + b1)) + b2 (``hidden_size`` units, output the warm
    rank) and user mapper m(U_u), the same shape over the warm user embedding; score m(U_u) . g(x_i).
    Teacher: the warm BPR-MF, s^T_ui = U_u . V_i, on training items.

    Loss per training triplet (u, i like, j sampled training negative), as in the paper and its code:
    - supervised: BPR on the student's scores, -log sigmoid(s_ui - s_uj);
    - rating distribution aligning (``gamma``): |s^T_ui - s_ui| + |s^T_uj - s_uj|;
    - ranking aligning (``alpha``): cross-entropy of sigmoid(s_ui - s_uj) against sigmoid(s^T_ui - s^T_uj);
    - identification distance aligning (``beta``): the same cross-entropy for an item's distance to the
      batch's negatives, g_i.g_i - mean_j g_i.g_j against the teacher's V_i.V_i - mean_j V_i.V_j;
    - the two ranking terms weighted per positive item by the teacher-aware weight
      min(tanh(a f_i), tanh(M)), f_i = sum over i's users of 1 / their likes, a = M / mean f
      (``teacher_weighting``, ``freq_coef_M``), and L2 (``reg_weight``, as weight decay) on the layers.
    Scoring as in the paper's evaluation: a cold item (no warm row) by the student, m(U_u) . g(x_i); a warm
    (training) item, in the hybrid scenario, by the teacher, U_u . V_i, which the rating term puts the student on.
    """

    def __init__(self, config, dataset):
        super().__init__(config, dataset)
        d = self.embedding_size
        hidden = int(config["hidden_size"])
        self.alpha, self.beta, self.gamma = (float(config[k]) for k in ("alpha", "beta", "gamma"))
        self.item_hidden = SparseLinear(self.n_features, hidden, generator=self._generator)
        self.item_norm = nn.BatchNorm1d(hidden, momentum=0.01, eps=0.001)
        self.item_output = nn.Linear(hidden, d)
        self.user_hidden = nn.Linear(d, hidden)
        self.user_norm = nn.BatchNorm1d(hidden, momentum=0.01, eps=0.001)
        self.user_output = nn.Linear(hidden, d)
        self.apply(truncated_normal_init)  # every nn.Linear, in the order they were made
        self.register_buffer("item_weight", self.teacher_weights(config), persistent=False)

    def teacher_weights(self, config):
        """Per item: the teacher-aware weight of the paper (1 everywhere when ``teacher_weighting`` is off)."""
        n_items = self.warm_item_embedding.shape[0]
        if not config["teacher_weighting"]:
            return torch.ones(n_items)
        R = self.R.to_torch_sparse().to_sparse_coo().cpu()
        likes = torch.sparse.sum(R, 1).to_dense().clamp(min=1)
        frequency = torch.sparse.mm(R.t(), (1.0 / likes)[:, None]).to_dense().squeeze(1)
        training = self.training_item_mask.cpu()
        expected = frequency[training].mean().clamp(min=1e-12)
        M = float(config["freq_coef_M"])
        return torch.tanh(M / expected * frequency).clamp(0, float(torch.tanh(torch.tensor(M))))

    def generate(self, rows):
        return self.item_output(torch.tanh(self.item_norm(self.item_hidden(rows))))

    def user_vectors(self, users):
        teacher = self.warm_user_embedding.index_select(0, users)
        return self.user_output(torch.tanh(self.user_norm(self.user_hidden(teacher))))

    def item_vectors_from_rows(self, rows, preference, warm):
        return self.generate(rows)

    def predict(self, interaction):
        """Scores of (user, item) pairs: the teacher's U_u . V_i for a warm item, the student's for a cold one.

        Args:
            interaction (Interaction): ``USER_ID`` and ``ITEM_ID``, LongTensors of shape [n_pairs].

        Returns:
            torch.Tensor: the scores, shape [n_pairs].
        """
        users, items = interaction[self.USER_ID], interaction[self.ITEM_ID]
        warm = self.training_item_mask.index_select(0, items)
        return torch.where(warm, self.warm_scores(users, items), super().predict(interaction))

    def candidate_scorer(self, candidates):
        """The student's scores, with the teacher's in the columns of warm candidates (the hybrid scenario's)."""
        student = super().candidate_scorer(candidates)
        warm = self.training_item_mask.index_select(0, candidates)
        if not bool(warm.any()):  # the item scenario: its candidates are all cold
            return student
        warm_vectors = self.warm_item_embedding.index_select(0, candidates[warm])

        def score(interaction):
            scores = student(interaction)
            scores[:, warm] = self.warm_user_embedding.index_select(0, interaction[self.USER_ID]) @ warm_vectors.T
            return scores

        return score

    def calculate_loss(self, interaction):
        """The student's distillation loss (rating, ranking and identification aligning; the class docstring).

        Args:
            interaction (Interaction): a training batch: ``USER_ID``, ``ITEM_ID`` (a liked training item) and
                ``NEG_ITEM_ID`` (a sampled training item), LongTensors of shape [batch_size].

        Returns:
            torch.Tensor: the batch's loss, a scalar.
        """
        users, positives, negatives = self.batch_triplets(interaction)
        n = len(users)
        generated = self.generate(self.F.gather_rows(torch.cat([positives, negatives])))
        g_pos, g_neg = generated[:n], generated[n:]
        user = self.user_vectors(users)
        s_pos, s_neg = (user * g_pos).sum(-1), (user * g_neg).sum(-1)
        teacher_user = self.warm_user_embedding.index_select(0, users)
        v_pos, v_neg = (self.warm_item_embedding.index_select(0, items) for items in (positives, negatives))
        t_pos, t_neg = (teacher_user * v_pos).sum(-1), (teacher_user * v_neg).sum(-1)
        weight = self.item_weight.index_select(0, positives)

        supervised = -F.logsigmoid(s_pos - s_neg).mean()
        rating = self.gamma * ((t_pos - s_pos).abs() + (t_neg - s_neg).abs()).mean()
        ranking = self.alpha * aligned(s_pos - s_neg, t_pos - t_neg, weight)
        student_identity = (g_pos * g_pos).sum(-1) - (g_pos @ g_neg.T).mean(1)
        teacher_identity = (v_pos * v_pos).sum(-1) - (v_pos @ v_neg.T).mean(1)
        identity = self.beta * aligned(student_identity, teacher_identity, weight)
        return supervised + rating + ranking + identity
