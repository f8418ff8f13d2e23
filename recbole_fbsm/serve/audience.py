"""Who should see a new item: a user's score of it divided by |I_u|^alpha (FISM's normalisation, |I_u| the user's
likes), since the raw sum over a user's likes hands every new item to the users with the most likes. alpha is
the one the run chose on validation (``evaluation.audience``), carried in the artifact's ``training`` part."""

# alpha of an artifact without one (the hybrid scenario, a checkpoint exported alone): what validation chose for
# FBSM on each of citeulike-t's 3 splits (docs/serve.md)
DEFAULT_ALPHA = 0.5


def audience_alpha(served):
    """alpha of ``served``'s audience ranking: its artifact's, else ``DEFAULT_ALPHA``."""
    alpha = (served.training or {}).get("audience_alpha")
    return DEFAULT_ALPHA if alpha is None else float(alpha)
