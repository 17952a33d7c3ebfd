"""The data behind ``servatus report``: each Task's spans over time, and what the campaign cost.

Pure functions over what the campaign recorded
(:class:`~servatus.journal.records.CampaignState`) and the status projection
(:class:`~servatus.status.Report`), so the picture says exactly what ``status`` says, with the
times between. It holds keys, states, times and resources only: never a Task's
stdin, env or args, which may hold secrets. ``report --json`` prints :func:`report_document`;
the HTML page (:mod:`servatus.cli.report_html`) draws the same document.

Times are seconds since the epoch. An intent's time is the submitting machine's clock; every
marker's is the file server's (docs/development/markers.md), so a queued span mixes the two clocks
and is clamped at zero, while running spans and run times never do."""

from __future__ import annotations

import enum
import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import attrs

from servatus.engine.slots import link_execution, slot_execution, slot_run_time, step_execution
from servatus.engine.status_values import Attempt, Execution, Report, StopReason, execution_text
from servatus.evidence import Observation
from servatus.journal.records import CampaignState, Intent, LeaseTerms, Settlement, TaskResources

REPORT_SCHEMA = "servatus.report/1"


class Span(enum.Enum):
    """What a segment of a lane is."""

    QUEUED = "queued"  # intent (a later chain link: its previous link's end) to start marker
    RUNNING = "running"  # start marker to end or stop marker (or to the clock, while running)
    LOST = "lost"  # started, never ended, gone from Slurm: counted at its whole time limit
    UNRESOLVED = "unresolved"  # intent without a receipt: sbatch may or may not have reached Slurm
    UNOBSERVED = "unobserved"  # accepted, but no listing read (offline, or a Target unlisted)


@attrs.frozen
class Segment:
    """One span of one attempt. ``open`` is True while it still grows (its end is the moment
    the report was made, or the file server's clock for a running span)."""

    span: Span
    start: float
    end: float
    open: bool
    allocation_id: str
    job: int | None
    execution: str
    exit_code: int | None
    link: int | None = None
    within: str | None = None


@attrs.frozen
class Point:
    """A moment in a lane: the pre-limit signal (``limit``) reaching an allocation."""

    kind: str
    at: float
    allocation_id: str


@attrs.frozen
class Lane:
    """One Task: its current state (as ``status`` shows it) and every span of every attempt."""

    key: str
    execution: str
    allocation_id: str | None
    job: int | None
    exit_code: int | None
    run_time: int | None
    budget: int | None
    segments: tuple[Segment, ...]
    points: tuple[Point, ...]


@attrs.frozen
class LeaseLane:
    """One lease link (ADR 0009): its own spans, the steps run within it, and how many of its
    ``slots`` were busy over time (``busy``: each moment the count changed, and the count
    from then on), from which its held, busy and idle slot-hours follow."""

    allocation_id: str
    job: int | None
    profile: str
    slots: int
    link: int | None
    segments: tuple[Segment, ...]
    points: tuple[Point, ...]
    steps: tuple[str, ...]
    busy: tuple[tuple[float, int], ...]
    held_slot_hours: float
    busy_slot_hours: float

    @property
    def idle_slot_hours(self) -> float:
        return max(0.0, self.held_slot_hours - self.busy_slot_hours)


@attrs.frozen
class Hours:
    """CPU-, GPU- and GiB-hours."""

    cpu: float = 0.0
    gpu: float = 0.0
    memory_gib: float = 0.0

    def plus(self, seconds: float, cpus: int, memory_mib: int, gpus: int) -> Hours:
        hours = seconds / 3600
        return Hours(
            self.cpu + hours * cpus,
            self.gpu + hours * gpus,
            self.memory_gib + hours * memory_mib / 1024,
        )


@attrs.frozen
class Distribution:
    """Seconds of some spans: how many, their quantiles, and a histogram of ``bins`` as
    ``(from, to, count)`` (equal widths, the last bin closed)."""

    count: int
    minimum: float | None
    median: float | None
    p90: float | None
    maximum: float | None
    bins: tuple[tuple[float, float, int], ...]


@attrs.frozen
class ChainBudget:
    """A chained Task's run time against its lifetime budget (both in seconds)."""

    key: str
    run_time: int | None
    complete: bool
    budget: int
    link: int
    links: int


