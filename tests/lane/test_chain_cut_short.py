"""A chain cut short: ``submit`` stopped in the middle of a chain (a lost ``sbatch`` answer), so
its later links were never sent. ``reconcile`` accepts the link Slurm got, and it and ``status``
name the chain cut short and the ``plan`` that continues it, until that plan is submitted."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from test_cli_budget import Clock, create, project

from servatus import batch
from servatus.journal import store
from servatus.testing import FakeScheduler
from testkit import run

__all__ = ["project"]  # the fixture


@pytest.fixture(autouse=True)
def one_allocation_per_batch(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each link in a batch of its own: the lost answer is its batch's last, so the links after
    it are known never to have been sent, as at a batch's end (ADR 0014)."""
    monkeypatch.setattr(batch, "MAX_ALLOCATIONS", 1)


HOUR = 3600


class LosesOneAnswer(FakeScheduler):
    """Slurm takes the ``sbatch`` numbered ``lost`` (from 1), but its answer never comes back."""

    def __init__(self, lost: int, clock: Clock) -> None:
        super().__init__(clock=clock)
        self.lost, self.sent = lost, 0

    def run(self, argv: Sequence[str], *, stdin: bytes = b"", timeout: float = 30.0) -> Any:
        if argv and argv[0].endswith("/sbatch") and "--parsable" in argv:
            self.sent += 1
            if self.sent == self.lost:
                self.lose_answer()
        return super().run(argv, stdin=stdin, timeout=timeout)


def warnings_of(state: str, fake: FakeScheduler, capsys: pytest.CaptureFixture[str]) -> list[str]:
    code, out, _ = run(["status", state, "--json"], fake, capsys)
    assert code == 0
    return list(json.loads(out)["warnings"])


def test_a_chain_cut_short_is_named_with_the_plan_that_continues_it(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    clock = Clock()
    state = create(project, "az")
    fake = LosesOneAnswer(2, clock)
    code, _, err = run(
        ["plan", state, "--budget", "2-16:00:00", "--output", "p.json"], fake, capsys
    )
    assert code == 0, err
    ids = [a["allocation_id"] for a in json.loads(Path("p.json").read_text())["allocations"]]
    assert len(ids) == 4
    code, _, err = run(["submit", state, "p.json"], fake, capsys)
    assert code == 3 and "SubmissionInterrupted" in err, err
    assert "chain link 2/4: its later links were not sent" in err
    assert [job.allocation_id for job in fake.jobs] == ids[:2]
    first, second = (job.job for job in fake.jobs)

    cut = (
        f"chain cut short: allocation {ids[1]} (link 2/4) is the last link of its chain that "
        f"reached Slurm; links 3-4 were never sent, so az stops after it; once it has ended, "
        f"continue with: servatus plan {state} --retry az --budget 2-16:00:00 --output "
        "continue.json, and the profile it was planned with"
    )
    code, out, err = run(["reconcile", state], fake, capsys)
    assert (code, out) == (0, f"allocation {ids[1]}: accepted as job {second}\n")
    assert err == f"servatus: warning: {cut}\n"
    code, out, err = run(["reconcile", state], fake, capsys)
    assert (code, out, err) == (0, "nothing to reconcile\n", "")  # status keeps saying it
    assert warnings_of(state, fake, capsys) == [cut]
    code, out, _ = run(["status", state], fake, capsys)
    assert out.splitlines()[-1] == f"warning: {cut}"

    fake.start()
    clock.now += 16 * HOUR
    fake.finish(first, 75)  # link 1 yields, handing az on to link 2
    fake.start()
    clock.now += 16 * HOUR
    fake.finish(second, 75)  # link 2 yields too, to a link 3 that does not exist
    fake.purge()
    code, out, _ = run(["status", state, "--json"], fake, capsys)
    document = json.loads(out)
    (task,) = document["tasks"]
    assert (task["execution"], task["detail"], task["link"]) == (
        "STOPPED",
        "yielded",
        {"position": 2, "of": 4, "budget": 64 * HOUR},
    )
    assert document["warnings"] == [cut]

    continued = ["plan", state, "--retry", "az", "--budget", "2-16:00:00", "--output", "c.json"]
    code, out, err = run(continued, fake, capsys)
    assert (code, err) == (0, f"servatus: warning: {cut}\n")  # plan says what status says
    assert "az  run time 1-08:00:00, budget left 1-08:00:00, 2 links" in out
    assert run(["submit", state, "c.json"], fake, capsys)[0] == 0
    assert warnings_of(state, fake, capsys) == []
    assert len(store.read(state).intents) == 4


def test_a_chain_whose_link_succeeded_before_the_cut_gives_no_warning(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Its Task was done before the missing links would have mattered: nothing to continue."""
    clock = Clock()
    state = create(project, "az")
    fake = LosesOneAnswer(3, clock)
    assert (
        run(["plan", state, "--budget", "2-16:00:00", "--output", "p.json"], fake, capsys)[0] == 0
    )
    assert run(["submit", state, "p.json"], fake, capsys)[0] == 3
    code, out, err = run(["reconcile", state, "--json"], fake, capsys)
    document = json.loads(out)
    assert (code, [r["outcome"] for r in document["resolutions"]]) == (0, ["accepted"])
    (cut,) = document["warnings"]
    assert cut.startswith("chain cut short: ") and "(link 3/4)" in cut and "link 4 was never" in cut
    assert err == f"servatus: warning: {cut}\n"
    assert warnings_of(state, fake, capsys) == [cut]
    first = fake.jobs[0].job
    fake.start()
    fake.finish(first, 0)
    assert warnings_of(state, fake, capsys) == []
