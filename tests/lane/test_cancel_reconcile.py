"""Two rules of the lane pinned by their numbers: ``cancel`` goes newest first, and ``reconcile``
records an intent with no evidence as not submitted only once it is 15 minutes old.

Only public behaviour is used (the CLI, the Campaign API, FakeScheduler's call log), so the tests
hold wherever the code deciding them lives.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from servatus import Campaign, Task
from servatus.cli import main
from servatus.config import Profile
from servatus.engine.status_values import Execution
from servatus.errors import SubmissionInterrupted
from servatus.testing import FakeScheduler

T0 = 1_800_000_000.0
"""The wall time the intent is recorded at, in these tests' own clock."""


def tasks(keys: str) -> list[Task]:
    return [Task(key, ["/usr/bin/python3", "train.py", key]) for key in keys.split()]


def cancelled_names(fake: FakeScheduler) -> list[str]:
    """The job names ``scancel`` was called with, in call order."""
    names = []
    for call in fake.calls:
        if call and call[0].endswith("/scancel"):
            [name] = [arg.removeprefix("--name=") for arg in call if arg.startswith("--name=")]
            names.append(name)
    return names


@pytest.fixture
def four(tmp_path: Path, profile: Profile) -> tuple[Campaign, FakeScheduler, list[str]]:
    """Four allocations from two submits, recorded oldest to newest: (a b) (c d) (e), then (f)."""
    fake = FakeScheduler()
    campaign = Campaign.ensure(tmp_path / "state", tasks("a b c d e"), connect=fake)
    first = campaign.submit(campaign.plan(profile)).receipts
    campaign.append(tasks("f"))
    second = campaign.submit(campaign.plan(profile)).receipts
    assert [r.task_keys for r in (*first, *second)] == [("a", "b"), ("c", "d"), ("e",), ("f",)]
    fake.start(first[0].job)
    fake.start(second[0].job)  # two running, two queued: all four cancellable
    return campaign, fake, [r.allocation_id for r in (*first, *second)]


def test_cancel_goes_newest_first(four: tuple[Campaign, FakeScheduler, list[str]]) -> None:
    campaign, fake, oldest_first = four
    newest_first = oldest_first[::-1]
    done = campaign.cancel(tasks=["a", "b", "c", "d", "e", "f"])
    assert done.allocations == tuple(newest_first)
    assert cancelled_names(fake) == [f"servatus-{a}" for a in newest_first]
    assert {job.state for job in fake.jobs} == {"CANCELLED"}


def test_cancel_by_allocation_goes_newest_first_whatever_the_order_asked(
    four: tuple[Campaign, FakeScheduler, list[str]],
) -> None:
    campaign, fake, oldest_first = four
    asked = [oldest_first[0], oldest_first[3], oldest_first[1]]
    done = campaign.cancel(allocations=asked)
    expected = [oldest_first[3], oldest_first[1], oldest_first[0]]
    assert done.allocations == tuple(expected)
    assert cancelled_names(fake) == [f"servatus-{a}" for a in expected]
    assert [job.state for job in fake.jobs] == ["CANCELLED", "CANCELLED", "PENDING", "CANCELLED"]


def test_cli_cancel_prints_and_calls_newest_first(
    four: tuple[Campaign, FakeScheduler, list[str]], capsys: pytest.CaptureFixture[str]
) -> None:
    campaign, fake, oldest_first = four
    argv = ["cancel", str(campaign.path), "--json"]
    for key in "abcdef":
        argv += ["--task", key]
    capsys.readouterr()
    assert main(argv, connect=fake) == 0
    assert json.loads(capsys.readouterr().out) == {
        "cancelled": oldest_first[::-1],
        "withdrawn": [],
        "stopping": [],
    }
    assert cancelled_names(fake) == [f"servatus-{a}" for a in oldest_first[::-1]]


# -- the 15-minute rule -----------------------------------------------------------------------


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """The wall clock the product reads (``time.time``), set by the test: ``clock[0] = t``."""
    now = [T0]
    monkeypatch.setattr(time, "time", lambda: now[0])
    return now


@pytest.fixture
def unresolved(tmp_path: Path, profile: Profile, clock: list[float]) -> Campaign:
    """One allocation whose sbatch got no answer at T0 and left no job: an intent, no evidence."""
    fake = FakeScheduler(clock=lambda: clock[0])
    campaign = Campaign.ensure(tmp_path / "state", tasks("a"), connect=fake)
    fake.unavailable("sbatch")
    with pytest.raises(SubmissionInterrupted):
        campaign.submit(campaign.plan(profile))
    assert fake.jobs == []
    campaign.refresh()
    [intent] = campaign.state.intents
    assert intent.created_at == T0
    return campaign


def execution(campaign: Campaign) -> Execution:
    [task] = campaign.status().tasks
    return task.execution


def test_reconcile_waits_at_14_59_after_the_intent(
    unresolved: Campaign, clock: list[float]
) -> None:
    clock[0] = T0 + 14 * 60 + 59
    [decision] = unresolved.reconcile()
    assert decision.outcome == "waiting"
    assert decision.retry_at == T0 + 15 * 60
    assert execution(unresolved) is Execution.UNRESOLVED
    assert unresolved.state.resolutions == ()


def test_reconcile_records_not_submitted_at_15_01_after_the_intent(
    unresolved: Campaign, clock: list[float], profile: Profile
) -> None:
    clock[0] = T0 + 14 * 60 + 59
    assert [d.outcome for d in unresolved.reconcile()] == ["waiting"]
    clock[0] = T0 + 15 * 60 + 1
    [decision] = unresolved.reconcile()
    assert (decision.outcome, decision.job) == ("not_submitted", None)
    assert execution(unresolved) is Execution.NOT_SUBMITTED
    assert unresolved.plan(profile).decision.selected == ("a",)  # planned again
    assert unresolved.reconcile() == ()  # decided once, for good


@pytest.mark.parametrize(
    ("after", "code", "said"),
    [
        (14 * 60 + 59, 75, "no evidence yet"),
        (15 * 60 + 1, 0, "recorded as not submitted"),
    ],
)
def test_cli_reconcile_at_14_59_and_15_01(
    unresolved: Campaign,
    clock: list[float],
    capsys: pytest.CaptureFixture[str],
    after: int,
    code: int,
    said: str,
) -> None:
    clock[0] = T0 + after
    capsys.readouterr()
    assert main(["reconcile", str(unresolved.path)], connect=FakeScheduler()) == code
    assert said in capsys.readouterr().out
