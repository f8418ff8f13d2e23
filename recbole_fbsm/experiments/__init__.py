"""Several runs: comparisons (``compare``, ``report``), hyperparameter searches (``tune``, ``search_space``), the
docs' results tables and their records (``doc_tables``, ``records``), who should see a new item (``audience``)."""
