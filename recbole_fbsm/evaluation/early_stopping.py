"""Early stopping as the paper describes it, on top of RecBole's ``fit``.

RecBole's ``early_stopping`` (recbole/utils/utils.py) counts a validation score *equal* to the best as
an improvement, so a tie replaces the kept checkpoint with a later epoch, and it stops only after
``stopping_step + 1`` evaluations without improvement. The paper stops "after 10 epochs without
improvement" and nothing in a tie says the later epoch is better; here:

- ``stopping_step`` evaluations in a row without a strictly better score stop training (10 by default);
- a tie keeps the earlier checkpoint (with ``valid_before_training``, an epoch that only matches the
  untrained model does not replace it).

RecBole's ``fit`` compares with ``>=`` against ``self.best_valid_score``; while a tie is being judged
the best score is read as the next float above it (below for smaller-is-better metrics), so that
``>=`` means ``>``. The true best is put back before the next evaluation and when ``fit`` returns.
"""

import numpy as np

_CACHE = {}


class PaperEarlyStoppingMixin:
    def __init__(self, config, model):
        super().__init__(config, model)
        # RecBole stops when its counter exceeds stopping_step: one less makes it stop after stopping_step
        self.stopping_step = max(int(config["stopping_step"]) - 1, 0)
        self._tie_guard = None  # (true best, the guarded value RecBole compared against)

    def _restore_best(self):
        if self._tie_guard is not None:
            best, guarded = self._tie_guard
            if self.best_valid_score == guarded:
                self.best_valid_score = best
            self._tie_guard = None

    def _valid_epoch(self, valid_data, show_progress=False):
        self._restore_best()
        valid_score, valid_result = super()._valid_epoch(valid_data, show_progress=show_progress)
        best = self.best_valid_score
        if valid_score == best and np.isfinite(best):
            guarded = np.nextafter(best, np.inf if self.valid_metric_bigger else -np.inf)
            self.best_valid_score, self._tie_guard = guarded, (best, guarded)
        return valid_score, valid_result

    def fit(self, train_data, valid_data=None, *args, **kwargs):
        try:
            super().fit(train_data, valid_data, *args, **kwargs)
        finally:
            self._restore_best()
        return self.best_valid_score, self.best_valid_result


def paper_early_stopping(trainer_class):
    """``trainer_class`` with ``PaperEarlyStoppingMixin`` in front."""
    if trainer_class not in _CACHE:
        _CACHE[trainer_class] = type(trainer_class.__name__, (PaperEarlyStoppingMixin, trainer_class), {})
    return _CACHE[trainer_class]
