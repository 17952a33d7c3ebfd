"""Settlement end to end against FakeScheduler: what settles is answered from the campaign,
with every marker purged as a scratch policy would, and nothing is submitted twice."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from servatus import Campaign, Task
from servatus.cli import main
from servatus.config import Profile
from servatus.engine.status_values import Execution, StopReason
from servatus.errors import Unavailable
from servatus.journal import records, store
from servatus.testing import FakeScheduler


def tasks(n: int) -> list[Task]:
    return [Task(f"t{i}", ["/usr/bin/python3", "train.py"], stdin=b"%d" % i) for i in range(n)]


def answers(
    state: Path, config: Path, fake: FakeScheduler, capsys: pytest.CaptureFixture[str]
) -> tuple[str, str, str]:
    """What ``status``, ``status --json`` and ``plan --retry-failed --json`` print."""
    printed = []
    for args in (
        ["status", str(state)],
        ["status", str(state), "--json"],
        ["plan", str(state), "--config", str(config), "--retry-failed", "--json"],
    ):
        assert main(args, connect=fake) == 0
        out, err = capsys.readouterr()
        assert err == ""
        printed.append(out)
    plan = json.loads(printed[2])
    return printed[0], printed[1], json.dumps([plan["decision"], plan["totals"]])


def finished_sweep(tmp_path: Path, profile: Profile) -> tuple[Campaign, FakeScheduler]:
    """Five Tasks in three allocations: t1 fails, the rest succeed; Slurm has forgotten them."""
    fake = FakeScheduler()
    campaign = Campaign.ensure(tmp_path / "state", tasks(5), connect=fake)
    campaign.submit(campaign.plan(profile))
    fake.finish(1000, 0, 3)
    fake.finish(1001, 0, 0)
    fake.finish(1002, 0)
    fake.purge()
    return campaign, fake


def test_a_settled_sweep_answers_the_same_with_every_marker_purged(
    tmp_path: Path, profile: Profile, config_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    campaign, fake = finished_sweep(tmp_path, profile)
    revision = campaign.state.revision
    before = answers(campaign.path, config_path, fake, capsys)
    state = store.read(campaign.path)
    assert len(state.settlements) == 3 and state.revision == revision
    fake.markers.clear()  # a scratch purge takes every marker of the finished sweep
    fake.logs.clear()
    assert answers(campaign.path, config_path, fake, capsys) == before
    report = campaign.status()
    assert {t.key: t.execution for t in report.tasks} == {
        "t0": Execution.SUCCEEDED,
        "t1": Execution.FAILED,
        "t2": Execution.SUCCEEDED,
        "t3": Execution.SUCCEEDED,
        "t4": Execution.SUCCEEDED,
    }
    retry = campaign.plan(profile, retry_failed=True)
    assert retry.decision.selected == ("t1",)
    campaign.submit(retry)
    assert [job.allocation_id for job in fake.jobs[3:]] == [retry.allocations[0].allocation_id]
    assert store.read(campaign.path).settlements == state.settlements


def test_an_unsettled_allocation_without_markers_reads_what_remains(
    tmp_path: Path, profile: Profile
) -> None:
    """Its job was still listed when status last looked, so it did not settle; once its
    markers are gone, today's rules read the evidence that is left, never SUCCEEDED."""
    fake = FakeScheduler()
    campaign = Campaign.ensure(tmp_path / "state", tasks(1), connect=fake)
    campaign.submit(campaign.plan(profile))
    fake.finish(1000, 0)
    task = campaign.status().tasks[0]
    assert task.execution is Execution.SUCCEEDED and task.listed  # listed: it does not settle
    assert store.read(campaign.path).settlements == ()
    ends = [name for name in fake.markers if ".end." in name]
    for name in ends:
        del fake.markers[name]
    fake.purge()
    task = campaign.status().tasks[0]
    assert (task.execution, task.detail) == (Execution.LOST, None)  # the start is still there
    fake.markers.clear()
    task = campaign.status().tasks[0]
    assert (task.execution, task.detail) == (Execution.STOPPED, StopReason.NEVER_STARTED)
    assert campaign.plan(profile, retry_failed=True).decision.selected == ("t0",)


def test_a_plan_saved_before_a_settlement_still_submits(
    tmp_path: Path, profile: Profile, config_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fake = FakeScheduler()
    campaign = Campaign.ensure(
        tmp_path / "state", [*tasks(2), Task("late", ["/bin/true"])], connect=fake
    )
    first = campaign.plan(profile, only=["t0", "t1"])
    campaign.submit(first)
    fake.finish(1000, 0, 3)
    fake.purge()
    saved = tmp_path / "plan.json"
    args = ["plan", str(campaign.path), "--config", str(config_path), "--output", str(saved)]
    with store.writing(campaign.path):  # busy: the plan cannot record what it saw settle
        assert main([*args, "--retry-failed"], connect=fake) == 0
    assert store.read(campaign.path).settlements == ()
    assert main(["status", str(campaign.path)], connect=fake) == 0
    assert len(store.read(campaign.path).settlements) == 1
    capsys.readouterr()
    assert main(["submit", str(campaign.path), str(saved), "--json"], connect=fake) == 0
    submitted = json.loads(capsys.readouterr().out)["receipts"]
    assert sorted(key for r in submitted for key in r["task_keys"]) == ["late", "t1"]


def test_status_on_a_busy_campaign_answers_at_once_and_records_nothing(
    tmp_path: Path, profile: Profile
) -> None:
    campaign, _ = finished_sweep(tmp_path, profile)
    with store.writing(campaign.path):  # another process's lock: flock is per open file
        busy = campaign.status()
        assert campaign.record_warning is None
    assert store.read(campaign.path).settlements == ()
    assert campaign.status() == busy
    assert len(store.read(campaign.path).settlements) == 3


def test_a_record_that_fails_is_one_warning_and_the_answer_stands(
    tmp_path: Path,
    profile: Profile,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    campaign, fake = finished_sweep(tmp_path, profile)
    want = campaign.status(offline=False)
    wrote = store.read(campaign.path).settlements
    (tmp_path / "again").mkdir()
    other, _ = finished_sweep(tmp_path / "again", profile)
    fake = other.connect  # type: ignore[assignment]

    def no_space(self: store.Writer, change: records.Settled) -> int:
        raise Unavailable("cannot write: No space left on device")

    monkeypatch.setattr(store.Writer, "settle", no_space)
    capsys.readouterr()
    assert main(["status", str(other.path)], connect=fake) == 0
    out, err = capsys.readouterr()
    assert err.count("\n") == 1 and "warning: what settled was not recorded" in err
    assert "No space left" in err and "t1" in out
    assert store.read(other.path).settlements == ()
    assert [t.execution for t in other.status().tasks] == [t.execution for t in want.tasks]
    assert len(wrote) == 3


def test_reconcile_settles_what_it_resolves(tmp_path: Path, profile: Profile) -> None:
    fake = FakeScheduler()
    campaign = Campaign.ensure(tmp_path / "state", tasks(1), connect=fake)
    fake.lose_answer("sbatch")
    with pytest.raises(Exception, match="UNRESOLVED"):
        campaign.submit(campaign.plan(profile))
    fake.finish(1000, 0)
    fake.purge()
    (decision,) = campaign.reconcile()
    assert (decision.outcome, decision.job) == ("accepted", 1000)
    state = store.read(campaign.path)
    assert [(s.allocation_id, s.job) for s in state.settlements] == [(decision.allocation_id, 1000)]
    fake.markers.clear()
    assert campaign.status().tasks[0].execution is Execution.SUCCEEDED
