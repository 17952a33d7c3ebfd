"""The status projection's values: Tasks' executions, attempts, run times, and their words."""

from __future__ import annotations

import enum
from collections import Counter
from collections.abc import Collection
from typing import NamedTuple

import attrs

from servatus.config import format_duration
from servatus.evidence import Observation
from servatus.journal.records import ChainLink

YIELD_EXIT = 75
"""A step that exits 75 says "stopped cleanly, continue me"."""


class _Word(enum.Enum):
    """An enum whose members hash by identity (equality already is identity): tallying and
    tabulating 100,000 Tasks looks up their executions without a Python ``__hash__`` call each."""

    __hash__ = object.__hash__


class Execution(_Word):
    """A Task's execution as ``status`` shows it."""

    NOT_SUBMITTED = "NOT_SUBMITTED"
    """No work of the Task was accepted, or its last submission was recorded as never sent."""
    UNRESOLVED = "UNRESOLVED"
    """An ``sbatch`` was recorded as about to happen and never answered: ``reconcile``."""
    ACCEPTED = "ACCEPTED"
    """Slurm accepted the job; offline, nothing more is known."""
    QUEUED = "QUEUED"
    """The job is pending, or a step waits for a slot in its lease."""
    RUNNING = "RUNNING"
    """The job runs and the Task's step has not returned."""
    ENDING = "ENDING"
    """Slurm lists the job as ended; the outcome is final once Slurm forgets it."""
    SUCCEEDED = "SUCCEEDED"
    """The step exited 0."""
    FAILED = "FAILED"
    """The step exited nonzero on its own (not 75, and not after being told to end)."""
    STOPPED = "STOPPED"
    """The step was told to end, yielded (75), or never started; ``detail`` says which."""
    LOST = "LOST"
    """The job started, then left Slurm without a word of how the step ended."""


class StopReason(_Word):
    """Why a ``STOPPED`` Task stopped, where the evidence says."""

    NEVER_STARTED = "never started"
    """Its allocation ended (cancelled, say) before the step began."""
    TIME_LIMIT = "time limit"
    """Told to end after the pre-limit signal reached it."""
    YIELDED = "yielded"
    """The step exited 75 (:data:`YIELD_EXIT`) and asks to be continued."""
    BUDGET_SPENT = "budget spent"
    """The step exited 75 on its chain's last link: its budget is used up."""


class Outcome(_Word):
    """What the campaign recorded of one submission."""

    PENDING = "pending"  # intent durable, no receipt: sbatch may or may not have reached Slurm
    ACCEPTED = "accepted"
    NOT_SUBMITTED = "not_submitted"


