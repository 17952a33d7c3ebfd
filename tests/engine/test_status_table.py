"""The human status table and terminal escaping: the fast paths print what the plain ones did."""

from __future__ import annotations

from typing import Any, NamedTuple

import pytest

from servatus.cli import echo
from servatus.cli.render import status_lines
from servatus.engine.status_values import (
    Execution,
    Report,
    RunTime,
    StopReason,
    TaskLink,
    TaskStatus,
    execution_text,
    format_run_time,
)


def task(key: str, execution: Execution, **fields: object) -> TaskStatus:
    values: dict[str, object] = {
        "exit_code": None,
        "detail": None,
        "run_time": None,
        "allocation_id": None,
        "job": None,
        "accepted": False,
        "unresolved": False,
        "listed": False,
    }
    values.update(fields)
    return TaskStatus(key=key, execution=execution, **values)  # type: ignore[arg-type]


def plain_table(report: Report) -> list[str]:
    """The table as it was built before (one ljust per cell)."""
    header = ("KEY", "RESULT", "EXECUTION", "EXIT", "RUN TIME", "LINK", "ALLOCATION")
    rows = [
        (
            t.key,
            "UNOBSERVED",
            execution_text(t),
            "-" if t.exit_code is None else str(t.exit_code),
            format_run_time(t.run_time),
            "-",
            t.allocation_id or "-",
        )
        for t in report.tasks
    ]
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header) - 1)]
    return [
        "  ".join([*(cell.ljust(width) for cell, width in zip(row, widths, strict=False)), row[-1]])
        for row in [header, *rows]
    ]


def test_the_table_is_the_plain_one() -> None:
    tasks = (
        task("a", Execution.NOT_SUBMITTED),
        task("b-long-key", Execution.SUCCEEDED, exit_code=0, run_time=RunTime(3725), job=7),
        task("c", Execution.STOPPED, detail=StopReason.TIME_LIMIT, run_time=RunTime(90061)),
        task("d", Execution.RUNNING, run_time=RunTime(5, complete=False), allocation_id="x" * 24),
        task("e", Execution.FAILED, exit_code=137, run_time=RunTime(3725)),
        task("f", Execution.STOPPED, detail=StopReason.TIME_LIMIT, run_time=RunTime(1)),
    )
    report = Report(tasks=tasks, attempts=(), warnings=("w1",), online=True)
    lines = status_lines(report)
    assert lines[: len(tasks) + 1] == plain_table(report)
    assert lines[len(tasks) + 1 :] == [
        "6 Tasks: 1 NOT_SUBMITTED, 1 RUNNING, 1 SUCCEEDED, 1 FAILED, 2 STOPPED",
        "warning: w1",
    ]


class GrownTask(NamedTuple):
    """A TaskStatus as it may grow: a field in the middle, one at the end (``within``, a lease
    step's, is a real field now and shows in ALLOCATION, so the one at the end is another)."""

    key: str
    execution: Execution
    step: int
    exit_code: int | None
    detail: StopReason | None
    run_time: RunTime | None
    allocation_id: str | None
    job: int | None
    accepted: bool
    unresolved: bool
    listed: bool
    link: TaskLink | None
    within: str | None
    later: str | None


def test_the_table_reads_each_task_by_field_name() -> None:
    tasks = (
        task("a", Execution.SUCCEEDED, exit_code=0, run_time=RunTime(3725), allocation_id="x1"),
        task("b", Execution.STOPPED, detail=StopReason.TIME_LIMIT, run_time=RunTime(9)),
    )
    grown: tuple[Any, ...] = tuple(
        GrownTask(**{**t._asdict(), "step": 3, "later": "lease"}) for t in tasks
    )
    plain = Report(tasks=tasks, attempts=(), warnings=(), online=True)
    assert status_lines(Report(tasks=grown, attempts=(), warnings=(), online=True)) == (
        status_lines(plain)
    )


def test_an_empty_table() -> None:
    report = Report(tasks=(), attempts=(), warnings=(), online=False)
    assert status_lines(report) == [*plain_table(report), "0 Tasks: none"]


def test_echo_escapes_each_line_whole(capsys: pytest.CaptureFixture[str]) -> None:
    echo("plain", "text")
    assert capsys.readouterr().out == "plain\ntext\n"
    echo("tab\there", "bell\x07", "nul\x00", "carriage\r", "é ü 漢字", "\u202e")
    assert (
        capsys.readouterr().out
        == "tab\\there\nbell\\x07\nnul\\x00\ncarriage\\r\né ü 漢字\n\\u202e\n"
    )
    echo("a value\nwith a newline")  # a newline inside a line is a value's, never a line break
    assert capsys.readouterr().out == "a value\\nwith a newline\n"


def test_a_chain_shows_its_link_and_a_budgeted_one_its_budget() -> None:
    tasks = (
        task("a", Execution.RUNNING, run_time=RunTime(119523, complete=False),
             link=TaskLink(3, 5, 259200), allocation_id="x" * 24),
        task("b", Execution.STOPPED, detail=StopReason.YIELDED, exit_code=75,
             run_time=RunTime(119523), link=TaskLink(2, 5, 259200)),
        task("c", Execution.QUEUED, run_time=RunTime(60), link=TaskLink(2, 2, 0)),
        task("d", Execution.SUCCEEDED, exit_code=0, run_time=RunTime(119523)),
        task("e", Execution.ACCEPTED, link=TaskLink(1, 5, 259200)),  # offline
    )  # fmt: skip
    lines = status_lines(Report(tasks=tasks, attempts=(), warnings=(), online=True))
    assert lines[:6] == [
        "KEY  RESULT      EXECUTION          EXIT  RUN TIME                  LINK  ALLOCATION",
        "a    UNOBSERVED  RUNNING            -     ~1-09:12:03 / 3-00:00:00  3/5   " + "x" * 24,
        "b    UNOBSERVED  STOPPED (yielded)  75    1-09:12:03 / 3-00:00:00   2/5   -",
        "c    UNOBSERVED  QUEUED             -     00:01:00                  2/2   -",
        "d    UNOBSERVED  SUCCEEDED          0     1-09:12:03                -     -",
        "e    UNOBSERVED  ACCEPTED           -     -                         1/5   -",
    ]
