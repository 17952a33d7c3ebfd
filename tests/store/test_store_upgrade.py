"""A campaign written by an earlier release still opens and reads as written (ADR 0001)."""

from __future__ import annotations

import importlib.util
import json
import stat
import sys
from pathlib import Path
from types import ModuleType

import attrs
import cattrs
import pytest

from servatus.campaign import Campaign
from servatus.journal import codec, folding, records, store
from servatus.tasks import Task
from testkit import DATA, owner_only_copy


def _writer_script() -> ModuleType:
    """The script that wrote the data: the records it wrote are what must be read back."""
    spec = importlib.util.spec_from_file_location("make_da44b63", DATA / "make_da44b63.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault(spec.name, module)
    spec.loader.exec_module(module)
    return module


WRITTEN = _writer_script()


@pytest.fixture
def old_campaign(tmp_path: Path) -> Path:
    return owner_only_copy(DATA / "da44b63" / "campaign", tmp_path / "campaign")


def test_the_journal_holds_a_snapshot_and_a_tail(old_campaign: Path) -> None:
    data = (old_campaign / store.JOURNAL).read_bytes()
    found = codec.scan(data, "journal")
    first, *tail = map(codec.decode, found.payloads)
    assert isinstance(first, records.Snapshot)
    assert first.state == folding.fold(WRITTEN.BEFORE_COMPACTION)
    assert tail == WRITTEN.AFTER_COMPACTION
    assert found.end == len(data)


def test_every_record_reads_as_written(old_campaign: Path) -> None:
    state = store.read(old_campaign)
    assert state == folding.fold(WRITTEN.BEFORE_COMPACTION + WRITTEN.AFTER_COMPACTION)
    assert state.campaign_id == "0123456789abcdef0123456789abcdef"
    assert state.created_at == 1764600000.25
    assert state.sealed
    assert state.revision == 17
    assert state.tasks.keys == ("a", "b", "c", "d", "e", "f")
    assert state.tasks.by_key()["a"] == Task(
        "a", ["python", "train.py", "--lr", "1e-3"], stdin=b"\0\xff{}", env={"A": "1"}
    )
    assert state.tasks.by_key()["b"].args == ("python", "train.py", "é ü")
    assert state.tasks.by_key()["c"].env.to_dict() == {"X": "", "Y": "=y"}
    assert state.tasks.by_key()["e"].stdin == b"line\n"
    assert {i.allocation_id: (i.task_keys, i.target, i.time_limit) for i in state.intents} == {
        "a1a1a1a1a1a1a1a1a1a1a1a1": (("a", "b"), WRITTEN.ONE, 600),
        "a2a2a2a2a2a2a2a2a2a2a2a2": (("c",), WRITTEN.ONE, 0),
        "a3a3a3a3a3a3a3a3a3a3a3a3": (("d",), WRITTEN.ONE, 60),
        "b4b4b4b4b4b4b4b4b4b4b4b4": (("e", "f"), WRITTEN.TWO, 3600),
        "b5b5b5b5b5b5b5b5b5b5b5b5": (("e",), WRITTEN.TWO, 0),
        "b6b6b6b6b6b6b6b6b6b6b6b6": (("f",), WRITTEN.ONE, 120),
    }
    assert [(r.allocation_id[:2], r.job) for r in state.receipts] == [("a1", 1001), ("b4", 4000000)]
    assert [(r.allocation_id[:2], r.job) for r in state.resolutions] == [
        ("a2", None),
        ("a3", 1003),
        ("b5", None),
    ]
    assert state.target_identities() == {
        WRITTEN.ONE: WRITTEN.TARGET_ONE,
        WRITTEN.TWO: WRITTEN.TARGET_TWO,
    }


def test_the_writer_takes_it_over(old_campaign: Path) -> None:
    before = store.read(old_campaign)
    with store.writing(old_campaign) as writer:
        assert writer.state == before
        writer.compact()
        writer.commit(records.Receipt("b6b6b6b6b6b6b6b6b6b6b6b6", 1006))
    after = store.read(old_campaign)
    assert after.revision == before.revision + 1
    assert after.receipts[-1] == records.Receipt("b6b6b6b6b6b6b6b6b6b6b6b6", 1006)
    assert stat.S_IMODE((old_campaign / store.JOURNAL).stat().st_mode) == 0o600
    assert Campaign.open(old_campaign).tasks.keys == before.tasks.keys


@attrs.frozen
class LaterIntent(records.Intent):
    """:class:`records.Intent` as a later release may define it: one more field, with a default."""

    priority: int = 0


@attrs.frozen
class LaterState(records.CampaignState):
    intents: tuple[LaterIntent, ...] = ()
    settled: tuple[str, ...] = ()


@attrs.frozen
class LaterSnapshot:
    state: LaterState


@pytest.fixture
def later(monkeypatch: pytest.MonkeyPatch) -> cattrs.Converter:
    """The journal's converter as a later release with those fields would build it."""
    monkeypatch.setitem(records.RECORD_TAGS, LaterIntent, "intent")
    monkeypatch.setitem(
        codec._COLUMNS, LaterIntent, {**codec._COLUMNS[records.Intent], "priority": "seconds"}
    )
    return codec._converter(codec._structure_roster)


def test_a_field_with_a_default_needs_no_new_journal_version(
    old_campaign: Path, later: cattrs.Converter
) -> None:
    payload = codec.scan((old_campaign / store.JOURNAL).read_bytes(), "journal").payloads[0]
    document = json.loads(payload)
    assert document.pop("type") == "snapshot"
    old = folding.fold(WRITTEN.BEFORE_COMPACTION)
    state = later.structure(document, LaterSnapshot).state
    assert state.settled == ()
    assert [attrs.astuple(i)[:-1] for i in state.intents] == list(map(attrs.astuple, old.intents))
    assert {i.priority for i in state.intents} == {0}
    assert (state.receipts, state.resolutions, state.tasks) == (
        old.receipts,
        old.resolutions,
        old.tasks,
    )
    newer = attrs.evolve(
        state, intents=(attrs.evolve(state.intents[0], priority=7),), settled=("a",)
    )
    assert later.structure(later.unstructure(LaterSnapshot(newer)), LaterSnapshot).state == newer


def test_unknown_fields_are_still_refused(old_campaign: Path, later: cattrs.Converter) -> None:
    payload = codec.scan((old_campaign / store.JOURNAL).read_bytes(), "journal").payloads[0]
    document = json.loads(payload)
    document.pop("type")
    document["state"]["unknown"] = []
    with pytest.raises(cattrs.BaseValidationError):
        later.structure(document, LaterSnapshot)
    del document["state"]["unknown"]
    document["state"]["intents"]["unknown"] = [1, 2, 3]
    with pytest.raises(cattrs.BaseValidationError):
        later.structure(document, LaterSnapshot)
    document["state"]["intents"].pop("unknown")
    document["state"]["intents"].pop("plan_digest")  # a column without a default is required
    with pytest.raises(cattrs.BaseValidationError):
        later.structure(document, LaterSnapshot)
    with pytest.raises(TypeError, match=r"\$\.state\.intents"):
        codec.decode(json.dumps({"type": "snapshot", **document}).encode())


def _script(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, DATA / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault(spec.name, module)
    spec.loader.exec_module(module)
    return module


VERSION_4 = _script("make_d977980")
"""Version 4 as main wrote it just before the settled summary: settlements, horizons, chains,
a lease and its step, in the snapshot and in the tail."""


@pytest.fixture
def version_4(tmp_path: Path) -> Path:
    return owner_only_copy(DATA / "d977980" / "campaign", tmp_path / "campaign")


def test_version_4_reads_record_by_record(version_4: Path) -> None:
    data = (version_4 / store.JOURNAL).read_bytes()
    assert data.startswith(b"servatus.campaign/4\n")
    first, *tail = map(codec.decode, codec.scan(data, "journal").payloads)
    assert isinstance(first, records.Snapshot)
    assert first.state == folding.fold(VERSION_4.BEFORE_COMPACTION)
    assert tail == VERSION_4.AFTER_COMPACTION
    state = store.read(version_4)
    assert state == folding.fold(VERSION_4.BEFORE_COMPACTION + VERSION_4.AFTER_COMPACTION)
    assert [item.allocation_id[0] for item in state.settlements] == ["a", "b", "c"]
    assert state.settlements[0].handed == (1,)
    assert [(h.intents, h.at) for h in state.horizons] == [(2, 1796000600.0), (5, 1796001000.0)]


def test_version_4_is_taken_over_and_compacted(version_4: Path) -> None:
    before = store.read(version_4)
    with store.writing(version_4) as writer:
        writer.compact()
        writer.commit(records.Receipt(VERSION_4.F, 2005))
    after = store.read(version_4)
    assert after.receipts[-1] == records.Receipt(VERSION_4.F, 2005)
    assert attrs.evolve(after, receipts=after.receipts[:-1], revision=before.revision) == before
