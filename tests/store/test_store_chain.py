"""A chain link's place in its chain, as intents record it: in a single record and in a
snapshot's columns, checked as strictly as every other column."""

from __future__ import annotations

import json
from typing import Any

import attrs
import pytest

from servatus.evidence import SlotEnd
from servatus.journal import codec, folding, records
from servatus.tasks import Task

LOCAL = "0088816cc32dee54"
FIRST, SECOND = "c1c1c1c1c1c1c1c1c1c1c1c1", "c2c2c2c2c2c2c2c2c2c2c2c2"


def chained_state() -> records.CampaignState:
    return folding.fold(
        [
            records.Created("c1", 1.5, False, (Task("a", ["x"]), Task("b", ["y"]))),
            records.TargetSeen(LOCAL, '{"host":null}'),
            records.Intent("a" * 24, ("a",), "digest", 2.0, LOCAL, time_limit=60),
            records.Intent(
                FIRST, ("a", "b"), "d", 3.0, LOCAL, 120, records.ChainLink(1, 2, "", (2, 1), 600)
            ),
            records.Intent(
                SECOND, ("a", "b"), "d", 3.0, LOCAL, 60, records.ChainLink(2, 2, FIRST, (2, 1), 600)
            ),
        ]
    )


def test_a_snapshot_keeps_each_link_and_no_link_for_a_plain_allocation() -> None:
    state = chained_state()
    document = json.loads(codec.encode(records.Snapshot(state)))
    assert document["state"]["intents"]["chain"] == [
        None,
        [1, 2, "", [2, 1], 600],
        [2, 2, FIRST, [2, 1], 600],
    ]
    back = codec.decode(json.dumps(document).encode())
    assert isinstance(back, records.Snapshot)
    assert back.state.intents == state.intents


def test_a_link_stopping_short_of_its_budget_keeps_its_slots_and_others_write_none() -> None:
    state = chained_state()
    short = attrs.evolve(
        state.intents[2],
        chain=state.intents[2].chain._replace(short=(1,)),  # type: ignore[union-attr]
    )
    intents = (*state.intents[:2], short)
    with_short = attrs.evolve(state, intents=intents)
    document = json.loads(codec.encode(records.Snapshot(with_short)))
    assert document["state"]["intents"]["chain"][1:] == [
        [1, 2, "", [2, 1], 600],  # five items, as every link before short existed
        [2, 2, FIRST, [2, 1], 600, [1]],
    ]
    back = codec.decode(json.dumps(document).encode())
    assert isinstance(back, records.Snapshot) and back.state.intents == intents
    assert codec.decode(codec.encode(short)) == short
    link = short.chain
    assert link is not None and (link.spends(0), link.spends(1)) == (True, False)
    assert (link.links_of(0), link.links_of(1), link.links_of(5)) == (2, 1, 2)


def test_a_campaign_without_chains_writes_no_chain_column() -> None:
    plain = folding.fold(
        [
            records.Created("c1", 1.5, False, (Task("a", ["x"]),)),
            records.TargetSeen(LOCAL, '{"host":null}'),
            records.Intent("a" * 24, ("a",), "digest", 2.0, LOCAL, time_limit=60),
        ]
    )
    document = json.loads(codec.encode(records.Snapshot(plain)))
    assert "chain" not in document["state"]["intents"]


def test_a_single_intent_record_round_trips_its_link() -> None:
    intent = chained_state().intents[2]
    assert codec.decode(codec.encode(intent)) == intent


