"""The status cache's pure parts: which Tasks it may hold, the remainder it keeps live (whose
marker listings must be exactly the whole state's), and how runs of texts join again."""

from __future__ import annotations

import json
import random

import pytest

from servatus.cli.status_cache import join, join_texts, run_texts, runs, widen
from servatus.engine.cacheable import partition
from servatus.engine.settlement import queries
from servatus.engine.status_inputs import submissions
from servatus.evidence import SlotEnd
from servatus.ids import target_key
from servatus.journal import codec, folding, records, store
from servatus.tasks import Task

IDENTITIES = ('{"host":null}', '{"host":"login"}')
KEYS = [target_key(identity) for identity in IDENTITIES]


def allocation(number: int) -> str:
    return f"{number:024x}"


def settlement(intent: records.Intent, job: int) -> records.Settlement:
    return records.Settlement(
        intent.allocation_id, job, 1.0, None, None, tuple(SlotEnd(0, 2.0) for _ in intent.task_keys)
    )


def history(seed: int, tasks: int = 40, allocations: int = 30) -> list[object]:
    """A campaign's records: plain allocations over two Targets, some accepted (some of those
    settled), some never submitted, some pending; listings read between them."""
    chance = random.Random(seed)
    keys = [f"k{i}" for i in range(tasks)]
    history: list[object] = [
        records.Created("c", 1.0, True, tuple(Task(key, ["x"]) for key in keys)),
        *(
            records.TargetSeen(key, identity)
            for key, identity in zip(KEYS, IDENTITIES, strict=True)
        ),
    ]
    accepted: list[tuple[records.Intent, int]] = []
    for number in range(allocations):
        slots = tuple(chance.sample(keys, chance.randint(1, 2)))
        intent = records.Intent(allocation(number), slots, "d", 2.0, chance.choice(KEYS))
        history.append(intent)
        fate = chance.random()
        if fate < 0.7:
            history.append(records.Receipt(intent.allocation_id, 1000 + number))
            accepted.append((intent, 1000 + number))
        elif fate < 0.85:
            history.append(records.Resolved(intent.allocation_id, None))
        if chance.random() < 0.5:
            chance.shuffle(accepted)
            settle = [accepted.pop() for _ in range(min(len(accepted), chance.randint(0, 5)))]
            listed = tuple(
                records.Listed(key, float(number * 10 + chance.randint(0, 9)))
                for key in KEYS
                if chance.random() < 0.7
            )
            history.append(
                records.Settled(tuple(settlement(intent, job) for intent, job in settle), listed)
            )
    return history


@pytest.mark.parametrize("seed", range(60))
def test_the_remainder_lists_exactly_the_markers_the_whole_state_lists(seed: int) -> None:
    state = folding.fold(history(seed))
    tasks, allocations = partition(state)
    rest = store.remainder(state, tasks, allocations)
    assert tasks or seed % 10, "the histories hold too few settled components to test"
    whole = submissions(state)
    order = list(dict.fromkeys(item.target for item in whole))
    assert queries(rest, submissions(rest), order) == queries(state, whole)
    again = codec.decode(codec.encode(records.Snapshot(rest)))
    assert isinstance(again, records.Snapshot) and again.state == rest  # and it folds: valid
    assert set(rest.tasks.keys) == set(state.tasks.keys) - tasks
    assert {intent.allocation_id for intent in rest.intents} == (
        {intent.allocation_id for intent in state.intents} - allocations
    )


