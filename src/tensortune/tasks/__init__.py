"""Many kernels tuned under one budget: tasks and the task scheduler."""

from .scheduler import ScheduleResult, TaskRound, TaskScheduler, concurrent_rounds, weighted_latency
from .task import Task, TaskTuner, TunerTask

__all__ = ["ScheduleResult", "Task", "TaskRound", "TaskScheduler", "TaskTuner", "TunerTask", "concurrent_rounds",
           "weighted_latency"]
