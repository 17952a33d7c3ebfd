"""The journal: records, framing, torn tails, corruption, compaction, permissions and the lock."""

from __future__ import annotations

import json
import math
import os
import stat
from pathlib import Path

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from store_helpers import make_tasks

from servatus import ids, strict
from servatus.campaign import Campaign, append_state, create_state, ensure_state, seal_state
from servatus.errors import (
    Busy,
    ConfigurationError,
    CorruptState,
    StateWarning,
    TaskConflict,
    UnsafeFilesystem,
    input_problem,
)
from servatus.journal import codec, folding, records, store
from servatus.tasks import Task

LOCAL = ids.target_key('{"host":null}')

ALL_RECORDS = [
    records.Created("c1", 1.5, False, (Task("a", ["x"], stdin=b"\0\xff", env={"A": "1"}),)),
    records.Appended((Task("b", ["y", "é"]),)),
    records.Sealed(),
    records.TargetSeen(LOCAL, '{"host":null}'),
    records.Intent("a1a1a1a1a1a1a1a1a1a1a1a1", ("a", "b"), "digest", 2.0, LOCAL, time_limit=3600),
    records.Receipt("a1a1a1a1a1a1a1a1a1a1a1a1", 41234),
    records.Resolved("a1a1a1a1a1a1a1a1a1a1a1a1", 41234),
    records.Intent("a2a2a2a2a2a2a2a2a2a2a2a2", ("a",), "digest", 3.0, LOCAL),
    records.Resolved("a2a2a2a2a2a2a2a2a2a2a2a2", None),
]


@pytest.mark.parametrize("change", ALL_RECORDS, ids=lambda r: type(r).__name__)
def test_every_record_round_trips(change: object) -> None:
    assert codec.decode(codec.encode(change)) == change


def test_snapshot_round_trips() -> None:
    state = folding.fold(ALL_RECORDS)
    snapshot = records.Snapshot(state)
    assert codec.decode(codec.encode(snapshot)) == snapshot
    assert folding.fold([snapshot]) == state


def test_fold_is_the_state() -> None:
    state = folding.fold(ALL_RECORDS)
    assert [task.key for task in state.tasks] == ["a", "b"]
    assert state.sealed and not state.appendable
    assert state.revision == len(ALL_RECORDS)
    assert [i.allocation_id for i in state.intents] == [
        "a1a1a1a1a1a1a1a1a1a1a1a1",
        "a2a2a2a2a2a2a2a2a2a2a2a2",
    ]
    assert state.receipts == (records.Receipt("a1a1a1a1a1a1a1a1a1a1a1a1", 41234),)
    assert len(state.resolutions) == 2
    stepwise = folding.fold(ALL_RECORDS[:1])
    for change in ALL_RECORDS[1:]:
        stepwise = folding.apply(stepwise, change)
    assert stepwise == state


@pytest.mark.parametrize(
    "history",
    [
        [records.Appended((Task("a", ["x"]),))],
        [ALL_RECORDS[0], ALL_RECORDS[0]],
        [ALL_RECORDS[0], records.Appended((Task("a", ["x"]),))],
        [ALL_RECORDS[0], records.Appended((Task("n", ["x"]), Task("n", ["y"])))],
        [ALL_RECORDS[0], records.Sealed(), records.Appended((Task("n", ["x"]),))],
        [ALL_RECORDS[0], records.Sealed(), records.Sealed()],
        [ALL_RECORDS[0], records.Receipt("c0c0c0c0c0c0c0c0c0c0c0c0", 1)],
        [
            ALL_RECORDS[0],
            ALL_RECORDS[3],
            records.Intent("e0e0e0e0e0e0e0e0e0e0e0e0", ("zzz",), "d", 1.0, LOCAL),
        ],
        [
            ALL_RECORDS[0],
            ALL_RECORDS[3],
            *[records.Intent("e0e0e0e0e0e0e0e0e0e0e0e0", ("a",), "d", 1.0, LOCAL)] * 2,
        ],
        [ALL_RECORDS[0], records.Intent("e0e0e0e0e0e0e0e0e0e0e0e0", ("a",), "d", 1.0, LOCAL)],
        [ALL_RECORDS[0], ALL_RECORDS[3], ALL_RECORDS[3]],
        [ALL_RECORDS[0], records.TargetSeen(LOCAL, '{"host":"elsewhere"}')],
        [],
    ],
)
def test_fold_rejects_impossible_histories(history: list[object]) -> None:
    with pytest.raises(folding.Rejected):
        folding.fold(history)