@attrs.frozen
class Summary:
    """What the campaign did and cost. ``requested`` is each accepted attempt's time limit
    times its resources; ``used`` its measured run time times the same (a lease counts as its
    whole allocation, its steps inside it, not again). ``unknown_resources`` counts attempts
    whose resources the journal does not hold (submitted before they were recorded)."""

    tasks: Mapping[str, int]
    attempts: Mapping[str, int]
    requested: Hours
    used: Hours
    unknown_resources: int
    queue_wait: Distribution
    run_time: Distribution
    chains: tuple[ChainBudget, ...]


@attrs.frozen
class ReportData:
    """The whole picture: one lane per Task in roster order, one per lease link, the summary.

    :func:`~servatus.report.report_to_document` turns it into the document
    ``servatus report --json`` prints, whose fields the guide's report page describes.
    """

    campaign_id: str
    made_at: float
    online: bool
    lanes: tuple[Lane, ...]
    leases: tuple[LeaseLane, ...]
    summary: Summary
    warnings: tuple[str, ...]


_LEASE_WORDS = {"QUEUED", "RUNNING", "ENDING"}


def build(state: CampaignState, report: Report, *, now: float) -> ReportData:
    """The report's data from the campaign and its status projection, made at ``now`` (this
    machine's clock: the end of a span still queued)."""
    intents = {intent.allocation_id: intent for intent in state.intents}
    by_task: dict[str, list[Segment]] = {}
    points: dict[str, list[Point]] = {}
    step_spans: dict[str, list[tuple[float, float]]] = {}
    lease_attempts: dict[str, Attempt] = {}
    requested = used = Hours()
    unknown = 0
    waits: list[float] = []
    runs: list[float] = []
    attempt_counts: Counter[str] = Counter()
    settled = {item.allocation_id: item for item in state.settlements}
    drawn: list[tuple[Attempt, Intent, tuple[Segment, ...]]] = []
    for projected in report.attempts:
        attempt = projected
        intent = intents[attempt.allocation_id]
        if attempt.observation is None and attempt.allocation_id in settled:
            attempt = settled_attempt(attempt, intent, settled, now=now)
        if intent.lease is not None or attempt.task_key is None:  # a lease's own (ADR 0009)
            lease_attempts[attempt.allocation_id] = attempt
            continue
        drawn.append((attempt, intent, attempt_segments(attempt, intent, now=now)))
    ended = _ends(segments for _, _, segments in drawn)
    for attempt, intent, spans in drawn:
        key = attempt.task_key
        assert key is not None  # a lease's own attempt is drawn in its lease's lane
        segments = _after_link(spans, intent, ended)
        attempt_counts[attempt.execution.value] += 1
        by_task.setdefault(key, []).extend(segments)
        observation = attempt.observation
        if observation is not None and observation.limit is not None and _ran(attempt):
            points.setdefault(key, []).append(
                Point("limit", observation.limit, attempt.allocation_id)
            )
        for segment in segments:
            if segment.span is Span.QUEUED and not segment.open and _ran(attempt):
                waits.append(segment.end - segment.start)
        if attempt.run_time is not None and attempt.run_time.complete and _ran(attempt):
            runs.append(attempt.run_time.total)
        if intent.within is not None:
            step_spans.setdefault(intent.within, []).extend(
                (s.start, s.end) for s in segments if s.span in (Span.RUNNING, Span.LOST)
            )
            continue  # a step's hours are its lease's
        slot = intent.resources
        if slot is None:
            if attempt.job is not None:
                unknown += 1
            continue
        if attempt.job is not None:
            requested = _add(requested, intent.time_limit, slot)
        if attempt.run_time is not None:
            used = _add(used, attempt.run_time.total, slot)
    leases: list[LeaseLane] = []
    lease_ends: dict[str, float] = {}
    for intent in state.intents:
        if intent.lease is None:
            continue
        lane = lease_lane(
            intent,
            intent.lease,
            lease_attempts.get(intent.allocation_id),
            state,
            step_spans.get(intent.allocation_id, ()),
            [i.allocation_id for i in state.intents if i.within == intent.allocation_id],
            now=now,
        )
        lane = attrs.evolve(lane, segments=_after_link(lane.segments, intent, lease_ends))
        lease_ends.update(_ends([lane.segments]))
        leases.append(lane)
        terms = intent.lease
        if lane.job is not None:
            requested = requested.plus(
                intent.time_limit, terms.cpus * terms.slots, terms.memory_mib * terms.slots,
                terms.gpus * terms.slots,
            )  # fmt: skip
        used = used.plus(lane.held_slot_hours * 3600, terms.cpus, terms.memory_mib, terms.gpus)
    lanes = tuple(
        Lane(
            key=task.key,
            execution=execution_text(task),
            allocation_id=task.allocation_id,
            job=task.job,
            exit_code=task.exit_code,
            run_time=None if task.run_time is None else task.run_time.total,
            budget=task.link.budget or None if task.link is not None else None,
            segments=tuple(by_task.get(task.key, ())),
            points=tuple(points.get(task.key, ())),
        )
        for task in report.tasks
    )
    chains = tuple(
        ChainBudget(
            task.key,
            None if task.run_time is None else task.run_time.total,
            task.run_time is not None and task.run_time.complete,
            task.link.budget,
            task.link.position,
            task.link.of,
        )
        for task in report.tasks
        if task.link is not None and task.link.budget
    )
    summary = Summary(
        tasks=report.counts,
        attempts={e.value: attempt_counts[e.value] for e in Execution if attempt_counts[e.value]},
        requested=requested,
        used=used,
        unknown_resources=unknown,
        queue_wait=distribution(waits),
        run_time=distribution(runs),
        chains=chains,
    )
    return ReportData(
        campaign_id=state.campaign_id,
        made_at=now,
        online=report.online,
        lanes=lanes,
        leases=tuple(leases),
        summary=summary,
        warnings=report.warnings,
    )


