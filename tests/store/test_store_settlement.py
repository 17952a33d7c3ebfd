"""The ``settled`` record: accepted allocations kept with their observation, once each, without
counting as a revision; anything else is CorruptState when read (ADR 0001, ADR 0004)."""

from __future__ import annotations

from pathlib import Path

import attrs
import pytest

from servatus.errors import CorruptState, TaskConflict
from servatus.evidence import SlotEnd
from servatus.ids import target_key
from servatus.journal import codec, folding, records, store
from servatus.tasks import Task
from testkit import DATA, owner_only_copy

IDENTITY = '{"host":null}'
LOCAL = target_key(IDENTITY)
A1, A2, A3, A4 = (f"a{i}" * 12 for i in range(1, 5))

HISTORY = [
    records.Created("c1", 1.5, True, (Task("a", ["x"]), Task("b", ["y"]))),
    records.TargetSeen(LOCAL, IDENTITY),
    records.Intent(A1, ("a", "b"), "digest", 2.0, LOCAL, time_limit=3600),
    records.Receipt(A1, 41234),
    records.Intent(A2, ("a",), "digest", 3.0, LOCAL),  # pending
    records.Intent(A3, ("b",), "digest", 4.0, LOCAL),
    records.Resolved(A3, None),  # never submitted
    records.Intent(A4, ("b",), "digest", 5.0, LOCAL),
    records.Resolved(A4, 77),  # accepted by reconcile
]

ONE = records.Settlement(A1, 41234, 10.0, None, None, (SlotEnd(0, 20.5), SlotEnd(3, 30.0)))
FOUR = records.Settlement(A4, 77, None, None, None, (None,))


def journal(*records: object) -> bytes:
    return codec.MAGIC + b"".join(codec.frame(codec.encode(r)) for r in records)


def test_a_settled_record_round_trips_and_folds_without_a_revision() -> None:
    change = records.Settled((ONE, FOUR), (records.Listed(LOCAL, 99.25),))
    assert codec.decode(codec.encode(change)) == change
    before = folding.fold(HISTORY)
    after = folding.fold([*HISTORY, change])
    assert after.settlements == (ONE, FOUR)
    assert after.horizons == (records.Horizon(LOCAL, 4, 99.25),)
    assert after.revision == before.revision
    assert attrs.evolve(after, settlements=(), horizons=()) == before
    assert ONE.observation.ends[1] == SlotEnd(3, 30.0)


def test_a_snapshot_keeps_settlements_and_horizons() -> None:
    state = folding.fold([*HISTORY, records.Settled((ONE,), (records.Listed(LOCAL, 5.0),))])
    snapshot = codec.decode(codec.encode(records.Snapshot(state)))
    assert isinstance(snapshot, records.Snapshot) and snapshot.state == state
    assert folding.fold([snapshot, records.Settled((FOUR,))]).settlements == (ONE, FOUR)


def test_horizons_count_the_intents_before_them_and_keep_the_latest_time() -> None:
    early = records.Settled((), (records.Listed(LOCAL, 5.0),))
    state = folding.fold([*HISTORY[:3], early, *HISTORY[3:], early])
    assert state.horizons == (records.Horizon(LOCAL, 1, 5.0), records.Horizon(LOCAL, 4, 5.0))
    later = records.Settled((), (records.Listed(LOCAL, 9.0),))
    assert folding.fold([*HISTORY, later, early]).horizons == (records.Horizon(LOCAL, 4, 9.0),)


@pytest.mark.parametrize(
    ("settled", "problem"),
    [
        (records.Settled((attrs.evolve(ONE, allocation_id="f" * 24),)), "without an intent"),
        (records.Settled((attrs.evolve(ONE, allocation_id=A2, ends=(None,)),)), "not accepted"),
        (records.Settled((attrs.evolve(ONE, allocation_id=A3, ends=(None,)),)), "not accepted"),
        (records.Settled((attrs.evolve(ONE, job=41235),)), "names job 41235"),
        (records.Settled((ONE, ONE)), "already settled"),
        (records.Settled((attrs.evolve(ONE, ends=(None,)),)), "one end per slot"),
        (records.Settled((), (records.Listed("0" * 16, 1.0),)), "unrecorded"),
    ],
)
def test_an_impossible_settlement_is_corrupt_on_read(
    tmp_path: Path, settled: records.Settled, problem: str
) -> None:
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    (state / store.JOURNAL).write_bytes(journal(*HISTORY, settled))
    (state / store.JOURNAL).chmod(0o600)
    with pytest.raises(CorruptState, match=problem):
        store.read(state)


