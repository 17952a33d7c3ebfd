"""Status projection: from what the campaign recorded and what Slurm shows, each Task's state.

Pure functions over values. The campaign's records become :class:`Submission` values
(:mod:`servatus.engine.status_inputs`), one ``squeue`` listing and one run-marker listing per
Target are fetched (:mod:`servatus.operations.observation`), and :func:`project` does the rest.
A missing marker means
something only once Slurm no longer lists the job, because only then is every marker the job
wrote visible on the login node.
"""

from __future__ import annotations

import enum
from collections import Counter
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from typing import NamedTuple

import attrs

from servatus.config import format_duration
from servatus.evidence import (
    Evidence,
    Marker,
    MarkerRecord,
    Observation,
    QueueEntry,
    SlotEnd,
    fold_markers,
    link_observation,
    own_job,
    plain_observation,
    step_observation,
)
from servatus.files import path_word
from servatus.ids import ALLOCATION_ID_HEX, JOB_NAME_PREFIX
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


_QUEUED_STATES = frozenset({"PENDING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "RESV_DEL_HOLD"})
_RUNNING_STATES = frozenset(
    {"RUNNING", "CONFIGURING", "SUSPENDED", "STOPPED", "SIGNALING", "RESIZING", "STAGE_OUT"}
)


def queued_or_running(state: str) -> bool:
    """Whether ``squeue``'s state word is of a job still queued or running, not one that ended."""
    return state in _QUEUED_STATES or state in _RUNNING_STATES


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


_new = tuple.__new__
"""Builds a named tuple from a tuple of its fields, skipping the generated Python ``__new__``,
which doubles the cost of each of the Attempt per slot and TaskStatus per Task a status builds."""


_Decision = tuple[Execution, int | None, StopReason | None]
_SUCCEEDED: _Decision = (Execution.SUCCEEDED, 0, None)
_QUEUED: _Decision = (Execution.QUEUED, None, None)
_RUNNING: _Decision = (Execution.RUNNING, None, None)
_ENDING: _Decision = (Execution.ENDING, None, None)
_NEVER_STARTED: _Decision = (Execution.STOPPED, None, StopReason.NEVER_STARTED)
_TIME_LIMIT: _Decision = (Execution.STOPPED, None, StopReason.TIME_LIMIT)
_STOPPED: _Decision = (Execution.STOPPED, None, None)
_LOST: _Decision = (Execution.LOST, None, None)


def slot_execution(
    entry: QueueEntry | None, observation: Observation, slot: int
) -> tuple[Execution, int | None, StopReason | None]:
    """A slot's execution from its job's queue entry (if listed) and its allocation's markers."""
    start, stop, limit, ends, _, _, _ = observation
    return _execution(entry, start, stop, limit, ends[slot] if slot < len(ends) else None)


def _execution(
    entry: QueueEntry | None,
    start: float | None,
    stop: float | None,
    limit: float | None,
    end: SlotEnd | None,
) -> _Decision:
    """:func:`slot_execution` over an Observation's fields, so ``project`` unpacks it once."""
    if end is not None:
        exit_code = end.exit_code
        if exit_code == 0:
            return _SUCCEEDED
        # A nonzero return at or after the stop marker came from the job being told to end
        # (scancel, the time limit): a stop, not a failure; ENDING while Slurm lists the job,
        # STOPPED once it is purged.
        if stop is None or not end.at >= stop:
            if exit_code == YIELD_EXIT:
                return Execution.STOPPED, exit_code, StopReason.YIELDED
            return Execution.FAILED, exit_code, None
    if entry is not None:
        state = entry.state
        if state in _QUEUED_STATES:
            return _QUEUED
        if state in _RUNNING_STATES:
            return _RUNNING
        return _ENDING
    if start is None:
        return _NEVER_STARTED
    if stop is not None:
        return _TIME_LIMIT if limit is not None else _STOPPED
    return _LOST


def link_execution(
    entry: QueueEntry | None, observation: Observation, slot: int, *, last: bool
) -> tuple[Execution, int | None, StopReason | None]:
    """A chain link's slot that ran, by the chain rules (docs/development/adr/0006-projection.md): a
    slot it handed on stopped to continue, ``yielded`` (75) or ``time limit`` (any other nonzero
    exit), even without a ``stop``; 75 on the ``last`` link of the Task's budget
    (``ChainLink.spends``) is ``budget spent``; else as a plain allocation's slot."""
    start, stop, limit, ends, handed, _, _ = observation
    end = ends[slot] if slot < len(ends) else None
    if end is not None:
        exit_code = end.exit_code
        if exit_code != 0:
            if slot in handed:
                if exit_code == YIELD_EXIT:
                    return Execution.STOPPED, exit_code, StopReason.YIELDED
                return Execution.STOPPED, exit_code, StopReason.TIME_LIMIT
            if last and exit_code == YIELD_EXIT and (stop is None or not end.at >= stop):
                return Execution.STOPPED, exit_code, StopReason.BUDGET_SPENT
    return _execution(entry, start, stop, limit, end)


def slot_run_time(
    execution: Execution, observation: Observation, slot: int, time_limit: int, now: float
) -> RunTime:
    """Seconds between the start marker and the slot's end (or stop); still growing while the
    job runs, and a LOST run counted at its whole limit, both marked incomplete."""
    start, stop, _, ends, _, _, _ = observation
    return _run_time(execution, start, stop, ends, slot, time_limit, now)


def _run_time(
    execution: Execution,
    start: float | None,
    stop: float | None,
    ends: tuple[SlotEnd | None, ...],
    slot: int,
    time_limit: int,
    now: float,
) -> RunTime:
    """:func:`slot_run_time` over an Observation's fields, so ``project`` unpacks it once.

    Each span is ``int(span + 0.5)``, clamped at 0: the very operations a chain link's ``awk``
    does on the same listed mtimes for ``SERVATUS_RUN_TIME`` (ADR 0005), so the two agree to the
    second, half-second spans included."""
    if start is None:
        return _ZERO
    end = ends[slot] if slot < len(ends) else None
    if end is not None:
        total = int(end.at - start + 0.5)
    elif stop is not None:
        total = int(stop - start + 0.5)
    elif execution is Execution.LOST:
        return RunTime(time_limit, complete=False)
    elif execution is Execution.RUNNING or execution is Execution.ENDING:
        total = int(now - start + 0.5)
        total = total if total < time_limit else time_limit
        return RunTime(total if total > 0 else 0, complete=False)
    else:
        return _ZERO
    return _new(RunTime, (total if total > 0 else 0, True))


_Context = tuple[dict[str, QueueEntry], dict[str, MarkerRecord], float | None]


def _context(
    evidence: Evidence | None, jobs: Mapping[str, int | None], warnings: list[str]
) -> _Context | None:
    """A Target's queue entries by job name, its folded markers and its file server's clock;
    None unless both listings were read. Only evidence that is the campaign's own is folded:
    the user's files (the reader lists no other user's as markers) under the job number Slurm
    accepted for the allocation; what was set aside, and slots with two different ends, are
    named in ``warnings`` (SECURITY.md, "Evidence")."""
    if evidence is None or evidence.queue is None or evidence.markers is None:
        return None
    queue = {entry.name: entry for entry in evidence.queue}
    markers, strays = own_job(evidence.markers, jobs)
    folded = fold_markers(markers)
    warnings.extend(evidence_warnings(evidence.foreign, strays, folded, jobs))
    return queue, folded, evidence.clock


MAX_EVIDENCE_WARNINGS = 5
"""Lines of each kind of set-aside evidence a status names before it counts the rest."""


def evidence_warnings(
    foreign: Iterable[tuple[str, int]],
    strays: Iterable[Marker],
    folded: Mapping[str, MarkerRecord],
    jobs: Mapping[str, int | None],
) -> list[str]:
    """One line per file of the campaign's that was not counted: another user's file under one
    of its marker names, a marker of a job Slurm did not accept for its allocation, two ends of
    one slot that disagree (the higher exit code stands, so it never reads as a success)."""
    lines: list[str] = []
    start = len(JOB_NAME_PREFIX)  # a marker's name starts as its job's name: servatus-<id>
    mine = [(name, uid) for name, uid in foreign if name[start : start + ALLOCATION_ID_HEX] in jobs]
    lines += _bounded(
        [
            f"{name} in log_root belongs to another user (uid {uid}); it is not evidence and "
            "was ignored (servatus doctor checks who can write log_root)"
            for name, uid in mine
        ]
    )
    stray = Counter((marker.allocation_id, marker.job) for marker in strays)
    lines += _bounded(
        [
            f"{count} {'marker names' if count == 1 else 'markers name'} job {job} for "
            f"allocation {allocation_id}, whose job is {jobs[allocation_id]}; ignored"
            for (allocation_id, job), count in stray.items()
        ]
    )
    lines += _bounded(
        [
            f"allocation {allocation_id} has two different end markers for one step; the "
            "higher exit code counts"
            for allocation_id, record in folded.items()
            if record.conflict and allocation_id in jobs
        ]
    )
    return lines


def _bounded(lines: list[str]) -> list[str]:
    if len(lines) <= MAX_EVIDENCE_WARNINGS:
        return lines
    rest = len(lines) - MAX_EVIDENCE_WARNINGS
    return [*lines[:MAX_EVIDENCE_WARNINGS], f"... and {rest} more like it"]


def project(
    keys: Sequence[str],
    submissions: Sequence[Submission],
    evidence: Mapping[str, Evidence],
    *,
    now: float,
    offline: bool = False,
    state: str = "STATE",
) -> Report:
    """Project every Task's status. ``submissions`` are in recording order; ``evidence`` is keyed
    by each submission's ``target``. ``offline`` (or a missing listing) projects without Slurm:
    accepted work reads ``ACCEPTED`` and run time is unknown. A running Task's run time runs to
    its Target's :attr:`~servatus.evidence.Evidence.clock`, the clock that stamped its start
    marker; ``now`` stands in only for evidence that did not read it. ``state`` is the campaign's
    path, as the commands a warning suggests name it.

    A Task reads as its current work (docs/development/adr/0006-projection.md): its latest
    allocation, where a later chain link counts only once the slot was handed to it
    (:func:`_link_attempts`).

    One pass over the submissions and one over the Tasks: a status of 100,000 Tasks builds an
    attempt per slot and a status per Task, and nothing else per Task. A Task submitted once
    reads its flags and run time off its one attempt; only a Task submitted again keeps its
    attempts aside, to sum their run times. A plain allocation's slots are built here, inline:
    they are the hot path, and a call per allocation would cost more than the slot itself.
    """
    contexts: dict[str, _Context | None] = {}
    jobs = _marker_jobs(submissions)
    online = not offline
    attempts: list[Attempt] = []
    warnings: list[str] = []
    latest: dict[str, Attempt] = {}
    history: dict[str, list[Attempt]] = {}
    listed_unsubmitted: set[str] = set()
    append = attempts.append
    remember = latest.setdefault
    tally: _Tally = (append, latest, history, listed_unsubmitted)
    links: dict[str, Observation | None] = {}  # chain links seen so far, for their successors
    budgeted: dict[str, TaskLink] = {}  # steps given a budget: shown as a chain's one link
    last_target: str | None = None
    queue: dict[str, QueueEntry] | None = None
    folded: dict[str, MarkerRecord] | None = None
    server_now = now
    for (allocation_id, task_keys, target, _, time_limit, outcome, recorded, settled, chain,
         slots, within, budget) in submissions:  # fmt: skip
        if target is not last_target:
            last_target = target
            if target in contexts:
                context = contexts[target]
            else:
                context = contexts[target] = _context(evidence.get(target), jobs, warnings)
            if context is None:
                online = False
                queue = folded = None
            else:
                queue, folded, clock = context
                server_now = now if clock is None else clock
        unsent = within is not None and outcome is not _ACCEPTED
        if queue is None or settled is not None or unsent:
            # A settled job is one Slurm no longer lists; a step not accepted never reached its
            # lease, so the lease being listed is no sign of it.
            entry = None
        else:  # a step's job is its lease's: the lease link's entry is its liveness
            entry = queue.get(JOB_NAME_PREFIX + (allocation_id if within is None else within))
        job = recorded
        if entry is not None and (entry.job != recorded or outcome is Outcome.NOT_SUBMITTED):
            entry, job = _unexpected_entry(entry, allocation_id, outcome, recorded, state, warnings)
        listed = None if queue is None else entry is not None
        if slots is not None or within is not None:
            observation = _held_observation(allocation_id, outcome, settled, folded, within)
            if within is None:
                append(_lease_attempt(allocation_id, job, outcome, entry, listed, observation,
                                      chain, slots, time_limit, server_now))  # fmt: skip
            else:
                _step_attempts(allocation_id, task_keys[0], job, time_limit, outcome, entry,
                               listed, observation, within, budget, server_now, budgeted,
                               tally)  # fmt: skip
        elif chain is not None:
            observation = links[allocation_id] = _link_observation(
                allocation_id, len(task_keys), outcome, settled, folded
            )
            _link_attempts(
                allocation_id, task_keys, time_limit, outcome, job, chain, observation,
                links.get(chain.after), entry, listed, server_now, tally,
            )  # fmt: skip
        elif outcome is not _ACCEPTED or folded is None:  # no markers to read: by its outcome
            execution = _UNOBSERVED[outcome]
            for slot, key in enumerate(task_keys):
                attempt = _new(
                    Attempt,
                    (allocation_id, key, slot, job, execution, None, None, None, listed, None,
                     None, None, None),
                )  # fmt: skip
                append(attempt)
                if execution is _NOT_SUBMITTED:
                    if listed:
                        listed_unsubmitted.add(key)
                    continue
                earlier = remember(key, attempt)
                if earlier is not attempt:
                    _again(latest, history, key, earlier, attempt)
        else:  # a plain allocation read from its markers
            if settled is None:
                observation = plain_observation(folded.get(allocation_id), len(task_keys))
            else:
                observation = settled
            start, stop, limit, ends, _, _, _ = observation
            for slot, key in enumerate(task_keys):
                end = ends[slot]
                execution, exit_code, detail = _execution(entry, start, stop, limit, end)
                run_time = _run_time(execution, start, stop, ends, slot, time_limit, server_now)
                attempt = _new(
                    Attempt,
                    (allocation_id, key, slot, job, execution, exit_code, detail, run_time,
                     listed, observation, None, None, None),
                )  # fmt: skip
                append(attempt)
                earlier = remember(key, attempt)
                if earlier is not attempt:
                    _again(latest, history, key, earlier, attempt)
    tasks = _task_statuses(keys, latest, history, listed_unsubmitted, budgeted, online=online)
    warnings += cut_chain_warnings(submissions, tasks, state)
    return Report(tuple(tasks), tuple(attempts), tuple(warnings), online)


def _marker_jobs(submissions: Iterable[Submission]) -> dict[str, int | None]:
    """The job Slurm accepted for each allocation whose markers are still read (not settled)."""
    return {
        submission[0]: submission[6]
        for submission in submissions
        if submission[5] is _ACCEPTED and submission[7] is None
    }


def _unexpected_entry(
    entry: QueueEntry,
    allocation_id: str,
    outcome: Outcome,
    recorded: int | None,
    state: str,
    warnings: list[str],
) -> tuple[QueueEntry | None, int | None]:
    """A listed job under the submission's name that is not simply its recorded job: with no
    job recorded, the listed one is its job; another job number is not this submission's. A job
    listed for a submission recorded as not submitted is named in ``warnings``."""
    if recorded is not None and entry.job != recorded:
        return None, recorded  # same name, another job number: not this submission's job
    if outcome is Outcome.NOT_SUBMITTED:
        stops = (  # an ended job stays listed until MinJobAge: cancel finds nothing
            f"servatus cancel {path_word(state)} --allocation {allocation_id} stops it"
            if queued_or_running(entry.state)
            else f"it has ended, {entry.state}: nothing to cancel"
        )
        warnings.append(
            f"allocation {allocation_id} was recorded as not submitted, but Slurm "
            f"lists job {entry.job} for it; its Tasks are held ACTIVE until it leaves "
            f"the queue ({stops})"
        )
    return entry, entry.job


def _held_observation(
    allocation_id: str,
    outcome: Outcome,
    settled: Observation | None,
    folded: Mapping[str, MarkerRecord] | None,
    within: str | None,
) -> Observation | None:
    """A lease link's or a step's observation: its settled one, else its markers read; None
    when it was not accepted or there is no marker listing to read."""
    if outcome is not _ACCEPTED or folded is None:
        return None
    if settled is not None:
        return settled
    record = folded.get(allocation_id)
    return plain_observation(record, 0) if within is None else step_observation(record)


def _link_observation(
    allocation_id: str,
    slots: int,
    outcome: Outcome,
    settled: Observation | None,
    folded: Mapping[str, MarkerRecord] | None,
) -> Observation | None:
    """A chain link's observation: its settled one, else its markers read; None when it was not
    accepted or there is no marker listing (offline reads no settled record either, as for a
    plain allocation)."""
    if outcome is not _ACCEPTED or folded is None:
        return None
    if settled is not None:
        return settled
    return link_observation(folded.get(allocation_id), slots)


def _step_attempts(
    allocation_id: str,
    key: str,
    job: int | None,
    time_limit: int,
    outcome: Outcome,
    entry: QueueEntry | None,
    listed: bool | None,
    observation: Observation | None,
    within: str,
    budget: int | None,
    now: float,
    budgeted: dict[str, TaskLink],
    tally: _Tally,
) -> None:
    """A lease step's Attempt (:func:`_step_attempt`), which becomes its Task's current work
    unless it was never submitted; a step given a ``budget`` is recorded in ``budgeted``."""
    append, latest, history, listed_unsubmitted = tally
    attempt = _step_attempt(allocation_id, key, job, time_limit, outcome, entry, listed,
                            observation, within, now)  # fmt: skip
    append(attempt)
    if budget is not None:  # its SERVATUS_LINK and SERVATUS_LINKS are 1
        budgeted[allocation_id] = _new(TaskLink, (1, 1, budget))
    if attempt.execution is _NOT_SUBMITTED:
        if listed:
            listed_unsubmitted.add(key)
        return
    _take(latest, history, key, attempt)


def _task_statuses(
    keys: Sequence[str],
    latest: Mapping[str, Attempt],
    history: Mapping[str, list[Attempt]],
    listed_unsubmitted: Collection[str],
    budgeted: Mapping[str, TaskLink],
    *,
    online: bool,
) -> list[TaskStatus]:
    """Each Task's status in roster order, read off its current attempt; a Task submitted again
    sums its attempts' run times and flags (:func:`_summary`)."""
    tasks: list[TaskStatus] = []
    add = tasks.append
    zero = _ZERO if online else None
    total: RunTime | None
    for key in keys:
        current = latest.get(key)
        if current is None:  # never submitted (every Task of a first plan): no attempt to read
            add(
                _new(
                    TaskStatus,
                    (key, _NOT_SUBMITTED, None, None, zero, None, None, False, False,
                     key in listed_unsubmitted, None, None),
                )
            )  # fmt: skip
            continue
        (allocation_id, _, place, job, execution, exit_code, detail, total, listed, _, link, _,
         within) = current  # fmt: skip
        if history and key in history:
            total, accepted, unresolved, listed = _summary(history[key])
        else:
            unresolved = execution is _UNRESOLVED
            accepted = not unresolved
        if not online:
            total = None
        elif total is None:
            total = _UNKNOWN if unresolved else _ZERO
        elif unresolved and total.complete:
            total = _new(RunTime, (total.total, False))
        task_link: TaskLink | None
        if link is not None:
            task_link = _task_link(link, place)
        else:
            task_link = budgeted.get(allocation_id) if budgeted else None
        add(
            _new(
                TaskStatus,
                (key, execution, exit_code, detail, total, allocation_id, job, accepted,
                 unresolved, listed or key in listed_unsubmitted, task_link, within),
            )
        )  # fmt: skip
    return tasks


def cut_chains(submissions: Iterable[Submission]) -> list[tuple[Submission, frozenset[str]]]:
    """Each chain of Task links cut short: later links of it never reached Slurm (a ``submit``
    stopped after an earlier link, or ``sbatch`` refused one, or ``reconcile`` recorded one as
    never submitted), so it ends at its last accepted link before its last planned one. Each
    comes as that link with the ids of its chain's links up to it. A chain with a link still
    unresolved is not judged yet: ``reconcile`` decides it first. A lease's links are not a
    Task's chain and are left out."""
    root_of: dict[str, str] = {}
    chains: dict[str, list[Submission]] = {}
    for submission in submissions:
        chain = submission.chain
        if chain is None or submission.slots is not None:
            continue
        root = submission.allocation_id if chain.position == 1 else root_of.get(chain.after)
        if root is None:
            continue
        root_of[submission.allocation_id] = root
        chains.setdefault(root, []).append(submission)
    cut = []
    for links in chains.values():
        if any(link.outcome is Outcome.PENDING for link in links):
            continue
        accepted = [link for link in links if link.outcome is _ACCEPTED]
        if not accepted:
            continue
        last = accepted[-1]
        assert last.chain is not None
        if last.chain.position < last.chain.of:
            upto = frozenset(
                link.allocation_id
                for link in links
                if link.chain is not None and link.chain.position <= last.chain.position
            )
            cut.append((last, upto))
    return cut


_GOES_ON = frozenset(
    {
        Execution.QUEUED,
        Execution.RUNNING,
        Execution.ENDING,
        Execution.ACCEPTED,
        Execution.UNRESOLVED,
    }
)
_HANDS_ON = frozenset({StopReason.YIELDED, StopReason.TIME_LIMIT})


def cut_chain_warnings(
    submissions: Iterable[Submission], tasks: Iterable[TaskStatus], state: str
) -> list[str]:
    """One warning per chain cut short (:func:`cut_chains`) whose Tasks would go on: their
    current work is one of its links, and it is still going, or it stopped asking for the next
    link (``yielded``, ``time limit``), which will never come. Each names the chain's last link
    and the ``plan`` that continues its Tasks under the same budget (or the links it lacks)."""
    cut = cut_chains(submissions)
    if not cut:
        return []

    current = {task.key: task for task in tasks}
    warnings = []
    for last, links in cut:
        chain = last.chain
        assert chain is not None
        keys = []
        for key in last.task_keys:
            task = current.get(key)
            if task is None or task.allocation_id not in links:
                continue
            if task.execution in _GOES_ON or (
                task.execution is Execution.STOPPED and task.detail in _HANDS_ON
            ):
                keys.append(key)
        if not keys:
            continue
        missing = (
            f"link {chain.of} was"
            if chain.position + 1 == chain.of
            else f"links {chain.position + 1}-{chain.of} were"
        )
        more = (
            f"--budget {format_duration(chain.budget)}"
            if chain.budget
            else f"--max-links {chain.of - chain.position}"
        )
        retry = " ".join(f"--retry {path_word(key)}" for key in keys)
        warnings.append(
            f"chain cut short: allocation {last.allocation_id} (link {chain.position}/"
            f"{chain.of}) is the last link of its chain that reached Slurm; {missing} never "
            f"sent, so {', '.join(keys)} stop{'s' if len(keys) == 1 else ''} after it; once it "
            f"has ended, continue with: servatus plan {path_word(state)} {retry} {more} "
            "--output continue.json, and the profile it was planned with"
        )
    return warnings


_NOT_SUBMITTED = Execution.NOT_SUBMITTED
_UNRESOLVED = Execution.UNRESOLVED
_ZERO = RunTime(0)
_UNKNOWN = RunTime(0, complete=False)
"""An unresolved submission's run: its job may be running, and no marker of it is read."""
_ACCEPTED = Outcome.ACCEPTED
_UNOBSERVED = {
    Outcome.PENDING: Execution.UNRESOLVED,
    Outcome.NOT_SUBMITTED: Execution.NOT_SUBMITTED,
    Outcome.ACCEPTED: Execution.ACCEPTED,
}
"""A submission's execution without markers to read (not accepted, or its Target unlisted)."""


def _again(
    latest: dict[str, Attempt],
    history: dict[str, list[Attempt]],
    key: str,
    earlier: Attempt,
    attempt: Attempt,
) -> None:
    """A Task submitted again: its latest attempt decides, and its attempts are kept."""
    latest[key] = attempt
    kept = history.get(key)
    if kept is None:
        history[key] = [earlier, attempt]
    else:
        kept.append(attempt)


_Tally = tuple[Callable[[Attempt], None], dict[str, Attempt], dict[str, list[Attempt]], set[str]]
"""What ``project`` collects while it passes over the submissions: the attempts (their
``append``), each Task's current attempt, the attempts of Tasks with more than one, and the Tasks
a listed but not submitted allocation holds."""


def _link_attempts(
    allocation_id: str,
    task_keys: tuple[str, ...],
    time_limit: int,
    outcome: Outcome,
    job: int | None,
    chain: ChainLink,
    observation: Observation | None,
    before: Observation | None,
    entry: QueueEntry | None,
    listed: bool | None,
    now: float,
    tally: _Tally,
) -> None:
    """The attempts of one chain link (``observation`` None when it has none to read: not
    accepted, or offline), and which of them become their Task's current work.

    A slot of link 1 ran by definition; a slot of a later link ran only if ``before``, the
    observation of the link before it, handed that slot on (or the slot's own end shows it
    ran). A slot that did not run is not its Task's work: it reads ``QUEUED`` while its link is
    queued and ``STOPPED (never started)`` otherwise, with no run time, and is kept aside (its
    listing still holds the Task). A handed slot whose link never started and never will (not
    submitted, or gone from Slurm without a start) is kept aside too: the Task reads as the link
    that handed it on left it, ``STOPPED (yielded)`` or ``(time limit)``."""
    append, latest, history, listed_unsubmitted = tally
    position = chain.position
    handed_on = () if before is None else before.handed
    if observation is None:
        execution = _UNOBSERVED[outcome]
        for slot, key in enumerate(task_keys):
            attempt = _new(
                Attempt,
                (allocation_id, key, slot, job, execution, None, None, None, listed, None, chain,
                 None, None),
            )  # fmt: skip
            append(attempt)
            if execution is _NOT_SUBMITTED:
                if listed:
                    listed_unsubmitted.add(key)
            elif position == 1 or execution is _UNRESOLVED:
                _take(latest, history, key, attempt)
            else:  # offline: not known to have run this slot
                _aside(latest, history, key, attempt)
        return
    start, stop, _, ends, _, _, _ = observation
    gone = start is None and entry is None  # never started, and never will
    for slot, key in enumerate(task_keys):
        end = ends[slot]
        if position == 1 or end is not None or (slot in handed_on and not gone):
            execution, exit_code, detail = link_execution(
                entry, observation, slot, last=chain.spends(slot)
            )
            run_time = _run_time(execution, start, stop, ends, slot, time_limit, now)
            ran = True
        else:
            queued = entry is not None and entry.state in _QUEUED_STATES
            execution, exit_code, detail = _QUEUED if queued else _NEVER_STARTED
            run_time, ran = _ZERO, False
        attempt = _new(
            Attempt,
            (allocation_id, key, slot, job, execution, exit_code, detail, run_time, listed,
             observation, chain, None, None),
        )  # fmt: skip
        append(attempt)
        if ran:
            _take(latest, history, key, attempt)
        else:
            _aside(latest, history, key, attempt)


_STOPPED_WORD, _NEVER = Execution.STOPPED, StopReason.NEVER_STARTED
_MOVING = frozenset({Execution.RUNNING, Execution.ENDING})


def _lease_attempt(
    allocation_id: str,
    job: int | None,
    outcome: Outcome,
    entry: QueueEntry | None,
    listed: bool | None,
    observation: Observation | None,
    chain: ChainLink | None,
    slots: int | None,
    time_limit: int,
    now: float,
) -> Attempt:
    """A lease link's own Attempt, of no Task: its execution by the plain rules with no slot
    (queued, running, ending while listed; then by its start, stop and limit markers), and how
    long it has held its slots, by the file server's clock (``now``) as a step's run time is."""
    run_time = None
    if observation is None:
        execution, exit_code, detail = _UNOBSERVED[outcome], None, None
    else:
        start, stop, limit = observation[:3]
        execution, exit_code, detail = _execution(entry, start, stop, limit, None)
        run_time = _run_time(execution, start, stop, (), 0, time_limit, now)
    return _new(
        Attempt,
        (allocation_id, None, None, job, execution, exit_code, detail, run_time, listed,
         observation, chain, slots, None),
    )  # fmt: skip


def step_execution(
    entry: QueueEntry | None, observation: Observation
) -> tuple[Execution, int | None, StopReason | None]:
    """A lease step's execution (ADR 0009 "What status reads"): ``entry`` is its lease's queue
    entry. The first matching row decides: a withdrawn claim, or an end without ``step-start``,
    never started; an end after ``step-start`` by the plain table with the step's own stop and
    limit (a nonzero end after the step's ``limit`` stopped at the time limit, the spec's "a
    step that then exits nonzero"); no ``step-start`` while the lease is listed, queued (an
    untaken order, or a step waiting for a slot); a started step running while its lease is
    queued or running, ending while it is listed as ended; once the lease is forgotten, a
    started step with its ``stop`` stopped (as a plain slot), else lost, and one never started
    never will."""
    start, stop, limit, ends, _, _, claim = observation
    if claim is False:
        return _NEVER_STARTED
    end = ends[0]
    if end is not None:
        if start is None:
            return _NEVER_STARTED
        exit_code = end.exit_code
        if exit_code != 0 and limit is not None and end.at >= limit:
            if exit_code == YIELD_EXIT:
                return Execution.STOPPED, exit_code, StopReason.YIELDED
            return Execution.STOPPED, exit_code, StopReason.TIME_LIMIT
        return _execution(None, start, stop, limit, end)  # the step is over, whatever the lease
    if entry is not None:
        if start is None:
            return _QUEUED
        return _RUNNING if queued_or_running(entry.state) else _ENDING
    if start is None:
        return _NEVER_STARTED
    return _execution(None, start, stop, limit, None)


def _step_attempt(
    allocation_id: str,
    key: str,
    job: int | None,
    time_limit: int,
    outcome: Outcome,
    entry: QueueEntry | None,
    listed: bool | None,
    observation: Observation | None,
    within: str,
    now: float,
) -> Attempt:
    """A lease step's Attempt: one slot, judged inside its lease (:func:`step_execution`), run
    time from its own ``step-start``. It is ``listed`` (holds its Task) only while its lease is
    listed and the step has neither ended nor been withdrawn."""
    if observation is None:
        return _new(
            Attempt,
            (allocation_id, key, 0, job, _UNOBSERVED[outcome], None, None, None, listed, None,
             None, None, within),
        )  # fmt: skip
    execution, exit_code, detail = step_execution(entry, observation)
    start, stop, _, ends, _, _, claim = observation
    # A step's stop marker is the lease taking a stop request: the step runs on (SIGUSR1, then
    # SIGTERM after signal_before_end), so its run time grows until its end, not its stop.
    running = ends[0] is None and execution in _MOVING
    run_time = _run_time(execution, start, None if running else stop, ends, 0, time_limit, now)
    if listed and (claim is False or ends[0] is not None):
        listed = False
    return _new(
        Attempt,
        (allocation_id, key, 0, job, execution, exit_code, detail, run_time, listed,
         observation, None, None, within),
    )  # fmt: skip


def _take(
    latest: dict[str, Attempt], history: dict[str, list[Attempt]], key: str, attempt: Attempt
) -> None:
    """``attempt`` becomes its Task's current work (kept with the earlier ones, if any)."""
    earlier = latest.setdefault(key, attempt)
    if earlier is not attempt:
        _again(latest, history, key, earlier, attempt)


def _aside(
    latest: dict[str, Attempt], history: dict[str, list[Attempt]], key: str, attempt: Attempt
) -> None:
    """``attempt`` counts towards its Task's run time and listing but is not its current work
    (unless the Task has none: then it is all there is to read)."""
    current = latest.get(key)
    if current is None:
        latest[key] = attempt
        return
    kept = history.get(key)
    if kept is None:
        history[key] = [current, attempt]
    else:
        kept.append(attempt)


def _task_link(link: ChainLink, slot: int | None) -> TaskLink:
    own = link.of if slot is None else link.links_of(slot)
    return _new(TaskLink, (link.position, own, link.budget))


def _summary(attempts: list[Attempt]) -> tuple[RunTime | None, bool, bool, bool]:
    """Run time summed over a Task's attempts, and whether any was accepted, unresolved, listed."""
    total: RunTime | None = None
    accepted = unresolved = listed = False
    for attempt in attempts:
        run_time = attempt.run_time
        if run_time is not None:
            total = run_time if total is None else total + run_time
        if attempt.execution is _UNRESOLVED:
            unresolved = True
        else:
            accepted = True
        listed = listed or attempt.listed is True
    return total, accepted, unresolved, listed


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
