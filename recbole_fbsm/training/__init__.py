"""RecBole's trainer with the cold-start evaluation (``trainer``), the run's log and result file."""
