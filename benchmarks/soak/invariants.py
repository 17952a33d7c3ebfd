"""The soak's invariants: pure functions of :class:`soak.evidence.SoakEvidence`, one per
guarantee the issue names, each returning the violations it finds (none on a sound run).

What Servatus leaves on disk is enough for three of them (one allocation at a time, intents
resolved, the journal sound). The other four need what only the driver saw during the run, and
read it from the command log's snapshots: outcomes over time (a ``status --json`` after every
command), destinations over time (their inode and writer after every command), the campaign's
revision when each submit began, and every command's exit code and output.
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from collections.abc import Callable, Iterable

import attrs

from servatus.evidence import Marker, MarkerKind
from soak.evidence import SoakEvidence

EXIT_CODES = frozenset({0, 1, 2, 3, 75, 130})
"""The spec's exit-code table (recovery playbook)."""

FINAL = frozenset({"SUCCEEDED", "FAILED", "STOPPED"})
"""Executions that are outcomes; an attempt Slurm no longer lists with every slot in one of
these is settled. ``LOST`` is none (ADR 0004: it never settles): Slurm no longer lists the job
and no end was seen, yet the step may still run and end, as when a slurmctld killed before it
saved its state forgets a job it had just started (seen in the soak: read LOST 2 s after its
start, SUCCEEDED once its step ended 2 s later)."""

TRACEBACK = "Traceback (most recent call last)"


@attrs.frozen
class Violation:
    """One breach: which invariant, of what (a Task key, an allocation, a command), and why."""

    invariant: str
    subject: str
    reason: str


@attrs.frozen
class Span:
    """A Task's run in one job of one allocation, by the file server's clock: from the job's
    start (a lease step's own step-start; a later chain link's claim on its handoff, without
    which it did not run the Task) to its slot's end marker, else the job's stop marker, else
    open (``math.inf``)."""

    key: str
    allocation_id: str
    job: int
    start: float
    end: float


def spans(evidence: SoakEvidence) -> tuple[Span, ...]:
    """Every Task run the markers show, for the Tasks the journal's intents place in slots."""
    state = evidence.journal.state
    if state is None:
        return ()
    by_job: dict[tuple[str, int], list[Marker]] = defaultdict(list)
    for marker in evidence.markers:
        by_job[(marker.allocation_id, marker.job)].append(marker)
    slots = {intent.allocation_id: intent for intent in state.intents}
    taken = {
        (m.allocation_id, m.slot): m.at
        for m in evidence.markers
        if m.kind is MarkerKind.TAKEN and (m.size or 0) > 0
    }
    found: list[Span] = []
    for (allocation_id, job), markers in sorted(by_job.items()):
        intent = slots.get(allocation_id)
        if intent is None or not intent.task_keys:
            continue
        opening = MarkerKind.STEP_START if intent.within is not None else MarkerKind.START
        starts = [m.at for m in markers if m.kind is opening]
        if not starts:
            continue
        stops = [m.at for m in markers if m.kind is MarkerKind.STOP]
        for slot, key in enumerate(intent.task_keys):
            start = min(starts)
            if intent.chain is not None and intent.chain.position > 1:
                # A later link runs a slot only on the handoff it took (its claim on the
                # predecessor's handoff, nonempty); a link that started with nothing handed to
                # it ran nothing, and has no end marker to show for it.
                handed = taken.get((intent.chain.after, slot))
                if handed is None:
                    continue
                start = max(start, handed)
            ends = [m.at for m in markers if m.kind is MarkerKind.END and m.slot == slot]
            end = max(ends) if ends else max(stops) if stops else math.inf
            found.append(Span(key, allocation_id, job, start, end))
    return tuple(found)


def one_allocation_at_a_time(evidence: SoakEvidence) -> list[Violation]:
    """No Task ran in two allocations (or two jobs of one) at once."""
    by_key: dict[str, list[Span]] = defaultdict(list)
    for span in spans(evidence):
        by_key[span.key].append(span)
    found: list[Violation] = []
    for key, runs in sorted(by_key.items()):
        runs.sort(key=lambda s: (s.start, s.allocation_id, s.job))
        for i, first in enumerate(runs):
            for second in runs[i + 1 :]:
                if second.start >= first.end:
                    continue
                end = "never ended" if math.isinf(first.end) else f"ended at {first.end:.3f}"
                found.append(
                    Violation(
                        "one-allocation-at-a-time",
                        key,
                        f"ran in {first.allocation_id} job {first.job} (from {first.start:.3f}, "
                        f"{end}) and in {second.allocation_id} job {second.job} from "
                        f"{second.start:.3f}",
                    )
                )
    return found


