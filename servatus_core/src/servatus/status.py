"""Status projection: from what the campaign recorded and what Slurm shows, each Task's state.

Pure functions over values. The campaign turns its records into :class:`Submission` values and
fetches one ``squeue`` listing and one run-marker listing per Target; :func:`project` does the
rest. A missing marker means something only once Slurm no longer lists the job, because only then
is every marker the job wrote visible on the login node.
"""

from __future__ import annotations

import enum
from collections import Counter, defaultdict
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from typing import Any, NamedTuple

import attrs

from servatus.config import Target, target_from_identity
from servatus.evidence import Evidence, EvidenceReader, Marker, MarkerKind, QueueEntry, fetch
from servatus.script import JOB_NAME_PREFIX
from servatus.store import CampaignState
from servatus.transport import Transport

YIELD_EXIT = 75
"""A step that exits 75 says "stopped cleanly, continue me"."""


class Execution(enum.Enum):
    """A Task's execution as ``status`` shows it."""

    NOT_SUBMITTED = "NOT_SUBMITTED"
    UNRESOLVED = "UNRESOLVED"
    ACCEPTED = "ACCEPTED"
    QUEUED = "QUEUED"
    RUNNING = "RUNNING"
    ENDING = "ENDING"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    STOPPED = "STOPPED"
    LOST = "LOST"


class StopReason(enum.Enum):
    """Why a ``STOPPED`` Task stopped, where the evidence says."""

    NEVER_STARTED = "never started"
    TIME_LIMIT = "time limit"
    YIELDED = "yielded"
    BUDGET_SPENT = "budget spent"


class Outcome(enum.Enum):
    """What the campaign recorded of one submission."""

    PENDING = "pending"  # intent durable, no receipt: sbatch may or may not have reached Slurm
    ACCEPTED = "accepted"
    NOT_SUBMITTED = "not_submitted"


