"""Early stopping as the paper describes it ("after 10 epochs without improvement"), on top of RecBole's ``fit``.

RecBole's ``early_stopping`` counts a score *equal* to the best as an improvement (a tie replaces the kept
checkpoint with a later epoch) and stops after ``stopping_step + 1`` evaluations. Here ``stopping_step``
evaluations without a strictly better score stop training, and a tie keeps the earlier checkpoint: while a tie
is judged, the best score reads as the next float beyond it, so that RecBole's ``>=`` means ``>``.
"""

import functools

import numpy as np


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


@functools.cache
def paper_early_stopping(trainer_class):
    """``trainer_class`` with ``PaperEarlyStoppingMixin`` in front."""
    return type(trainer_class.__name__, (PaperEarlyStoppingMixin, trainer_class), {})
