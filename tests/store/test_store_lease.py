"""A lease link and the steps within it, as intents record them (ADR 0009): a lease link holds
no Tasks and records the slot it holds; a step holds one Task and names its lease link."""

from __future__ import annotations

import json
from typing import Any

import attrs
import pytest

from servatus.journal import codec, folding, records
from servatus.tasks import Task

LOCAL = "0088816cc32dee54"
LEASE, NEXT = "1e1e1e1e1e1e1e1e1e1e1e1e", "2e2e2e2e2e2e2e2e2e2e2e2e"
STEP = "5e5e5e5e5e5e5e5e5e5e5e5e"
TERMS = records.LeaseTerms("l40s", 2, 104, 196608, 1, 600)


def lease_records() -> list[object]:
    return [
        records.Created("c1", 1.5, False, (Task("a", ["x"]), Task("b", ["y"]))),
        records.TargetSeen(LOCAL, '{"host":null}'),
        records.Intent(LEASE, (), "d", 2.0, LOCAL, 3600, records.ChainLink(1, 2, "", (), 0), TERMS),
        records.Intent(
            NEXT, (), "d", 2.0, LOCAL, 3600, records.ChainLink(2, 2, LEASE, (), 0), TERMS
        ),
        records.Receipt(LEASE, 41234),
        records.Intent(STEP, ("a",), "e", 3.0, LOCAL, 3600, within=LEASE),
        records.Receipt(STEP, 41234),
    ]


def test_a_lease_and_its_step_round_trip_in_records_and_in_a_snapshot() -> None:
    state = folding.fold(lease_records())
    for intent in state.intents:
        assert codec.decode(codec.encode(intent)) == intent
    document = json.loads(codec.encode(records.Snapshot(state)))
    columns = document["state"]["intents"]
    assert columns["lease"] == [list(TERMS), list(TERMS), None]
    assert columns["within"] == [None, None, LEASE]
    back = codec.decode(json.dumps(document).encode())
    assert isinstance(back, records.Snapshot)
    assert back.state.intents == state.intents


def test_a_campaign_without_leases_writes_neither_column() -> None:
    history = lease_records()
    plain = folding.fold([*history[:2], records.Intent("a" * 24, ("a",), "d", 2.0, LOCAL, 60)])
    columns = json.loads(codec.encode(records.Snapshot(plain)))["state"]["intents"]
    assert "lease" not in columns
    assert "within" not in columns


@pytest.mark.parametrize(
    ("index", "change", "words"),
    [
        (2, {"task_keys": ("a",)}, "holds no Tasks"),
        (2, {"lease": None}, "unknown Tasks"),
        (5, {"within": NEXT[::-1]}, "no recorded lease link"),
        (5, {"task_keys": ("a", "b")}, "holds one Task"),
        (5, {"chain": records.ChainLink(1, 1, "", (1,), 0)}, "holds one Task"),
        (5, {"time_limit": 60}, "goes where its lease went"),
    ],
)
def test_a_lease_or_step_that_does_not_hold_together_is_rejected(
    index: int, change: dict[str, Any], words: str
) -> None:
    history = lease_records()
    history[index] = attrs.evolve(history[index], **change)  # type: ignore[misc]
    with pytest.raises(folding.Rejected, match=words):
        folding.fold(history[: index + 1])


@pytest.mark.parametrize(
    "terms",
    [
        ["l40s", 2, 104, 196608, 1],  # short
        ["", 2, 104, 196608, 1, 600],  # no profile name
        ["l40s", 0, 104, 196608, 1, 600],  # no slots
        ["l40s", 2, 104, 196608, -1, 600],
        ["l40s", 2, 104, 196608, 1, 0],  # a lease needs signal_before_end
        ["l40s", 2.0, 104, 196608, 1, 600],
        [2, 2, 104, 196608, 1, 600],
        "l40s",
    ],
)
def test_malformed_lease_terms_are_refused(terms: Any) -> None:
    record = json.loads(codec.encode(lease_records()[2]))
    record["lease"] = terms
    with pytest.raises(TypeError):
        codec.decode(json.dumps(record).encode())