def results_whole(evidence: SoakEvidence) -> list[Violation]:
    """No published result incomplete, overwritten, or missing while its Task reads
    SUCCEEDED (in the last ``status --json``)."""
    if not evidence.expect_results:
        return []
    name = "results-whole"
    found: list[Violation] = []
    final = evidence.statuses[-1].tasks if evidence.statuses else ()
    succeeded = {key for key, execution, _ in final if execution == "SUCCEEDED"}
    for result in evidence.results:
        if not result.present:
            if result.key in succeeded:
                found.append(
                    Violation(name, result.key, "reads SUCCEEDED but nothing is published")
                )
            continue
        for problem in result.problems:
            found.append(Violation(name, result.key, f"published incomplete: {problem}"))
    # While the run went on: a worker publishes before its step returns, and the step's end
    # marker comes after that, so a Task a snapshot shows SUCCEEDED has its result by then.
    by_index = {record.index: record for record in evidence.commands}
    early: set[str] = set()
    for snapshot in evidence.statuses:
        published = {seen.key for seen in by_index[snapshot.index].results}
        for key, execution, _ in snapshot.tasks:
            if execution == "SUCCEEDED" and key not in published and key not in early:
                early.add(key)
                found.append(
                    Violation(
                        name,
                        key,
                        f"reads SUCCEEDED after command {snapshot.index}, nothing published then",
                    )
                )
    # Destinations over time: each must keep the inode and writer it was first seen with, and
    # never leave; the end is one more reading.
    first: dict[str, tuple[int, str | None, int]] = {}
    gone: set[str] = set()
    readings = [
        (f"command {r.index}", {seen.key: (seen.inode, seen.writer) for seen in r.results})
        for r in evidence.commands
    ]
    readings.append(
        (
            "the end",
            {r.key: (r.inode or 0, r.writer) for r in evidence.results if r.present},
        )
    )
    for when, seen in readings:
        for key, (inode, writer) in seen.items():
            known = first.setdefault(key, (inode, writer, len(first)))
            if (inode, writer) != known[:2]:
                found.append(
                    Violation(
                        name,
                        key,
                        f"overwritten: first inode {known[0]} by {known[1]}, after {when} "
                        f"inode {inode} by {writer}",
                    )
                )
                first[key] = (inode, writer, known[2])
        for key in sorted(first.keys() - seen.keys() - gone):
            gone.add(key)
            found.append(Violation(name, key, f"published earlier, gone after {when}"))
        gone -= seen.keys()
    return found


def settled_outcomes_stay(evidence: SoakEvidence) -> list[Violation]:
    """Once an attempt is settled (Slurm no longer lists it, every slot an outcome), no later
    ``status --json`` shows it otherwise."""
    found: list[Violation] = []
    settled: dict[tuple[str, int | None], tuple[tuple[str, ...], int]] = {}
    for snapshot in evidence.statuses:
        for allocation_id, job, executions, listed in snapshot.attempts:
            attempt = (allocation_id, job)
            known = settled.get(attempt)
            if known is not None:
                if executions != known[0]:
                    found.append(
                        Violation(
                            "settled-outcomes-stay",
                            f"{allocation_id} job {job}",
                            f"settled as {'/'.join(known[0])} by command {known[1]}, "
                            f"{'/'.join(executions) or 'nothing'} after command {snapshot.index}",
                        )
                    )
                continue
            if not listed and executions and all(e in FINAL for e in executions):
                settled[attempt] = (executions, snapshot.index)
    return found


def intents_resolved(evidence: SoakEvidence) -> list[Violation]:
    """At the end (after the driver's last reconcile) every intent has a receipt or a
    resolution."""
    state = evidence.journal.state
    if state is None:
        return []  # the journal invariant names it
    done = {r.allocation_id for r in state.receipts} | {r.allocation_id for r in state.resolutions}
    reconciles = [r for r in evidence.commands if r.verb == "reconcile"]
    last = (
        f"the last reconcile exited {reconciles[-1].exit_code}"
        if reconciles
        else "no reconcile ran"
    )
    return [
        Violation("intents-resolved", intent.allocation_id, f"intent unresolved at the end; {last}")
        for intent in state.intents
        if intent.allocation_id not in done
    ]


