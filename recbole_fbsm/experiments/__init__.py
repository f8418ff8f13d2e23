"""Several runs: comparisons (``compare``), hyperparameter searches (``tune``, ``search_space``,
``shared_grid``), generated data (``synthetic``)."""
