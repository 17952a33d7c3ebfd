"""The lean read path: Tasks stored as columns and built on use, one check per record for NUL
and surrogates, and a snapshot's intents, receipts and resolutions stored as columns, all as
strict as before."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from store_helpers import make_tasks

from servatus.campaign import Campaign, create_state
from servatus.errors import CorruptState
from servatus.ids import target_key
from servatus.journal import codec, folding, records, store
from servatus.tasks import Roster, Task

LOCAL = target_key('{"host":null}')


def columns(*tasks: dict[str, Any]) -> dict[str, list[Any]]:
    """Task documents as a record's Task columns, a missing field as its empty value."""
    empty = {"stdin": "", "env": {}}
    return {
        name: [task.get(name, empty.get(name)) for task in tasks] for name in records.TASK_COLUMNS
    }


def created(*tasks: dict[str, Any]) -> bytes:
    record = {"type": "created", "campaign_id": "c", "created_at": 1, "sealed": True}
    return json.dumps({**record, "tasks": columns(*tasks)}, ensure_ascii=False).encode()


def journal(*payloads: bytes) -> bytes:
    return codec.MAGIC + b"".join(codec.frame(payload) for payload in payloads)


def test_stored_tasks_are_built_when_used_and_equal_the_originals(tmp_path: Path) -> None:
    tasks = [
        Task("a", ["/bin/x", "é"], stdin=b"\0\xff", env={"A": "1"}),
        Task("b", ["/bin/y"]),
    ]
    create_state(tmp_path / "s", tasks)
    roster = Campaign.open(tmp_path / "s").tasks
    assert isinstance(roster, Roster) and roster.keys == ("a", "b")
    assert all(type(item) is tuple for item in roster.stored())  # nothing built by reading
    assert "b" in roster.by_key() and "c" not in roster.by_key() and 7 not in roster.by_key()
    assert all(type(item) is tuple for item in roster.stored())  # nor by asking for a key
    assert roster.args("b") == ("/bin/y",)
    assert type(list(roster.stored())[1]) is tuple  # args read off the stored row
    assert roster.get("a") == tasks[0] and roster[1] == tasks[1] and roster[-1] == tasks[1]
    assert roster == tuple(tasks) and list(roster) == tasks and roster[0:1] == (tasks[0],)
    extra = Task("c", ["/bin/z"])
    assert roster + [extra] == (*tasks, extra)  # noqa: RUF005 - the operator under test
    assert roster.get("c") is None
    with pytest.raises(KeyError):
        roster.args("c")
    with pytest.raises(IndexError):
        roster[2]


@pytest.mark.parametrize(
    "document",
    [
        {"key": "a", "args": ["/bin/x", 3]},
        {"key": "a", "args": []},
        {"key": "a", "args": "/bin/x"},
        {"key": "a", "args": ["/bin/x"], "env": {"SERVATUS_X": "1"}},
        {"key": "a", "args": ["/bin/x"], "env": {"A-B": "1"}},
        {"key": "a", "args": ["/bin/x"], "env": {"A": 1}},
        {"key": "a", "args": ["/bin/x"], "env": ["A"]},
        {"key": "a", "args": ["/bin/x"], "stdin": "not base64!"},
        {"key": "a", "args": ["/bin/x"], "stdin": "YQ==YQ=="},
        {"key": "a", "args": ["/bin/x"], "stdin": 7},
    ],
)
def test_every_field_of_a_stored_task_is_checked_when_read(document: dict[str, Any]) -> None:
    """Validated on every read (the spec's guarantee), though no Task is built by reading."""
    good = {"key": "b", "args": ["/bin/y"], "stdin": "YQ==", "env": {"A": "1"}}
    with pytest.raises(CorruptState, match="invalid"):
        codec.fold_journal(journal(created(good, document)), "j")
    state = codec.fold_journal(journal(created(good)), "j")[0].freeze()
    assert state.tasks[0] == Task("b", ["/bin/y"], stdin=b"a", env={"A": "1"})


