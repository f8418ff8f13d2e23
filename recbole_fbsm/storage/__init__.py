"""Files that outlive a run: atomic, code-free tensor files (``safe_files``), data fingerprints
(``fingerprint``), the JSON record of a run's results (``run_records``)."""
