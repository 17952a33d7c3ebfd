"""Settlement: which allocations are final, what is kept of them, and which markers to list.

Pure functions over values (``docs/adr/0004-settlement.md`` gives the reasons). An accepted
allocation settles once Slurm no longer lists its job, in a listing that read the queue before
the markers, and every slot projects to a final execution; what is recorded is its job and its
:class:`~servatus.evidence.Observation`, the raw evidence the projection reads, so an answer from
the record is the answer from the markers it was made from. Markers are then never read for it,
and a listing asks only for the markers of allocations still unsettled.
"""

from __future__ import annotations

from collections.abc import Sequence

from servatus.status import Execution, Outcome, Report, Submission
from servatus.store import Settlement

FINAL = frozenset({Execution.SUCCEEDED, Execution.FAILED, Execution.STOPPED})
"""Executions no later evidence changes once Slurm no longer lists the job. ``LOST`` is left
out: a marker of a job that did end may still appear (a lagging file server), and ``UNRESOLVED``
is not accepted at all."""


def settle(report: Report, submissions: Sequence[Submission]) -> tuple[Settlement, ...]:
    """The allocations ``report`` (projected from ``submissions``) shows final and not yet
    settled: accepted, observed in both listings of their Target, their job not listed, every
    slot final. A report without Slurm (``--offline``, or a listing not read) settles nothing."""
    if not report.online:
        return ()
    found: list[Settlement] = []
    attempts = report.attempts
    at = 0
    for submission in submissions:
        slots = len(submission.task_keys)
        mine = attempts[at : at + slots]
        at += slots
        if submission.outcome is not Outcome.ACCEPTED or submission.settled is not None:
            continue
        job = submission.job
        if job is None or not mine:
            continue
        observation = mine[0].observation
        if observation is None:  # a listing of its Target was not read
            continue
        if any(attempt.listed or attempt.execution not in FINAL for attempt in mine):
            continue
        start, stop, limit, ends = observation
        found.append(Settlement(submission.allocation_id, job, start, stop, limit, ends))
    return tuple(found)


__all__ = ["FINAL", "settle"]
