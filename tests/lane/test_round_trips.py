"""Each command that reads Slurm's evidence reads a Target's ``squeue``, clock and run markers in
one remote command: one round trip per Target (issue #33), counted at the transport."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import attrs
import pytest

from servatus.campaign import Campaign
from servatus.cli import main
from servatus.config import Profile, Target
from servatus.errors import SubmissionInterrupted
from servatus.tasks import Task
from servatus.testing import FakeScheduler
from servatus.transport import COMMAND_TIMEOUT, CommandResult
from testkit import run, write_tasks

OTHER_LOGS = "/scratch/alice/other/logs"


class Counting:
    """A transport in front of the fake that counts the commands sent through it."""

    def __init__(self, fake: FakeScheduler) -> None:
        self.fake = fake
        self.sent: list[tuple[str, ...]] = []

    def __call__(self, target: Target) -> Counting:
        return self

    def run(
        self, argv: Sequence[str], *, stdin: bytes = b"", timeout: float = COMMAND_TIMEOUT
    ) -> CommandResult:
        self.sent.append(tuple(argv))
        return self.fake.run(argv, stdin=stdin, timeout=timeout)

    def close(self) -> None:
        """Nothing to close."""

    def since(self, mark: int) -> list[str]:
        """The program (``$0`` of an ``sh -c``) of each command sent after ``mark``."""
        return [c[3] if c[:2] == ("/bin/sh", "-c") else Path(c[0]).name for c in self.sent[mark:]]


def two_targets(tmp_path: Path, profile: Profile) -> tuple[Campaign, Counting, FakeScheduler]:
    """Four Tasks running on two Targets (the same cluster, two ``log_root``): one of each
    Target's two allocations failed (and Slurm forgot it), the other runs."""
    other = attrs.evolve(profile, target=attrs.evolve(profile.target, log_root=OTHER_LOGS))
    fake = FakeScheduler()
    counting = Counting(fake)
    tasks = [Task(f"t{i}", ["/usr/bin/python3", "train.py"]) for i in range(4)]
    campaign = Campaign.ensure(tmp_path / "state", tasks, connect=counting)
    campaign.submit(campaign.plan(profile, only=["t0", "t1"], tasks_per_allocation=1))
    campaign.submit(campaign.plan(other, only=["t2", "t3"], tasks_per_allocation=1))
    fake.start()
    fake.finish(1000, 1)
    fake.finish(1002, 1)
    fake.purge()
    return campaign, counting, fake


def test_status_reads_each_target_once(tmp_path: Path, profile: Profile) -> None:
    campaign, counting, fake = two_targets(tmp_path, profile)
    mark, trips = len(counting.sent), fake.round_trips
    report = campaign.status()
    assert counting.since(mark) == ["listings", "listings"]
    assert fake.round_trips - trips == 2
    assert [t.execution.value for t in report.tasks] == ["FAILED", "RUNNING"] * 2
    assert fake.count("squeue") == fake.count("find")  # each listing recorded as its two commands


def test_the_status_command_reads_each_target_once(
    tmp_path: Path, profile: Profile, capsys: pytest.CaptureFixture[str]
) -> None:
    _, counting, _ = two_targets(tmp_path, profile)
    mark = len(counting.sent)
    code, out, _ = run(["status", str(tmp_path / "state")], counting.fake, capsys)
    # ``run`` connects the fake itself: count what reached it instead.
    assert code == 0 and "RUNNING" in out
    fresh = Counting(counting.fake)
    assert main(["status", str(tmp_path / "state"), "--json"], connect=fresh) == 0
    assert fresh.since(0) == ["listings", "listings"]
    assert counting.since(mark) == []


def test_plan_retry_failed_reads_each_target_once(tmp_path: Path, profile: Profile) -> None:
    campaign, counting, _ = two_targets(tmp_path, profile)
    mark = len(counting.sent)
    plan = campaign.plan(profile, retry_failed=True)
    assert counting.since(mark) == ["listings", "listings"]
    assert sorted(key for a in plan.allocations for key in a.task_keys) == ["t0", "t2"]


def test_cancel_reads_each_target_once_then_cancels(tmp_path: Path, profile: Profile) -> None:
    campaign, counting, _ = two_targets(tmp_path, profile)
    mark = len(counting.sent)
    done = campaign.cancel(tasks=["t1", "t3"])
    assert len(done.allocations) == 2
    assert counting.since(mark) == ["listings", "listings", "scancel", "scancel"]


def test_reconcile_reads_each_target_once(tmp_path: Path, profile: Profile) -> None:
    other = attrs.evolve(profile, target=attrs.evolve(profile.target, log_root=OTHER_LOGS))
    fake = FakeScheduler()
    counting = Counting(fake)
    tasks = [Task(f"t{i}", ["/usr/bin/python3", "train.py"]) for i in range(2)]
    campaign = Campaign.ensure(tmp_path / "state", tasks, connect=counting)
    for chosen, key in ((profile, "t0"), (other, "t1")):
        fake.lose_answer("sbatch")
        with pytest.raises(SubmissionInterrupted):
            campaign.submit(campaign.plan(chosen, only=[key]))
    mark = len(counting.sent)
    decided = campaign.reconcile()
    assert [d.outcome for d in decided] == ["accepted", "accepted"]
    assert counting.since(mark) == ["listings", "listings"]


def test_the_cli_reads_once_per_target_for_every_read(
    tmp_path: Path, config_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The same through ``servatus``: ``status``, ``plan --retry-failed`` and ``cancel``, on one
    Target: one reading, and what ``cancel`` then does."""
    fake = FakeScheduler()
    state, saved = str(tmp_path / "state"), str(tmp_path / "p.json")
    assert main(["create", state, write_tasks(tmp_path / "tasks.jsonl", 2)]) == 0
    assert main(["plan", state, "--config", str(config_path), "--output", saved]) == 0
    assert main(["submit", state, saved], connect=fake) == 0
    fake.start()
    fake.finish(1000, 1, 0)
    for args in (
        ["status", state],
        ["plan", state, "--config", str(config_path), "--retry-failed"],
        ["cancel", state, "--allocation", fake.jobs[0].allocation_id],
    ):
        counting = Counting(fake)
        assert main(args, connect=counting) in (0, 1), args
        assert counting.since(0)[:1] == ["listings"], args
        assert "listings" not in counting.since(1), args
    capsys.readouterr()
