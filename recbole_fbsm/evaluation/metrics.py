"""The FBSM paper's metrics, registered with RecBole so they can be named in ``metrics:`` and used as
``valid_metric`` like RecBole's own (``metrics: [Rec, DCG]`` gives ``rec@10`` and ``dcg@10``).

- ``DCG@n`` (paper, "Evaluation Methodology and Metrics"): imp_1 + sum_{p=2..n} imp_p / log2(p), with
  imp_p = 1/n when the item at rank p is a test like, 0 otherwise; averaged over users.
- ``Rec@n`` as the authors' released code computes it: hits in the top n / min(n, the user's number of
  likes in the split) (the paper's formula prints |top-n| as the denominator; for users with fewer
  than n likes the code's version is the one that can reach 1).
"""

import numpy as np
from recbole.evaluator.base_metric import TopkMetric

from recbole_fbsm.recbole_compat import register_metric


class DCG(TopkMetric):
    def calculate_metric(self, dataobject):
        pos_index, pos_len = self.used_info(dataobject)
        return self.topk_result("dcg", self.metric_info(pos_index, pos_len))

    def metric_info(self, pos_index, pos_len=None):
        ranks = np.arange(1, pos_index.shape[1] + 1)
        discount = np.where(ranks == 1, 1.0, np.log2(np.maximum(ranks, 2)))
        return np.cumsum(pos_index / discount, axis=1) / ranks


class Rec(TopkMetric):
    def calculate_metric(self, dataobject):
        pos_index, pos_len = self.used_info(dataobject)
        return self.topk_result("rec", self.metric_info(pos_index, pos_len))

    def metric_info(self, pos_index, pos_len):
        ranks = np.arange(1, pos_index.shape[1] + 1)
        return np.cumsum(pos_index, axis=1) / np.minimum(ranks[None, :], pos_len.reshape(-1, 1))


for _metric in (DCG, Rec):
    register_metric(_metric)
