"""A chain link's place in its chain, as intents record it: in a single record and in a
snapshot's columns, checked as strictly as every other column."""

from __future__ import annotations

import json
from typing import Any

import pytest

from servatus import store
from servatus.tasks import Task

LOCAL = "0088816cc32dee54"
FIRST, SECOND = "c1c1c1c1c1c1c1c1c1c1c1c1", "c2c2c2c2c2c2c2c2c2c2c2c2"


def chained_state() -> store.CampaignState:
    return store.fold(
        [
            store.Created("c1", 1.5, False, (Task("a", ["x"]), Task("b", ["y"]))),
            store.TargetSeen(LOCAL, '{"host":null}'),
            store.Intent("a" * 24, ("a",), "digest", 2.0, LOCAL, time_limit=60),
            store.Intent(
                FIRST, ("a", "b"), "d", 3.0, LOCAL, 120, store.ChainLink(1, 2, "", (2, 1), 600)
            ),
            store.Intent(
                SECOND, ("a", "b"), "d", 3.0, LOCAL, 60, store.ChainLink(2, 2, FIRST, (2, 1), 600)
            ),
        ]
    )


def test_a_snapshot_keeps_each_link_and_no_link_for_a_plain_allocation() -> None:
    state = chained_state()
    document = json.loads(store.encode(store.Snapshot(state)))
    assert document["state"]["intents"]["chain"] == [
        None,
        [1, 2, "", [2, 1], 600],
        [2, 2, FIRST, [2, 1], 600],
    ]
    back = store.decode(json.dumps(document).encode())
    assert isinstance(back, store.Snapshot)
    assert back.state.intents == state.intents


def test_a_campaign_without_chains_writes_no_chain_column() -> None:
    plain = store.fold(
        [
            store.Created("c1", 1.5, False, (Task("a", ["x"]),)),
            store.TargetSeen(LOCAL, '{"host":null}'),
            store.Intent("a" * 24, ("a",), "digest", 2.0, LOCAL, time_limit=60),
        ]
    )
    document = json.loads(store.encode(store.Snapshot(plain)))
    assert "chain" not in document["state"]["intents"]


def test_a_single_intent_record_round_trips_its_link() -> None:
    intent = chained_state().intents[2]
    assert store.decode(store.encode(intent)) == intent


@pytest.mark.parametrize(
    "chain",
    [
        [2, 2, "", [1], 0],  # a later link names its predecessor
        [1, 2, FIRST, [1], 0],  # link 1 has none
        [3, 2, FIRST, [1], 0],  # position beyond the count
        [1, 33, "", [1], 0],  # beyond MAX_LINKS
        [1, 2, "", [], 0],  # no slots
        [1, 2, "", [3], 0],  # a Task with more links than its chain
        [1, 2, "", [0], 0],
        [1, 2, "", [1], -1],
        [2, 2, "not-an-id", [1], 0],
        [1, 2, "", [True], 0],
        [1.0, 2, "", [1], 0],
        [1, 2, "", [1]],
        "1/2",
    ],
)
def test_a_malformed_link_is_refused(chain: Any) -> None:
    document = json.loads(store.encode(store.Snapshot(chained_state())))
    document["state"]["intents"]["chain"][1] = chain
    with pytest.raises(TypeError):
        store.decode(json.dumps(document).encode())
    record = json.loads(store.encode(chained_state().intents[1]))
    record["chain"] = chain
    with pytest.raises(TypeError):
        store.decode(json.dumps(record).encode())
