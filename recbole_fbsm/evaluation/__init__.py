"""Evaluation under the item cold-start protocol: fair random tie breaking over the split's candidates
(``collector``), the paper's DCG and Rec metrics (``metrics``), the paper's early stopping (``early_stopping``)."""
