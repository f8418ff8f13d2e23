"""Evaluation under the item cold-start protocol: fair random tie breaking over the split's candidates
(``collector``) and the paper's DCG and Rec metrics (``metrics``); the paper's early stopping is the trainer's."""
