"""Observation: a campaign's Tasks projected from its record and Slurm's evidence, and what the
projection shows settled, recorded by a read-only command only when the lock is free at once."""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

import attrs

from servatus.config import target_from_identity
from servatus.engine.settlement import listed, queries, settle
from servatus.engine.status import project
from servatus.engine.status_inputs import clock_warnings, submissions
from servatus.engine.status_values import Execution, Report, Submission
from servatus.errors import Busy, ServatusError
from servatus.evidence import Evidence, MarkerQuery, fetch
from servatus.journal import records, store
from servatus.operations.context import Context
from servatus.tasks import bulk


def gather(
    context: Context,
    recorded: Iterable[Submission],
    asked: Mapping[str, MarkerQuery] | None = None,
    targets: Iterable[str] = (),
) -> dict[str, Evidence]:
    """One ``squeue`` and one run-marker listing per distinct Target of ``targets`` and of
    ``recorded``, both in one remote command (:func:`~servatus.evidence.fetch`); ``asked`` (by
    Target identity) bounds the marker listings to what can still change an answer
    (:func:`servatus.engine.settlement.queries`)."""
    reader = context.hooks.evidence_reader()
    evidence = {}
    for identity in dict.fromkeys(itertools.chain(targets, (item.target for item in recorded))):
        target = target_from_identity(identity)
        transport = context.connect(target)
        query = None if asked is None else asked.get(identity, MarkerQuery.of(()))
        try:
            evidence[identity] = fetch(transport, reader, target, query)
        finally:
            transport.close()
    return evidence


def report(
    context: Context,
    state: records.CampaignState,
    *,
    offline: bool,
    evidence: Mapping[str, Evidence] | None = None,
) -> Report:
    """The projection of ``state``, from ``evidence`` if given, else from one reading."""
    if evidence is None:
        return observe(context, state, offline=offline)[0]
    with bulk():  # hundreds of thousands of acyclic values: no full GC passes over them
        recorded = submissions(state)
        return projection(context, state, recorded, evidence, offline=offline)


def projection(
    context: Context,
    state: records.CampaignState,
    recorded: Sequence[Submission],
    evidence: Mapping[str, Evidence],
    *,
    offline: bool = False,
    now: float | None = None,
) -> Report:
    """Each Task's state from ``recorded`` and ``evidence``, with a clock warning when a Task
    runs on a Target whose clock is off."""
    projected = project(
        state.tasks.keys,
        recorded,
        evidence,
        now=time.time() if now is None else now,
        offline=offline,
        state=str(context.path),
    )
    unclocked = clock_warnings(evidence)  # per Target: cheap, and almost always empty
    running = (Execution.RUNNING, Execution.ENDING)
    if unclocked and any(task.execution in running for task in projected.tasks):
        projected = attrs.evolve(projected, warnings=(*projected.warnings, *unclocked))
    return projected


def observe(
    context: Context,
    state: records.CampaignState,
    *,
    offline: bool,
    targets: Sequence[str] = (),
    evidence: Mapping[str, Evidence] | None = None,
) -> tuple[Report, records.Settled, dict[str, Evidence]]:
    """The projection, what it shows settled (with the listings it read), and the evidence.
    The marker listing asks only for the markers of allocations not settled yet. ``targets``
    are listed first, also those none of ``state``'s intents name; ``evidence``, read
    already for the same state (or a part of it with the same targets), is used instead."""
    with bulk():  # hundreds of thousands of acyclic values: no full GC passes over them
        recorded = submissions(state)
        if offline:
            offline_report = projection(context, state, recorded, {}, offline=True)
            return offline_report, records.Settled(()), {}
        if evidence is None:
            evidence = gather(context, recorded, queries(state, recorded, targets), targets)
        projected = projection(context, state, recorded, evidence)
        change = records.Settled(settle(projected, recorded), listed(evidence))
        return projected, change, dict(evidence)


def record(
    path: Path,
    change: records.Settled,
    *,
    known: tuple[tuple[int, ...] | None, records.CampaignState],
    partial: bool = False,
) -> str | None:
    """Record what a read-only command found settled, only if the lock is free at once: a
    busy campaign is left for the next command, and a failed write costs a warning (returned),
    never the answer. ``known`` is the journal's version and the state read at it;
    ``partial``: that state is the status cache's remainder."""
    if not change.allocations:
        return None
    try:
        with store.writing(path, known=known, partial=partial) as writer:
            writer.settle(change)
    except Busy:
        return None
    except ServatusError as exc:
        return f"what settled was not recorded ({exc}); the next command retries"
    return None