def test_an_intent_names_its_target_by_key() -> None:
    state = folding.fold(ALL_RECORDS)
    assert state.target_identities() == {LOCAL: '{"host":null}'}
    assert len(LOCAL) == ids.TARGET_KEY_HEX
    assert {intent.target for intent in state.intents} == {LOCAL}
    damaged = attrs.evolve(state, targets=())
    with pytest.raises(folding.Rejected, match="unrecorded targets"):
        folding.Fold(damaged)


def test_the_writer_records_each_target_once(tmp_path: Path) -> None:
    create_state(tmp_path / "state", make_tasks("t", 2))
    with store.writing(tmp_path / "state") as writer:
        key = writer.target('{"host":null}')
        assert writer.target('{"host":null}') == key == LOCAL
        writer.add(records.Intent("a1a1a1a1a1a1a1a1a1a1a1a1", ("t-0",), "d", 1.0, key))
        state = writer.state
    assert state is not None and state.revision == 3  # created, one target, one intent
    assert store.read(tmp_path / "state") == state


def test_a_rejected_record_changes_nothing() -> None:
    into = folding.Fold(folding.fold(ALL_RECORDS[:2]))
    before = into.freeze()
    with pytest.raises(folding.Rejected):
        into.apply(records.Appended((Task("c", ["x"]), Task("a", ["x"]))))
    assert into.freeze() == before


def test_unknown_fields_and_types_are_refused() -> None:
    with pytest.raises(TypeError, match="unknown record type"):
        codec.decode(b'{"type": "mystery"}')
    with pytest.raises(TypeError):
        codec.decode(b'{"type": "sealed", "extra": 1}')
    with pytest.raises(TypeError):
        codec.decode(
            b'{"type": "receipt", "allocation_id": "aaaaaaaaaaaaaaaaaaaaaaaa", "job": "12"}'
        )
    with pytest.raises(TypeError):
        codec.decode(
            b'{"type": "appended", "tasks": {"key": ["a"], "args": [["x"]], "stdin": [""],'
            b' "env": [{}], "z": [1]}}'
        )


@pytest.mark.parametrize(
    "payload",
    [
        b'{"type":"intent","allocation_id":"aaaaaaaaaaaaaaaaaaaaaaaa","task_keys":["k"],"plan_digest":"d",'
        b'"created_at":1,"target":"t","time_limit":1,"extra":1}',
        b'{"type":"intent","allocation_id":"aaaaaaaaaaaaaaaaaaaaaaaa","task_keys":"k","plan_digest":"d",'
        b'"created_at":1,"target":"t"}',
        b'{"type":"intent","allocation_id":"aaaaaaaaaaaaaaaaaaaaaaaa","task_keys":[1],"plan_digest":"d",'
        b'"created_at":1,"target":"t"}',
        b'{"type":"intent","allocation_id":"aaaaaaaaaaaaaaaaaaaaaaaa","task_keys":["k"],"plan_digest":"d",'
        b'"created_at":true,"target":"t"}',
        b'{"type":"intent","allocation_id":"aaaaaaaaaaaaaaaaaaaaaaaa","task_keys":["k"],"plan_digest":"d",'
        b'"created_at":1,"target":"t","time_limit":1.5}',
        b'{"type":"intent","allocation_id":"aaaaaaaaaaaaaaaaaaaaaaaa","task_keys":["k"],"created_at":1,"target":"t"}',
        b'{"type":"receipt","allocation_id":"aaaaaaaaaaaaaaaaaaaaaaaa","job":true}',
        b'{"type":"receipt","allocation_id":"aaaaaaaaaaaaaaaaaaaaaaaa","job":null}',
        b'{"type":"receipt","allocation_id":"aaaaaaaaaaaaaaaaaaaaaaaa"}',
        b'{"type":"resolved","allocation_id":1,"job":null}',
        b'{"type":"resolved","allocation_id":"aaaaaaaaaaaaaaaaaaaaaaaa","job":"1"}',
        b'{"type":"target","key":"k","identity":1}',
    ],
)
def test_records_are_structured_strictly(payload: bytes) -> None:
    with pytest.raises(TypeError):
        codec.decode(payload)