def test_building_a_bad_document_is_corrupt() -> None:
    roster = Roster(("a",), [("a", ["/bin/x", 3], "", {})], records.build_task)
    with pytest.raises(CorruptState, match="stored Task is invalid"):
        roster[0]


ONE = {"key": ["a"], "args": [["/bin/x"]], "stdin": [""], "env": [{}]}


@pytest.mark.parametrize(
    "tasks",
    [
        {**ONE, "key": ["../a"]},
        {**ONE, "key": [7]},
        {**ONE, "key": [None]},
        {**ONE, "key": ["a\nb"]},  # two valid keys once the column is joined by newlines
        {**ONE, "extra": [1]},
        {name: column for name, column in ONE.items() if name != "env"},
        {**ONE, "env": []},
        {**ONE, "key": "a"},
        [{"key": "a", "args": ["/bin/x", "\U0001f600"]}],  # the objects of version 3
    ],
)
@pytest.mark.parametrize("escape", [False, True], ids=["stored", "built"])
def test_stored_keys_and_columns_are_checked_when_read(tasks: Any, escape: bool) -> None:
    """Exactly the four columns, of one length, each Task's key valid, whether the Tasks stay
    stored rows or are built at once (a record with an escape that could spell a NUL or a lone
    surrogate: here a valid surrogate pair)."""
    if type(tasks) is dict and len(tasks.get("args", ())) == 1:
        tasks = {**tasks, "args": [["/bin/x", "\U0001f600"]]}
    record = {"type": "created", "campaign_id": "c", "created_at": 1, "sealed": True}
    payload = json.dumps({**record, "tasks": tasks}, ensure_ascii=escape).encode()
    assert (b"\\ud83d\\ude00" in payload) is escape
    with pytest.raises(CorruptState, match="invalid"):
        codec.fold_journal(journal(payload), "j")
    good = {**ONE, "args": [["/bin/x", "\U0001f600"]]}
    payload = json.dumps({**record, "tasks": good}, ensure_ascii=escape).encode()
    assert codec.fold_journal(journal(payload), "j")[0].freeze().tasks[0].args == (
        "/bin/x",
        "\U0001f600",
    )


@pytest.mark.parametrize(
    "payload",
    [
        created({"key": "a", "args": ["/bin/x", "a\u0000b"]}),  # escaped NUL
        created({"key": "a", "args": ["/bin/x"], "env": {"A": "\u0000"}}),
        created({"key": "a", "args": ["/bin/x"]}).replace(b'"/bin/x"', b'"\\ud800"'),
        created({"key": "a", "args": ["/bin/x"]}).replace(b'"/bin/x"', b'"\\uDBFF"'),
        created({"key": "a", "args": ["/bin/x"]}).replace(b"/bin/x", b"/bin/\xed\xa0\x80"),
    ],
    ids=["nul-arg", "nul-env", "surrogate", "surrogate-upper", "encoded-surrogate"],
)
def test_nul_and_lone_surrogates_are_corrupt_at_once(payload: bytes) -> None:
    """The one-pass check sends these records to the full Task check, which refuses them."""
    with pytest.raises(CorruptState, match="invalid"):
        codec.fold_journal(journal(payload), "j")


def test_a_harmless_escape_still_reads() -> None:
    payload = created({"key": "a", "args": ["/bin/x", "tab\there", "\u00e9\u2603"]})
    state = codec.fold_journal(journal(payload), "j")[0].freeze()
    assert state.tasks[0].args == ("/bin/x", "tab\there", "é☃")


