"""Settlement: which allocations are final, what is kept of them, and which markers to list.

Pure functions over values (``docs/development/adr/0004-settlement.md`` gives the reasons). An
accepted allocation settles once Slurm no longer lists its job, in a listing that read the queue
before the markers, and every slot projects to a final execution; what is recorded is its job and
its :class:`~servatus.evidence.Observation`, the raw evidence the projection reads, so an answer
from the record is the answer from the markers it was made from. Markers are then never read for it,
and a listing asks only for the markers of allocations still unsettled."""

from __future__ import annotations

import itertools
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence

from servatus.engine.status_values import Execution, Outcome, Report, Submission
from servatus.evidence import Evidence, MarkerQuery
from servatus.ids import target_key
from servatus.journal.records import CampaignState, Listed, Settlement

FINAL = frozenset({Execution.SUCCEEDED, Execution.FAILED, Execution.STOPPED})
"""Executions no later evidence changes once Slurm no longer lists the job. ``LOST`` is left
out: a marker of a job that did end may still appear (a lagging file server), and ``UNRESOLVED``
is not accepted at all."""

MARGIN = 3600.0
"""Seconds subtracted from a horizon before listing by mtime: a file server's clock that steps
back, or stamps with a coarse granularity, by less than this loses no marker. A wider margin
only lists more markers (those written in the hour before the horizon)."""


def settle(report: Report, submissions: Sequence[Submission]) -> tuple[Settlement, ...]:
    """The allocations ``report`` (projected from ``submissions``) shows final and not yet
    settled: accepted, observed in both listings of their Target, their job not listed, every
    slot final. A report without Slurm (``--offline``, or a listing not read) settles nothing.

    A lease link is one Attempt of no Task, settled as any allocation. A lease step (ADR 0009)
    whose claim is withdrawn is final at once; any other settles by the same rule applied to
    its lease's job: once its lease link's Attempt is not listed."""
    if not report.online:
        return ()
    found: list[Settlement] = []
    attempts = report.attempts
    leases = {
        attempt.allocation_id: attempt.listed for attempt in attempts if attempt.slots is not None
    }
    at = 0
    for submission in submissions:
        slots = len(submission.task_keys) or (1 if submission.slots is not None else 0)
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
        within = submission.within
        if within is not None and observation.claim is not False:
            if leases.get(within, True) is not False or mine[0].execution not in FINAL:
                continue
        elif any(attempt.listed or attempt.execution not in FINAL for attempt in mine):
            continue
        start, stop, limit, ends, handed, _, claim = observation
        found.append(
            Settlement(submission.allocation_id, job, start, stop, limit, ends, handed, claim)
        )
    return tuple(found)


def wanted(submissions: Sequence[Submission]) -> dict[str, list[int]]:
    """Per Target identity, the submissions whose markers can still change an answer, by
    position: unsettled accepted allocations, and pending intents (``reconcile`` reads a job
    number off their markers)."""
    chosen: dict[str, list[int]] = defaultdict(list)
    for index, submission in enumerate(submissions):
        if submission.settled is None and submission.outcome is not Outcome.NOT_SUBMITTED:
            chosen[submission.target].append(index)
    return chosen


def queries(
    state: CampaignState, submissions: Sequence[Submission], targets: Iterable[str] = ()
) -> dict[str, MarkerQuery]:
    """Per Target identity, the markers to list: those of the wanted allocations, newer than the
    latest horizon recorded before the oldest of them, less :data:`MARGIN`, where there is one.

    ``submissions`` are in intent order, so a position is the intent's index in the journal.
    ``targets`` come first, also those no submission names (the status cache holds all of
    theirs: ``servatus.cli.status_cache``).
    """
    horizons: dict[str, list[tuple[int, float]]] = defaultdict(list)
    for horizon in state.horizons:
        horizons[horizon.target].append((horizon.intents, horizon.at))
    chosen = wanted(submissions)
    result: dict[str, MarkerQuery] = {}
    order = itertools.chain(targets, (submission.target for submission in submissions))
    for identity in dict.fromkeys(order):
        indices = chosen.get(identity, [])
        ids = [submissions[index].allocation_id for index in indices]
        oldest = indices[0] if indices else len(submissions)
        bases = [at for intents, at in horizons.get(target_key(identity), ()) if intents <= oldest]
        since = max(bases) - MARGIN if bases else None
        live = {  # lease links with an unsettled step: their orders directories hold its claim
            within for index in indices if (within := submissions[index].within) is not None
        }
        result[identity] = MarkerQuery.of(ids, since, live)
    return result


def listed(evidence: Mapping[str, Evidence]) -> tuple[Listed, ...]:
    """For each Target whose markers were listed, the file server's time read just before the
    listing (``Evidence.clock``): every marker created after the listing is newer."""
    return tuple(
        Listed(target_key(identity), item.clock)
        for identity, item in evidence.items()
        if item.markers is not None and item.clock is not None
    )


__all__ = ["FINAL", "MARGIN", "listed", "queries", "settle", "wanted"]
