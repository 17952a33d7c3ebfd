"""Reconcile: an intent left without an outcome is decided from Slurm's evidence alone.

An interrupted ``submit`` (:mod:`servatus.submission`) may leave an intent whose ``sbatch`` never
answered; the job may or may not exist. ``resolve`` decides each such intent from what ``squeue``
lists and what run markers name, and waits while the evidence cannot yet be conclusive.

A chain link is an intent like any other: it is found by its own name or markers, and
resolving it never submits the links after it. A chain an interruption cut short is simply
shorter; its Tasks hand on at the new end and read ``STOPPED`` (ADR 0005, ADR 0006). So is a
lease link. A step in a lease is decided at once by its order's claim instead (``resolve_step``,
ADR 0009 "Recovery").
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import attrs

from servatus.evidence import Evidence
from servatus.ids import job_name
from servatus.lease import Verdict, Withdrawal
from servatus.status import Submission

RECONCILE_AFTER = 15 * 60
"""Seconds after its intent that an allocation with no evidence at all counts as never sent."""


@attrs.frozen
class Resolution:
    """What ``reconcile`` decided for one unresolved allocation.

    ``outcome`` is ``accepted`` (with the job), ``not_submitted``, or ``waiting`` (too young to
    decide; ``retry_at`` says when evidence will be conclusive).
    """

    allocation_id: str
    """The allocation (or lease step) decided."""
    outcome: str
    """``accepted``, ``not_submitted`` or ``waiting``."""
    job: int | None = None
    """Slurm's job number, for ``accepted`` (a step's: its lease's)."""
    retry_at: float | None = None
    """For ``waiting``: when, in UNIX seconds, running ``reconcile`` again can decide it."""


def resolve(
    pending: Sequence[Submission],
    evidence: Mapping[str, Evidence],
    *,
    now: float,
) -> list[Resolution]:
    """Decide unresolved allocations from evidence: a job ``squeue`` lists under the allocation's
    name, else one its run markers name, is accepted; with neither, an intent at least
    :data:`RECONCILE_AFTER` old was never submitted, and a younger one waits."""
    folded: dict[str, _Jobs] = {}
    decisions = []
    for submission in pending:
        jobs = folded.get(submission.target)
        if jobs is None:
            jobs = folded[submission.target] = _Jobs.of(evidence[submission.target])
        allocation_id = submission.allocation_id
        job = jobs.listed.get(job_name(allocation_id), jobs.marked.get(allocation_id))
        if job is not None:
            decisions.append(Resolution(allocation_id, "accepted", job=job))
        elif now - submission.recorded_at >= RECONCILE_AFTER:
            decisions.append(Resolution(allocation_id, "not_submitted"))
        else:
            retry_at = submission.recorded_at + RECONCILE_AFTER
            decisions.append(Resolution(allocation_id, "waiting", retry_at=retry_at))
    return decisions


def resolve_step(
    step: Submission,
    lease_id: str,
    lease_job: int,
    withdrawal: Withdrawal | None,
    evidence: Evidence | None,
    *,
    now: float,
) -> Resolution:
    """Decide an unresolved step by its order's claim, which this ``reconcile`` (or an earlier
    ``cancel``) withdrew: taken is accepted with the lease's job, withdrawn was never submitted.
    No answer (``withdrawal`` None) or an unreadable claim waits. A missing orders directory
    waits while Slurm lists the lease link (only the lease's own claims there could show it
    took the order); once the link is forgotten nothing can take it, and ADR 0003's rule
    decides: a marker of the step naming the lease's job, else 15 minutes of nothing."""
    verdict = Verdict.UNDECIDED if withdrawal is None else withdrawal.verdicts[step.allocation_id]
    if verdict is Verdict.TAKEN:
        return Resolution(step.allocation_id, "accepted", job=lease_job)
    if verdict is Verdict.WITHDRAWN:
        return Resolution(step.allocation_id, "not_submitted")
    queue = None if evidence is None else evidence.queue
    if withdrawal is None or not withdrawal.no_directory or queue is None:
        return Resolution(step.allocation_id, "waiting", retry_at=now)
    if any(entry.name == job_name(lease_id) for entry in queue):
        return Resolution(step.allocation_id, "waiting", retry_at=now)
    markers = evidence.markers if evidence is not None else None
    if any(m.allocation_id == step.allocation_id and m.job == lease_job for m in markers or ()):
        return Resolution(step.allocation_id, "accepted", job=lease_job)
    if now - step.recorded_at >= RECONCILE_AFTER:
        return Resolution(step.allocation_id, "not_submitted")
    return Resolution(step.allocation_id, "waiting", retry_at=step.recorded_at + RECONCILE_AFTER)


@attrs.frozen
class _Jobs:
    """One Target's listings folded once, so each intent is a lookup rather than a scan of
    every marker: the first job ``squeue`` lists under each name, and the lowest job number
    the markers name for each allocation."""

    listed: dict[str, int]
    marked: dict[str, int]

    @classmethod
    def of(cls, item: Evidence) -> _Jobs:
        listed: dict[str, int] = {}
        for entry in item.queue or ():
            listed.setdefault(entry.name, entry.job)
        marked: dict[str, int] = {}
        for marker in item.markers or ():
            known = marked.get(marker.allocation_id)
            if known is None or marker.job < known:
                marked[marker.allocation_id] = marker.job
        return cls(listed, marked)