def test_strict_snapshot_lists() -> None:
    state = folding.fold(ALL_RECORDS)
    document = codec._CONVERTER.unstructure(state)
    document["receipts"] = {"not": "a list"}
    with pytest.raises(TypeError):
        codec.decode(b'{"type":"snapshot","state":%s}' % json.dumps(document).encode())
    minimal = codec.decode(
        b'{"type":"intent","allocation_id":"aaaaaaaaaaaaaaaaaaaaaaaa","task_keys":["k"],"plan_digest":"d",'
        b'"created_at":1,"target":"t"}'
    )
    assert minimal == records.Intent("aaaaaaaaaaaaaaaaaaaaaaaa", ("k",), "d", 1.0, "t", 0)
    assert isinstance(minimal, records.Intent) and type(minimal.created_at) is float


def test_registering_a_record_type_is_the_extension_point() -> None:
    @attrs.frozen
    class Note:
        text: str

    try:
        records.record("test-note")(Note)
        with pytest.raises(ValueError, match="already registered"):
            records.record("test-note")(Note)
        assert codec.decode(codec.encode(Note("hi"))) == Note("hi")
    finally:
        del records.RECORD_TYPES["test-note"]


# -- framing ------------------------------------------------------------------------------------


def journal(*history: object) -> bytes:
    return codec.MAGIC + b"".join(codec.frame(codec.encode(r)) for r in history)


def test_scan_reads_every_frame() -> None:
    data = journal(*ALL_RECORDS[:3])
    found = codec.scan(data, "j")
    assert found.end == len(data) and len(found.payloads) == 3


@pytest.mark.parametrize("cut", [1, 5, 20, 27, 28, 40, -1])
def test_a_cut_short_last_frame_is_a_torn_tail(cut: int) -> None:
    whole = journal(*ALL_RECORDS[:2])
    last = codec.frame(codec.encode(ALL_RECORDS[2]))
    data = whole + last[: cut if cut > 0 else len(last) + cut]
    found = codec.scan(data, "j")
    assert found.end == len(whole) and len(found.payloads) == 2
    into, _ = codec.fold_journal(data, "j")
    assert [t.key for t in into.freeze().tasks] == ["a", "b"]


def test_trailing_nul_bytes_are_a_torn_tail() -> None:
    whole = journal(*ALL_RECORDS[:2])
    assert codec.scan(whole + b"\0" * 4096, "j").end == len(whole)
    last = codec.frame(codec.encode(ALL_RECORDS[2]))
    assert codec.scan(whole + last[:30] + b"\0" * 100, "j").end == len(whole)


def flip(data: bytes, at: int) -> bytes:
    return data[:at] + bytes([data[at] ^ 0x01]) + data[at + 1 :]


def test_a_bad_checksum_anywhere_is_corrupt() -> None:
    data = journal(*ALL_RECORDS[:3])
    first_payload = len(codec.MAGIC) + codec.HEADER_SIZE + 5
    last_payload = len(data) - 3
    for at in (first_payload, last_payload):
        with pytest.raises(CorruptState, match="checksum"):
            codec.scan(flip(data, at), "j")


def test_a_damaged_header_is_corrupt_not_torn() -> None:
    data = journal(*ALL_RECORDS[:3])
    second = len(codec.MAGIC) + len(codec.frame(codec.encode(ALL_RECORDS[0])))
    for at in (second + 1, second + 8, second + 12, second + 20):
        with pytest.raises(CorruptState, match="header"):
            codec.scan(flip(data, at), "j")


def test_wrong_magic_or_version() -> None:
    for version in (b"3", b"9"):  # 3 stored a record's Tasks as objects, not as columns
        with pytest.raises(CorruptState, match="unknown campaign version"):
            codec.scan(b"servatus.campaign/%s\n" % version, "j")
    with pytest.raises(CorruptState, match="not a servatus campaign"):
        codec.scan(b"hello\n", "j")
    with pytest.raises(CorruptState, match="not a servatus campaign"):
        codec.scan(codec.MAGIC[:5], "j")


