"""The model artifact (``model_file``): the ``.fbsm`` file a served model is rebuilt from alone."""
