"""Measured tuning spaces that strategies can be replayed on without hardware."""

from .kernel_tuner import ReplayDataset, ReplayRunner, dataset_name, find_datasets, load_kernel_tuner_cache

__all__ = ["ReplayDataset", "ReplayRunner", "dataset_name", "find_datasets", "load_kernel_tuner_cache"]
