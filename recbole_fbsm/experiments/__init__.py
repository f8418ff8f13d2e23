"""Several runs: comparisons (``compare``, ``report``), hyperparameter searches (``tune``, ``search_space``), the
docs' results tables (``doc_tables``), generated data (``synthetic``)."""
