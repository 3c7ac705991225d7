"""The dashboard over the records database (`tensortune dashboard`) and its static,
shareable report (`tensortune report`): workloads and targets, each run's curve of the
best time against trials and seconds, the measured times, failures by kind, the best
configurations and a comparison across targets. Standard library only.

Example:
    >>> from tensortune.dashboard import make_server, write_report, workloads_view  # doctest: +SKIP
"""

from .page import page_html
from .report import write_report
from .server import DashboardServer, make_server
from .views import BadRequest, NotFound, find_workload, workload_id, workload_view, workloads_view

__all__ = [
    "BadRequest", "DashboardServer", "NotFound", "find_workload", "make_server", "page_html", "workload_id",
    "workload_view", "workloads_view", "write_report",
]