def state_document() -> dict[str, Any]:
    state = folding.fold(
        [
            records.Created("c1", 1.5, False, (Task("a", ["x"]), Task("b", ["y"]))),
            records.TargetSeen(LOCAL, '{"host":null}'),
            records.Intent(
                "a1a1a1a1a1a1a1a1a1a1a1a1", ("a", "b"), "digest", 2.0, LOCAL, time_limit=60
            ),
            records.Receipt("a1a1a1a1a1a1a1a1a1a1a1a1", 41234),
            records.Intent("a2a2a2a2a2a2a2a2a2a2a2a2", ("a",), "digest", 3.0, LOCAL),
            records.Resolved("a2a2a2a2a2a2a2a2a2a2a2a2", None),
        ]
    )
    document: dict[str, Any] = json.loads(codec.encode(records.Snapshot(state)))
    return document


def test_a_snapshot_stores_columns() -> None:
    document = state_document()
    assert document["state"]["intents"] == {
        "allocation_id": ["a1a1a1a1a1a1a1a1a1a1a1a1", "a2a2a2a2a2a2a2a2a2a2a2a2"],
        "task_keys": [["a", "b"], ["a"]],
        "plan_digest": ["digest", "digest"],
        "created_at": [2.0, 3.0],
        "target": [LOCAL, LOCAL],
        "time_limit": [60, 0],
    }
    assert document["state"]["receipts"] == {
        "allocation_id": ["a1a1a1a1a1a1a1a1a1a1a1a1"],
        "job": [41234],
    }
    assert document["state"]["resolutions"] == {
        "allocation_id": ["a2a2a2a2a2a2a2a2a2a2a2a2"],
        "job": [None],
    }
    state = codec.decode(json.dumps(document).encode())
    assert isinstance(state, records.Snapshot)
    assert state.state.intents[0] == records.Intent(
        "a1a1a1a1a1a1a1a1a1a1a1a1", ("a", "b"), "digest", 2.0, LOCAL, 60
    )


@pytest.mark.parametrize(
    ("column", "change"),
    [
        ("intents", lambda c: c.pop("plan_digest")),  # only a column with a default may be absent
        ("intents", lambda c: c.update(extra=[1, 2])),
        ("intents", lambda c: c["allocation_id"].pop()),
        ("intents", lambda c: c.update(task_keys=[["a", 1], ["a"]])),
        ("intents", lambda c: c.update(task_keys=["ab", ["a"]])),
        ("intents", lambda c: c.update(created_at=[True, 3.0])),
        ("intents", lambda c: c.update(time_limit=[60, 1.5])),
        ("intents", lambda c: c.update(target="not a list")),
        ("receipts", lambda c: c.update(job=["41234"])),
        ("receipts", lambda c: c.update(job=[None])),
        ("resolutions", lambda c: c.update(job=[False])),
        ("resolutions", lambda c: c.update(allocation_id=[7])),
    ],
)
def test_snapshot_columns_are_structured_strictly(column: str, change: Any) -> None:
    document = state_document()
    change(document["state"][column])
    with pytest.raises(TypeError):
        codec.decode(json.dumps(document).encode())


def test_a_column_with_a_default_may_be_absent() -> None:
    document = state_document()
    document["state"]["intents"].pop("time_limit")  # as written before the field existed
    state = codec.decode(json.dumps(document).encode())
    assert isinstance(state, records.Snapshot)
    assert state.state.intents[0].time_limit == 0


def test_an_empty_roster_is_four_empty_columns() -> None:
    payload = codec.encode(records.Created("c", 1.0, False, ()))
    assert json.loads(payload)["tasks"] == {"key": [], "args": [], "stdin": [], "env": []}
    assert codec.decode(payload) == records.Created("c", 1.0, False, ())


def test_compaction_writes_stored_tasks_back_unbuilt(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    create_state(tmp_path / "s", make_tasks("t", 50))
    built = []
    original = records.build_task
    monkeypatch.setattr(records, "build_task", lambda doc: built.append(doc) or original(doc))
    with store.writing(tmp_path / "s") as writer:
        writer.compact()
    assert built == []
    assert list(Campaign.open(tmp_path / "s").tasks) == make_tasks("t", 50)
