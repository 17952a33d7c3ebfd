"""Every ``--help`` shows exactly one example (issue #17), and every example runs as written.

Each example runs in its own launch directory against ``FakeScheduler``, after the commands a
reader would have run before it (``GIVEN``), and must succeed with nothing on stderr: an option
that does not exist, a file the example does not name, or a command that fails all show here.
"""

from __future__ import annotations

import json
import shlex
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

from servatus.cli import cli, main
from servatus.testing import FakeScheduler
from testkit import CPU_PROFILE

COMMANDS = sorted(cli.commands)

SERVATUS_TOML = CPU_PROFILE.replace(
    'time_limit = "00:05:00"\n', 'time_limit = "00:05:00"\nsignal_before_end = "00:01:00"\n'
)
"""A small CPU profile named ``cpu`` that can hold a lease (which needs the pre-limit signal)."""

CAMPAIGN_ID = uuid.UUID("5e7a7005-0000-4000-8000-000000000017")
"""The campaign id every example's campaign gets, so the lease id ``start``'s example names is
the one its setup submits (allocation ids are hashed from the campaign id)."""


def _tasks(*keys: str, program: str = "train.py") -> str:
    return "".join(
        json.dumps({"key": k, "args": ["/usr/bin/python3", program]}) + "\n" for k in keys
    )


FILES = {
    "SERVATUS.toml": SERVATUS_TOML,
    "tasks.jsonl": _tasks("seed-1", "seed-2", "seed-3"),
    "more-tasks.jsonl": _tasks("seed-4"),
    "eval.jsonl": _tasks("eval-1", program="eval.py"),
}
"""The files the examples name, in every launch directory."""


def _logs(fake: FakeScheduler) -> None:
    """Each running step has written a line to its log."""
    for job in fake.jobs:
        for slot in range(job.slots):
            fake.logs[f"servatus-{job.allocation_id}-{job.job}.{slot}.out"] = b"epoch 1\n"


def _started(fake: FakeScheduler) -> None:
    fake.start()


def _answer_lost(fake: FakeScheduler) -> None:
    """The next sbatch takes effect but its answer never arrives: reconcile has work to do."""
    fake.lose_answer("sbatch")


Step = str | Callable[[FakeScheduler], None]
PLANNED: list[Step] = ["ensure state tasks.jsonl", "plan state --output plan.json"]
SUBMITTED: list[Step] = [*PLANNED, "submit state plan.json", _started]
GIVEN: dict[str, list[Step]] = {
    "servatus": [],
    "plugins": [],
    "profile": [],
    "doctor": [],
    "create": [],
    "ensure": [],
    "append": ["create state tasks.jsonl --appendable"],
    "seal": ["ensure state tasks.jsonl"],
    "plan": ["ensure state tasks.jsonl"],
    "validate": PLANNED,
    "submit": PLANNED,
    "status": SUBMITTED,
    "report": SUBMITTED,
    "cancel": SUBMITTED,
    "logs": [*SUBMITTED, _logs],
    "reconcile": [
        "ensure state tasks.jsonl",
        "plan state --only seed-1 --output plan.json",  # one allocation: its batch's only one
        _answer_lost,
        "submit state plan.json",
    ],
    "start": [
        "ensure state tasks.jsonl",
        "plan state --hold 2 --output lease.json",
        "submit state lease.json",
        _started,
    ],
}
"""What has been run before each command's example (``servatus`` is the group's own), as
``servatus`` command lines (their exit code is not checked) or moves of the fake."""

THEN: dict[str, Callable[[Path, FakeScheduler, str], object]] = {
    "plan": lambda launch, fake, out: (launch / "plan.json").is_file(),
    "submit": lambda launch, fake, out: [job.state for job in fake.jobs] == ["PENDING", "PENDING"],
    "report": lambda launch, fake, out: (
        (launch / "report.html").read_text().startswith("<!DOCTYPE")
    ),
    "cancel": lambda launch, fake, out: (
        [job.state for job in fake.jobs] == ["CANCELLED", "RUNNING"]
    ),
    "logs": lambda launch, fake, out: (launch / "seed-1.log").read_bytes() == b"epoch 1\n",
    "start": lambda launch, fake, out: [*fake.steps(fake.jobs[0].job).values()] == ["RUNNING"],
    "reconcile": lambda launch, fake, out: "accepted as job 1000" in out,
}
"""For the examples that leave something behind, that they did what they say."""


def help_of(path: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    assert main([*path, "--help"]) == 0
    out, err = capsys.readouterr()
    assert err == ""
    return out


def examples_in(text: str) -> list[str]:
    """The command lines under each ``Example:`` heading of a help text (its last section)."""
    lines = text.splitlines()
    found: list[str] = []
    for index, line in enumerate(lines):
        if line.strip() == "Example:":
            found.extend(rest.strip() for rest in lines[index + 1 :] if rest.strip())
    return found


def the_example(name: str, capsys: pytest.CaptureFixture[str]) -> list[str]:
    path = [] if name == "servatus" else [name]
    text = help_of(path, capsys)
    assert text.count("Example:") == 1, text
    (command,) = examples_in(text)
    argv = shlex.split(command)
    assert argv[: 1 + len(path)] == ["servatus", *path], command
    assert f"\n    {command}\n" in text  # printed whole and as written, never rewrapped
    return argv


def test_every_command_has_a_given_and_nothing_else_does() -> None:
    assert set(GIVEN) == {"servatus", *COMMANDS}


@pytest.mark.parametrize("name", ["servatus", *COMMANDS])
def test_the_help_shows_one_example_that_runs_as_written(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = the_example(name, capsys)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(uuid, "uuid4", lambda: CAMPAIGN_ID)
    for file, text in FILES.items():
        (tmp_path / file).write_text(text)
    fake = FakeScheduler()
    for step in GIVEN[name]:
        if isinstance(step, str):
            main(shlex.split(step), connect=fake)
        else:
            step(fake)
    capsys.readouterr()
    if "--lease" in argv:  # ids are hashed from the campaign's: say which one it is now
        (lease,) = json.loads((tmp_path / "lease.json").read_text())["allocations"]
        assert argv[argv.index("--lease") + 1] == lease["allocation_id"], lease
    code = main(argv[1:], connect=fake)
    out, err = capsys.readouterr()
    assert (code, err) == (0, ""), out
    assert THEN.get(name, lambda launch, fake, out: True)(tmp_path, fake, out), out


def test_the_first_help_line_is_what_the_command_list_shows(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The example goes after the options, never into the summary ``servatus --help`` lists."""
    listing = help_of([], capsys)
    for name in COMMANDS:
        summary = next(line for line in listing.splitlines() if line.split()[:1] == [name])
        assert "Example" not in summary and "servatus " not in summary, summary