def test_a_snapshot_with_an_impossible_settlement_or_horizon_is_corrupt(tmp_path: Path) -> None:
    base = folding.fold(HISTORY)
    for state in (
        attrs.evolve(base, settlements=(attrs.evolve(ONE, allocation_id=A2, ends=(None,)),)),
        attrs.evolve(base, horizons=(records.Horizon("0" * 16, 0, 1.0),)),
        attrs.evolve(base, horizons=(records.Horizon(LOCAL, 5, 1.0),)),
    ):
        directory = tmp_path / str(len(list(tmp_path.iterdir())))
        directory.mkdir(mode=0o700)
        (directory / store.JOURNAL).write_bytes(journal(records.Snapshot(state)))
        (directory / store.JOURNAL).chmod(0o600)
        with pytest.raises(CorruptState, match="does not apply"):
            store.read(directory)


@pytest.mark.parametrize(
    "ends",
    ["[[256,1.0]]", '[[0,"1"]]', "[[0]]", "[[-1,1.0]]", "[[0,1e300]]", '[["0",1.0]]', "[1]"],
)
def test_settlement_columns_are_checked(ends: str) -> None:
    columns = f'"allocation_id":["{A1}"],"job":[1],"start":[null],"stop":[null],"limit":[null]'
    payload = f'{{"type":"settled","allocations":{{{columns},"ends":[{ends}]}}}}'.encode()
    with pytest.raises(TypeError, match=r"invalid value .* \$\.allocations"):
        codec.decode(payload)


def test_the_writer_settles_each_allocation_once(tmp_path: Path) -> None:
    path = tmp_path / "state"
    with store.writing(path, create=True) as writer:
        writer.initialize(HISTORY[0])  # type: ignore[arg-type]
        for change in HISTORY[1:]:
            writer.add(change)
        revision = writer.state.revision  # type: ignore[union-attr]
        assert writer.settle(records.Settled((ONE,))) == 1
        assert writer.settle(records.Settled((ONE, FOUR))) == 1  # ONE was settled meanwhile
        assert writer.settle(records.Settled((ONE,))) == 0
        with pytest.raises(TaskConflict, match="already settled"):
            writer.add(records.Settled((FOUR,)))
    state = store.read(path)
    assert state.settlements == (ONE, FOUR) and state.revision == revision
    with store.writing(path) as writer:
        writer.compact()
    assert store.read(path) == state


def test_a_campaign_of_the_previous_release_reads_unsettled_and_settles(tmp_path: Path) -> None:
    old = owner_only_copy(DATA / "da44b63" / "campaign", tmp_path / "campaign")
    before = store.read(old)
    assert before.settlements == () and before.horizons == ()
    accepted = records.Settlement("a1" * 12, 1001, 1.0, 2.0, None, (SlotEnd(143, 2.5), None))
    with store.writing(old) as writer:
        writer.settle(records.Settled((accepted,)))
    after = store.read(old)
    assert after.settlements == (accepted,) and after.revision == before.revision == 17


def test_a_writer_given_the_state_it_would_read_does_not_fold_it_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "state"
    with store.writing(path, create=True) as writer:
        writer.initialize(HISTORY[0])  # type: ignore[arg-type]
        for change in HISTORY[1:]:
            writer.add(change)
    version, state = store.journal_version(path), store.read(path)
    folds = []
    real = codec.fold_journal
    monkeypatch.setattr(codec, "fold_journal", lambda *a: folds.append(1) or real(*a))
    with store.writing(path, known=(version, state)) as writer:
        assert writer.state == state
        writer.settle(records.Settled((ONE,)))
    assert folds == []
    with store.writing(path, known=(version, state)) as writer:  # changed since: read again
        assert writer.state is not None and writer.state.settlements == (ONE,)
    assert folds == [1]
    assert store.read(path).settlements == (ONE,)