def test_a_journal_without_a_campaign_is_corrupt() -> None:
    with pytest.raises(CorruptState, match="holds no campaign"):
        codec.fold_journal(codec.MAGIC, "j")
    torn = codec.MAGIC + codec.frame(codec.encode(ALL_RECORDS[0]))[:-10]
    with pytest.raises(CorruptState, match="holds no campaign"):
        codec.fold_journal(torn, "j")


def test_a_valid_frame_with_an_impossible_record_is_corrupt() -> None:
    data = journal(ALL_RECORDS[0], records.Receipt("d0d0d0d0d0d0d0d0d0d0d0d0", 1))
    with pytest.raises(CorruptState, match="does not apply"):
        codec.fold_journal(data, "j")
    bad_task = codec.MAGIC + codec.frame(
        b'{"type":"created","campaign_id":"c","created_at":1,"sealed":true,'
        b'"tasks":{"key":["../x"],"args":[["a"]],"stdin":[""],"env":[{}]}}'
    )
    with pytest.raises(CorruptState, match="invalid"):
        codec.fold_journal(bad_task, "j")


# -- on disk ------------------------------------------------------------------------------------


def test_permissions_whatever_the_umask(tmp_path: Path) -> None:
    old = os.umask(0)
    try:
        create_state(tmp_path / "state", make_tasks("t", 3), appendable=True)
        append_state(tmp_path / "state", make_tasks("u", 2))
        with store.writing(tmp_path / "state") as writer:
            writer.compact()
    finally:
        os.umask(old)
    state = tmp_path / "state"
    assert stat.S_IMODE(state.stat().st_mode) == 0o700
    for entry in state.iterdir():
        assert stat.S_IMODE(entry.stat().st_mode) == 0o600, entry


def test_the_writer_restores_permissions(tmp_path: Path) -> None:
    create_state(tmp_path / "state", make_tasks("t", 1), appendable=True)
    os.chmod(tmp_path / "state", 0o755)
    os.chmod(tmp_path / "state" / "journal", 0o644)
    with pytest.warns(StateWarning, match="other users can read it") as said:
        append_state(tmp_path / "state", make_tasks("u", 1))
    assert all("made it owner-only" in str(warning.message) for warning in said)
    assert stat.S_IMODE((tmp_path / "state").stat().st_mode) == 0o700
    assert stat.S_IMODE((tmp_path / "state" / "journal").stat().st_mode) == 0o600


def test_an_append_costs_one_record_not_a_rewrite(tmp_path: Path) -> None:
    path = tmp_path / "state"
    create_state(path, make_tasks("t", 2000), appendable=True)
    inode = (path / "journal").stat().st_ino
    before = store.journal_size(path)
    append_state(path, [Task("one-more", ["python", "train.py", "1"])])
    grown = store.journal_size(path) - before
    assert grown == len(codec.frame(codec.encode(records.Appended(Campaign(path).tasks[-1:]))))
    assert (path / "journal").stat().st_ino == inode
    assert grown < 200


def test_the_next_writer_truncates_a_torn_tail(tmp_path: Path) -> None:
    path = tmp_path / "state"
    create_state(path, make_tasks("t", 3), appendable=True)
    size = store.journal_size(path)
    torn = codec.frame(codec.encode(records.Appended(tuple(make_tasks("u", 5)))))[:-7]
    with open(path / "journal", "ab") as handle:
        handle.write(torn)
    assert len(Campaign.open(path).tasks) == 3  # readers ignore it
    assert store.journal_size(path) == size + len(torn)  # and do not touch it
    _, done = append_state(path, make_tasks("v", 1))
    assert done.added == 1
    assert [t.key for t in Campaign.open(path).tasks] == ["t-0", "t-1", "t-2", "v-0"]


def test_a_leftover_temporary_file_is_removed(tmp_path: Path) -> None:
    path = tmp_path / "state"
    create_state(path, make_tasks("t", 3), appendable=True)
    (path / "journal.tmp").write_bytes(b"half a compaction")
    assert len(Campaign.open(path).tasks) == 3
    append_state(path, make_tasks("u", 1))
    assert not (path / "journal.tmp").exists()