def settled_attempt(
    attempt: Attempt, intent: Intent, settled: Mapping[str, Settlement], *, now: float
) -> Attempt:
    """An attempt ``status --offline`` leaves unobserved (``ACCEPTED``), read from its settled
    observation as an online status would read it: a settled job is one Slurm no longer lists,
    so its markers alone decide, by the rules of what it is (a lease link, a step in one, a
    chain link, a plain slot). The picture of a campaign whose markers were all purged still
    draws every settled allocation."""
    observation = settled[attempt.allocation_id].observation
    slot, chain = attempt.slot, attempt.link
    if attempt.slots is not None or slot is None:
        # A lease link: its own start, stop and limit, no Task's slot (its chain, if it has
        # one, is the lease's next link, never a hand-on).
        slot = 0
        decision = slot_execution(None, observation, slot)
    elif attempt.within is not None:  # a step, judged inside its lease, which is forgotten
        decision = step_execution(None, observation)
    elif chain is None:
        decision = slot_execution(None, observation, slot)
    else:
        before = settled.get(chain.after)
        handed = () if before is None else before.handed
        end = observation.ends[slot] if slot < len(observation.ends) else None
        if chain.position == 1 or end is not None or slot in handed:
            decision = link_execution(None, observation, slot, last=chain.spends(slot))
        else:
            decision = (Execution.STOPPED, None, StopReason.NEVER_STARTED)
    execution, exit_code, detail = decision
    run_time = slot_run_time(execution, observation, slot, intent.time_limit, now)
    return attempt._replace(
        execution=execution,
        exit_code=exit_code,
        detail=detail,
        run_time=run_time,
        observation=observation,
    )


def _ends(drawn: Iterable[Iterable[Segment]]) -> dict[str, float]:
    """Each allocation's last running (or LOST) moment drawn: a packed one's latest slot."""
    ended: dict[str, float] = {}
    for segments in drawn:
        for s in segments:
            if s.span in (Span.RUNNING, Span.LOST):
                ended[s.allocation_id] = max(ended.get(s.allocation_id, s.end), s.end)
    return ended


def _after_link(
    segments: tuple[Segment, ...], intent: Intent, ended: Mapping[str, float]
) -> tuple[Segment, ...]:
    """A later chain link's segments with its queued span starting when the link before it
    ended. Every link's intent is recorded at submit, but until then Slurm holds it on its
    dependency, not in the queue: drawn from its intent, link 2's queued bar lay over link
    1's running one, and a chain of 16-hour links added 16, 32, 48 hours of "queue wait"."""
    before = None if intent.chain is None else ended.get(intent.chain.after)
    if before is None:
        return segments
    return tuple(
        attrs.evolve(s, start=min(max(s.start, before), s.end)) if s.span is Span.QUEUED else s
        for s in segments
    )


def _add(hours: Hours, seconds: float, slot: TaskResources) -> Hours:
    return hours.plus(seconds, slot.cpus, slot.memory_mib, slot.gpus)


def _ran(attempt: Attempt) -> bool:
    """Whether the attempt's slot really started (a later chain link's slot that was never
    handed to it did not, though its link has a start marker)."""
    observation = attempt.observation
    if observation is None or observation.start is None:
        return False
    return not (attempt.detail is StopReason.NEVER_STARTED or attempt.execution is Execution.QUEUED)


