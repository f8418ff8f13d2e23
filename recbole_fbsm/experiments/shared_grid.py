"""A grid search shared by several processes on one Optuna study, no grid point run twice.

Optuna's ``GridSampler`` gives trial n the n-th point while n < the grid size, but a process that
starts a trial after that picks any unfinished point, including one another process is still running
(its source says so: "multiple workers may simultaneously pick up the same grid"). Here each trial
claims a point through the study itself:

1. the trial (created by Optuna with a unique number) reads the study: points held by a finished
   (complete or pruned) trial or by a live running one are taken; the running trials that hold no
   point yet, ordered by number, take the pending points in grid order, one each;
2. it stores its point (user attribute ``grid_point``), reads the study again and, when another live
   trial holds the same point (two processes read at the same moment), gives it back and claims again.

Of two trials that claim one point, the one that checks second always sees the first, so at most one
keeps it. A running trial whose process is gone is not live: on this machine that is known at once (the
trial records host, pid and a per-process id), elsewhere Optuna's heartbeat marks it failed after its
grace period. A failed point is pending again, so a killed search loses only the trial it was running.
"""

from __future__ import annotations

import os
import random
import socket
import time
import uuid

import optuna
from optuna.trial import TrialState

HOST = socket.gethostname()
WORKER = f"{HOST}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
POINT_ATTR = "grid_point"
WORKER_ATTR = "worker"
DONE = (TrialState.COMPLETE, TrialState.PRUNED)
# A running trial with no worker yet is between Optuna's ask and our claim, which takes milliseconds; one
# older than this was most likely abandoned (its process killed at that moment) and no longer gets a turn
# when points are handed out (were it alive after all, the check after claiming still prevents a repeat).
UNCLAIMED_TURN_S = 10


def process_alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OSError):
        return True
    return True


def is_dead(trial):
    """A running trial whose process is known to be gone: recorded on this host, and its pid is not
    running (or is this process, under another per-process id: a pid reused after a restart)."""
    worker = trial.user_attrs.get(WORKER_ATTR)
    if not worker:
        return False
    host, pid, _ = (worker.rsplit(":", 2) + ["", ""])[:3]
    if host != HOST or not pid.isdigit():
        return False
    if int(pid) == os.getpid():
        return worker != WORKER
    return not process_alive(int(pid))


def _abandoned(trial):
    started = trial.datetime_start
    return (
        not trial.user_attrs.get(WORKER_ATTR)
        and started is not None
        and time.time() - started.timestamp() > UNCLAIMED_TURN_S
    )


def fail_dead_trials(study):
    """Mark the running trials of gone processes failed (their points become pending); returns how many."""
    failed = 0
    for trial in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        if is_dead(trial):
            try:
                study.tell(trial.number, state=TrialState.FAIL)
                failed += 1
            except (ValueError, RuntimeError):  # finished meanwhile (its process was not gone) or told by another
                pass
    return failed


def held_points(trials, exclude_number=None):
    """Points of finished trials and of live running trials (other than ``exclude_number``)."""
    held = set()
    for trial in trials:
        point = trial.user_attrs.get(POINT_ATTR)
        if point is None or trial.number == exclude_number:
            continue
        if trial.state in DONE or (trial.state == TrialState.RUNNING and not is_dead(trial)):
            held.add(point)
    return held


def pending_points(study, n_points, skip=()):
    """Grid points no finished or live trial holds, in grid order (``skip``: points not to retry)."""
    held = held_points(study.get_trials(deepcopy=False))
    return [i for i in range(n_points) if i not in held and i not in skip]


def _choose(study, number, n_points, skip):
    """(the point for trial ``number``, how many points are pending)."""
    trials = study.get_trials(deepcopy=False)
    held = held_points(trials, exclude_number=number)
    pending = [i for i in range(n_points) if i not in held and i not in skip]
    waiting = sorted(
        t.number
        for t in trials
        if t.state == TrialState.RUNNING
        and t.user_attrs.get(POINT_ATTR) is None
        and t.number != number
        and not is_dead(t)
        and not _abandoned(t)
    )
    position = sum(1 for n in waiting if n < number)
    return (pending[position] if position < len(pending) else None), len(pending)


def claim_point(study, trial, n_points, skip=()):
    """Claim a grid point for ``trial`` (an ``optuna.Trial`` of ``study``); returns its index, or None
    when every point is finished or held by a live trial."""
    trial.set_user_attr(WORKER_ATTR, WORKER)
    deadline = time.monotonic() + 2 * UNCLAIMED_TURN_S
    while time.monotonic() < deadline:
        point, pending = _choose(study, trial.number, n_points, skip)
        if pending == 0:
            return None
        if point is not None:
            trial.set_user_attr(POINT_ATTR, point)
            if point not in held_points(study.get_trials(deepcopy=False), exclude_number=trial.number):
                return point
            trial.set_user_attr(POINT_ATTR, None)  # another process claimed it at the same moment
        # else: the pending points are the turn of trials asked just before this one
        time.sleep(random.uniform(0.05, 0.25))
    return None


class ClaimedPointSampler(optuna.samplers.BaseSampler):
    """Gives every parameter the value of the grid point the trial claimed (``claim_point``)."""

    def __init__(self, points):
        self.points = points  # [{name: stored value}], in grid order

    def infer_relative_search_space(self, study, trial):
        return {}

    def sample_relative(self, study, trial, search_space):
        return {}

    def sample_independent(self, study, trial, param_name, param_distribution):
        return self.points[trial.user_attrs[POINT_ATTR]][param_name]
