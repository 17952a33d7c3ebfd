"""A step started in a lease under a budget is told the Task's run time so far (issue #35, item
5): from what the campaign measured, through the order it offers, to the variables the order
gives its step. The order is the one the lease claimed, run by ``sh`` with a stand-in ``srun``."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from test_lease_steps import leased, project, write

from servatus import Campaign
from servatus.continuation import Continuation
from servatus.journal import store
from servatus.testing import FakeScheduler
from testkit import run

__all__ = ["project"]  # the fixture


def told(order: bytes, tmp_path: Path) -> dict[str, str]:
    """What the order's step would see of the chain variables: the order's ``servatus_step``
    run with a stand-in ``srun`` that prints them instead of starting the step."""
    srun = tmp_path / "srun"
    srun.write_text(
        '#!/bin/sh\nprintf \'%s\\n\' "RUN_TIME=$SERVATUS_RUN_TIME" "BUDGET=$SERVATUS_BUDGET"\n'
    )
    srun.chmod(0o755)
    (tmp_path / "order").write_bytes(order)
    shown = subprocess.run(
        ["dash", "-c", '. "$1" && servatus_step "$2" && wait', "sh", tmp_path / "order", srun],
        env={"servatus_steplog": str(tmp_path / "step.log"), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        check=True,
    )
    assert shown.stdout == "", shown.stdout  # the step's output goes to its log
    lines = (tmp_path / "step.log").read_text().splitlines()
    return dict(line.split("=", 1) for line in lines)


def test_a_step_retried_in_a_lease_under_a_budget_is_told_its_run_time_so_far(
    project: Path, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """train-a ran 10 minutes in the lease and yielded; retried there under a 1-hour budget,
    its new step is told 600 s, where its first step was told 0."""
    now = [1_800_000_000.0]
    fake = FakeScheduler(clock=lambda: now[0])
    state, (lease,) = leased(project, capsys, fake)
    fake.start()
    campaign = Campaign.open(state, connect=fake)
    budget = Continuation(budget=3600)
    campaign.submit(campaign.plan(lease=lease, continuation=budget))
    steps = [i.allocation_id for i in campaign.state.intents if i.within == lease]
    now[0] += 600
    fake.finish_step(steps[0], 75)  # it yields after 10 minutes
    now[0] += 5
    campaign.submit(campaign.plan(lease=lease, retry_failed=True, continuation=budget))
    steps = [i.allocation_id for i in campaign.state.intents if i.within == lease]
    assert len(steps) == 2
    orders = {name: data for name, (_, data) in fake.claims.items() if steps[1] in name}
    (order,) = orders.values()
    assert told(order, tmp_path) == {"RUN_TIME": "600", "BUDGET": "3600"}
    (first_order,) = (data for name, (_, data) in fake.claims.items() if steps[0] in name)
    (tmp_path / "first").mkdir()
    assert told(first_order, tmp_path / "first") == {"RUN_TIME": "0", "BUDGET": "3600"}


def test_status_shows_a_steps_budget_as_a_chains(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A step given a budget reads ``RUN TIME x / budget`` and ``LINK 1/1`` (its
    ``SERVATUS_LINK`` and ``SERVATUS_LINKS``), and its Task's ``link`` carries the budget, as a
    chain link's does; a step without one still reads ``-`` and ``null``."""
    now = [1_800_000_000.0]
    fake = FakeScheduler(clock=lambda: now[0])
    state, (lease,) = leased(project, capsys, fake)
    fake.start()
    train = write(project / "t.jsonl", "train-a")
    started = ["start", state, train, "--lease", lease, "--budget", "01:00:00"]
    assert run(started, fake, capsys)[0] == 0
    budgeted = next(i for i in store.read(state).intents if i.within == lease)
    assert budgeted.budget == 3600
    evals = write(project / "e.jsonl", "eval-1")
    assert run(["start", state, evals, "--lease", lease], fake, capsys)[0] == 0
    now[0] += 600

    def rows() -> dict[str, tuple[str, str]]:
        code, out, _ = run(["status", state], fake, capsys)
        assert code == 0
        lines = out.splitlines()
        run_time, link = lines[0].index("RUN TIME"), lines[0].index("LINK")
        return {
            line.split()[0]: (line[run_time:link].strip(), line[link:].split()[0])
            for line in lines[1:3]
        }

    assert rows() == {"train-a": ("~00:10:00 / 01:00:00", "1/1"), "eval-1": ("~00:10:00", "-")}
    _, out, _ = run(["status", state, "--json"], fake, capsys)
    links = {t["key"]: t["link"] for t in json.loads(out)["tasks"]}
    assert links == {"train-a": {"position": 1, "of": 1, "budget": 3600}, "eval-1": None}
    steps = {i.task_keys[0]: i.allocation_id for i in store.read(state).intents if i.within}
    fake.finish_step(steps["train-a"], 75)
    assert rows()["train-a"] == ("00:10:00 / 01:00:00", "1/1")
    _, out, _ = run(["status", state, "--offline", "--json"], fake, capsys)
    offline = {t["key"]: t["link"] for t in json.loads(out)["tasks"]}
    assert offline["train-a"] == {"position": 1, "of": 1, "budget": 3600}


def test_a_budgeted_step_that_succeeded_has_spent_its_budget_as_a_chains_last_link(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Exit 0 on its one link says the budget is spent: the same budget holds it ``SPENT``, a
    larger one starts it again."""
    now = [1_800_000_000.0]
    fake = FakeScheduler(clock=lambda: now[0])
    state, (lease,) = leased(project, capsys, fake)
    fake.start()
    train = write(project / "t.jsonl", "train-a")
    again = ["start", state, train, "--lease", lease, "--retry", "train-a", "--budget"]
    assert run([*again[:5], "--budget", "01:00:00"], fake, capsys)[0] == 0
    (step,) = (i.allocation_id for i in store.read(state).intents if i.within)
    now[0] += 600
    fake.finish_step(step, 0)
    assert run([*again, "01:00:00"], fake, capsys)[:2] == (
        0,
        "nothing to start: none of the 1 Task is selected; held 1 SPENT (train-a); see plan\n",
    )
    code, out, _ = run([*again, "02:00:00"], fake, capsys)
    assert code == 0 and out.startswith("submitted allocation")