def attempt_segments(attempt: Attempt, intent: Intent, *, now: float) -> tuple[Segment, ...]:
    """An attempt's spans: queued from its intent (:func:`build` moves a later chain link's to
    its previous link's end) to its start marker, then running to its end (or stop) marker;
    LOST, UNRESOLVED and unobserved spans as what they are."""
    execution = attempt.execution
    words = execution_text_of(attempt)
    link = None if attempt.link is None else attempt.link.position

    def segment(span: Span, start: float, end: float, is_open: bool) -> Segment:
        return Segment(
            span, start, max(start, end), is_open, attempt.allocation_id, attempt.job, words,
            attempt.exit_code, link, intent.within,
        )  # fmt: skip

    asked = intent.created_at
    if execution is Execution.NOT_SUBMITTED:
        return ()
    if execution is Execution.UNRESOLVED:
        return (segment(Span.UNRESOLVED, asked, now, True),)
    observation = attempt.observation
    if observation is None:
        return (segment(Span.UNOBSERVED, asked, now, True),)
    start = observation.start
    if not _ran(attempt) or start is None:
        queued = execution is Execution.QUEUED or (execution is Execution.RUNNING and start is None)
        if queued:
            return (segment(Span.QUEUED, asked, now, True),)
        # Never started: queued until its link started or it was told to stop, where seen.
        ended = observation.stop if observation.stop is not None else start
        return (segment(Span.QUEUED, asked, asked if ended is None else ended, False),)
    queued_span = segment(Span.QUEUED, min(asked, start), start, False)
    run_time = attempt.run_time
    if execution is Execution.LOST:
        return queued_span, segment(Span.LOST, start, start + intent.time_limit, False)
    growing = run_time is not None and not run_time.complete
    end = _slot_end(observation, attempt.slot)
    if end is None:
        end = start + (run_time.total if run_time is not None else 0)
    return queued_span, segment(Span.RUNNING, start, end, growing)


def _slot_end(observation: Observation, slot: int | None) -> float | None:
    ends = observation.ends
    end = ends[slot] if slot is not None and slot < len(ends) else None
    if end is not None:
        return end.at
    return observation.stop


def execution_text_of(attempt: Attempt) -> str:
    """``FAILED``, ``STOPPED (time limit)``: an attempt's execution as status words it."""
    if attempt.detail is None:
        return attempt.execution.value
    return f"{attempt.execution.value} ({attempt.detail.value})"


def lease_lane(
    intent: Intent,
    terms: LeaseTerms,
    attempt: Attempt | None,
    state: CampaignState,
    step_spans: Iterable[tuple[float, float]],
    steps: Sequence[str],
    *,
    now: float,
) -> LeaseLane:
    """A lease link's lane. Its own evidence is its Attempt (``task_key`` None, ``slots`` N)
    once status projects leases, else what the journal holds (receipt, resolution,
    settlement). Held slot time is its running span times its slots; busy slot time is the
    steps' running spans within it, at most ``slots`` at once."""
    allocation_id = intent.allocation_id
    step_spans = list(step_spans)
    if attempt is not None:
        job, observation = attempt.job, attempt.observation
        word, listed = attempt.execution.value, attempt.listed
    else:
        job = _recorded_job(state, allocation_id)
        settled = {s.allocation_id: s for s in state.settlements}.get(allocation_id)
        observation = None if settled is None else settled.observation
        resolved = any(item.allocation_id == allocation_id for item in state.resolutions)
        word = "ACCEPTED" if job is not None else "NOT_SUBMITTED" if resolved else "UNRESOLVED"
        listed = None
    link = None if intent.chain is None else intent.chain.position

    def segment(span: Span, start: float, end: float, is_open: bool) -> Segment:
        return Segment(span, start, max(start, end), is_open, allocation_id, job, word, None, link)

    asked = intent.created_at
    segments: tuple[Segment, ...]
    running: tuple[float, float] | None = None
    if word == "NOT_SUBMITTED":
        segments = ()
    elif word == "UNRESOLVED":
        segments = (segment(Span.UNRESOLVED, asked, now, True),)
    elif observation is None:
        segments = (segment(Span.UNOBSERVED, asked, now, True),)
    elif observation.start is None:
        waiting = word == "QUEUED" or listed is True
        segments = (segment(Span.QUEUED, asked, now if waiting else asked, waiting),)
    else:
        start = observation.start
        queued = segment(Span.QUEUED, min(asked, start), start, False)
        if observation.stop is not None:
            running = (start, observation.stop)
            segments = (queued, segment(Span.RUNNING, start, observation.stop, False))
        elif word in _LEASE_WORDS or listed is True:
            # Held until now by the file server's clock, as its steps' spans are measured
            # (whole seconds each, so a step's end may pass it by under a second).
            held_for = None if attempt is None else attempt.run_time
            until = start + held_for.total if held_for is not None else max(start, now)
            running = (start, max([until, *(end for _, end in step_spans)]))
            segments = (queued, segment(Span.RUNNING, start, running[1], True))
        else:
            running = (start, start + intent.time_limit)
            segments = (queued, segment(Span.LOST, start, running[1], False))
    busy = occupancy(step_spans, terms.slots, running)
    held = 0.0 if running is None else (running[1] - running[0]) * terms.slots / 3600
    points: tuple[Point, ...] = ()
    if observation is not None and observation.limit is not None:
        points = (Point("limit", observation.limit, allocation_id),)
    return LeaseLane(
        allocation_id=allocation_id,
        job=job,
        profile=terms.profile,
        slots=terms.slots,
        link=link,
        segments=segments,
        points=points,
        steps=tuple(steps),
        busy=busy,
        held_slot_hours=held,
        busy_slot_hours=busy_hours(busy, running),
    )