def test_compaction_keeps_the_state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(store, "COMPACT_RECORDS", 4)
    path = tmp_path / "state"
    create_state(path, make_tasks("t", 2), appendable=True)
    for i in range(10):
        append_state(path, [Task(f"u-{i}", ["x"])])
        state = Campaign.open(path).state
        assert len(state.tasks) == 3 + i and state.revision == 2 + i
    seal_state(path)
    data = (path / "journal").read_bytes()
    history = [codec.decode(p) for p in codec.scan(data, "j").payloads]
    assert isinstance(history[0], records.Snapshot)  # compacted at least once
    assert len(history) <= 6
    state = Campaign.open(path).state
    assert state.sealed and state.revision == 12
    assert [t.key for t in state.tasks] == ["t-0", "t-1", *(f"u-{i}" for i in range(10))]


def test_a_second_writer_is_busy_at_once(tmp_path: Path) -> None:
    path = tmp_path / "state"
    create_state(path, make_tasks("t", 1), appendable=True)
    with store.writing(path):
        with pytest.raises(Busy):
            append_state(path, make_tasks("u", 1))
        assert len(Campaign.open(path).tasks) == 1  # readers take no lock
    append_state(path, make_tasks("u", 1))


def test_state_must_be_a_campaign(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="no campaign"):
        Campaign.open(tmp_path / "missing")
    with pytest.raises(ConfigurationError, match="no campaign"):
        append_state(tmp_path / "missing", make_tasks("t", 1))
    assert not (tmp_path / "missing").exists()
    (tmp_path / "busy-dir").mkdir(mode=0o755)
    (tmp_path / "busy-dir" / "precious.txt").write_text("mine")
    mode = stat.S_IMODE((tmp_path / "busy-dir").stat().st_mode)
    with pytest.raises(ConfigurationError, match="not a campaign"):
        ensure_state(tmp_path / "busy-dir", make_tasks("t", 1))
    assert stat.S_IMODE((tmp_path / "busy-dir").stat().st_mode) == mode
    assert sorted(p.name for p in (tmp_path / "busy-dir").iterdir()) == ["precious.txt"]
    (tmp_path / "empty").mkdir(mode=0o755)
    ensure_state(tmp_path / "empty", make_tasks("t", 1))
    assert stat.S_IMODE((tmp_path / "empty").stat().st_mode) == 0o700


def test_a_symlinked_journal_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "state"
    create_state(path, make_tasks("t", 1))
    (path / "journal").rename(tmp_path / "elsewhere")
    (path / "journal").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(UnsafeFilesystem):
        Campaign.open(path)


def test_a_bad_record_is_refused_by_the_writer_too(tmp_path: Path) -> None:
    path = tmp_path / "state"
    create_state(path, make_tasks("t", 1), appendable=True)
    with store.writing(path) as writer, pytest.raises(TaskConflict):
        writer.commit(records.Appended((Task("t-0", ["other"]),)))
    assert len(Campaign.open(path).tasks) == 1


