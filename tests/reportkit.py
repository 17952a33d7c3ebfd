"""Constructed campaigns for the report's tests: a lease of two slots and three steps within it,
as the journal types of ADR 0009 record them and status will project them (a lease's Attempt
with task_key None)."""

from __future__ import annotations

from servatus.engine.status_values import (
    Attempt,
    Execution,
    Report,
    RunTime,
    StopReason,
    TaskStatus,
)
from servatus.evidence import Observation, SlotEnd
from servatus.journal import folding, records
from servatus.tasks import Task

LOCAL = "0088816cc32dee54"
LEASE = "1e1e1e1e1e1e1e1e1e1e1e1e"
STEP_A, STEP_B, STEP_C = "5a" * 12, "5b" * 12, "5c" * 12
PLAIN, LINK1, LINK2 = "a1" * 12, "c1" * 12, "c2" * 12
TERMS = records.LeaseTerms("l40s", 2, 4, 8192, 1, 600)
T = 1_000_000.0


def task(
    key: str, execution: Execution, allocation: str | None, job: int | None, **more: object
) -> TaskStatus:
    fields: dict[str, object] = {
        "key": key, "execution": execution, "exit_code": None, "detail": None,
        "run_time": RunTime(0), "allocation_id": allocation, "job": job, "accepted": True,
        "unresolved": False, "listed": False, "link": None,
    }  # fmt: skip
    fields.update(more)
    return TaskStatus(**fields)  # type: ignore[arg-type]


def attempt(
    allocation: str,
    key: str | None,
    job: int | None,
    execution: Execution,
    observation: Observation | None,
    run_time: int | None = None,
    **more: object,
) -> Attempt:
    fields: dict[str, object] = {
        "allocation_id": allocation, "task_key": key, "slot": 0, "job": job,
        "execution": execution, "exit_code": None, "detail": None,
        "run_time": None if run_time is None else RunTime(run_time), "listed": False,
        "observation": observation, "link": None,
    }  # fmt: skip
    fields.update(more)
    return Attempt(**fields)  # type: ignore[arg-type]


def lease_state() -> records.CampaignState:
    """A lease of 2 slots held from T+100 to T+1100 and three steps within it."""
    return folding.fold(
        [
            records.Created("c1", T, False, tuple(Task(k, ["x"]) for k in "abc")),
            records.TargetSeen(LOCAL, '{"host":null}'),
            records.Intent(LEASE, (), "d", T, LOCAL, 3600, lease=TERMS),
            records.Receipt(LEASE, 41),
            records.Intent(STEP_A, ("a",), "e", T + 150, LOCAL, 3600, within=LEASE),
            records.Resolved(STEP_A, 41),
            records.Intent(STEP_B, ("b",), "e", T + 150, LOCAL, 3600, within=LEASE),
            records.Resolved(STEP_B, 41),
            records.Intent(STEP_C, ("c",), "e", T + 150, LOCAL, 3600, within=LEASE),
            records.Resolved(STEP_C, 41),
        ]
    )


def lease_report(*, lease_attempt: bool) -> Report:
    lease = Observation(start=T + 100, stop=T + 1100, limit=T + 1000)
    steps = [
        attempt(STEP_A, "a", 41, Execution.SUCCEEDED,
                Observation(T + 200, None, None, (SlotEnd(0, T + 600),)), 400, exit_code=0),
        attempt(STEP_B, "b", 41, Execution.FAILED,
                Observation(T + 200, None, None, (SlotEnd(2, T + 400),)), 200, exit_code=2),
        attempt(STEP_C, "c", 41, Execution.STOPPED,
                Observation(T + 300, T + 1100, T + 1000, (SlotEnd(143, T + 1100),)), 800,
                detail=StopReason.TIME_LIMIT, exit_code=143),
    ]  # fmt: skip
    attempts = [*steps]
    if lease_attempt:  # as status will project a lease once leases land: task_key None
        attempts.insert(0, attempt(LEASE, None, 41, Execution.RUNNING, lease))
    tasks = (
        task("a", Execution.SUCCEEDED, STEP_A, 41, exit_code=0, run_time=RunTime(400)),
        task("b", Execution.FAILED, STEP_B, 41, exit_code=2, run_time=RunTime(200)),
        task("c", Execution.STOPPED, STEP_C, 41, exit_code=143, run_time=RunTime(800),
             detail=StopReason.TIME_LIMIT),
    )  # fmt: skip
    return Report(tasks, tuple(attempts), (), True)
