"""The slot rules: how a slot's execution and run time are read from its queue entry and markers."""

from __future__ import annotations

from servatus.engine.status_values import YIELD_EXIT, Execution, RunTime, StopReason
from servatus.evidence import Observation, QueueEntry, SlotEnd

QUEUED_STATES = frozenset({"PENDING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "RESV_DEL_HOLD"})
_RUNNING_STATES = frozenset(
    {"RUNNING", "CONFIGURING", "SUSPENDED", "STOPPED", "SIGNALING", "RESIZING", "STAGE_OUT"}
)


def queued_or_running(state: str) -> bool:
    """Whether ``squeue``'s state word is of a job still queued or running, not one that ended."""
    return state in QUEUED_STATES or state in _RUNNING_STATES


_new = tuple.__new__
"""As in :mod:`servatus.engine.status`: each slot's RunTime without the generated ``__new__``."""
_ZERO = RunTime(0)

_Decision = tuple[Execution, int | None, StopReason | None]
_SUCCEEDED: _Decision = (Execution.SUCCEEDED, 0, None)
QUEUED: _Decision = (Execution.QUEUED, None, None)
_RUNNING: _Decision = (Execution.RUNNING, None, None)
_ENDING: _Decision = (Execution.ENDING, None, None)
NEVER_STARTED: _Decision = (Execution.STOPPED, None, StopReason.NEVER_STARTED)
_TIME_LIMIT: _Decision = (Execution.STOPPED, None, StopReason.TIME_LIMIT)
_STOPPED: _Decision = (Execution.STOPPED, None, None)
_LOST: _Decision = (Execution.LOST, None, None)


def slot_execution(
    entry: QueueEntry | None, observation: Observation, slot: int
) -> tuple[Execution, int | None, StopReason | None]:
    """A slot's execution from its job's queue entry (if listed) and its allocation's markers."""
    start, stop, limit, ends, _, _, _ = observation
    return execution_from(entry, start, stop, limit, ends[slot] if slot < len(ends) else None)


def execution_from(
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
        if state in QUEUED_STATES:
            return QUEUED
        if state in _RUNNING_STATES:
            return _RUNNING
        return _ENDING
    if start is None:
        return NEVER_STARTED
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
    return execution_from(entry, start, stop, limit, end)


def slot_run_time(
    execution: Execution, observation: Observation, slot: int, time_limit: int, now: float
) -> RunTime:
    """Seconds between the start marker and the slot's end (or stop); still growing while the
    job runs, and a LOST run counted at its whole limit, both marked incomplete."""
    start, stop, _, ends, _, _, _ = observation
    return run_time_from(execution, start, stop, ends, slot, time_limit, now)


def run_time_from(
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
        return NEVER_STARTED
    end = ends[0]
    if end is not None:
        if start is None:
            return NEVER_STARTED
        exit_code = end.exit_code
        if exit_code != 0 and limit is not None and end.at >= limit:
            if exit_code == YIELD_EXIT:
                return Execution.STOPPED, exit_code, StopReason.YIELDED
            return Execution.STOPPED, exit_code, StopReason.TIME_LIMIT
        return execution_from(None, start, stop, limit, end)  # the step is over, whatever the lease
    if entry is not None:
        if start is None:
            return QUEUED
        return _RUNNING if queued_or_running(entry.state) else _ENDING
    if start is None:
        return NEVER_STARTED
    return execution_from(None, start, stop, limit, None)
