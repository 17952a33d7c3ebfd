"""Status projection over values: every execution state, run time, and the late-sbatch warning."""

from __future__ import annotations

from servatus.engine.status import project
from servatus.engine.status_values import (
    Execution,
    Outcome,
    RunTime,
    StopReason,
    Submission,
    format_run_time,
)
from servatus.evidence import Evidence, Marker, MarkerKind, QueueEntry

ALLOC = "0123456789abcdef01234567"
T = "ssh:hpc"


def submission(
    outcome: Outcome = Outcome.ACCEPTED, keys: tuple[str, ...] = ("a", "b")
) -> Submission:
    return Submission(
        allocation_id=ALLOC,
        task_keys=keys,
        target=T,
        recorded_at=1000.0,
        time_limit=3600,
        outcome=outcome,
        job=42 if outcome is Outcome.ACCEPTED else None,
    )


def marker(kind: MarkerKind, at: float, slot: int | None = None, code: int | None = None) -> Marker:
    return Marker(allocation_id=ALLOC, job=42, kind=kind, at=at, slot=slot, exit_code=code)


def run(
    queue: tuple[QueueEntry, ...] | None,
    markers: tuple[Marker, ...] | None,
    sub: Submission | None = None,
    now: float = 5000.0,
) -> dict[str, tuple[Execution, int | None, StopReason | None, str]]:
    report = project(("a", "b"), [sub or submission()], {T: Evidence(queue, markers)}, now=now)
    return {
        t.key: (t.execution, t.exit_code, t.detail, format_run_time(t.run_time))
        for t in report.tasks
    }


def listed(state: str) -> tuple[QueueEntry, ...]:
    return (QueueEntry(job=42, name=f"servatus-{ALLOC}", state=state),)


def test_queued_and_running_from_squeue() -> None:
    assert run(listed("PENDING"), ())["a"][0] is Execution.QUEUED
    started = (marker(MarkerKind.START, 2000.0),)
    result = run(listed("RUNNING"), started)
    assert result["a"] == (Execution.RUNNING, None, None, "~00:50:00")


def test_end_markers_decide_at_once_even_while_listed() -> None:
    markers = (
        marker(MarkerKind.START, 2000.0),
        marker(MarkerKind.END, 2061.0, slot=0, code=0),
        marker(MarkerKind.END, 2100.0, slot=1, code=3),
    )
    result = run(listed("RUNNING"), markers)
    assert result["a"] == (Execution.SUCCEEDED, 0, None, "00:01:01")
    assert result["b"] == (Execution.FAILED, 3, None, "00:01:40")


def test_exit_75_reads_stopped_yielded() -> None:
    markers = (marker(MarkerKind.START, 2000.0), marker(MarkerKind.END, 2010.0, slot=0, code=75))
    assert run((), markers)["a"][:3] == (Execution.STOPPED, 75, StopReason.YIELDED)


def test_ended_job_still_listed_reads_ending_then_stopped_after_purge() -> None:
    markers = (marker(MarkerKind.START, 2000.0), marker(MarkerKind.STOP, 2030.0))
    assert run(listed("CANCELLED"), markers)["a"][0] is Execution.ENDING
    assert run((), markers)["a"] == (Execution.STOPPED, None, None, "00:00:30")


def test_cancelled_before_start_reads_never_started() -> None:
    assert run((), ())["a"][:3] == (Execution.STOPPED, None, StopReason.NEVER_STARTED)


def test_time_limit_stop() -> None:
    markers = (
        marker(MarkerKind.START, 2000.0),
        marker(MarkerKind.LIMIT, 5000.0),
        marker(MarkerKind.STOP, 5600.0),
    )
    assert run((), markers)["a"][:3] == (Execution.STOPPED, None, StopReason.TIME_LIMIT)


def test_vanished_without_markers_reads_lost_at_whole_limit() -> None:
    result = run((), (marker(MarkerKind.START, 2000.0),))
    assert result["a"] == (Execution.LOST, None, None, "~01:00:00")


def test_offline_reads_accepted_without_run_time() -> None:
    assert run(None, None)["a"] == (Execution.ACCEPTED, None, None, "-")


def test_unresolved_and_not_submitted() -> None:
    assert run((), (), submission(Outcome.PENDING))["a"][0] is Execution.UNRESOLVED
    assert run((), (), submission(Outcome.NOT_SUBMITTED))["a"][0] is Execution.NOT_SUBMITTED


def test_late_sbatch_warns_and_marks_listed() -> None:
    report = project(
        ("a", "b"),
        [submission(Outcome.NOT_SUBMITTED)],
        {T: Evidence(listed("PENDING"), ())},
        now=5000.0,
    )
    assert report.tasks[0].listed
    assert report.tasks[0].execution is Execution.NOT_SUBMITTED
    assert len(report.warnings) == 1 and "job 42" in report.warnings[0]


def test_a_reused_job_name_with_another_number_is_not_this_job() -> None:
    other = (QueueEntry(job=99, name=f"servatus-{ALLOC}", state="RUNNING"),)
    assert run(other, ())["a"][:3] == (Execution.STOPPED, None, StopReason.NEVER_STARTED)


def test_run_time_sums_over_allocations_and_formats_days() -> None:
    first = submission()
    second = Submission(
        allocation_id="f" * 24,
        task_keys=("a",),
        target=T,
        recorded_at=1.0,
        time_limit=3600,
        outcome=Outcome.ACCEPTED,
        job=43,
    )
    markers = (
        marker(MarkerKind.START, 0.0),
        marker(MarkerKind.END, 86400.0 + 3.0, slot=0, code=75),
        Marker(allocation_id="f" * 24, job=43, kind=MarkerKind.START, at=100000.0),
        Marker(
            allocation_id="f" * 24, job=43, kind=MarkerKind.END, at=100010.0, slot=0, exit_code=0
        ),
    )
    report = project(("a",), [first, second], {T: Evidence((), markers)}, now=0.0)
    task = report.tasks[0]
    assert task.execution is Execution.SUCCEEDED
    assert task.run_time == RunTime(86413)
    assert format_run_time(task.run_time) == "1-00:00:13"
    assert report.quiescent
