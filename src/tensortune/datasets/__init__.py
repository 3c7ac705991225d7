"""Measured tuning spaces that strategies can be replayed on without hardware."""

from .kernel_tuner import ReplayDataset, ReplayRunner, find_datasets, load_kernel_tuner_cache

__all__ = ["ReplayDataset", "ReplayRunner", "find_datasets", "load_kernel_tuner_cache"]