def _recorded_job(state: CampaignState, allocation_id: str) -> int | None:
    for receipt in state.receipts:
        if receipt.allocation_id == allocation_id:
            return receipt.job
    for resolved in state.resolutions:
        if resolved.allocation_id == allocation_id:
            return resolved.job
    return None


def occupancy(
    spans: Iterable[tuple[float, float]], slots: int, within: tuple[float, float] | None
) -> tuple[tuple[float, int], ...]:
    """How many slots the steps' ``spans`` keep busy over time, clipped to the lease's running
    span ``within`` and to its ``slots``: each moment the count changes, with the new count."""
    if within is None:
        return ()
    low, high = within
    changes: Counter[float] = Counter()
    for began, ended in spans:
        start, end = max(began, low), min(ended, high)
        if end > start:
            changes[start] += 1
            changes[end] -= 1
    result: list[tuple[float, int]] = []
    count = 0
    for at in sorted(changes):
        count += changes[at]
        shown = min(count, slots)
        if not result or result[-1][1] != shown:
            result.append((at, shown))
    return tuple(result)


def busy_hours(busy: Sequence[tuple[float, int]], within: tuple[float, float] | None) -> float:
    """Slot-hours of an :func:`occupancy` step function up to the end of ``within``."""
    if within is None or not busy:
        return 0.0
    total = 0.0
    for (at, count), (following, _) in zip(busy, [*busy[1:], (within[1], 0)], strict=True):
        total += (following - at) * count
    return total / 3600


def distribution(values: Sequence[float], *, bins: int = 20) -> Distribution:
    """Quantiles and an equal-width histogram of ``values`` (seconds)."""
    if not values:
        return Distribution(0, None, None, None, None, ())
    ordered = sorted(values)
    low, high = ordered[0], ordered[-1]
    width = (high - low) / bins if high > low else 1.0
    counts = [0] * bins
    for value in ordered:
        counts[min(bins - 1, int((value - low) / width))] += 1
    return Distribution(
        count=len(ordered),
        minimum=low,
        median=_quantile(ordered, 0.5),
        p90=_quantile(ordered, 0.9),
        maximum=high,
        bins=tuple((low + i * width, low + (i + 1) * width, n) for i, n in enumerate(counts)),
    )


def _quantile(ordered: Sequence[float], q: float) -> float:
    """The nearest-rank quantile: a value that occurred."""
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


# -- the document ---------------------------------------------------------------------------


def _segment_document(segment: Segment) -> dict[str, Any]:
    return {
        "span": segment.span.value,
        "start": segment.start,
        "end": segment.end,
        "open": segment.open,
        "allocation": segment.allocation_id,
        "job": segment.job,
        "execution": segment.execution,
        "exit_code": segment.exit_code,
        "link": segment.link,
        "within": segment.within,
    }


def _point_document(point: Point) -> dict[str, Any]:
    return {"kind": point.kind, "at": point.at, "allocation": point.allocation_id}


def _hours_document(hours: Hours) -> dict[str, float]:
    return {"cpu_hours": hours.cpu, "gpu_hours": hours.gpu, "memory_gib_hours": hours.memory_gib}


