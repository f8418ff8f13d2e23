"""What leaves a run for later: model artifacts, safe checkpoint files, data fingerprints.

- ``model_file``: the ``.fbsm`` artifact a served model is rebuilt from alone;
- ``safe_files``: atomic writes, and loading tensors without running code;
- ``fingerprint``: content fingerprints of a dataset's atomic files, which stored results are bound to.
"""