def test_no_space_is_unavailable_and_leaves_the_journal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import errno

    from servatus.errors import Unavailable

    path = tmp_path / "state"
    create_state(path, make_tasks("t", 3), appendable=True)
    before = (path / "journal").read_bytes()
    real_pwrite = os.pwrite

    def half_then_full(fd: int, data: bytes | memoryview, offset: int) -> int:
        if len(data) > 8:
            return real_pwrite(fd, bytes(data[: len(data) // 2]), offset)
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "pwrite", half_then_full)
    with pytest.raises(Unavailable, match="No space"):
        append_state(path, make_tasks("u", 50))
    monkeypatch.undo()
    assert (path / "journal").read_bytes() == before
    append_state(path, make_tasks("u", 50))
    assert len(Campaign.open(path).tasks) == 53


# -- every prefix of a journal is a past state --------------------------------------------------


_batches = st.lists(
    st.lists(st.sampled_from(["a", "b", "c", "d", "e", "f", "g", "h"]), max_size=3, unique=True),
    min_size=1,
    max_size=5,
)


@settings(max_examples=60, deadline=None)
@given(batches=_batches, data=st.data())
def test_every_prefix_reads_as_a_past_state(batches: list[list[str]], data: st.DataObject) -> None:
    history: list[object] = [records.Created("c", 0.0, False, (Task("first", ["x"]),))]
    seen: set[str] = {"first"}
    for batch in batches:
        new = tuple(Task(f"{key}-{len(history)}", ["x"]) for key in batch if key not in seen)
        if new:
            history.append(records.Appended(new))
    states = [folding.fold(history[: i + 1]) for i in range(len(history))]
    whole = journal(*history)
    first_end = len(codec.MAGIC) + len(codec.frame(codec.encode(history[0])))
    cut = data.draw(st.integers(min_value=first_end, max_value=len(whole)))
    padded = whole[:cut] + b"\0" * data.draw(st.integers(min_value=0, max_value=64))
    into, found = codec.fold_journal(padded, "j")
    assert into.freeze() in states
    assert found.end <= cut
    into, _ = codec.fold_journal(whole[: found.end], "j")  # what the next writer truncates to
    assert into.freeze() in states
    below = data.draw(st.integers(min_value=0, max_value=first_end - 1))
    with pytest.raises(CorruptState):
        codec.fold_journal(whole[:below], "j")


INTENT = {
    "type": "intent",
    "allocation_id": "aaaaaaaaaaaaaaaaaaaaaaaa",
    "task_keys": ["k"],
    "plan_digest": "d",
    "created_at": 1,
    "target": "t",
    "time_limit": 5,
}


@pytest.mark.parametrize(
    "record",
    [
        {**INTENT, "time_limit": True},
        {**INTENT, "time_limit": 1.0},
        {**INTENT, "extra": 1},
        {**INTENT, "task_keys": [1]},
        {**INTENT, "task_keys": "k"},
        {**INTENT, "created_at": "1"},
        {**INTENT, "allocation_id": None},
        {name: value for name, value in INTENT.items() if name != "target"},
        {"type": "receipt", "allocation_id": "aaaaaaaaaaaaaaaaaaaaaaaa", "job": None},
        {"type": "receipt", "allocation_id": "aaaaaaaaaaaaaaaaaaaaaaaa", "job": True},
        {"type": "resolved", "allocation_id": "aaaaaaaaaaaaaaaaaaaaaaaa"},
        {"type": "resolved", "allocation_id": "aaaaaaaaaaaaaaaaaaaaaaaa", "job": 1, "extra": 1},
    ],
)
def test_single_allocation_records_are_structured_strictly(record: dict[str, object]) -> None:
    with pytest.raises(TypeError, match="not a valid"):
        codec.decode(json.dumps(record).encode())


def test_single_allocation_records_take_defaults_and_numbers() -> None:
    without_limit = {name: value for name, value in INTENT.items() if name != "time_limit"}
    assert codec.decode(json.dumps(without_limit).encode()) == records.Intent(
        "a" * 24, ("k",), "d", 1.0, "t", 0
    )
    resolved = {"type": "resolved", "allocation_id": "aaaaaaaaaaaaaaaaaaaaaaaa", "job": None}
    assert codec.decode(json.dumps(resolved).encode()) == records.Resolved(
        "aaaaaaaaaaaaaaaaaaaaaaaa", None
    )


def test_a_compaction_unsure_of_its_rename_keeps_the_record_and_stops_the_writer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """After the rename, a failed directory sync leaves unknown which journal a crash would
    show; both hold the record, so it is not reported failed, but nothing more is appended."""
    import errno

    from servatus.errors import Unavailable

    path = tmp_path / "state"
    create_state(path, make_tasks("t", 3), appendable=True)
    monkeypatch.setattr(store, "COMPACT_RECORDS", 0)
    real_sync = store.sync

    def directory_fails(fd: int) -> None:
        if stat.S_ISDIR(os.fstat(fd).st_mode):
            raise OSError(errno.EIO, "Input/output error")
        real_sync(fd)

    with store.writing(path) as writer:
        monkeypatch.setattr(store, "sync", directory_fails)
        writer.add(records.Appended((Task("u", ["/bin/true"]),)))
        monkeypatch.setattr(store, "sync", real_sync)
        with pytest.raises(Unavailable, match="an earlier write failed"):
            writer.add(records.Appended((Task("v", ["/bin/true"]),)))
    assert [task.key for task in Campaign.open(path).tasks] == ["t-0", "t-1", "t-2", "u"]


_ID = "a" * 24


@pytest.mark.parametrize(
    "payload",
    [
        # Values no writer produces, which later commands would act on or fail to format.
        *(
            f'{{"type":"intent","allocation_id":"{_ID}","task_keys":["k"],"plan_digest":"d",'
            f'"created_at":{value},"target":"t","time_limit":60}}'
            for value in ("NaN", "Infinity", "-Infinity", "1e20", "-1")
        ),
        f'{{"type":"intent","allocation_id":"{_ID}","task_keys":["k"],"plan_digest":"d",'
        f'"created_at":1.0,"target":"t","time_limit":-5}}',
        *(f'{{"type":"receipt","allocation_id":"{_ID}","job":{job}}}' for job in (0, -5, 2**32)),
        f'{{"type":"resolved","allocation_id":"{_ID}","job":-1}}',
        *(
            f'{{"type":"receipt","allocation_id":"{bad}","job":7}}'
            for bad in ("a" * 23, "A" * 24, "../../../etc/passwd", "a" * 23 + "\\n", "")
        ),
    ],
)
def test_values_no_writer_makes_are_refused(payload: str) -> None:
    with pytest.raises(TypeError, match="not a valid"):
        codec.decode(payload.encode())


def test_a_snapshot_column_out_of_range_is_corrupt(tmp_path: Path) -> None:
    path = tmp_path / "state"
    create_state(path, make_tasks("t", 1))
    document = json.loads(codec.encode(records.Snapshot(store.read(path))))
    document["state"]["receipts"] = {"allocation_id": [_ID], "job": [-5]}
    with pytest.raises(TypeError, match=r"\$\.state\.receipts"):
        codec.decode(json.dumps(document).encode())


def test_deep_nesting_in_a_record_is_corrupt_in_plain_words(tmp_path: Path) -> None:
    path = tmp_path / "state"
    create_state(path, make_tasks("t", 1))
    nested = b"[" * 100_000 + b"]" * 100_000
    with (path / "journal").open("ab") as handle:
        handle.write(codec.frame(nested))
    with pytest.raises(CorruptState, match=r"record 2 is invalid: nested too deeply$"):
        store.read(path)


def test_records_written_together_compact_the_journal_as_single_ones_do(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A batch's intents go in one write: the journal still compacts once it has grown."""
    monkeypatch.setattr(store, "COMPACT_RECORDS", 4)
    path = tmp_path / "state"
    create_state(path, make_tasks("t", 2), appendable=True)
    with store.writing(path) as writer:
        for i in range(5):
            writer.add_all([records.Appended([Task(f"u-{i}-{j}", ["x"])]) for j in range(3)])
    data = (path / "journal").read_bytes()
    history = [codec.decode(p) for p in codec.scan(data, "j").payloads]
    assert isinstance(history[0], records.Snapshot)
    assert len(Campaign.open(path).tasks) == 17


def _one_at_a_time(data: bytes) -> records.CampaignState:
    """The fold as it was before runs were read as tables: each record decoded, then applied."""
    into = folding.Fold()
    for index, payload in enumerate(codec.scan(data, "j").payloads):
        try:
            change = codec.decode(payload)
        except (ValueError, TypeError) as exc:
            raise CorruptState(f"j: record {index + 1} is invalid: {input_problem(exc)}") from None
        try:
            into.apply(change)
        except folding.Rejected as exc:
            raise CorruptState(f"j: record {index + 1} does not apply: {exc}") from None
    return into.freeze()


BAD_ID = "c" * 24


@pytest.mark.parametrize(
    "payload",
    [
        json.dumps({**INTENT, "allocation_id": BAD_ID, "time_limit": True}).encode(),
        json.dumps({**INTENT, "allocation_id": BAD_ID, "extra": 1}).encode(),
        b'{"type":"receipt","allocation_id":"%s","job":0}' % BAD_ID.encode(),
        b'{"type":"receipt","allocation_id":"%s","job":5}' % BAD_ID.encode(),  # not intended
        b'{"type":"receipt","allocation_id":"%s","job":5,"type":"resolved"}' % BAD_ID.encode(),
        b'{"type":"receipt","allocation_id":"%s","job":5' % BAD_ID.encode(),
        b'{"type":"receipt","allocation_id":"%s","job":5} ' % BAD_ID.encode(),
        b'{"type":"receipt","allocation_id":"%s","job":5}{}' % BAD_ID.encode(),
        b'{"type":"receipt",' + "\u00e9".encode() + b"\xff}",
    ],
)
def test_a_bad_record_in_a_run_of_single_records_is_named_as_alone(payload: bytes) -> None:
    """Runs of intents or receipts are read as one table (issue #33: status of 1,000
    allocations decoded 900 records one by one); any record of a run that is not valid is
    reported by its own number and words, as when each record was read alone (a receipt that
    says it is a resolution is one, and does not apply)."""
    allocations = [f"{n:024x}" for n in range(1, 6)]
    intents = [records.Intent(i, ("a",), "digest", 2.0, LOCAL, time_limit=60) for i in allocations]
    receipts = [records.Receipt(i, 100 + n) for n, i in enumerate(allocations)]
    first = [*ALL_RECORDS[:2], records.TargetSeen(LOCAL, '{"host":null}'), *intents[:3]]
    rest = [*intents[3:], *receipts[:2]]
    good = journal(*first, *rest, *receipts[2:])
    assert codec.fold_journal(good, "j")[0].freeze() == _one_at_a_time(good)
    for before, after in ((first, [*rest, *receipts[2:]]), ([*first, *rest], receipts[2:])):
        data = journal(*before) + codec.frame(payload) + journal(*after)[len(codec.MAGIC) :]
        with pytest.raises(CorruptState) as caught:
            codec.fold_journal(data, "j")
        with pytest.raises(CorruptState) as alone:
            _one_at_a_time(data)
        assert str(caught.value) == str(alone.value)
        assert f"record {len(before) + 1} " in str(caught.value)


def test_a_record_that_does_not_apply_is_named_before_a_bad_one_after_it_in_its_run() -> None:
    """Each record of a run that is not one table is decoded, then applied, in turn: a second
    intent for one allocation (record 5) is named, not the bad intent behind it (record 6)."""
    intent = records.Intent("a" * 24, ("a",), "digest", 2.0, LOCAL, time_limit=60)
    bad = {**INTENT, "allocation_id": "b" * 24, "target": LOCAL, "time_limit": True}
    data = journal(*ALL_RECORDS[:2], records.TargetSeen(LOCAL, '{"host":null}'), intent, intent)
    data += codec.frame(json.dumps(bad, separators=(",", ":")).encode())  # as encode() writes
    with pytest.raises(CorruptState) as caught:
        codec.fold_journal(data, "j")
    with pytest.raises(CorruptState) as alone:
        _one_at_a_time(data)
    assert str(caught.value) == str(alone.value)
    assert "record 5 does not apply" in str(caught.value)


@pytest.mark.parametrize("created_at", [10**400, -(10**400)])
def test_a_time_too_large_for_a_float_is_a_bad_record_not_a_crash(created_at: int) -> None:
    """A checksum that holds over ``created_at: 10**400`` (math.isfinite raises for it) is one
    bad record, in a run and alone."""
    good = records.Intent("a" * 24, ("a",), "digest", 2.0, LOCAL, time_limit=60)
    huge = json.dumps({**INTENT, "allocation_id": "b" * 24, "target": LOCAL,
                       "created_at": created_at}).encode()  # fmt: skip
    head = journal(*ALL_RECORDS[:2], records.TargetSeen(LOCAL, '{"host":null}'))
    for data in (
        head + codec.frame(huge),
        head + journal(good)[len(codec.MAGIC) :] + codec.frame(huge),
    ):
        with pytest.raises(CorruptState, match=r"is invalid: .*created_at"):
            codec.fold_journal(data, "j")
    with pytest.raises(TypeError, match="finite number"):
        strict.finite_float(10**400, float)
    assert not strict.finite(10**400) and strict.finite(10**300) and not strict.finite(math.inf)