class Submission(NamedTuple):
    """One allocation as the campaign recorded it, with the evidence key of its Target, and the
    observation it was settled with (then its markers and the queue are never read for it).
    ``slots`` is a lease link's slot count (None for anything else); ``within`` a step's lease
    link (ADR 0009), and ``budget`` a step's lifetime budget in seconds, if it was given one.

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
    settled: Observation | None = None
    chain: ChainLink | None = None
    slots: int | None = None
    within: str | None = None
    budget: int | None = None


class RunTime(NamedTuple):
    """Seconds a Task has run; ``complete`` is False while growing or when a LOST run is counted
    at its whole time limit (shown with ``~``). ``+`` adds two run times (not tuple joining)."""

    total: int
    """Seconds run."""
    complete: bool = True
    """False while the Task runs, or when a LOST run counts its whole time limit."""

    def __add__(self, other: RunTime) -> RunTime:  # type: ignore[override]
        return RunTime(self.total + other.total, self.complete and other.complete)


class Attempt(NamedTuple):
    """One Task's slot in one allocation, projected. ``listed`` is whether ``squeue`` lists its
    job, and None when ``squeue`` was not asked (offline, or its Target's listing is missing);
    ``link`` is the allocation's place in its chain (None for a plain allocation).

    A lease link is an Attempt of no Task (``task_key`` and ``slot`` None, ``slots`` its slot
    count) and never makes a Task's status. A step's Attempt names its lease link in ``within``;
    its ``listed`` is whether its work is still held in Slurm: its lease is listed and the step
    has neither ended nor been withdrawn (ADR 0009), so a Task is held ``ACTIVE`` no longer."""

    allocation_id: str
    """The allocation (or lease step) this attempt ran in."""
    task_key: str | None
    """Its Task (None for a lease link)."""
    slot: int | None
    """Its slot in the allocation (None for a lease link)."""
    job: int | None
    """Slurm's job number (None while unresolved or never sent)."""
    execution: Execution
    """What this attempt did, as for a Task."""
    exit_code: int | None
    """The step's exit code, when its end was recorded."""
    detail: StopReason | None
    """Why it stopped, for a ``STOPPED`` attempt where known."""
    run_time: RunTime | None
    """How long it ran (None where that is not measured: offline, or no job)."""
    listed: bool | None
    """Whether ``squeue`` lists its work (None when Slurm was not asked)."""
    observation: Observation | None
    """What its run markers show, with their times."""
    link: ChainLink | None = None
    """Its allocation's place in a chain (None outside one)."""
    slots: int | None = None
    """A lease link's slot count (None for anything else)."""
    within: str | None = None
    """A step's lease link (None for anything else)."""


class TaskLink(NamedTuple):
    """Where a Task's current work is in its chain: link ``position`` of the Task's own ``of``
    links (``SERVATUS_LINKS``), and its lifetime ``budget`` in seconds (0 without one)."""

    position: int
    """Which link, from 1."""
    of: int
    """How many links the Task has in its chain."""
    budget: int
    """Its lifetime budget in seconds (0 without one)."""


class TaskStatus(NamedTuple):
    """One Task's current state: its current work decides
    (``docs/development/adr/0006-projection.md``), and its run time sums every attempt.
    ``link`` places that work in its chain (None outside a chain); ``within`` is the lease link
    that work runs in, when it is a step."""

    key: str
    """The Task's key."""
    execution: Execution
    """The state of its current work."""
    exit_code: int | None
    """That work's exit code, when its end was recorded."""
    detail: StopReason | None
    """Why it stopped, for a ``STOPPED`` Task where known."""
    run_time: RunTime | None
    """How long it has run over all its attempts (None offline)."""
    allocation_id: str | None
    """The allocation of its current work (None before any)."""
    job: int | None
    """That allocation's job number, when known."""
    accepted: bool
    """Whether Slurm ever accepted work of it."""
    unresolved: bool
    """Whether one of its submissions has no recorded outcome."""
    listed: bool
    """Whether Slurm still lists any of its work."""
    link: TaskLink | None = None
    """Where its current work is in its chain (None outside one)."""
    within: str | None = None
    """The lease link its current work runs in, when it is a step."""


@attrs.frozen
class Report:
    """The whole projection: Tasks in roster order, every attempt, counts and warnings."""

    tasks: tuple[TaskStatus, ...]
    """Each Task's state, in roster order."""
    attempts: tuple[Attempt, ...]
    """Every slot of every recorded allocation, lease links and steps included."""
    warnings: tuple[str, ...]
    """What ``status`` prints as warnings (a late job, an unread clock)."""
    online: bool
    """Whether Slurm was asked (False for ``offline``)."""

    @property
    def counts(self) -> dict[str, int]:
        """How many Tasks are in each execution, by its name; executions with none left out."""
        counted = Counter(task.execution for task in self.tasks)
        return {state.value: counted[state] for state in Execution if counted[state]}

    @property
    def quiescent(self) -> bool:
        """Nothing is queued, running, ending, or unresolved: the picture will not change alone."""
        moving = {Execution.QUEUED, Execution.RUNNING, Execution.ENDING, Execution.UNRESOLVED}
        if any(task.execution in moving for task in self.tasks):
            return False
        # A lease holds no Task, but while it is queued, runs, or is undecided it still moves.
        leases = (attempt for attempt in self.attempts if attempt.slots is not None)
        return self.online and not any(attempt.execution in moving for attempt in leases)


def format_run_time(value: RunTime | None) -> str:
    """``[D-]HH:MM:SS``, with ``~`` for a total still growing or counting a LOST run."""
    if value is None:
        return "-"
    text = format_duration(value.total)
    return text if value.complete else f"~{text}"


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