def commands_in_table(evidence: SoakEvidence) -> list[Violation]:
    """No command printed a traceback or exited outside the spec's table; every
    ``status --json`` that exited 0 printed a JSON document. A command the driver killed has
    no exit code of its own and is judged by its output only."""
    name = "commands-in-table"
    found: list[Violation] = []
    for record in evidence.commands:
        subject = f"command {record.index} ({' '.join(record.argv[-3:])})"
        if TRACEBACK in record.stdout or TRACEBACK in record.stderr:
            found.append(Violation(name, subject, "printed a traceback"))
        if record.timed_out:
            found.append(Violation(name, subject, "hung: killed at the driver's timeout"))
        elif not record.killed and record.exit_code not in EXIT_CODES:
            found.append(Violation(name, subject, f"exit code {record.exit_code} not in the table"))
        if (
            record.verb == "status"
            and "--json" in record.argv
            and record.exit_code == 0
            and not _is_json(record.stdout)
        ):
            found.append(Violation(name, subject, "status --json printed no JSON document"))
    return found


def _is_json(text: str) -> bool:
    try:
        json.loads(text)
    except ValueError:
        return False
    return True


def no_stale_plan(evidence: SoakEvidence) -> list[Violation]:
    """No saved plan was executed at another revision than the one it was made at: a submit
    that recorded anything (its revision moved) must have begun at its plan's revision, and
    every intent outside a lease's steps comes from a plan the driver saved."""
    name = "no-stale-plan"
    found: list[Violation] = []
    plans = {plan.path: plan for plan in evidence.plans}
    for record in evidence.commands:
        if record.verb != "submit" or record.plan is None:
            continue
        plan = plans.get(record.plan)
        if plan is None or plan.revision is None:
            continue
        if (
            record.revision_before is not None
            and record.revision_after is not None
            and record.revision_before not in (record.revision_after, plan.revision)
        ):
            found.append(
                Violation(
                    name,
                    f"command {record.index}",
                    f"submitted {record.plan} (made at revision {plan.revision}) at revision "
                    f"{record.revision_before}, and recorded through {record.revision_after}",
                )
            )
    state = evidence.journal.state
    if state is not None:
        digests = {plan.digest for plan in evidence.plans if plan.digest is not None}
        strays = sorted({i.plan_digest for i in state.intents if i.within is None} - digests)
        found.extend(
            Violation(name, digest, "intents of a plan the driver never saved") for digest in strays
        )
    return found


def journal_sound(evidence: SoakEvidence) -> list[Violation]:
    """The journal opens with every checksum holding, and its revision never went back
    between the driver's readings."""
    name = "journal-sound"
    found: list[Violation] = []
    if evidence.journal.error is not None:
        found.append(Violation(name, "journal", evidence.journal.error))
    highest: tuple[int, int] | None = None
    for record in evidence.commands:
        for revision in (record.revision_before, record.revision_after):
            if revision is None:
                continue
            if highest is not None and revision < highest[0]:
                found.append(
                    Violation(
                        name,
                        f"command {record.index}",
                        f"revision went back to {revision} from {highest[0]} "
                        f"(read at command {highest[1]})",
                    )
                )
            if highest is None or revision > highest[0]:
                highest = (revision, record.index)
    state = evidence.journal.state
    if state is not None and highest is not None and state.revision < highest[0]:
        found.append(
            Violation(name, "journal", f"revision {state.revision} at the end, {highest[0]} before")
        )
    return found


Check = Callable[[SoakEvidence], Iterable[Violation]]

INVARIANTS: tuple[tuple[str, Check], ...] = (
    ("one-allocation-at-a-time", one_allocation_at_a_time),
    ("results-whole", results_whole),
    ("settled-outcomes-stay", settled_outcomes_stay),
    ("intents-resolved", intents_resolved),
    ("commands-in-table", commands_in_table),
    ("no-stale-plan", no_stale_plan),
    ("journal-sound", journal_sound),
)
"""Every invariant, by the name its violations carry."""


def check(evidence: SoakEvidence) -> dict[str, tuple[Violation, ...]]:
    """Every invariant's violations, by name."""
    return {name: tuple(run(evidence)) for name, run in INVARIANTS}