@pytest.mark.parametrize(
    "chain",
    [
        [2, 2, "", [1], 0],  # a later link names its predecessor
        [1, 2, FIRST, [1], 0],  # link 1 has none
        [3, 2, FIRST, [1], 0],  # position beyond the count
        [1, 33, "", [1], 0],  # beyond MAX_LINKS
        [1, 2, "", [3], 0],  # a Task with more links than its chain
        [1, 2, "", [0], 0],
        [1, 2, "", [1], -1],
        [2, 2, "not-an-id", [1], 0],
        [1, 2, "", [True], 0],
        [1.0, 2, "", [1], 0],
        [1, 2, "", [1]],
        [1, 2, "", [1], 0, []],  # an empty short list is written as none
        [1, 2, "", [1], 0, [1]],  # short names a slot the link lacks
        [1, 2, "", [1, 1], 0, [1, 0]],  # not ascending
        [1, 2, "", [1, 1], 0, [0, 0]],
        [1, 2, "", [1], 0, [True]],
        [1, 2, "", [1], 0, 0],
        [1, 2, "", [1], 0, [0], []],
        "1/2",
    ],
)
def test_a_malformed_link_is_refused(chain: Any) -> None:
    document = json.loads(codec.encode(records.Snapshot(chained_state())))
    document["state"]["intents"]["chain"][1] = chain
    with pytest.raises(TypeError):
        codec.decode(json.dumps(document).encode())
    record = json.loads(codec.encode(chained_state().intents[1]))
    record["chain"] = chain
    with pytest.raises(TypeError):
        codec.decode(json.dumps(record).encode())


def test_a_chain_of_tasks_gives_every_slot_its_links() -> None:
    history = chained_state_records()
    bad = attrs.evolve(history[-1], chain=records.ChainLink(2, 2, FIRST, (), 600))
    with pytest.raises(folding.Rejected, match="different number of links"):
        folding.fold([*history[:-1], bad])


def settled_chain() -> records.CampaignState:
    first = records.Settlement(FIRST, 11, 1.0, None, 5.0, (SlotEnd(75, 9.0), SlotEnd(0, 4.0)), (0,))
    return folding.fold(
        [
            *chained_state_records(),
            records.Receipt(FIRST, 11),
            records.Receipt("a" * 24, 10),
            records.Settled((first, records.Settlement("a" * 24, 10, None, None, None, (None,)))),
        ]
    )


def chained_state_records() -> list[object]:
    state = chained_state()
    return [
        records.Created("c1", 1.5, False, (Task("a", ["x"]), Task("b", ["y"]))),
        records.TargetSeen(LOCAL, '{"host":null}'),
        *state.intents,
    ]


def test_a_settled_link_keeps_the_slots_it_handed_on() -> None:
    state = settled_chain()
    document = json.loads(codec.encode(records.Snapshot(state)))
    assert document["state"]["settlements"]["handed"] == [[0], []]
    back = codec.decode(json.dumps(document).encode())
    assert isinstance(back, records.Snapshot)
    assert back.state.settlements == state.settlements
    assert back.state.settlements[0].observation.handed == (0,)
    record = records.Settled(state.settlements)
    assert codec.decode(codec.encode(record)) == record


def test_settlements_without_handoffs_write_no_handed_column() -> None:
    state = settled_chain()
    plain = attrs.evolve(
        state, settlements=tuple(attrs.evolve(item, handed=()) for item in state.settlements)
    )
    document = json.loads(codec.encode(records.Snapshot(plain)))
    assert "handed" not in document["state"]["settlements"]
    back = codec.decode(json.dumps(document).encode())
    assert isinstance(back, records.Snapshot) and back.state == plain


@pytest.mark.parametrize("handed", [[1, 0], [0, 0], [-1], [True], [0.0], "0", [[0]]])
def test_a_malformed_handed_column_is_refused(handed: Any) -> None:
    document = json.loads(codec.encode(records.Snapshot(settled_chain())))
    document["state"]["settlements"]["handed"][0] = handed
    with pytest.raises(TypeError):
        codec.decode(json.dumps(document).encode())


def test_a_handoff_of_a_slot_the_allocation_lacks_is_refused() -> None:
    bad = records.Settlement(FIRST, 11, 1.0, None, None, (None, None), (2,))
    with pytest.raises(folding.Rejected, match="hands on no slot"):
        folding.fold(
            [*chained_state_records(), records.Receipt(FIRST, 11), records.Settled((bad,))]
        )
