"""The saved plan document: a plan saved by an earlier release loads, saves back to the same
bytes and digest, and submits."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from servatus import store
from servatus.cli import json_text, main
from servatus.plan import Hold, plan_from_document, plan_to_document
from servatus.testing import FakeScheduler
from testkit import DATA, owner_only_copy

SAVED = DATA / "da44b63" / "plan"


@pytest.fixture
def old_plan(tmp_path: Path) -> Path:
    return owner_only_copy(SAVED, tmp_path / "plan")


def test_a_plan_saved_by_da44b63_reads_as_saved(old_plan: Path) -> None:
    data = (old_plan / "plan.json").read_bytes()
    plan = plan_from_document(json.loads(data), where="plan.json")
    assert plan.revision == 1 and not plan.probe
    assert plan.request.only == ("k0", "k1", "k2", "k3", "k5")
    assert plan.request.tasks_per_allocation == 2 and plan.request.retry == ()
    assert plan.decision.selected == ("k0", "k1", "k2", "k3")
    assert plan.decision.held == (("k4", Hold.NOT_REQUESTED),)
    assert plan.decision.deferred == ("k5",)
    assert [a.task_keys for a in plan.allocations] == [("k0", "k1"), ("k2", "k3")]
    assert plan.profile.target.max_allocations_per_submit == 2
    assert (json_text(plan_to_document(plan)) + "\n").encode() == data


def test_a_plan_saved_by_da44b63_submits(
    old_plan: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fake = FakeScheduler()
    state, saved = old_plan / "state", old_plan / "plan.json"
    assert main(["submit", str(state), str(saved), "--json"], connect=fake) == 0
    receipts = json.loads(capsys.readouterr().out)["receipts"]
    assert [(r["task_keys"], r["job"]) for r in receipts] == [
        (["k0", "k1"], 1000),
        (["k2", "k3"], 1001),
    ]
    digest = json.loads(saved.read_text())["digest"]
    assert {intent.plan_digest for intent in store.read(state).intents} == {digest}
