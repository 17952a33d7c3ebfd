"""The ``servatus.status/4`` document ``status --json`` prints: a projection's Tasks, attempts,
counts and warnings, written out as the compatibility page promises."""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from servatus.engine.status_values import (
    RESULT_VALID,
    Execution,
    Report,
    RunTime,
    TaskLink,
    result_of,
)
from servatus.evidence import Observation
from servatus.journal.records import ChainLink

STATUS_SCHEMA = "servatus.status/4"


def _run_time_document(value: RunTime | None) -> dict[str, Any] | None:
    return None if value is None else {"total": value.total, "complete": value.complete}


def status_document(report: Report, *, valid: Collection[str] | None = None) -> dict[str, Any]:
    """The ``servatus.status/4`` document ``status --json`` prints.

    ``valid`` is what the result probe reported valid (:meth:`~servatus.Campaign.valid_keys`):
    each Task's ``result`` is then ``VALID`` or ``MISSING``; without it, ``UNOBSERVED``.
    """
    tasks = [
        {
            "key": task.key,
            "result": result_of(task.key, valid),
            "execution": task.execution.value,
            "detail": task.detail.value if task.detail else None,
            "exit_code": task.exit_code,
            "run_time": _run_time_document(task.run_time),
            "link": _task_link_document(task.link),
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
                "link": _link_document(attempt.link),
                "slots": attempt.slots,
                "within": attempt.within,
                "listed": attempt.listed,
                "observation": _observation_document(attempt.observation),
            },
        )
        if attempt.task_key is not None:  # a lease link holds no Task
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


def _task_link_document(link: TaskLink | None) -> dict[str, Any] | None:
    if link is None:
        return None
    return {"position": link.position, "of": link.of, "budget": link.budget or None}


def _link_document(link: ChainLink | None) -> dict[str, Any] | None:
    if link is None:
        return None
    return {"position": link.position, "of": link.of, "after": link.after or None}


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
        "handed": list(observation.handed),
        "step": observation.step,
    }
