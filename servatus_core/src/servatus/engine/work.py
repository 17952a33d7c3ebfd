"""What planning reads of one Task's earlier work: apart from the planner
(:mod:`servatus.engine.plan`), so that ``status``, which writes the status cache's planning part,
imports neither the planner nor the continuation rules (issue #33: a fresh process's imports)."""

from __future__ import annotations

from typing import Protocol

import attrs

from servatus.engine.status_values import Execution, RunTime, StopReason, TaskLink


@attrs.frozen
class TaskWork:
    """What planning knows of one Task's earlier work.

    ``execution`` is the projected state of its current work (``NOT_SUBMITTED`` when it has none);
    ``listed`` is whether Slurm still lists any of its jobs, known only when Slurm was consulted;
    ``run_time`` is how long it ran, summed over its allocations (None when not measured).
    """

    execution: Execution = Execution.NOT_SUBMITTED
    accepted: bool = False
    unresolved: bool = False
    listed: bool = False
    run_time: RunTime | None = None
    detail: StopReason | None = None
    link: TaskLink | None = None


class Work(Protocol):
    """What planning reads of one Task's earlier work: a :class:`TaskWork`, or the
    :class:`~servatus.status.TaskStatus` a status projection already built for it."""

    @property
    def execution(self) -> Execution: ...

    @property
    def accepted(self) -> bool: ...

    @property
    def unresolved(self) -> bool: ...

    @property
    def listed(self) -> bool: ...

    @property
    def run_time(self) -> RunTime | None: ...

    @property
    def detail(self) -> StopReason | None: ...

    @property
    def link(self) -> TaskLink | None: ...


def selectable_unasked(work: Work) -> bool:
    """Whether a plan may select a Task with this work that ``--retry`` does not name: it was
    never accepted, or ``--retry-failed`` takes it (the status cache keeps only these Tasks'
    content for planning, ADR 0010)."""
    return not work.accepted or work.execution in RETRYABLE


RETRYABLE = (Execution.FAILED, Execution.STOPPED, Execution.ENDING)
"""What ``--retry-failed`` runs again."""
