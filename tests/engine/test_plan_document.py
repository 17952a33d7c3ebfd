"""The plan document: the body a release before the seal saved reads as the same plan, but its
unsealed file is refused with a word to save it again (ADR 0011); a document that does not hold
together says why."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from servatus.cli import json_text, main
from servatus.config import Profile, Resources, Target
from servatus.continuation import Continuation
from servatus.engine.plan import Hold, Request
from servatus.engine.plan_document import (
    PLAN_SCHEMA,
    _Canonical,
    plan_from_document,
    plan_to_document,
)
from servatus.engine.planning import make_plan
from servatus.errors import StalePlan
from servatus.journal import store
from servatus.testing import FakeScheduler
from testkit import DATA, owner_only_copy

SAVED = DATA / "da44b63" / "plan"


@pytest.fixture
def old_plan(tmp_path: Path) -> Path:
    return owner_only_copy(SAVED, tmp_path / "plan")


def _relabelled(data: bytes) -> dict[str, Any]:
    """A ``servatus.plan/4`` document as version 5 holds the same body."""
    document: dict[str, Any] = json.loads(data)
    document["schema"] = PLAN_SCHEMA
    document["digest"] = _Canonical(document).digest()
    return document


def test_the_body_of_a_plan_saved_by_da44b63_reads_as_saved(old_plan: Path) -> None:
    document = _relabelled((old_plan / "plan.json").read_bytes())
    plan = plan_from_document(document, where="plan.json")
    assert plan.revision == 1 and not plan.probe
    assert plan.request.only == ("k0", "k1", "k2", "k3", "k5")
    assert plan.request.tasks_per_allocation == 2 and plan.request.retry == ()
    assert plan.decision.selected == ("k0", "k1", "k2", "k3")
    assert plan.decision.held == (("k4", Hold.NOT_REQUESTED),)
    assert plan.decision.deferred == ("k5",)
    assert [a.task_keys for a in plan.allocations] == [("k0", "k1"), ("k2", "k3")]
    assert plan.profile.target.max_allocations_per_submit == 2
    assert plan_to_document(plan) == document


def test_a_plan_saved_by_da44b63_is_refused_with_a_word_to_save_it_again(
    old_plan: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fake = FakeScheduler()
    state, saved = old_plan / "state", old_plan / "plan.json"
    for command in ("submit", "validate"):
        assert main([command, str(state), str(saved)], connect=fake) == 1
        assert capsys.readouterr().err == (
            f"servatus: StalePlan: {saved}: a servatus.plan/4 plan, saved by an earlier release "
            "without a seal, is not submitted; save it again with plan --output\n"
        )
    assert fake.calls == [] and store.read(state).intents == ()
    with pytest.raises(StalePlan, match="saved by an earlier release"):
        plan_from_document(json.loads(saved.read_bytes()), where="plan.json")


def _rehashed(change: Callable[[dict[str, Any]], object]) -> dict[str, Any]:
    document = _relabelled((SAVED / "plan.json").read_bytes())
    change(document)
    document["digest"] = _Canonical(document).digest()
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


def test_the_decision_fields_of_a_plan_without_continuation_must_be_empty() -> None:
    for change in (
        lambda d: d["decision"].update(spent={"k0": 2}),
        lambda d: d["decision"].update(extensions=[{"key": "k0", "extends": "SUCCEEDED"}]),
    ):
        with pytest.raises(StalePlan, match="P: not a usable plan"):
            plan_from_document(_rehashed(change), where="P")


def _chain_document() -> dict[str, Any]:
    """A saved plan of two chains (k0 and k1, three links each), as servatus writes it."""
    resources = Resources(cpus=1, memory_mib=100, time_limit=3600, signal_before_end=300)
    target = Target(
        slurm_bin="/usr/bin", work_root="/w", log_root="/l", partitions=("debug",),
        max_tasks_per_allocation=1, max_cpus_per_allocation=1,
        max_memory_mib_per_allocation=100, max_time_limit=3600,
    )  # fmt: skip
    plan = make_plan(
        campaign_id="0123456789abcdef0123456789abcdef",
        revision=3,
        keys=("k0", "k1"),
        profile=Profile("cpu", target, resources),
        request=Request(),
        work={},
        warnings=(),
        valid=frozenset(),
        probe=False,
        now=1.0,
        continuation=Continuation(budget="02:30:00"),
    )
    assert [len(a.task_keys) for a in plan.allocations] == [1] * 6
    document: dict[str, Any] = json.loads(json_text(plan_to_document(plan)))
    return document


def _rechained(change: Callable[[dict[str, Any]], object]) -> dict[str, Any]:
    document = _chain_document()
    change(document)
    document["digest"] = _Canonical(document).digest()
    return document


def test_a_chain_document_reads_with_a_key_in_every_link_of_its_chain() -> None:
    plan = plan_from_document(_chain_document(), where="P")
    assert [a.link.label if a.link else None for a in plan.allocations] == [
        "link 1/3", "link 2/3", "link 3/3", "link 1/3", "link 2/3", "link 3/3",
    ]  # fmt: skip
    assert [a.link.time_limit for a in plan.allocations if a.link] == [3600, 3600, 1800] * 2
    assert plan.decision.continuation == Continuation(budget=9000)


def _swap(allocations: list[dict[str, Any]], i: int, j: int) -> None:
    allocations[i], allocations[j] = allocations[j], allocations[i]


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        (
            lambda d: d["allocations"][1].pop("after"),
            "required field missing @ $.allocations[1].after",
        ),
        (
            lambda d: d["allocations"][2].update(link=None),
            "allocation {2} has chain fields but no link",
        ),
        (
            lambda d: d["allocations"][0]["link"].update(position=4),
            "link 4/3 is not a position in a chain",
        ),
        (
            lambda d: d["allocations"][0]["link"].update(time_limit=90),
            "a link's time limit is whole minutes, got 90 s",
        ),
        (
            lambda d: d["decision"].update(continuation={"budget": 0, "max_links": None}),
            "invalid budget 0: must be longer than zero",
        ),
        (
            lambda d: d["decision"]["continuation"].pop("max_links"),
            "required field missing @ $.decision.continuation.max_links",
        ),
        (
            lambda d: d["decision"].update(continuation=None),
            "allocation {0} is a chain link, but the plan has no continuation",
        ),
        (
            lambda d: [
                a.pop(name) for a in d["allocations"] for name in ("link", "after", "task_links")
            ],
            "allocation {0} is no chain link, but the plan has a continuation",
        ),
        (
            lambda d: _swap(d["allocations"], 1, 2),
            "allocation {2} (link 3/3) does not follow the link before it in its chain",
        ),
        (
            lambda d: d["allocations"][1].update(after=d["allocations"][3]["allocation_id"]),
            "allocation {1} (link 2/3) does not follow the link before it in its chain",
        ),
        (
            lambda d: d["allocations"][1].update(task_keys=["k1"]),
            "allocation {1} (link 2/3) does not follow the link before it in its chain",
        ),
        (
            lambda d: d["allocations"][1].update(task_links=[2]),
            "allocation {1} (link 2/3) does not follow the link before it in its chain",
        ),
        (
            lambda d: [a.update(task_links=[4]) for a in d["allocations"]],
            "allocation {0}: task_links do not give each slot 1 to 3 links",
        ),
        (
            lambda d: d["allocations"][0]["link"].update(time_limit=7200),
            "allocation {0}: its link is longer than the profile's time_limit",
        ),
        (
            lambda d: d["allocations"][0].update(after=d["allocations"][5]["allocation_id"]),
            "allocation {0} is the first link of its chain, yet comes after another",
        ),
        (
            lambda d: d["allocations"].pop(2),
            "allocation {3} starts a chain before the one before it ended",
        ),
        (
            lambda d: d["allocations"].pop(),
            "allocation {4} ends the plan before its chain ends",
        ),
        (
            lambda d: d["decision"]["spent"].pop("k1"),
            "its spent differs from its selection",
        ),
        (
            lambda d: d["profile"]["resources"].update(signal_before_end=None),
            "its continuation has a budget, but its profile no signal_before_end",
        ),
        (
            lambda d: d["decision"].update(extensions=[{"key": "k9", "extends": "VALID"}]),
            "its extensions are not of its selection",
        ),
    ],
)
def test_a_chain_that_does_not_hold_together_is_refused(
    change: Callable[[dict[str, Any]], object], problem: str
) -> None:
    ids = [a["allocation_id"] for a in _chain_document()["allocations"]]
    with pytest.raises(StalePlan) as refused:
        plan_from_document(_rechained(change), where="P")
    assert str(refused.value) == f"P: not a usable plan ({problem.format(*ids)})"


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(), inner, max_size=3),
    max_leaves=12,
)


@given(
    document=st.dictionaries(st.text(), _JSON, max_size=6),
    leaving=st.lists(st.sampled_from(["digest", "seal", "schema", ""]), max_size=3),
)
def test_the_canonical_bytes_built_member_by_member_are_the_whole_document_dumped_sorted(
    document: dict[str, Any], leaving: list[str]
) -> None:
    kept = {name: value for name, value in document.items() if name not in leaving}
    whole = json.dumps(kept, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    assert _Canonical(document).leaving(*leaving) == whole.encode("ascii")