def test_a_malformed_within_is_refused() -> None:
    record = json.loads(codec.encode(lease_records()[5]))
    for within in ("not-an-id", 7, ["x"]):
        record["within"] = within
        with pytest.raises(TypeError):
            codec.decode(json.dumps(record).encode())


def test_a_plain_intent_records_each_tasks_resources_and_an_old_one_reads_none() -> None:
    history = lease_records()
    asked = records.TaskResources(2, 4096, 1)
    plain = records.Intent("a" * 24, ("a", "b"), "d", 2.0, LOCAL, 60, resources=asked)
    old = records.Intent("b" * 24, ("a",), "d", 2.0, LOCAL, 60)
    state = folding.fold([*history[:2], plain, old])
    assert codec.decode(codec.encode(plain)) == plain
    written_before = json.loads(codec.encode(old))
    del written_before["resources"]  # a journal written before resources were recorded
    assert codec.decode(json.dumps(written_before).encode()) == old
    columns = json.loads(codec.encode(records.Snapshot(state)))["state"]["intents"]
    assert columns["resources"] == [[2, 4096, 1], None]
    back = codec.decode(codec.encode(records.Snapshot(state)))
    assert isinstance(back, records.Snapshot)
    assert [i.resources for i in back.state.intents] == [asked, None]


@pytest.mark.parametrize(
    "resources", [[2, 4096], [0, 4096, 0], [2, 4096, -1], [2.0, 4096, 0], "2/4096/0"]
)
def test_malformed_task_resources_are_refused(resources: Any) -> None:
    record = json.loads(
        codec.encode(records.Intent("a" * 24, ("a",), "d", 2.0, LOCAL, 60, resources=None))
    )
    record["resources"] = resources
    with pytest.raises(TypeError):
        codec.decode(json.dumps(record).encode())


@pytest.mark.parametrize("index", [2, 5])
def test_a_lease_link_or_step_records_no_task_resources(index: int) -> None:
    history = lease_records()
    changed = attrs.evolve(history[index], resources=records.TaskResources(1, 1, 0))  # type: ignore[misc]
    history[index] = changed
    with pytest.raises(folding.Rejected, match="slot is"):
        folding.fold(history[: index + 1])


def test_a_steps_budget_round_trips_and_a_journal_without_one_writes_no_column() -> None:
    history = lease_records()
    budgeted = attrs.evolve(history[5], budget=3600)  # type: ignore[misc]
    state = folding.fold([*history[:5], budgeted])
    assert codec.decode(codec.encode(budgeted)) == budgeted
    assert "budget" not in json.loads(codec.encode(history[5]))  # a step without a budget
    columns = json.loads(codec.encode(records.Snapshot(state)))["state"]["intents"]
    assert columns["budget"] == [None, None, 3600]
    back = codec.decode(codec.encode(records.Snapshot(state)))
    assert isinstance(back, records.Snapshot)
    assert [i.budget for i in back.state.intents] == [None, None, 3600]
    plain = json.loads(codec.encode(records.Snapshot(folding.fold(history))))["state"]["intents"]
    assert "budget" not in plain


@pytest.mark.parametrize(("index", "budget"), [(2, 3600), (5, 0)])
def test_only_a_step_records_a_budget_of_a_second_or_more(index: int, budget: int) -> None:
    history = lease_records()
    history[index] = attrs.evolve(history[index], budget=budget)  # type: ignore[misc]
    with pytest.raises(folding.Rejected, match="only a step has"):
        folding.fold(history[: index + 1])


@pytest.mark.parametrize("budget", [-1, 1.5, "3600", [3600]])
def test_a_malformed_budget_is_refused(budget: Any) -> None:
    record = json.loads(codec.encode(lease_records()[5]))
    record["budget"] = budget
    with pytest.raises(TypeError):
        codec.decode(json.dumps(record).encode())
