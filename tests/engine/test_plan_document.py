"""The saved plan document: a plan saved by an earlier release loads, saves back to the same
bytes and digest, and submits; a document that does not hold together says why."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from servatus import store
from servatus.cli import json_text, main
from servatus.errors import StalePlan
from servatus.plan import Hold, _digest, plan_from_document, plan_to_document
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


def _rehashed(change: Callable[[dict[str, Any]], object]) -> dict[str, Any]:
    document = json.loads((SAVED / "plan.json").read_text())
    change(document)
    document["digest"] = _digest(document)
    return document


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        (lambda d: d.update(extra=1), "extra fields found (extra) @ $"),
        (lambda d: d.update(warnings=[]), "extra fields found (warnings) @ $"),
        (lambda d: d["request"].update(extra=1), "extra fields found (extra) @ $.request"),
        (lambda d: d["decision"].update(extra=1), "extra fields found (extra) @ $.decision"),
        (
            lambda d: d["allocations"][0].update(extra=1),
            "extra fields found (extra) @ $.allocations[0]",
        ),
        (lambda d: d["request"].pop("retry"), "required field missing @ $.request.retry"),
        (lambda d: d["decision"].pop("deferred"), "required field missing @ $.decision.deferred"),
        (
            lambda d: d["request"].update(retry=[1]),
            "invalid value for type, expected str @ $.request.retry[0]",
        ),
        (
            lambda d: d["request"].update(retry=1),
            "invalid value for type, expected list @ $.request.retry",
        ),
        (
            lambda d: d["request"].update(only=1),
            "invalid value for type, expected list[str] | None @ $.request.only",
        ),
        (
            lambda d: d["decision"].update(held=[1]),
            "invalid value for type, expected tuple @ $.decision.held[0]",
        ),
        (lambda d: d["decision"].update(held=[["k4", "NOPE"]]), "'NOPE' is not a valid Hold"),
        (
            lambda d: d["decision"].update(continuation="x"),
            "expected a mapping @ $.decision.continuation",
        ),
        (
            lambda d: d["decision"].update(spent={"k0": "2"}),
            "invalid value for type, expected int @ $.decision.spent['k0']",
        ),
        (
            lambda d: d["profile"].update(name=5),
            "P: profile: name: expected a string, got an integer",
        ),
        (
            lambda d: d["allocations"][0].update(allocation_id="2e72ea0ee5cc4e68fbe4532A"),
            "allocation id '2e72ea0ee5cc4e68fbe4532A'",
        ),
    ],
)
def test_a_rehashed_document_is_refused_saying_why(
    change: Callable[[dict[str, Any]], object], problem: str
) -> None:
    with pytest.raises(StalePlan) as refused:
        plan_from_document(_rehashed(change), where="P")
    assert str(refused.value) == f"P: not a usable plan ({problem})"


def test_the_reserved_decision_fields_are_read_and_set_aside() -> None:
    document = _rehashed(lambda d: d["decision"].update(spent={"k0": 2}, extensions=["k0"]))
    plan = plan_from_document(document, where="P")
    assert json.loads(json.dumps(plan_to_document(plan)["decision"])) == {
        **document["decision"],
        "spent": {},
        "extensions": [],
    }
