"""Who should see a new item: a user's score of it divided by |I_u|^alpha (FISM's normalisation, |I_u| the user's
likes), since the raw sum over a user's likes hands every new item to the users with the most likes. alpha is
chosen on the validation split by ``python -m recbole_fbsm.experiments.audience``, which writes it beside the
artifact (``<artifact>.audience.json``, with the artifact's SHA-256); the service reads it from there."""

import functools
import hashlib
import json
import logging
import math
import os

import numpy as np

from recbole_fbsm.storage.safe_files import write_atomic

# alpha without a sidecar: what validation chose for FBSM on each of citeulike-t's 3 splits (docs/serve.md)
DEFAULT_ALPHA = 0.5
log = logging.getLogger("recbole_fbsm.serve.http")


def sidecar_path(artifact):
    return f"{artifact}.audience.json"


def calibration(likes, alpha):
    """Per user, the factor |I_u|^-alpha of their score (``likes``: each user's like count; at least 1 counts)."""
    return np.maximum(np.asarray(likes, dtype=np.float64), 1.0) ** -float(alpha)


def artifact_digest(artifact):
    with open(artifact, "rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()


def write_alpha(artifact, alpha, chosen_on):
    """Write the sidecar of ``artifact``: its ``alpha``, and ``chosen_on`` (how: split, k, validation recalls)."""
    document = {"alpha": alpha, "artifact_sha256": artifact_digest(artifact), "chosen_on": chosen_on}
    write_atomic(sidecar_path(artifact), (json.dumps(document, indent=1) + "\n").encode())
    return sidecar_path(artifact)


def audience_alpha(artifact):
    """alpha of ``artifact``'s audience ranking: its sidecar's, when written for this very file, else
    ``DEFAULT_ALPHA``; read again when either file changes."""
    try:
        stamps = [(s.st_ino, s.st_mtime_ns, s.st_size) for s in map(os.stat, (artifact, sidecar_path(artifact)))]
    except OSError:
        return DEFAULT_ALPHA
    return _sidecar_alpha(str(artifact), *stamps)


@functools.lru_cache(maxsize=8)
def _sidecar_alpha(artifact, *stamps):
    """The sidecar's alpha; a sidecar of another file or with no alpha in [0, 4] is logged and ``DEFAULT_ALPHA``."""
    try:
        with open(sidecar_path(artifact), encoding="utf-8") as handle:
            document = json.load(handle)
        alpha, digest = document["alpha"], document["artifact_sha256"]
        if not (isinstance(alpha, (int, float)) and math.isfinite(alpha) and 0 <= alpha <= 4):
            raise ValueError(f"alpha {alpha!r} is not a number from 0 to 4")
    except (OSError, ValueError, KeyError, TypeError) as error:
        log.error(
            "%s: %s; expected the JSON object the audience evaluation writes: alpha %s used",
            sidecar_path(artifact),
            error,
            DEFAULT_ALPHA,
        )
        return DEFAULT_ALPHA
    if digest != artifact_digest(artifact):
        log.warning(
            "%s was written for another artifact (retrained since?): alpha %s used",
            sidecar_path(artifact),
            DEFAULT_ALPHA,
        )
        return DEFAULT_ALPHA
    return float(alpha)
