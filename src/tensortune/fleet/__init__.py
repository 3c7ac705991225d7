"""Fleet mode: a queue of tuning jobs in the shared records store, and workers on any
number of hosts that take them, claim each candidate before measuring it, and record
the results (see docs/fleet.md)."""

from .claims import CandidateClaims, ClaimingStrategy, TunerClaims
from .kinds import JOB_KINDS, JobKind, Tuning, check_spec, register_job_kind
from .queue import Job, JobQueue
from .savings import Savings, job_savings
from .worker import JobOutcome, Worker

__all__ = ["CandidateClaims", "ClaimingStrategy", "JOB_KINDS", "Job", "JobKind", "JobOutcome", "JobQueue",
           "Savings", "TunerClaims", "Tuning", "Worker", "check_spec", "job_savings", "register_job_kind"]