def _distribution_document(value: Distribution) -> dict[str, Any]:
    return {
        "count": value.count,
        "min": value.minimum,
        "median": value.median,
        "p90": value.p90,
        "max": value.maximum,
        "bins": [list(item) for item in value.bins],
    }


def report_document(data: ReportData) -> dict[str, Any]:
    """The ``servatus.report/1`` document ``report --json`` prints and the page draws.

    :param data: What :meth:`~servatus.Campaign.report` returned.
    """
    summary = data.summary
    return {
        "schema": REPORT_SCHEMA,
        "campaign_id": data.campaign_id,
        "made_at": data.made_at,
        "online": data.online,
        "lanes": [
            {
                "key": lane.key,
                "execution": lane.execution,
                "allocation": lane.allocation_id,
                "job": lane.job,
                "exit_code": lane.exit_code,
                "run_time": lane.run_time,
                "budget": lane.budget,
                "segments": [_segment_document(s) for s in lane.segments],
                "points": [_point_document(p) for p in lane.points],
            }
            for lane in data.lanes
        ],
        "leases": [
            {
                "allocation": lease.allocation_id,
                "job": lease.job,
                "profile": lease.profile,
                "slots": lease.slots,
                "link": lease.link,
                "segments": [_segment_document(s) for s in lease.segments],
                "points": [_point_document(p) for p in lease.points],
                "steps": list(lease.steps),
                "busy": [list(change) for change in lease.busy],
                "held_slot_hours": lease.held_slot_hours,
                "busy_slot_hours": lease.busy_slot_hours,
                "idle_slot_hours": lease.idle_slot_hours,
            }
            for lease in data.leases
        ],
        "summary": {
            "tasks": dict(summary.tasks),
            "attempts": dict(summary.attempts),
            "requested": _hours_document(summary.requested),
            "used": _hours_document(summary.used),
            "unknown_resources": summary.unknown_resources,
            "queue_wait": _distribution_document(summary.queue_wait),
            "run_time": _distribution_document(summary.run_time),
            "chains": [
                {
                    "key": chain.key,
                    "run_time": chain.run_time,
                    "complete": chain.complete,
                    "budget": chain.budget,
                    "link": chain.link,
                    "links": chain.links,
                }
                for chain in summary.chains
            ],
        },
        "warnings": list(data.warnings),
    }


def disagreements(report: Mapping[str, Any], status: Mapping[str, Any]) -> list[str]:
    """Where a ``report --json`` document and a ``status --json`` document read at the same
    moment disagree, one line each (none: they agree): every Task's execution, exit code, job,
    allocation and run time, the counts, and every allocation of ``status`` drawn. For the
    real-cluster lane, which checks a report of a campaign with a chain, a lease and a retry."""
    problems: list[str] = []
    lanes = {lane["key"]: lane for lane in report["lanes"]}
    drawn = {
        segment["allocation"]
        for lane in [*report["lanes"], *report["leases"]]
        for segment in lane["segments"]
    }
    if set(lanes) != {task["key"] for task in status["tasks"]}:
        problems.append("the report's lanes are not status's Tasks")
    for task in status["tasks"]:
        lane = lanes.get(task["key"])
        if lane is None:
            continue
        words = task["execution"] + (f" ({task['detail']})" if task["detail"] else "")
        run_time = None if task["run_time"] is None else task["run_time"]["total"]
        theirs = (words, task["exit_code"], task["job"], task["allocation"], run_time)
        ours = (lane["execution"], lane["exit_code"], lane["job"], lane["allocation"])
        if (*ours, lane["run_time"]) != theirs:
            problems.append(
                f"Task {task['key']}: report {(*ours, lane['run_time'])}, status {theirs}"
            )
    if report["summary"]["tasks"] != status["counts"]:
        problems.append(f"counts: report {report['summary']['tasks']}, status {status['counts']}")
    for attempt in status["attempts"]:
        executions = set(attempt["executions"])
        if executions != {"NOT_SUBMITTED"} and attempt["allocation_id"] not in drawn:
            problems.append(f"allocation {attempt['allocation_id']} is not drawn")
    return problems


__all__ = [
    "REPORT_SCHEMA",
    "ChainBudget",
    "Distribution",
    "Hours",
    "Lane",
    "LeaseLane",
    "Point",
    "ReportData",
    "Segment",
    "Span",
    "Summary",
    "attempt_segments",
    "build",
    "disagreements",
    "distribution",
    "occupancy",
    "report_document",
]
