"""Several runs: comparisons (``compare``), hyperparameter searches (``tune``, ``search_space``),
generated data (``synthetic``)."""
