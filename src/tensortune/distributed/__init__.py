"""Tuning on a Ray cluster: the Ray executor and targets as Ray resources (docs/distributed.md).

Ray is imported only when an executor joins a cluster (the `ray` extra)."""

from .ray_executor import RAY_HINT, RayExecutor, RayMissing
from .resources import measure_resource, node_resources, target_resource

__all__ = ["RAY_HINT", "RayExecutor", "RayMissing", "measure_resource", "node_resources", "target_resource"]
