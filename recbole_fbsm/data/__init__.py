"""Data side of the item cold-start protocol: item split, leak-free sampler, pipeline assembly."""

from recbole_fbsm.data.dataset import ColdStartDataset
from recbole_fbsm.data.preparation import create_dataset, data_preparation
from recbole_fbsm.data.sampler import ColdStartSampler

__all__ = ["ColdStartDataset", "ColdStartSampler", "create_dataset", "data_preparation"]