_QUEUED_STATES = frozenset({"PENDING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "RESV_DEL_HOLD"})
_RUNNING_STATES = frozenset(
    {"RUNNING", "CONFIGURING", "SUSPENDED", "STOPPED", "SIGNALING", "RESIZING", "STAGE_OUT"}
)


class Submission(NamedTuple):
    """One allocation as the campaign recorded it, with the evidence key of its Target.

    This and the other per-Task values of a projection are named tuples, not attrs classes:
    ``status`` builds several per Task, and a frozen attrs instance costs three times as much.
    """

    allocation_id: str
    task_keys: tuple[str, ...]
    target: str
    recorded_at: float
    time_limit: int
    outcome: Outcome
    job: int | None = None


class SlotEnd(NamedTuple):
    """A step's end marker: its exit code and mtime."""

    exit_code: int
    at: float


class Observation(NamedTuple):
    """What the markers of one allocation show, timed by the file server."""

    start: float | None = None
    stop: float | None = None
    limit: float | None = None
    ends: tuple[SlotEnd | None, ...] = ()


class RunTime(NamedTuple):
    """Seconds a Task has run; ``complete`` is False while growing or when a LOST run is counted
    at its whole time limit (shown with ``~``). ``+`` adds two run times (not tuple joining)."""

    total: int
    complete: bool = True

    def __add__(self, other: RunTime) -> RunTime:  # type: ignore[override]
        return RunTime(self.total + other.total, self.complete and other.complete)


class Attempt(NamedTuple):
    """One Task's slot in one allocation, projected."""

    allocation_id: str
    task_key: str
    slot: int
    job: int | None
    execution: Execution
    exit_code: int | None
    detail: StopReason | None
    run_time: RunTime | None
    listed: bool
    observation: Observation | None


class TaskStatus(NamedTuple):
    """One Task's current state: its latest submission decides; run time sums every attempt."""

    key: str
    execution: Execution
    exit_code: int | None
    detail: StopReason | None
    run_time: RunTime | None
    allocation_id: str | None
    job: int | None
    accepted: bool
    unresolved: bool
    listed: bool


@attrs.frozen
class Report:
    """The whole projection: Tasks in roster order, every attempt, counts and warnings."""

    tasks: tuple[TaskStatus, ...]
    attempts: tuple[Attempt, ...]
    warnings: tuple[str, ...]
    online: bool

    @property
    def counts(self) -> dict[str, int]:
        counted = Counter(task.execution for task in self.tasks)
        return {state.value: counted[state] for state in Execution if counted[state]}

    @property
    def quiescent(self) -> bool:
        """Nothing is queued, running, ending, or unresolved: the picture will not change alone."""
        moving = {Execution.QUEUED, Execution.RUNNING, Execution.ENDING, Execution.UNRESOLVED}
        return self.online and not any(task.execution in moving for task in self.tasks)


_START, _END, _STOP, _LIMIT = MarkerKind.START, MarkerKind.END, MarkerKind.STOP, MarkerKind.LIMIT


def observe(allocation_id: str, slots: int, markers: Iterable[Marker]) -> Observation:
    """Fold one allocation's markers into an Observation (first start, last stop/limit)."""
    start = stop = limit = None
    ends: list[SlotEnd | None] = [None] * slots
    for marker_allocation, _, kind, at, slot, exit_code in markers:
        if marker_allocation != allocation_id:
            continue
        if kind is _END:
            if slot is not None and 0 <= slot < slots and exit_code is not None:
                ends[slot] = SlotEnd(exit_code, at)
        elif kind is _START:
            start = at if start is None else min(start, at)
        elif kind is _STOP:
            stop = at if stop is None else max(stop, at)
        elif kind is _LIMIT:
            limit = at if limit is None else min(limit, at)
    return Observation(start, stop, limit, tuple(ends))


def slot_execution(
    entry: QueueEntry | None, observation: Observation, slot: int
) -> tuple[Execution, int | None, StopReason | None]:
    """A slot's execution from its job's queue entry (if listed) and its allocation's markers."""
    end = observation.ends[slot] if slot < len(observation.ends) else None
    if (
        end is not None
        and end.exit_code != 0
        and observation.stop is not None
        and end.at >= observation.stop
    ):
        # The step returned nonzero because the job was told to end (scancel, the time limit):
        # a stop, not a failure; ENDING while Slurm lists the job, STOPPED once it is purged.
        end = None
    if end is not None:
        if end.exit_code == 0:
            return Execution.SUCCEEDED, 0, None
        if end.exit_code == YIELD_EXIT:
            return Execution.STOPPED, end.exit_code, StopReason.YIELDED
        return Execution.FAILED, end.exit_code, None
    if entry is not None:
        if entry.state in _QUEUED_STATES:
            return Execution.QUEUED, None, None
        if entry.state in _RUNNING_STATES:
            return Execution.RUNNING, None, None
        return Execution.ENDING, None, None
    if observation.start is None:
        return Execution.STOPPED, None, StopReason.NEVER_STARTED
    if observation.stop is not None:
        reason = StopReason.TIME_LIMIT if observation.limit is not None else None
        return Execution.STOPPED, None, reason
    return Execution.LOST, None, None


def slot_run_time(
    execution: Execution, observation: Observation, slot: int, time_limit: int, now: float
) -> RunTime:
    """Seconds between the start marker and the slot's end (or stop); still growing while the
    job runs, and a LOST run counted at its whole limit, both marked incomplete."""
    if observation.start is None:
        return RunTime(0)
    end = observation.ends[slot] if slot < len(observation.ends) else None
    if end is not None:
        return RunTime(max(0, round(end.at - observation.start)))
    if observation.stop is not None:
        return RunTime(max(0, round(observation.stop - observation.start)))
    if execution is Execution.LOST:
        return RunTime(time_limit, complete=False)
    if execution in (Execution.RUNNING, Execution.ENDING):
        return RunTime(max(0, min(time_limit, round(now - observation.start))), complete=False)
    return RunTime(0)


def project(
    keys: Sequence[str],
    submissions: Sequence[Submission],
    evidence: Mapping[str, Evidence],
    *,
    now: float,
    offline: bool = False,
) -> Report:
    """Project every Task's status. ``submissions`` are in recording order; ``evidence`` is keyed
    by each submission's ``target``. ``offline`` (or a missing listing) projects without Slurm:
    accepted work reads ``ACCEPTED`` and run time is unknown.

    One pass over the submissions and one over the Tasks: a status of 100,000 Tasks builds an
    attempt per slot and a status per Task, and nothing else per Task.
    """
    listing = {  # whether both listings of a Target were fetched
        target: item.queue is not None and item.markers is not None
        for target, item in evidence.items()
    }
    targets = {submission.target for submission in submissions}
    online = all(listing.get(target, False) for target in targets) and (
        bool(evidence) or not submissions
    )
    online = online and not offline
    # Per Target: its markers by allocation id, its queue entries by job name.
    by_marker: dict[str, dict[str, list[Marker]]] = {}
    by_queue: dict[str, dict[str, QueueEntry]] = {}
    for target, item in evidence.items():
        if not listing[target]:
            continue
        grouped: dict[str, list[Marker]] = defaultdict(list)
        for marker in item.markers or ():
            grouped[marker.allocation_id].append(marker)
        by_marker[target] = grouped
        by_queue[target] = {entry.name: entry for entry in item.queue or ()}
    attempts: list[Attempt] = []
    warnings: list[str] = []
    latest: dict[str, Attempt] = {}
    run_times: dict[str, RunTime] = {}
    unresolved: set[str] = set()
    accepted: set[str] = set()
    listed: set[str] = set()
    for submission in submissions:
        markers = by_marker.get(submission.target)
        queue = by_queue.get(submission.target)
        for attempt in _attempts(submission, markers, queue, now, warnings):
            attempts.append(attempt)
            key = attempt.task_key
            if attempt.listed:
                listed.add(key)
            execution = attempt.execution
            if execution is Execution.NOT_SUBMITTED:
                continue
            if execution is Execution.UNRESOLVED:
                unresolved.add(key)
            else:
                accepted.add(key)
            latest[key] = attempt
            run_time = attempt.run_time
            if run_time is not None:
                earlier = run_times.get(key)
                run_times[key] = run_time if earlier is None else earlier + run_time
    tasks: list[TaskStatus] = []
    append = tasks.append
    zero = RunTime(0) if online else None
    for key in keys:
        current = latest.get(key)
        run_time = run_times.get(key, zero) if online else None
        if current is None:  # never submitted (every Task of a first plan): no attempt to read
            append(
                TaskStatus(
                    key, _NOT_SUBMITTED, None, None, run_time, None, None, False, False,
                    key in listed,
                )
            )  # fmt: skip
        else:
            append(
                TaskStatus(
                    key, current.execution, current.exit_code, current.detail, run_time,
                    current.allocation_id, current.job, key in accepted, key in unresolved,
                    key in listed,
                )
            )  # fmt: skip
    return Report(tuple(tasks), tuple(attempts), tuple(warnings), online)


_NOT_SUBMITTED = Execution.NOT_SUBMITTED
_ZERO = RunTime(0)


def _attempts(
    submission: Submission,
    by_marker: Mapping[str, list[Marker]] | None,
    by_queue: Mapping[str, QueueEntry] | None,
    now: float,
    warnings: list[str],
) -> list[Attempt]:
    """The attempts of one submission; ``by_marker`` (its Target's markers by allocation) and
    ``by_queue`` (its queue entries by job name) are None unless both listings were read."""
    allocation_id = submission.allocation_id
    entry = by_queue.get(JOB_NAME_PREFIX + allocation_id) if by_queue is not None else None
    if entry is not None and submission.job is not None and entry.job != submission.job:
        entry = None  # same name, another job number: not this submission's job
    outcome = submission.outcome
    if outcome is Outcome.NOT_SUBMITTED and entry is not None:
        warnings.append(
            f"allocation {allocation_id} was recorded as not submitted, but Slurm "
            f"lists job {entry.job} for it; its Tasks are held ACTIVE until it leaves the queue "
            f"(servatus cancel STATE --allocation {allocation_id} stops it)"
        )
    job = submission.job if submission.job is not None else (entry.job if entry else None)
    listed = entry is not None
    if outcome is not Outcome.ACCEPTED or by_marker is None:
        execution = (
            Execution.UNRESOLVED
            if outcome is Outcome.PENDING
            else Execution.NOT_SUBMITTED
            if outcome is Outcome.NOT_SUBMITTED
            else Execution.ACCEPTED
        )
        return [
            Attempt(allocation_id, key, slot, job, execution, None, None, None, listed, None)
            for slot, key in enumerate(submission.task_keys)
        ]
    slots = len(submission.task_keys)
    observation = observe(allocation_id, slots, by_marker.get(allocation_id, ()))
    result = []
    for slot, key in enumerate(submission.task_keys):
        execution, exit_code, detail = slot_execution(entry, observation, slot)
        run_time = (
            _ZERO
            if observation.start is None
            else slot_run_time(execution, observation, slot, submission.time_limit, now)
        )
        result.append(
            Attempt(
                allocation_id, key, slot, job, execution, exit_code, detail, run_time, listed,
                observation,
            )
        )  # fmt: skip
    return result


def format_run_time(value: RunTime | None) -> str:
    """``[D-]HH:MM:SS``, with ``~`` for a total still growing or counting a LOST run."""
    if value is None:
        return "-"
    days, rest = divmod(value.total, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, seconds = divmod(rest, 60)
    text = f"{hours:02d}:{minutes:02d}:{seconds:02d}"
    if days:
        text = f"{days}-{text}"
    return text if value.complete else f"~{text}"


def submissions(state: CampaignState) -> list[Submission]:
    """The campaign's submissions in recording order, each with its recorded outcome."""
    receipts = {receipt.allocation_id: receipt.job for receipt in state.receipts}
    resolved = {item.allocation_id: item.job for item in state.resolutions}
    identities = state.target_identities()  # an intent names its Target by key
    result = []
    for intent in state.intents:
        job = receipts.get(intent.allocation_id)
        if job is not None:
            outcome = Outcome.ACCEPTED
        elif intent.allocation_id in resolved:
            job = resolved[intent.allocation_id]
            outcome = Outcome.NOT_SUBMITTED if job is None else Outcome.ACCEPTED
        else:
            outcome = Outcome.PENDING
        result.append(
            Submission(
                allocation_id=intent.allocation_id,
                task_keys=intent.task_keys,
                target=identities[intent.target],
                recorded_at=intent.created_at,
                time_limit=intent.time_limit,
                outcome=outcome,
                job=job,
            )
        )
    return result


def gather(
    targets: Iterable[str],
    connect: Callable[[Target], Transport],
    reader: EvidenceReader,
) -> dict[str, Evidence]:
    """Fetch each distinct Target's two listings once: the I/O edge of ``status``."""
    evidence = {}
    for identity in dict.fromkeys(targets):
        target = target_from_identity(identity)
        transport = connect(target)
        try:
            evidence[identity] = fetch(transport, reader, target)
        finally:
            transport.close()
    return evidence


STATUS_SCHEMA = "servatus.status/4"

RESULT_VALID, RESULT_MISSING, RESULT_UNOBSERVED = "VALID", "MISSING", "UNOBSERVED"


def result_of(key: str, valid: Collection[str] | None) -> str:
    """The probe's word on a Task's result: ``UNOBSERVED`` without a probe."""
    if valid is None:
        return RESULT_UNOBSERVED
    return RESULT_VALID if key in valid else RESULT_MISSING


def execution_text(task: TaskStatus) -> str:
    """``STOPPED (time limit)`` and the like: the execution with its detail."""
    if task.detail is None:
        return task.execution.value
    return f"{task.execution.value} ({task.detail.value})"


def _run_time_document(value: RunTime | None) -> dict[str, Any] | None:
    return None if value is None else {"total": value.total, "complete": value.complete}


def report_to_document(report: Report, *, valid: Collection[str] | None = None) -> dict[str, Any]:
    """The ``servatus.status/4`` document ``status --json`` prints."""
    tasks = [
        {
            "key": task.key,
            "result": result_of(task.key, valid),
            "execution": task.execution.value,
            "detail": task.detail.value if task.detail else None,
            "exit_code": task.exit_code,
            "run_time": _run_time_document(task.run_time),
            "link": None,
            "allocation": task.allocation_id,
            "job": task.job,
        }
        for task in report.tasks
    ]
    attempts: dict[str, dict[str, Any]] = {}
    for attempt in report.attempts:
        entry = attempts.setdefault(
            attempt.allocation_id,
            {
                "allocation_id": attempt.allocation_id,
                "job": attempt.job,
                "task_keys": [],
                "executions": [],
                "link": None,
                "slots": None,
                "within": None,
                "listed": attempt.listed,
                "observation": _observation_document(attempt.observation),
            },
        )
        entry["task_keys"].append(attempt.task_key)
        entry["executions"].append(attempt.execution.value)
    counts = report.counts
    done = {Execution.SUCCEEDED.value}
    results_ready = report.quiescent and all(
        task["result"] == RESULT_VALID or task["execution"] in done for task in tasks
    )
    return {
        "schema": STATUS_SCHEMA,
        "tasks": tasks,
        "attempts": list(attempts.values()),
        "counts": counts,
        "quiescent": report.quiescent,
        "results_ready": results_ready,
        "warnings": list(report.warnings),
    }


def _observation_document(observation: Observation | None) -> dict[str, Any] | None:
    if observation is None:
        return None
    return {
        "start": observation.start,
        "stop": observation.stop,
        "limit": observation.limit,
        "ends": [
            None if end is None else {"exit_code": end.exit_code, "at": end.at}
            for end in observation.ends
        ],
        "handed": [],
        "step": False,
    }