def test_a_task_is_cached_only_when_everything_joined_to_it_is_settled() -> None:
    a1, a2, a3, a4, lease, step = (allocation(n) for n in range(6))
    target = KEYS[0]
    link1 = records.ChainLink(1, 2, "", (2,), 0)
    link2 = records.ChainLink(2, 2, a3, (2,), 0)
    terms = records.LeaseTerms("p", 2, 1, 100, 0, 60)
    history: list[object] = [
        records.Created("c", 1.0, True, tuple(Task(k, ["x"]) for k in "abcdefg")),
        records.TargetSeen(target, IDENTITIES[0]),
        records.Intent(a1, ("a", "b"), "d", 2.0, target),  # settled, but b is in a2 (pending)
        records.Receipt(a1, 1),
        records.Intent(a2, ("b", "c"), "d", 2.0, target),
        records.Intent(a3, ("d",), "d", 2.0, target, chain=link1),  # settled; its next link is not
        records.Receipt(a3, 3),
        records.Intent(a4, ("e",), "d", 2.0, target, chain=link2),
        records.Receipt(a4, 4),
        records.Intent(lease, (), "d", 2.0, target, lease=terms),  # its step settled, it is not
        records.Receipt(lease, 5),
        records.Intent(step, ("f",), "d", 2.0, target, within=lease),
        records.Receipt(step, 5),
    ]
    intents = {item.allocation_id: item for item in history if isinstance(item, records.Intent)}
    history.append(records.Settled(tuple(settlement(intents[x], j) for x, j in [(a1, 1), (a3, 3)])))
    history.append(records.Settled((settlement(intents[step], 5),)))
    state = folding.fold(history)
    assert partition(state) == (frozenset(), frozenset())  # g was never submitted
    history.append(records.Resolved(a2, None))  # never submitted: still no outcome to keep
    assert partition(folding.fold(history)) == (frozenset(), frozenset())
    history += [
        records.Settled((settlement(intents[a4], 4), settlement(intents[lease], 5))),
    ]
    tasks, held = partition(folding.fold(history))
    assert tasks == {"d", "e", "f"} and held == {a3, a4, lease, step}


def test_a_chain_cut_short_is_never_cached() -> None:
    """Its last recorded link settled, but its later links were never recorded: whether it is
    cut short is for status to say every time, so it stays live; a whole chain does not."""
    a1, a2, a3 = (allocation(n) for n in range(3))
    target = KEYS[0]
    history: list[object] = [
        records.Created("c", 1.0, True, (Task("a", ["x"]), Task("b", ["x"]))),
        records.TargetSeen(target, IDENTITIES[0]),
        records.Intent(a1, ("a",), "d", 2.0, target, chain=records.ChainLink(1, 3, "", (3,), 0)),
        records.Receipt(a1, 1),
        records.Intent(a2, ("a",), "d", 2.0, target, chain=records.ChainLink(2, 3, a1, (3,), 0)),
        records.Receipt(a2, 2),
        records.Intent(a3, ("b",), "d", 2.0, target, chain=records.ChainLink(1, 1, "", (1,), 0)),
        records.Receipt(a3, 3),
    ]
    intents = {item.allocation_id: item for item in history if isinstance(item, records.Intent)}
    history.append(
        records.Settled(tuple(settlement(intents[x], j) for x, j in [(a1, 1), (a2, 2), (a3, 3)]))
    )
    assert partition(folding.fold(history)) == ({"b"}, {a3})


def test_runs_alternate_cached_and_live_and_join_again() -> None:
    flags = [False, True, True, False, True]
    assert runs(flags) == (0, 1, 2, 1, 1)
    assert runs([]) == ()
    assert runs([True, True]) == (2,)
    items = [f"i{n}" for n in range(5)]
    cached = [item for item, flag in zip(items, flags, strict=True) if flag]
    live = [item for item, flag in zip(items, flags, strict=True) if not flag]
    assert join(runs(flags), cached, [*live, "new"]) == [*items, "new"]
    assert join(runs(flags), cached, live[:1]) is None  # a live item lost: does not fit
    assert join(runs(flags), cached[:2], live) is None


def test_json_runs_join_to_the_array_one_encoder_call_gives() -> None:
    items = [{"key": f"k{n}", "n": n} for n in range(7)]
    flags = [n % 3 != 0 for n in range(7)]
    counts = runs(flags)
    texts = run_texts(counts, items)
    whole = json.dumps(items, sort_keys=True)
    assert "[" + ", ".join(text for text in texts if text) + "]" == whole
    live = [item for item, flag in zip(items, flags, strict=True) if not flag]
    added = {"key": "new", "n": 9}
    joined = join_texts(counts, texts[0::2], [*live, added])
    assert joined is not None
    assert "[" + ", ".join(t for t in joined if t) + "]" == json.dumps(
        [*items, added], sort_keys=True
    )
    assert join_texts(counts, texts[0::2], live[:-1]) is None


def test_widen_pads_each_column_at_its_end() -> None:
    line = "%-3s  %-5s  %s"
    lines = [line % ("ab", "x", "rest"), line % ("abc", "xyzuv", "r")]
    wider = "%-4s  %-7s  %s"
    assert widen(lines, [3, 5], [4, 7]) == [
        wider % ("ab", "x", "rest"),
        wider % ("abc", "xyzuv", "r"),
    ]
    assert widen(lines, [3, 5], [3, 5]) is lines
